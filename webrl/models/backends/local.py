"""The local backend: a transformers model in this process, with dynamic batching.

Concurrent callers :meth:`LocalBackend.submit` prompts; one worker thread takes whatever is queued (waiting up
to ``batch_wait_s`` for company, at most ``max_batch``) and decodes it as one left-padded batch with a KV
cache. Greedy results do not depend on the batch: padding is masked and positions start at 0 for every row.

Every actor prompt of a model starts with the same system turn. The tokens a batch shares (with each other and
with the previous batch) are computed once at batch 1 and kept (a few prefixes, least recently used dropped);
a batch then computes only its suffixes, with positions that continue from the prefix, so the results are those
of decoding the whole prompts. The model's weights must not change under a backend (a new checkpoint is a new
backend).

On CPU each prompt is prefilled on its own (unpadded, see :meth:`LocalBackend._prefill_rows`) and the rows'
caches are put side by side, left-padded; elsewhere one padded forward pass prefills them all, laid out
``[shared prefix | left padding | suffix]``. Prefilled on its own, a prompt also starts from the longest run of
leading tokens it shares with a recent prompt (the last ``kept_prompts`` are kept whole): an agent's next step
repeats its system turn, intent and earlier rounds, so only the new page is computed (vLLM's automatic prefix
caching, per row). Either way the batch's keys and values live in a buffer sized for
the prompts and the generation (:class:`BufferLayer`), so a decode step appends without copying the cache.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import Cache

from webrl.config import Settings
from webrl.models.backends.base import Generation
from webrl.models.backends.kv_cache import BufferLayer, common_prefix_length, plain_cache_layers, shared_length
from webrl.models.loading import checkpoint_version, eos_token_ids, load_causal_lm

log = logging.getLogger(__name__)

_STOP = object()  # sentinel that ends the worker thread


MIN_SAMPLING_TEMPERATURE = 1e-4  # below this logits / T overflows to inf: decode greedily instead
MIN_PREFIX_TOKENS = 32  # a shorter shared prefix is recomputed per row: its own forward pass would not pay off
PREFIX_CACHE_SIZE = 4  # prefixes kept: the system turn and a few longer ones (SmolLM2: ~46 KB per token)


@dataclass
class _Request:
    prompt: str
    max_new_tokens: int
    temperature: float
    seed: int | None
    future: Future = field(default_factory=Future)

    @property
    def key(self) -> tuple[int, float]:
        """Requests decoded in one batch share these; each keeps its own seed."""
        return (self.max_new_tokens, self.temperature)


class LocalBackend:
    """A local causal LM behind a batching queue."""

    name = "local"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, version: str = "",
                 path: str = "", max_batch: int = 16, batch_wait_s: float = 0.005, prefix_cache: bool = True,
                 min_prefix_tokens: int = MIN_PREFIX_TOKENS, prefix_cache_size: int = PREFIX_CACHE_SIZE,
                 row_prefill: bool | None = None, kept_prompts: int | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.version = version
        self.path = path
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.batches_run = 0
        self._buffer_layers = plain_cache_layers(model)  # 0: the model's own cache, no prefix reuse
        self.prefix_cache = prefix_cache and self._buffer_layers > 0  # reuse the shared prefix (module docstring)
        # prompts one by one, decoding batched: the default on CPU (see _prefill_rows), never on an accelerator
        self.row_prefill = model.device.type == "cpu" if row_prefill is None else row_prefill
        self.min_prefix_tokens = min_prefix_tokens
        self.prefix_cache_size = prefix_cache_size
        self.prefix_hits = 0  # batches whose prefix was already cached
        self._prefixes: OrderedDict[tuple[int, ...], Cache] = OrderedDict()  # token ids -> batch-1 cache
        # whole prompts prefilled on their own, most recent last: a later prompt reuses the run it shares with one
        # (module docstring); two per batch slot by default (SmolLM2 in fp32: ~46 MB a 1,000-token prompt)
        self.kept_prompts = 2 * max_batch if kept_prompts is None else kept_prompts
        self._kept: OrderedDict[tuple[int, ...], tuple[torch.Tensor, Cache]] = OrderedDict()  # ids -> (ids, cache)
        self.prompt_tokens = 0  # prompt tokens of every decoded row
        self.reused_tokens = 0  # of them, read from a cached prefix instead of computed
        self._prefix_lock = threading.Lock()
        self._last_row: list[int] = []  # the previous batch's last prompt: what the next one may share
        forward_args = inspect.signature(model.forward).parameters
        self._last_logits_only = "logits_to_keep" in forward_args
        # transformers 5.24 renamed the cache argument and output ``past_key_values`` -> ``cache`` (the old name
        # warns, and goes in 5.40); earlier 5.x releases know only the old one
        self._cache_name = "cache" if "cache" in forward_args else "past_key_values"
        self._closed = False
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="local-backend", daemon=True)
        self._worker.start()

    @classmethod
    def from_path(cls, path: str | Path, settings: Settings, *, version: str | None = None) -> LocalBackend:
        model, tokenizer = load_causal_lm(path, settings)
        return cls(model, tokenizer, version=version or checkpoint_version(path), path=str(path),
                   max_batch=settings.actor.max_batch, batch_wait_s=settings.actor.batch_wait_ms / 1000,
                   kept_prompts=settings.actor.kept_prompts)

    # The interface
    def submit(self, prompt: str, max_new_tokens: int, temperature: float, seed: int | None = None
               ) -> Future[Generation]:
        """Queue one prompt; the future resolves when its batch is decoded."""
        if self._closed:
            raise RuntimeError(f"backend {self.version} is closed")
        request = _Request(prompt, max_new_tokens, temperature, seed)
        self._queue.put(request)
        return request.future

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                 seed: int | None = None) -> list[Generation]:
        futures = [self.submit(p, max_new_tokens, temperature, seed) for p in prompts]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Finish the queued requests, then stop the worker. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._worker.join(timeout=30)
        with self._prefix_lock:  # the cached prefixes and prompts are of no use to anyone now
            self._prefixes.clear()
            self._kept.clear()

    # The worker
    def _collect(self, first: _Request) -> tuple[list[_Request], bool]:
        batch, stop = [first], False
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.append(item)
        return batch, stop

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is _STOP:
                break
            batch, stop = self._collect(first)
            groups: dict[tuple, list[_Request]] = {}
            for request in batch:  # one decode per sampling setting
                groups.setdefault(request.key, []).append(request)
            for (max_new, temperature), requests in groups.items():
                self._run(requests, max_new, temperature)

    def _run(self, requests: list[_Request], max_new_tokens: int, temperature: float) -> None:
        live = [r for r in requests if r.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            results = self.generate_batch([r.prompt for r in live], max_new_tokens, temperature,
                                          seeds=[r.seed for r in live])
        except Exception as exc:  # a failed batch fails its callers, never the worker
            log.exception("batch of %d failed", len(live))
            for r in live:
                r.future.set_exception(exc)
            return
        for r, result in zip(live, results, strict=True):
            r.future.set_result(result)

    # Decoding
    def _tokenize(self, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
        keep = max(1, self.max_positions - max_new_tokens)  # prompt tokens that fit with the generation
        return [self.tokenizer(p, add_special_tokens=False)["input_ids"][-keep:] for p in prompts]

    def _inputs(self, rows: list[list[int]], prefix_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The suffixes after ``prefix_len`` shared tokens, left-padded; the mask also covers the prefix."""
        suffixes = [row[prefix_len:] for row in rows]
        width = max(len(r) for r in suffixes)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, S) left-padded
        suffix_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, S)
        for i, row in enumerate(suffixes):
            if row:
                input_ids[i, width - len(row):] = torch.tensor(row)
                suffix_mask[i, width - len(row):] = 1
        position_ids = prefix_len + (suffix_mask.cumsum(-1) - 1).clamp(min=0)  # (B, S): continue from the prefix
        attention_mask = torch.cat([torch.ones((len(rows), prefix_len), dtype=torch.long), suffix_mask], dim=1)
        device = self.model.device
        return input_ids.to(device), attention_mask.to(device), position_ids.to(device)  # mask: (B, P + S)

    def _new_cache(self, batch: int, capacity: int, prefix: Cache | None = None, length: int | None = None
                   ) -> Cache | None:
        """An empty cache of ``capacity`` positions per row (None: the model's own), holding ``prefix`` if given (its
        first ``length`` positions, or all)."""
        if not self._buffer_layers:
            return None
        return Cache(layers=[BufferLayer(batch, capacity, prefix.layers[i] if prefix is not None else None, length)
                             for i in range(self._buffer_layers)])

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
                 past: Cache | None) -> tuple[Cache, torch.Tensor]:
        """One forward pass; returns the grown cache and the last position's logits ``(B, V)`` in fp32."""
        extra = {"logits_to_keep": 1} if self._last_logits_only else {}  # skip the LM head on every other position
        extra[self._cache_name] = past
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=True, **extra)
        return getattr(out, self._cache_name), out.logits[:, -1, :].float()

    @torch.no_grad()
    def generate_batch(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                       seed: int | None = None, seeds: Sequence[int | None] | None = None) -> list[Generation]:
        """Decode ``prompts`` as one batch, right now (no queue). Greedy when ``temperature`` is (nearly) 0. A sampled
        row with a seed (``seeds``, one per prompt, or ``seed`` for every row) draws its tokens from a generator of
        its own, so its text depends on its prompt and seed only, not on the rows beside it (given batch-invariant
        logits: fp32); rows without one draw from torch's global generator."""
        self.batches_run += 1
        rows = self._tokenize(prompts, max_new_tokens)
        prefix_len, prefix_past = self._prefix(rows)
        prefill = self._prefill_rows if self.row_prefill and self._buffer_layers and all(rows) else self._prefill
        past, logits, attention_mask, next_position = prefill(rows, prefix_len, prefix_past, max_new_tokens)
        row_seeds = list(seeds) if seeds is not None else [seed] * len(prompts)
        if len(row_seeds) != len(prompts):
            raise ValueError(f"{len(row_seeds)} seeds for {len(prompts)} prompts")
        return self._decode(past, logits, attention_mask, next_position, max_new_tokens, temperature, row_seeds)

    def _prefill(self, rows: list[list[int]], prefix_len: int, prefix_past: Cache | None, max_new_tokens: int
                 ) -> tuple[Cache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """All rows in one forward pass: ``(cache, last logits (B, V), attention mask (B, P + S), next positions
        (B, 1))``."""
        input_ids, attention_mask, position_ids = self._inputs(rows, prefix_len)
        self.prompt_tokens += sum(map(len, rows))
        self.reused_tokens += prefix_len * len(rows)
        past = self._new_cache(len(rows), attention_mask.shape[1] + max_new_tokens, prefix_past)
        past, logits = self._forward(input_ids, attention_mask, position_ids, past)
        return past, logits, attention_mask, position_ids[:, -1:] + 1

    def _prefill_rows(self, rows: list[list[int]], prefix_len: int, prefix_past: Cache | None, max_new_tokens: int
                      ) -> tuple[Cache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One forward pass per row, then the rows' caches right-aligned in one batch cache (``[left padding |
        prompt]``), as :meth:`_prefill` returns it. Unpadded, attention runs the causal kernel, which skips the
        masked half: on CPU, where batching a ~1,000-token prefill gains nothing, ~15% of a SmolLM2 prefill."""
        device = self.model.device
        width = max(len(r) for r in rows)
        past = self._new_cache(len(rows), width + max_new_tokens)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)  # (B, T)
        logits = []
        for i, row in enumerate(rows):
            tokens = torch.tensor(row)  # (T_i,)
            start, base = self._row_start(tokens, prefix_len, prefix_past)
            ids = torch.tensor([row[start:]], device=device)  # (1, S_i)
            positions = torch.arange(start, len(row), device=device)[None]  # (1, S_i)
            one, row_logits = self._forward(ids, None, positions, self._new_cache(1, len(row), base, start))
            self._remember_row(tokens, one)
            self.prompt_tokens += len(row)
            self.reused_tokens += start
            for layer, row_layer in zip(past.layers, one.layers, strict=True):
                layer.place(i, row_layer.keys, row_layer.values, width)
            attention_mask[i, width - len(row):] = 1
            logits.append(row_logits)
        next_position = torch.tensor([[len(r)] for r in rows], device=device)  # (B, 1)
        return past, torch.cat(logits), attention_mask, next_position

    def _decode(self, past: Cache, logits: torch.Tensor, attention_mask: torch.Tensor, next_position: torch.Tensor,
                max_new_tokens: int, temperature: float, seeds: list[int | None]) -> list[Generation]:
        """Pick a token per row, feed it back, until every row ended its turn or ``max_new_tokens``."""
        device = logits.device
        generators = [torch.Generator(device=device).manual_seed(s) if s is not None else None for s in seeds]
        eos = torch.tensor(self.eos_ids, device=device)
        done = torch.zeros(logits.shape[0], dtype=torch.bool, device=device)  # (B,)
        tokens: list[torch.Tensor] = []
        logps: list[torch.Tensor] = []
        for _ in range(max_new_tokens):
            logp = torch.log_softmax(logits, dim=-1)  # (B, V) the model's distribution, temperature 1
            if temperature >= MIN_SAMPLING_TEMPERATURE:
                probs = torch.softmax(logits / temperature, dim=-1)  # (B, V)
                chosen = self._sample(probs, generators)  # (B,)
            else:
                chosen = logp.argmax(dim=-1)  # (B,)
            chosen = torch.where(done, torch.full_like(chosen, self.pad_id), chosen)
            tokens.append(chosen)
            logps.append(logp.gather(1, chosen[:, None]).squeeze(1))
            tokens_done = done.clone()
            done = done | torch.isin(chosen, eos)
            if bool(done.all()):
                break
            attention_mask = torch.cat([attention_mask, (~tokens_done).long()[:, None]], dim=1)  # (B, P + S + t)
            past, logits = self._forward(chosen[:, None], attention_mask, next_position, past)
            next_position = next_position + 1  # (B, 1)
        return self._results(tokens, logps)

    @staticmethod
    def _sample(probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
        """One token per row of ``probs`` ``(B, V)``: each seeded row from its own generator, the rest together from
        the global one."""
        if not any(g is not None for g in generators):
            return torch.multinomial(probs, 1).squeeze(1)  # (B,)
        shared = torch.multinomial(probs, 1).squeeze(1) if None in generators else None  # (B,)
        return torch.stack([torch.multinomial(probs[i], 1, generator=g).squeeze(0) if g is not None else shared[i]
                            for i, g in enumerate(generators)])  # (B,)

    # The shared-prefix cache
    def _prefix(self, rows: list[list[int]]) -> tuple[int, Cache | None]:
        """The tokens every row shares with each other and with the previous batch's last row, and their
        batch-1 cache; ``(0, None)`` when that prefix is short (or the cache is off)."""
        others = [self._last_row] if self._last_row else []
        self._last_row = rows[-1]
        if not (self.prefix_cache and self._buffer_layers):
            return 0, None
        length = min(common_prefix_length(rows + others), min(len(r) for r in rows) - 1)  # >= 1 token left per row
        if length < self.min_prefix_tokens:
            return 0, None
        return length, self._prefix_past(tuple(rows[0][:length]))

    def _prefix_past(self, key: tuple[int, ...]) -> Cache:
        """The batch-1 cache of ``key``: stored, or computed on top of the longest stored prefix of it."""
        with self._prefix_lock:
            if key in self._prefixes:
                self._prefixes.move_to_end(key)
                self.prefix_hits += 1
                return self._prefixes[key]
            base = max((k for k in self._prefixes if len(k) < len(key) and key[:len(k)] == k), key=len, default=())
            if base:
                self._prefixes.move_to_end(base)
            start = len(base)
            device = self.model.device
            ids = torch.tensor([key[start:]], device=device)  # (1, P - start)
            positions = torch.arange(start, len(key), device=device)[None]  # (1, P - start)
            past = self._new_cache(1, len(key), self._prefixes[base] if base else None)
            past, _ = self._forward(ids, None, positions, past)
            self._prefixes[key] = past
            while len(self._prefixes) > self.prefix_cache_size:
                self._prefixes.popitem(last=False)
            return past

    # Whole prompts kept for the next ones (the module docstring)
    def _row_start(self, row: torch.Tensor, prefix_len: int, prefix_past: Cache | None) -> tuple[int, Cache | None]:
        """Where the prompt ``row`` ``(T,)`` is prefilled from and the cache holding the tokens before: the longest run
        it shares with a kept prompt when that beats the batch's shared prefix (at least ``min_prefix_tokens``, one
        token left to compute), else the shared prefix."""
        if not (self.prefix_cache and self.kept_prompts):
            return prefix_len, prefix_past
        with self._prefix_lock:
            best, cache, kept = 0, None, None
            for key, (kept_ids, kept_cache) in self._kept.items():
                length = min(shared_length(row, kept_ids), row.shape[0] - 1)
                if length > best:
                    best, cache, kept = length, kept_cache, key
            if kept is None or best <= prefix_len or best < self.min_prefix_tokens:
                return prefix_len, prefix_past
            self._kept.move_to_end(kept)
            return best, cache

    def _remember_row(self, row: torch.Tensor, cache: Cache) -> None:
        """Keep the prompt ``row`` ``(T,)`` and its whole batch-1 cache for later prompts; the least recently used
        beyond the size go."""
        if not (self.prefix_cache and self.kept_prompts):
            return
        key = tuple(row.tolist())
        with self._prefix_lock:
            self._kept[key] = (row, cache)
            self._kept.move_to_end(key)
            while len(self._kept) > self.kept_prompts:
                self._kept.popitem(last=False)

    def _results(self, tokens: list[torch.Tensor], logps: list[torch.Tensor]) -> list[Generation]:
        ids = torch.stack(tokens, dim=1).tolist()  # (B, N)
        lps = torch.stack(logps, dim=1).tolist()
        results = []
        eos = set(self.eos_ids)
        for row_ids, row_lps in zip(ids, lps, strict=True):
            n = next((i + 1 for i, t in enumerate(row_ids) if t in eos), None)
            finish = "stop" if n is not None else "length"
            n = n if n is not None else len(row_ids)
            kept = row_ids[:n]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            results.append(Generation(text=text, token_ids=kept, logprobs=row_lps[:n], finish_reason=finish))
        return results
