"""The viewer's Jinja2 environment: autoescaping on for every template (observations are untrusted web pages),
and the few formatting filters the pages share."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from webrl.viewer.render import observation_markup

TEMPLATES = Path(__file__).with_name("templates")


def pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return str(value)


def seconds(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def templates() -> Jinja2Templates:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pct=pct, num=num, seconds=seconds, observation=observation_markup)
    return Jinja2Templates(env=env)
