"""WebRL's critic: a language-model backbone and two value heads (clipped double-Q style).

Paper section 3.3 / WebRL's ``VLMDoubleCritic`` (webrl/models/critic.py) and ``WebRLTrainer`` (published code):

- h = the backbone's last hidden state at the state's last token                      # (B, H)
- head_k(h) = Linear(H, H) -> ReLU -> Linear(H, H) -> ReLU -> Linear(H, 2), k = 1, 2   # (B, 2)
- V_k = softmax(head_k(h))[1]  (P(success));  V = min(V_1, V_2)
- trained with cross-entropy towards y = 1[return > 0] on s and on s' (the trainer does that).

The backbone starts from the SFT actor (``critic.backbone_start`` "actor"; on an adapter actor the critic's own
adapter starts as a copy of the actor's). WebRL reads position -1 of a right-padded batch, which is a pad token
for all but the longest state; here h is taken at each sequence's last real token, so batching is exact.
The critic's input is the actor prompt of the state (:func:`critic_prompt`), as in WebRL where the critic reads
the same ``format_prompt`` text as the actor.

A saved critic is a folder: the backbone as a Hugging Face model (``config.json`` + safetensors), the heads
in :data:`HEADS_FILE`, their shape in :data:`CRITIC_CONFIG_FILE`, and the tokenizer when one is given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from webrl.config import Settings
from webrl.models.adapters import (
    LoraSpec,
    adapter_lora_spec,
    copy_causal_lm_adapter,
    is_adapter,
    is_peft_model,
    load_merged,
    load_trainable,
    model_folder,
    save_adapter,
)
from webrl.models.batched import score_in_batches

#: Files of a saved critic besides the backbone's own.
HEADS_FILE = "critic_heads.safetensors"
CRITIC_CONFIG_FILE = "critic_config.json"

#: Std of the normal init of the heads' first two Linear layers, biases zero; the last Linear keeps torch's
#: default init (``initializer_range = 0.2`` in WebRL's VLMDoubleCritic; published code, not in the paper).
#: ``Critic.head_init_std`` (webrl.method.hyperparams) may choose another, or None: :func:`fan_in_std`.
HEAD_INIT_STD = 0.2

#: Classes of each head: index 1 = "the task will succeed" (V = softmax[1]).
N_CLASSES = 2


def check_saved_critic(folder: Path, field: str, value: str) -> None:
    """Raise an :class:`~webrl.wire.contracts.InvalidRequest` naming ``field`` unless ``folder`` holds the heads of
    a saved critic (:data:`HEADS_FILE`): an actor's folder, say, would load and then fail deep in a job or a 500."""
    from webrl.wire.contracts import InvalidRequest

    if not (Path(folder) / HEADS_FILE).is_file():
        raise InvalidRequest(field, f"{value!r} is not a saved critic (no {HEADS_FILE})")


def _settings(settings: Settings | None) -> Settings:
    from webrl.config import get_settings

    return settings or get_settings()


def fan_in_std(hidden: int) -> float:
    """std = 1 / sqrt(hidden): each layer keeps its input's scale (LeCun's fan-in init)."""
    return hidden ** -0.5


def value_head(hidden: int, init_std: float | None = HEAD_INIT_STD) -> nn.Sequential:
    """Linear-ReLU-Linear-ReLU-Linear(2), initialised as WebRL does (``init_std`` 0.2), or with ``init_std``
    (None: :func:`fan_in_std`)."""
    std = fan_in_std(hidden) if init_std is None else init_std
    head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, N_CLASSES))
    for layer in (head[0], head[2]):
        nn.init.normal_(layer.weight, mean=0.0, std=std)
        nn.init.zeros_(layer.bias)
    return head


def last_token_states(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H) states -> (B, H) at each row's last position whose mask is 1 (left or right padding)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (T,)
    last = (attention_mask.long() * positions).argmax(dim=1)  # (B,)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]


class CriticModel(nn.Module):
    """Backbone (a Hugging Face base model, e.g. ``LlamaModel``) + two value heads."""

    def __init__(self, backbone: nn.Module, head1: nn.Sequential | None = None,
                 head2: nn.Sequential | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        hidden = int(backbone.config.hidden_size)
        self.head1 = head1 if head1 is not None else value_head(hidden)
        self.head2 = head2 if head2 is not None else value_head(hidden)
        # heads train in fp32 over a frozen low-precision base; a fully trained backbone keeps them in its dtype
        head_dtype = torch.float32 if is_peft_model(backbone) else next(backbone.parameters()).dtype
        self.head1.to(head_dtype)
        self.head2.to(head_dtype)

    @property
    def config(self) -> Any:
        return self.backbone.config

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # Loading and saving
    @classmethod
    def from_backbone(cls, path: str | Path, *, seed: int = 0, dtype: torch.dtype | None = None,
                      settings: Settings | None = None, lora: LoraSpec | None = None,
                      head_init_std: float | None = HEAD_INIT_STD, from_actor: bool = True) -> CriticModel:
        """A fresh critic on the transformer of a causal-LM folder (the SFT actor); heads seeded by ``seed`` and
        initialised with ``head_init_std`` (:func:`value_head`).

        On an adapter folder the backbone is the frozen base with a LoRA adapter of the critic's own, so only the
        adapter and the heads train. ``from_actor`` (``critic.backbone_start`` "actor", the paper's critic) starts
        that adapter as a copy of the actor's (its :class:`LoraSpec` and weights): the backbone's states are the SFT
        actor's. Otherwise it is a new ``lora`` adapter (default :class:`LoraSpec`, B = 0): the base's states. A
        full folder with ``lora`` gets a new adapter on it."""
        from transformers import AutoModel

        if is_adapter(path) and from_actor:
            backbone = load_trainable(model_folder(path, _settings(settings)), _settings(settings), dtype,
                                      lora=adapter_lora_spec(path), auto_class="AutoModel")
            copy_causal_lm_adapter(backbone, path)
        elif is_adapter(path) or lora is not None:
            backbone = load_trainable(model_folder(path, _settings(settings)), _settings(settings), dtype,
                                      lora=lora or LoraSpec(), auto_class="AutoModel")
        else:
            backbone = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=dtype)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            hidden = int(backbone.config.hidden_size)
            return cls(backbone, value_head(hidden, head_init_std), value_head(hidden, head_init_std))
        finally:
            torch.random.set_rng_state(generator_state)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype | None = None, settings: Settings | None = None,
                        trainable: bool = False) -> CriticModel:
        """A critic saved by :meth:`save_pretrained` (or published by the trainer): a full backbone, or a backbone
        adapter applied to its base (merged for scoring, trainable when ``trainable``)."""
        from transformers import AutoModel

        path = Path(path)
        if not (path / HEADS_FILE).exists():
            raise FileNotFoundError(f"{path} is not a saved critic: {HEADS_FILE} is missing")
        if is_adapter(path) and trainable:
            backbone = load_trainable(path, _settings(settings), dtype, lora=None, auto_class="AutoModel")
        elif is_adapter(path):
            backbone = load_merged(path, _settings(settings), dtype or torch.float32, auto_class="AutoModel")
        else:
            backbone = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=dtype)
        model = cls(backbone)
        state = load_file(str(path / HEADS_FILE))
        model.head1.load_state_dict({k.removeprefix("head1."): v for k, v in state.items() if k.startswith("head1.")})
        model.head2.load_state_dict({k.removeprefix("head2."): v for k, v in state.items() if k.startswith("head2.")})
        return model

    def save_pretrained(self, path: str | Path, tokenizer: Any | None = None) -> Path:
        """Write the backbone, the heads and (optionally) the tokenizer into ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if is_peft_model(self.backbone):
            save_adapter(self.backbone, path)
        else:
            self.backbone.save_pretrained(str(path))
        heads = {f"head1.{k}": v.detach().contiguous().cpu() for k, v in self.head1.state_dict().items()}
        heads |= {f"head2.{k}": v.detach().contiguous().cpu() for k, v in self.head2.state_dict().items()}
        save_file(heads, str(path / HEADS_FILE))
        meta = {"kind": "webrl-double-critic", "hidden_size": int(self.config.hidden_size), "n_classes": N_CLASSES,
                "value": "min(softmax(head1)[1], softmax(head2)[1])"}
        (path / CRITIC_CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(path))
        return path

    # Forward
    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """h: the backbone's last hidden state at each sequence's last real token, in the heads' dtype: (B, H)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return last_token_states(out.last_hidden_state, attention_mask).to(self.head1[0].weight.dtype)

    def logits_of_states(self, h: torch.Tensor) -> torch.Tensor:
        """Both heads on states ``h`` (B, H): logits (2, B, 2) (head, batch, class)."""
        return head_pair_logits(self.head1, self.head2, h)

    def head_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of both heads: shape (2, B, 2) (head, batch, class). The trainer's cross-entropy reads these."""
        return self.logits_of_states(self.states(input_ids, attention_mask))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head_logits(input_ids, attention_mask)

    def values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V = min(V_1, V_2) of each state: shape (B,) (:func:`critic_value`)."""
        return critic_value(self.head_logits(input_ids, attention_mask))


def head_pair_logits(head1: nn.Module, head2: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Both value heads on states ``h`` (B, H): logits (2, B, 2) (head, batch, class)."""
    return torch.stack([head1(h), head2(h)])


def critic_value(logits: torch.Tensor) -> torch.Tensor:
    """V = min(softmax(head_1)[1], softmax(head_2)[1]): both heads' logits (2, B, 2) -> (B,).

    The one definition of the critic's value: the trainer's advantages and the critic service's filter values
    both come from here (``torch.minimum(v1, v2)`` in WebRL's actor loss).
    """
    p = logits.float().softmax(-1)[..., 1]  # (2, B): V_k = P(success) of head k
    return torch.minimum(p[0], p[1])


def critic_prompt(tokenizer: Any, intent: str, observation: str, history: Sequence[Any] = (), *,
                  max_tokens: int | None = None) -> str:
    """The critic's input for a state: the actor prompt of that state (WebRL feeds the critic the actor's
    ``format_prompt`` text; for a new task, round 0 on the site's start page)."""
    from webrl.prompts.actor import render_actor_prompt

    return render_actor_prompt(tokenizer, intent, list(history), observation, max_tokens=max_tokens)


def encode_states(tokenizer: Any, texts: Sequence[str], device: torch.device | str = "cpu"
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask), both (B, T), of rendered critic prompts."""
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("a critic prompt encodes to no tokens")
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    return input_ids.to(device), mask.to(device)


def critic_values(model: CriticModel, tokenizer: Any, texts: Sequence[str], batch_size: int = 8) -> list[float]:
    """V = min of the two heads for each rendered critic prompt, ``batch_size`` per forward pass."""
    return score_in_batches(model, texts, batch_size,
                            lambda batch: model.values(*encode_states(tokenizer, batch, model.device)))
