"""LoRA adapters through the trainer: SFT and a whole WebRL phase publish adapter folders (not the base), which
reload on their base to the outputs of the model that was trained, and train on from where they stopped."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import pytest
import torch

from services.trainer import phase as phase_module
from services.trainer.phase import run_phase
from services.trainer.sft import load_for_training, run_sft
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.models.adapters import ADAPTER_FILE, AdapterError, is_adapter, resolve_base
from webrl.models.loading import load_causal_lm
from webrl.store.checkpoints import read_manifest, verify
from webrl.wire.contracts import PhaseJob, SftJob

CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def _sft_adapter(tiny_dir: Path, store_trajectory, db, rank: int = 4) -> tuple[Path, list[int]]:
    ids = [store_trajectory("s1", 0, 0, [CLICK, EXIT], reward=None, env_score=1.0, purpose="sft"),
           store_trajectory("s2", 0, 0, [TYPE, EXIT], reward=None, env_score=1.0, purpose="sft")]
    out = Path(db.artifacts_dir) / "actor-sft"
    info = run_sft(db, SftJob(base=str(tiny_dir), output=str(out), trajectory_ids=ids, epochs=3, lr=5e-2,
                              batch_size=2, max_length=400, lora_rank=rank))
    assert info.metrics["last_loss"] < info.metrics["first_loss"]
    return out, ids


def test_lora_sft_publishes_an_adapter_that_reloads_on_its_base(tiny_dir: Path, store_trajectory, db) -> None:
    out, _ = _sft_adapter(tiny_dir, store_trajectory, db)
    assert is_adapter(out) and verify(out)
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()  # the base stays out
    record = json.loads((out / ADAPTER_FILE).read_text())
    assert record["base"] == {"path": str(tiny_dir.resolve())} and record["lora"]["rank"] == 4
    assert resolve_base(out, db) == tiny_dir.resolve()

    trained, tokenizer = load_for_training(out, db)  # the adapter again, trainable, on the frozen base
    assert {n for n, p in trained.named_parameters() if p.requires_grad} and all(
        "lora_" in n for n, p in trained.named_parameters() if p.requires_grad)
    merged, _ = load_causal_lm(out, db)
    base, _ = load_causal_lm(tiny_dir, db)
    ids = torch.tensor([tokenizer("Show me Books do(action", add_special_tokens=False)["input_ids"]])
    trained.eval()
    with torch.no_grad():
        expected = trained(input_ids=ids.to(trained.device)).logits.float().cpu()
        # bf16 base under the adapter; each model on the configured device, compared on the CPU
        assert torch.allclose(merged(input_ids=ids.to(merged.device)).logits.cpu(), expected, atol=2e-2)
        assert not torch.allclose(base(input_ids=ids.to(base.device)).logits.cpu(), expected, atol=1e-3)  # changed


def test_an_adapter_whose_base_changed_is_refused(tiny_dir: Path, store_trajectory, db, tmp_path: Path) -> None:
    out, _ = _sft_adapter(tiny_dir, store_trajectory, db)
    record = json.loads((out / ADAPTER_FILE).read_text())
    record["base"] = {"name": "smollm2-135m", "version": "smollm2-135m-0", "sha256": "0" * 64}
    (out / ADAPTER_FILE).write_text(json.dumps(record))
    base = Path(db.artifacts_dir) / "models" / "base" / "smollm2-135m"
    base.mkdir(parents=True)
    (base / "webrl_checkpoint.json").write_text(json.dumps({"role": "base", "version": "x", "sha256": "1" * 64}))
    with pytest.raises(AdapterError, match="with sha256 0000"):
        resolve_base(out, db)
    record["base"] = {"name": "smollm2-135m", "version": "smollm2-135m-0", "content_sha256": "0" * 64}
    (out / ADAPTER_FILE).write_text(json.dumps(record))
    (base / "webrl_checkpoint.json").write_text(json.dumps(
        {"role": "base", "version": "x", "sha256": "1" * 64, "metrics": {"content_sha256": "2" * 64}}))
    with pytest.raises(AdapterError, match=r"content sha256 0000.* has 2222"):
        resolve_base(out, db)
    record["base"] = {"name": "no-such-base"}
    (out / ADAPTER_FILE).write_text(json.dumps(record))
    with pytest.raises(AdapterError, match="no-such-base"):
        resolve_base(out, db)


def test_an_adapter_trained_elsewhere_republishes_naming_the_base_it_resolved_here(tiny_dir: Path, store_trajectory,
                                                                                  db, tmp_path: Path) -> None:
    """peft records the base's path on the machine that trained the adapter (a shipped adapter names a folder that
    does not exist here); trained on here, the adapter names the base it was resolved to, and peft finds its config
    (before: a warning that it "could not find a config file" on every save)."""
    import warnings

    from webrl.models.adapters import load_trainable, save_adapter
    from webrl.store.checkpoints import folder_sha256

    out, _ = _sft_adapter(tiny_dir, store_trajectory, db)
    config_file = out / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = "/elsewhere/artifacts/models/base/smollm2-135m"
    config_file.write_text(json.dumps(config))
    model = load_trainable(out, db, torch.float32, lora=None)
    again = tmp_path / "again"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_adapter(model, again)
    assert not [w for w in caught if "config file" in str(w.message)]
    saved = json.loads((again / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(resolve_base(out, db))
    # peft lists target_modules from a set (its order follows Python's string hashing): sorted, an adapter saved
    # in another process has the same bytes, so its folder sha256 (the feature cache's key) is its contents'
    assert len(saved["target_modules"]) > 2 and saved["target_modules"] == sorted(saved["target_modules"])
    save_adapter(model, tmp_path / "twice")
    assert folder_sha256(tmp_path / "twice") == folder_sha256(again)


def test_a_phase_on_an_adapter_actor_publishes_actor_and_critic_adapters(tiny_dir: Path, store_trajectory, db,
                                                                          monkeypatch) -> None:
    actor, _ = _sft_adapter(tiny_dir, store_trajectory, db)
    store_trajectory("a", 1, 0, [CLICK, EXIT], reward=1.0)
    store_trajectory("b", 1, 0, [TYPE, TYPE], reward=0.0)
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 4, "actor.lr": 5e-2, "critic.lr": 1e-2})
    job = PhaseJob(phase=1, actor=str(actor), hyperparams=hp, max_length=400)
    result = run_phase(db, job)
    for info in (result.actor, result.critic):
        assert is_adapter(info.path) and verify(info.path, info.sha256)
        assert json.loads((Path(info.path) / ADAPTER_FILE).read_text())["base"] == {"path": str(tiny_dir.resolve())}
    assert (Path(result.critic.path) / "critic_heads.safetensors").is_file()
    before = {k: v for k, v in _adapter_weights(actor).items()}
    after = _adapter_weights(Path(result.actor.path))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)

    # the critic and the reference model are let go before the actor is published (on a GPU: their memory returned)
    loaded, alive_at_publish = [], []
    load_reference, publish = phase_module._reference_model, phase_module.publish_model

    def reference_model(*args):
        model = load_reference(*args)
        loaded.append(weakref.ref(model))
        return model

    def publish_model(settings, accelerator, model, *args, role, **kwargs):
        if role == "critic":
            loaded.append(weakref.ref(model))
        else:
            gc.collect()
            alive_at_publish.extend(ref() is not None for ref in loaded)
        return publish(settings, accelerator, model, *args, role=role, **kwargs)

    monkeypatch.setattr(phase_module, "_reference_model", reference_model)
    monkeypatch.setattr(phase_module, "publish_model", publish_model)
    nxt = run_phase(db, PhaseJob(phase=1, actor=result.actor.path, critic=result.critic.path, reference=str(actor),
                                 hyperparams=with_overrides(hp, {"replay.enabled": False}), max_length=400,
                                 actor_output=str(Path(db.artifacts_dir) / "next-actor")))  # resumes both adapters
    assert nxt.critic.parent_version == result.critic.version and is_adapter(nxt.actor.path)
    assert read_manifest(nxt.actor.path)["parent_version"] == result.actor.version
    assert len(loaded) == 2 and alive_at_publish == [False, False]


def _adapter_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_the_lora_base_is_bf16_only_where_the_hardware_computes_bf16() -> None:
    from services.trainer.sft import lora_base_dtype

    native = (torch.cuda.is_available() and torch.cuda.is_bf16_supported()) or (
        not torch.cuda.is_available()
        and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()))
    assert lora_base_dtype() == (torch.bfloat16 if native else torch.float32)
