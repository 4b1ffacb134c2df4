"""The cross-episode batcher: requests of the live episodes go to the policy as one batch; a batch does not wait
long for a slow episode; a policy error reaches every episode of its batch."""

from __future__ import annotations

import asyncio

import pytest

from services.browser_pool.batcher import Batcher
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, TaskConfig

TASK = TaskConfig(task_id=1, sites=["shopping"], intent="find it", start_url="http://shop.test/")


def request(name: str) -> PolicyRequest:
    return PolicyRequest(task=TASK, intent=name, observation=Observation(html="<p></p>", url="http://shop.test/"))


class Echo:
    """Answers each request with its intent; records the batches."""

    def __init__(self, drop: int = 0) -> None:
        self.batches: list[list[str]] = []
        self.drop = drop

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        self.batches.append([r.intent for r in requests])
        return [PolicyResponse(response=r.intent) for r in requests][self.drop:]


async def test_the_live_episodes_go_as_one_batch() -> None:
    policy = Echo()
    batcher = Batcher(policy, wait_s=10.0)
    for _ in range(3):
        batcher.join()
    answers = await asyncio.gather(*(batcher.act(request(n)) for n in "abc"))
    assert [a.response for a in answers] == ["a", "b", "c"] and policy.batches == [["a", "b", "c"]]
    batcher.leave()  # one episode ended: the other two need not wait for it
    answers = await asyncio.wait_for(asyncio.gather(batcher.act(request("d")), batcher.act(request("e"))), 1.0)
    assert [a.response for a in answers] == ["d", "e"] and policy.batches[-1] == ["d", "e"]


async def test_a_batch_waits_at_most_wait_s_for_a_slow_episode() -> None:
    policy = Echo()
    batcher = Batcher(policy, wait_s=0.01)
    batcher.join()
    batcher.join()  # this one never asks
    answer = await asyncio.wait_for(batcher.act(request("a")), 5.0)
    assert answer.response == "a" and policy.batches == [["a"]]


async def test_a_policy_error_reaches_every_episode_of_the_batch() -> None:
    batcher = Batcher(Echo(drop=1), wait_s=10.0)
    batcher.join()
    batcher.join()
    results = await asyncio.gather(batcher.act(request("a")), batcher.act(request("b")), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "1 responses for 2 requests" in str(r) for r in results)


@pytest.mark.parametrize("wait_s", [0.0, 0.01])
async def test_one_episode_alone_is_not_held(wait_s: float) -> None:
    batcher = Batcher(Echo(), wait_s=wait_s)
    batcher.join()
    assert (await asyncio.wait_for(batcher.act(request("a")), 1.0)).response == "a"
