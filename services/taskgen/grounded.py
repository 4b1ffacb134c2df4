"""The ``grounded`` generator: evolves failed sandbox tasks "in breadth" with the sites' own data.

For a failed parent task it proposes, in turn:

1. a new instantiation of the parent's template (same kind of entity, same difficulty);
2. a related template of the same site that shares slot kinds with the parent (same entities, a different
   question), preferring templates with at least as many slots (as hard or harder: more constraints),
   filled with the parent's own slot values where the sampler offers them.

With ``instances_only`` it proposes only (1): new instances of a solved parent's template, tasks of a kind the
actor has solved once, with other entities.

Every task comes with the reference evaluator its template computes from the seed data, so the oracle
solvers satisfy it. Held-out (test-only) templates and test intents are never generated.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.agent.schemas import TaskConfig
from webrl.sandbox.tasks.base import SiteData, Template
from webrl.sandbox.tasks.suite import all_templates, holdout_ids, suite_data

SAMPLE_POOL = 400  # candidate instantiations drawn per template and parent; the sampler's own cap is lower


@dataclass(frozen=True)
class Proposal:
    """A generated task with its lineage."""

    config: TaskConfig
    parent_key: str
    relation: str  # "instantiation" | "related"


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generated_task_id(phase: int, intent: str) -> str:
    """Stable id of a generated task: the same intent in the same phase is the same task (idempotent)."""
    return f"gen-p{phase}-{hashlib.sha256(intent.encode()).hexdigest()[:12]}"


class GroundedGenerator:
    """Proposes new sandbox tasks from failed ones; deterministic for (seed, parents)."""

    def __init__(self, suite_seed: int = 0, root: Path | None = None) -> None:
        self.suite_seed = suite_seed
        self.templates = {t.id: t for t in all_templates()}
        self.held_out = holdout_ids(list(self.templates.values()), suite_seed)
        self._root = root
        self._data: SiteData | None = None

    @property
    def data(self) -> SiteData:
        if self._data is None:
            self._data = suite_data(self.suite_seed, self._root)
        return self._data

    def close(self) -> None:
        if self._data is not None:
            self._data.close()
            self._data = None

    def related(self, parent: Template) -> list[Template]:
        """Train templates of the parent's site sharing a slot kind, harder (more slots) first."""
        slots = set(parent.slots())
        out = [t for t in self.templates.values()
               if t.site == parent.site and t.id != parent.id and t.id not in self.held_out
               and slots & set(t.slots())]
        return sorted(out, key=lambda t: (-len(t.slots()), t.id))

    def _instantiations(self, template: Template, rng: random.Random,
                        prefer: dict[str, Any]) -> list[dict[str, Any]]:
        pool = template.sample(self.data, rng)[:SAMPLE_POOL]
        shared = [k for k in template.slots() if k in prefer]
        # the parent's own entities first: "same entities, different question"
        return sorted(pool, key=lambda inst: -sum(inst.get(k) == prefer[k] for k in shared))

    def _candidates(self, parent_key: str, parent: TaskConfig, seed: int,
                    instances_only: bool = False) -> Iterator[Proposal]:
        template = self.templates.get(parent.intent_template_id or -1)
        if template is None or template.id in self.held_out:
            return
        rng = _rng(seed, parent_key)
        prefer = dict(parent.instantiation_dict or {})
        related = [] if instances_only else [(t, "related") for t in self.related(template)]
        plans = [(template, "instantiation"), *related]
        streams = [iter(self._instantiations(t, rng, prefer)) for t, _ in plans]
        while streams:
            for i, ((tmpl, relation), stream) in enumerate(zip(plans, streams, strict=True)):
                inst = next(stream, None)
                if inst is None:
                    plans.pop(i)
                    streams.pop(i)
                    break
                yield Proposal(tmpl.config("pending", inst, self.data), parent_key, relation)

    def propose(self, parents: list[tuple[str, TaskConfig]], n: int, seed: int, phase: int,
                admit: Any, instances_only: bool = False) -> list[Proposal]:
        """Up to ``n`` proposals, round-robin over parents; ``admit(intent) -> bool`` de-duplicates;
        ``instances_only``: new instances of each parent's template alone."""
        iterators = [self._candidates(key, cfg, seed, instances_only) for key, cfg in parents]
        out: list[Proposal] = []
        while iterators and len(out) < n:
            alive = []
            for it in iterators:
                for proposal in it:
                    if admit(proposal.config.intent):
                        config = proposal.config.model_copy(
                            update={"task_id": generated_task_id(phase, proposal.config.intent)})
                        out.append(Proposal(config, proposal.parent_key, proposal.relation))
                        alive.append(it)
                        break
                if len(out) >= n:
                    break
            iterators = alive
        return out
