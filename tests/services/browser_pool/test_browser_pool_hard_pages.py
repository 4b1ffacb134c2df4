"""Pages our sandbox does not have: each fixture page reproduces one way a third-party page
defeated the observation or the actions, and each test drives it through a real episode (real Chromium)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.browser_pool.episode import BrowserEpisode

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

Opener = Callable[[str], Awaitable[BrowserEpisode]]


def _find(html: str, pattern: str) -> re.Match[str]:
    """The first match of ``pattern`` in the observation; fails the test, showing the observation, if none."""
    match = re.search(pattern, html)
    assert match, f"nothing matches {pattern!r} in {html}"
    return match


def _id(html: str, text: str) -> str:
    """The id of the element whose rendered text starts with ``text``."""
    return _find(html, rf'<\w+ id="(\d+)"[^>]*> {re.escape(text)}').group(1)


def _tag(html: str, element_id: str) -> str:
    """The opening tag of the element with ``element_id``."""
    return _find(html, rf'<\w+ id="{element_id}"[^>]*>').group(0)


@pytest.fixture
async def open_page(pool, pool_settings, fixture_url, make_task) -> AsyncIterator[Opener]:
    """Opens an episode on a fixture page by file name; closes every episode it opened."""
    episodes: list[BrowserEpisode] = []

    async def opener(name: str) -> BrowserEpisode:
        episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/{name}"), pool_settings)
        episodes.append(episode)
        return episode

    yield opener
    for episode in episodes:
        await episode.close()


async def test_children_of_a_pointer_wrapper_with_their_own_listeners_get_ids(open_page: Opener):
    ep = await open_page("wrapper.html")
    html = ep.observation.html
    reply, forward = _id(html, "Reply"), _id(html, "Forward")
    assert reply != forward
    result = await ep.step(f'do(action="Click", element="{forward}")')
    assert result.error is None and "Did: forward" in result.observation.html
    result = await ep.step(f'do(action="Click", element="{reply}")')
    assert "Did: reply" in result.observation.html
    card = _id(html, "Card title")  # inherited pointer, no handler of its own: the card keeps one id
    assert not re.search(r'id="\d+"[^>]*> card body', html)
    result = await ep.step(f'do(action="Click", element="{card}")')
    assert "Did: card" in result.observation.html


async def test_icon_only_controls_are_named(open_page: Opener):
    ep = await open_page("icons.html")
    html = ep.observation.html
    names = re.findall(r'data-text="([^"]*)"', html)
    for name in ["close", "trash", "star", "send", "delete", "Settings"]:
        assert name in names, f"no control named {name!r} in {html}"
    assert 'type="image" data-text="Submit order"' in html
    unnamed = [tag for tag in re.findall(r'<\w+ id="\d+"[^>]*>', html) if "data-text" not in tag]
    assert len(unnamed) == 1, f"only the span with no meaningful class stays unnamed: {unnamed}"
    trash = re.search(r'<span id="(\d+)"[^>]*data-text="trash"', html)
    assert trash
    result = await ep.step(f'do(action="Click", element="{trash.group(1)}")')
    assert "Said: trash" in result.observation.html


async def test_controls_drawn_as_background_icons_are_named_by_their_id_and_class_words(open_page: Opener):
    """Only a CSS background icon: the words of the control's id and class names name it (send and back tell
    apart; "toolbar-discard" says discard even though no icon font uses that word); generated names stay unnamed."""
    ep = await open_page("icon-tokens.html")
    html = ep.observation.html
    names = re.findall(r'data-text="([^"]*)"', html)
    assert names == ["send", "back", "toolbar discard", "compose mail", "archive"], html
    unnamed = [tag for tag in re.findall(r'<\w+ id="\d+"[^>]*>', html) if "data-text" not in tag]
    assert len(unnamed) == 2, f"the generated names (ember42, xyz-1a2b) stay unnamed: {unnamed}"
    back = _find(html, r'<span id="(\d+)"[^>]*data-text="back"')
    result = await ep.step(f'do(action="Click", element="{back.group(1)}")')
    assert "Said: back" in result.observation.html


async def test_first_observation_waits_for_late_images_and_fonts(open_page: Opener):
    ep = await open_page("late.html")
    assert re.search(r'<a id="0"[^>]*> </a>', ep.observation.html), ep.observation.html
    assert await ep.active.evaluate("document.fonts.status") == "loaded"
    assert await ep.active.evaluate("document.querySelector('img').complete")


async def test_ui_that_appears_shortly_after_an_action_is_observed(open_page: Opener):
    ep = await open_page("delayed.html")
    field = re.search(r'<input id="(\d+)"[^>]*placeholder="Find a product"', ep.observation.html)
    assert field
    result = await ep.step(f'do(action="Type", argument="blue", element="{field.group(1)}")')
    assert re.search(r'<a id="\d+"[^>]*> Suggestion: blue mug </a>', result.observation.html), result.observation.html
    result = await ep.step(f'do(action="Hover", element="{_id(result.observation.html, "Products")}")')
    assert re.search(r'<a id="\d+"[^>]*> Mugs </a>', result.observation.html), result.observation.html


async def test_a_page_that_stopped_changing_is_observed_without_a_fresh_quiet_window(open_page: Opener):
    """The quiet window counts from the page's last mutation (inflight.js), not from each observation, so an
    unchanged page is read after about a frame, where a full window from the call waits QUIET_MS every time; the
    ids observe.js writes are not changes of the page."""
    from services.browser_pool.observe import QUIET_MS, QUIET_PER_CALL_SETTLE, observe_view

    ep = await open_page("elements.html")
    since_last = [(await observe_view(ep.active)).settle_ms for _ in range(5)]
    per_call = [(await observe_view(ep.active, settle_rule=QUIET_PER_CALL_SETTLE)).settle_ms for _ in range(5)]
    assert min(per_call) >= QUIET_MS > min(since_last), (since_last, per_call)
    assert (await observe_view(ep.active)).observation.html == ep.observation.html


async def test_what_a_click_shows_in_the_next_frame_or_task_is_observed(open_page: Opener):
    """A page quiet for long, whose clicks change the DOM one step later (requestAnimationFrame, a
    MessageChannel task as React schedules): the observation right after the click shows the change."""
    ep = await open_page("nextframe.html")
    for button, shown in (("Show in the next frame", "Shown in the next frame"),
                          ("Show after a message", "Shown after a message")):
        result = await ep.step(f'do(action="Click", element="{_id(ep.observation.html, button)}")')
        assert re.search(rf'<a id="\d+"[^>]*> {shown} </a>', result.observation.html), result.observation.html


async def test_long_values_are_reachable_and_scroll_moves_the_element(open_page: Opener):
    ep = await open_page("longvalue.html")
    html = ep.observation.html
    assert "INPUTEND" in html, "an input value past the old 100-character cut"
    story = re.search(r'<textarea id="(\d+)" value="([^"]*)"', html)
    assert story and story.group(2).startswith("word0 word1") and "more characters)" in story.group(2)
    assert "ZEBRA" not in html
    for _ in range(30):
        result = await ep.step(f'do(action="Scroll Down", element="{story.group(1)}")')
        assert result.error is None, result.error
        if "ZEBRA" in result.observation.html:
            break
    value = re.search(rf'<textarea id="{story.group(1)}" value="([^"]*)"', result.observation.html)
    assert value and value.group(1).endswith("ZEBRA") and "earlier characters)" in value.group(1)
    assert await ep.active.evaluate("window.scrollY") == 0, "the page itself did not scroll"
    assert not re.search(r'id="\d+"[^>]*> Item 30', html), "below the list's box: no id yet"
    item = _id(result.observation.html, "Item 1")
    for _ in range(10):
        result = await ep.step(f'do(action="Scroll Down", element="{item}")')
        if re.search(r'id="\d+"[^>]*> Item 30', result.observation.html):
            break
    assert re.search(r'id="\d+"[^>]*> Item 30', result.observation.html), "the list scrolled inside its box"
    assert await ep.active.evaluate("window.scrollY") == 0


async def test_multi_select_state_options_and_adding_to_the_selection(open_page: Opener):
    ep = await open_page("multiselect.html")
    html = ep.observation.html
    select = re.search(r'<select id="(\d+)" type="select-multiple"', html)
    assert select, html
    assert re.search(r'<option id="\d+" selected> Cheese </option>', html)
    olives = _id(html, "Olives")
    result = await ep.step(f'do(action="Select Dropdown Option", argument="Ham", element="{select.group(1)}")')
    assert result.error is None and "Chosen: cheese, ham" in result.observation.html
    result = await ep.step(f'do(action="Click", element="{olives}")')
    assert result.error is None and "Chosen: cheese, ham, olives" in result.observation.html
    result = await ep.step(f'do(action="Click", element="{_id(html, "Cheese")}")')  # a second click unselects
    assert "Chosen: ham, olives" in result.observation.html
    assert re.search(r'<option id="\d+"> Cheese </option>', result.observation.html)
    result = await ep.step(f'do(action="Select Dropdown Option", argument="Pineapple", element="{select.group(1)}")')
    assert "Chosen: ham, olives, pineapple" in result.observation.html


@pytest.mark.parametrize(("field", "typed", "stored"), [
    ("start", "02/04/2012", "2012-02-04"),
    ("start", "Feb 4, 2012", "2012-02-04"),
    ("start", "2012-02-04", "2012-02-04"),
    ("month", "March 2013", "2013-03"),
    ("meeting", "02/04/2012 3:30 PM", "2012-02-04T15:30"),
    ("alarm", "3:30 PM", "15:30"),
])
async def test_dates_typed_in_common_formats(open_page: Opener, field: str, typed: str, stored: str):
    ep = await open_page("dates.html")
    element = await ep.active.get_attribute(f"#{field}", "data-webrl-id")
    result = await ep.step(f'do(action="Type", argument="{typed}", element="{element}")')
    assert result.error is None, result.error
    assert await ep.active.input_value(f"#{field}") == stored
    assert f"Changed: {field}={stored}" in result.observation.html
    assert f'value="{stored}"' in _tag(result.observation.html, element or "")


async def test_an_unreadable_date_names_the_expected_format(open_page: Opener):
    ep = await open_page("dates.html")
    element = await ep.active.get_attribute("#start", "data-webrl-id")
    result = await ep.step(f'do(action="Type", argument="next tuesday", element="{element}")')
    assert result.error and "YYYY-MM-DD" in result.error and "MM/DD/YYYY" in result.error
    assert await ep.active.input_value("#start") == ""


async def test_the_current_page_of_a_pagination_widget_is_marked(open_page: Opener):
    ep = await open_page("pagination.html")
    html = ep.observation.html
    assert re.search(r'<a id="\d+" data-status="current"> 2 </a>', html), html
    assert re.search(r'<span data-status="current"> 5 </span>', html), html
    for other in ["1", "3", "4", "6"]:
        assert "current" not in _tag(html, _id(html, other))
    assert "current" not in _tag(html, _id(html, "One")), "tabs outside pagination keep today's rendering"
