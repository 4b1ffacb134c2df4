"""The WebRL action grammar: the :class:`Action` record, parsing model output into one, formatting one back.

Grammar (docs/design.md), optionally preceded by ``#`` comment lines::

    do(action="Click", element="7")
    do(action="Type", argument="hello", element="22")
    do(action="Scroll Down", element="5")    (optional element: scroll the box it scrolls in)
    exit(message="the answer")

Parsing uses :mod:`ast` on the call expression (never ``eval``): only keyword arguments whose values are
string (or integer, for ``element``) literals are accepted.
"""

from __future__ import annotations

import ast
import json
import warnings
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ActionType(StrEnum):
    """The eleven forms of the WebRL action grammar (``exit`` is the answer)."""

    CLICK = "Click"
    TYPE = "Type"
    SEARCH = "Search"
    HOVER = "Hover"
    SCROLL_UP = "Scroll Up"
    SCROLL_DOWN = "Scroll Down"
    PRESS_ENTER = "Press Enter"
    SELECT = "Select Dropdown Option"
    GO_BACKWARD = "Go Backward"
    GO_FORWARD = "Go Forward"
    EXIT = "exit"


#: Which keyword arguments each action needs; nothing else is accepted.
ACTION_ARGUMENTS: dict[ActionType, tuple[str, ...]] = {
    ActionType.CLICK: ("element",),
    ActionType.TYPE: ("argument", "element"),
    ActionType.SEARCH: ("argument", "element"),
    ActionType.HOVER: ("element",),
    ActionType.SCROLL_UP: (),
    ActionType.SCROLL_DOWN: (),
    ActionType.PRESS_ENTER: (),
    ActionType.SELECT: ("argument", "element"),
    ActionType.GO_BACKWARD: (),
    ActionType.GO_FORWARD: (),
    ActionType.EXIT: ("message",),
}

#: Arguments an action may carry besides those above: Scroll with an element scrolls the box that
#: element scrolls in (a list, a textarea) instead of the window. WebRL's own outputs never carry them.
OPTIONAL_ARGUMENTS: dict[ActionType, tuple[str, ...]] = {
    ActionType.SCROLL_UP: ("element",),
    ActionType.SCROLL_DOWN: ("element",),
}


class Action(BaseModel):
    """A parsed action. ``element`` is the integer id shown in the observation, kept as text."""

    model_config = ConfigDict(frozen=True)

    type: ActionType
    element: str | None = None
    argument: str | None = None
    message: str | None = None

    def format(self) -> str:
        """The canonical text (:func:`format_action`)."""
        return format_action(self)


_BY_NAME = {t.value.lower(): t for t in ActionType if t is not ActionType.EXIT}
MAX_ACTION_CHARS = 4096  # longer output is not an action; bounds the parser's work on garbage


class ActionParseError(ValueError):
    """Model output that is not a valid WebRL action; the message names the problem."""


def _call_text(text: str) -> str:
    """The code part of a response: drop markdown fences, comment lines and blank lines."""
    lines = []
    for raw in text.strip().split("\n"):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("```"):
            continue
        lines.append(line)
    if not lines:
        raise ActionParseError("no action: the response has only comments or is empty")
    return "\n".join(lines)


def _literal(node: ast.expr, name: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return str(node.value)
    raise ActionParseError(f"argument {name!r} must be a string literal")


def parse_action(text: str) -> Action:
    """Parse one action from model output. Raises :class:`ActionParseError` naming what is wrong."""
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(f"response is {len(text)} characters; an action is at most {MAX_ACTION_CHARS}")
    code = _call_text(text)
    try:
        with warnings.catch_warnings():  # model output such as `3rd` makes the compiler warn before it fails
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(code, mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise ActionParseError(f"not a function call: {getattr(exc, 'msg', exc)}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionParseError("expected do(...) or exit(...)")
    if call.args:
        raise ActionParseError("positional arguments are not allowed; use keywords like element=\"7\"")
    kwargs: dict[str, str] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ActionParseError("**kwargs are not allowed")
        if kw.arg in kwargs:
            raise ActionParseError(f"argument {kw.arg!r} given twice")
        kwargs[kw.arg] = _literal(kw.value, kw.arg)

    if call.func.id == "exit":
        kind = ActionType.EXIT
    elif call.func.id == "do":
        if "action" not in kwargs:
            raise ActionParseError("do(...) needs action=\"...\"")
        name = kwargs.pop("action")
        kind = _BY_NAME.get(" ".join(name.split()).lower())
        if kind is None:
            raise ActionParseError(f"unknown action {name!r}; expected one of {[t.value for t in _BY_NAME.values()]}")
    else:
        raise ActionParseError(f"unknown function {call.func.id!r}; expected do or exit")

    wanted = ACTION_ARGUMENTS[kind]
    extra = sorted(set(kwargs) - set(wanted) - set(OPTIONAL_ARGUMENTS.get(kind, ())))
    if extra:
        raise ActionParseError(f"{kind.value} does not take {', '.join(extra)}")
    missing = [a for a in wanted if a not in kwargs]
    if missing:
        raise ActionParseError(f"{kind.value} needs {', '.join(missing)}")
    if "element" in kwargs and not kwargs["element"].strip().isdigit():
        raise ActionParseError(f"element must be an integer id, got {kwargs['element']!r}")
    if "element" in kwargs:
        kwargs["element"] = kwargs["element"].strip()
    return Action(type=kind, **kwargs)


def _quote(value: str) -> str:
    """A double-quoted Python string literal that :func:`parse_action` reads back unchanged."""
    # JSON string escapes are a subset of Python's; control characters come out escaped.
    return json.dumps(value, ensure_ascii=False)


def format_action(action: Action) -> str:
    """The canonical text of an action, as the actor is trained to emit it."""
    if action.type is ActionType.EXIT:
        return f"exit(message={_quote(action.message or '')})"
    parts = [f"action={_quote(action.type.value)}"]
    if action.argument is not None:
        parts.append(f"argument={_quote(action.argument)}")
    if action.element is not None:
        parts.append(f"element={_quote(action.element)}")
    return f"do({', '.join(parts)})"
