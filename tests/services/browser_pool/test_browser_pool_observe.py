"""Observation: every link, button and input on a fixture page gets an id; ids are stable; hidden,
off-viewport and non-content nodes are dropped; only the kept attributes appear; long text is cut."""

from __future__ import annotations

import re

import pytest

from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.observe import MAX_TEXT_CHARS, observe, observe_view

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

ALLOWED_ATTRIBUTES = {"id", "title", "value", "type", "placeholder", "selected", "data-value", "data-text",
                      "data-bbox", "data-status"}


def _tag_of(html: str, element_id: str) -> str:
    match = re.search(rf'<(\w+) id="{element_id}"[^>]*>', html)
    assert match, f"no element with id {element_id} in {html}"
    return match.group(0)


async def test_every_control_gets_an_id(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/elements.html"), pool_settings)
    try:
        obs, elements = episode.observation, episode.elements
        html = obs.html
        # Links, inputs (text, password, checkbox, radio), select, textarea, buttons, ARIA role, onclick,
        # cursor:pointer, tabindex, contenteditable, labels with a control.
        expected = ["Next page", "Query", "Search", "Disabled", "Onclick div", "Pointer span", "Focusable div",
                    "Editable", "Inner button", "Styled check"]
        for text in expected:
            assert re.search(rf'<\w+ id="\d+"[^>]*> {text}', html), f"{text!r} has no id in {html}"
        tags = sorted(info.tag for info in elements.values())
        assert tags.count("input") == 4 and tags.count("select") == 1 and tags.count("textarea") == 1
        assert tags.count("a") == 2 and tags.count("button") == 3 and tags.count("label") == 2
        assert 'data-text="Close banner"' in html  # an icon-only role=button says what it is
        assert sorted(elements, key=int) == [str(i) for i in range(len(elements))]
    finally:
        await episode.close()


async def test_dropped_and_kept(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/elements.html"), pool_settings)
    try:
        html = episode.observation.html
        for absent in ["Hidden by display", "Hidden by visibility", "Far below", "Far text", "a comment", "noop",
                       "token", "hunter2", "Covered\"", "Not focusable by tab\""]:
            assert absent not in html, absent
        assert not re.search(r'id="\d+"> Card text', html), "the onclick card holds a button: no id for it"
        assert re.search(r"Card text <button id=\"\d+\"", html), "only the innermost of nested controls has an id"
        assert 'type="password" value="*******"' in html
        assert '<option selected> Green </option>' in html and 'data-status="checked"' in html
        assert 'data-status="disabled"' in html
        assert "Mug &amp; cup" in html and "$5 &lt;sale&gt;" in html
        long = re.search(r"Long text: (A+)\.\.\.", html)
        assert long and len("Long text: " + long.group(1)) == MAX_TEXT_CHARS
        for name in re.findall(r' ([a-z-]+)="', html):
            assert name in ALLOWED_ATTRIBUTES, name
        assert "Covered" in html and not re.search(r'id="\d+"[^>]*> Covered', html), "covered: not hit-testable"
        assert episode.observation.title == "Elements fixture"
        assert episode.observation.url.endswith("/elements.html")
    finally:
        await episode.close()


async def test_same_page_same_observation(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/elements.html"), pool_settings)
    try:
        first = episode.observation
        again = await observe(episode.active)
        assert again.html == first.html and again.tabs == first.tabs
        await episode.active.reload()
        reloaded = await observe(episode.active)
        assert reloaded.html == first.html
    finally:
        await episode.close()


async def test_scrolled_out_elements_lose_ids(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/actions.html"), pool_settings)
    try:
        assert "Add one" in episode.observation.html and "Bottom text" not in episode.observation.html
        await episode.active.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        view = await episode.refresh()
        assert "Bottom text" in view.observation.html and "Add one" not in view.observation.html
        assert view.elements == {}
    finally:
        await episode.close()


async def test_the_observation_script_is_installed_once_and_a_page_cannot_replace_it(pool, pool_settings, fixture_url,
                                                                                     make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/elements.html"), pool_settings)
    try:
        page = episode.active
        assert await page.evaluate("typeof window.__webrlObserve") == "function"
        replaced = await page.evaluate("""() => {
            window.__webrlObserve = () => ({ html: '<html> fake </html>', elements: {} });
            try { Object.defineProperty(window, '__webrlObserve', { value: () => null }); } catch (e) { return false; }
            return true;
        }""")
        assert replaced is False
        view = await observe_view(page)
        assert view.observation.html == episode.observation.html and "fake" not in view.observation.html
    finally:
        await episode.close()


async def test_a_document_without_the_init_scripts_is_observed_with_the_whole_script(pool, fixture_url):
    slot = await pool.acquire()
    try:
        assert slot.browser is not None
        context = await slot.browser.new_context()  # none of the episode's init scripts
        try:
            page = await context.new_page()
            await page.goto(f"{fixture_url}/elements.html")
            assert await page.evaluate("typeof window.__webrlObserve") == "undefined"
            view = await observe_view(page)
            assert "Next page" in view.observation.html and view.elements
        finally:
            await context.close()
    finally:
        pool.release(slot)
