"""The oracle solves the reddit and gitlab templates through the real sites in real Chromium, scored by the
real WebArena evaluators; a policy that does nothing scores 0 on the same tasks (the checks can fail)."""

from __future__ import annotations

import random

import pytest

from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import TaskConfig
from webrl.sandbox.oracles import OraclePolicy
from webrl.sandbox.sites.gitlab.templates_tasks import TEMPLATES as GITLAB
from webrl.sandbox.sites.reddit.templates_tasks import TEMPLATES as REDDIT

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

# One template of each kind per site; the dropdown, the modal and pagination are all on these paths.
SAMPLE_IDS = (301, 305, 312, 404, 408, 418)


class ExitAtOnce:
    """A policy that answers nothing and stops on the first step."""

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        return [PolicyResponse(response='exit(message="")') for _ in requests]


def _configs(site_data, ids: tuple[int, ...] | None, per_template: int = 1) -> list[TaskConfig]:
    configs = []
    for template in REDDIT + GITLAB:
        if ids is None or template.id in ids:
            for i, inst in enumerate(template.instantiate(site_data, random.Random(template.id))[:per_template]):
                configs.append(template.config(f"{template.id}-{i}", inst, site_data))
    return configs


async def _scores(configs: list[TaskConfig], policy, pool, settings) -> dict[str, float | None]:
    from services.browser_pool.runs import run_batch

    trajectories = await run_batch(configs, policy, pool, settings, concurrency=2)
    return {str(c.task_id): t.env_score for c, t in zip(configs, trajectories, strict=True)}


async def test_oracle_solves_each_kind_and_doing_nothing_fails(served, pool, site_data) -> None:
    configs = _configs(site_data, SAMPLE_IDS)
    assert len(configs) == len(SAMPLE_IDS)
    assert await _scores(configs, OraclePolicy(), pool, served) == {str(c.task_id): 1.0 for c in configs}
    assert await _scores(configs, ExitAtOnce(), pool, served) == {str(c.task_id): 0.0 for c in configs}


@pytest.mark.slow
async def test_oracle_solves_every_template(served, pool, site_data) -> None:
    configs = _configs(site_data, None)
    scores = await _scores(configs, OraclePolicy(), pool, served)
    failed = {k: v for k, v in scores.items() if v != 1.0}
    assert not failed, f"oracle failed on {failed}"
