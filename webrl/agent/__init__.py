"""An agent acting in a web environment, split as BrowserGym splits it.

- :mod:`webrl.agent.policy`: what picks actions (:class:`Policy`: a batch of requests -> one response each).
- :mod:`webrl.agent.environment`: what the actions act on (:class:`Environment`: reset, step, evaluate,
  close), a browser episode in the browser pool or, over HTTP, in the actor's agent runs.
- :mod:`webrl.agent.episode_loop`: the episode loop, written once (:func:`run_episode`: reset, then decide -> step
  until a stop condition, evaluate, close).
"""
