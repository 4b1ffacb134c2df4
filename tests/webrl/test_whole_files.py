from pathlib import Path

import pytest

from webrl.whole_files import write_bytes_whole, write_text_whole, written_whole


def test_a_file_appears_whole_and_nothing_else_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "folder" / "step-000.webp"
    assert write_bytes_whole(path, b"RIFF....WEBP") == path
    assert path.read_bytes() == b"RIFF....WEBP"
    write_text_whole(path, "replaced")
    assert path.read_text() == "replaced"
    assert sorted(p.name for p in path.parent.iterdir()) == ["step-000.webp"]


def test_a_write_that_fails_keeps_what_the_file_held_and_leaves_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("stored before")
    with pytest.raises(RuntimeError), written_whole(path) as partial:
        partial.write_text("half of it")
        assert partial.parent == path.parent and partial != path
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "stored before"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_failed_first_write_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    with pytest.raises(OSError), written_whole(path) as partial:
        partial.write_bytes(b"x")
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []
