"""The stop contrast (``actor.stop_contrast``, this project's; not in the paper): a successful episode's last action
teaches when to stop, not to stop.

A positive step whose action ends the episode (``exit``, WebRL's answer: the stop action) raises
log pi(a_T | I, s_T). The stop reads nothing on the page, and the LoRA adapter is shared by every state, so the same
update raises it on pages where nothing is done yet: an update on a few positives that end in ``exit(message="")``
left an actor whose episodes stopped after 2.9 steps instead of the SFT actor's 4.1 and which lost 15 of its 25 test
tasks (docs/measurements.md, seed 1's phase 1).

The episode itself says where stopping was wrong: at each earlier state s_t (t < T) of the same successful
trajectory it went on and still succeeded. Each trained positive stop step gets those states as twins, the same
action under the same intent at s_t, and the loss adds

    lambda_s * mean_twins relu( (lp(a_T | I, s_t) - lp_ref(a_T | I, s_t)) / n ),

one-sided like the intent contrast (``intent_contrast.py``): stopping where the episode went on may not become
likelier than under the phase's start actor; where it does not rise the term is 0 and the positive trains as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from services.trainer.data import SequenceItem, StepExample, encode_action
from webrl.agent.actions import ActionParseError, ActionType, parse_action


def is_stop(completion: str) -> bool:
    """Whether the response's action ends the episode (``exit``); an unparsable response is not a stop."""
    try:
        return parse_action(completion).type is ActionType.EXIT
    except ActionParseError:
        return False


def earlier_states(experience: Sequence[StepExample]) -> dict[int, list[StepExample]]:
    """Each trajectory's steps in ``experience``, by trajectory id, in step order (one per step index)."""
    by_trajectory: dict[int, dict[int, StepExample]] = {}
    for ex in experience:
        by_trajectory.setdefault(ex.trajectory_id, {}).setdefault(ex.index, ex)
    return {tid: [steps[i] for i in sorted(steps)] for tid, steps in by_trajectory.items()}


def stop_twin_items(tokenizer: Any, examples: Sequence[StepExample], positives: Sequence[int],
                    experience: Sequence[StepExample], *, first_index: int, max_length: int | None,
                    flags: dict[str, float]) -> dict[int, list[SequenceItem]]:
    """For each positive of ``examples`` whose action is the stop, its twins: the action at every earlier state of its
    trajectory that ``experience`` holds, as items marked ``stop_twin`` (indexed from ``first_index`` on), keyed by
    the positive's index into ``examples``. The twins keep the positive's action tokens; lp_ref is filled by the
    reference pass. Positives that do not stop, or stop at their trajectory's first step, get none."""
    steps = earlier_states(experience)
    out: dict[int, list[SequenceItem]] = {}
    index = first_index
    for i in positives:
        ex = examples[i]
        if not is_stop(ex.completion):
            continue
        twins = []
        for state in steps.get(ex.trajectory_id, []):
            if state.index >= ex.index:
                break
            twin = dataclasses.replace(ex, prompt=state.prompt)
            twins.append(SequenceItem(index, encode_action(tokenizer, twin, max_length),
                                      {"lp_ref": 0.0, "advantage": 0.0, **flags, "stop_twin": 1.0}))
            index += 1
        if twins:
            out[i] = twins
    return out
