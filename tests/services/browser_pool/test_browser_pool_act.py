"""Actions: each WebRL action changes the page as it should; bad ids and unparsable text come back as
errors in the next observation."""

from __future__ import annotations

import asyncio
import re

import pytest

from services.browser_pool import observe as observe_module
from services.browser_pool.act import match_option
from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.observe import observe_view

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def _id(html: str, text: str) -> str:
    match = re.search(rf'<\w+ id="(\d+)"[^>]*> {re.escape(text)}', html)
    assert match, f"no element {text!r} in {html}"
    return match.group(1)


def _input_id(html: str, marker: str) -> str:
    match = re.search(rf'<input id="(\d+)"[^>]*{re.escape(marker)}', html)
    assert match, f"no input with {marker!r} in {html}"
    return match.group(1)


def _select_id(html: str) -> str:
    match = re.search(r'<select id="(\d+)"', html)
    assert match, html
    return match.group(1)


@pytest.fixture
async def actions_page(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/actions.html"), pool_settings)
    yield episode
    await episode.close()


async def test_click_hover_type_select(actions_page):
    ep = actions_page
    html = ep.observation.html
    result = await ep.step(f'do(action="Click", element="{_id(html, "Add one")}")')
    assert result.error is None and "Count: 1" in result.observation.html
    result = await ep.step(f'do(action="Hover", element="{_id(html, "Hover me")}")')
    assert "Hover revealed" in result.observation.html
    result = await ep.step(f'do(action="Type", argument="new words", element="{_input_id(html, "old text")}")')
    assert "Echo: new words" in result.observation.html and 'value="new words"' in result.observation.html
    select_id = _select_id(html)
    result = await ep.step(f'do(action="Select Dropdown Option", argument="DARK GREEN", element="{select_id}")')
    assert result.error is None and "Chosen: g" in result.observation.html
    assert "<option selected> Dark Green </option>" in result.observation.html


async def test_search_navigates_and_history(actions_page):
    ep = actions_page
    html = ep.observation.html
    result = await ep.step(f'do(action="Search", argument="blue mug", element="{_input_id(html, "Search")}")')
    assert result.error is None, result.error
    assert "Results for blue mug" in result.observation.html and "results.html?q=blue+mug" in result.observation.url
    result = await ep.step('do(action="Go Backward")')
    assert result.observation.title == "Actions fixture"
    result = await ep.step('do(action="Go Forward")')
    assert "Results for blue mug" in result.observation.html


async def test_click_waits_for_slow_navigation_and_late_dom(actions_page):
    ep = actions_page
    result = await ep.step(f'do(action="Click", element="{_id(ep.observation.html, "Load later")}")')
    assert "Loaded later" in result.observation.html  # the wait covered the 300 ms fetch and its DOM update
    result = await ep.step(f'do(action="Click", element="{_id(result.observation.html, "Slow page")}")')
    assert result.observation.title == "Next page" and "Second page" in result.observation.html


async def test_scroll_and_press_enter(actions_page):
    ep = actions_page
    result = await ep.step('do(action="Scroll Down")')
    scrolled = await ep.active.evaluate("window.scrollY")
    assert scrolled == round(720 * 2 / 3)
    assert "Add one" not in result.observation.html or scrolled > 0
    result = await ep.step('do(action="Scroll Up")')
    assert await ep.active.evaluate("window.scrollY") == 0 and "Add one" in result.observation.html
    await ep.active.fill("#q", "pressed")
    await ep.active.focus("#q")
    result = await ep.step('do(action="Press Enter")')
    assert "Results for pressed" in result.observation.html


async def test_the_step_after_a_form_submission_observes_the_next_page(actions_page):
    """The submission's navigation starts in a task after the key press returned, and its request reaches us
    later still: an observation that returned at once read the old page (seen in CI)."""
    ep = actions_page
    await ep.active.evaluate("document.querySelector('form').action = '/slow.html'")  # answers after 0.3 s
    await ep.active.focus("#q")
    result = await ep.step('do(action="Press Enter")')
    assert result.observation.title == "Next page" and "Second page" in result.observation.html


async def test_a_page_still_there_after_the_quick_wait_is_waited_for_not_read(
        pool, pool_settings, fixture_url, make_task, monkeypatch):
    """On a loaded machine the navigation's request can reach the episode after observe.js's quick wait for
    the page to go has ended. Here every request event reaches the episode 1 s late and the quick wait is
    1 ms: the step after Enter in a form must still observe the next page, not the one it left (before the
    fix it read the old page in 6 runs of 10)."""
    monkeypatch.setattr(observe_module, "LEAVE_WAIT_MS", 1)
    heard = BrowserEpisode._on_request
    monkeypatch.setattr(BrowserEpisode, "_on_request",
                        lambda self, request: asyncio.get_running_loop().call_later(1.0, heard, self, request))
    ep = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/actions.html"), pool_settings)
    try:
        await ep.active.evaluate("document.querySelector('form').action = '/slow.html'")  # answers after 0.3 s
        await ep.active.focus("#q")
        result = await ep.step('do(action="Press Enter")')
    finally:
        await ep.close()
    assert result.observation.title == "Next page" and "Second page" in result.observation.html


async def test_an_observation_after_a_cancelled_submission_does_not_wait_to_leave(actions_page, monkeypatch):
    monkeypatch.setattr(observe_module, "LEAVE_WAIT_MS", 600_000)  # were it waited for, the test would time out
    page = actions_page.active
    await page.evaluate("document.querySelector('form').addEventListener('submit', (e) => e.preventDefault())")
    await page.evaluate("document.querySelector('form').requestSubmit()")
    view = await asyncio.wait_for(observe_view(page), 30)
    assert view.observation.url.endswith("/actions.html")


async def test_an_observation_after_a_navigation_a_single_page_app_intercepted_does_not_wait_to_leave(
        actions_page, monkeypatch):
    monkeypatch.setattr(observe_module, "LEAVE_WAIT_MS", 600_000)
    page = actions_page.active
    await page.evaluate("""() => {
        navigation.addEventListener('navigate', (e) => e.intercept({ handler: async () => {
            document.title = 'Routed in page'; } }));
        location.href = '/routed';
    }""")
    view = await asyncio.wait_for(observe_view(page), 30)
    assert view.observation.url.endswith("/routed") and view.observation.title == "Routed in page"


async def test_errors_come_back_in_the_observation(actions_page):
    ep = actions_page
    before = ep.observation.html
    result = await ep.step('do(action="Click", element="999")')
    assert result.error and "element 999 is not on the page" in result.error
    assert result.observation.error == result.error and result.observation.html == before
    result = await ep.step("click the red button please")
    assert result.action is None and result.parse_error and "could not parse" in result.observation.error
    result = await ep.step(f'do(action="Type", argument="x", element="{_id(before, "Add one")}")')
    assert result.error and "not a text field" in result.error
    select_id = _select_id(before)
    result = await ep.step(f'do(action="Select Dropdown Option", argument="Purple", element="{select_id}")')
    assert result.error and "no option 'Purple'" in result.error
    result = await ep.step(f'do(action="Select Dropdown Option", argument="Red", element="{_id(before, "Add one")}")')
    assert result.error and "not a <select>" in result.error
    result = await ep.step('do(action="Click", element="0")')  # the episode still works after errors
    assert result.error is None and "Count: 1" in result.observation.html
    result = await ep.step('exit(message="done")')
    assert result.done and result.answer == "done"


async def test_match_option_rules():
    options = ["Red", "Dark  Green", "Green", "Blue"]
    assert match_option(options, "green") == 2  # exact (case-insensitive) beats containment
    assert match_option(options, "DARK green") == 1
    assert match_option(options, "blu") == 3
    assert match_option(options, "purple") is None
