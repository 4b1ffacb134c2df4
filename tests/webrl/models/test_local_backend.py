"""The local backend: batched results equal unbatched ones; log-probs are the model's; batching happens."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from webrl.config import Settings
from webrl.models.backends import BackendConfigError, make_backend
from webrl.models.backends.local import LocalBackend
from webrl.models.examples import collate, encode_example_ids, pad_id_of
from webrl.models.logprobs import token_logprobs

PROMPTS = [
    "<|begin_of_text|>Show me",
    '<|begin_of_text|>Show me the products in the <a id="3"> Electronics </a> <a id="4"> Books',
    "<|begin_of_text|>do(action=",
    "<|begin_of_text|><button id=\"17\"> Add to Cart </button> Electronics Electronics",
]


@pytest.fixture(scope="module")
def backend(tiny_dir: Path) -> LocalBackend:
    settings = Settings(home=tiny_dir.parent / "home")
    backend = LocalBackend.from_path(tiny_dir, settings)
    yield backend
    backend.close()


def test_batched_equals_unbatched_under_greedy(backend: LocalBackend) -> None:
    single = [backend.generate_batch([p], 12, 0.0)[0] for p in PROMPTS]
    batched = backend.generate_batch(PROMPTS, 12, 0.0)
    for one, many in zip(single, batched, strict=True):
        assert one.token_ids == many.token_ids and one.text == many.text
        assert one.logprobs == pytest.approx(many.logprobs, abs=1e-4)


def test_logprobs_are_the_models_own(backend: LocalBackend) -> None:
    gen = backend.generate_batch([PROMPTS[1]], 12, 0.0)[0]
    assert len(gen.token_ids) == len(gen.logprobs) > 0
    example = encode_example_ids(backend.tokenizer, PROMPTS[1], gen.token_ids)
    batch = collate([example], pad_id_of(backend.tokenizer))
    with torch.no_grad():
        device = backend.model.device  # the configured device (settings.models.device)
        per_token = token_logprobs(backend.model, *(batch[k].to(device) for k in ("input_ids", "attention_mask",
                                                                                  "target_mask"))).cpu()
    recomputed = per_token[0][batch["target_mask"][0].bool()].tolist()[: len(gen.logprobs)]
    assert gen.logprobs == pytest.approx(recomputed, abs=1e-4)
    assert backend.tokenizer.decode(gen.token_ids, skip_special_tokens=True) == gen.text


def test_sampling_is_seeded(backend: LocalBackend) -> None:
    a = backend.generate_batch(PROMPTS, 8, 1.0, seed=11)
    b = backend.generate_batch(PROMPTS, 8, 1.0, seed=11)
    c = backend.generate_batch(PROMPTS, 8, 1.0, seed=12)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    greedy = backend.generate_batch(PROMPTS, 8, 0.0)
    assert [g.token_ids for g in a] != [g.token_ids for g in greedy]


def test_concurrent_requests_are_batched_and_match(backend: LocalBackend) -> None:
    expected = [backend.generate_batch([p], 8, 0.0)[0].token_ids for p in PROMPTS]
    before = backend.batches_run
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: backend.generate([p], 8, 0.0)[0], PROMPTS * 2))
    assert [r.token_ids for r in results] == expected * 2
    assert backend.batches_run - before < len(PROMPTS) * 2  # some requests shared a forward pass


def test_stops_at_end_of_turn_and_reports_length(backend: LocalBackend) -> None:
    gen = backend.generate_batch([PROMPTS[0]], 3, 0.0)[0]
    assert gen.finish_reason in {"length", "stop"}
    if gen.finish_reason == "length":
        assert len(gen.token_ids) == 3
    else:
        assert gen.token_ids[-1] in backend.eos_ids


def test_make_backend_names_the_missing_setting(settings: Settings) -> None:
    with pytest.raises(BackendConfigError, match="WEBRL_ACTOR__MODEL"):
        make_backend(settings.replace(actor={"model": None}))
    with pytest.raises(BackendConfigError, match="WEBRL_ACTOR__ENDPOINT"):
        make_backend(settings, kind="openai", model="m")


def test_a_seeded_row_samples_the_same_whatever_rows_share_its_batch(backend: LocalBackend) -> None:
    alone = backend.generate_batch([PROMPTS[1]], 8, 1.0, seeds=[5])[0]
    beside = backend.generate_batch(PROMPTS, 8, 1.0, seeds=[7, 5, None, 9])
    assert beside[1].token_ids == alone.token_ids
    assert beside[1].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    other = backend.generate_batch([PROMPTS[1]] * 4, 8, 1.0, seeds=[6, 8, 10, 12])
    assert any(g.token_ids != alone.token_ids for g in other)  # another seed, another sample
    with pytest.raises(ValueError, match="2 seeds for 4 prompts"):
        backend.generate_batch(PROMPTS, 8, 1.0, seeds=[1, 2])
