"""Step screenshots: a rollout that asks for them gets one downscaled WebP/JPEG per step (the page that step saw),
stored beside the trajectory in the artifacts and recorded on the step; one that does not ask takes none."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from services.browser_pool.runs import run_batch
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.config import Settings
from webrl.db import repository
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.store import screenshots

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

CLICK_THEN_EXIT = ['do(action="Click", element="0")', 'do(action="Click", element="0")', 'exit(message="2")']


class Script:
    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        return [PolicyResponse(response=CLICK_THEN_EXIT[min(len(r.history), 2)]) for r in requests]


def _image(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def test_each_step_carries_the_page_it_saw_downscaled(pool, pool_settings, fixture_url, make_task):
    task = make_task(f"{fixture_url}/actions.html")
    (with_shots,) = await run_batch([task], Script(), pool, pool_settings, concurrency=1, screenshots=True)
    (without,) = await run_batch([task], Script(), pool, pool_settings, concurrency=1)
    assert [s.screenshot for s in without.steps] == [None, None, None]
    shots = [s.screenshot for s in with_shots.steps]
    assert len(shots) == 3 and all(shots)
    images = [_image(shot) for shot in shots]
    assert {image.format for image in images} <= {"WEBP", "JPEG"}
    assert all(image.width == screenshots.MAX_WIDTH for image in images)  # 1280 px viewport, halved
    assert shots[0] != shots[1]  # "Count: 0" then "Count: 1": each step's own page
    assert "screenshot" not in with_shots.steps[0].model_dump()  # never serialised with the trajectory


async def test_recorded_beside_the_trajectory_and_served_only_from_there(pool, pool_settings, fixture_url,
                                                                         make_task, tmp_path: Path):
    (traj,) = await run_batch([make_task(f"{fixture_url}/actions.html")], Script(), pool, pool_settings,
                              concurrency=1, screenshots=True)
    settings = Settings(home=tmp_path, database={"url": f"sqlite:///{tmp_path / 'webrl.db'}"}, _env_file=None)
    upgrade(settings)
    with session_scope(settings) as s:
        task = repository.upsert_task(s, "fixture/1", make_task(f"{fixture_url}/actions.html"), origin="test",
                                      split="test")
        row = repository.save_trajectory(s, task.id, 0, 0, traj, purpose="eval")
        assert screenshots.record(settings, row, traj.steps) == 3
        assert screenshots.record(settings, row, traj.steps) == 0  # recorded once
        paths = [step.screenshot for step in row.steps]
        trajectory_id = row.id
    assert paths == [screenshots.relative_path(trajectory_id, i, screenshots.suffix_of(traj.steps[i].screenshot))
                     for i in range(3)]
    for path, step in zip(paths, traj.steps, strict=True):
        assert screenshots.resolve(settings, path).read_bytes() == step.screenshot
    assert screenshots.resolve(settings, "trajectories/../webrl.db") is None
    assert screenshots.resolve(settings, "../webrl.db") is None
    assert screenshots.resolve(settings, f"trajectories/{trajectory_id}/step-999.webp") is None
