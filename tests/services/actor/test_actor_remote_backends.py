"""The openai and tgi backends against the actor's own OpenAI- and TGI-compatible routes, served by uvicorn:
each must return exactly what the local backend generates (greedy), token ids and log-probs included."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends import make_backend
from webrl.models.backends.local import LocalBackend
from webrl.models.backends.openai_compat import OpenAIBackend
from webrl.models.backends.tgi import TGIBackend

PROMPTS = ["<|begin_of_text|>Show me the products", '<|begin_of_text|><a id="3"> Electronics </a> do(']


@pytest.fixture
def served(actor_model_dir: Path, settings: Settings, serve):
    backend = LocalBackend.from_path(actor_model_dir, settings)
    expected = backend.generate_batch(PROMPTS, 10, 0.0)
    return serve(create_actor_app(settings, engine=ActorEngine(settings, backend, backend.tokenizer))), expected


def test_openai_backend_reads_ids_and_logprobs(served, settings: Settings) -> None:
    server, expected = served
    backend = make_backend(settings, kind="openai", model="actor-v1", endpoint=server.url)
    assert isinstance(backend, OpenAIBackend)
    got = backend.generate(PROMPTS, 10, 0.0)
    backend.close()
    for g, e in zip(got, expected, strict=True):
        assert g.token_ids == e.token_ids and g.text == e.text and g.finish_reason == e.finish_reason
        assert g.logprobs == pytest.approx(e.logprobs, abs=1e-5)


def test_tgi_backend_reads_ids_and_logprobs(served, settings: Settings) -> None:
    server, expected = served
    backend = make_backend(settings, kind="tgi", endpoint=server.url)
    assert isinstance(backend, TGIBackend)
    got = backend.generate(PROMPTS, 10, 0.0)
    backend.close()
    for g, e in zip(got, expected, strict=True):
        assert g.token_ids == e.token_ids and g.text == e.text
        assert g.logprobs == pytest.approx(e.logprobs, abs=1e-5)
