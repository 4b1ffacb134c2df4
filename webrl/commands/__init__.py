"""Sub-commands of the ``webrl`` CLI, one module per area, each exposing ``register(app)``."""

from __future__ import annotations

from pathlib import Path

from webrl.config import Settings


def quiet_model_loading() -> None:
    """Turn off transformers' per-load "Loading weights" bars: a command's own rich progress bars are live while
    it loads checkpoints, and the extra bars would print between them."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


def check_loadable(settings: Settings, folder: Path, option: str, configured: str | None = None) -> None:
    """Raise :class:`typer.BadParameter` naming ``option`` unless the services may load ``folder``: its jobs reach
    the trainer and the rollout workers as requests, which load only model folders a request may name
    (:func:`webrl.serving.paths.requested_model_folder`), so a folder elsewhere is refused here, in one line with the
    fix, rather than by a job halfway through."""
    import typer

    from webrl.serving.paths import requested_model_folder
    from webrl.wire.contracts import InvalidRequest

    try:
        requested_model_folder(settings, str(folder), option, configured=configured)
    except InvalidRequest as refused:
        raise typer.BadParameter(str(refused).removeprefix(f"{option}: "), param_hint=option) from None
