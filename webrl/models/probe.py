"""The flips probe: a fixed set of steps the SFT actor gets right, and how many of them an actor still gets right.

A probe step is an actor prompt and the action the sandbox oracle took there, kept only when the SFT actor,
teacher-forced on that action, picks every one of its tokens greedily (argmax at each action position). After an
update, a step *flips* when the actor's greedy choice differs at any of those positions: its greedy action changed.
The share of flips per site says what an update cost on tasks it never trained on, without running a browser.

The file is JSON lines, gzip-compressed (``*.jsonl.gz``), one :class:`ProbeStep` a line; prompts are text rendered
with the actor's chat template, so a probe belongs to the tokenizer it was built with (``webrl probe build``).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from webrl.models.examples import EncodedExample, collate, encode_example, pad_id_of
from webrl.models.logprobs import target_logits
from webrl.whole_files import written_whole


@dataclass(frozen=True)
class ProbeStep:
    """One probe step: where it comes from, the actor prompt s_t and the oracle's response there."""

    task_key: str
    site: str
    index: int
    prompt: str
    completion: str


def save_probe(steps: Sequence[ProbeStep], path: str | Path) -> Path:
    """Write ``steps`` as gzip JSON lines (sorted keys and a fixed mtime: the same steps give the same bytes), whole
    (:func:`webrl.whole_files.written_whole`): a crash mid-write leaves what ``path`` held, never half a probe."""
    path = Path(path)
    with written_whole(path) as partial, partial.open("wb") as raw, \
            gzip.GzipFile(filename=str(path), fileobj=raw, mode="wb", mtime=0) as out:  # the header names path
        for step in steps:
            out.write((json.dumps(asdict(step), sort_keys=True, ensure_ascii=False) + "\n").encode())
    return path


def load_probe(path: str | Path) -> list[ProbeStep]:
    """The probe steps of ``path``; ValueError naming the line when one is not a probe step, or naming the file when
    it is a cut or corrupt gzip stream (``gzip.BadGzipFile``, an ``OSError``, when it is no gzip at all)."""
    steps = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        try:
            for number, line in enumerate(lines, 1):
                try:
                    steps.append(ProbeStep(**json.loads(line)))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{path}: line {number} is not a probe step ({exc})") from exc
        except (EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: a cut or corrupt gzip stream ({exc or type(exc).__name__})") from exc
    return steps


def encode_probe(tokenizer: Any, steps: Sequence[ProbeStep], max_length: int | None = None) -> list[EncodedExample]:
    """Each step as prompt + oracle response (+ end-of-turn), the response's tokens the targets."""
    return [encode_example(tokenizer, s.prompt, s.completion, max_length=max_length) for s in steps]


@torch.no_grad()
def greedy_matches(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B,) bool: the model's argmax equals the target token at every target position (teacher-forced greedy)."""
    logits, ids, mask = target_logits(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
    if logits.shape[1] == 0:
        return torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    wrong = (logits.argmax(-1) != ids) & mask  # (B, T')
    return ~wrong.any(dim=1)


def _batches(encoded: Sequence[EncodedExample], batch_size: int) -> Iterator[list[int]]:
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths pad little
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def probe_matches(model: Any, tokenizer: Any, encoded: Sequence[EncodedExample], *, batch_size: int = 4) -> list[bool]:
    """For each encoded probe step, whether ``model`` still picks the oracle's action greedily, in input order."""
    device = next(getattr(model, "module", model).parameters()).device
    was_training = model.training
    model.eval()
    out = [False] * len(encoded)
    for rows in _batches(encoded, batch_size):
        batch = {k: v.to(device) for k, v in collate([encoded[i] for i in rows], pad_id_of(tokenizer)).items()}
        for i, ok in zip(rows, greedy_matches(model, batch).tolist(), strict=True):
            out[i] = bool(ok)
    model.train(was_training)
    return out


def flips(steps: Sequence[ProbeStep], matches: Sequence[bool]) -> dict[str, float]:
    """``flips``: the share of probe steps whose greedy action changed (no longer matches), and ``flips_<site>``
    per site; ``probe_steps`` counts them."""
    out: dict[str, float] = {"flips": _share_flipped(matches), "probe_steps": float(len(steps))}
    for site in sorted({s.site for s in steps}):
        out[f"flips_{site}"] = _share_flipped([m for s, m in zip(steps, matches, strict=True) if s.site == site])
    return out


def _share_flipped(matches: Sequence[bool]) -> float:
    return sum(not m for m in matches) / len(matches) if matches else 0.0
