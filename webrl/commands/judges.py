"""``webrl train-orm``: the command line of :mod:`webrl.orchestration.train_orm` (options, which model is which,
errors named by their option)."""

from __future__ import annotations

from pathlib import Path

import typer

from webrl.commands import check_above_zero, check_loadable, check_output_folder
from webrl.config import get_settings
from webrl.method.hyperparams import DEFAULTS
from webrl.orchestration.train_orm import (
    DEFAULT_LORA_RANK,
    FULL_LR,
    LORA_LR,
    OBJECTIVES,
    TrainOrmOptions,
    default_policies,
    parse_policy,
    split_policy_cap,
    train_orm,
)
from webrl.prompts.orm_prompt import SMALL_ORM_MAX_PROMPT_TOKENS
from webrl.wire.contracts import MAX_CONCURRENCY, MAX_SEED


def resolve_models(artifacts: Path, base: str | None, actor: str | None) -> tuple[str, str | None]:
    """(what the ORM starts from, the SFT actor the "sft" policy runs or None) from ``--base`` and ``--actor``.

    ``--actor`` defaults to ``<artifacts>/models/actor-sft`` when that is a model folder, and ``--base`` to the
    actor; ``--base FOLDER`` alone is also the actor (what ``--base`` meant before ``--actor`` existed).
    Raises :class:`typer.BadParameter` naming the option at fault."""
    from webrl.model_folders import is_model_folder
    from webrl.models.pretrained_base import BASES

    if actor is not None and not is_model_folder(actor):
        raise typer.BadParameter(f"{actor} is not a model or adapter folder", param_hint="--actor")
    default_actor = artifacts / "models" / "actor-sft"
    found_actor = actor or (str(default_actor) if is_model_folder(default_actor) else None)
    if base is None:
        if found_actor is None:
            raise typer.BadParameter(f"no SFT actor at {default_actor} to start the ORM from: pass --base "
                                     f"{' or '.join(sorted(BASES))} (a pretrained base) or --base FOLDER, or run "
                                     "`webrl bootstrap`", param_hint="--base")
        return found_actor, found_actor
    if base in BASES:
        return base, found_actor
    if is_model_folder(base):
        return base, actor or base
    raise typer.BadParameter(f"{base!r} is neither a pretrained base ({', '.join(sorted(BASES))}) nor a model or "
                             "adapter folder (config.json or adapter_config.json)", param_hint="--base")


def check_start(base: str, lora_rank: int | None, max_prompt_tokens: int | None) -> None:
    """Options that contradict the kind of ``base`` (resolved by :func:`resolve_models`); raises BadParameter."""
    from webrl.model_folders import is_adapter
    from webrl.models.pretrained_base import BASES

    if base in BASES:
        return
    if is_adapter(base) and lora_rank is not None:
        raise typer.BadParameter(f"{base} is already a LoRA adapter: the ORM keeps training it at its own rank; "
                                 "leave --lora-rank out", param_hint="--lora-rank")
    if not is_adapter(base) and lora_rank is None and max_prompt_tokens is not None:
        raise typer.BadParameter("applies to a LoRA ORM (its folder records the budget); a fully fine-tuned ORM "
                                 "uses WEBRL_ORM__MAX_PROMPT_TOKENS, or add --lora-rank",
                                 param_hint="--max-prompt-tokens")

def check_report_dir(report_dir: str | None) -> str | None:
    """The ``--report-dir`` option's callback: a folder the report can be written to (not a file, no file on its
    way: :func:`webrl.commands.check_output_folder`), else a usage error naming the option."""
    check_output_folder(Path(report_dir) if report_dir is not None else None, "--report-dir")
    return report_dir


def register(app: typer.Typer) -> None:
    @app.command("train-orm")
    def train_orm_command(
        base: str = typer.Option(None, help="What the ORM starts from: a pretrained base (smollm2-135m: a new LoRA "
                                 "adapter on it), a LoRA adapter folder (trains on), or a model folder (fully "
                                 "fine-tuned unless --lora-rank). Default: the SFT actor (--actor)."),
        actor: str = typer.Option(None, help="SFT actor folder that the 'sft' policy rolls out. Default: "
                                  "<artifacts>/models/actor-sft when present; with --base FOLDER, that folder."),
        output: str = typer.Option(None, help="Where to publish the ORM. Default: <artifacts>/models/orm."),
        policy: list[str] = typer.Option(None, help="Rollout policies: oracle, oracle:<corrupt>, sft, "
                                         "checkpoint:<path>, endpoint:<url>; POLICY@N rolls it out on at most N "
                                         "train tasks (every test task still). Repeat the option. Default: oracle, "
                                         "oracle:0.3, oracle:0.6 and, when there is an SFT actor, sft."),
        train_tasks: int = typer.Option(None, min=1, help="At most this many train-split tasks."),
        test_tasks: int = typer.Option(None, min=1, help="At most this many test-split tasks."),
        lora_rank: int = typer.Option(None, min=1, max=1024, help="Rank of the ORM's new LoRA adapter. Default: "
                                      f"{DEFAULT_LORA_RANK} on a pretrained base; a model folder is fully fine-tuned."),
        max_prompt_tokens: int = typer.Option(None, min=64, help="Prompt budget of a LoRA ORM (the last page is cut "
                                              "to fit; the ORM folder records it). Default: "
                                              f"{SMALL_ORM_MAX_PROMPT_TOKENS} on a pretrained base (examples "
                                              "under ~1,000 tokens), else WEBRL_ORM__MAX_PROMPT_TOKENS."),
        objective: str = typer.Option("head", help="What the ORM learns: 'head' (a classification head on the frozen "
                                      "backbone's state; measured best on a CPU) or 'answer' (WebRL's YES/NO token, "
                                      "trained by SFT)."),
        epochs: int = typer.Option(2, min=1, help="SFT epochs (--objective answer)."),
        backbone_epochs: int = typer.Option(0, min=0, max=100, help="--objective head: epochs of training the "
                                            "backbone's LoRA adapter with the head after the frozen fit; the epoch "
                                            "that scores best on held-out train tasks is kept. 0: the frozen "
                                            "backbone (forward passes only). Measured on SmolLM2: one epoch at 2e-4 "
                                            "on 360 sandbox trajectories scored worse there, 26 min on 2 cores "
                                            "(docs/measurements.md)."),
        lr: float = typer.Option(None, callback=lambda lr: check_above_zero(lr, "--lr"),
                                 help=f"Learning rate of the SFT (--objective answer) or of the "
                                 f"backbone (--backbone-epochs). Default {FULL_LR:g} (full fine-tuning), "
                                 f"{LORA_LR:g} (LoRA)."),
        batch_size: int = typer.Option(8, min=1, help="Trajectories per optimizer step (--objective answer, "
                                       "--backbone-epochs)."),
        seed: int = typer.Option(0, min=0, max=MAX_SEED, help="Seed of the task samples, the class balance and the "
                                 "ORM's training."),
        max_minutes: float = typer.Option(None, callback=lambda minutes: check_above_zero(minutes, "--max-minutes"),
                                          help="Wall-clock budget of the SFT (--objective answer) "
                                          "or of the backbone's training (--backbone-epochs)."),
        concurrency: int = typer.Option(4, min=1, max=MAX_CONCURRENCY, help="Episodes in flight per rollout."),
        threshold: float = typer.Option(DEFAULTS.reward.orm_threshold, min=0.0, max=1.0,
                                        help="reward = 1 if p >= threshold."),
        report_dir: str = typer.Option(None, callback=lambda report_dir: check_report_dir(report_dir),
                                       help="Report folder. Default: <artifacts>/reports/orm."),
    ) -> None:
        """Train the ORM on evaluator-labelled sandbox trajectories and report how often it is wrong."""
        settings = get_settings()
        artifacts = Path(str(settings.artifacts_dir))
        if objective not in OBJECTIVES:
            raise typer.BadParameter(f"{objective!r}: use one of {', '.join(OBJECTIVES)}", param_hint="--objective")
        if backbone_epochs and objective != "head":
            raise typer.BadParameter("trains the classification head's backbone: use --objective head",
                                     param_hint="--backbone-epochs")
        base, actor = resolve_models(artifacts, base, actor)
        check_start(base, lora_rank, max_prompt_tokens)
        if actor is not None:  # rolled out as a checkpoint policy
            check_loadable(settings, Path(actor), "--actor", configured=settings.actor.model)
        from webrl.models.pretrained_base import BASES

        if base != actor and base not in BASES:  # the ORM's SFT starts from it
            check_loadable(settings, Path(base), "--base", configured=settings.orm.model)
        policies = list(policy) if policy else default_policies(actor)
        from webrl.policies.specs import check_policy_spec
        from webrl.serving.paths import confined_path
        from webrl.wire.contracts import InvalidRequest

        try:  # each policy's job and the ORM's publish check these again; refused here, before any rollout
            for text in policies:
                check_policy_spec(parse_policy(split_policy_cap(text)[0], actor, seed), settings)
        except (ValueError, InvalidRequest) as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy") from exc
        try:
            confined_path(settings, str(output or artifacts / "models" / "orm"), "--output")
        except InvalidRequest as exc:
            raise typer.BadParameter(str(exc).removeprefix("--output: "), param_hint="--output") from exc
        options = TrainOrmOptions(base=base, output=str(Path(output or artifacts / "models" / "orm").resolve()),
                                  actor=actor, policies=policies, train_tasks=train_tasks, test_tasks=test_tasks,
                                  lora_rank=lora_rank, max_prompt_tokens=max_prompt_tokens, objective=objective,
                                  epochs=epochs, backbone_epochs=backbone_epochs, lr=lr,
                                  batch_size=batch_size, seed=seed, max_minutes=max_minutes, concurrency=concurrency,
                                  threshold=threshold, report_dir=report_dir)
        note = f" ('sft' = {actor})" if "sft" in policies else "" if actor else " (no SFT actor: no 'sft' policy)"
        typer.echo(f"ORM from {base}; policies {', '.join(policies)}{note}")
        from webrl.commands.train import ensure_ready, sandbox_if_needed
        from webrl.models.pretrained_base import BaseUnavailableError

        try:
            ensure_ready(settings)  # a fresh home: migrated and the sandbox suite loaded, as `webrl train` does
            with sandbox_if_needed(settings):
                report = train_orm(settings, options, say=typer.echo)
        except (ValueError, BaseUnavailableError) as exc:
            typer.echo(f"train-orm: {exc}", err=True)
            raise typer.Exit(2) from exc
        for name, values in report["metrics"].items():
            auc = "n/a" if values["auc"] is None else f"{values['auc']:.3f}"
            typer.echo(f"{name}: accuracy {values['accuracy']:.3f} precision {values['precision']:.3f} "
                       f"recall {values['recall']:.3f} F1 {values['f1']:.3f} ECE {values['ece']:.3f} AUC {auc} "
                       f"(n={int(values['n'])})")
        typer.echo(f"ORM at {report['orm']['path']} (from {report['start']['path']}); "
                   f"calibration plot {report['calibration_png']}")
