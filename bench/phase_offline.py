"""A learning experiment that fits a session: one stored phase's actor update re-run under several settings.

Every setting trains the same start actor on the same stored experience (the phase's steps with its critic's
advantages: ``services/trainer/offline.py``) and is scored by what the update did to the policy:
- flips: the share of a fixed probe of steps the SFT actor gets right whose greedy action changed, per site;
- exact KL(pi_ref || pi) per action token at the trained positions, and the k1 log-ratio on the trained targets;
- with ``--tasks N``: greedy success on a fixed sample of N test tasks (real browsers on the sandbox sites), with
  tasks gained and lost against the start actor on the same sample, measured in the same run; overall, on the
  seen-template and held-out-template tasks and in the macro average over templates, each interval a bootstrap
  over templates (:mod:`webrl.method.template_split`: a template's tasks succeed or fail together).

    # export a phase of a finished run (in the run's WEBRL_HOME), once:
    python bench/phase_offline.py export --run cpu-demo --phase 1 --output bench/fixtures/phase1-smollm2
    # compare settings (each ``NAME:group.field=value,...``; no setting: the built-in comparison):
    python bench/phase_offline.py run --tasks 24 --setting "published:" --setting "squared:actor.objective=squared"
    # the same comparison under another order of the update's batches
    python bench/phase_offline.py run --tasks 165 --seed 1 --output .webrl/bench/phase_offline/seed1 \
        --setting "clip:actor.max_grad_norm=0.01,actor.warmup_steps=3"
    # the second stored phase (cpu-demo seed 1, phase 1, 2026-11-29: its rollouts solved none of 24, so its 14 steps
    # with A > 0 are all replayed): the preset's gate keeps the actor; without it the update trains on replay alone
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed1-smollm2 --tasks 165 \
        --setting "gated:" --setting "replay-only:actor.min_new_positive_steps=0"
    # the third (make demo seed 0 with --solved-share 0.5 --rollout-temperature 0.3, phase 1, 2026-11-29: 8 of 24
    # rollouts solved, 53 steps with A > 0, 40 its own), scored on the 65-task sample its run evaluated
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed0-t03-smollm2 --tasks 65 --stratified \
        --setting "as-run:" --setting "known-0.95:actor.max_positive_confidence=0.95"
    # the fourth (make demo seed 1 at the final preset, phase 1, 2026-12-02: 2 of 24 rollouts solved, 11 steps with
    # A > 0, 9 its own, past the gate; its run's actor fell from 14 to 5 of its 65): an update on few positives
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed1-gated-smollm2 --tasks 65 --stratified \
        --setting "as-run:" --setting "contrast:actor.intent_contrast=1"
    # the fifth (make demo seed 1 with --solved-share 0.5 --rollout-temperature 0.3, phase 1, 2026-12-03: 11 of 24
    # rollouts solved, 72 steps with A > 0, 66 its own; its run's actor rose from 9 to 13 of its 40)
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed1-t03-smollm2 --tasks 65 --stratified \
        --setting "as-run:"
    # ... and its update without the clip, on all 165 (docs/runs/2026-12-04-phase-offline-clip-second-phase)
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed1-t03-smollm2 --tasks 165 --seed 0 \
        --setting "unclipped:actor.max_grad_norm=1.0,actor.warmup_steps=0"
    # ... and clipped with the SFT data rehearsed: 2 oracle steps of one train task per template (the anchor file)
    # joining the update per step with A > 0, at A = +1
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-seed1-t03-smollm2 --tasks 165 --seed 0 \
        --setting "rehearsal:replay.demo_tasks=66,replay.demo_ratio=2"
    # the first phase clipped, with each positive's copies under renumbered element ids (actor.renumbered_positives;
    # docs/runs/2026-12-06-phase-offline-renumbered-positives: 16 of 165, and 18 with actor.epochs=1)
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-smollm2 --tasks 165 --seed 0 \
        --setting "renumbered:actor.max_grad_norm=0.01,actor.warmup_steps=3,actor.renumbered_positives=2"
    # would the validate stage publish the first phase's clipped update? (evaluation.validation_tasks: the updated
    # actor against the start actor on 40 train-split tasks, sign test)
    python bench/phase_offline.py run --fixture bench/fixtures/phase1-smollm2 --validation-tasks 40 --seed 0 \
        --setting "clip:actor.max_grad_norm=0.01,actor.warmup_steps=3"
    # the smoke path (tests): the tiny actor, two stored steps, one epoch, no browser
    python bench/phase_offline.py run --smoke

Results: a table on the terminal, ``results.json`` and ``flips_kl.png`` under ``--output``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from services.trainer.intent_contrast import sandbox_train_intents
from services.trainer.offline import demonstration_steps, export_phase, load_phase, rerun_update, setting
from webrl.config import get_settings
from webrl.method.acceptance import verdict
from webrl.method.hyperparams import WebRLHyperparams
from webrl.models.probe import load_probe

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "bench" / "fixtures" / "phase1-smollm2"
PROBE = ROOT / "webrl" / "assets" / "probe-smollm2.jsonl.gz"
ANCHORS = ROOT / "webrl" / "assets" / "anchors-smollm2.jsonl.gz"
SFT_ACTOR = ROOT / "webrl" / "assets" / "actor-sft-smollm2"
TINY_ACTOR = ROOT / "webrl" / "assets" / "actor-sft"
#: The comparison run when no --setting is given: the preset's update as it now is, the paper's objective, and the two
#: hygiene levers the objective's review named (the published clip norm with a warm-up; positives of failed
#: trajectories only where the critic is sure).
DEFAULT_SETTINGS = {
    "smooth-l1": {},
    "squared": {"actor.objective": "squared"},
    "clip-0.01+warmup": {"actor.max_grad_norm": 0.01, "actor.warmup_steps": 3},
    "confident-positives": {"actor.failed_positives": "confident"},
}

app = typer.Typer(add_completion=False, no_args_is_help=True)
console = Console()


@contextmanager
def shown(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar named ``label`` while the block runs; yields the hook that moves it, ``(done, total)``."""
    from webrl.commands.progress_display import progress_display

    with progress_display(console) as progress:
        bar = progress.add_task(label, total=None)
        yield lambda done, total: progress.update(bar, completed=done, total=max(total, 1))


def parse_setting(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:group.field=value,...`` -> (name, overrides); values are JSON where they parse, else strings."""
    name, _, rest = text.partition(":")
    if not name:
        raise typer.BadParameter(f"{text!r} has no name before ':'", param_hint="--setting")
    overrides: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise typer.BadParameter(f"{part!r} is not group.field=value", param_hint="--setting")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value.strip()
    return name, overrides


def checked_settings(stored: WebRLHyperparams, texts: list[str] | None) -> dict[str, dict[str, Any]]:
    """The ``--setting`` values by name (the defaults when none is given), each applied to the stored phase's record
    before anything runs: an unknown or invalid field, or a name given twice, is a usage error naming the option,
    not a failure after the sandbox, the start actor's evaluation and the earlier settings' updates."""
    if not texts:
        return dict(DEFAULT_SETTINGS)
    chosen: dict[str, dict[str, Any]] = {}
    for text in texts:
        name, overrides = parse_setting(text)
        if name in chosen:
            raise typer.BadParameter(f"the name {name!r} is given twice", param_hint="--setting")
        try:
            setting(stored, overrides)
        except (ValueError, TypeError) as exc:
            raise typer.BadParameter(f"{name}: {exc}", param_hint="--setting") from None
        chosen[name] = overrides
    return chosen


def sample_keys(settings: Any, n: int, stratified: bool = False) -> tuple[list[str], list[str]]:
    """(the sample, the suite): a fixed sample of ``n`` test tasks of the suite (every test task, in order): spread
    over the suite's order, or with ``stratified`` the template-stratified sample of ``make demo``'s run (seed 0:
    :func:`webrl.store.template_groups.stratified_sample`; with 65, one task of every template, the tasks its
    middle phase evaluates), the same whatever the update's ``--seed``, so seeds compare on the same tasks."""
    from webrl.db import repository as repo
    from webrl.db.session import session_scope
    from webrl.store.template_groups import stratified_sample

    with session_scope(settings) as s:
        suite = [t.key for t in repo.tasks_where(s, split="test")]
    if stratified:
        return stratified_sample(settings, suite, n, seed=0), suite
    ordered = sorted(suite)
    step = max(1, len(ordered) // n)
    return ordered[::step][:n], suite


def solved_on(settings: Any, actor: Path, keys: list[str], max_steps: int, suite: list[str],
              split: str = "test") -> tuple[set[str], str]:
    """(the tasks of ``keys`` the actor at ``actor`` solves greedily, where the result came from): read back from an
    evaluation of all of ``suite`` stored under the actor's content key (the shipped SFT actor's:
    :mod:`webrl.store.evaluations`), else evaluated (once per actor state and horizon) and, when ``keys`` is the
    suite, stored for the next comparison. ``split`` "train": the validation tasks (``--validation-tasks``)."""
    from webrl.method.hyperparams import Rollout
    from webrl.orchestration.evaluate import evaluation_episodes, solved_task_keys
    from webrl.orchestration.stored_evaluation import greedy_scores

    def run() -> list[int]:  # in idempotent chunks, the episodes this actor folder has at this horizon reused
        with shown(f"evaluate {actor.name}") as moved:
            return evaluation_episodes(settings, actor, keys, concurrency=8, max_steps=max_steps,
                                       on_progress=lambda _label, done, total: moved(done, total))

    # the request's early stops are the defaults, as Rollout's
    scores, stored = greedy_scores(settings, actor, keys, suite, Rollout(max_steps=max_steps), run, split)
    return set(solved_task_keys(scores)), f"stored evaluation {stored}" if stored else "evaluated"


def save_actor(settings: Any, model: Any, tokenizer: Any, folder: Path, name: str) -> Path:
    """The trained actor as a checkpoint folder the rollout policy loads."""
    from services.trainer.publish import publish_model
    from services.trainer.training_loop import LoopConfig, make_accelerator

    info = publish_model(settings, make_accelerator(LoopConfig()), model, tokenizer, role="actor",
                         version=f"offline-{name}-{int(time.time())}", dest=folder, phase=0, parent_version=None,
                         metrics={}, replace=True)
    return Path(info.path) if info else folder


@app.command()
def export(run: str = typer.Option(...), phase: int = typer.Option(1, min=1), output: Path = typer.Option(FIXTURE),
           actor: Path = typer.Option(SFT_ACTOR, help="The actor whose tokenizer renders the prompts.")) -> None:
    """Write a finished run's phase (experience + critic advantages) as a stored phase."""
    from webrl.models.loading import load_tokenizer

    settings = get_settings()
    folder = export_phase(settings, run, phase, output, load_tokenizer(actor, settings))
    stored = load_phase(folder)
    console.print(f"{len(stored.steps)} steps -> {folder}")


@app.command("run")
def run_settings(
    fixture: Path = typer.Option(FIXTURE, help="A stored phase (export)."),
    actor: Path = typer.Option(SFT_ACTOR, help="The phase's start actor."),
    probe: Path = typer.Option(PROBE, help="The flips probe of that actor."),
    anchors: Path = typer.Option(ANCHORS, help="Anchor steps for settings with actor.anchor_kl > 0 "
                                 "(`webrl probe anchors`)."),
    demonstrations: Path = typer.Option(ANCHORS, help="Oracle steps (one train task per template) whose first "
                                        "replay.demo_tasks tasks are the rehearsal pool of settings with "
                                        "replay.demo_tasks > 0."),
    setting_args: list[str] = typer.Option(None, "--setting", help="NAME:group.field=value,... (repeat)."),
    tasks: int = typer.Option(0, min=0, help="Also evaluate greedily on a fixed sample of this many test tasks."),
    stratified: bool = typer.Option(False, help="That sample stratified by template (65: one task of every "
                                    "template, the middle-phase sample of `make demo`); else spread over the "
                                    "suite's order."),
    validation_tasks: int = typer.Option(0, min=0, help="Also score each setting's actor on the pipeline's "
                                         "validation sample of this many train-split tasks and give the validate "
                                         "stage's verdict against the start actor (evaluation.validation_tasks)."),
    max_steps: int = typer.Option(8, min=1, help="Horizon of that evaluation (the CPU presets': 8)."),
    probe_steps: int = typer.Option(0, min=0, help="Only the first N probe steps per site (0: all)."),
    output: Path = typer.Option(Path(".webrl/bench/phase_offline"), help="Where results.json and the plot go."),
    smoke: bool = typer.Option(False, help="Tiny actor, 2 stored steps, 1 epoch, 4 probe steps, no browser."),
    probe_every_epoch: bool = typer.Option(False, help="Flips after every epoch, not only the last (slower)."),
    seed: int = typer.Option(0, help="Seed of the update: the order of its batches (the start actor is the stored "
                             "phase's, so nothing is initialised at random). The trainer seeds a phase with the "
                             "run's --seed."),
) -> None:
    """Re-run the stored phase's actor update under each setting and compare them."""
    from webrl.commands import quiet_model_loading

    quiet_model_loading()  # the update's and the evaluation's bars are the display
    settings = get_settings()
    try:
        stored = load_phase(fixture)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fixture") from None
    chosen = checked_settings(stored.hyperparams, setting_args)
    try:
        probe_set = load_probe(probe)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{probe} is not a probe file ({exc})", param_hint="--probe") from None
    if probe_steps:
        probe_set = [s for site in sorted({p.site for p in probe_set})
                     for s in [p for p in probe_set if p.site == site][:probe_steps]]
    max_trained = None
    if smoke:
        actor, tasks, max_trained, probe_set = TINY_ACTOR, 0, 2, probe_set[::max(1, len(probe_set) // 4)][:4]
        validation_tasks = 0
        chosen = {name: {**o, "actor.epochs": 1} for name, o in list(chosen.items())[:2]}
    keys, suite, baseline = [], [], set()
    sandbox, groups, validation, validated = None, None, [], set()
    if tasks or validation_tasks:
        from webrl.db.migrate import upgrade
        from webrl.sandbox.server import running_sandbox, sandbox_ports
        from webrl.sandbox.tasks.suite import load_suite

        upgrade(settings)
        load_suite(settings, settings.seed)
        sandbox = running_sandbox(settings, sandbox_ports(settings))
        sandbox.__enter__()
    if tasks:
        keys, suite = sample_keys(settings, tasks, stratified)
        groups = sample_groups(settings, keys)
        baseline, source = solved_on(settings, actor, keys, max_steps, suite)
        console.print(f"start actor: {len(baseline)}/{len(keys)} of the task sample ({source})")
    if validation_tasks:
        from webrl.store.template_groups import validation_sample

        validation = validation_sample(settings, validation_tasks)
        validated, source = solved_on(settings, actor, validation, max_steps, validation, split="train")
        console.print(f"start actor: {len(validated)}/{len(validation)} of the validation tasks ({source})")
    results = []
    try:
        for name, overrides in chosen.items():
            hp = setting(stored.hyperparams, overrides)
            console.rule(f"{name}: {overrides or 'the stored phase as it ran'}")
            with shown(f"update {name} (optimizer steps)") as moved:
                result = rerun_update(settings, stored, actor, hp, probe=probe_set, max_steps=max_trained,
                                      keep_model=bool(tasks or validation_tasks),
                                      probe_every_epoch=probe_every_epoch, seed=seed,
                                      anchors=load_probe(anchors) if hp.actor.anchor_kl > 0 else None,
                                      contrast=sandbox_train_intents(settings) if hp.actor.intent_contrast > 0
                                      else None,
                                      demonstrations=rehearsal_pool(demonstrations, hp), on_progress=moved)
            row = {"setting": name, "overrides": overrides, "seed": seed, **result.metrics,
                   "minutes": round(result.seconds / 60, 2), "epochs": result.epochs}
            if tasks or validation_tasks:
                # inside the artifacts store: the rollout workers load only model folders a request may name
                folder = save_actor(settings, result.model, result.tokenizer,
                                    settings.artifacts_dir / "bench" / "phase_offline" / name, name)
            if validation_tasks:
                passed, _ = solved_on(settings, folder, validation, max_steps, validation, split="train")
                judged = verdict(validation, validated, passed, hp.evaluation.validation_alpha,
                                 hp.evaluation.validation_margin)
                row["validation"] = {**judged.to_json(), "solved_tasks": sorted(passed)}
                console.print(f"{name}: validation {judged.start_solved} -> {judged.solved} of {judged.tasks} "
                              f"({judged.gained} gained, {judged.lost} lost, p = {judged.p:.4f}): "
                              + ("published" if judged.accepted else "refused"))
                write_results([*results, row], output, meta(fixture, baseline, keys, validated, validation))
            if tasks:
                solved, _ = solved_on(settings, folder, keys, max_steps, suite)
                row |= {"solved": len(solved), "tasks": len(keys), "gained": sorted(solved - baseline),
                        "lost": sorted(baseline - solved), **against_start(name, keys, groups, baseline, solved)}
            results.append(row)
            # a stopped comparison keeps what it ran
            write_results(results, output, meta(fixture, baseline, keys, validated, validation))
    finally:
        if sandbox is not None:
            sandbox.__exit__(None, None, None)
    report(results, output, meta(fixture, baseline, keys, validated, validation))


def rehearsal_pool(path: Path, hp: Any) -> list[Any] | None:
    """The demonstration steps a setting rehearses (``replay.demo_tasks`` tasks of ``path``), None when it
    rehearses none."""
    if not hp.replay.rehearses:
        return None
    pool = demonstration_steps(load_probe(path), hp.replay.demo_tasks, hp.advantage.gamma)
    if not pool:
        raise typer.BadParameter(f"{path} holds no oracle steps to rehearse", param_hint="--demonstrations")
    return pool


def sample_groups(settings: Any, keys: list[str]) -> Any:
    """The templates of the sampled test tasks and those training saw (a ``TemplateGroups``), None when a task's
    template is unknown."""
    from webrl.store.template_groups import template_groups

    groups = template_groups(settings)
    return groups if groups.covers(keys) else None


def against_start(name: str, keys: list[str], groups: Any, baseline: set[str], solved: set[str]) -> dict[str, Any]:
    """``{"vs_start": ...}``: the setting against the start actor on the sample, overall, seen, held-out and macro,
    with template-cluster bootstrap intervals, printed as it is measured; {} when templates are unknown."""
    if groups is None:
        return {}
    from webrl.method.template_split import group_comparison
    from webrl.runs.report import template_comparison_lines

    compared = group_comparison(keys, groups, baseline, solved)
    for line in template_comparison_lines(compared, f"{name} against the start actor"):
        console.print(line, markup=False, highlight=False)
    return {"vs_start": compared.as_dict()}


def vs_start_cell(row: dict[str, Any]) -> str:
    """"+13.3 (-2.1..+30.0)": the difference in points against the start actor and its template-bootstrap 95%
    interval; "-" when not measured."""
    overall = (row.get("vs_start") or {}).get("overall")
    if not overall:
        return "-"
    low, high = overall["interval"]
    return f"{100 * overall['difference']:+.1f} ({100 * low:+.1f}..{100 * high:+.1f})"


def meta(fixture: Path, baseline: set[str], keys: list[str], validated: set[str] | None = None,
         validation: list[str] | None = None) -> dict[str, Any]:
    """What the results share: the stored phase, the test sample and the start actor's solved tasks of it, and where
    ``--validation-tasks`` ran, the validation tasks and the start actor's solved ones."""
    info: dict[str, Any] = {"fixture": fixture.name, "baseline_solved": sorted(baseline), "tasks": keys}
    if validation:
        info |= {"validation_tasks": validation, "validation_baseline_solved": sorted(validated or ())}
    return info


def validation_cell(row: dict[str, Any]) -> str:
    """"12 -> 3 refused (p 0.002)": the setting's actor on the validation tasks against the start actor, and the
    validate stage's verdict; "-" when not measured."""
    judged = row.get("validation")
    if not judged:
        return "-"
    return (f"{judged['start_solved']} -> {judged['solved']} " + ("published" if judged["accepted"] else "refused")
            + f" (p {judged['p']:.3g})")


def write_results(results: list[dict[str, Any]], output: Path, info: dict[str, Any]) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps({**info, "results": results}, indent=2) + "\n")


def report(results: list[dict[str, Any]], output: Path, info: dict[str, Any]) -> None:
    """The comparison as a table, ``results.json`` and a flips-against-KL plot."""
    table = Table("setting", "trained", "opt. steps", "KL exact", "k1", "flips", "shop", "admin", "reddit", "gitlab",
                  "solved", "gained", "lost", "vs start (95%, templates)", "validation", "min")
    fmt = lambda v, p=4: "-" if v is None else (f"{v:.{p}g}" if isinstance(v, float) else str(v))  # noqa: E731
    base_flips = results[0].get("flips") if results else None
    for r in results:
        table.add_row(r["setting"], fmt(r.get("trained_steps")), fmt(r.get("optimizer_steps")),
                      fmt(r.get("kl_exact")) + (" (bound)" if r.get("kl_stopped_at_step") else ""),
                      fmt(r.get("log_ratio_k1")), fmt(r.get("flips"), 3), fmt(r.get("flips_shopping"), 3),
                      fmt(r.get("flips_shopping_admin"), 3), fmt(r.get("flips_reddit"), 3),
                      fmt(r.get("flips_gitlab"), 3),
                      f"{r['solved']}/{r['tasks']}" if "solved" in r else "-",
                      fmt(len(r["gained"])) if "gained" in r else "-", fmt(len(r["lost"])) if "lost" in r else "-",
                      vs_start_cell(r), validation_cell(r), fmt(r.get("minutes"), 3))
    console.print(table)
    if base_flips is not None:
        for r in results[1:]:
            if r.get("flips") is not None:
                console.print(f"{r['setting']}: flips {r['flips']:.3f} vs {results[0]['setting']} {base_flips:.3f}")
    write_results(results, output, info)
    plot(results, output / "flips_kl.png")
    console.print(f"results: {output / 'results.json'}, plot: {output / 'flips_kl.png'}")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        if r.get("kl_exact") is not None and r.get("flips") is not None:
            ax.scatter(r["kl_exact"], 100 * r["flips"], s=60)
            ax.annotate(r["setting"], (r["kl_exact"], 100 * r["flips"]), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("exact KL(pi_ref || pi) per action token, last epoch")
    ax.set_ylabel("probe steps flipped (%)")
    ax.set_title("One stored phase's actor update, by setting")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    app()
