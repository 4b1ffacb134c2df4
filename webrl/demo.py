"""``make demo``: the main job on the embedded default, from a fresh checkout.

1. migrate the SQLite database under ``.webrl/`` and load the sandbox task suite;
2. get the SFT actor: a LoRA adapter on SmolLM2-135M-Instruct, whose base is converted from the installed PyPI
   wheel on first use (``webrl models base smollm2-135m``). The shipped adapter (``webrl/assets/actor-sft-smollm2``,
   made by two ``webrl bootstrap`` stages; ``webrl/assets/PROVENANCE.md`` has the commands and seeds) after checking
   its sha256, else those two stages again (:data:`SFT_STAGES`, about two hours on 2 cores);
3. ``webrl train --preset cpu-demo``: two WebRL phases with progress bars, then the report
   (``.webrl/artifacts/reports/cpu-demo/report.md`` with its PNG plots). The SFT actor's evaluation (phase 0) is
   read back from ``webrl/assets/evaluations`` when its content key still matches (``webrl.store.evaluations``), so
   the hour goes to the two phases: on the 2-core development machine the whole command takes about an hour
   (docs/runs/ has the measured runs).

Rerunning resumes where the last run stopped. ``python -m webrl.demo --seed 1`` runs the same demo under another seed
(run ``cpu-demo-seed1``), in the same home: the stored SFT evaluation and the converted base are shared. Other flags
go to ``webrl train``: ``python -m webrl.demo --run cpu-demo-min6 --min-solved 6 --max-attempts 2`` tries a lever on
the demo as a run of its own.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from webrl.config import Settings, get_settings
from webrl.whole_files import copy_folder_whole

console = Console()
BASE = "smollm2-135m"
SHIPPED_ACTOR = Path(__file__).parent / "assets" / "actor-sft-smollm2"
#: The shipped actor's flips probe (``webrl probe build``; webrl/assets/PROVENANCE.md): every phase records how many
#: of its steps the update changed.
SHIPPED_PROBE = Path(__file__).parent / "assets" / "probe-smollm2.jsonl.gz"
#: Its anchor steps (``webrl probe anchors``), which ``--anchor-kl`` holds the policy on; unread without it.
SHIPPED_ANCHORS = Path(__file__).parent / "assets" / "anchors-smollm2.jsonl.gz"
PRESET = RUN = "cpu-demo"
#: The shipped actor's recipe (webrl/assets/PROVENANCE.md), run when no intact adapter is shipped: stage 1 is
#: ``webrl bootstrap``'s own defaults on the base (4 demonstrations per template, one epoch: 9.1% of the test
#: tasks); stage 2 trains it one more epoch on demonstrations weighted to reddit and gitlab (15.2%).
SFT_STAGES = (
    ["--base", BASE],
    ["--base", BASE, "--demos-per-template", "1", "--site-demos", "reddit=3", "--site-demos", "gitlab=3",
     "--sft-minutes", "35", "--lr", "3e-4", "--warmup-steps", "5"],
)


def is_whole_model(folder: Path) -> bool:
    """True when ``folder`` holds a model whose files hash to the sha256 its manifest records: a whole copy of the
    shipped actor, or a published checkpoint (a bootstrapped actor); a partial copy is not."""
    from webrl.model_folders import is_model_folder
    from webrl.store.checkpoints import verify

    return is_model_folder(folder) and verify(folder)


def shipped_actor_is_intact() -> bool:
    """True when the shipped actor exists and its files hash to the sha256 its manifest records."""
    return is_whole_model(SHIPPED_ACTOR)


def sft_actor(settings: Settings) -> Path:
    """The SFT actor under the artifacts folder: copied from the shipped adapter, or bootstrapped."""
    from webrl.cli import app
    from webrl.model_folders import is_model_folder
    from webrl.models.pretrained_base import ensure_base

    assert settings.artifacts_dir is not None
    with console.status(f"base: converting {BASE} from its wheel (once, ~30 s)"):
        base = ensure_base(settings, BASE)
    console.print(f"base: {base}")
    target = settings.artifacts_dir / "models" / "actor-sft-smollm2"
    if is_whole_model(target):
        console.print(f"SFT actor: {target} (already there)")
        return target
    if shipped_actor_is_intact():
        copy_folder_whole(SHIPPED_ACTOR, target)
        console.print(f"SFT actor: copied the shipped adapter to {target} (see webrl/assets/PROVENANCE.md)")
        return target
    console.print("SFT actor: none shipped; building it as webrl/assets/PROVENANCE.md records, two `webrl bootstrap` "
                  "stages (about two hours on 2 cores)")
    stage_1 = target.with_name(f"{target.name}-stage1")
    first, second = SFT_STAGES
    if not is_model_folder(stage_1):
        app(["bootstrap", *first, "--output", str(stage_1)], standalone_mode=False)
    app(["bootstrap", *second, "--start", str(stage_1), "--output", str(target)], standalone_mode=False)
    return target


def run_name(seed: int) -> str:
    """The demo's run: ``cpu-demo`` for seed 0 (what ``make demo`` runs), ``cpu-demo-seed<N>`` for another seed."""
    return RUN if seed == 0 else f"{RUN}-seed{seed}"


#: ``webrl train`` flags the demo sets itself: another actor, preset, probe or anchor set is another command
#: (`webrl train`).
DEMO_SETS = ("--preset", "--actor", "--probe", "--anchors")


def parse_demo_args(argv: list[str] | None) -> tuple[int, str, list[str]]:
    """The demo's seed, its run's name and the ``webrl train`` flags passed on (a lever tried on the demo:
    ``--min-solved 6 --run cpu-demo-min6``); a flag the demo sets itself exits with status 2 naming it."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m webrl.demo", description=__doc__.splitlines()[0],
                                     epilog="Any other flag goes to `webrl train` (`webrl train --help`); a resumed "
                                     "run refuses one that asks for another value than it started with.")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (its task samples, generated tasks and "
                        "batch order); each seed is a run of its own, resumed by the same command")
    parser.add_argument("--run", default=None, help="the run's name (default: cpu-demo, or cpu-demo-seed<N> under "
                        "another seed); a lever tried on the demo wants a run of its own")
    args, train_flags = parser.parse_known_args(argv)
    for flag in train_flags:
        if flag.split("=")[0] in DEMO_SETS:
            parser.error(f"{flag.split('=')[0]}: the demo runs the shipped SFT actor under the cpu-demo preset; "
                         "use `webrl train` for another")
    return args.seed, args.run or run_name(args.seed), train_flags


def main(argv: list[str] | None = None) -> None:
    import click

    from webrl.cli import app

    seed, run, train_flags = parse_demo_args(argv)

    # The policy's intra-op threads are torch's default (every physical core), although the model shares the CPU
    # with Chromium and the sites: on the 2-core machine evaluation runs 1.23x faster with 2 threads than with 1, the
    # same 80 responses token for token (bench/eval_concurrency.py, docs/measurements.md). WEBRL_MODELS__TORCH_THREADS
    # sets it.
    settings = get_settings()
    console.rule("webrl demo: WebRL on the built-in sandbox sites, SmolLM2-135M + LoRA on the CPU")
    actor = sft_actor(settings)
    try:
        code = app(["train", "--preset", PRESET, "--run", run, "--seed", str(seed), "--actor", str(actor),
                    "--probe", str(SHIPPED_PROBE), "--anchors", str(SHIPPED_ANCHORS), *train_flags],
                   standalone_mode=False)
    except click.ClickException as refused:  # a flag `webrl train` refuses: its one-line message, status 2
        refused.show()
        raise SystemExit(refused.exit_code) from None
    if code:  # not standalone, click answers Ctrl-C (130) and a command's typer.Exit with the code, not an exception
        console.print(f"stopped before the end (exit {code}): `make demo` again resumes run {run!r} where it stopped")
        raise SystemExit(code)
    assert settings.artifacts_dir is not None
    report = report_folder(train_flags, settings.artifacts_dir / "reports" / run)
    console.print(f"done: report at {report / 'report.md'}")


def report_folder(train_flags: list[str], default: Path) -> Path:
    """Where `webrl train` wrote the report: the ``--report`` among the flags passed through, else ``default``."""
    for i, flag in enumerate(train_flags):
        if flag == "--report" and i + 1 < len(train_flags):
            return Path(train_flags[i + 1])
        if flag.startswith("--report="):
            return Path(flag.split("=", 1)[1])
    return default


if __name__ == "__main__":
    from webrl.errors import one_line_errors

    with one_line_errors():
        main()
