"""What kind of model folder a path is, without importing torch or transformers: the CLI checks its options with these,
and the services check the model folders a request names (:mod:`webrl.serving.paths`)."""

from __future__ import annotations

from pathlib import Path

#: peft's file in an adapter folder.
PEFT_CONFIG_FILE = "adapter_config.json"


def is_adapter(path: str | Path) -> bool:
    """A LoRA adapter folder (``webrl.models.adapters``): peft's config, the weights of the adapter only."""
    return (Path(path) / PEFT_CONFIG_FILE).is_file()


def is_model_folder(path: str | Path) -> bool:
    """A full Hugging Face model folder or an adapter folder (what every ``--actor``/``--orm`` option takes)."""
    return (Path(path) / "config.json").is_file() or is_adapter(path)


def model_config_file(path: str | Path) -> Path:
    """The file that changes when a model folder is rewritten: its config.json, or an adapter's config."""
    folder = Path(path)
    return folder / (PEFT_CONFIG_FILE if is_adapter(folder) else "config.json")


def written_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """What changes when the model folder ``path`` is written again: the folder's inode and its
    :func:`model_config_file`'s inode and nanosecond mtime. A republish renames a new folder into place, so the
    inodes change even where the files were copied with their times kept. What a cache of loaded models keys on;
    None when ``path`` holds no such file or is no usable path."""
    try:
        folder = Path(path).expanduser()
        config = model_config_file(folder).stat()
        return folder.stat().st_ino, config.st_ino, config.st_mtime_ns
    except (OSError, RuntimeError, ValueError):  # absent, unreadable, "~unknown-user", a NUL byte
        return None
