"""Named option sets for ``webrl train --preset``; explicit flags override them."""

from __future__ import annotations

from typing import Any

#: The pretrained small actor (SmolLM2-135M + LoRA adapters) on a 2-core CPU. Every policy step costs ~1-2 s and
#: every trained step ~3-4 s (vs milliseconds for the tiny model), so a phase is smaller and the phases between
#: the first and the last evaluate a fixed stratified 40 of the 165 test tasks.
_PRETRAINED_CPU: dict[str, Any] = {
    "tasks_per_phase": 24, "candidates_per_phase": 48, "seed_tasks": 24, "eval_tasks": 165, "eval_subset": 40,
    # the longest oracle demonstration takes 8 steps; failing episodes run to the horizon
    "rollout_chunk": 24, "concurrency": 8, "max_steps": 8,
    "rollout_temperature": 0.7,  # training rollouts sample; evaluation is greedy
    # LoRA moves only the adapters: the SFT's 5e-4 / 2 for the actor; the critic's fresh heads learn faster
    "train": {"actor_epochs": 1, "critic_epochs": 1, "batch_size": 4, "actor_lr": 2.5e-4, "critic_lr": 5e-4},
}

PRESETS: dict[str, dict[str, Any]] = {
    # What `make demo` runs: the shipped pretrained SFT actor (webrl/assets/actor-sft-smollm2), 3 phases.
    "cpu-demo": {"phases": 3, **_PRETRAINED_CPU},
    # The longer CPU schedule: twice the phases and tasks per phase, the same per-step settings.
    "cpu-long": {**_PRETRAINED_CPU, "phases": 6, "tasks_per_phase": 48, "candidates_per_phase": 96,
                 "seed_tasks": 48, "eval_subset": 60},
    # The tiny from-scratch actor (webrl/assets/actor-sft, 0.9M parameters): 3 phases in ~30 minutes.
    "tiny-demo": {
        "phases": 3, "tasks_per_phase": 48, "candidates_per_phase": 96, "seed_tasks": 48, "eval_tasks": 165,
        # 8 episodes at once in chunks of 32: evaluating 165 tasks 282 s -> 246 s (1.15x) against 4 in chunks of 16
        # the longest oracle demonstration takes 8 steps; failing episodes run to the horizon, so 10 (was 12)
        # bounds the evaluations' and rollouts' cost without cutting any solvable task short
        "rollout_chunk": 32, "concurrency": 8, "max_steps": 10,
        # training rollouts sample (exploration finds successes greedy decoding misses); evaluation is greedy
        "rollout_temperature": 0.7,
        # the tiny model needs far larger steps than the paper's 1e-6 for an 8B model to move at all; one critic
        # epoch a phase, as the paper trains (two cost ~3 min a phase here, a tenth of the demo's budget)
        "train": {"actor_epochs": 2, "critic_epochs": 1, "batch_size": 16, "actor_lr": 3e-4, "critic_lr": 1e-3},
    },
    # CI smoke: one phase on about ten tasks with the tiny model, end to end in a few minutes.
    "smoke": {
        "phases": 1, "tasks_per_phase": 8, "candidates_per_phase": 12, "seed_tasks": 8, "eval_tasks": 8,
        "rollout_chunk": 4, "concurrency": 2, "max_steps": 6, "rollout_temperature": 0.7,
        "train": {"actor_epochs": 1, "critic_epochs": 1, "batch_size": 8, "actor_lr": 1e-4, "critic_lr": 1e-3},
    },
    # The paper's scale (WebArena-Lite, 8 phases, ~500 kept tasks per phase); needs GPUs and vLLM.
    "paper": {
        "phases": 8, "tasks_per_phase": 500, "candidates_per_phase": 1000, "seed_tasks": 1000,
        "eval_tasks": 165, "rollout_chunk": 64, "concurrency": 16, "max_steps": 30,
        "train": {"actor_epochs": 1, "critic_epochs": 1, "batch_size": 32, "actor_lr": 1e-6, "critic_lr": 1e-6},
    },
}
