"""Sub-commands of the ``webrl`` CLI, one module per area, each exposing ``register(app)``."""


def quiet_model_loading() -> None:
    """Turn off transformers' per-load "Loading weights" bars: a command's own rich progress bars are live while
    it loads checkpoints, and the extra bars would print between them."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
