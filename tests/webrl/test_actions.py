"""The WebRL action grammar: every form round-trips; malformed output names its problem; nothing crashes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webrl.agent.actions import ACTION_ARGUMENTS, Action, ActionParseError, ActionType, format_action, parse_action

EXAMPLES = {
    'do(action="Click", element="7")': Action(type=ActionType.CLICK, element="7"),
    'do(action="Type", argument="hello world", element="22")': Action(
        type=ActionType.TYPE, argument="hello world", element="22"),
    'do(action="Search", argument="blue shoes", element="13")': Action(
        type=ActionType.SEARCH, argument="blue shoes", element="13"),
    'do(action="Hover", element="3")': Action(type=ActionType.HOVER, element="3"),
    'do(action="Scroll Up")': Action(type=ActionType.SCROLL_UP),
    'do(action="Scroll Down")': Action(type=ActionType.SCROLL_DOWN),
    'do(action="Scroll Down", element="5")': Action(type=ActionType.SCROLL_DOWN, element="5"),
    'do(action="Scroll Up", element="5")': Action(type=ActionType.SCROLL_UP, element="5"),
    'do(action="Press Enter")': Action(type=ActionType.PRESS_ENTER),
    'do(action="Select Dropdown Option", argument="Month", element="20")': Action(
        type=ActionType.SELECT, argument="Month", element="20"),
    'do(action="Go Backward")': Action(type=ActionType.GO_BACKWARD),
    'do(action="Go Forward")': Action(type=ActionType.GO_FORWARD),
    'exit(message="42 items")': Action(type=ActionType.EXIT, message="42 items"),
}


@pytest.mark.parametrize("text", list(EXAMPLES))
def test_every_form_parses_and_formats_back(text: str) -> None:
    action = parse_action(text)
    assert action == EXAMPLES[text]
    assert format_action(action) == text


def test_all_eleven_forms_are_covered() -> None:
    assert {a.type for a in EXAMPLES.values()} == set(ActionType)


def test_comment_lines_before_the_call_are_allowed() -> None:
    text = "# Element: the search box\n# Note: type the query\ndo(action=\"Type\", argument=\"x\", element=\"4\")"
    assert parse_action(text) == Action(type=ActionType.TYPE, argument="x", element="4")


def test_quotes_and_escapes_inside_arguments() -> None:
    tricky = 'He said "hi"\\ and\nleft \'now\''
    action = Action(type=ActionType.EXIT, message=tricky)
    assert parse_action(format_action(action)) == action
    assert parse_action("exit(message='single \\'quoted\\'')").message == "single 'quoted'"


def test_integer_element_is_accepted_as_text() -> None:
    assert parse_action('do(action="Click", element=7)').element == "7"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no action"),
        ("# only a comment", "no action"),
        ('do(action="Fly", element="1")', "unknown action 'Fly'"),
        ('do(action="Click")', "Click needs element"),
        ('do(action="Click", element="a7")', "element must be an integer id"),
        ('do(action="Scroll Up", argument="1")', "Scroll Up does not take argument"),
        ('do(action="Scroll Up", element="top")', "element must be an integer id"),
        ('click(element="1")', "unknown function 'click'"),
        ('do("Click", element="1")', "positional arguments"),
        ('do(action="Click", element=x)', "must be a string literal"),
        ('do(action="Click", element="1", element="2")', "given twice"),
        ("do(action=", "not a function call"),
        ("__import__('os').system('true')", "expected do(...) or exit(...)"),
    ],
)
def test_malformed_output_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ActionParseError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_action(text)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    try:
        action = parse_action(text)
    except ActionParseError:
        return
    assert isinstance(action, Action)


_arg = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@st.composite
def actions(draw: st.DrawFn) -> Action:
    kind = draw(st.sampled_from(list(ActionType)))
    fields = {}
    for name in ACTION_ARGUMENTS[kind]:
        fields[name] = str(draw(st.integers(0, 999))) if name == "element" else draw(_arg)
    return Action(type=kind, **fields)


@settings(max_examples=300, deadline=None)
@given(actions())
def test_format_then_parse_is_identity(action: Action) -> None:
    assert parse_action(format_action(action)) == action
