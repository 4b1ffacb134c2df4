"""The orchestrators: commands that run the services' operations in order, each resumable or idempotent.

- :mod:`~webrl.orchestration.pipeline`: the WebRL phase state machine ``webrl train`` runs (its stored progress in
  :mod:`~webrl.orchestration.pipeline_state`, what its stages measure in :mod:`~webrl.orchestration.pipeline_metrics`);
- :mod:`~webrl.orchestration.bootstrap`: ``webrl bootstrap``, the SFT actor from oracle demonstrations;
- :mod:`~webrl.orchestration.evaluate`: ``webrl eval``, success on a task set;
- :mod:`~webrl.orchestration.train_orm`: ``webrl train-orm``, the ORM trained and measured on labelled rollouts.

They call the services through the typed clients (:mod:`webrl.wire.clients`) only, so each runs embedded or distributed.
"""
