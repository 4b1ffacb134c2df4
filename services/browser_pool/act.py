"""Execute WebRL actions on a page, by element id, with WebRL's semantics.

- Click / Hover: the element marked with the id (Playwright's actionability checks apply). Click on an
  option of a ``<select multiple>`` toggles it, as a Ctrl+click does.
- Type: clear the field, then enter the text (WebRL clears before typing). Date, time, month, week and
  datetime-local inputs take the text in common forms (dates.py), or report the forms they read.
- Search: Type, then press Enter in the field.
- Select Dropdown Option: pick the ``<option>`` whose text matches the argument case-insensitively
  (exact match first, then the first option containing it); a ``<select multiple>`` adds it to the
  selection.
- Scroll Up / Down: scroll the page by 2/3 of the viewport height (WebRL's scroll step); with an element,
  scroll the box that element scrolls in (the element itself when it scrolls) by 2/3 of that box.
- Press Enter: on whatever has focus. Go Backward / Forward: history navigation.
- exit: nothing to do here; the episode loop stops.

Failures (unknown id, element gone, not fillable, no such option, timeouts) come back as error text for
the next observation; they never raise. A click or key press does not wait for the page it leads to
(``no_wait_after``): the episode's observation waits for that (episode.py), so the action's timeout covers the
action alone and a slow next page never turns a click that happened into "Click failed".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator, Page

from services.browser_pool.dates import DATE_INPUT_TYPES, DateFormatError, input_value
from services.browser_pool.observe import MARK_ATTRIBUTE, ElementMap
from webrl.agent.actions import Action, ActionType

log = logging.getLogger(__name__)

SCROLL_FRACTION = 2 / 3  # WebRL scrolls by two thirds of the viewport height per Scroll action
ACTION_TIMEOUT_MS = 5_000  # Playwright actionability wait per action; the step timeout bounds the whole step
# Playwright's click and press wait, within their timeout, for a navigation they start to commit: under load
# (0.2 CPU) a search whose results took over 5 s to come came back as "Search failed" though it was done
NO_WAIT_AFTER = True
NAVIGATION_TIMEOUT_MS = 15_000  # Go Backward / Forward wait for the load event at most this long
FILLABLE_TAGS = {"input", "textarea"}

_SCROLL_JS = "(f) => window.scrollBy({top: Math.round(window.innerHeight * f), left: 0, behavior: 'instant'})"
# The nearest box that scrolls vertically, from the element up; the window when there is none.
_SCROLL_ELEMENT_JS = """(el, f) => {
  for (let e = el; e && e !== document.body && e !== document.documentElement; e = e.parentElement) {
    const overflow = getComputedStyle(e).overflowY;
    if (e.scrollHeight > e.clientHeight && ["auto", "scroll", "overlay"].includes(overflow)) {
      e.scrollBy({top: Math.round(e.clientHeight * f), left: 0, behavior: "instant"});
      return;
    }
  }
  window.scrollBy({top: Math.round(window.innerHeight * f), left: 0, behavior: "instant"});
}"""
_OPTIONS_JS = """(el) => el.tagName !== 'SELECT' ? null
  : {multiple: el.multiple, texts: Array.from(el.options).map(o => o.textContent),
     selected: Array.from(el.options).flatMap((o, i) => o.selected ? [i] : [])}"""
_TOGGLE_OPTION_JS = """(option) => {
  option.selected = !option.selected;
  const select = option.closest("select");
  if (select) for (const type of ["input", "change"]) select.dispatchEvent(new Event(type, {bubbles: true}));
}"""


class ActionError(Exception):
    """An action that cannot be carried out on this page; the message goes into the next observation."""


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def match_option(options: list[str], wanted: str) -> int | None:
    """Index of the option whose text equals ``wanted`` ignoring case and spacing, else the first that
    contains it, else None."""
    target = _norm(wanted)
    texts = [_norm(o) for o in options]
    if target in texts:
        return texts.index(target)
    for i, text in enumerate(texts):
        if target and target in text:
            return i
    return None


def _element(page: Page, action: Action, elements: ElementMap) -> Locator:
    element = action.element or ""
    if element not in elements:
        shown = f"0-{len(elements) - 1}" if elements else "none"
        raise ActionError(f"element {element} is not on the page (ids shown: {shown})")
    return page.locator(f'[{MARK_ATTRIBUTE}="{element}"]')


async def _type(page: Page, action: Action, elements: ElementMap) -> None:
    loc = _element(page, action, elements)
    info = elements[action.element or ""]
    if info.tag not in FILLABLE_TAGS and not await loc.evaluate("el => el.isContentEditable"):
        raise ActionError(f"element {action.element} is a <{info.tag}>, not a text field")
    text = action.argument or ""
    if info.tag == "input" and info.type in DATE_INPUT_TYPES:
        try:
            text = input_value(info.type, text)
        except DateFormatError as exc:
            raise ActionError(f'element {action.element} is an <input type="{info.type}">: {exc}') from None
    # fill() clears the field, then enters the whole text with one input event: key-by-key typing costs a
    # round trip per character and timed out on long queries under load.
    await loc.fill(text, timeout=ACTION_TIMEOUT_MS)


async def _search(page: Page, action: Action, elements: ElementMap) -> None:
    await _type(page, action, elements)
    await _element(page, action, elements).press("Enter", timeout=ACTION_TIMEOUT_MS, no_wait_after=NO_WAIT_AFTER)


async def _select(page: Page, action: Action, elements: ElementMap) -> None:
    loc = _element(page, action, elements)
    state = await loc.evaluate(_OPTIONS_JS, timeout=ACTION_TIMEOUT_MS)
    if state is None:
        raise ActionError(f"element {action.element} is not a <select>")
    options: list[str] = state["texts"]
    index = match_option(options, action.argument or "")
    if index is None:
        shown = ", ".join(repr(" ".join(o.split())) for o in options[:10])
        raise ActionError(f"no option {action.argument!r} in element {action.element}; options: {shown}")
    chosen = sorted({*state["selected"], index}) if state["multiple"] else [index]
    await loc.select_option(index=chosen, timeout=ACTION_TIMEOUT_MS)


async def _click(page: Page, action: Action, elements: ElementMap) -> None:
    loc = _element(page, action, elements)
    if elements[action.element or ""].tag == "option":  # only a <select multiple>'s options have ids
        await loc.evaluate(_TOGGLE_OPTION_JS, timeout=ACTION_TIMEOUT_MS)
        return
    await loc.click(timeout=ACTION_TIMEOUT_MS, no_wait_after=NO_WAIT_AFTER)


async def _scroll(page: Page, action: Action, elements: ElementMap, fraction: float) -> None:
    if action.element is None:
        await page.evaluate(_SCROLL_JS, fraction)
        return
    await _element(page, action, elements).evaluate(_SCROLL_ELEMENT_JS, fraction, timeout=ACTION_TIMEOUT_MS)


async def _history(page: Page, forward: bool) -> None:
    move = page.go_forward if forward else page.go_back
    before = page.url
    response = await move(timeout=NAVIGATION_TIMEOUT_MS, wait_until="commit")
    if response is None and page.url == before:
        raise ActionError(f"there is no {'next' if forward else 'previous'} page in this tab's history")


_HANDLERS: dict[ActionType, Callable[[Page, Action, ElementMap], Awaitable[object]]] = {
    ActionType.CLICK: _click,
    ActionType.HOVER: lambda p, a, e: _element(p, a, e).hover(timeout=ACTION_TIMEOUT_MS),
    ActionType.TYPE: _type,
    ActionType.SEARCH: _search,
    ActionType.SELECT: _select,
    ActionType.SCROLL_UP: lambda p, a, e: _scroll(p, a, e, -SCROLL_FRACTION),
    ActionType.SCROLL_DOWN: lambda p, a, e: _scroll(p, a, e, SCROLL_FRACTION),
    ActionType.PRESS_ENTER: lambda p, a, e: p.keyboard.press("Enter"),
    ActionType.GO_BACKWARD: lambda p, a, e: _history(p, forward=False),
    ActionType.GO_FORWARD: lambda p, a, e: _history(p, forward=True),
}


def _short(exc: PlaywrightError) -> str:
    """The first line of a Playwright error, without its call log."""
    first = exc.message.strip().splitlines()[0] if exc.message.strip() else type(exc).__name__
    return first[:300]


async def execute(page: Page, action: Action, observation_map: ElementMap) -> str | None:
    """Carry out ``action`` on ``page``; ``observation_map`` holds the ids of the last observation.

    Returns None on success, else the error text for the next observation. A closed page or a dead
    browser still raises (the episode cannot go on); everything else is reported, never raised.
    """
    if action.type is ActionType.EXIT:
        return None
    try:
        await _HANDLERS[action.type](page, action, observation_map)
    except ActionError as exc:
        return str(exc)
    except PlaywrightError as exc:
        if page.is_closed() or not page.context.browser or not page.context.browser.is_connected():
            raise
        log.debug("action %s failed: %s", action.format(), exc)
        return f"{action.type.value} failed: {_short(exc)}"
    return None
