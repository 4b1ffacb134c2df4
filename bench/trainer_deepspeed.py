"""The trainer's actor update on 1 process and on 2 DeepSpeed ranks of this CPU: time and memory per rank.

    DS_ACCELERATOR=cpu .venv/bin/python bench/trainer_deepspeed.py [--hidden 512] [--layers 8] [--out FILE]

Builds a Llama of the given shape (no download), then runs ``services.trainer.update_check`` (the actor update of a
phase: reference pass, 2 epochs of the published objective, 8 optimizer steps of 2 micro-batches of 2) for the LoRA
adapter and for every weight, each case in processes of its own: one plain process (every core's threads, then 1
thread), and 2 ranks under ``accelerate launch`` with configs/accelerate/deepspeed_zero{2,3}.yaml (1 thread each).
Prints one JSON object: per run the loop's seconds (launch, compile and reference pass excluded), the ratio to one
process at every core's threads, and per rank the resident memory above what it held before loading the model, right
after training and at its peak. Needs deepspeed (``make test-distributed``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from webrl.models.tiny import TinySize, build_tiny_llama, build_tokenizer, grammar_corpus, save_tiny

ROOT = Path(__file__).resolve().parents[1]
CASES = ("actor-lora", "actor-full")
#: name, Accelerate config (None: one plain process), OpenMP threads (None: the default)
RUNS = (("one-process", None, None), ("one-process-1-thread", None, 1), ("zero2-2-ranks", "zero2", None),
        ("zero3-2-ranks", "zero3", None))


def build_model(out: Path, hidden: int, layers: int) -> Path:
    """A Llama of ``layers`` x ``hidden`` (SwiGLU 2.75 d, 8 heads, 4 kv heads) on a tokenizer of the action grammar."""
    from services.trainer.update_check import fixed_steps

    corpus = grammar_corpus() + [s.prompt for s in fixed_steps()] + [s.completion for s in fixed_steps()]
    tokenizer = build_tokenizer(corpus, out, vocab_size=1000)
    shape = TinySize(hidden_size=hidden, layers=layers, heads=8, kv_heads=4, intermediate_size=int(hidden * 2.75))
    return save_tiny(build_tiny_llama(tokenizer, shape, seed=0), tokenizer, out)


def run(model: Path, out: Path, config: str | None, case: str, threads: int | None) -> dict[str, Any]:
    """One case in one plain process (``config`` None) or on 2 ranks under the config (torch's launcher gives each
    1 thread); a process per case, so that its peak memory is this case's."""
    module = ["-m", "services.trainer.update_check", str(model), str(out), "--accumulate", "2", "--cases", case]
    launcher = [sys.executable] if config is None else [
        sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2",
        "--config_file", str(ROOT / "configs" / "accelerate" / f"deepspeed_{config}.yaml")]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    subprocess.run([*launcher, *module], check=True, cwd=ROOT, env=env)
    r = json.loads((out / f"{case}.json").read_text())

    def above_start(key: str) -> list[int]:
        return [round(v - s) for v, s in zip(r[key], r["start_rss_mb"], strict=True)]

    return {"seconds": round(r["seconds"], 2), "threads_per_process": r["threads"],
            "last_loss": r["steps"][-1]["actor_loss"], "trained_above_start_mb": above_start("trained_rss_mb"),
            "peak_above_start_mb": above_start("peak_rss_mb")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="webrl-bench-ds-") as tmp:
        model = build_model(Path(tmp) / "model", args.hidden, args.layers)
        results = {name: {case: run(model, Path(tmp) / name, config, case, threads) for case in CASES}
                   for name, config, threads in RUNS}
    for name, _, _ in RUNS[1:]:
        for case in CASES:
            results[name][case]["time_ratio_to_one_process"] = round(
                results[name][case]["seconds"] / results["one-process"][case]["seconds"], 2)
    report = {"hidden": args.hidden, "layers": args.layers, "cores": os.cpu_count(), "runs": results}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
