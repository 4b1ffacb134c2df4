"""A task's login file (WebArena's ``storage_state``, e.g. ``./.auth/shopping_state.json``), read and checked
once before any browser is used.

The file is Playwright's ``BrowserContext.storage_state()`` JSON: cookies, and per origin its localStorage. It
comes from the artifacts store (:func:`webrl.serving.paths.confined_path`), where anyone who can write a file can put
one, so it is parsed here into typed records: malformed JSON, a JSON list, or a cookie whose ``expires`` is
``"soon"`` is a :class:`StorageStateInvalid` naming what is wrong (REST: a 422 naming ``task.storage_state``),
not a Playwright error halfway through a reset. Playwright then gets the checked records, not the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MAX_STATE_BYTES = 8 * 2**20  # a login file holds a few cookies; a bigger one is not read into every reset


class StorageStateInvalid(ValueError):
    """A login file that cannot be read, or is not Playwright's storage-state shape; the message says why."""


class _Record(BaseModel):
    """Playwright's own names (camelCase); fields it does not know are dropped, not sent on."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class Cookie(_Record):
    """One cookie as ``BrowserContext.add_cookies`` takes it: ``url``, or ``domain`` and ``path``."""

    name: str
    value: str
    url: str | None = None
    domain: str | None = None
    path: str | None = None
    expires: float | None = Field(None, description="Unix time in seconds; -1: a session cookie.")
    httpOnly: bool | None = None
    secure: bool | None = None
    sameSite: Literal["Strict", "Lax", "None"] | None = None

    @model_validator(mode="after")
    def _where(self) -> Self:
        if self.url is None and not (self.domain and self.path):
            raise ValueError("a cookie needs url, or domain and path")
        return self


class LocalStorageItem(_Record):
    name: str
    value: str


class OriginState(_Record):
    origin: str
    localStorage: list[LocalStorageItem] = Field(default_factory=list)


class StorageState(_Record):
    """What a login file holds."""

    cookies: list[Cookie] = Field(default_factory=list)
    origins: list[OriginState] = Field(default_factory=list)

    @property
    def sets_local_storage(self) -> bool:
        """Whether it needs a context made with it (a stock context takes cookies afterwards, not localStorage)."""
        return any(origin.localStorage for origin in self.origins)

    def cookie_dicts(self) -> list[dict[str, Any]]:
        """The cookies as ``add_cookies`` takes them."""
        return [cookie.model_dump(exclude_none=True) for cookie in self.cookies]

    def playwright(self) -> dict[str, Any]:
        """The whole state as ``new_context(storage_state=...)`` takes it."""
        return self.model_dump(exclude_none=True)


def read_storage_state(path: Path) -> StorageState:
    """The login file at ``path``, checked; :class:`StorageStateInvalid` saying what is wrong with it."""
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise StorageStateInvalid(f"the file is over {MAX_STATE_BYTES} bytes")
        return StorageState.model_validate_json(path.read_bytes())
    except OSError as error:
        raise StorageStateInvalid(f"cannot read the file: {error.strerror or error}") from None
    except ValidationError as error:
        raise StorageStateInvalid(f"not a Playwright storage state: {_first_problem(error)}") from None


def _first_problem(error: ValidationError) -> str:
    """The first error as ``where: what`` (``cookies.0.expires: Input should be a valid number``)."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
