"""Untrusted page content as safe, readable markup: every piece of an observation is escaped (the viewer
never renders a page's HTML), its tags are marked for colouring and the element the action acted on is
highlighted."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_TAG = re.compile(r"(<[^<>]*>)")
#: Opening tags that start a new line in the shown observation (WebRL's simplified HTML is one long line).
_BLOCK = re.compile(r"<(li|div|p|h[1-6]|ul|ol|table|tr|form|header|nav|main|section|article|footer|aside|option)\b",
                    re.IGNORECASE)


def observation_markup(html: str, element: str | None, anchor: str) -> Markup:
    """``html`` as escaped text with its tags in ``<span class="tag">``; the opening tag whose ``id`` is
    ``element`` in ``<mark class="acted" id="{anchor}">``."""
    acted = re.compile(rf"""\bid=["']?{re.escape(element)}["'\s/>]""") if element is not None else None
    parts = []
    marked = False
    for piece in _TAG.split(html):
        if not piece:
            continue
        if _BLOCK.match(piece) and parts:
            if not str(parts[-1]).strip():  # the space between two tags becomes the line break
                parts.pop()
            parts.append(Markup("\n"))
        if not piece.startswith("<"):
            parts.append(escape(piece))
        elif acted is not None and not marked and not piece.startswith("</") and acted.search(piece + " "):
            parts.append(Markup('<mark class="acted" id="{}">{}</mark>').format(anchor, piece))
            marked = True
        else:
            parts.append(Markup('<span class="tag">{}</span>').format(piece))
    return Markup("").join(parts)
