"""LoRA adapters on a frozen base: how actor, critic and ORM train and ship on a small machine.

A checkpoint is either a full Hugging Face folder (``config.json`` + weights) or an **adapter folder**: peft's
``adapter_config.json`` + ``adapter_model.safetensors`` (MBs), the tokenizer, and :data:`ADAPTER_FILE`, which
names the base it was trained on (a registered base's name, version and sha256, or a folder path). Loading an
adapter folder loads the base, checks its sha256, and applies the adapter; nothing is downloaded.

Bases are held in memory once per process (:func:`cached_base`), so hot-reloading a new adapter reads only the
adapter: the base is copied in memory, the adapter loaded onto the copy and merged into it
(``merge_and_unload``), which leaves a plain model that decodes as fast as the base itself.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from webrl.config import Settings
from webrl.model_folders import PEFT_CONFIG_FILE, is_adapter

log = logging.getLogger("webrl.models.adapters")

# peft (0.21) still reads transformers' old attribute name when it wraps a model, and transformers 5 warns about it
# on every adapter loaded; the name is peft's to change, the warning only clutters progress output.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

#: webrl's record of the base an adapter belongs to.
ADAPTER_FILE = "webrl_adapter.json"
#: peft's file of an adapter's weights (safetensors).
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: Every linear layer of a Llama block: adapting attention and MLP both (measured with rank 16 on SmolLM2-135M:
#: 10% slower per token than q/v only; the MLP is where a small model stores what it copies).
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSpec:
    """A new LoRA adapter: W' = W + (alpha / rank) * B A, with A (rank x d_in), B (d_out x rank), B = 0 at init
    (Hu et al. 2021, eq. 3)."""

    rank: int = 16
    """r: the adapter's inner dimension (16: 4.9M trainable parameters on SmolLM2-135M, 3.6% of the base)."""
    alpha: int = 32
    """Scale numerator: the update is multiplied by alpha / r (2 here, the common 2r convention)."""
    dropout: float = 0.0
    """Dropout on the adapter's input; 0 because a few hundred steps on a CPU are far from overfitting."""
    target_modules: tuple[str, ...] = LLAMA_LINEAR

    def peft_config(self, task_type: str | None = "CAUSAL_LM") -> Any:
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=list(self.target_modules), task_type=task_type)


class AdapterError(RuntimeError):
    """An adapter folder whose base is missing or is not the base it was trained on."""


def base_identity(folder: str | Path) -> dict[str, Any]:
    """What an adapter trained on the full model at ``folder`` records about it: a registered base's name, version
    and content sha256 (``webrl.models.pretrained_base.base_content_sha256``: the weights, tokenizer and configuration,
    not the transformers version that wrote them); any other folder by its absolute path."""
    from webrl.models.pretrained_base import base_content_sha256, read_provenance

    folder = Path(folder)
    manifest = read_provenance(folder)
    if manifest is not None:
        return {"name": manifest["metrics"]["name"], "version": manifest["version"],
                "content_sha256": base_content_sha256(folder)}
    return {"path": str(folder.resolve())}


def write_adapter_record(folder: Path, base: dict[str, Any], lora: dict[str, Any] | None = None) -> None:
    (folder / ADAPTER_FILE).write_text(json.dumps({"base": base, "lora": lora or {}}, indent=2, sort_keys=True)
                                       + "\n")


def resolve_base(adapter: str | Path, settings: Settings) -> Path:
    """The base folder an adapter folder was trained on, converted from its wheel if needed, and checked to be
    that base: by content sha256, or, in a record written before content sha256 existed, by folder sha256 (which
    also changes with the transformers version that converted the base)."""
    from webrl.models.pretrained_base import BASES, base_content_sha256, ensure_base, read_provenance

    record_file = Path(adapter) / ADAPTER_FILE
    if not record_file.is_file():
        raise AdapterError(f"{adapter} has {PEFT_CONFIG_FILE} but no {ADAPTER_FILE}: which base it needs is unknown")
    base = json.loads(record_file.read_text())["base"]
    if "path" in base:
        return Path(base["path"])
    if base.get("name") not in BASES:
        raise AdapterError(f"{adapter} was trained on base {base.get('name')!r}, which webrl does not know")
    folder = ensure_base(settings, base["name"])
    if base.get("content_sha256"):
        kind, wanted, found = "content sha256", base["content_sha256"], base_content_sha256(folder)
    else:
        kind, wanted, found = "sha256", base.get("sha256"), (read_provenance(folder) or {}).get("sha256")
    if wanted and found != wanted:
        raise AdapterError(f"{adapter} was trained on {base['name']} with {kind} {wanted[:12]}, but {folder} has "
                           f"{str(found)[:12]}: rebuild the base (`webrl models base {base['name']}`)")
    return folder


def model_folder(path: str | Path, settings: Settings) -> Path:
    """The folder holding the full weights for ``path``: itself, or an adapter's base."""
    return resolve_base(path, settings) if is_adapter(path) else Path(path)


# Loading
_BASES: dict[tuple[str, str, str], torch.nn.Module] = {}
_BASES_LOCK = threading.Lock()


def cached_base(folder: Path, dtype: torch.dtype, *, auto_class: str = "AutoModelForCausalLM") -> torch.nn.Module:
    """The base at ``folder`` loaded once per process (eval mode, no gradients); callers copy it before changing it."""
    import transformers

    key = (str(folder.resolve()), str(dtype), auto_class)
    with _BASES_LOCK:
        if key not in _BASES:
            model = getattr(transformers, auto_class).from_pretrained(str(folder), local_files_only=True, dtype=dtype)
            model.eval().requires_grad_(False)
            _BASES[key] = model
        return _BASES[key]


def load_merged(adapter: str | Path, settings: Settings, dtype: torch.dtype,
                auto_class: str = "AutoModelForCausalLM") -> torch.nn.Module:
    """Inference: a copy of the cached base with the adapter merged in (a plain transformers model)."""
    from peft import PeftModel

    base = copy.deepcopy(cached_base(resolve_base(adapter, settings), dtype, auto_class=auto_class))
    return PeftModel.from_pretrained(base, str(adapter), is_trainable=False).merge_and_unload()


def load_trainable(path: str | Path, settings: Settings, dtype: torch.dtype, *, lora: LoraSpec | None,
                   auto_class: str = "AutoModelForCausalLM") -> torch.nn.Module:
    """Training: an adapter folder's adapter (trainable) on its base, or a new ``lora`` adapter on the full
    folder ``path``. The base's own weights stay frozen; the model remembers its base for publishing."""
    import transformers
    from peft import PeftModel, get_peft_model

    task_type = "CAUSAL_LM" if auto_class == "AutoModelForCausalLM" else None
    if is_adapter(path):
        base_folder = resolve_base(path, settings)
        base = getattr(transformers, auto_class).from_pretrained(str(base_folder), local_files_only=True, dtype=dtype)
        model = PeftModel.from_pretrained(base, str(path), is_trainable=True)
        for config in model.peft_config.values():  # peft's own pointer: the folder the adapter was trained on, on
            config.base_model_name_or_path = str(base_folder)  # the machine that trained it; here, the resolved one
        record = json.loads((Path(path) / ADAPTER_FILE).read_text())
        identity, spec = record["base"], record.get("lora", {})
    else:
        if lora is None:
            raise ValueError("a full model folder trains as a LoRA adapter only when a LoraSpec is given")
        base = getattr(transformers, auto_class).from_pretrained(str(path), local_files_only=True, dtype=dtype)
        model = get_peft_model(base, lora.peft_config(task_type))
        identity, spec = base_identity(path), asdict(lora)
    model.webrl_adapter_record = {"base": identity, "lora": spec}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("adapter on %s: %s trainable parameters", identity, f"{trainable:,}")
    return model


def adapter_lora_spec(adapter: str | Path) -> LoraSpec:
    """The :class:`LoraSpec` an adapter folder was trained with, from its record (:data:`ADAPTER_FILE`)."""
    spec = json.loads((Path(adapter) / ADAPTER_FILE).read_text()).get("lora") or {}
    if "target_modules" in spec:
        spec = {**spec, "target_modules": tuple(spec["target_modules"])}
    return LoraSpec(**spec)


def copy_causal_lm_adapter(model: Any, adapter: str | Path) -> int:
    """Set every LoRA weight of ``model`` (a peft model on the bare transformer, ``AutoModel``, with the adapter's
    own :class:`LoraSpec`) to the causal-LM adapter folder ``adapter``'s: the same weights, whose names go through
    the language model's head (``base_model.model.model.layers...``) where the bare model's do not
    (``base_model.model.layers...``). So the bare model's states are those of the adapted language model. Refuses an
    adapter with weights outside the transformer, or one that leaves a LoRA weight of ``model`` unset; returns how
    many tensors were copied."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = Path(adapter) / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise AdapterError(f"{adapter} has no {ADAPTER_WEIGHTS} to copy")
    prefix = "base_model.model.model."
    state = load_file(str(weights))
    outside = sorted(k for k in state if not k.startswith(prefix))
    if outside:
        raise AdapterError(f"{adapter} adapts more than the transformer's layers (e.g. {outside[0]}); its states "
                           "cannot be reproduced on the bare model")
    result = set_peft_model_state_dict(model, {"base_model.model." + k.removeprefix(prefix): v
                                               for k, v in state.items()})
    unset = [k for k in result.missing_keys if "lora_" in k]
    if unset or result.unexpected_keys:
        raise AdapterError(f"{adapter}'s weights do not fit the model's adapter: {len(unset)} unset "
                           f"(e.g. {unset[:1]}), {len(result.unexpected_keys)} unexpected "
                           f"(e.g. {result.unexpected_keys[:1]})")
    return len(state)


def sort_target_modules(config_file: Path) -> None:
    """peft writes ``target_modules`` from a set, in an order that changes with Python's string hashing, so the
    same adapter saved twice differed in its bytes (and its folder sha256: the feature cache, the manifests). Sorted
    here, the folder is a function of its contents."""
    config = json.loads(config_file.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def name_base_in_config(config_file: Path, base: dict[str, Any]) -> None:
    """peft records the base as the folder it was loaded from, a path on the machine that trained the adapter; a
    registered base is named instead (``smollm2-135m``): :func:`resolve_base` finds it from :data:`ADAPTER_FILE`,
    and nothing reads peft's field back (webrl loads the base itself, then the adapter onto it)."""
    if "name" not in base:
        return
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = base["name"]
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_adapter(model: Any, folder: Path, state_dict: dict[str, Any] | None = None) -> None:
    """Write a peft model's adapter (not its base) and the record of its base into ``folder``."""
    record = getattr(model, "webrl_adapter_record", None)
    if record is None:
        raise AdapterError("this peft model was not loaded by webrl.models.adapters: its base is unknown")
    model.save_pretrained(str(folder), state_dict=state_dict, safe_serialization=True)
    (folder / "README.md").unlink(missing_ok=True)  # peft's empty model-card template; the manifest says more
    sort_target_modules(folder / "adapter_config.json")
    name_base_in_config(folder / "adapter_config.json", record["base"])
    write_adapter_record(folder, record["base"], record["lora"])


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")
