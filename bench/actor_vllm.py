"""Actor steps per second: the local backend and a vLLM server on the same distinct prompts, in one run, and their
ratio.

    .venv/bin/python bench/actor_vllm.py                                  # shipped SFT adapter on SmolLM2, vLLM CPU
    .venv/bin/python bench/actor_vllm.py --requests 32 --concurrency 16   # the issue's setting: minutes
    .venv/bin/python bench/actor_vllm.py --no-adapter --out report.json   # the base alone (vLLM without LoRA)

vLLM runs from its own interpreter (``--vllm-python``, default ``$WEBRL_VLLM_PYTHON``, else
``~/.cache/webrl/venv-vllm/bin/python`` from ``make vllm-env``); without one the bench says so and exits 0 (so
``make bench`` passes on a machine without it). Each request is one actor step: the actor prompt of a
sandbox-sized page (bench/actor.py's ``page``) whose intent *starts* with the request's own number, so that the
prompts differ right after the shared system turn and ``Task Instruction:`` and neither backend's prefix cache can
answer one request from another's; ``--new-tokens`` greedy tokens. The backends run one after the other (the
local model is freed before vLLM starts), each on ``--threads`` CPU threads, each first warmed up on two
prompts outside the measured set. "Greedy = local" counts the requests whose token ids vLLM matched (vLLM computes
in bf16, the local backend in fp32: a near-tie may flip).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from actor import INTENTS, WORDS, page

from webrl.config import get_settings
from webrl.models.backends import Generation
from webrl.models.backends.local import LocalBackend
from webrl.models.backends.openai_compat import OpenAIBackend
from webrl.models.backends.vllm_server import (
    VLLM_PYTHON_ENV,
    free_port,
    running_vllm,
    vllm_command,
)
from webrl.prompts.actor import render_actor_prompt

SFT = Path(__file__).resolve().parents[1] / "webrl" / "assets" / "actor-sft-smollm2"
DEFAULT_VLLM_PYTHON = Path.home() / ".cache" / "webrl" / "venv-vllm" / "bin" / "python"  # `make vllm-env`


def distinct_prompts(tokenizer, n: int, offset: int = 0) -> list[str]:
    """``n`` actor prompts that differ from their intent's first token on."""
    return [render_actor_prompt(tokenizer, f"{i + 1}. " + INTENTS[i % 3].format(x=WORDS[i % len(WORDS)]), [],
                                page(i), max_tokens=1024) for i in range(offset, offset + n)]


def concurrently(generate, texts: list[str], concurrency: int) -> tuple[float, list[Generation]]:
    """``concurrency`` callers, one step each: (seconds, generations in order)."""
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        start = time.perf_counter()
        generations = list(pool.map(generate, texts))
        return time.perf_counter() - start, generations


def vllm_python(arg: str | None) -> str | None:
    chosen = arg or os.environ.get(VLLM_PYTHON_ENV) or (str(DEFAULT_VLLM_PYTHON) if DEFAULT_VLLM_PYTHON.exists()
                                                         else None)
    return chosen if chosen and Path(chosen).exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", help="Interpreter with vLLM (default: $WEBRL_VLLM_PYTHON, else make "
                                              "vllm-env's).")
    parser.add_argument("--base", default="smollm2-135m", help="Registered base, converted on first use.")
    parser.add_argument("--adapter", type=Path, default=SFT, help="Adapter folder on that base (default: shipped).")
    parser.add_argument("--no-adapter", action="store_true", help="Serve the base alone (vLLM without LoRA).")
    parser.add_argument("--requests", type=int, default=8, help="Distinct prompts measured.")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each backend.")
    parser.add_argument("--out", type=Path, help="Also write the report as JSON here.")
    args = parser.parse_args()
    python = vllm_python(args.vllm_python)
    if python is None:
        print(f"no vLLM interpreter (--vllm-python, ${VLLM_PYTHON_ENV}, or `make vllm-env`): skipped")
        return

    from webrl.models.pretrained_base import ensure_base

    settings = get_settings().replace(actor={"max_batch": args.concurrency},
                                      models={"torch_threads": args.threads})
    base = ensure_base(settings, args.base)
    folder = base if args.no_adapter else args.adapter
    local = LocalBackend.from_path(folder, settings)
    local.prefix_cache = True
    texts = distinct_prompts(local.tokenizer, args.requests)
    warm = distinct_prompts(local.tokenizer, 2, offset=args.requests)
    prompt_tokens = sum(len(local.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) / len(texts)
    for t in warm:
        local.generate([t], args.new_tokens, 0.0)
    local_s, expected = concurrently(lambda t: local.generate([t], args.new_tokens, 0.0)[0], texts,
                                     args.concurrency)
    local.close()

    port = free_port()
    name = str(folder)
    lora = None if args.no_adapter else {name: folder}
    command = vllm_command(python, base, port, served_name=str(base) if lora else name, lora_modules=lora,
                           max_model_len=2048)
    with tempfile.TemporaryDirectory() as tmp, running_vllm(command, port, Path(tmp) / "vllm.log",
                                                            threads=args.threads) as server:
        remote = OpenAIBackend(server.url, name)
        for t in warm:
            remote.generate([t], args.new_tokens, 0.0)
        vllm_s, got = concurrently(lambda t: remote.generate([t], args.new_tokens, 0.0)[0], texts,
                                   args.concurrency)
        remote.close()

    n = len(texts)
    report = {"model": f"{args.base}" + ("" if args.no_adapter else f" + {args.adapter.name}"),
              "requests": n, "concurrency": args.concurrency, "new_tokens": args.new_tokens,
              "threads": args.threads, "prompt_tokens": prompt_tokens, "load_average": os.getloadavg()[0],
              "local_steps_per_s": n / local_s, "vllm_steps_per_s": n / vllm_s, "vllm_over_local": local_s / vllm_s,
              "greedy_same": sum(g.token_ids == e.token_ids for g, e in zip(got, expected, strict=True))}
    print(f"{report['model']}: {n} distinct prompts of ~{prompt_tokens:.0f} tokens, {args.new_tokens} greedy "
          f"tokens, concurrency {args.concurrency}, {args.threads} threads each (load average "
          f"{report['load_average']:.1f})")
    print(f"  local backend (fp32, prefix cache on)  {report['local_steps_per_s']:.3f} steps/s")
    print(f"  vLLM (bf16)                           {report['vllm_steps_per_s']:.3f} steps/s")
    print(f"  vLLM / local                          {report['vllm_over_local']:.2f}x; greedy = local "
          f"{report['greedy_same']}/{n}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
