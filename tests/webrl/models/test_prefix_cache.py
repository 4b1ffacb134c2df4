"""The shared-prefix cache of the local backend: decoding the suffixes on top of the cached prefix gives the tokens
and log-probs of decoding the whole prompts, with the prompts prefilled one by one or together; sampling stays
seeded; prompts that share nothing, or an empty prompt, still decode."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from webrl.config import Settings
from webrl.models.backends import Generation
from webrl.models.backends.kv_cache import common_prefix_length
from webrl.models.backends.local import LocalBackend
from webrl.models.loading import load_causal_lm

# A "system turn" every prompt starts with, then suffixes of different lengths (words of the tiny corpus)
SHARED = ('<|begin_of_text|><|start_header_id|>system<|end_header_id|>\nShow me the products in the Electronics '
          'category <a id="3"> Electronics </a> <a id="4"> Books </a> <button id="17"> Add to Cart </button>\n')
SUFFIXES = [
    "Show me",
    'do(action="Click", element="3") <a id="4"> Books </a> <button id="17"> Add to Cart </button> Books',
    '<a id="3"> Electronics </a>',
    "Electronics Electronics Books category products the in",
]
PROMPTS = [SHARED + s for s in SUFFIXES]
MIN_PREFIX = 8  # the tiny tokenizer's shared turn is ~40 tokens; any length >= 1 would work
SHARPEN = 30.0  # q and k weights x this: attention scores x 900, far from uniform


@pytest.fixture(scope="module")
def model(tiny_dir: Path) -> Iterator[tuple]:
    """(model, tokenizer) with one intra-op thread (OpenMP stalls on the shared CPU), restored after.

    Queries and keys are scaled up: at its random initialisation attention is nearly uniform, and a wrong position
    or a misplaced key would change no log-prob by 1e-4.
    """
    threads = torch.get_num_threads()
    model, tokenizer = load_causal_lm(tiny_dir, Settings(home=tiny_dir.parent / "home", models={"torch_threads": 1}))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(SHARPEN)
            layer.self_attn.k_proj.weight.mul_(SHARPEN)
    yield model, tokenizer
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def off(model: tuple) -> Iterator[LocalBackend]:
    """The reference: no prefix cache, every prompt in one padded forward pass."""
    backend = LocalBackend(*model, prefix_cache=False, row_prefill=False)
    yield backend
    backend.close()


@pytest.fixture(scope="module", params=[True, False], ids=["row-prefill", "batch-prefill"])
def on(model: tuple, request: pytest.FixtureRequest) -> Iterator[LocalBackend]:
    """The prefix cache on, the prompts prefilled one by one (the CPU default) or in one forward pass."""
    backend = LocalBackend(*model, prefix_cache=True, min_prefix_tokens=MIN_PREFIX, row_prefill=request.param)
    yield backend
    backend.close()


def assert_same(got: list[Generation], expected: list[Generation]) -> None:
    for a, b in zip(got, expected, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def shared_tokens(backend: LocalBackend, prompts: list[str]) -> int:
    return common_prefix_length([backend.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts])


def test_common_prefix_length() -> None:
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[1, 2, 3], [5]]) == 0
    assert common_prefix_length([[7, 8]]) == 2


def test_greedy_with_the_prefix_cache_equals_whole_prompts(on: LocalBackend, off: LocalBackend) -> None:
    expected = off.generate_batch(PROMPTS, 12, 0.0)
    assert_same([off.generate_batch([p], 12, 0.0)[0] for p in PROMPTS], expected)  # the batch-free reference
    assert_same(on.generate_batch(PROMPTS, 12, 0.0), expected)
    length = shared_tokens(on, PROMPTS)
    assert length >= MIN_PREFIX and any(len(k) == length for k in on._prefixes)  # the prefix path was taken
    hits = on.prefix_hits
    assert_same(on.generate_batch(PROMPTS[::-1], 12, 0.0), expected[::-1])  # now from the stored prefix
    assert on.prefix_hits == hits + 1


def test_a_longer_shared_prefix_extends_a_stored_one(on: LocalBackend, off: LocalBackend) -> None:
    on.generate_batch(PROMPTS[:2], 4, 0.0)  # stores the shared turn
    longer = [SHARED + SUFFIXES[1] + s for s in (" category", " Books", ' <a id="3"> Electronics </a>')]
    on._last_row = []  # share only with each other, not with the previous batch
    assert_same(on.generate_batch(longer, 10, 0.0), off.generate_batch(longer, 10, 0.0))
    assert any(len(k) == shared_tokens(on, longer) for k in on._prefixes)
    assert len(on._prefixes) <= on.prefix_cache_size


def test_sampling_is_seeded_with_the_prefix_cache(on: LocalBackend, off: LocalBackend) -> None:
    a = on.generate_batch(PROMPTS, 8, 1.0, seed=11)
    b = on.generate_batch(PROMPTS, 8, 1.0, seed=11)
    c = on.generate_batch(PROMPTS, 8, 1.0, seed=12)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert [g.token_ids for g in a] == [g.token_ids for g in off.generate_batch(PROMPTS, 8, 1.0, seed=11)]


def test_prompts_sharing_nothing_still_decode(on: LocalBackend, off: LocalBackend) -> None:
    apart = ["Show me the products", '<a id="3"> Electronics </a>', 'do(action="Click", element="17")']
    assert shared_tokens(on, apart) == 0
    stored = dict(on._prefixes)
    assert_same(on.generate_batch(apart, 10, 0.0), off.generate_batch(apart, 10, 0.0))
    assert on._prefixes.keys() == stored.keys()  # nothing to store


def test_an_empty_prompt_decodes_beside_others(on: LocalBackend, off: LocalBackend) -> None:
    batch = ["", PROMPTS[1]]
    assert_same(on.generate_batch(batch, 6, 0.0), off.generate_batch(batch, 6, 0.0))


def test_queued_requests_share_the_prefix(on: LocalBackend, off: LocalBackend) -> None:
    expected = [off.generate_batch([p], 8, 0.0)[0] for p in PROMPTS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda p: on.generate([p], 8, 0.0)[0], PROMPTS * 2))
    assert_same(got, expected * 2)


def test_an_agents_next_step_starts_from_its_last_prompt(on: LocalBackend, off: LocalBackend) -> None:
    """Each of two episodes' next prompt shares a long run with its own last prompt (not a prefix of it: the last
    page is elided) and only the system turn with the other episode's: it is prefilled from its own run."""
    steps = [[SHARED + intent + " Round 0\n" + page for intent, page in
              (("Show me the Electronics", SUFFIXES[1]), ("Books category products", SUFFIXES[2]))]]
    steps.append([SHARED + intent + ' Round 0\n** elided ** do(action="Click", element="3") Round 1\n' + page
                  for intent, page in (("Show me the Electronics", SUFFIXES[3]), ("Books category products", "Books"))])
    on._last_row = []
    assert_same(on.generate_batch(steps[0], 8, 0.0), off.generate_batch(steps[0], 8, 0.0))
    reused = on.reused_tokens
    got = on.generate_batch(steps[1], 8, 0.0)
    if on.row_prefill:
        own = sum(shared_tokens(on, [first, then]) for first, then in zip(steps[0], steps[1], strict=True))
        assert on.reused_tokens - reused == own > 2 * shared_tokens(on, steps[1])
    else:  # one padded forward pass: the batch's shared prefix only
        assert on.reused_tokens - reused == 2 * shared_tokens(on, steps[1])
    assert_same(got, off.generate_batch(steps[1], 8, 0.0))


def test_the_kept_prompts_are_bounded(model: tuple, off: LocalBackend) -> None:
    backend = LocalBackend(*model, prefix_cache=True, min_prefix_tokens=MIN_PREFIX, row_prefill=True,
                           kept_prompts=2)
    try:
        assert_same(backend.generate_batch(PROMPTS, 6, 0.0), off.generate_batch(PROMPTS, 6, 0.0))
        assert len(backend._kept) == 2  # the last two rows
        assert backend.prompt_tokens == sum(len(backend.tokenizer(p, add_special_tokens=False)["input_ids"])
                                            for p in PROMPTS)
    finally:
        backend.close()
    none = LocalBackend(*model, prefix_cache=True, min_prefix_tokens=MIN_PREFIX, row_prefill=True, kept_prompts=0)
    try:
        none.generate_batch(PROMPTS, 6, 0.0)
        assert not none._kept and none.reused_tokens == len(PROMPTS) * shared_tokens(none, PROMPTS)
    finally:
        none.close()


def test_loaded_backends_are_the_shared_ones(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.models import model_policies

    monkeypatch.setattr(model_policies, "_SHARED", OrderedDict())  # other tests' backends stay as they are
    settings = Settings(home=tmp_path / "home", models={"torch_threads": 1}, actor={"kept_prompts": 3})
    backend = model_policies.acquire_backend(tiny_dir, settings)
    try:
        with model_policies.leased_backend(tiny_dir, settings) as again:
            assert again is backend
        assert model_policies.loaded_backends() == [backend]
        assert backend.kept_prompts == 3  # the setting reaches the backend
    finally:
        backend.close()
