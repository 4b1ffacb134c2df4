"""The local backend: a transformers model in this process, with dynamic batching.

Concurrent callers :meth:`LocalBackend.submit` prompts; one worker thread takes whatever is queued (waiting up
to ``batch_wait_s`` for company, at most ``max_batch``) and decodes it as one left-padded batch with a KV
cache. Greedy results do not depend on the batch: padding is masked and positions start at 0 for every row.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.config import Settings
from webrl.models.backends import Generation
from webrl.models.loading import checkpoint_version, eos_token_ids, load_causal_lm

log = logging.getLogger(__name__)

_STOP = object()  # sentinel that ends the worker thread


MIN_SAMPLING_TEMPERATURE = 1e-4  # below this logits / T overflows to inf: decode greedily instead

@dataclass
class _Request:
    prompt: str
    max_new_tokens: int
    temperature: float
    seed: int | None
    future: Future = field(default_factory=Future)

    @property
    def key(self) -> tuple[int, float, int | None]:
        return (self.max_new_tokens, self.temperature, self.seed)


class LocalBackend:
    """A local causal LM behind a batching queue."""

    name = "local"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, version: str = "",
                 path: str = "", max_batch: int = 16, batch_wait_s: float = 0.005) -> None:
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
        self._closed = False
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="local-backend", daemon=True)
        self._worker.start()

    @classmethod
    def from_path(cls, path: str | Path, settings: Settings, *, version: str | None = None) -> LocalBackend:
        model, tokenizer = load_causal_lm(path, settings)
        return cls(model, tokenizer, version=version or checkpoint_version(path), path=str(path),
                   max_batch=settings.actor_max_batch, batch_wait_s=settings.actor_batch_wait_ms / 1000)

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
            for (max_new, temperature, seed), requests in groups.items():
                self._run(requests, max_new, temperature, seed)

    def _run(self, requests: list[_Request], max_new_tokens: int, temperature: float, seed: int | None) -> None:
        live = [r for r in requests if r.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            results = self.generate_batch([r.prompt for r in live], max_new_tokens, temperature, seed=seed)
        except Exception as exc:  # a failed batch fails its callers, never the worker
            log.exception("batch of %d failed", len(live))
            for r in live:
                r.future.set_exception(exc)
            return
        for r, result in zip(live, results, strict=True):
            r.future.set_result(result)

    # Decoding
    def _encode(self, prompts: list[str], max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        keep = max(1, self.max_positions - max_new_tokens)  # prompt tokens that fit with the generation
        rows = [self.tokenizer(p, add_special_tokens=False)["input_ids"][-keep:] for p in prompts]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, T) left-padded
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                input_ids[i, width - len(row):] = torch.tensor(row)
                attention_mask[i, width - len(row):] = 1
        device = self.model.device
        return input_ids.to(device), attention_mask.to(device)

    @torch.no_grad()
    def generate_batch(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                       seed: int | None = None) -> list[Generation]:
        """Decode ``prompts`` as one batch, right now (no queue). Greedy when ``temperature`` is (nearly) 0."""
        self.batches_run += 1
        input_ids, attention_mask = self._encode(prompts, max_new_tokens)
        generator = torch.Generator(device=input_ids.device).manual_seed(seed) if seed is not None else None
        eos = torch.tensor(self.eos_ids, device=input_ids.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T): each row counts from 0
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :].float()  # (B, V)
        next_position = position_ids[:, -1:] + 1  # (B, 1)
        done = torch.zeros(len(prompts), dtype=torch.bool, device=input_ids.device)
        tokens: list[torch.Tensor] = []
        logps: list[torch.Tensor] = []
        for _ in range(max_new_tokens):
            logp = torch.log_softmax(logits, dim=-1)  # (B, V) the model's distribution, temperature 1
            if temperature >= MIN_SAMPLING_TEMPERATURE:
                probs = torch.softmax(logits / temperature, dim=-1)
                chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
            else:
                chosen = logp.argmax(dim=-1)  # (B,)
            chosen = torch.where(done, torch.full_like(chosen, self.pad_id), chosen)
            tokens.append(chosen)
            logps.append(logp.gather(1, chosen[:, None]).squeeze(1))
            tokens_done = done.clone()
            done = done | torch.isin(chosen, eos)
            if bool(done.all()):
                break
            attention_mask = torch.cat([attention_mask, (~tokens_done).long()[:, None]], dim=1)
            out = self.model(input_ids=chosen[:, None], attention_mask=attention_mask, position_ids=next_position,
                             past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :].float()
            next_position = next_position + 1
        return self._results(tokens, logps)

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
