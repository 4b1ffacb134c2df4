"""One backward of a LoRA adapter on a bf16 base, in one process and under DeepSpeed ZeRO-3, each against fp32
arithmetic on the same weights: is ZeRO-3's gradient less accurate than one process's, or rounded another way?

    DS_ACCELERATOR=cpu .venv/bin/python bench/zero3_bf16_gradients.py [--ranks 1] [--out FILE]

Why: `make test-distributed` finds ZeRO-3 matching one process to 2e-8 on an fp32 base, but on a bf16 base (the
phase's default on a CPU with native bf16) the adapter ends 1.2e-3 apart after 8 optimizer steps (docs/measurements.md).
Here a tiny Llama (no download) gets a LoRA adapter (rank 4) whose B matrices are set away from 0, so that every
adapter's gradient flows through the others, and three processes take the gradient of the same language-model loss
on the same tokens (the update check's fixed steps): the base in bf16 in one plain process (the baseline), the same
under ``accelerate launch`` with configs/accelerate/deepspeed_zero3.yaml on ``--ranks`` CPU ranks (each rank the
same batch, so their average is the batch's gradient), and the bf16 weights cast to fp32 in one process (the
reference: the same weights without bf16 rounding in the backward). Prints per adapter matrix each bf16 gradient's
relative distance to the reference and to each other, then the ratio ZeRO-3 error / one-process error over all of
them: about 1 means ZeRO-3 is as accurate and the gap between the two is rounding. Needs deepspeed
(``make test-distributed``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MODES = ("one-process", "zero3", "fp32-reference")


def build_model(out: Path) -> Path:
    """The update check's tiny Llama shape ("test"), on a tokenizer of the action grammar and the fixed steps."""
    from services.trainer.update_check import fixed_steps
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, grammar_corpus, save_tiny

    corpus = grammar_corpus() + [s.prompt for s in fixed_steps()] + [s.completion for s in fixed_steps()]
    tokenizer = build_tokenizer(corpus, out, vocab_size=1000)
    return save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, out)


def gradients(model_dir: Path, mode: str) -> dict[str, torch.Tensor]:
    """The adapter's gradient of the mean next-token loss on the fixed steps' texts, computed as ``mode`` says; under
    ZeRO-3 gathered whole on every rank."""
    from services.trainer.sft import load_for_training
    from services.trainer.update_check import fixed_steps
    from webrl.models.adapters import LoraSpec

    torch.manual_seed(0)  # the adapter's A matrices
    model, tokenizer = load_for_training(model_dir, lora=LoraSpec(rank=4, alpha=8), base_dtype=torch.bfloat16)
    if mode == "fp32-reference":
        model = model.float()  # the bf16-rounded base weights, now computed in fp32
    generator = torch.Generator().manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # away from PEFT's zeros: gradients then flow through every adapter
            param.data.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    texts = [s.prompt + " " + s.completion for s in fixed_steps()[::4]]  # a step of each trajectory
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=256)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    if mode != "zero3":
        model.train()
        model(**batch, labels=labels).loss.backward()
        return {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    from deepspeed.utils import safe_get_full_grad

    from services.trainer.training_loop import make_accelerator, prepare
    from services.trainer.update_check import loop_config

    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    config = loop_config(ranks, ranks, lr=0.0, epochs=1, max_grad_norm=1e9)  # one micro-batch per rank, no clip
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    prepared.model.train()
    accelerator.backward(prepared.model(**batch, labels=labels).loss)
    return {n: safe_get_full_grad(p).float().clone().view(p.ds_shape)
            for n, p in accelerator.unwrap_model(prepared.model).named_parameters() if p.requires_grad}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / a.norm().clamp_min(1e-30))


def compare(grads: dict[str, dict[str, torch.Tensor]]) -> dict[str, object]:
    """Per adapter matrix and over all of them: each bf16 gradient's distance to the reference, and to each other."""
    ref, one, z3 = grads["fp32-reference"], grads["one-process"], grads["zero3"]
    rows = {name.split("layers.")[-1]: {"one_process_vs_fp32": relative(ref[name], one[name]),
                                        "zero3_vs_fp32": relative(ref[name], z3[name]),
                                        "zero3_vs_one_process": relative(one[name], z3[name])}
            for name in ref}
    flat = {mode: torch.cat([g[n].flatten() for n in ref]) for mode, g in grads.items()}
    total = {"one_process_vs_fp32": relative(flat["fp32-reference"], flat["one-process"]),
             "zero3_vs_fp32": relative(flat["fp32-reference"], flat["zero3"]),
             "zero3_vs_one_process": relative(flat["one-process"], flat["zero3"])}
    total["ratio_zero3_error_to_one_process_error"] = total["zero3_vs_fp32"] / total["one_process_vs_fp32"]
    return {"per_matrix": rows, "all": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1, help="ZeRO-3 ranks (each takes the same batch)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--grads", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        grads = gradients(args.model, args.worker)
        if int(os.environ.get("RANK", "0")) == 0:
            torch.save(grads, args.grads)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model")
        grads = {}
        for mode in MODES:
            launcher = [sys.executable] if mode != "zero3" else [
                sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(args.ranks),
                "--config_file", str(ROOT / "configs" / "accelerate" / "deepspeed_zero3.yaml")]
            out = Path(tmp) / f"{mode}.pt"
            subprocess.run([*launcher, str(Path(__file__).resolve()), "--worker", mode, "--model", str(model),
                            "--grads", str(out)], check=True, cwd=ROOT, env={**os.environ, "DS_ACCELERATOR": "cpu"})
            grads[mode] = torch.load(out)
    result = {"ranks": args.ranks, **compare(grads)}
    print(f"{'adapter matrix':48s} {'one process':>12s} {'ZeRO-3':>12s} {'between':>12s}  (relative to fp32)")
    for name, row in result["per_matrix"].items():
        print(f"{name:48s} {row['one_process_vs_fp32']:12.2e} {row['zero3_vs_fp32']:12.2e} "
              f"{row['zero3_vs_one_process']:12.2e}")
    total = result["all"]
    print(f"{'all':48s} {total['one_process_vs_fp32']:12.2e} {total['zero3_vs_fp32']:12.2e} "
          f"{total['zero3_vs_one_process']:12.2e}")
    print(f"ZeRO-3's error / one process's error: {total['ratio_zero3_error_to_one_process_error']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
