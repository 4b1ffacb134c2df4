"""The browser pool: Chromium episodes for web agents (reset, observe, act, evaluate) and rollouts.

Modules, top-down: ``observe`` (+ ``observe.js``, ``inflight.js``), ``act``, ``safety``, ``pool``, ``episode``
(``run_episode``, ``run_batch``), ``rollout``, ``sessions``; then ``app`` (REST) and ``worker`` (Celery).
"""
