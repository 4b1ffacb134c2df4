"""Oracle solvers: scripted policies that read the observation and emit WebRL actions.

The observation is WebRL's simplified HTML, parsed by :class:`webrl.agent.observed_page.ObservedPage`; the
helpers below (:func:`click`, :func:`type_text`, :func:`search`, :func:`select`, :func:`answer`, ...) find
the element whose text or label matches and format the action, raising
:class:`webrl.agent.observed_page.NotOnPage` when nothing matches (a solver raises :class:`OracleStuck`, one kind
of it, when a page is not what it expected).

A template's solver is a generator (see :mod:`webrl.sandbox.tasks.base`). :class:`OraclePolicy` implements
:class:`webrl.agent.policy.Policy`: for each request it finds the solver by ``task.intent_template_id``, replays it
over the episode's earlier observations (so it keeps no state between calls and many episodes can run at
once; a step whose action failed is asked again) and returns its next action. With ``corrupt > 0`` each step
is, with that probability, replaced by a random valid action on the page (negative data for the ORM); the
draw is seeded by (seed, task, step).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Generator

from webrl.agent.actions import Action, ActionType, format_action
from webrl.agent.observed_page import FORM_FIELDS, Element, NotOnPage, ObservedPage
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, Step, TaskConfig

ORACLE_VERSION = "oracle"


class OracleStuck(NotOnPage):
    """The page does not offer what the solver expected (it was led astray, e.g. by a corrupted step)."""


# Action helpers: each takes the current observation and returns WebRL action text. -----------------------

def _page(obs: Observation | ObservedPage) -> ObservedPage:
    return obs if isinstance(obs, ObservedPage) else ObservedPage(obs)


#: Longest element description written after ``# Element:`` (a select's label is all its options).
MAX_ELEMENT_NOTE = 60


def _fmt(kind: ActionType, target: Element | None = None, **kwargs: str) -> str:
    """The action; one on an element is preceded by WebRL's ``# Element: <what it reads>`` line, which names
    the element before its id is written (WebRL's prompt asks for it; it helps a small model ground the id)."""
    if target is None:
        return format_action(Action(type=kind, **kwargs))
    action = format_action(Action(type=kind, element=target.id, **kwargs))
    note = target.description[:MAX_ELEMENT_NOTE].strip()
    return f"# Element: {note}\n{action}" if note else action


def click(obs: Observation | ObservedPage, label: str, tags: tuple[str, ...] | None = None,
          exact: bool = False) -> str:
    return _fmt(ActionType.CLICK, _page(obs).find(label, tags, exact))


def type_text(obs: Observation | ObservedPage, field_label: str, text: str) -> str:
    return _fmt(ActionType.TYPE, _page(obs).field(field_label), argument=text)


def search(obs: Observation | ObservedPage, field_label: str, text: str) -> str:
    """Type into a field and press Enter (WebRL's Search)."""
    return _fmt(ActionType.SEARCH, _page(obs).field(field_label), argument=text)


def select(obs: Observation | ObservedPage, option: str, field_label: str | None = None) -> str:
    page = _page(obs)
    element = page.field(field_label) if field_label else page.select_with_option(option)
    return _fmt(ActionType.SELECT, element, argument=option)


def scroll_down() -> str:
    return _fmt(ActionType.SCROLL_DOWN)


def go_back() -> str:
    return _fmt(ActionType.GO_BACKWARD)


def answer(message: str) -> str:
    return _fmt(ActionType.EXIT, message=message)


# Generator steps: scroll until the target shows, then act. Use with ``obs = yield from do_click(obs, ...)``.

MAX_SCROLLS = 4  # the episode loop stops after 5 identical actions in a row (WebArena early_stop)


def locate(obs: Observation, label: str, tags: tuple[str, ...] | None = None, exact: bool = False
           ) -> Generator[str, Observation, tuple[Observation, Element]]:
    """Scroll down (at most :data:`MAX_SCROLLS` times) until an element labelled ``label`` shows."""
    for _ in range(MAX_SCROLLS):
        page = ObservedPage(obs)
        if page.has(label, tags, exact):
            return obs, page.find(label, tags, exact)
        obs = yield scroll_down()
    return obs, ObservedPage(obs).find(label, tags, exact)


def do_click(obs: Observation, label: str, tags: tuple[str, ...] | None = None, exact: bool = False
             ) -> Generator[str, Observation, Observation]:
    obs, element = yield from locate(obs, label, tags, exact)
    return (yield _fmt(ActionType.CLICK, element))


def do_type(obs: Observation, field_label: str, text: str, enter: bool = False
            ) -> Generator[str, Observation, Observation]:
    """Type into the field labelled ``field_label`` (WebRL's Search when ``enter``)."""
    obs, element = yield from locate(obs, field_label, FORM_FIELDS)
    kind = ActionType.SEARCH if enter else ActionType.TYPE
    return (yield _fmt(kind, element, argument=text))


def do_select(obs: Observation, field_label: str, option: str) -> Generator[str, Observation, Observation]:
    obs, element = yield from locate(obs, field_label, ("select",))
    return (yield _fmt(ActionType.SELECT, element, argument=option))


def read(obs: Observation, pattern: str, group: int = 1) -> Generator[str, Observation, str]:
    """Scroll until ``pattern`` matches the page text; return the group."""
    for _ in range(MAX_SCROLLS):
        if re.search(pattern, ObservedPage(obs).text):
            break
        obs = yield scroll_down()
    return ObservedPage(obs).search_text(pattern, group)


# The policy --------------------------------------------------------------------------------------------

def _step_rng(seed: int, task: TaskConfig, step: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{task.task_id}:{task.intent}:{step}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def random_action(obs: Observation, rng: random.Random) -> str:
    """A random valid action on this page: click or type into a random element, scroll, or go back."""
    page = ObservedPage(obs)
    roll = rng.random()
    fields = [e for e in page.elements if e.tag in ("input", "textarea")]
    if page.elements and roll < 0.6:
        return _fmt(ActionType.CLICK, rng.choice(page.elements))
    if fields and roll < 0.75:
        word = rng.choice(["shoes", "blue", "order", "gift", "review", "12", "hello"])
        return _fmt(ActionType.TYPE, rng.choice(fields), argument=word)
    return rng.choice([scroll_down(), go_back(), _fmt(ActionType.SCROLL_UP)])


_FIELD_VALUE = re.compile(r' value="[^"]*"')


def _layout(page: Observation) -> str:
    """The page without its fields' values: a Search whose fill timed out half-way changed only those."""
    return _FIELD_VALUE.sub("", page.html)


def pages_seen(history: list[Step], observation: Observation) -> list[Observation]:
    """The observations a solver is replayed over. A step whose action failed (its ``error``: a timeout under
    load, an id gone stale) and left the page as it was (its fields' values aside) is dropped: the page after
    it stands in for the page before it, and the solver is asked again there (its action retried). An action
    that reported a failure but changed the page counts as done: under load a click can land and still time
    out."""
    after = [*(step.observation for step in history), observation][1:]  # the page each step led to
    pages: list[Observation] = []
    for step, following in zip(history, after, strict=True):
        unchanged = following.url == step.observation.url and _layout(following) == _layout(step.observation)
        if not (step.error and unchanged):
            pages.append(step.observation)
    return [*pages, observation]


def next_oracle_action(task: TaskConfig, history: list[Step], observation: Observation) -> str:
    """Replay the task's solver over the pages of ``history`` (:func:`pages_seen`) and return its action for
    ``observation``."""
    from webrl.sandbox.tasks.suite import template_by_id

    template = template_by_id().get(task.intent_template_id) if task.intent_template_id is not None else None
    if template is None:
        return answer(f"no oracle for intent_template_id {task.intent_template_id}")
    script = template.solver(task)
    *earlier, current = pages_seen(history, observation)
    try:
        next(script)
        for page in earlier:
            script.send(page)
        action = script.send(current)
    except NotOnPage as exc:
        return answer(f"stuck: {exc}")
    except StopIteration:
        return answer("")
    finally:
        script.close()
    return action if action is not None else answer("")


class OraclePolicy:
    """The scripted policy over every sandbox template (see the module docstring)."""

    def __init__(self, corrupt: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"corrupt must lie in [0, 1], got {corrupt}")
        self.corrupt = corrupt
        self.seed = seed

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        return [self._one(r) for r in requests]

    def _one(self, request: PolicyRequest) -> PolicyResponse:
        rng = _step_rng(self.seed, request.task, len(request.history))
        if self.corrupt and rng.random() < self.corrupt:
            text = random_action(request.observation, rng)
        else:
            text = next_oracle_action(request.task, request.history, request.observation)
        return PolicyResponse(response=text, version=ORACLE_VERSION)
