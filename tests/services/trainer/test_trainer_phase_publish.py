"""A whole WebRL phase on the tiny model (critic then actor, published), SFT jobs, and published checkpoints
that reload to identical outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlalchemy import delete, select

from services.trainer.phase import run_phase
from services.trainer.publish import payload_version, publish_model
from services.trainer.sft import load_for_training, run_sft
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare
from webrl.db.models import Checkpoint, StepValue
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.store.checkpoints import list_checkpoints, read_manifest, verify
from webrl.wire.contracts import PhaseJob, SftJob

CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def test_published_actor_reloads_to_identical_logits(tiny, db, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model, tokenizer = tiny
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.01)  # differ from the folder it came from
    accelerator = make_accelerator(LoopConfig())
    prepared = prepare(accelerator, model, LoopConfig())
    info = publish_model(db, accelerator, prepared.model, tokenizer, role="actor", version="t1",
                         dest=tmp_path / "actor", phase=1, parent_version=None, metrics={"kl": 0.0})
    assert info is not None and verify(info.path, info.sha256)
    reloaded = AutoModelForCausalLM.from_pretrained(info.path, local_files_only=True, dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer("Show me Books do(action", add_special_tokens=False)["input_ids"]])
    model.cpu().eval()  # trained on the accelerator's device; the published weights must equal them exactly
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reloaded(input_ids=ids).logits)


def test_published_critic_reloads_to_identical_values(tiny_dir: Path, tiny, db, tmp_path: Path) -> None:
    from webrl.models.critic import CriticModel

    _, tokenizer = tiny
    critic = CriticModel.from_backbone(tiny_dir, seed=3, dtype=torch.float32)
    accelerator = make_accelerator(LoopConfig())
    prepared = prepare(accelerator, critic, LoopConfig())
    info = publish_model(db, accelerator, prepared.model, tokenizer, role="critic", version="c1",
                         dest=tmp_path / "critic", phase=1, parent_version=None, metrics={})
    reloaded = CriticModel.from_pretrained(info.path, dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer("Show me Books", add_special_tokens=False)["input_ids"]])
    mask = torch.ones_like(ids)
    critic.cpu().eval()  # as above
    with torch.no_grad():
        assert torch.equal(critic.values(ids, mask), reloaded.values(ids, mask))


def _seed_two_phases(store) -> None:
    store("a", 1, 0, [CLICK, EXIT], reward=1.0)
    store("b", 1, 0, [TYPE, TYPE], reward=0.0)
    store("a", 2, 0, [CLICK, TYPE, EXIT], reward=1.0)
    store("b", 2, 0, [TYPE], reward=0.0)
    store("c", 2, 0, [CLICK, EXIT], reward=1.0)


def test_a_phase_trains_critic_then_actor_and_publishes_both(tiny_dir: Path, store_trajectory, db) -> None:
    _seed_two_phases(store_trajectory)
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3})
    job = PhaseJob(phase=2, actor=str(tiny_dir), hyperparams=hp, max_length=400)
    result = run_phase(db, job)
    assert result.actor.version == result.critic.version
    for info in (result.actor, result.critic):
        assert verify(info.path, info.sha256)
        assert read_manifest(info.path)["phase"] == 2
    assert (Path(result.critic.path) / "critic_heads.safetensors").is_file()
    m = result.metrics
    assert m["current_steps"] == 6 and m["replay_candidates"] == 2
    assert m["replay_steps"] <= 2 * m["current_steps"]
    for key in ("actor_loss", "log_ratio_k1", "kl_exact", "mean_advantage", "masked_fraction", "beta_mean",
                "grad_norm"):
        assert key in m and m[key] == m[key]  # present and not NaN
    # the actor's batches hold the A > 0 steps only (actor_loss would multiply every other step by 0)
    assert m["masked_fraction"] == 0.0
    assert 0 < m["actor_steps"] == round(m["positive_fraction"] * m["experience_steps"]) <= m["experience_steps"]
    assert "critic_loss" in result.critic.metrics
    with session_scope(db) as session:
        rows = {(c.role, c.version) for c in list_checkpoints(session)}
        values = session.scalars(select(StepValue)).all()
    assert rows == {("actor", result.actor.version), ("critic", result.critic.version)}
    # what the phase made of each step it trained on, for the viewer: the 6 current steps and the replayed ones
    assert len(values) == m["current_steps"] + m["replay_steps"]
    assert {v.critic_version for v in values} == {result.critic.version} and {v.phase for v in values} == {2}
    assert all(0.0 <= v.v_s <= 1.0 and -1.0 <= v.advantage <= 1.0 for v in values)
    assert all(v.used == (v.advantage_binarised > 0) and round(v.advantage_binarised, 5) in (1.0, -0.6) for v in values)
    assert sum(v.used for v in values) / len(values) == pytest.approx(m["positive_fraction"])
    again = run_phase(db, job)  # idempotent: finds the published pair, trains nothing
    assert (again.actor.sha256, again.critic.sha256) == (result.actor.sha256, result.critic.sha256)

    phase3 = PhaseJob(phase=2, actor=result.actor.path, critic=result.critic.path, reference=str(tiny_dir),
                      hyperparams=with_overrides(hp, {"replay.enabled": False, "actor.kl": False}), max_length=400,
                      actor_output=str(Path(db.artifacts_dir) / "next-actor"))
    nxt = run_phase(db, phase3)  # resumes the critic, separate reference, w/o-KL ablation
    assert nxt.actor.path == str((Path(db.artifacts_dir) / "next-actor").resolve())
    assert nxt.critic.parent_version == result.critic.version


def test_sft_jobs_train_actor_and_orm(tiny_dir: Path, store_trajectory, db) -> None:
    ids = [store_trajectory("s1", 0, 0, [CLICK, EXIT], reward=None, env_score=1.0, purpose="sft"),
           store_trajectory("s2", 0, 0, [TYPE], reward=None, env_score=0.0, purpose="sft")]
    out = Path(db.artifacts_dir) / "actor-sft"
    info = run_sft(db, SftJob(base=str(tiny_dir), output=str(out), kind="actor", trajectory_ids=ids, epochs=2,
                              lr=1e-2, batch_size=2, max_length=400))
    assert info.metrics["examples"] == 2  # the successful trajectory's two steps only
    assert info.metrics["last_loss"] < info.metrics["first_loss"]
    assert verify(out) and read_manifest(out)["version"] == info.version
    with session_scope(db) as session:  # a job killed after publishing the folder, before recording its row
        session.execute(delete(Checkpoint).where(Checkpoint.version == info.version))
    assert run_sft(db, SftJob(base=str(tiny_dir), output=str(out), kind="actor", trajectory_ids=ids, epochs=2,
                              lr=1e-2, batch_size=2, max_length=400)).sha256 == info.sha256
    with session_scope(db) as session:  # the retry found the folder, trained nothing, and recorded the row
        assert [(c.version, c.sha256) for c in list_checkpoints(session, "actor")] == [(info.version, info.sha256)]
    orm = run_sft(db, SftJob(base=str(tiny_dir), output=str(Path(db.artifacts_dir) / "orm"), kind="orm", phase=0,
                             purpose="sft", lr=1e-2, batch_size=2, max_length=400))
    assert orm.metrics["examples"] == 2 and orm.role == "orm"


def test_actor_sft_trains_on_relabelled_copies_beside_each_demonstration(tiny_dir: Path, store_trajectory,
                                                                          db) -> None:
    ids = [store_trajectory("s1", 0, 0, [CLICK, EXIT], reward=None, env_score=1.0, purpose="sft")]
    plain = SftJob(base=str(tiny_dir), output=str(Path(db.artifacts_dir) / "plain"), kind="actor", trajectory_ids=ids,
                   lr=1e-2, batch_size=2, max_length=400)
    copies = plain.model_copy(update={"output": str(Path(db.artifacts_dir) / "relabelled"), "relabelled_copies": 3})
    info = run_sft(db, copies)
    assert info.metrics["examples"] == 2 * (1 + 3)  # two steps, the demonstration and three copies of it
    # a job without copies (or a LoRA rank) keeps the version it had before those fields existed
    plain_version = run_sft(db, plain).version
    assert plain_version == payload_version("actor-sft", plain.model_dump(exclude={"relabelled_copies", "lora_rank"}))
    assert info.version != plain_version


def test_the_anchor_adds_demonstration_steps_to_the_actors_update(tiny_dir: Path, store_trajectory, db) -> None:
    _seed_two_phases(store_trajectory)
    for key in ("d", "e", "f"):  # the run's demonstrations: the oracle's solved episodes (env score, no ORM label)
        store_trajectory(key, 0, 1, [TYPE, CLICK, EXIT], reward=None, env_score=1.0, purpose="sft")
    store_trajectory("g", 0, 1, [CLICK], reward=None, env_score=0.0, purpose="sft")  # failed: not in the pool
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3,
                                   "replay.demo_tasks": 4, "replay.demo_ratio": 1.0})
    m = run_phase(db, PhaseJob(phase=2, actor=str(tiny_dir), hyperparams=hp, max_length=400)).metrics
    positive = round(m["positive_fraction"] * m["experience_steps"])
    assert m["demonstration_pool"] == 9 and positive > 0
    assert m["demonstration_steps"] == min(9, positive)
    assert m["actor_steps"] == positive + m["demonstration_steps"]
    assert m["masked_fraction"] == 0.0  # demonstration steps pass through the objective with A = +1


def test_a_phase_with_too_few_positives_publishes_the_actor_unchanged(tiny_dir: Path, tiny, store_trajectory,
                                                                      db) -> None:
    _seed_two_phases(store_trajectory)
    base = {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3}
    trained = run_phase(db, PhaseJob(phase=2, actor=str(tiny_dir), max_length=400,
                                     hyperparams=with_overrides(DEFAULTS, base))).metrics
    positives = trained["positive_steps"]
    assert positives > 0 and trained["actor_skipped"] == 0 and trained["actor_steps"] == positives
    new = positives - trained["replayed_positive_steps"]  # the phase's own: what the gate counts
    assert new > 0

    hp = with_overrides(DEFAULTS, {**base, "actor.min_new_positive_steps": new + 1})
    result = run_phase(db, PhaseJob(phase=2, actor=str(tiny_dir), hyperparams=hp, max_length=400))
    m = result.metrics
    assert m["actor_skipped"] == 1 and m["positive_steps"] == positives and m["actor_steps"] == 0
    assert "critic_loss" in result.critic.metrics  # the critic still trains
    with session_scope(db) as session:  # the steps' record says the update trained on none of them
        used = [v.used for v in session.scalars(select(StepValue).where(
            StepValue.critic_version == result.critic.version))]
    assert len(used) == m["experience_steps"] and not any(used)
    published, _ = load_for_training(result.actor.path, db)  # the start actor's weights
    start = tiny[0].state_dict()
    for name, tensor in published.state_dict().items():
        assert torch.equal(tensor, start[name]), name
    # ... in the very files it started from, so an evaluation stored for the start actor answers for this one
    from webrl.store.checkpoints import content_sha256

    assert content_sha256(result.actor.path) == content_sha256(tiny_dir) and verify(result.actor.path)
    assert read_manifest(result.actor.path)["phase"] == 2

    at_threshold = with_overrides(DEFAULTS, {**base, "actor.min_new_positive_steps": new})
    again = run_phase(db, PhaseJob(phase=2, actor=str(tiny_dir), hyperparams=at_threshold, max_length=400))
    assert again.metrics["actor_skipped"] == 0 and again.metrics["actor_steps"] == positives
    with session_scope(db) as session:
        used = [v.used for v in session.scalars(select(StepValue).where(
            StepValue.critic_version == again.critic.version))]
    assert sum(used) == positives


def _steps_of(state_file: Path) -> set[int]:
    """The AdamW step count of every parameter in a stored optimizer state."""
    return {int(s["step"]) for s in torch.load(state_file, weights_only=True)["state"].values()}


def test_the_actors_optimizer_state_carries_over_phases_when_kept(tiny_dir: Path, store_trajectory, db) -> None:
    from services.trainer.optimizer_state import load_state, state_path

    _seed_two_phases(store_trajectory)
    base = {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3}
    keep = with_overrides(DEFAULTS, {**base, "actor.optimizer_state": "keep"})
    first = run_phase(db, PhaseJob(phase=2, actor=str(tiny_dir), hyperparams=keep, max_length=400))
    assert first.metrics["optimizer_state_kept"] == 0  # the SFT actor has none
    assert _steps_of(state_path(db, first.actor.version)) == {first.metrics["steps"]} and first.metrics["steps"] > 0

    second = run_phase(db, PhaseJob(phase=2, actor=first.actor.path, critic=first.critic.path, hyperparams=keep,
                                    max_length=400))
    assert second.metrics["optimizer_state_kept"] == 1
    # AdamW's step count (and its bias correction) continues from the first phase's
    assert _steps_of(state_path(db, second.actor.version)) == {first.metrics["steps"] + second.metrics["steps"]}

    reset = run_phase(db, PhaseJob(phase=2, actor=first.actor.path, critic=first.critic.path,
                                   hyperparams=with_overrides(DEFAULTS, base), max_length=400))
    assert reset.metrics["optimizer_state_kept"] == 0 and not state_path(db, reset.actor.version).exists()

    # a state saved for other parameters is refused, not loaded into the wrong ones
    other = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters())
    with pytest.raises(ValueError, match="other shapes"):
        load_state(db, other, first.actor.version)
    assert not load_state(db, other, "no-such-version") and not load_state(db, other, None)


@pytest.mark.parametrize("start", ["actor", "base"])
def test_a_fresh_critic_on_an_adapter_actor_starts_where_the_hyperparameters_say(tiny_dir: Path, db, tmp_path: Path,
                                                                                start: str) -> None:
    from services.trainer.phase import _load_critic
    from webrl.models.adapters import LoraSpec, load_trainable, save_adapter

    actor = load_trainable(tiny_dir, db, torch.float32, lora=LoraSpec(rank=2, alpha=4))
    with torch.no_grad():  # an adapter that moves the states
        for name, weight in actor.named_parameters():
            if "lora_B" in name:
                weight.fill_(0.3)
    (tmp_path / "actor").mkdir()
    save_adapter(actor, tmp_path / "actor")
    hp = with_overrides(DEFAULTS, {"critic.backbone_start": start})
    critic = _load_critic(db, PhaseJob(phase=1, actor=str(tmp_path / "actor"), hyperparams=hp))
    ids = torch.tensor([[1, 5, 9, 12]])
    transformer = actor.get_base_model().model
    with torch.no_grad():
        adapted = transformer(input_ids=ids).last_hidden_state
        with actor.disable_adapter():
            base = transformer(input_ids=ids).last_hidden_state
        got = critic.backbone(input_ids=ids).last_hidden_state.float()
    assert (adapted - base).abs().max() > 0.5
    # the base may load in bf16 where the CPU computes it
    assert torch.allclose(got, adapted if start == "actor" else base, atol=2e-2)
