"""Named hyperparameter records for ``webrl train --preset``; explicit flags override them.

Each preset is a :class:`webrl.method.hyperparams.WebRLHyperparams`: a misspelt field is a ``TypeError`` when this
module is imported, never a value silently ignored. What a preset does not name keeps its default (the paper's
method at the CPU demo's scale).
"""

from __future__ import annotations

from dataclasses import replace

from webrl.method.hyperparams import (
    ActorLoss,
    Batching,
    Critic,
    Curriculum,
    Evaluation,
    Rollout,
    WebRLHyperparams,
)

#: The pretrained small actor (SmolLM2-135M + LoRA adapters) on a 2-core CPU. Every policy step costs ~1-2 s and
#: every trained step ~3-4 s (vs milliseconds for the tiny model), so a phase is smaller: two phases, whose first
#: evaluates the run's fixed sample of 40 test tasks (one of each of the 4 held-out templates and of 36 seen ones)
#: and whose last evaluates all 165. The SFT actor's evaluation (phase 0) is read back from the one stored under its
#: content key (``webrl.store.evaluations``: webrl/assets/evaluations for the shipped actor).
_PRETRAINED_CPU = WebRLHyperparams(
    curriculum=Curriculum(phases=2, tasks_per_phase=24, candidates_per_phase=48, seed_tasks=24),
    # Evaluation is the run's largest cost (37 of seed 0's 65.0 min, 2026-12-02) and its time follows its steps:
    # the middle phase's 40 tasks instead of one of each of the 65 templates took 7.4 min against 8.9 on a machine
    # 1.39x slower (5.3 scaled), and 16 greedy episodes at once instead of 8 ran the same 80 steps 1.09x faster on
    # a bench and a whole run's last evaluation ~1.05x faster per step (docs/measurements.md, 2026-12-02). The local
    # backend prefills an episode's next step from its last prompt (the intent and earlier rounds it repeats): a
    # tenth fewer prompt tokens computed, 1.13x on an evaluation of 40, the same actions (2026-12-04).
    # Each update is validated before it is published (the validate stage: 40 train-split tasks, one-sided sign test
    # at 0.05): seed 1's phase 1, 9 positives of its own, scored 16 -> 6 and was refused, so the run ended at the SFT
    # actor's 15.2% instead of the 6.1% its published collapse gave; every seed-0 update was published (16 -> 14
    # offline, 16 -> 17 and 17 -> 14 in whole runs), so it left seed 0's actors as they were. The one whole seed-0 run
    # with it ended at 23.6% (the five without it: 27.3-29.1%) because its second update lost seen tasks (1 gained,
    # 4 lost on the validation tasks, p = 0.19), not because anything was refused
    # (docs/runs/2026-12-06-make-demo-seed0-validated-end). It costs two greedy evaluations of 40 train tasks a run
    # (9.4 and 8.3 min on a Xeon 1.8-2.1x slower than the one that ran the preset in 44.3 min); the SFT actor's own
    # is read back (webrl/assets/evaluations).
    evaluation=Evaluation(tasks=165, subset=40, concurrency=16, validation_tasks=40),
    # the longest oracle demonstration takes 8 steps; failing episodes run to the horizon;
    # training rollouts sample, evaluation is greedy
    # training rollouts sample in bf16 where the CPU computes it natively: batches of 8 prompts of ~1,000 tokens
    # generated in 4.4 s against 8.9 s in fp32 (Intel Xeon with AMX, 2 threads, measured 2026-11-29)
    # (bf16 greedy decoding would not reproduce, so evaluation stays fp32: webrl.store.evaluations). Rollout jobs of
    # 65 tasks run the middle phase's sample in one job and all 165 test tasks in three (jobs of 24: three and
    # seven); measured, the evaluation's time per step did not change (2.14 s against 2.02, docs/measurements.md)
    rollout=Rollout(chunk=65, concurrency=8, max_steps=8, temperature=0.7, sampling_dtype="auto"),
    # LoRA moves only the adapters: the SFT's 5e-4 / 2 for the actor. The critic's fresh heads, initialised as
    # WebRL's (std 0.2) on SmolLM2's last states (norm ~50), swung its loss between 0 and 140 from one step to the
    # next at 5e-4 and at 5e-5; here they start at the fan-in scale (trained at 1e-4 with the LoRA critic, at 1e-3
    # alone: below).
    # A phase's A > 0 steps are few (the successes of 24 rollouts plus replay: ~10-60 steps, 3-14 optimizer steps
    # an epoch), so the actor makes three passes over them. At 2.5e-4 one phase lost 12-13 of the SFT actor's 25 test
    # tasks; two phases at 1e-4 kept 21, gained 11: 15.2% -> 19.4% (docs/measurements.md, measured 2026-11-27,
    # commit 4e0d2c3). One pass at 3e-4 (a third of the optimizer steps) lost 14 of the 25 in three phases: 7.3%
    # (2026-11-27, commit a2a8128). The gradient norm is clipped at the published trainer's 0.01 after a 3-step
    # warm-up: these norms are 0.02-0.73, so every step is clipped and AdamW sees each batch's gradient at one scale.
    # Re-running one stored phase's update both ways (the same data, start actor and epochs), the clipped update
    # solved 47/165 test tasks (SFT 25: gained 25, lost 3) and the unclipped one 17/165 (gained 2, lost 10)
    # (docs/runs/2026-11-29-phase-offline-clip, measured 2026-11-29, commit ec8c8d7); over three seeds of that phase
    # (47 / 35 / 33 against 17 / 24 / 26), clip vs unclipped +9.7 points (+1.1 .. +21.6 over templates), but on a
    # second stored phase (28 / 25 / 44 against 45 / 44 / 44) -7.3 (-22.3 .. +4.7): each time the held-out orders
    # template decided it, and neither setting learns it on both phases. The clip is the published setting, not a
    # shown lever
    # (docs/runs/2026-12-06-phase-offline-clip-rehearsal, 2026-12-06-phase-offline-second-phase-seeds)
    # An update needs 5 steps with A > 0 from the phase's own rollouts (about one solved episode; replayed ones do not
    # count), or the actor is kept as it is. Two runs of this preset: seed 0's phase 1 trained on 19 (11 its own) and
    # rose from 14/65 to 19/65 test tasks; seed 1's rollouts solved 0 of 24, so it trained on 6 replayed ones alone,
    # fell to 6/65 and had lost 15 of the SFT actor's 25 tasks on all 165 by the next phase
    # (docs/runs/2026-11-29-make-demo-seed1). Offline, another such phase (14 replayed positives, none its own)
    # updated with the gate off lost 5 of the SFT actor's 14 tasks of the 65-task sample and gained none
    # (docs/runs/2026-11-29-phase-offline-replay-only, measured 2026-11-29, commit 8653b23).
    actor=ActorLoss(lr=1e-4, epochs=3, max_grad_norm=0.01, warmup_steps=3, min_new_positive_steps=5),
    # The critic's heads alone on the frozen backbone, each distinct state encoded once (critic_heads.py): its training
    # took 96 s against the LoRA critic's 394 s (4.2x) on 24 steps, and its values ranked the 165 test start states
    # better, ROC AUC 0.58 after 20 passes at 1e-3 against 0.48 (chance) for the LoRA critic trained on the same 107
    # steps (bench/critic.py, bench/critic_values.py; docs/measurements.md, measured 2026-11-26, commit 378acfe).
    # Its backbone the pretrained base's states (``backbone_start="base"``), not the SFT adapter's: what every
    # measured cpu-demo run used (2026-11-24 to 2026-12-07); the paper's start from the actor is the default, not yet
    # run in a whole cpu-demo (bench/critic_values.py compares the two on a run's held-out start states).
    critic=Critic(lr=1e-3, epochs=20, train_backbone=False, head_init_std=None, backbone_start="base"),
    # Activations kept, not recomputed in the backward: the same update bit for bit (exact KL, flips, loss), its
    # training 436.1 s against 554.2 s (1.27x) on the first stored phase's 30 optimizer steps, peak memory 9.2 GB
    # against 4.2 GB (bench/phase_offline.py run --tasks 0, AMD EPYC with AVX-512 bf16, measured 2026-12-05)
    batching=Batching(batch_size=4, gradient_checkpointing=False),
)

PRESETS: dict[str, WebRLHyperparams] = {
    # What `make demo` runs: the shipped pretrained SFT actor (webrl/assets/actor-sft-smollm2), 2 phases.
    "cpu-demo": _PRETRAINED_CPU,
    # The longer CPU schedule: more phases and tasks per phase, the same per-step settings and validate stage.
    "cpu-long": replace(
        _PRETRAINED_CPU,
        curriculum=Curriculum(phases=6, tasks_per_phase=48, candidates_per_phase=96, seed_tasks=48),
        evaluation=replace(_PRETRAINED_CPU.evaluation, subset=65),
    ),
    # The tiny from-scratch actor (webrl/assets/actor-sft, 0.9M parameters): 3 phases in ~30 minutes.
    "tiny-demo": WebRLHyperparams(
        curriculum=Curriculum(phases=3, tasks_per_phase=48, candidates_per_phase=96, seed_tasks=48),
        evaluation=Evaluation(tasks=165),
        # 8 episodes at once in chunks of 32: evaluating 165 tasks 282 s -> 246 s (1.15x) against 4 in chunks of 16
        # the longest oracle demonstration takes 8 steps; failing episodes run to the horizon, so 10 (was 12)
        # bounds the evaluations' and rollouts' cost without cutting any solvable task short;
        # training rollouts sample (exploration finds successes greedy decoding misses); evaluation is greedy
        rollout=Rollout(chunk=32, concurrency=8, max_steps=10, temperature=0.7),
        # the tiny model needs far larger steps than the paper's 1e-6 for an 8B model to move at all; one critic
        # epoch a phase, as the paper trains (two cost ~3 min a phase here, a tenth of the demo's budget)
        actor=ActorLoss(lr=3e-4, epochs=2),
        critic=Critic(lr=1e-3, epochs=1),
        batching=Batching(batch_size=16),
    ),
    # CI smoke: one phase on about ten tasks with the tiny model, end to end in a few minutes.
    "smoke": WebRLHyperparams(
        curriculum=Curriculum(phases=1, tasks_per_phase=8, candidates_per_phase=12, seed_tasks=8),
        evaluation=Evaluation(tasks=8),
        rollout=Rollout(chunk=4, concurrency=2, max_steps=6, temperature=0.7),
        actor=ActorLoss(lr=1e-4, epochs=1),
        critic=Critic(lr=1e-3, epochs=1),
        batching=Batching(batch_size=8),
    ),
    # The paper's scale (WebArena-Lite, 8 phases, ~500 kept tasks per phase); needs GPUs and vLLM. It keeps the
    # project's filter top-up (curriculum.fill_filter); `--strict-filter` runs a phase on the band's tasks alone.
    "paper": WebRLHyperparams(
        curriculum=Curriculum(phases=8, tasks_per_phase=500, candidates_per_phase=1000, seed_tasks=1000),
        evaluation=Evaluation(tasks=165),
        rollout=Rollout(chunk=64, concurrency=16, max_steps=30),
        actor=ActorLoss(lr=1e-6, epochs=1, max_grad_norm=0.01),  # the published config's lm_lr and max_grad_norm
        critic=Critic(lr=1e-6, epochs=1),
        batching=Batching(batch_size=32),
    ),
}
