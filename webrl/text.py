"""Text a model generated, made safe to send and store everywhere.

A byte-level tokenizer can sample the token of byte 0, so model output may hold NUL characters. Postgres text
cannot store them, and every webrl service answers a request holding one with a 422 (``webrl.serving.factory``), so a
response fed back as history in the next ``POST /v1/act`` would be refused. Output is therefore cleaned where it
is made (the actor engine) and again where it is stored (``webrl.db.repository``).
"""

from __future__ import annotations

NUL, REPLACEMENT = "\x00", "\ufffd"


def without_nul(text: str | None) -> str | None:
    """``text`` with NUL characters replaced by U+FFFD (None stays None)."""
    return text.replace(NUL, REPLACEMENT) if text else text
