"""Publishing what the trainer trained: the actor (a causal LM folder, or only its LoRA adapter when it trains
one) and the critic (backbone or backbone adapter + heads),
each through :func:`webrl.store.checkpoints.publish` (atomic folder, checkpoints row, ``webrl:checkpoints`` event).

Under DeepSpeed ZeRO-3 the weights are sharded: ``accelerator.get_state_dict`` gathers them on the main
process, which alone writes and publishes; the other processes wait.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from webrl.config import Settings
from webrl.db.session import session_scope
from webrl.models.adapters import is_peft_model, save_adapter
from webrl.models.loading import save_tokenizer
from webrl.store.checkpoints import MANIFEST_FILE, CheckpointInfo, publish, read_manifest, record, verify


def payload_version(prefix: str, payload: dict[str, Any]) -> str:
    """A deterministic version for a job: ``<prefix>-<first 10 hex of sha256(payload JSON)>``, so running the
    same job twice names (and finds) the same checkpoint."""
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    return f"{prefix}-{digest[:10]}"


def already_published(settings: Settings, output: Path, version: str) -> CheckpointInfo | None:
    """The checkpoint at ``output`` when it is ``version`` and its files verify, else None: a job that already
    ran finds its result there instead of training again. Its checkpoints row is recorded again (idempotent), so a
    job killed between publishing the folder and recording the row leaves no checkpoint the API never lists."""
    if not (output.is_dir() and verify(output)):
        return None
    manifest = read_manifest(output)
    if manifest.get("version") != version:
        return None
    info = CheckpointInfo(**{k: manifest.get(k) for k in ("role", "version", "path", "sha256", "phase",
                                                           "parent_version", "metrics")})
    if os.environ.get("RANK", "0") == "0":  # one writer under a multi-process launch (accelerate sets RANK)
        with session_scope(settings) as session:
            record(session, info)
    return info


def checkpoint_dir(settings: Settings, role: str, version: str) -> Path:
    """Where a trainer checkpoint lives by default: ``<artifacts>/models/<role>/<version>``."""
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "models" / role / version


def _write_critic(folder: Path, critic: Any, state_dict: dict[str, Any], tokenizer: Any) -> None:
    """A ``CriticModel`` folder from a gathered state dict (the layout ``CriticModel.save_pretrained`` writes)."""
    from safetensors.torch import save_file

    from webrl.models.critic import CRITIC_CONFIG_FILE, HEADS_FILE, N_CLASSES

    backbone = {k.removeprefix("backbone."): v for k, v in state_dict.items() if k.startswith("backbone.")}
    if is_peft_model(critic.backbone):
        save_adapter(critic.backbone, folder, state_dict=backbone)
    else:
        critic.backbone.save_pretrained(folder, state_dict=backbone, safe_serialization=True)
    heads = {k: v.detach().contiguous().cpu() for k, v in state_dict.items() if k.startswith(("head1.", "head2."))}
    save_file(heads, str(folder / HEADS_FILE))
    meta = {"kind": "webrl-double-critic", "hidden_size": int(critic.config.hidden_size), "n_classes": N_CLASSES,
            "value": "min(softmax(head1)[1], softmax(head2)[1])"}
    (folder / CRITIC_CONFIG_FILE).write_text(json.dumps(meta, indent=2))
    save_tokenizer(tokenizer, folder)


def gathered_state_dict(accelerator: Accelerator, model: Any) -> dict[str, Any]:
    """The whole state dict of ``model``; a collective (every process calls it). What ``prepare`` returned goes
    through ``accelerator.get_state_dict`` (a ZeRO-3 engine gathers its shards on the main process). A model that
    only holds a prepared part (the critic whose heads alone trained) has that part's parameters partitioned under
    ZeRO-3, and Accelerate does not gather a module that is not an engine: its shards are gathered here."""
    engine = hasattr(model, "zero_gather_16bit_weights_on_model_save")
    if engine or getattr(accelerator.state, "deepspeed_plugin", None) is None:
        return accelerator.get_state_dict(model)
    import deepspeed

    shards = [p for p in model.parameters() if hasattr(p, "ds_id")]
    with deepspeed.zero.GatheredParameters(shards) if shards else contextlib.nullcontext():
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _writer(accelerator: Accelerator, model: Any, tokenizer: Any, kind: str):
    state_dict = gathered_state_dict(accelerator, model)
    unwrapped = accelerator.unwrap_model(model)

    def write(folder: Path) -> None:
        if kind == "critic":
            _write_critic(folder, unwrapped, state_dict, tokenizer)
        elif is_peft_model(unwrapped):  # the adapter only: MBs, and the record of its base
            save_adapter(unwrapped, folder, state_dict=state_dict)
            save_tokenizer(tokenizer, folder)
        else:
            unwrapped.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
            save_tokenizer(tokenizer, folder)

    return write


def _publish_on_main(settings: Settings, accelerator: Accelerator, write: Callable[[Path], None], dest: Path,
                     **record: Any) -> CheckpointInfo | None:
    """:func:`webrl.store.checkpoints.publish` on the main process while the others wait; None on those."""
    info = None
    if accelerator.is_main_process:
        info = publish(settings, write, dest, **record)
    accelerator.wait_for_everyone()
    return info


def publish_unchanged(settings: Settings, accelerator: Accelerator, source: Path, *, role: str, version: str,
                      dest: Path, phase: int | None, parent_version: str | None,
                      metrics: dict[str, Any]) -> CheckpointInfo | None:
    """Publish the model folder ``source`` again, file for file (its manifest aside), as ``version``: a phase that
    left the actor as it was publishes the very files it started from, so the folder's content sha256, and every
    evaluation stored under it (:mod:`webrl.store.evaluations`), is the start actor's. Re-saving the loaded model
    would not do: the adapter config's module list is written in a per-process order. Main process only."""
    def write(folder: Path) -> None:
        for file in sorted(p for p in source.rglob("*") if p.is_file() and p.name != MANIFEST_FILE):
            target = folder / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)

    accelerator.wait_for_everyone()
    return _publish_on_main(settings, accelerator, write, dest, role=role, version=version, phase=phase,
                            parent_version=parent_version, metrics=metrics, replace=True)


def publish_model(settings: Settings, accelerator: Accelerator, model: Any, tokenizer: Any, *, role: str,
                  version: str, dest: Path, phase: int | None, parent_version: str | None,
                  metrics: dict[str, Any], replace: bool = False) -> CheckpointInfo | None:
    """Write and publish ``model`` (``role`` "critic" saves a ``CriticModel``); main process only.

    Returns the published info on the main process, None elsewhere.
    """
    accelerator.wait_for_everyone()
    write = _writer(accelerator, model, tokenizer, "critic" if role == "critic" else "lm")
    return _publish_on_main(settings, accelerator, write, dest, role=role, version=version, phase=phase,
                            parent_version=parent_version, metrics=metrics, replace=replace)
