"""The built-in sandbox: small WebArena-style websites that reset per episode in milliseconds, their
task suite (WebArena JSON) and oracle solvers.

- :mod:`webrl.sandbox.store`: per-episode SQLite copies chosen by the ``webrl_episode`` cookie.
- :mod:`webrl.sandbox.site`: :class:`~webrl.sandbox.site.SiteContext`, what each site's ``create_app`` gets.
- :mod:`webrl.sandbox.sites`: the registry of sites (``SITES``).
- :mod:`webrl.sandbox.server`: ``running_sandbox(settings)`` serves every site in background threads.
- :mod:`webrl.sandbox.auth`: default accounts, signed session cookies, ``login_cookies``.
- :mod:`webrl.sandbox.tasks`: task templates and the train/test suite.
- :mod:`webrl.sandbox.oracles`: scripted solvers behind :class:`~webrl.sandbox.oracles.OraclePolicy`.
"""
