"""The endpoint policy (``{"kind": "endpoint"}``): a rollout's steps go to a real uvicorn actor service, one
``POST /v1/act`` per batch of episodes, and get what the same checkpoint answers in-process."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from services.actor.app import create_actor_app
from webrl.agent.policy import PolicyRequest
from webrl.agent.schemas import Observation, TaskConfig
from webrl.config import Settings
from webrl.policies.specs import policy_from_spec
from webrl.wire.contracts import CheckpointSpec, EndpointSpec

PAGE = '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> <button id="17"> Add to Cart </button> </html>'


def _acts_served(url: str) -> int:
    """``POST /v1/act`` requests the service has answered (its Prometheus counter)."""
    text = httpx.get(f"{url}/metrics").text
    found = re.search(r'webrl_http_requests_total\{[^}]*route="/v1/act"[^}]*status="200"[^}]*\} (\S+)', text)
    return int(float(found.group(1))) if found else 0


def test_episodes_of_a_batch_share_one_act_request_and_match_the_local_checkpoint(actor_model_dir: Path,
                                                                                  settings: Settings, serve) -> None:
    live = settings.replace(actor={"model": str(actor_model_dir), "max_new_tokens": 8})
    intents = ["Show me the products in the Electronics category", "Show me the Books", "Add it to the cart"]
    requests = [PolicyRequest(task=TaskConfig(task_id=i, sites=["shopping"], intent=intent, start_url="u"),
                              intent=intent, observation=Observation(html=PAGE, url="http://s/"))
                for i, intent in enumerate(intents)]
    local = asyncio.run(policy_from_spec(CheckpointSpec(path=str(actor_model_dir)), live).act(requests))
    served = serve(create_actor_app(live))  # a real uvicorn server on a free port
    before = _acts_served(served.url)
    configured = live.replace(actor={"url": served.url})  # only a configured endpoint may be named
    remote = asyncio.run(policy_from_spec(EndpointSpec(url=served.url), configured).act(requests))
    assert _acts_served(served.url) == before + 1  # three episodes' steps, one request
    assert [r.token_ids for r in remote] == [r.token_ids for r in local]  # greedy: the same tokens
    assert [r.response for r in remote] == [r.response for r in local]
    assert {r.version for r in remote} == {local[0].version} == {"actor-v1"}


def test_a_rollout_pinned_to_a_version_refuses_steps_another_checkpoint_answered(actor_model_dir: Path,
                                                                                  settings: Settings, serve) -> None:
    import pytest

    from webrl.models.model_policies import ActorChanged

    live = settings.replace(actor={"model": str(actor_model_dir), "max_new_tokens": 4})
    served = serve(create_actor_app(live))
    configured = live.replace(actor={"url": served.url})
    request = [PolicyRequest(task=TaskConfig(task_id=1, sites=["shopping"], intent="Show me the Books",
                                             start_url="u"),
                             intent="Show me the Books", observation=Observation(html=PAGE, url="http://s/"))]
    pinned = policy_from_spec(EndpointSpec(url=served.url, version="actor-v1"), configured)
    assert [r.version for r in asyncio.run(pinned.act(request))] == ["actor-v1"]  # the rollout's actor: taken
    other = policy_from_spec(EndpointSpec(url=served.url, version="actor-v2"), configured)
    with pytest.raises(ActorChanged, match="'actor-v1', not the rollout's 'actor-v2'"):
        asyncio.run(other.act(request))  # the service serves another actor now: never stored as this one's
