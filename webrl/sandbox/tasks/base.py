"""Task templates: an intent with slots, how to fill them from a site's seed data, the WebArena ``eval``
block that checks it, and the oracle that solves it.

A site package lists its templates in ``webrl/sandbox/sites/<site>/templates_tasks.py`` as
``TEMPLATES: list[Template]``. Template ids are ``intent_template_id`` values and must be unique over all
sites; by convention shopping uses 100-199, shopping_admin 200-299, reddit 300-399, gitlab 400-499.

A template::

    Template(
        id=101, site="shopping", kind="info",                 # info | nav | mutate
        intent_template="What is the price of {{product}}?",  # WebArena's {{slot}} syntax
        sample=lambda data, rng: [{"product": "...", "_id": 7}, ...],   # candidate instantiations
        evaluation=lambda inst, data: string_match(must_include=["$12.99"]),
        solver=solve_price,                                    # (TaskConfig) -> Script, see below
        start_url="/", require_login=False,
    )

``sample(data, rng)`` returns instantiation dicts; keys starting with ``_`` are hidden (used by
``evaluation`` and ``start_url``, never written to ``instantiation_dict``). ``data`` is a :class:`SiteData`
over the template databases of the suite's seed, so answers are computed from the same data the sites
serve. ``start_url`` is a path after the site's placeholder and may use ``{slot}`` fields.

A solver is a generator function taking the task config: it receives observations and yields WebRL
action strings (``do(...)``/``exit(...)``, see :mod:`webrl.sandbox.oracles` for helpers)::

    def solve_price(task: TaskConfig) -> Script:
        obs = yield None                                  # prime: receive the first observation
        obs = yield search(obs, "Search", task.instantiation_dict["product"])
        ...
        yield answer(...)

:class:`~webrl.sandbox.oracles.OraclePolicy` replays a solver over an episode's history, so solvers keep
no state outside the generator.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from webrl.agent.schemas import Observation, TaskConfig
from webrl.config import SITE_PLACEHOLDERS

Kind = Literal["info", "nav", "mutate"]
Script = Generator[str | None, Observation, None]
Solver = Callable[[TaskConfig], Script]

_SLOT = re.compile(r"\{\{(\w+)\}\}")


class SiteData:
    """Read-only access to the template databases of one seed, for sampling slots and computing answers."""

    def __init__(self, paths: dict[str, Path], seed: int) -> None:
        self.paths = paths
        self.seed = seed
        self._conns: dict[str, sqlite3.Connection] = {}

    def db(self, name: str) -> sqlite3.Connection:
        if name not in self._conns:
            conn = sqlite3.connect(f"file:{self.paths[name]}?mode=ro", uri=True, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            self._conns[name] = conn
        return self._conns[name]

    def rows(self, db: str, sql: str, *params: Any) -> list[sqlite3.Row]:
        return self.db(db).execute(sql, params).fetchall()

    def value(self, db: str, sql: str, *params: Any) -> Any:
        row = self.db(db).execute(sql, params).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


# WebArena eval blocks -----------------------------------------------------------------------------------

def string_match(*, exact_match: str | None = None, must_include: list[str] | None = None,
                 raw: str | None = None) -> dict[str, Any]:
    """An ``eval`` block checking the final answer (WebArena ``string_match``)."""
    answers: dict[str, Any] = {}
    if exact_match is not None:
        answers["exact_match"] = exact_match
    if must_include is not None:
        answers["must_include"] = list(must_include)
    if not answers:
        raise ValueError("string_match needs exact_match or must_include")
    annotation = raw if raw is not None else (exact_match or ", ".join(must_include or []))
    return {"eval_types": ["string_match"], "reference_answers": answers, "reference_url": "",
            "program_html": [], "string_note": "", "reference_answer_raw_annotation": annotation}


def url_match(reference_url: str) -> dict[str, Any]:
    """An ``eval`` block checking the last page's URL (WebArena ``url_match``, GOLD in PRED)."""
    return {"eval_types": ["url_match"], "reference_answers": None, "reference_url": reference_url,
            "program_html": [], "url_note": "GOLD in PRED"}


def html_check(url: str, locator: str, *, exact_match: str | None = None,
               must_include: list[str] | None = None) -> dict[str, Any]:
    """One ``program_html`` entry: open ``url`` ("last" or a placeholder URL), evaluate the JS ``locator``
    (a ``document.`` expression; "" = the whole page), compare with ``required_contents``."""
    required: dict[str, Any] = {}
    if exact_match is not None:
        required["exact_match"] = exact_match
    if must_include is not None:
        required["must_include"] = list(must_include)
    if not required:
        raise ValueError("html_check needs exact_match or must_include")
    return {"url": url, "locator": locator, "required_contents": required}


def program_html(*checks: dict[str, Any]) -> dict[str, Any]:
    """An ``eval`` block of page-state checks (WebArena ``program_html``); all must pass."""
    if not checks:
        raise ValueError("program_html needs at least one check")
    return {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
            "program_html": list(checks), "url_note": "GOLD in PRED"}


# Templates -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Template:
    """One intent template (see the module docstring)."""

    id: int
    site: str
    intent_template: str
    kind: Kind
    sample: Callable[[SiteData, random.Random], list[dict[str, Any]]]
    evaluation: Callable[[dict[str, Any], SiteData], dict[str, Any]]
    solver: Solver
    start_url: str = "/"
    require_login: bool = False
    sites: tuple[str, ...] = field(default=())
    max_instances: int = 40

    @property
    def placeholder(self) -> str:
        return SITE_PLACEHOLDERS[self.site]

    def slots(self) -> list[str]:
        return _SLOT.findall(self.intent_template)

    def intent(self, inst: dict[str, Any]) -> str:
        return _SLOT.sub(lambda m: str(inst[m.group(1)]), self.intent_template)

    def instantiate(self, data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
        """Distinct instantiations (by intent), in the sampler's order, at most ``max_instances``."""
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        for inst in self.sample(data, rng):
            missing = [s for s in self.slots() if s not in inst]
            if missing:
                raise ValueError(f"template {self.id}: instantiation lacks slots {missing}")
            intent = self.intent(inst)
            if intent not in seen:
                seen.add(intent)
                out.append(inst)
            if len(out) >= self.max_instances:
                break
        return out

    def config(self, task_id: int | str, inst: dict[str, Any], data: SiteData) -> TaskConfig:
        """The WebArena task config of one instantiation (placeholder URLs, unresolved)."""
        public = {k: v for k, v in inst.items() if not k.startswith("_")}
        sites = list(self.sites or (self.site,))
        config: dict[str, Any] = {
            "sites": sites,
            "task_id": task_id,
            "require_login": self.require_login,
            "storage_state": f"./.auth/{self.site}_state.json" if self.require_login else None,
            "start_url": self.placeholder + self.start_url.format(**inst),
            "geolocation": None,
            "intent_template": self.intent_template,
            "instantiation_dict": public,
            "intent": self.intent(inst),
            "require_reset": self.kind == "mutate",
            "eval": self.evaluation(inst, data),
            "intent_template_id": self.id,
        }
        return TaskConfig.from_json(config)
