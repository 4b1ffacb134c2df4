"""Dates as a person types them, turned into the value an ``<input type="date">`` (or month, time,
datetime-local, week) accepts. Chromium's date inputs take only the ISO form; filling "02/04/2012" into one
leaves it empty without an error, so act.py converts first and reports a format it cannot read.

Ambiguous numeric dates read month first (02/04/2012 is February 4), as the US sites of WebArena write them;
dotted dates read day first (04.02.2012), as European sites write them.
"""

from __future__ import annotations

from datetime import datetime

DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%m/%d/%y", "%m-%d-%Y", "%d.%m.%Y", "%b %d, %Y", "%B %d, %Y",
                "%b %d %Y", "%B %d %Y", "%d %b %Y", "%d %B %Y", "%Y%m%d")
TIME_FORMATS = ("%H:%M", "%H:%M:%S", "%I:%M %p", "%I:%M%p", "%I %p", "%I%p", "%I:%M:%S %p")
MONTH_FORMATS = ("%Y-%m", "%m/%Y", "%m-%Y", "%b %Y", "%B %Y", "%Y/%m")

#: The forms the error message names for each input type (the first is what the field stores).
EXPECTED = {
    "date": "YYYY-MM-DD (e.g. 2012-02-04) or MM/DD/YYYY",
    "month": "YYYY-MM (e.g. 2012-02) or a month name and year (February 2012)",
    "time": "HH:MM (e.g. 15:30) or H:MM AM/PM",
    "datetime-local": "YYYY-MM-DD HH:MM (e.g. 2012-02-04 15:30) or MM/DD/YYYY H:MM AM/PM",
    "week": "YYYY-Www (e.g. 2012-W05) or a date in that week",
}
DATE_INPUT_TYPES = frozenset(EXPECTED)


class DateFormatError(ValueError):
    """Text that is not a date (time, month, week) in any form this module reads."""


def _parse(text: str, formats: tuple[str, ...]) -> datetime | None:
    cleaned = " ".join(text.split())
    for fmt in formats:
        try:
            return datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
    return None


def _datetime_formats() -> tuple[str, ...]:
    return tuple(f"{d}{sep}{t}" for d in DATE_FORMATS for sep in (" ", "T", ", ") for t in TIME_FORMATS)


def _format_time(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")


def _week(text: str) -> str | None:
    iso = text.strip().upper()
    try:
        return datetime.strptime(iso + "-1", "%G-W%V-%u").strftime("%G-W%V")
    except ValueError:
        day = _parse(text, DATE_FORMATS)
        return day.strftime("%G-W%V") if day else None


def input_value(input_type: str, text: str) -> str:
    """The value an ``<input type=input_type>`` stores for ``text``; raises DateFormatError naming the
    forms it reads. ``input_type`` is one of DATE_INPUT_TYPES."""
    value: str | None = None
    if input_type == "date":
        day = _parse(text, DATE_FORMATS)
        value = day.strftime("%Y-%m-%d") if day else None
    elif input_type == "month":
        month = _parse(text, MONTH_FORMATS) or _parse(text, DATE_FORMATS)
        value = month.strftime("%Y-%m") if month else None
    elif input_type == "time":
        moment = _parse(text, TIME_FORMATS)
        value = _format_time(moment) if moment else None
    elif input_type == "datetime-local":
        moment = _parse(text, _datetime_formats()) or _parse(text, DATE_FORMATS)
        value = f"{moment:%Y-%m-%d}T{_format_time(moment)}" if moment else None
    elif input_type == "week":
        value = _week(text)
    if value is None:
        raise DateFormatError(f"could not read {text!r} as a {input_type}; type it as {EXPECTED[input_type]}")
    return value
