"""WebArena's early stop, as WebRL runs its episodes (docs/design.md step 2): at most 30 steps, and stop after 5
unparsable responses or 5 identical actions in a row (the numbers: ``webrl.method.hyperparams.Rollout``, which a
rollout request carries to the loop). Shared by the browser pool's episode loop and the actor's agent runs."""

from __future__ import annotations

from dataclasses import dataclass

from webrl.agent.actions import Action
from webrl.method.hyperparams import DEFAULTS

MAX_STEPS = DEFAULTS.rollout.max_steps
MAX_PARSE_FAILURES = DEFAULTS.rollout.max_parse_failures
MAX_REPEATED_ACTIONS = DEFAULTS.rollout.max_repeated_actions


@dataclass(frozen=True)
class StopRules:
    """When an episode ends before ``exit`` or the horizon (``webrl.method.hyperparams.Rollout``'s two thresholds)."""

    max_parse_failures: int = MAX_PARSE_FAILURES
    """Stop after this many unparsable responses in a row."""
    max_repeated_actions: int = MAX_REPEATED_ACTIONS
    """Stop after this many identical actions in a row."""


@dataclass
class EarlyStop:
    """Counts consecutive parse failures and identical actions; :meth:`update` says why to stop, if so."""

    rules: StopRules = StopRules()
    parse_failures: int = 0
    repeats: int = 0
    last: str | None = None

    def update(self, action: Action | None) -> str | None:
        """Feed the step's parsed action (None when unparsable); returns a stop reason or None."""
        if action is None:
            self.parse_failures, self.repeats, self.last = self.parse_failures + 1, 0, None
            return "parse_failures" if self.parse_failures >= self.rules.max_parse_failures else None
        text = action.format()
        self.parse_failures = 0
        self.repeats = self.repeats + 1 if text == self.last else 1
        self.last = text
        return "repeated_action" if self.repeats >= self.rules.max_repeated_actions else None
