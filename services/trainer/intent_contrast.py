"""The intent contrast (``actor.intent_contrast``, this project's; not in the paper): a positive step may teach its
action for its own intent, not for the page.

A step with A > 0 raises log pi(a | I, s). The LoRA adapter is shared by every state, and a small actor may read the
page more than the intent, so the same update may raise log pi(a | I', s) for intents I' that ask for something else
(the guess behind this lever: the tasks a stored phase's updates lose sit on the pages its positives train on, under
other intents).
Each trained positive gets a twin: the same state and action under the intent I' of a train task of another
template of its site, and the loss adds

    lambda_c * mean_twins relu( (lp(a | I', s) - lp_ref(a | I', s)) / n ),

one-sided: the action may not become more likely under an intent that does not ask for it than it was under the
phase's start actor; where it does not rise the term is 0 and the positive trains as before. Measured
(docs/measurements.md): the twins' log-ratio fell to -0.21, the update changed 7 of its 65 tasks instead of 10-13,
and it still lost the wish-list task, so the guess explains part of the churn at most.

A task's template is its ``intent_template`` (WebArena's field, which the sandbox's and the grounded generator's tasks
carry); an intent belongs to every template whose pattern it matches. Twins come from train tasks only, so the held-out
templates' intents never enter training.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from services.trainer.data import SequenceItem, StepExample, encode_action
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings

_SLOT = re.compile(r"\{\{\w+\}\}")
#: The line that carries the intent in both renderings of the actor prompt (``webrl.prompts.actor``).
_INTENT_LINE = re.compile(r"Task Instruction: (.*)\n")


def intent_of(prompt: str) -> str:
    """The intent of a rendered actor prompt (its ``Task Instruction:`` line); ValueError when it has none."""
    found = _INTENT_LINE.search(prompt)
    if found is None:
        raise ValueError("the prompt has no 'Task Instruction:' line")
    return found.group(1)


def with_intent(prompt: str, intent: str, other: str) -> str:
    """``prompt`` asking ``other`` instead of ``intent``: every occurrence of the intent's text replaced (the task line
    and round 0's turn; the page, the history's responses and the layout stay). ValueError when ``prompt`` does not
    ask ``intent``."""
    if f"Task Instruction: {intent}\n" not in prompt:
        raise ValueError(f"the prompt does not ask {intent!r}")
    return prompt.replace(intent, other)


@dataclass(frozen=True)
class ContrastIntent:
    """One intent a twin can carry: its task's first site and template."""

    site: str
    template: str
    intent: str


def contrast_pool(tasks: Iterable[TaskConfig]) -> list[ContrastIntent]:
    """The intents of ``tasks`` that name a template and a site, each once, in order."""
    seen: set[str] = set()
    out = []
    for task in tasks:
        if task.intent_template and task.sites and task.intent not in seen:
            seen.add(task.intent)
            out.append(ContrastIntent(task.sites[0], task.intent_template, task.intent))
    return out


def sandbox_train_intents(settings: Settings) -> list[ContrastIntent]:
    """The pool of the built-in sandbox's train tasks (the suite of ``settings.seed``): the offline bench's, whose
    stored phases come from sandbox runs."""
    from webrl.sandbox.tasks.suite import build_suite

    return contrast_pool(build_suite(settings.seed)["train"])


def template_pattern(template: str) -> re.Pattern[str]:
    """The intents ``template`` instantiates: its text with every ``{{slot}}`` matching any non-empty text."""
    return re.compile("(?:.+)".join(re.escape(part) for part in _SLOT.split(template)) + r"\Z", re.DOTALL)


class TwinIntents:
    """Draws, for an intent, the intent of a train task of its site whose template it does not instantiate."""

    def __init__(self, pool: Sequence[ContrastIntent]):
        self.patterns = {c.template: template_pattern(c.template) for c in pool}
        self.site = {c.template: c.site for c in pool}
        self.by_site: dict[str, list[ContrastIntent]] = {}
        for c in pool:
            self.by_site.setdefault(c.site, []).append(c)

    def templates_of(self, intent: str) -> set[str]:
        return {t for t, pattern in self.patterns.items() if pattern.match(intent)}

    def draw(self, intent: str, rng: random.Random) -> str | None:
        """A seeded twin intent for ``intent``, or None when its template or its site's other templates are unknown."""
        own = self.templates_of(intent)
        sites = sorted({self.site[t] for t in own})
        if not sites:
            return None
        others = sorted({c.template for c in self.by_site[sites[0]]} - own)
        if not others:
            return None
        template = rng.choice(others)  # each other template alike, however many tasks it has
        return rng.choice([c.intent for c in self.by_site[sites[0]] if c.template == template])


def twin_items(tokenizer: Any, examples: Sequence[StepExample], positives: Sequence[int],
               pool: Sequence[ContrastIntent], *, first_index: int, seed: int, max_length: int | None,
               flags: dict[str, float]) -> dict[int, SequenceItem]:
    """Each positive's twin as an item marked ``contrast`` (indexed from ``first_index`` on), keyed by the positive's
    index into ``examples``; positives whose intent instantiates no known template get none. The twin keeps the
    positive's action tokens; lp_ref is filled by the reference pass."""
    twins = TwinIntents(pool)
    rng = random.Random(seed + 5)
    out: dict[int, SequenceItem] = {}
    for i in positives:
        ex = examples[i]
        intent = intent_of(ex.prompt)
        other = twins.draw(intent, rng)
        if other is None:
            continue
        twin = dataclasses.replace(ex, prompt=with_intent(ex.prompt, intent, other))
        out[i] = SequenceItem(first_index + len(out), encode_action(tokenizer, twin, max_length),
                              {"lp_ref": 0.0, "advantage": 0.0, **flags, "contrast": 1.0})
    return out


def with_twins(collate: Callable[[list[SequenceItem]], dict], twins: dict[int, Sequence[SequenceItem]]
               ) -> Callable[[list[SequenceItem]], dict]:
    """``collate`` with the twins of each of the batch's items that has some appended: a positive and its twins share
    a batch, so one optimizer step sees them all. The trained batches are unchanged."""

    def fn(items: list[SequenceItem]) -> dict:
        return collate([*items, *(twin for it in items for twin in twins.get(it.index, ()))])

    return fn


def contrast_term(lp: torch.Tensor, lp_ref: torch.Tensor, n_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """mean relu((lp - lp_ref) / n) over the twin rows, and their mean signed per-token log-ratio (reported):
    (B_c,) each -> two scalars."""
    ratio = (lp - lp_ref) / n_tokens.clamp(min=1)
    return torch.relu(ratio).mean(), ratio.detach().mean()
