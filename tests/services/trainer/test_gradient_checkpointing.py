"""Activation checkpointing (``batching.gradient_checkpointing``) trades memory for a second forward in every backward;
it changes neither the loss nor the step: a real optimizer step of the tiny Llama with and without it leaves the
same weights. The phase's critic and actor and the offline re-run read it from the same field."""

from __future__ import annotations

from pathlib import Path

import torch

from services.trainer.actor_update import actor_loop_config
from services.trainer.data import SequenceItem, sequence_collate
from services.trainer.phase import _loop_config
from services.trainer.sft import load_for_training, sft_loss_fn
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.method.hyperparams import WebRLHyperparams, with_overrides
from webrl.models.examples import encode_example, pad_id_of
from webrl.wire.contracts import PhaseJob

PROMPT = "Show me the products in the Electronics category"
CLICK = 'do(action="Click", element="3")'


def one_step(model_dir: Path, checkpointing: bool) -> tuple[float, dict[str, torch.Tensor], bool]:
    """The first loss, the weights after one optimizer step, and whether the model recomputed its activations."""
    model, tokenizer = load_for_training(model_dir)
    config = LoopConfig(lr=1e-3, batch_size=2, seed=0, mixed_precision="no", gradient_checkpointing=checkpointing)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    examples = [encode_example(tokenizer, PROMPT, CLICK), encode_example(tokenizer, PROMPT + " now", CLICK)]
    items = [SequenceItem(i, e, {}) for i, e in enumerate(examples)]
    loader = prepared_loader(accelerator, items, [len(e) for e in examples], sequence_collate(pad_id_of(tokenizer)),
                             2, shuffle=False, seed=0)
    summary = train(accelerator, prepared, loader, sft_loss_fn, config)
    unwrapped = accelerator.unwrap_model(prepared.model)
    weights = {k: v.detach().clone() for k, v in unwrapped.named_parameters() if v.requires_grad}
    recomputes = getattr(unwrapped, "is_activation_checkpointing", None)  # transformers 5; 4: is_gradient_...
    if recomputes is None:
        recomputes = unwrapped.is_gradient_checkpointing
    return float(summary.first_loss), weights, bool(recomputes)


def test_checkpointing_changes_memory_and_time_not_the_step(tiny_dir: Path) -> None:
    loss_on, weights_on, recomputed_on = one_step(tiny_dir, checkpointing=True)
    loss_off, weights_off, recomputed_off = one_step(tiny_dir, checkpointing=False)
    assert recomputed_on and not recomputed_off  # the setting reached the model
    assert loss_on == loss_off
    assert weights_on.keys() == weights_off.keys() and weights_on
    for name, value in weights_on.items():
        torch.testing.assert_close(value, weights_off[name], rtol=1e-5, atol=1e-7, msg=name)


def test_one_field_sets_checkpointing_for_every_update() -> None:
    hp = with_overrides(WebRLHyperparams(), {"batching.gradient_checkpointing": False})
    assert actor_loop_config(hp, seed=0).gradient_checkpointing is False
    assert actor_loop_config(WebRLHyperparams(), seed=0).gradient_checkpointing is True
    job = PhaseJob.model_construct(hyperparams=hp, seed=0, max_minutes=None)
    assert _loop_config(job, lr=1e-3, epochs=1).gradient_checkpointing is False
