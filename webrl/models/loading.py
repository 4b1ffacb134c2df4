"""Load any Hugging Face causal LM folder (Llama-3.1-8B, GLM-4-9B, webrl-llama-3.1-8b, the tiny model).

Only local folders: every ``from_pretrained`` call passes ``local_files_only=True`` (the ``HF_HUB_OFFLINE``
behaviour without touching the environment), so a missing file is an error, never a download.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from webrl.config import Settings
from webrl.model_folders import is_adapter
from webrl.models.adapters import load_merged

log = logging.getLogger(__name__)

#: The manifest a published checkpoint folder holds (``webrl.store.checkpoints.MANIFEST_FILE``); its "version" names it.
VERSION_FILE = "webrl_checkpoint.json"
#: The longest version the database stores (its version columns are String(80)).
MAX_VERSION_CHARS = 80

_DTYPES: dict[str, torch.dtype | str] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": "auto",
}


class ModelNotFoundError(FileNotFoundError):
    """The model path is not a local Hugging Face folder (webrl never downloads)."""


def resolve_model_dir(path: str | Path) -> Path:
    """The folder at ``path``; raises :class:`ModelNotFoundError` naming what is missing."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ModelNotFoundError(f"model folder {folder} does not exist; webrl loads local folders only "
                                 "(run `webrl bootstrap` for the tiny model, or download weights yourself)")
    if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"{folder} has neither config.json nor adapter_config.json: not a Hugging Face "
                                 "model or adapter folder")
    return folder


def torch_dtype(settings: Settings) -> torch.dtype | str:
    return _DTYPES[settings.models.dtype]


def native_bf16() -> bool:
    """Whether the device computes bf16 natively: a CUDA GPU that supports it, or a CPU with AVX512-BF16 or AMX.
    Elsewhere bf16 is emulated, and slow (26x fp32 for a LoRA step on an AVX2-only CPU:
    ``services.trainer.sft.lora_base_dtype``)."""
    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def resolved_dtype(name: str) -> str:
    """A rollout's dtype name with ``auto`` resolved: bfloat16 where :func:`native_bf16`, else float32."""
    if name == "auto":
        return "bfloat16" if native_bf16() else "float32"
    return name


def with_dtype(settings: Settings, name: str) -> Settings:
    """``settings`` whose local models load in the dtype ``name`` (``auto``: :func:`resolved_dtype`)."""
    return settings.model_copy(update={"models": settings.models.model_copy(update={"dtype": resolved_dtype(name)})})


def load_tokenizer(path: str | Path, settings: Settings) -> PreTrainedTokenizerBase:
    """The folder's tokenizer, set up for batched generation: left padding, a pad token."""
    folder = resolve_model_dir(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True,
                                              trust_remote_code=settings.models.trust_remote_code)
    tokenizer.padding_side = "left"  # generation appends on the right; prompts line up on the left pad
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    attach_prompt_style(tokenizer, folder)
    return tokenizer


def attach_prompt_style(tokenizer: PreTrainedTokenizerBase, folder: str | Path) -> PreTrainedTokenizerBase:
    """Remember on ``tokenizer`` which actor system prompt its model is trained with (``webrl_prompt.json`` of the
    folder: "compact" for small bases; absent: WebRL's own), so every prompt built with it matches training."""
    from webrl.models.pretrained_base import PROMPT_FILE

    file = Path(folder) / PROMPT_FILE
    style = json.loads(file.read_text()).get("system_prompt", "webrl") if file.is_file() else "webrl"
    tokenizer.webrl_prompt_style = style
    return tokenizer


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """The tokenizer and, for a model trained with another prompt style than WebRL's, that style (the file
    :func:`attach_prompt_style` reads back)."""
    from webrl.models.pretrained_base import PROMPT_FILE

    tokenizer.save_pretrained(folder)
    style = getattr(tokenizer, "webrl_prompt_style", "webrl")
    if style != "webrl":
        (folder / PROMPT_FILE).write_text(json.dumps({"system_prompt": style}) + "\n")


def _concrete_dtype(settings: Settings) -> torch.dtype:
    dtype = torch_dtype(settings)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def use_configured_threads(settings: Settings) -> None:
    """``WEBRL_MODELS__TORCH_THREADS``, when set, as torch's intra-op thread count (process-wide: CPU inference and
    training in this process share it)."""
    if settings.models.torch_threads:
        torch.set_num_threads(settings.models.torch_threads)


def load_causal_lm(path: str | Path, settings: Settings, *, train: bool = False
                   ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a local folder (a full model, or an adapter folder: its base + the adapter,
    merged); dtype, device and CPU threads from ``settings``.

    The model is in eval mode unless ``train``.
    """
    folder = resolve_model_dir(path)
    use_configured_threads(settings)
    tokenizer = load_tokenizer(folder, settings)
    if is_adapter(folder):  # base (cached in this process) + adapter, merged
        model = load_merged(folder, settings, _concrete_dtype(settings))
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(settings), local_files_only=True,
                                                     trust_remote_code=settings.models.trust_remote_code)
    model.to(settings.models.device)
    model.train(train)
    log.info("loaded %s (%s parameters, %s on %s)", folder, f"{model.num_parameters():,}", model.dtype,
             settings.models.device)
    return model, tokenizer


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a turn: the tokenizer's eos plus the generation config's (Llama-3.1 has three)."""
    ids: list[int] = []
    configured: Any = getattr(model.generation_config, "eos_token_id", None)
    for value in ([configured] if isinstance(configured, int) else list(configured or [])):
        ids.append(int(value))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return sorted(set(ids))


def checkpoint_version(path: str | Path) -> str:
    """The version a folder declares in :data:`VERSION_FILE`, else its folder name; one longer than the version
    columns hold (:data:`MAX_VERSION_CHARS`) is bounded (:func:`bounded_version`)."""
    folder = Path(path)
    marker = folder / VERSION_FILE
    if marker.is_file():
        try:
            version = json.loads(marker.read_text()).get("version")
        except (json.JSONDecodeError, AttributeError):
            version = None
        if version:
            return bounded_version(str(version))
    return bounded_version(folder.name)


def bounded_version(version: str) -> str:
    """``version`` when the version columns hold it (``trajectories.actor_version``, ``orm_labels.orm_version``,
    ``critic_values.critic_version``: 80 characters); a longer one as its first 63 characters, "-" and 8 hex digits
    of the sha256 of the whole, so two long names that share their start stay apart."""
    if len(version) <= MAX_VERSION_CHARS:
        return version
    digest = hashlib.sha256(version.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{version[:63]}-{digest}"
