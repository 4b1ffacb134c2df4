"""``webrl bootstrap`` (build the tiny SFT actor from the sandbox) and ``webrl models`` (inspect folders)."""

from __future__ import annotations

from pathlib import Path

import typer

from webrl.commands import quiet_model_loading
from webrl.config import get_settings
from webrl.models.bootstrap import BootstrapConfig

_DEFAULT = BootstrapConfig()  # the CLI's defaults are the config's (each documented in BootstrapConfig)


def register(app: typer.Typer) -> None:
    app.command("bootstrap")(bootstrap)
    models = typer.Typer(help="Models: inspect Hugging Face folders.", no_args_is_help=True)
    models.command("info")(info)
    app.add_typer(models, name="models")


def bootstrap(
    size: str = typer.Option(None, help="Tiny model preset: test, small, base, large (default WEBRL_TINY_SIZE)."),
    seed: int = typer.Option(None, help="Seed of suite, sample, init and SFT (default WEBRL_SEED)."),
    demos_per_template: int = typer.Option(_DEFAULT.demos_per_template, min=1,
                                           help="Train tasks per template the oracle demonstrates."),
    sft_minutes: float = typer.Option(None, min=0.05, help="SFT wall-clock budget (default WEBRL_BOOTSTRAP_MINUTES"
                                                          " minus the other stages' share)."),
    epochs: int = typer.Option(_DEFAULT.epochs, min=1, help="SFT epochs (the cosine schedule spans all of them;"
                                                            " the time budget stops training earlier if it must)."),
    lr: float = typer.Option(_DEFAULT.lr, min=0.0, help="SFT peak learning rate."),
    warmup_steps: int = typer.Option(_DEFAULT.warmup_steps, min=0, help="Linear lr warm-up steps."),
    cosine: bool = typer.Option(_DEFAULT.cosine, "--cosine/--constant-lr",
                                help="Cosine-decay the lr to lr/10 over the planned SFT steps."),
    batch_size: int = typer.Option(_DEFAULT.batch_size, min=1, help="SFT sequences per step."),
    prompt_loss_weight: float = typer.Option(_DEFAULT.prompt_loss_weight, min=0.0,
                                             help="Weight of an auxiliary next-token loss on the prompt's pages"
                                                  " (0: loss on the actions only, as WebRL trains)."),
    words: str = typer.Option(_DEFAULT.words, help="How the tokenizer cuts words: apart (word, space) or"
                                                 " trailing-space (a word keeps the space after it)."),
    task_reminder: bool = typer.Option(_DEFAULT.task_reminder, "--task-reminder/--no-task-reminder",
                                       help="Chat template that repeats the task instruction after the page."),
    relabelled_copies: int = typer.Option(_DEFAULT.relabelled_copies, min=0,
                                          help="Relabelled copies of each demonstration (entity names swapped,"
                                               " element ids renumbered) trained on beside it."),
    concurrency: int = typer.Option(_DEFAULT.concurrency, min=1, help="Browser episodes at once."),
    evaluate: bool = typer.Option(False, "--evaluate/--no-evaluate", help="Also measure success on the 165 test"
                                                                         " tasks (several more minutes)."),
    output: Path = typer.Option(None, help="Where to publish the actor (default <artifacts>/models/actor-sft)."),
) -> None:
    """Build the tiny CPU actor: tokenizer, Llama, oracle demonstrations, SFT -> artifacts/models/actor-sft."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from webrl.models.bootstrap import STAGES, BootstrapConfig, run_bootstrap
    from webrl.models.tiny import SIZES, pretokenize_pattern

    settings = get_settings()
    size = size or settings.tiny_size
    if size not in SIZES:
        raise typer.BadParameter(f"unknown size {size!r}; expected one of {list(SIZES)}", param_hint="--size")
    try:
        pretokenize_pattern(words)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--words") from None
    config = BootstrapConfig(seed=settings.seed if seed is None else seed, size=size,
                             vocab_size=settings.tiny_vocab_size, words=words, task_reminder=task_reminder,
                             demos_per_template=demos_per_template,
                             epochs=epochs, lr=lr, warmup_steps=warmup_steps, cosine=cosine, batch_size=batch_size,
                             prompt_loss_weight=prompt_loss_weight, relabelled_copies=relabelled_copies,
                             concurrency=concurrency, evaluate=evaluate, output=output,
                             sft_minutes=sft_minutes or settings.bootstrap_minutes / 2)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    quiet_model_loading()
    with Progress(*columns) as progress:
        bar = progress.add_task("bootstrap: tasks", total=len(STAGES))

        def on_stage(stage: str) -> None:
            following = STAGES[STAGES.index(stage) + 1] if stage != STAGES[-1] else "done"
            progress.update(bar, advance=1, description=f"bootstrap: {following}")

        result = run_bootstrap(settings, config, on_stage)
    typer.echo(f"actor {result.version} ({result.parameters:,} parameters, {result.demos} demos, "
               f"{result.demo_steps} steps) at {result.path}")
    if result.test_success is not None:
        typer.echo(f"test success {result.test_success:.3f} on {result.test_tasks} tasks; by site: "
                   + ", ".join(f"{site} {rate:.3f}" for site, rate in result.test_by_site.items()))


def info(path: Path = typer.Argument(..., help="A Hugging Face model folder.")) -> None:
    """Version, architecture, parameters and chat template of a local model folder."""
    from webrl.models.bootstrap import count_parameters
    from webrl.models.loading import ModelNotFoundError, checkpoint_version, load_tokenizer, resolve_model_dir

    try:
        folder = resolve_model_dir(path)
    except ModelNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="PATH") from None
    tokenizer = load_tokenizer(folder, get_settings())
    typer.echo(f"version: {checkpoint_version(folder)}")
    typer.echo(f"parameters: {count_parameters(folder):,}")
    typer.echo(f"vocabulary: {len(tokenizer)}; eos: {tokenizer.eos_token}; chat template: "
               f"{'yes' if tokenizer.chat_template else 'no'}")
