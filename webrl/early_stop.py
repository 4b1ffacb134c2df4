"""WebArena's early stop, as WebRL runs its episodes (DESIGN.md step 2): at most 30 steps, and stop after 5
unparsable responses or 5 identical actions in a row (the numbers: ``webrl.hyperparams.Rollout``). Shared by the
browser pool's episode loop and the actor's agent runs."""

from __future__ import annotations

from dataclasses import dataclass

from webrl.actions import Action
from webrl.hyperparams import DEFAULTS

MAX_STEPS = DEFAULTS.rollout.max_steps
MAX_PARSE_FAILURES = DEFAULTS.rollout.max_parse_failures
MAX_REPEATED_ACTIONS = DEFAULTS.rollout.max_repeated_actions


@dataclass
class EarlyStop:
    """Counts consecutive parse failures and identical actions; :meth:`update` says why to stop, if so."""

    parse_failures: int = 0
    repeats: int = 0
    last: str | None = None

    def update(self, action: Action | None) -> str | None:
        """Feed the step's parsed action (None when unparsable); returns a stop reason or None."""
        if action is None:
            self.parse_failures, self.repeats, self.last = self.parse_failures + 1, 0, None
            return "parse_failures" if self.parse_failures >= MAX_PARSE_FAILURES else None
        text = action.format()
        self.parse_failures = 0
        self.repeats = self.repeats + 1 if text == self.last else 1
        self.last = text
        return "repeated_action" if self.repeats >= MAX_REPEATED_ACTIONS else None
