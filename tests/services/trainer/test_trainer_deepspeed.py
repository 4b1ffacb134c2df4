"""The trainer's updates under DeepSpeed ZeRO-2 and ZeRO-3 on 2 CPU ranks (gloo), launched as a job is
(``accelerate launch --config_file configs/accelerate/deepspeed_zero{2,3}.yaml``), against one process on the same
global batches (``services.trainer.update_check``): the actor with a LoRA adapter and with every weight, and the
critic. Each optimizer step's loss, gradient norm and learning rate, the exact KL, the critic's values and the trained
weights must agree; the published folders (gathered on rank 0) must load and hold those weights.

Needs deepspeed (``make test-distributed``); skipped without it. The first launch on a machine compiles DeepSpeed's
shared-memory op (~1.5 min, cached in TORCH_EXTENSIONS_DIR); each launch then takes ~20-40 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.deepspeed, pytest.mark.timeout(900)]

from services.trainer.update_check import CASES, MAX_LENGTH, fixed_steps, run_case  # noqa: E402
from webrl.config import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
RANKS = 2
ACCUMULATE = 2  # micro-batches per optimizer step over all processes: 1 each on 2 ranks, 2 in one process

# Tolerances. Two ranks compute the same sums in another order: each rank the gradient of its own micro-batch, then
# their average (an all-reduce, or ZeRO's reduce-scatter into flat fp32 partitions) where one process adds the two
# micro-batches' gradients, each halved; AdamW then runs on flat partitions instead of per tensor. Every difference
# is fp32 rounding carried through 4-8 steps. Measured on this CPU (2026-11-29, deepspeed 0.19.8): loss and gradient
# norm within 2.4e-6 relative, weights within 6.9e-7, the critic's values within 6e-8. The
# bounds are 15-40x that, and far below what a different update does: one process stepping after every micro-batch
# ends 4e-2 away (checked below), a bf16 base under the adapter with ZeRO-3 1.2e-3: bf16 rounding, checked below.
LOSS_RTOL = 1e-4
WEIGHT_ATOL = 1e-5  # each AdamW step moves a weight by up to its lr: 2e-3 (actor), 1e-3 (critic)
VALUE_ATOL = 1e-5


def launch(config: str, model_dir: Path, out: Path, home: Path, *extra: str) -> None:
    """The update check under ``accelerate launch`` with one of the shipped configs on 2 CPU ranks."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "WEBRL_HOME": str(home)}
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_JOBS__REDIS_URL"):
        env.pop(var, None)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "configs" / "accelerate" / f"deepspeed_{config}.yaml"), "--num_processes", str(RANKS),
               "-m", "services.trainer.update_check", str(model_dir), str(out), "--accumulate", str(ACCUMULATE),
               *extra]
    subprocess.run(command, check=True, env=env, cwd=ROOT, timeout=800)


def record(out: Path, case: str) -> dict[str, Any]:
    return json.loads((out / f"{case}.json").read_text())


def weights(out: Path, case: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out / f"{case}.safetensors"))


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A home with a migrated SQLite database, for the launched ranks to publish into."""
    from webrl.db.migrate import upgrade

    settings = Settings(home=tmp_path_factory.mktemp("ds-home"))
    settings.ensure_dirs()
    upgrade(settings)
    return settings


@pytest.fixture(scope="module")
def one_process(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every case in this process, ACCUMULATE micro-batches per step: the reference."""
    out = tmp_path_factory.mktemp("one-process")
    for case in CASES:
        run_case(case, tiny_dir, out, ACCUMULATE, publish=False)
    return out


@pytest.fixture(scope="module", params=["zero2", "zero3"])
def two_ranks(request: pytest.FixtureRequest, tiny_dir: Path, home: Settings,
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every case on 2 ranks under the config, each model published."""
    out = tmp_path_factory.mktemp(f"two-ranks-{request.param}")
    launch(request.param, tiny_dir, out, home.home, "--publish")
    return out


@pytest.mark.parametrize("case", CASES)
def test_each_optimizer_step_matches_one_process(two_ranks: Path, one_process: Path, case: str) -> None:
    """Loss (the mean over the global batch), gradient norm and lr of every optimizer step, and each epoch's
    metrics (the exact KL among them), as one process on the same micro-batches has them."""
    ranks, one = record(two_ranks, case), record(one_process, case)
    assert ranks["processes"] == RANKS and one["processes"] == 1
    assert len(ranks["steps"]) == len(one["steps"]) == (8 if case.startswith("actor") else 4)
    loss = "critic_loss" if case == "critic" else "actor_loss"
    for mine, theirs in zip(ranks["steps"], one["steps"], strict=True):
        for key in (loss, "grad_norm", "lr"):
            assert mine[key] == pytest.approx(theirs[key], rel=LOSS_RTOL), (mine["step"], key)
    assert [e.keys() for e in ranks["epochs"]] == [e.keys() for e in one["epochs"]]
    for mine, theirs in zip(ranks["epochs"], one["epochs"], strict=True):
        for key, value in theirs.items():
            assert mine[key] == pytest.approx(value, rel=LOSS_RTOL, abs=1e-7), key
    if case != "critic":  # the warm-up counts optimizer steps: 2 ranks must not advance it twice per step
        assert [s["lr"] for s in ranks["steps"][:3]] == pytest.approx([1e-3, 2e-3, 2e-3])
        assert ranks["epochs"][-1]["kl_exact"] > 1e-6


@pytest.mark.parametrize("case", CASES)
def test_the_trained_weights_match_one_process(two_ranks: Path, one_process: Path, case: str) -> None:
    assert max_difference(weights(two_ranks, case), weights(one_process, case)) < WEIGHT_ATOL


def test_the_tolerance_tells_a_different_update_apart(one_process: Path, tiny_dir: Path, tmp_path: Path) -> None:
    """One process stepping after every micro-batch (other global batches, twice the steps) ends far outside the
    tolerance: agreeing within it says the two ranks made the same update."""
    run_case("actor-lora", tiny_dir, tmp_path, 1, publish=False)
    assert max_difference(weights(tmp_path, "actor-lora"), weights(one_process, "actor-lora")) > 100 * WEIGHT_ATOL


def test_zero3_on_a_bf16_base_rounds_the_gradient_no_worse_than_one_process(tmp_path: Path) -> None:
    """Why a bf16 base under the adapter ends 1.2e-3 apart under ZeRO-3: bf16 rounding, not a wrong gradient.
    ``bench/zero3_bf16_gradients.py`` takes one backward in one process and under ZeRO-3 on 2 ranks, each against
    fp32 arithmetic on the same weights: ZeRO-3's error is one process's (0.96 of it, 2026-12-05), the two gradients
    are closer to each other than either is to fp32, and the MLP adapters' (upstream of no sum of two bf16 activation
    gradients) are the same to the bit; a gradient reduced or kept in bf16 would add bf16's 4e-3 to ZeRO-3's error."""
    out = tmp_path / "gradients.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "zero3_bf16_gradients.py"), "--ranks", str(RANKS),
                    "--out", str(out)], check=True, cwd=ROOT, env={**os.environ, "DS_ACCELERATOR": "cpu"},
                   timeout=800)
    result = json.loads(out.read_text())
    total = result["all"]
    assert 0.5 < total["ratio_zero3_error_to_one_process_error"] < 1.5
    assert total["zero3_vs_one_process"] < min(total["one_process_vs_fp32"], total["zero3_vs_fp32"])
    mlp = {name: row for name, row in result["per_matrix"].items() if ".mlp." in name}
    assert len(mlp) == 6 and all(row["zero3_vs_one_process"] == 0.0 for row in mlp.values())


def test_the_critic_values_match_one_process(two_ranks: Path, one_process: Path) -> None:
    """V(s) of every step after training, gathered across the ranks in dataset order."""
    values = record(two_ranks, "critic")["values"]
    assert len(values) == len(fixed_steps())
    assert values == pytest.approx(record(one_process, "critic")["values"], abs=VALUE_ATOL)


def test_the_published_adapter_loads_with_the_trained_weights(two_ranks: Path, one_process: Path, home: Settings,
                                                              tiny_dir: Path) -> None:
    """The LoRA actor published by rank 0 is an adapter folder on the tiny base; loaded (merged) by the actor's loader
    it gives the logits of the base with the one-process adapter."""
    from webrl.model_folders import is_adapter
    from webrl.models.adapters import LoraSpec, load_trainable
    from webrl.models.loading import load_causal_lm

    folder = Path(record(two_ranks, "actor-lora")["published"])
    assert is_adapter(folder) and not (folder / "model.safetensors").exists()
    published, tokenizer = load_causal_lm(folder, home)
    reference = load_trainable(tiny_dir, home, torch.float32, lora=LoraSpec(rank=4, alpha=8))
    missing = reference.load_state_dict(weights(one_process, "actor-lora"), strict=False)
    assert not missing.unexpected_keys
    ids = torch.tensor([tokenizer(fixed_steps()[0].prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        got, want = published(input_ids=ids).logits, reference.eval()(input_ids=ids).logits
        base = load_causal_lm(tiny_dir, home)[0](input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert float((got - base).abs().max()) > 1e-3  # the adapter changed the model: the check above is not vacuous


def test_the_published_full_actor_is_the_trained_model(two_ranks: Path, one_process: Path, home: Settings) -> None:
    from webrl.models.loading import load_causal_lm

    folder = Path(record(two_ranks, "actor-full")["published"])
    model, _ = load_causal_lm(folder, home)
    state = {k: v.float() for k, v in model.state_dict().items()}
    trained = weights(one_process, "actor-full")
    assert max_difference({k: state[k] for k in trained}, trained) < WEIGHT_ATOL


def test_the_published_critic_gives_the_trained_values(two_ranks: Path, one_process: Path) -> None:
    from services.trainer.data import state_pair_items
    from webrl.models.critic import CriticModel
    from webrl.models.examples import collate_prompts, pad_id_of
    from webrl.models.loading import load_tokenizer

    folder = Path(record(two_ranks, "critic")["published"])
    critic = CriticModel.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(folder, Settings())
    items = state_pair_items(tokenizer, fixed_steps(), MAX_LENGTH)
    batch = collate_prompts([it.state for it in items], pad_id_of(tokenizer))
    with torch.no_grad():
        values = critic.values(batch["input_ids"], batch["attention_mask"]).tolist()
    assert values == pytest.approx(record(one_process, "critic")["values"], abs=VALUE_ATOL)


def test_the_worker_runs_a_phase_on_two_ranks(tiny_dir: Path, store_trajectory, db: Settings,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_job`` (what the Celery task calls) with an Accelerate config and 2 processes launches the phase under
    ZeRO-3: critic then actor trained on both ranks, each published once, by rank 0, and recorded once."""
    from sqlalchemy import select

    from services.trainer.jobs import run_job
    from webrl.db.models import StepValue
    from webrl.db.session import session_scope
    from webrl.method.hyperparams import DEFAULTS, with_overrides
    from webrl.store.checkpoints import list_checkpoints, verify
    from webrl.wire.contracts import PhaseJob

    click, exit_ = 'do(action="Click", element="3")', 'exit(message="done")'
    for task, reward in (("a", 1.0), ("b", 0.0), ("c", 1.0), ("d", 0.0)):
        store_trajectory(task, 1, 0, [click, click, exit_], reward=reward)
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    settings = db.replace(trainer={"accelerate_config": ROOT / "configs" / "accelerate" / "deepspeed_zero3.yaml",
                                   "processes": RANKS})
    # the critic trains its heads only (a preset's choice): under ZeRO-3 a model that is not the engine is gathered too
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 2, "actor.lr": 1e-3, "critic.lr": 1e-3,
                                   "critic.train_backbone": False})
    result = run_job(settings, PhaseJob(phase=1, actor=str(tiny_dir), hyperparams=hp, max_length=400))
    assert verify(result.actor.path, result.actor.sha256) and verify(result.critic.path, result.critic.sha256)
    assert result.metrics["experience_steps"] == 12 and result.metrics["actor_steps"] > 0 < result.metrics["steps"]
    with session_scope(db) as session:
        rows = [(c.role, c.version) for c in list_checkpoints(session)]
        values = session.scalars(select(StepValue)).all()
    assert sorted(rows) == [("actor", result.actor.version), ("critic", result.critic.version)]
    assert len(values) == 12  # each step's values once: rank 0 alone writes them
