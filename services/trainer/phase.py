"""One WebRL phase of training (docs/design.md steps 4-7): experience -> critic -> advantages -> actor -> publish.

Order, with one model in training at a time:
1. The actor at the start of the phase is prepared. It scores the replay candidates (1/perplexity).
2. The critic (phase 1: fresh heads on the SFT backbone; later: the previous critic) is trained with
   ``losses.critic_loss`` on s and s' (with ``critic.train_backbone`` False only its heads, on states encoded once:
   ``critic_heads``), then gives V(s), V(s') for every step and is published.
3. A = binarise(clamp(V(s') - V(s) - 0.05 + r + G_t, -1, 1)) (``returns``).
4. The actor, not yet updated and so still the frozen reference (docs/design.md step 6), gives lp_ref (and its
   distributions, for the exact KL) of the steps its objective trains on (a distinct ``reference`` folder is used
   instead when the job names one); it is then trained on those steps (``actor_update.update_actor``) and
   published. With ``replay.demo_tasks`` (the anchor, this project's), a sample of the run's demonstration steps
   joins them with A = +1 (``replay.select_demonstrations``).

The published objective (``smooth-l1``) uses only steps with A > 0: ``actor_loss`` multiplies every other step by
mask = 0, so a step with A <= 0 would cost a forward and backward pass (and a reference pass) for a zero gradient.
Its batches are therefore made of the steps it keeps (``actor_update.trained_steps``): the same formula, each kept
step contributing once per epoch, at the cost of the kept steps only (on the CPU demo 0-35% of a phase's steps). The
paper's ``squared`` objective trains on every step.

Every knob of these steps comes from the job's :class:`webrl.method.hyperparams.WebRLHyperparams`.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from services.trainer import replay
from services.trainer.actor_update import (
    actor_loop_config,
    gate,
    kl_bound_record,
    last_epoch,
    positives_from_failed,
    positives_in_confidence_band,
    step_advantages,
    trained_steps,
    update_actor,
)
from services.trainer.critic_heads import train_heads
from services.trainer.data import (
    StepExample,
    actor_prompt_fn,
    demonstration_examples,
    first_success_examples,
    load_phase_examples,
    state_pair_collate,
    state_pair_items,
    window_sampler,
)
from services.trainer.intent_contrast import ContrastIntent, contrast_pool
from services.trainer.losses import critic_loss
from services.trainer.optimizer_state import load_state, save_state
from services.trainer.publish import checkpoint_dir, payload_version, publish_model, publish_unchanged
from services.trainer.sft import COMPLETION_BUDGET, MAX_LENGTH, load_for_training, lora_base_dtype
from services.trainer.training_loop import (
    LoopConfig,
    Prepared,
    evaluate,
    launched_with_deepspeed,
    make_accelerator,
    prepare,
    prepared_batches,
    train,
    whole_models,
)
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.db.repository import StepValues, save_step_values, tasks_where
from webrl.db.session import session_scope
from webrl.method.returns import advantages, binarise
from webrl.model_folders import is_adapter
from webrl.models.critic import critic_value
from webrl.models.examples import pad_id_of
from webrl.models.probe import load_probe
from webrl.runs.tracking import Tracker
from webrl.serving.paths import confined_path
from webrl.store.checkpoints import CheckpointInfo, find, verify
from webrl.wire.contracts import PhaseJob, PhaseResult, PublishedCheckpoint

log = logging.getLogger("webrl.trainer.phase")

#: The actor's drift measurements a phase records after its last epoch (and by epoch): ``actor_update``.
DRIFT_METRICS = ("kl_exact", "log_ratio_k1", "anchor_kl", "contrast_log_ratio", "stop_log_ratio", "flips",
                 "flips_shopping", "flips_shopping_admin", "flips_reddit", "flips_gitlab")


@dataclass
class TrainedPhase:
    """The checkpoints a phase published (their rows and manifests) and its training metrics."""

    actor: CheckpointInfo
    critic: CheckpointInfo
    metrics: dict[str, Any]

    def result(self) -> PhaseResult:
        """The ``train.phase`` result."""
        return PhaseResult(actor=PublishedCheckpoint(**self.actor.event()),
                           critic=PublishedCheckpoint(**self.critic.event()), metrics=self.metrics)


def _return_cached_memory() -> None:
    """On GPUs, hand the memory of the models nobody references any more back to the device: PyTorch's caching
    allocator keeps it otherwise, where a larger model of the phase cannot get it in one piece. The caller drops its
    references first (``del``, ``accelerator.free_memory()``); a model still referenced stays where it is."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def phase_tracker(settings: Settings, job: PhaseJob, accelerator: Any, model: str) -> Tracker | None:
    """The stream ``phase-<i>/<model>`` of the job's run (main process only), or None when the job logs nothing."""
    if job.tracking is None or not accelerator.is_main_process:
        return None
    return Tracker(settings, job.tracking, f"phase-{job.phase}/{model}")


def _loop_config(job: PhaseJob, lr: float, epochs: int) -> LoopConfig:
    batching = job.hyperparams.batching
    return LoopConfig(lr=lr, epochs=epochs, batch_size=batching.batch_size, grad_accum=batching.grad_accum,
                      seed=job.seed, max_minutes=job.max_minutes, mixed_precision=batching.mixed_precision,
                      gradient_checkpointing=batching.gradient_checkpointing)


def _reference_model(settings: Settings, job: PhaseJob, accelerator: Any) -> Any:
    """The job's ``reference`` folder loaded, when it names another model than the actor; else None (the reference
    is the actor before any update of this phase)."""
    if job.reference and Path(job.reference).resolve() != Path(job.actor).resolve():
        with whole_models(accelerator):  # it scores, unprepared, on every process
            ref_model, _ = load_for_training(job.reference, settings)
        return ref_model.to(accelerator.device)
    return None


def _experience(settings: Settings, job: PhaseJob, accelerator: Any, actor: Prepared, tokenizer: Any,
                max_length: int) -> tuple[list[StepExample], list[StepExample], dict[str, Any]]:
    """This phase's steps with the replayed ones, the run's demonstration steps (the anchor's pool), and counts."""
    prompt = actor_prompt_fn(tokenizer, max_tokens=max_length - COMPLETION_BUDGET)
    hp = job.hyperparams
    with session_scope(settings) as session:
        current = load_phase_examples(session, job.phase, prompt, run_id=job.run_id, gamma=hp.advantage.gamma,
                                      purpose=job.purpose, orm_version=job.orm_version)
        candidates = (first_success_examples(session, job.phase, prompt, run_id=job.run_id,
                                             gamma=hp.advantage.gamma, purpose=job.purpose,
                                             orm_version=job.orm_version)
                      if hp.replay.enabled else [])
        demonstrations = (demonstration_examples(session, prompt, run_id=job.run_id, gamma=hp.advantage.gamma)
                          if hp.replay.rehearses else [])
    if not current:
        raise ValueError(f"phase {job.phase} of run {job.run_id} has no labelled '{job.purpose}' trajectories "
                         "to train on")
    with accelerator.autocast():
        scores = replay.score_confidence(accelerator, actor.model, tokenizer, candidates,
                                         batch_size=hp.batching.batch_size, max_length=max_length)
    replayed = replay.select_replay(candidates, scores, len(current), seed=job.seed, replay=hp.replay)
    experience = replay.build_experience(current, replayed, seed=job.seed)
    stats = {"current_steps": len(current), "replay_candidates": len(candidates), "replay_steps": len(replayed),
             "demonstration_pool": len(demonstrations)}
    log.info("phase %d experience: %s", job.phase, stats)
    return experience, demonstrations, stats


def _train_intents(settings: Settings) -> list[ContrastIntent]:
    """The intent contrast's pool: the stored train tasks (seed and generated) that name their template."""
    with session_scope(settings) as session:
        return contrast_pool(TaskConfig.from_json(t.config) for t in tasks_where(session, split="train"))


def _load_critic(settings: Settings, job: PhaseJob) -> Any:
    """The critic to train: the previous one, or fresh heads on the actor's backbone. On an adapter actor the critic
    is an adapter too: its own LoRA on the actor's frozen base (bf16), started from the actor's or new
    (``critic.backbone_start``), plus the two heads."""
    from webrl.models.critic import CriticModel

    start = job.critic or job.critic_base or job.actor
    dtype = lora_base_dtype() if is_adapter(start) else torch.float32
    if job.critic:
        return CriticModel.from_pretrained(job.critic, dtype=dtype, settings=settings, trainable=True)
    return CriticModel.from_backbone(start, seed=job.seed, dtype=dtype, settings=settings,
                                     head_init_std=job.hyperparams.critic.head_init_std,
                                     from_actor=job.hyperparams.critic.backbone_start == "actor")


def critic_loss_fn(model: Any, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """Critic objective on one batch of (s, s', G) -> ``losses.critic_loss``; each distinct state of the batch is
    forwarded once (``state_pair_collate``) and its logits gathered for the steps whose s or s' it is."""
    logits = model(batch["states_input_ids"], batch["states_attention_mask"])  # (2, U, 2)
    return critic_loss(logits[:, batch["state_row"]], logits[:, batch["next_row"]], batch["mc_return"])


def state_pair_values(model: Any, batch: dict) -> dict[str, torch.Tensor]:
    """V(s) and V(s') of every step of a ``state_pair_collate`` batch (each distinct state forwarded once)."""
    v = critic_value(model(batch["states_input_ids"], batch["states_attention_mask"]))  # (U,)
    return {"v_s": v[batch["state_row"]], "v_next": v[batch["next_row"]]}


def train_critic(settings: Settings, job: PhaseJob, tokenizer: Any, experience: list[StepExample],
                 max_length: int, version: str, dest: Path) -> tuple[CheckpointInfo | None, list[float], list[float]]:
    """Train and publish the critic; return it (None on non-main processes) with V(s) and V(s') of every
    experience step. Training batches mix windows of two consecutive steps of a trajectory (their shared state is
    forwarded once: 3 forwards, not 4); the values pass keeps each trajectory together (k steps: k + 1 forwards,
    not 2k)."""
    config = _loop_config(job, job.hyperparams.critic.lr, job.hyperparams.critic.epochs)
    if not job.hyperparams.critic.train_backbone:
        return _train_critic_heads(settings, job, tokenizer, experience, max_length, version, dest, config)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, _load_critic(settings, job), config)
    items = state_pair_items(tokenizer, experience, max_length)
    collate = state_pair_collate(pad_id_of(tokenizer))
    loader = prepared_batches(accelerator, items, window_sampler(items, config.batch_size, seed=job.seed),
                              collate)
    tracker = phase_tracker(settings, job, accelerator, "critic")
    summary = train(accelerator, prepared, loader, critic_loss_fn, config,
                    on_step=tracker.step_hook("critic/") if tracker else None)
    eval_loader = prepared_batches(accelerator, items, window_sampler(items, config.batch_size, shuffle=False),
                                   collate)

    with accelerator.autocast():
        v = evaluate(accelerator, prepared.model, eval_loader, state_pair_values, len(items))
    metrics = {**summary.metrics, "steps": summary.steps, "seconds": summary.seconds,
               "tokens_per_second": summary.tokens_per_second,
               "first_loss": summary.first_loss, "last_loss": summary.last_loss, "examples": len(items)}
    if tracker is not None:
        tracker.histogram("critic/value", v["v_s"], step=summary.steps)
        tracker.close()
    info = publish_model(settings, accelerator, prepared.model, tokenizer, role="critic", version=version, dest=dest,
                         phase=job.phase, parent_version=_version_of(job.critic), metrics=metrics, replace=True)
    del prepared
    accelerator.free_memory()  # the accelerator's own references to the critic and its optimizer; then collects
    return info, v["v_s"], v["v_next"]


def _train_critic_heads(settings: Settings, job: PhaseJob, tokenizer: Any, experience: list[StepExample],
                        max_length: int, version: str, dest: Path, config: LoopConfig
                        ) -> tuple[CheckpointInfo | None, list[float], list[float]]:
    """:func:`train_critic` with ``critic.train_backbone`` False: the heads alone, on states computed once
    (``critic_heads``)."""
    accelerator = make_accelerator(config)
    with whole_models(accelerator):  # its backbone encodes the states unprepared; the heads alone are prepared
        critic = _load_critic(settings, job)
    tracker = phase_tracker(settings, job, accelerator, "critic")
    items = state_pair_items(tokenizer, experience, max_length)
    trained = train_heads(accelerator, critic, items, pad_id_of(tokenizer), config,
                          on_step=tracker.step_hook("critic/") if tracker else None)
    summary = trained.summary
    metrics = {**summary.metrics, "steps": summary.steps, "seconds": trained.encode_seconds + summary.seconds,
               "encode_seconds": trained.encode_seconds, "distinct_states": trained.states,
               "first_loss": summary.first_loss, "last_loss": summary.last_loss, "examples": len(experience),
               "train_backbone": False}
    if tracker is not None:
        tracker.histogram("critic/value", trained.v_s, step=summary.steps)
        tracker.close()
    info = publish_model(settings, accelerator, critic, tokenizer, role="critic", version=version, dest=dest,
                         phase=job.phase, parent_version=_version_of(job.critic), metrics=metrics, replace=True)
    del critic
    accelerator.free_memory()
    return info, trained.v_s, trained.v_next


def _record_step_values(settings: Settings, phase: int, critic_version: str, experience: list[StepExample],
                        v_s: list[float], v_next: list[float], raw: torch.Tensor, a: torch.Tensor,
                        trained: Collection[int]) -> None:
    """V(s), V(s'), A and A_bin of every experience step, and whether the actor's update trained on it (``trained``:
    the loss's mask less the positives the update refused, none when the gate kept the actor), stored per step under
    the phase's critic (``step_values``)."""
    used = set(trained)
    rows = [StepValues(ex.trajectory_id, ex.index, float(v_s[i]), float(v_next[i]), float(raw[i]), float(a[i]),
                       i in used) for i, ex in enumerate(experience)]
    with session_scope(settings) as session:
        save_step_values(session, critic_version, phase, rows)


def _carried_state(settings: Settings, job: PhaseJob, actor: Prepared) -> bool:
    """Under ``actor.optimizer_state`` "keep", load the AdamW state stored with the start actor's version into the
    prepared optimizer (:mod:`services.trainer.optimizer_state`); whether one was loaded (none for the SFT actor)."""
    if job.hyperparams.actor.optimizer_state != "keep":
        return False
    if launched_with_deepspeed():
        raise ValueError("actor.optimizer_state keep is not supported under DeepSpeed ZeRO (the optimizer's state is "
                         "partitioned across the processes); use reset")
    return load_state(settings, actor.optimizer, _version_of(job.actor))


def _version_of(path: str | None) -> str | None:
    if path is None:
        return None
    from webrl.models.loading import checkpoint_version

    return checkpoint_version(path)


def _already_done(settings: Settings, version: str) -> TrainedPhase | None:
    with session_scope(settings) as session:
        actor, critic = find(session, "actor", version), find(session, "critic", version)
    if actor and critic and verify(actor.path, actor.sha256) and verify(critic.path, critic.sha256):
        return TrainedPhase(actor=actor, critic=critic, metrics=actor.metrics)
    return None


#: What a phase job carries that the trainer never reads: where it logs, and the hyperparameters of the stages before
#: the update (a resume may change them, ``--phases`` say, and the phase it trains is the same).
NOT_TRAINED_ON: dict[str, Any] = {"tracking": True,
                                  "hyperparams": {"curriculum": True, "rollout": True, "evaluation": True}}


def phase_version(job: PhaseJob) -> str:
    """The version the phase's checkpoints are published under: a hash of what the trainer reads, so the same
    update asked for again (a redelivered job, a resumed run, one whose later phases changed) finds its checkpoints
    instead of training again."""
    return payload_version(f"phase{job.phase}", job.model_dump(exclude=NOT_TRAINED_ON))


def run_phase(settings: Settings, job: PhaseJob) -> TrainedPhase | None:
    """Train the phase's critic then actor and publish both. Idempotent: the same job returns its published
    checkpoints without training again. Under a multi-process launch only the main process gets the result
    (the others return None)."""
    version = phase_version(job)
    done = _already_done(settings, version)
    if done is not None:
        log.info("phase %d (%s) already trained", job.phase, version)
        return done
    model, tokenizer = load_for_training(job.actor, settings)
    context = int(getattr(model.config, "max_position_embeddings", MAX_LENGTH))
    max_length = min(job.max_length or MAX_LENGTH, context)
    hp = job.hyperparams
    config = actor_loop_config(hp, job.seed, job.max_minutes)
    accelerator = make_accelerator(config)
    actor = prepare(accelerator, model, config)
    kept_state = _carried_state(settings, job, actor)
    experience, demonstrations, stats = _experience(settings, job, accelerator, actor, tokenizer, max_length)

    critic_dest = (confined_path(settings, job.critic_output, "critic_output") if job.critic_output
                   else checkpoint_dir(settings, "critic", version))
    critic_info, v_s, v_next = train_critic(settings, job, tokenizer, experience, max_length, version, critic_dest)

    reward = torch.tensor([ex.reward for ex in experience])
    mc_return = torch.tensor([ex.mc_return for ex in experience])
    clamped = advantages(torch.tensor(v_s), torch.tensor(v_next), reward, mc_return, hp.advantage)  # (N,)
    a = binarise(clamped, hp.advantage)  # (N,)
    trained = trained_steps(a, clamped, experience, hp.actor)  # the steps actor_loss does not multiply by 0
    trained, outside_band = positives_in_confidence_band(accelerator, actor.model, tokenizer, experience, a, trained,
                                                         hp.actor, batch_size=hp.batching.batch_size,
                                                         max_length=max_length)
    gated = gate(a, trained, experience, job.phase, hp.actor)
    if gated.skipped:
        log.info("phase %d: %d steps with A > 0 of its own rollouts, fewer than actor.min_new_positive_steps = %d; "
                 "the actor is published unchanged", job.phase, gated.positives - gated.replayed_positives,
                 hp.actor.min_new_positive_steps)
    trained = gated.steps
    if critic_info is not None:  # the main process records what the phase made of each step (the viewer shows it)
        _record_step_values(settings, job.phase, critic_info.version, experience, v_s, v_next, clamped, a, trained)
    anchor = replay.select_demonstrations(demonstrations, 0 if gated.skipped else gated.positives,
                                          seed=job.seed + job.phase, replay=hp.replay)
    step_advantage = step_advantages(a, trained, len(anchor), hp.advantage)
    tracker = phase_tracker(settings, job, accelerator, "actor")
    if tracker is not None:  # the actor's training signal, before its first step
        tracker.histogram("advantage/clamped", clamped.tolist(), step=0)
        tracker.histogram("advantage/binarised", a.tolist(), step=0)
    if not step_advantage:
        log.info("phase %d: no step to train the actor on; it is published unchanged", job.phase)
    reference_model = _reference_model(settings, job, accelerator) if step_advantage else None
    try:  # flips after the last epoch only (what the report shows): each earlier one is another probe pass
        summary = update_actor(accelerator, actor, tokenizer, [experience[i] for i in trained] + anchor,
                               step_advantage, hp.actor, config, max_length=max_length,
                               probe=load_probe(job.probe) if job.probe else None, tracker=tracker,
                               reference_model=reference_model, probe_every_epoch=False,
                               anchors=load_probe(job.anchors) if job.anchors and hp.actor.anchor_kl > 0 else None,
                               contrast=_train_intents(settings) if hp.actor.intent_contrast > 0 else None,
                               experience=experience)
    finally:
        if tracker is not None:
            tracker.close()
    del reference_model  # before the actor is gathered and saved
    _return_cached_memory()
    metrics = {**summary.metrics, **stats, "steps": summary.steps, "seconds": summary.seconds,
               "tokens_per_second": summary.tokens_per_second,
               "first_loss": summary.first_loss, "last_loss": summary.last_loss,
               **last_epoch(summary.epochs, DRIFT_METRICS), **kl_bound_record(hp.actor, summary),
               "positive_fraction": float((a > 0).float().mean()), "actor_steps": len(step_advantage),
               "positive_steps": gated.positives, "replayed_positive_steps": gated.replayed_positives,
               "positives_outside_confidence_band": outside_band,
               "actor_skipped": int(gated.skipped),
               "positives_from_failed": positives_from_failed(a, experience, [i for i in range(len(a)) if a[i] > 0]),
               "trained_positives_from_failed": positives_from_failed(a, experience, trained),
               "demonstration_steps": len(anchor), "optimizer_state_kept": int(kept_state),
               "experience_steps": len(experience), "value_mean": float(torch.tensor(v_s).mean()),
               "critic_loss": (critic_info.metrics or {}).get("critic_loss") if critic_info else None,
               "critic_seconds": (critic_info.metrics or {}).get("seconds") if critic_info else None}
    actor_dest = (confined_path(settings, job.actor_output, "actor_output") if job.actor_output
                  else checkpoint_dir(settings, "actor", version))
    if hp.actor.optimizer_state == "keep" and accelerator.is_main_process:  # before the actor it belongs to
        save_state(settings, actor.optimizer, version)
    accelerator.wait_for_everyone()
    if step_advantage:
        actor_info = publish_model(settings, accelerator, actor.model, tokenizer, role="actor", version=version,
                                   dest=actor_dest, phase=job.phase, parent_version=_version_of(job.actor),
                                   metrics=metrics, replace=True)
    else:  # nothing trained it: the start actor's own files
        actor_info = publish_unchanged(settings, accelerator, Path(job.actor), role="actor", version=version,
                                       dest=actor_dest, phase=job.phase, parent_version=_version_of(job.actor),
                                       metrics=metrics)
    del actor, model
    accelerator.free_memory()
    if actor_info is None or critic_info is None:
        return None
    return TrainedPhase(actor=actor_info, critic=critic_info, metrics=metrics)
