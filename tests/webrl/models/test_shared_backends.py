"""The shared local backends: a backend evicted while a rollout still decodes on it stays open until released."""

from __future__ import annotations

import asyncio
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest

from webrl.agent.policy import PolicyRequest
from webrl.config import Settings
from webrl.models import model_policies
from webrl.models.model_policies import LocalModelPolicy, acquire_backend, loaded_backends, release_backend


@pytest.fixture
def folders(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three checkpoint folders of the tiny model (three keys of the shared registry), the registry empty."""
    monkeypatch.setattr(model_policies, "_SHARED", OrderedDict())  # other tests' backends stay as they are
    monkeypatch.setattr(model_policies, "_LEASES", {})
    copies = []
    for name in ("a", "b", "c"):
        shutil.copytree(tiny_dir, tmp_path / name)
        copies.append(tmp_path / name)
    return copies


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", models={"torch_threads": 1})


def request() -> PolicyRequest:
    from webrl.agent.schemas import Observation, TaskConfig

    task = TaskConfig(task_id=1, sites=["shopping"], intent="Find the cheapest mug", start_url="http://shop/")
    return PolicyRequest(task=task, intent=task.intent, history=[],
                         observation=Observation(url="http://shop/", html="<button id=1>Buy</button>"))


def test_a_leased_backend_evicted_by_a_third_folder_serves_its_policy_until_released(
        folders: list[Path], settings: Settings) -> None:
    first = LocalModelPolicy(folders[0], settings, max_new_tokens=4)
    try:
        for other in folders[1:]:  # the third folder evicts the first from the registry
            release_backend(acquire_backend(other, settings))
        assert first.backend not in loaded_backends()
        replies = asyncio.run(first.act([request()]))  # the rollout's next step: its backend is still open
        assert replies[0].version == first.version
    finally:
        first.close()
    with pytest.raises(RuntimeError, match="closed"):  # the last lease ended: the evicted backend closed
        first.backend.submit("x", 1, 0.0)


def test_an_evicted_backend_nobody_leases_closes_at_once_and_a_kept_one_stays_open(
        folders: list[Path], settings: Settings) -> None:
    idle = acquire_backend(folders[0], settings)
    release_backend(idle)
    kept = acquire_backend(folders[1], settings)
    release_backend(kept)
    third = acquire_backend(folders[2], settings)
    try:
        with pytest.raises(RuntimeError, match="closed"):
            idle.submit("x", 1, 0.0)
        assert kept.generate(["x"], 1, 0.0)  # still shared, still open
        assert loaded_backends() == [kept, third]
    finally:
        release_backend(third)
        for backend in loaded_backends():
            backend.close()


def test_closing_a_policy_twice_ends_one_lease(folders: list[Path], settings: Settings) -> None:
    one = LocalModelPolicy(folders[0], settings)
    two = LocalModelPolicy(folders[0], settings)
    assert one.backend is two.backend
    one.close()
    one.close()
    for other in folders[1:]:
        release_backend(acquire_backend(other, settings))
    assert two.backend.generate(["x"], 1, 0.0)  # two's lease holds it open
    two.close()
    with pytest.raises(RuntimeError, match="closed"):
        two.backend.submit("x", 1, 0.0)
    for backend in loaded_backends():
        backend.close()
