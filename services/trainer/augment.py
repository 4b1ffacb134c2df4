"""Relabelled copies of demonstrations, so that a small actor learns to read the page instead of memorising it.

A demonstration teaches "click the element that reads X", where X comes from the intent. From a few hundred
demonstrations a small model learns the pairs (intent words -> element id, intent words -> label) by heart and
fails on every name it has not seen. Two relabellings make such shortcuts useless while keeping every copy a
true demonstration of its own (relabelled) world:

- entity swap: each name the intent shares with an element of the trajectory's pages (a category, a product,
  a customer, a forum, a project) is exchanged with another element name of the same kind (the same place in
  the page: items of one list) from those pages,
  everywhere in the trajectory: intent, pages, responses. The element that carried X now carries Y and the
  intent asks for Y, so every demonstrated action is still the right one; the answer of a question
  (``exit(message=...)``) is relabelled with the rest.
- id renumbering: the element ids of each page are replaced by distinct random ids, in the page and in that
  step's action, so an id must be read off the page, not remembered.

The relabelling is a bijection on strings applied in one pass (``X -> Y`` and ``Y -> X`` at once), in the
escaped form inside the HTML and in plain text elsewhere. Measured on the tiny CPU actor (``webrl bootstrap
--relabelled-copies``): webrl/assets/PROVENANCE.md; in the minutes of SFT this CPU allows it did not help.
"""

from __future__ import annotations

import dataclasses
import html
import random
import re
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from services.trainer.data import StepExample
from webrl.agent.actions import ActionParseError, ActionType, parse_action
from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, Trajectory

#: Shortest name worth swapping (shorter ones, "Go", "5", are words of the page's chrome, not entities).
MIN_NAME_CHARS = 4
#: Ids of a renumbered page are drawn from [0, n * ID_SPREAD) for a page with n ids.
ID_SPREAD = 2

_ID_ATTR = re.compile(r'(\bid=")(\d+)(")')
_ELEMENT_ARG = re.compile(r'(\belement=")(\d+)(")')
_LETTER = re.compile(r"[A-Za-z]")
TYPING = (ActionType.TYPE, ActionType.SEARCH)


def _shape(name: str) -> str:
    """What sort of string a name is, coarsely: with a comma (``Brand Line Item, Color``), digits, an ``@``."""
    return "".join(mark for mark, present in ((",", "," in name), ("0", any(c.isdigit() for c in name)),
                                              ("@", "@" in name)) if present)


def names_by_kind(observations: Iterable[Observation]) -> dict[str, list[str]]:
    """Every element label of the observations by kind, first appearance first, without repeats. An element's
    kind is its site, its path from the root (``html/main/ol/li/a``: the items of one list, such as the
    categories of a menu, the products of a grid, the rows of a table, share it) and the :func:`_shape` of its
    label (a table of customers and one of products share a path; ``First Last`` and ``Item, Color`` do not
    share a shape), so a name is only ever exchanged with a name of the same sort."""
    out: dict[str, list[str]] = {}
    for obs in observations:
        site = urlsplit(obs.url).netloc
        for element in ObservedPage(obs.html).elements:
            label = element.label
            kind = f"{site} {element.path} {_shape(label)}".rstrip()
            if len(label) >= MIN_NAME_CHARS and _LETTER.search(label) and label not in out.get(kind, []):
                out.setdefault(kind, []).append(label)
    return out


def typed_texts(traj: Trajectory) -> dict[str, list[str]]:
    """The texts the demonstration types or searches that the intent quotes (a query, an issue title, a phone
    number), of kind ``<site> typed into <field>``: exchanged only with texts typed into the same field."""
    out: dict[str, list[str]] = {}
    for step in traj.steps:
        try:
            action = parse_action(step.response)
        except ActionParseError:
            continue
        text = action.argument or ""
        if action.type not in TYPING or len(text) < MIN_NAME_CHARS or text not in traj.intent:
            continue
        field = next((e.description for e in ObservedPage(step.observation.html).elements
                      if e.id == action.element), "")
        kind = f"{urlsplit(step.observation.url).netloc} typed into {field}"
        if text not in out.get(kind, []):
            out.setdefault(kind, []).append(text)
    return out


def trajectory_names(traj: Trajectory) -> dict[str, list[str]]:
    """Every name of ``traj`` that can be exchanged, by kind: its pages' element labels and its typed texts."""
    return merge_names(names_by_kind(observations_of(traj)), typed_texts(traj))


def merge_names(*groups: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Names by kind of several groups, first group first, without repeats."""
    out: dict[str, list[str]] = {}
    for group in groups:
        for kind, labels in group.items():
            known = out.setdefault(kind, [])
            known.extend(label for label in labels if label not in known)
    return out


def intent_entities(intent: str, names: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """(name, kind) of the element names that occur in ``intent`` after its first word (the verb: "Cancel
    order ..." names a button, not an entity), longest first, none inside another; a name met under several
    kinds keeps the kind with the most names (the list it is an item of)."""
    _, _, rest = intent.partition(" ")
    found = sorted({(name, kind) for kind, labels in names.items() for name in labels if name in rest},
                   key=lambda item: (-len(item[0]), -len(names[item[1]]), item[0], item[1]))
    chosen: list[tuple[str, str]] = []
    for name, kind in found:
        if not any(name in kept or kept in name for kept, _ in chosen):
            chosen.append((name, kind))
    return chosen


def swap_pairs(intent: str, names: Mapping[str, list[str]], rng: random.Random,
               pool: Mapping[str, list[str]] | None = None) -> dict[str, str]:
    """A bijection exchanging each intent entity (a name of ``names``, the trajectory's own) with another name
    of its kind absent from the intent, drawn from ``names`` and ``pool`` (names seen elsewhere). A name from
    elsewhere that the trajectory never shows simply replaces the entity; the pair stays a bijection."""
    mapping: dict[str, str] = {}
    for name, kind in intent_entities(intent, names):
        taken = set(mapping)
        options = [other for other in dict.fromkeys([*names.get(kind, []), *(pool or {}).get(kind, [])])
                   if other not in taken and other not in intent
                   and not any(other in t or t in other for t in taken | {name})]
        if options:
            other = rng.choice(options)
            mapping[name], mapping[other] = other, name
    return mapping


def _replacer(mapping: Mapping[str, str]) -> Callable[[str], str]:
    if not mapping:
        return lambda text: text
    pattern = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    return lambda text: pattern.sub(lambda m: mapping[m.group(0)], text)


def _escaped(mapping: Mapping[str, str]) -> dict[str, str]:
    """The same bijection as written inside the simplified HTML (``&`` as ``&amp;`` ...)."""
    return {html.escape(k, quote=False): html.escape(v, quote=False) for k, v in mapping.items()}


def renumber_ids(page_html: str, response: str, rng: random.Random) -> tuple[str, str]:
    """Distinct random ids for the page's elements, applied to the page and to ``element="..."`` in the response."""
    ids = list(dict.fromkeys(m.group(2) for m in _ID_ATTR.finditer(page_html)))
    if not ids:
        return page_html, response
    fresh = rng.sample(range(len(ids) * ID_SPREAD), len(ids))
    new_id = {old: str(new) for old, new in zip(ids, fresh, strict=True)}

    def sub(pattern: re.Pattern[str], text: str) -> str:
        return pattern.sub(lambda m: m.group(1) + new_id.get(m.group(2), m.group(2)) + m.group(3), text)

    return sub(_ID_ATTR, page_html), sub(_ELEMENT_ARG, response)


def renumbered_copies(example: StepExample, copies: int, seed: int) -> list[StepExample]:
    """``copies`` of a trained step with its page's element ids renumbered (:func:`renumber_ids`) in the state and in
    the action alike, each copy a draw of its own (deterministic for ``seed`` and the step); the generated token ids
    are dropped, the action's text having changed. The next state is left as it was (the actor's update does not read
    it). A step whose action names no element of its page gets none: there is no id for it to read off the page."""
    found = _ELEMENT_ARG.search(example.completion)
    if not copies or found is None or f'id="{found.group(2)}"' not in example.prompt:
        return []
    rng = random.Random(f"{seed}:{example.trajectory_id}:{example.task_key}:{example.index}")
    out = []
    for _ in range(copies):
        prompt, completion = renumber_ids(example.prompt, example.completion, rng)
        out.append(dataclasses.replace(example, prompt=prompt, completion=completion, completion_ids=()))
    return out


def observations_of(traj: Trajectory) -> list[Observation]:
    """Every page of ``traj``: each step's observation, then the page after its last action."""
    return [s.observation for s in traj.steps] + ([traj.last_observation] if traj.last_observation else [])


def relabel(traj: Trajectory, rng: random.Random, *, pool: Mapping[str, list[str]] | None = None,
            names: Mapping[str, list[str]] | None = None, swap_entities: bool = True,
            renumber: bool = True) -> Trajectory:
    """A relabelled copy of ``traj`` (see the module docstring), its replacement names drawn from its own pages
    (``names``: its :func:`trajectory_names`, computed when not given) and ``pool`` (those of other
    trajectories). Generated token ids are dropped (the response text changed), parsed actions too (they would
    describe the old labels)."""
    mapping: dict[str, str] = {}
    if swap_entities:
        mapping = swap_pairs(traj.intent, trajectory_names(traj) if names is None else names, rng, pool)
    text_sub, html_sub = _replacer(mapping), _replacer(_escaped(mapping))

    def observation(obs: Observation, response: str) -> tuple[Observation, str]:
        page, response = html_sub(obs.html), text_sub(response)
        if renumber:
            page, response = renumber_ids(page, response, rng)
        return obs.model_copy(update={"html": page, "title": text_sub(obs.title)}), response

    steps = []
    for step in traj.steps:
        obs, response = observation(step.observation, step.response)
        steps.append(step.model_copy(update={"observation": obs, "response": response, "action": None,
                                             "token_ids": [], "logprobs": []}))
    last = observation(traj.last_observation, "")[0] if traj.last_observation else None
    return traj.model_copy(update={"intent": text_sub(traj.intent), "steps": steps, "last_observation": last,
                                   "answer": text_sub(traj.answer) if traj.answer else traj.answer})


def relabelled_copies(traj: Trajectory, copies: int, seed: int, pool: Mapping[str, list[str]] | None = None,
                      names: Mapping[str, list[str]] | None = None) -> list[Trajectory]:
    """``copies`` independent relabellings of ``traj`` (deterministic for ``seed``, the trajectory and ``pool``);
    its pages are parsed once for all of them (or not at all when ``names`` is given)."""
    if not copies:
        return []
    rng = random.Random(f"{seed}:{traj.task_id}:{len(traj.steps)}")
    names = trajectory_names(traj) if names is None else names
    return [relabel(traj, rng, pool=pool, names=names) for _ in range(copies)]
