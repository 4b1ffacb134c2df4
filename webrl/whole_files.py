"""Files that appear whole or not at all: each is written under a temporary name beside its place and renamed into
it (``os.replace`` is atomic on one filesystem), so a crash or a kill mid-write never leaves a reader half a file, and
a row committed after the rename never points at a partial one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for the caller to write; on success rename it to ``path``, on an
    exception remove it (``path`` keeps what it held). The parent folder is created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_bytes_whole(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole (see :func:`written_whole`); returns ``path``."""
    with written_whole(path) as partial:
        partial.write_bytes(data)
    return path


def write_text_whole(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole (see :func:`written_whole`); returns ``path``."""
    with written_whole(path) as partial:
        partial.write_text(text)
    return path


def copy_folder_whole(source: Path, target: Path) -> Path:
    """Copy the folder ``source`` to ``target`` whole: into a hidden sibling first, then renamed into place, so a kill
    mid-copy leaves no partial ``target`` for a later run to trust. A ``target`` already there is replaced (a partial
    copy an older, non-atomic copy left, say); a kill between its removal and the rename leaves no ``target``, and
    the next call copies again. Returns ``target``."""
    staging = target.with_name(f".{target.name}.copying")
    shutil.rmtree(staging, ignore_errors=True)  # a killed copy's
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return target
