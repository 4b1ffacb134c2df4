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


def test_a_folder_copy_killed_midway_leaves_no_partial_folder_and_a_partial_one_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from webrl.demo import is_whole_model
    from webrl.store.checkpoints import publish_folder
    from webrl.whole_files import copy_folder_whole

    def write(folder: Path) -> None:
        (folder / "adapter_config.json").write_text("{}")
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 4096)
        (folder / "tokenizer.json").write_text("{}")

    source = publish_folder(write, tmp_path / "shipped", role="actor", version="sft").path
    target = tmp_path / "store" / "models" / "actor"
    copied: list[str] = []

    def killed(src: str, dst: str) -> None:  # the kill lands after the second file
        if len(copied) == 2:
            raise KeyboardInterrupt
        copied.append(src)
        shutil.copy2(src, dst)

    real = shutil.copytree
    monkeypatch.setattr(shutil, "copytree", lambda s, d: real(s, d, copy_function=killed))
    with pytest.raises(KeyboardInterrupt):
        copy_folder_whole(Path(source), target)
    assert not target.exists()  # the next run does not find half an actor and trust it
    monkeypatch.setattr(shutil, "copytree", real)

    # a partial copy an older, non-atomic copy left: not whole, so it is replaced
    target.mkdir(parents=True)
    (target / "adapter_config.json").write_text("{}")
    assert not is_whole_model(target)
    assert copy_folder_whole(Path(source), target) == target and is_whole_model(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["actor"]  # no staging folder left beside it
