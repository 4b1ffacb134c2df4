"""The critic: two heads on a real tiny backbone, V = min of the heads, save and load."""

from __future__ import annotations

import pytest
import torch

from webrl.models.critic import CriticModel, critic_values, encode_states


def _texts() -> list[str]:
    return ["Task Instruction: Add the blue kettle to the cart <div id=\"5\">kettle</div>",
            "Task Instruction: Find the price"]


def test_head_shapes_and_architecture(tiny_llama3) -> None:
    path, _, tokenizer = tiny_llama3
    critic = CriticModel.from_backbone(path, seed=1)
    for head in (critic.head1, critic.head2):
        kinds = [type(layer).__name__ for layer in head]
        assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
        assert head[4].out_features == 2 and head[0].in_features == critic.config.hidden_size
    ids, mask = encode_states(tokenizer, _texts())
    logits = critic.head_logits(ids, mask)
    assert logits.shape == (2, 2, 2)


def test_value_is_the_min_of_the_two_heads(tiny_llama3) -> None:
    path, _, tokenizer = tiny_llama3
    critic = CriticModel.from_backbone(path, seed=1)
    ids, mask = encode_states(tokenizer, _texts())
    with torch.no_grad():
        logits = critic.head_logits(ids, mask)
        v1 = torch.softmax(logits[0], dim=-1)[:, 1]
        v2 = torch.softmax(logits[1], dim=-1)[:, 1]
        values = critic.values(ids, mask)
    assert not torch.allclose(v1, v2)  # two independently initialised heads
    assert torch.allclose(values, torch.minimum(v1, v2))


def test_batched_values_equal_single_values(tiny_llama3) -> None:
    path, _, tokenizer = tiny_llama3
    critic = CriticModel.from_backbone(path, seed=2)
    texts = _texts()
    single = [critic_values(critic, tokenizer, [t])[0] for t in texts]
    assert critic_values(critic, tokenizer, texts, batch_size=2) == pytest.approx(single, abs=1e-5)


def test_backbone_is_the_sft_model_and_round_trips(tiny_llama3, tmp_path) -> None:
    path, model, tokenizer = tiny_llama3
    critic = CriticModel.from_backbone(path, seed=3)
    assert torch.equal(critic.backbone.embed_tokens.weight, model.model.embed_tokens.weight)
    with torch.no_grad():
        critic.head2[4].bias.add_(0.5)  # heads that differ from a fresh init must survive the round trip
    critic.save_pretrained(tmp_path / "critic", tokenizer=tokenizer)
    loaded = CriticModel.from_pretrained(tmp_path / "critic")
    ids, mask = encode_states(tokenizer, _texts())
    with torch.no_grad():
        assert torch.allclose(critic.head_logits(ids, mask), loaded.head_logits(ids, mask), atol=1e-6)


def test_heads_and_backbone_get_gradients(tiny_llama3) -> None:
    path, _, tokenizer = tiny_llama3
    critic = CriticModel.from_backbone(path, seed=4)
    ids, mask = encode_states(tokenizer, _texts())
    logits = critic.head_logits(ids, mask)  # (2, B, 2)
    target = torch.tensor([1, 0])
    loss = sum(torch.nn.functional.cross_entropy(logits[k], target) for k in range(2))
    loss.backward()
    assert critic.head1[0].weight.grad is not None and critic.head2[4].weight.grad is not None
    assert critic.backbone.embed_tokens.weight.grad.abs().sum() > 0


def test_loading_something_that_is_not_a_critic_fails(tiny_llama3) -> None:
    path, _, _ = tiny_llama3
    with pytest.raises(FileNotFoundError, match="critic_heads"):
        CriticModel.from_pretrained(path)


def test_fan_in_heads_keep_a_large_last_state_s_logits_in_scale() -> None:
    """SmolLM2-135M's last states have norm ~50 (576 dims): WebRL's std 0.2 makes logits of tens at init, the
    fan-in init (head_init_std None) logits of order 1."""
    from webrl.models.critic import fan_in_std, value_head

    torch.manual_seed(0)
    h = torch.randn(64, 576)
    h = h / h.norm(dim=-1, keepdim=True) * 50.0  # (64, 576), norm 50
    published = value_head(576, 0.2)
    fan_in = value_head(576, None)
    assert float(fan_in[0].weight.detach().std()) == pytest.approx(fan_in_std(576), rel=0.05)
    with torch.no_grad():
        big, small = published(h).abs().mean(), fan_in(h).abs().mean()
    assert big > 5.0
    assert small < 1.0


def _adapter_actor(tiny_llama3, folder) -> torch.nn.Module:
    """An adapter actor on the tiny base whose LoRA moves its states (B drawn, not 0), saved into ``folder``."""
    from webrl.config import get_settings
    from webrl.models.adapters import LoraSpec, load_trainable, save_adapter

    path, _, _ = tiny_llama3
    actor = load_trainable(path, get_settings(), torch.float32, lora=LoraSpec(rank=2, alpha=4))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in actor.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.5)
    folder.mkdir()
    save_adapter(actor, folder)
    return actor


def test_on_an_adapter_actor_the_critic_starts_from_the_actors_states_or_the_bases(tiny_llama3, tmp_path) -> None:
    _, model, tokenizer = tiny_llama3
    actor = _adapter_actor(tiny_llama3, tmp_path / "actor")
    ids, mask = encode_states(tokenizer, _texts())
    with torch.no_grad():
        actor_states = actor.get_base_model().model(input_ids=ids, attention_mask=mask).last_hidden_state
        base_states = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert not torch.allclose(actor_states, base_states, atol=1e-3)  # the adapter moves the states

        from_actor = CriticModel.from_backbone(tmp_path / "actor", seed=0)  # the paper's critic
        from_base = CriticModel.from_backbone(tmp_path / "actor", seed=0, from_actor=False)
        assert torch.allclose(from_actor.backbone(input_ids=ids, attention_mask=mask).last_hidden_state,
                              actor_states, atol=1e-5)
        assert torch.allclose(from_base.backbone(input_ids=ids, attention_mask=mask).last_hidden_state,
                              base_states, atol=1e-5)
    # the copy is the critic's own adapter: it trains, and the critic saves and loads as any other
    assert any(w.requires_grad for n, w in from_actor.backbone.named_parameters() if "lora_B" in n)
    from_actor.save_pretrained(tmp_path / "critic", tokenizer=tokenizer)
    loaded = CriticModel.from_pretrained(tmp_path / "critic")
    with torch.no_grad():
        assert torch.allclose(from_actor.head_logits(ids, mask), loaded.head_logits(ids, mask), atol=1e-5)


def test_an_adapter_that_adapts_more_than_the_transformer_is_not_copied(tiny_llama3, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    from webrl.models.adapters import ADAPTER_WEIGHTS, AdapterError

    _adapter_actor(tiny_llama3, tmp_path / "actor")
    weights = tmp_path / "actor" / ADAPTER_WEIGHTS
    state = load_file(str(weights))
    state["base_model.model.lm_head.lora_A.weight"] = torch.zeros(2, 8)
    save_file(state, str(weights))
    with pytest.raises(AdapterError, match="lm_head"):
        CriticModel.from_backbone(tmp_path / "actor", seed=0)
