"""The registry of sandbox sites.

A site is a package ``webrl.sandbox.sites.<site>`` with:

- ``app.py``: ``create_app(ctx: SiteContext) -> FastAPI`` (see :mod:`webrl.sandbox.site`);
- ``templates/*.html``: its Jinja2 templates, a ``base.html`` layout among them;
- ``seed.py``: ``build(db_path: Path, seed: int) -> None`` writing its template database deterministically
  (only for the site that owns the database; ``shopping_admin`` uses ``shopping``'s ``shop`` database);
- ``templates_tasks.py`` (optional): ``TEMPLATES: list[Template]``, its task templates.

``SITES`` lists the sites whose package is present, in a fixed order. A site is picked up as soon as its
``app.py`` exists, so sites can be added without touching this file beyond :data:`_CANDIDATES`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

_PACKAGE = __name__


@dataclass(frozen=True)
class SiteSpec:
    """One site: its name (a WebArena site key), its database and the package that seeds that database."""

    name: str
    db: str
    seed_site: str

    @property
    def package(self) -> str:
        return f"{_PACKAGE}.{self.name}"

    @property
    def templates_dir(self) -> Path:
        return Path(__file__).parent / self.name / "templates"

    def app_module(self) -> ModuleType:
        return importlib.import_module(f"{self.package}.app")

    def builder(self) -> Any:
        """``seed.build`` of the package that owns this site's database."""
        return importlib.import_module(f"{_PACKAGE}.{self.seed_site}.seed").build

    def task_templates(self) -> list[Any]:
        """The site's task templates (``templates_tasks.TEMPLATES``), or [] when it has none."""
        name = f"{self.package}.templates_tasks"
        if importlib.util.find_spec(name) is None:
            return []
        return list(importlib.import_module(name).TEMPLATES)


#: Every site webrl knows how to serve, in order. (name, database, site whose seed.py builds the database)
_CANDIDATES: list[SiteSpec] = [
    SiteSpec("shopping", "shop", "shopping"),
    SiteSpec("shopping_admin", "shop", "shopping"),
    SiteSpec("reddit", "reddit", "reddit"),
    SiteSpec("gitlab", "gitlab", "gitlab"),
]


def _present(spec: SiteSpec) -> bool:
    try:
        return importlib.util.find_spec(f"{spec.package}.app") is not None and (
            importlib.util.find_spec(f"{_PACKAGE}.{spec.seed_site}.seed") is not None
        )
    except ModuleNotFoundError:
        return False


SITES: dict[str, SiteSpec] = {spec.name: spec for spec in _CANDIDATES if _present(spec)}


def builders() -> dict[str, Any]:
    """Database name -> ``seed.build`` for every present site."""
    return {spec.db: spec.builder() for spec in SITES.values()}
