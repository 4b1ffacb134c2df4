"""How the updates execute, which changes their time and memory, not (beyond rounding) what they compute.

Precision (``batching.mixed_precision``): ``native`` resolves to bf16 exactly where the hardware computes it; one
process can make Accelerators of several precisions in turn (Accelerate keeps one state per process), each computing
in its own; a real forward and backward of the tiny Llama follows the setting. Activation checkpointing
(``batching.gradient_checkpointing``) trades memory for a second forward in every backward: a real optimizer step
with and without it leaves the same weights. The phase's critic and actor and the offline re-run read both from
their one field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from services.trainer.actor_update import actor_loop_config
from services.trainer.data import SequenceItem, sequence_collate
from services.trainer.phase import _loop_config
from services.trainer.sft import load_for_training, sft_loss_fn
from services.trainer.training_loop import (
    LoopConfig,
    make_accelerator,
    prepare,
    prepared_loader,
    resolve_precision,
    train,
)
from webrl.method.hyperparams import WebRLHyperparams, with_overrides
from webrl.models.examples import encode_example, pad_id_of
from webrl.models.loading import native_bf16
from webrl.wire.contracts import PhaseJob

PROMPT = "Show me the products in the Electronics category"
CLICK = 'do(action="Click", element="3")'


def test_native_is_bf16_exactly_where_the_hardware_computes_it() -> None:
    assert resolve_precision("native") == ("bf16" if native_bf16() else "no")
    assert resolve_precision("no") == "no" and resolve_precision("bf16") == "bf16"
    if not torch.cuda.is_available():
        assert resolve_precision("auto") == "no"  # a CPU computes in fp32 unless told otherwise


def test_accelerators_of_several_precisions_in_one_process_each_compute_in_their_own() -> None:
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    for precision, dtype in (("bf16", torch.bfloat16), ("no", torch.float32), ("bf16", torch.bfloat16)):
        accelerator = make_accelerator(LoopConfig(mixed_precision=precision))  # no "already initialized" error
        assert accelerator.mixed_precision == precision
        with accelerator.autocast():
            assert (a @ b).dtype == dtype


@dataclass
class OneStep:
    """What one optimizer step of the tiny Llama's SFT loss on two examples did."""

    first_loss: float
    weights: dict[str, torch.Tensor]
    """The trainable weights after the step."""
    recomputes: bool
    """Whether the model recomputed its activations in the backward."""
    moved: bool
    """Whether the step changed any trainable weight (else equal weights would show nothing)."""


def one_step(model_dir: Path, precision: str = "no", *, checkpointing: bool = False) -> OneStep:
    model, tokenizer = load_for_training(model_dir)
    before = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
    config = LoopConfig(lr=1e-3, batch_size=2, seed=0, mixed_precision=precision,
                        gradient_checkpointing=checkpointing)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    examples = [encode_example(tokenizer, PROMPT, CLICK), encode_example(tokenizer, PROMPT + " now", CLICK)]
    items = [SequenceItem(i, e, {}) for i, e in enumerate(examples)]
    loader = prepared_loader(accelerator, items, [len(e) for e in examples], sequence_collate(pad_id_of(tokenizer)),
                             2, shuffle=False, seed=0)
    summary = train(accelerator, prepared, loader, sft_loss_fn, config)
    assert summary.steps == 1
    unwrapped = accelerator.unwrap_model(prepared.model)
    recomputes = getattr(unwrapped, "is_activation_checkpointing", None)  # transformers 5; 4: is_gradient_...
    if recomputes is None:
        recomputes = unwrapped.is_gradient_checkpointing
    weights = {k: v.detach().clone() for k, v in unwrapped.named_parameters() if v.requires_grad}
    moved = any(not torch.equal(before[k], v) for k, v in weights.items())
    return OneStep(float(summary.first_loss), weights, bool(recomputes), moved)


def test_a_real_forward_and_backward_follow_the_setting(tiny_dir: Path) -> None:
    fp32, fp32_again, bf16 = (one_step(tiny_dir, p).first_loss for p in ("no", "no", "bf16"))
    assert fp32 == fp32_again  # the same precision reproduces
    assert bf16 != fp32  # bf16 computed it: its rounding moves the loss ...
    assert bf16 == pytest.approx(fp32, rel=0.02)  # ... by rounding, not more


def test_one_field_sets_the_precision_of_every_update() -> None:
    hp = with_overrides(WebRLHyperparams(), {"batching.mixed_precision": "native"})
    assert actor_loop_config(hp, seed=0).mixed_precision == "native"
    assert actor_loop_config(WebRLHyperparams(), seed=0).mixed_precision == "auto"
    with pytest.raises((ValidationError, ValueError), match="mixed_precision"):
        with_overrides(WebRLHyperparams(), {"batching.mixed_precision": "fp8"})


def test_checkpointing_changes_memory_and_time_not_the_step(tiny_dir: Path) -> None:
    on, off = one_step(tiny_dir, checkpointing=True), one_step(tiny_dir, checkpointing=False)
    assert on.recomputes and not off.recomputes  # the setting reached the model
    assert on.first_loss == off.first_loss
    assert on.moved and off.moved  # the step changed the weights, so their equality below says something
    assert on.weights.keys() == off.weights.keys() and on.weights
    for name, value in on.weights.items():
        torch.testing.assert_close(value, off.weights[name], rtol=1e-5, atol=1e-7, msg=name)


def test_one_field_sets_checkpointing_for_every_update() -> None:
    hp = with_overrides(WebRLHyperparams(), {"batching.gradient_checkpointing": False})
    assert actor_loop_config(hp, seed=0).gradient_checkpointing is False
    assert actor_loop_config(WebRLHyperparams(), seed=0).gradient_checkpointing is True
    job = PhaseJob.model_construct(hyperparams=hp, seed=0, max_minutes=None)
    assert _loop_config(job, lr=1e-3, epochs=1).gradient_checkpointing is False
