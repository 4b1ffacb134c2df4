"""The null an update's losses are read against: a random change of the start actor's adapter, as large as an update.

An update of a phase gains some of the start actor's unsolved test tasks and loses some of its solved ones. Are the
losses what the update learnt, or would any change of that size lose them? This bench adds seeded Gaussian noise to
every LoRA weight of the start actor (each tensor's noise scaled to its own RMS, one factor sigma for all), finds by
bisection the sigma whose flips on the probe (``webrl.models.probe``: the share of steps the SFT actor gets right whose
greedy action changes) match a target, typically an update's, and scores the perturbed actor on the same task sample
as the offline bench (``bench/phase_offline.py``): tasks gained and lost against the start actor, seen and held-out
templates apart.

    # the flips of the anchored update (7.5%) and of the preset's (about 20%), on the 65-task template sample
    python bench/perturbation_null.py --flips 0.075 --flips 0.20 --tasks 65 --stratified

Results: a table on the terminal and ``results.json`` under ``--output``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from phase_offline import PROBE, SFT_ACTOR, against_start, sample_groups, sample_keys, save_actor, solved_on

from services.trainer.sft import COMPLETION_BUDGET
from webrl.config import get_settings
from webrl.models.probe import encode_probe, flips, load_probe, probe_matches

app = typer.Typer(add_completion=False)
console = Console()


def lora_weights(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's trainable tensors by name (the LoRA A and B matrices)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


@torch.no_grad()
def perturb(model: Any, original: dict[str, torch.Tensor], sigma: float, seed: int) -> None:
    """Set every adapter tensor to original + sigma * rms(original) * N(0, 1), the noise seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    for name, p in lora_weights(model).items():
        base = original[name]
        rms = float(base.float().pow(2).mean().sqrt())
        noise = torch.randn(base.shape, generator=generator, dtype=torch.float32)
        p.copy_((base.float() + sigma * rms * noise).to(p.dtype))


def calibrate(model: Any, original: dict[str, torch.Tensor], measure: Callable[[], float], target: float,
              seed: int, *, tries: int = 8, tolerance: float = 0.015) -> tuple[float, float]:
    """(sigma, what ``measure`` read there): bisection on log sigma until ``measure()`` of the perturbed model (the
    probe's flips) is within ``tolerance`` of ``target``, or the closest one after ``tries``."""
    low, high = math.log(1e-3), math.log(3.0)
    best: tuple[float, float] | None = None
    for _ in range(tries):
        sigma = math.exp((low + high) / 2)
        perturb(model, original, sigma, seed)
        measured = measure()
        console.print(f"sigma {sigma:.4f}: {measured:.3f}")
        if best is None or abs(measured - target) < abs(best[1] - target):
            best = (sigma, measured)
        if abs(measured - target) <= tolerance:
            break
        if measured < target:
            low = math.log(sigma)
        else:
            high = math.log(sigma)
    assert best is not None
    return best


@app.command()
def main(
    flips_target: list[float] = typer.Option(..., "--flips", help="The probe flips to match (repeat)."),
    actor: Path = typer.Option(SFT_ACTOR, help="The start actor (a LoRA adapter folder)."),
    probe: Path = typer.Option(PROBE, help="Its flips probe."),
    tasks: int = typer.Option(65, min=1, help="Evaluate greedily on a fixed sample of this many test tasks."),
    stratified: bool = typer.Option(True, help="The template-stratified sample (65: one task of every template)."),
    max_steps: int = typer.Option(8, min=1, help="Horizon of that evaluation."),
    seed: int = typer.Option(0, help="Seed of the noise."),
    output: Path = typer.Option(Path(".webrl/bench/perturbation_null"), help="Where results.json goes."),
) -> None:
    """Perturb the start actor at random to each target flips and score it against the start actor."""
    from services.trainer.sft import load_for_training
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import load_suite

    settings = get_settings()
    model, tokenizer = load_for_training(actor, settings)
    if not lora_weights(model):
        raise typer.BadParameter(f"{actor} has no adapter weights to perturb", param_hint="--actor")
    original = {name: p.detach().clone() for name, p in lora_weights(model).items()}
    probe_set = load_probe(probe)
    encoded = encode_probe(tokenizer, probe_set, settings.actor.max_prompt_tokens + COMPLETION_BUDGET)
    upgrade(settings)
    load_suite(settings, settings.seed)
    results: list[dict[str, Any]] = []
    with running_sandbox(settings, sandbox_ports(settings)):
        keys, suite = sample_keys(settings, tasks, stratified)
        groups = sample_groups(settings, keys)
        baseline, source = solved_on(settings, actor, keys, max_steps, suite)
        console.print(f"start actor: {len(baseline)}/{len(keys)} of the task sample ({source})")
        for target in flips_target:
            started = time.perf_counter()
            sigma, measured = calibrate(model, original, lambda: flips(probe_set, probe_matches(
                model, tokenizer, encoded))["flips"], target, seed)
            perturb(model, original, sigma, seed)
            name = f"noise-flips-{target:g}"
            folder = save_actor(settings, model, tokenizer, settings.artifacts_dir / "bench" / "perturbation_null" /
                                name, name)
            solved, _ = solved_on(settings, folder, keys, max_steps, suite)
            results.append({"setting": name, "target_flips": target, "sigma": sigma, "flips": measured,
                            "seed": seed, "solved": len(solved), "tasks": len(keys),
                            "gained": sorted(solved - baseline), "lost": sorted(baseline - solved),
                            "minutes": round((time.perf_counter() - started) / 60, 2),
                            **against_start(name, keys, groups, baseline, solved)})
            output.mkdir(parents=True, exist_ok=True)
            (output / "results.json").write_text(json.dumps({"actor": actor.name, "baseline_solved": sorted(baseline),
                                                             "tasks": keys, "results": results}, indent=2) + "\n")
    table = Table("setting", "sigma", "flips", "solved", "gained", "lost", "min")
    for r in results:
        table.add_row(r["setting"], f"{r['sigma']:.4f}", f"{r['flips']:.3f}", f"{r['solved']}/{r['tasks']}",
                      str(len(r["gained"])), str(len(r["lost"])), str(r["minutes"]))
    console.print(table)
    console.print(f"results: {output / 'results.json'}")


if __name__ == "__main__":
    app()
