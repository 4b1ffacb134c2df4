"""An observation, parsed: WebRL's simplified HTML read back into its elements with integer ids, its text and
its URL, and the lookups a scripted reader needs (an element by its label, a form field by its placeholder, a
dropdown by one of its options, a pattern in the text).

Each interactive element of the observation carries an integer ``id`` attribute and keeps its text and its
``placeholder``/``title``/``value`` attributes (docs/design.md, Observation). The sandbox's oracle solvers read
pages with it; the trainer's relabelled demonstrations find the names of a page with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from webrl.agent.schemas import Observation

_SPACE = re.compile(r"\s+")
_VOID = {"input", "img", "br", "hr", "meta", "link", "area", "base", "col", "source", "wbr"}
FORM_FIELDS = ("input", "textarea", "select")


class NotOnPage(RuntimeError):
    """The page does not show what was looked for."""


def norm(text: str | None) -> str:
    """The text as labels are compared: lower case, runs of white space as one space, trimmed."""
    return _SPACE.sub(" ", text or "").strip().lower()


@dataclass
class Element:
    """One element of the observation with an integer id."""

    id: str
    tag: str
    attrs: dict[str, str]
    text: str = ""
    options: list[str] = field(default_factory=list)
    path: str = ""
    """Tags from the root down to this element (``html/main/ol/li/a``): items of one list share it."""

    @property
    def label(self) -> str:
        """What a person would read on it: its text, else placeholder, title, value."""
        for value in (self.text, self.attrs.get("placeholder"), self.attrs.get("title"),
                      self.attrs.get("value"), self.attrs.get("data-text")):
            if value and value.strip():
                return _SPACE.sub(" ", value).strip()
        return ""

    @property
    def description(self) -> str:
        """How an ``# Element:`` line names it: a form field by its placeholder or title (a select's text is
        all its options), anything else by its label."""
        if self.tag in FORM_FIELDS:
            for value in (self.attrs.get("placeholder"), self.attrs.get("title")):
                if value and value.strip():
                    return _SPACE.sub(" ", value).strip()
        return self.label

    def names(self) -> list[str]:
        return [norm(v) for v in (self.text, self.attrs.get("placeholder"), self.attrs.get("title"),
                                  self.attrs.get("value"), self.attrs.get("data-text")) if v and v.strip()]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[tuple[str, Element | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        element = None
        if values.get("id", "").strip().isdigit():
            element = Element(values["id"].strip(), tag, values, path="/".join([*(t for t, _ in self.open), tag]))
            self.elements.append(element)
        if tag == "option" and self._innermost("select") is not None:
            self.open.append((tag, Element("", "option", values)))
            return
        if tag not in _VOID:
            self.open.append((tag, element))

    def _innermost(self, tag: str) -> Element | None:
        for t, el in reversed(self.open):
            if t == tag and el is not None:
                return el
        return None

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i][0] == tag:
                closed = self.open[i][1]
                del self.open[i:]
                if tag == "option" and closed is not None:
                    select = self._innermost("select")
                    if select is not None:
                        select.options.append(_SPACE.sub(" ", closed.text).strip())
                return

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for _, el in self.open:
            if el is not None:
                el.text += data


class ObservedPage:
    """An observation, parsed: its elements with ids, its text, its URL."""

    def __init__(self, observation: Observation | str, url: str = "") -> None:
        if isinstance(observation, Observation):
            html, self.url = observation.html, observation.url
        else:
            html, self.url = observation, url
        parser = _Parser()
        parser.feed(html)
        parser.close()
        self.elements = parser.elements
        self.text = _SPACE.sub(" ", " ".join(parser.text)).strip()

    def find(self, label: str, tags: tuple[str, ...] | None = None, exact: bool = False) -> Element:
        """The first element whose text/placeholder/title/value matches ``label``: exact (case-insensitive)
        matches first, then prefix, then substring (unless ``exact``)."""
        want = norm(label)
        candidates = [e for e in self.elements if tags is None or e.tag in tags]
        tiers = [lambda n: n == want] + ([] if exact else [lambda n: n.startswith(want), lambda n: want in n])
        for matches in tiers:
            for element in candidates:
                if any(matches(n) for n in element.names()):
                    return element
        where = f" among <{'|'.join(tags)}>" if tags else ""
        raise NotOnPage(f"no element labelled {label!r}{where} on {self.url or 'the page'}")

    def has(self, label: str, tags: tuple[str, ...] | None = None, exact: bool = False) -> bool:
        try:
            self.find(label, tags, exact)
        except NotOnPage:
            return False
        return True

    def field(self, label: str) -> Element:
        """A form field by placeholder/title (inputs, text areas, selects)."""
        return self.find(label, FORM_FIELDS)

    def select_with_option(self, option: str) -> Element:
        for element in self.elements:
            if element.tag == "select" and any(norm(o) == norm(option) for o in element.options):
                return element
        raise NotOnPage(f"no dropdown offers {option!r} on {self.url or 'the page'}")

    def search_text(self, pattern: str, group: int = 1) -> str:
        """The first regex match in the page text (group ``group``); raises :class:`NotOnPage`."""
        match = re.search(pattern, self.text)
        if match is None:
            raise NotOnPage(f"pattern {pattern!r} not on {self.url or 'the page'}")
        return match.group(group)
