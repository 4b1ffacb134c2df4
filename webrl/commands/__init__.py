"""Sub-commands of the ``webrl`` CLI, one module per area, each exposing ``register(app)``."""

from __future__ import annotations

import os
from pathlib import Path

from webrl.config import Settings

#: The built-in suite's task splits (``webrl.sandbox.tasks.suite.build_suite``).
SPLITS = ("train", "test")


def check_split(split: str) -> str:
    """A ``--split`` option's callback: one of :data:`SPLITS`, else a usage error naming the option."""
    import typer

    if split not in SPLITS:
        raise typer.BadParameter(f"split must be one of {list(SPLITS)}, got {split!r}", param_hint="--split")
    return split


def check_above_zero(value: float | None, option: str) -> float | None:
    """Raise :class:`typer.BadParameter` naming ``option`` when a given rate or budget is not above 0 (typer's
    ``min`` includes its bound): the job it goes into refuses it, after the work before the job."""
    import typer

    if value is not None and value <= 0:
        raise typer.BadParameter(f"must be above 0, got {value:g}", param_hint=option)
    return value


def check_model_folder(folder: Path, option: str) -> Path:
    """Raise :class:`typer.BadParameter` naming ``option`` unless ``folder`` holds a model (``config.json``) or an
    adapter (``adapter_config.json``) whose JSON files are JSON (:func:`check_model_files`): a mistyped path or a
    broken file is refused before anything loads or is hashed."""
    import typer

    from webrl.model_folders import is_model_folder

    if not is_model_folder(folder):
        raise typer.BadParameter(f"no model at {folder} (neither config.json nor adapter_config.json)",
                                 param_hint=option)
    return check_model_files(folder, option)


def check_model_files(folder: Path, option: str) -> Path:
    """Raise :class:`typer.BadParameter` naming ``option`` and the file when a JSON file of the model folder
    ``folder`` is not JSON: the folder's content sha256 (its identity in evaluations and runs) reads every one, and
    would fail after the work had started."""
    import typer

    from webrl.store.checkpoints import malformed_json_file

    if problem := malformed_json_file(folder):
        raise typer.BadParameter(f"{folder} is no readable model: {problem}", param_hint=option)
    return folder


def check_output_file(path: Path | None, option: str) -> Path | None:
    """Raise :class:`typer.BadParameter` naming ``option`` when a file to be written is an existing folder or cannot be
    written there (:func:`unwritable_place`), before the work whose result it holds."""
    import typer

    if path is not None and path.is_dir():
        raise typer.BadParameter(f"{path} is a folder; name a file", param_hint=option)
    if path is not None and (problem := unwritable_place(path)):
        raise typer.BadParameter(problem, param_hint=option)
    return path


def check_output_folder(path: Path | None, option: str) -> Path | None:
    """Raise :class:`typer.BadParameter` naming ``option`` when a folder to be written is an existing file or cannot be
    written there (:func:`unwritable_place`), before the work whose results it holds."""
    import typer

    if path is not None and path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{path} is a file; name a folder", param_hint=option)
    if path is not None and (problem := unwritable_place(path)):
        raise typer.BadParameter(problem, param_hint=option)
    return path


def unwritable_place(path: Path) -> str | None:
    """Why nothing can be written at ``path`` (its folders created as needed), or None: a folder on the way is a
    file, or the nearest one that exists (``path`` itself when it exists) may not be written by this user."""
    for place in (path, *path.parents):
        if not place.exists():
            continue
        if place != path and not place.is_dir():
            return f"{place} is a file, so {path} cannot be written"
        if not os.access(place, os.W_OK):
            return f"{place} is not writable by this user"
        return None
    return None


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
