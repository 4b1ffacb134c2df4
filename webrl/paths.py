"""Paths that arrive in requests, confined to the artifacts store.

A request (REST body or Celery payload) may name where a checkpoint is written (a trainer job's ``output``,
``actor_output``, ``critic_output``) or which file a browser context loads its login from (a task's
``storage_state``). Each such path is resolved inside ``Settings.artifacts_dir``: a relative path is taken
relative to it, an absolute one must already lie inside it, and symlinks and ``..`` are resolved before the
check. Anything else is an :class:`~webrl.contracts.InvalidRequest` naming the field (REST: a 422; Celery: the
task fails with it), so no request can make a service write, replace, delete or read files elsewhere.

A model folder a request names for a service to load (the ORM's ``orm``, the critic's ``critic``) must lie in
the artifacts store, in one of ``Settings.security.model_dirs``, or be the service's configured model: a request cannot
make a service load (and so execute the pickles or code of) an arbitrary folder, nor probe the file system.
"""

from __future__ import annotations

from pathlib import Path

from webrl.config import Settings
from webrl.contracts import InvalidRequest


class PathOutsideArtifacts(InvalidRequest):
    """A path in a request that resolves outside the artifacts store."""


def artifacts_root(settings: Settings) -> Path:
    """The artifacts store, absolute with symlinks resolved (it need not exist yet)."""
    assert settings.artifacts_dir is not None  # Settings fills it in from home
    return Path(settings.artifacts_dir).expanduser().resolve()


def confined_path(settings: Settings, value: str, field: str) -> Path:
    """``value`` resolved inside the artifacts store (relative paths are relative to it); raises
    :class:`PathOutsideArtifacts` naming ``field`` when it points anywhere else, the store itself included."""
    root = artifacts_root(settings)
    if not value.strip() or "\x00" in value:
        raise PathOutsideArtifacts(field, "must be a path inside the artifacts store")
    try:
        resolved = (root / Path(value).expanduser()).resolve()  # an absolute value replaces root
    except RuntimeError:  # "~name/..." of a user this machine does not know
        raise PathOutsideArtifacts(field, f"{value!r} names the home folder of an unknown user") from None
    if resolved == root or not resolved.is_relative_to(root):
        raise PathOutsideArtifacts(field, f"{value!r} is outside the artifacts store {str(root)!r}; give a path "
                                          "relative to it (WEBRL_ARTIFACTS_DIR)")
    return resolved


def requested_model_folder(settings: Settings, value: str, field: str, configured: str | None = None) -> Path:
    """The model folder a request names in ``field``, checked: inside the artifacts store or one of
    ``settings.security.model_dirs`` (symlinks and ``..`` resolved), or exactly ``configured``, and an existing folder;
    anything else is an :class:`~webrl.contracts.InvalidRequest` naming ``field``."""
    if not value.strip() or "\x00" in value or len(value) > 4096:
        raise InvalidRequest(field, "must be the path of a model folder")
    try:
        resolved = Path(value).expanduser().resolve()
        roots = [artifacts_root(settings), *(Path(d).expanduser().resolve() for d in settings.security.model_dirs)]
        allowed = any(resolved.is_relative_to(root) and resolved != root for root in roots) or (
            configured is not None and resolved == Path(configured).expanduser().resolve())
        if not allowed:
            raise InvalidRequest(field, f"{value!r} is outside the artifacts store and WEBRL_SECURITY__MODEL_DIRS; put "
                                        "the model there or add its folder to WEBRL_SECURITY__MODEL_DIRS")
        if not resolved.is_dir():
            raise InvalidRequest(field, f"no model folder at {value!r}")
    except OSError as error:  # a name too long for the file system, a permission error on the way
        raise InvalidRequest(field, f"not a usable path: {error.strerror or error}") from None
    except RuntimeError:  # "~name/..." of a user this machine does not know
        raise InvalidRequest(field, f"{value!r} names the home folder of an unknown user") from None
    return resolved
