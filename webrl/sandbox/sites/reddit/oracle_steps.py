"""Sub-scripts the reddit and gitlab oracle solvers share (used with ``yield from`` inside a solver).

The observation only shows what is inside the 1280x720 viewport, so a solver that looks for a link in a
long list scrolls down until it appears, and follows the list's "Next" page link when the bottom of a page
is reached. Each sub-script takes the current observation and returns the observation it ends on (and
what it found), so solvers stay plain generators that :class:`~webrl.sandbox.oracles.OraclePolicy` can
replay.
"""

from __future__ import annotations

from collections.abc import Generator

from webrl.agent.observed_page import Element, ObservedPage
from webrl.agent.schemas import Observation
from webrl.sandbox.oracles import OracleStuck, click, scroll_down

Sub = Generator[str, Observation, tuple[Observation, Element]]
MAX_SCROLLS_PER_PAGE = 12  # a 20-item list is at most ~4 viewports; this only bounds a page that never ends
MAX_PAGES = 6  # the longest sandbox list (gitlab issues) has 3 pages


def reach(obs: Observation, label: str, tags: tuple[str, ...] | None = ("a",), exact: bool = True,
          next_label: str = "Next") -> Sub:
    """Scroll (and page on) until an element labelled ``label`` is visible; returns (observation, element)."""
    pages = scrolls = 0
    while True:
        page = ObservedPage(obs)
        if page.has(label, tags, exact):
            return obs, page.find(label, tags, exact)
        if scrolls < MAX_SCROLLS_PER_PAGE:
            before = page.text
            obs = yield scroll_down()
            scrolls += 1
            if ObservedPage(obs).text != before:
                continue
        page = ObservedPage(obs)
        if pages < MAX_PAGES and page.has(next_label, ("a",), exact=True):
            obs = yield click(page, next_label, ("a",), exact=True)
            pages += 1
            scrolls = 0
            continue
        raise OracleStuck(f"{label!r} is not on any page of {page.url}")


def open_link(obs: Observation, label: str, exact: bool = True) -> Generator[str, Observation, Observation]:
    """Reach the link labelled ``label`` and click it; returns the observation after the click."""
    obs, element = yield from reach(obs, label, ("a",), exact)
    return (yield f'do(action="Click", element="{element.id}")')


def open_menu_item(obs: Observation, toggle: str, item: str) -> Generator[str, Observation, Observation]:
    """Open a dropdown by its toggle button's label, then click the menu link labelled ``item``."""
    obs = yield click(obs, toggle, ("button",))
    return (yield click(obs, item, ("a", "button"), exact=True))
