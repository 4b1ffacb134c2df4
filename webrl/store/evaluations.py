"""Stored evaluations: an actor's per-task results on test tasks, kept under a content key, so an evaluation whose
inputs have not changed is read back instead of run again (the start actor's, which every run repeats otherwise).

Greedy decoding of the local backend in fp32 gives the same tokens alone and batched with other episodes' prompts
(8 of 8 prompts of ~1,000 tokens, measured 2026-11-29; in bf16 only 6 of 8, so a bf16 evaluation is not stored), so
two evaluations under one key solve the same tasks. The key (:class:`EvaluationKey`) names everything an episode's
outcome depends on: the actor's weights (its folder's content sha256, which for an adapter also names its base), the
tasks' configs, the horizon and early stops, the serving dtype, prompt and completion budgets and temperature (only
a greedy one is stored), the code that renders prompts,
parses actions, observes pages, serves the sandbox sites and scores episodes (:data:`CODE_PATHS`, hashed), the
sandbox's seed and the torch / transformers versions. Any change gives another key, and the evaluation runs afresh.

Where evaluations are kept: ``<artifacts>/evaluations/<digest>.json`` (written by runs), then
:data:`SHIPPED` (``webrl/assets/evaluations``: the shipped SFT actor's, so ``make demo`` does not evaluate it).
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from webrl.config import Settings
from webrl.method.hyperparams import Rollout
from webrl.whole_files import write_text_whole

#: The repository root (``webrl/`` and ``services/`` below it).
ROOT = Path(__file__).resolve().parents[2]
#: Stored evaluations that ship with the package.
SHIPPED = ROOT / "webrl" / "assets" / "evaluations"
#: The code an episode's outcome depends on, relative to :data:`ROOT` (folders: every file below them): the actor's
#: prompt, the action grammar and its parser, the early stops, what the browser observes and how actions act on a
#: page, the sandbox sites and their data, and the evaluators.
CODE_PATHS = (
    "webrl/prompts/actor.py",
    "webrl/agent/actions.py",
    "webrl/agent/observed_page.py",
    "webrl/agent/early_stop.py",
    "webrl/agent/episode_loop.py",
    "services/browser_pool/observe.js",
    "services/browser_pool/observe.py",
    "services/browser_pool/act.py",
    "webrl/sandbox",
    "webrl/evaluation",
)
#: Suffixes of the files under a folder of :data:`CODE_PATHS` that count (no caches, no editor files).
CODE_SUFFIXES = frozenset({".py", ".js", ".html", ".css", ".json", ".txt"})


class EvaluationKey(BaseModel):
    """Everything a greedy evaluation's per-task results depend on; :meth:`digest` names the stored file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actor_sha256: str
    tasks_sha256: str
    n_tasks: int
    max_steps: int
    max_parse_failures: int
    max_repeated_actions: int
    dtype: str
    max_prompt_tokens: int
    code_sha256: str
    sandbox_seed: int
    torch: str
    transformers: str
    # Fields added after evaluations were stored default to what those were made under, and count in the digest only
    # when they differ from it: the keys stored before them keep their digests.
    max_new_tokens: int = 64
    temperature: float = 0.0

    def digest(self) -> str:
        """sha256 of the key's canonical JSON (the later fields left out at their defaults)."""
        fields = self.model_dump(exclude_defaults=True)
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class TaskResult(BaseModel):
    """One task's episode: its site, the evaluator's score and the actions taken."""

    model_config = ConfigDict(extra="forbid")

    site: str
    score: float
    steps: int


class StoredEvaluation(BaseModel):
    """An evaluation under its key: per-task results and the day it was stored."""

    model_config = ConfigDict(extra="forbid")

    key: EvaluationKey
    results: dict[str, TaskResult]
    measured: str


def code_sha256(root: Path = ROOT, paths: tuple[str, ...] = CODE_PATHS) -> str:
    """sha256 over the relative path and bytes of every file of ``paths`` (folders: their files with a suffix of
    :data:`CODE_SUFFIXES`), in sorted order."""
    files: list[Path] = []
    for rel in paths:
        path = root / rel
        if path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and p.suffix in CODE_SUFFIXES
                      and "__pycache__" not in p.parts]
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{rel}: named in CODE_PATHS but not in the source tree")
    digest = hashlib.sha256()
    for file in sorted(set(files)):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def tasks_sha256(configs: list[tuple[str, dict]]) -> str:
    """sha256 of the (key, config) pairs in order, as canonical JSON."""
    return hashlib.sha256(json.dumps(configs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def evaluation_key(settings: Settings, actor: Path, configs: list[tuple[str, dict]], rollout: Rollout) -> EvaluationKey:
    """The key of a greedy evaluation of the model folder ``actor`` on the tasks ``configs`` ((key, config) in the
    order evaluated) with ``rollout``'s horizon and early stops, under ``settings``' serving dtype, prompt budget,
    completion budget and temperature."""
    import torch
    import transformers

    from webrl.store.checkpoints import cached_content_sha256

    return EvaluationKey(
        actor_sha256=cached_content_sha256(actor), tasks_sha256=tasks_sha256(configs), n_tasks=len(configs),
        max_steps=rollout.max_steps, max_parse_failures=rollout.max_parse_failures,
        max_repeated_actions=rollout.max_repeated_actions, dtype=settings.models.dtype,
        max_prompt_tokens=settings.actor.max_prompt_tokens, code_sha256=code_sha256(), sandbox_seed=settings.seed,
        torch=torch.__version__.split("+")[0], transformers=transformers.__version__,
        max_new_tokens=settings.actor.max_new_tokens, temperature=settings.actor.temperature,
    )


def is_storable(key: EvaluationKey) -> bool:
    """Only greedy fp32 evaluations are stored: in bf16 the same prompt can decode differently alone and in a batch,
    and an evaluation under a sampling ``WEBRL_ACTOR__TEMPERATURE`` samples."""
    return key.dtype == "float32" and key.temperature == 0


def local_folder(settings: Settings) -> Path:
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "evaluations"


def find(settings: Settings, key: EvaluationKey, folders: tuple[Path, ...] | None = None) -> StoredEvaluation | None:
    """The evaluation stored under ``key`` (the run's artifacts first, then :data:`SHIPPED`), or None. A file whose
    recorded key is not ``key`` (renamed or edited by hand) is not taken."""
    name = f"{key.digest()}.json"
    for folder in folders or (local_folder(settings), SHIPPED):
        path = folder / name
        if path.is_file():
            stored = StoredEvaluation.model_validate_json(path.read_text())
            if stored.key == key:
                return stored
    return None


def save(settings: Settings, key: EvaluationKey, results: dict[str, TaskResult], folder: Path | None = None) -> Path:
    """Write the evaluation under ``key`` into ``folder`` (default: the artifacts' evaluations) atomically (a
    temporary file renamed into place), so a crash never leaves half a file; returns its path."""
    folder = folder or local_folder(settings)
    folder.mkdir(parents=True, exist_ok=True)
    stored = StoredEvaluation(key=key, results=dict(sorted(results.items())), measured=date.today().isoformat())
    return write_text_whole(folder / f"{key.digest()}.json", stored.model_dump_json(indent=1) + "\n")
