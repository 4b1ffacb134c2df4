"""A probe file (``webrl.models.probe``) is written whole, and a cut or corrupt one is a ValueError naming it, which
``webrl train --probe`` and ``webrl probe anchors --exclude`` turn into a usage error naming their option."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from webrl.models.probe import ProbeStep, load_probe, save_probe

STEPS = [ProbeStep(task_key=f"train/{i}", site="shopping", index=0, prompt="p" * 500, completion=f"click [{i}]")
         for i in range(20)]


def test_a_cut_gzip_stream_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    """What a killed copy leaves: EOFError inside gzip, once an escaping traceback."""
    data = save_probe(STEPS, tmp_path / "probe.jsonl.gz").read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.jsonl\.gz: a cut or corrupt gzip stream"):
        load_probe(cut)


def test_a_corrupt_deflate_stream_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    """Damaged compressed data past a valid header: zlib.error inside gzip, once an escaping traceback."""
    path = save_probe(STEPS, tmp_path / "probe.jsonl.gz")
    data = bytearray(path.read_bytes())
    header = 10 + len(b"probe.jsonl\0")  # gzip's fixed header and the file name it records
    data[header] = 0xFF  # a final block of the reserved type 3
    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"corrupt\.jsonl\.gz: a cut or corrupt gzip stream"):
        load_probe(corrupt)


def test_save_probe_replaces_the_file_whole_and_keeps_it_on_a_failure(tmp_path: Path) -> None:
    path = save_probe(STEPS, tmp_path / "probe.jsonl.gz")
    before = path.read_bytes()
    unwritable = ProbeStep(task_key="x", site="s", index=0, prompt=object(), completion="")  # type: ignore[arg-type]
    broken = [*STEPS, unwritable]  # not JSON: the write fails halfway through the file
    with pytest.raises(TypeError):
        save_probe(broken, path)
    assert path.read_bytes() == before and load_probe(path) == STEPS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.jsonl.gz"]  # no partial file left beside it


def test_the_same_steps_give_the_same_bytes_wherever_they_are_written_from(tmp_path: Path) -> None:
    """The temporary name beside the file never reaches the gzip header: the header names the file itself."""
    first = save_probe(STEPS, tmp_path / "a" / "probe.jsonl.gz").read_bytes()
    second = save_probe(STEPS, tmp_path / "b" / "probe.jsonl.gz").read_bytes()
    assert first == second and b"partial" not in first
    with gzip.open(tmp_path / "a" / "probe.jsonl.gz", "rb") as stream:
        assert stream.read().count(b"\n") == len(STEPS)
