"""Typed records the parts hand each other: tasks (WebArena configs), observations, steps, trajectories
(actions are in :mod:`webrl.agent.actions`).

``TaskConfig`` loads a WebArena task config and dumps it back unchanged (unknown fields kept), so the
real WebArena and WebArena-Lite files are used as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webrl.agent.actions import Action
from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.errors import UserError


class EvalSpec(BaseModel):
    """A WebArena ``eval`` block. Fields WebArena does not always write are optional; extras kept."""

    model_config = ConfigDict(extra="allow")

    eval_types: list[str]
    reference_answers: dict[str, Any] | None = None
    reference_url: str | None = None
    program_html: list[dict[str, Any]] = Field(default_factory=list)
    string_note: str | None = None
    url_note: str | None = None
    reference_answer_raw_annotation: str | None = None


class Geolocation(BaseModel):
    """Where a task's browser says it is (Playwright's ``set_geolocation``, whose preconditions these bounds are:
    a value outside them is refused when the task is read, not by the browser halfway through a reset)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    latitude: float = Field(ge=-90.0, le=90.0)
    longitude: float = Field(ge=-180.0, le=180.0)
    accuracy: float | None = Field(None, ge=0.0, description="Metres; Playwright's default is 0.")


class TaskConfig(BaseModel):
    """One WebArena task config (``config_files/*.json``)."""

    model_config = ConfigDict(extra="allow")

    task_id: int | str
    sites: list[str]
    intent: str
    start_url: str
    require_login: bool = False
    storage_state: str | None = None
    geolocation: Geolocation | None = None
    intent_template: str | None = None
    instantiation_dict: dict[str, Any] | None = None
    require_reset: bool = False
    eval: EvalSpec | None = None
    intent_template_id: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> TaskConfig:
        return cls.model_validate(json.loads(data) if isinstance(data, str) else data)

    def to_json(self) -> dict[str, Any]:
        """The config as WebArena writes it: exactly the fields it was loaded with."""
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def site(self) -> str:
        """The first site: what webrl files the task under."""
        return self.sites[0] if self.sites else "unknown"

    def resolved(self, settings: Settings) -> TaskConfig:
        """A copy with every ``__SITE__`` placeholder replaced by the configured site URL."""
        text = json.dumps(self.to_json())
        return TaskConfig.from_json(resolve_placeholders(text, settings))

    def start_urls(self, settings: Settings) -> list[str]:
        """``start_url`` resolved and split on WebArena's `` |AND| `` (one tab each)."""
        return [u.strip() for u in resolve_placeholders(self.start_url, settings).split(" |AND| ")]


def resolve_placeholders(text: str, settings: Settings) -> str:
    """Replace ``__SHOPPING__`` and friends by the URLs from settings (the sandbox by default)."""
    # Longest first: __SHOPPING_ADMIN__ must not be eaten by __SHOPPING__.
    for site, token in sorted(SITE_PLACEHOLDERS.items(), key=lambda kv: -len(kv[1])):
        if token in text:
            text = text.replace(token, settings.site_url(site))
    return text


class TaskFileError(UserError, ValueError):
    """A task file that is not JSON, or an entry that is not a task config; the message names the entry and field."""


def load_task_file(path: str | Path) -> list[TaskConfig]:
    """Load a JSON list of task configs (WebArena's ``test.raw.json`` layout) or a single config. Raises
    :class:`TaskFileError` naming the file, and the entry and field at fault, or the task ids given to more than one
    entry (a task is stored under its id, so a repeated one would silently keep only its first config)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{path}: cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"{path}: not JSON ({exc})") from None
    items = data if isinstance(data, list) else [data]
    configs = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise TaskFileError(f"{path}: entry {index} is a {type(item).__name__}, not a task config (a JSON object)")
        try:
            configs.append(TaskConfig.from_json(item))
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            task = f" (task_id {item['task_id']!r})" if "task_id" in item else ""
            raise TaskFileError(f"{path}: entry {index}{task}: {fields}") from None
    _check_distinct_task_ids(path, configs)
    return configs


def _check_distinct_task_ids(path: str | Path, configs: list[TaskConfig]) -> None:
    """:class:`TaskFileError` naming every task id (as its key writes it: 7 and "7" are one) that more than one
    entry of ``path`` has, with those entries."""
    entries: dict[str, list[int]] = {}
    for index, config in enumerate(configs):
        entries.setdefault(str(config.task_id), []).append(index)
    repeated = [at for at in entries.values() if len(at) > 1]
    if repeated:
        named = "; ".join(f"task_id {configs[at[0]].task_id!r} in entries {', '.join(map(str, at))}"
                          for at in repeated[:10])
        more = f"; and {len(repeated) - 10} more" if len(repeated) > 10 else ""
        raise TaskFileError(f"{path}: {len(repeated)} task id(s) repeated ({named}{more}): every task needs its "
                            "own task_id")


#: A sampling seed a request may carry: torch's generators take at most a signed 64-bit value, so a larger one is
#: a 422 naming the field, not a 500 from deep inside generation.
Seed = Annotated[int, Field(ge=0, le=2**63 - 1, description="Sampling seed (0 .. 2**63 - 1).")]


class Observation(BaseModel):
    """What the actor sees: WebRL's simplified HTML plus the page's url, title and tabs."""

    html: str
    url: str
    title: str = ""
    tabs: list[str] = Field(default_factory=list)
    error: str | None = Field(None, description="Why the previous action failed, if it did.")


class Step(BaseModel):
    """One actor step: what it saw, what it generated, what happened."""

    index: int
    observation: Observation
    response: str = Field(description="The raw generated text.")
    action: Action | None = Field(None, description="Parsed action; None when the response did not parse.")
    parse_error: str | None = None
    token_ids: list[int] = Field(default_factory=list, description="Generated token ids, as generated.")
    logprobs: list[float] = Field(default_factory=list, description="Log-prob of each generated token.")
    url: str = ""
    error: str | None = Field(None, description="Execution error of this step's action, if any.")
    screenshot: bytes | None = Field(None, exclude=True, repr=False,
                                     description="The page the step saw as WebP/JPEG (``webrl.store.screenshots``), "
                                     "when the rollout took screenshots; in memory until stored, never serialised.")
    reward: float = 0.0
    done: bool = False


class Trajectory(BaseModel):
    """An episode: a task, the actor version that ran it, its steps and its judgements."""

    task_id: str
    intent: str
    actor_version: str = ""
    steps: list[Step] = Field(default_factory=list)
    answer: str | None = None
    stop_reason: str = ""
    env_score: float | None = Field(None, description="Evaluator score, when the task has an eval block.")
    orm_p: float | None = Field(None, description="ORM P(YES).")
    reward: float | None = Field(None, description="Outcome reward: 1 if orm_p >= threshold.")
    last_observation: Observation | None = None

    @property
    def action_history(self) -> list[str]:
        return [s.action.format() if s.action else s.response.strip() for s in self.steps]
