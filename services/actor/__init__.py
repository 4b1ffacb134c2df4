"""The actor service: policy inference (``/v1/act``), agent runs, log-probs, OpenAI/TGI-compatible routes."""
