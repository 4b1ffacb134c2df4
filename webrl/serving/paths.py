"""Paths that arrive in requests: where a service may write, and which model folders it may load.

A request (REST body or Celery payload) may name where a checkpoint is written (a trainer job's ``output``,
``actor_output``, ``critic_output``) or which file a browser context loads its login from (a task's
``storage_state``). Each such path is resolved inside ``Settings.artifacts_dir``: a relative path is taken
relative to it, an absolute one must already lie inside it, and symlinks and ``..`` are resolved before the
check. Anything else is an :class:`~webrl.wire.contracts.InvalidRequest` naming the field (REST: a 422; Celery: the
task fails with it), so no request can make a service write, replace, delete or read files elsewhere.

A model folder a request names for a service to load (the ORM's ``orm``, the critic's ``critic``, a trainer job's
``base``, ``actor``, ``critic``, ``critic_base`` and ``reference``, a rollout policy's checkpoint ``path``) must
lie in the artifacts store, in the shipped assets (:data:`SHIPPED_MODELS`), in one of
``Settings.security.model_dirs``, or be a model the service is configured with: a request cannot make a service load
(and so execute the pickles or code of) an arbitrary folder, nor probe the file system (whether ``/root/x``
exists is never told). A folder other than a configured model must hold a model (a ``config.json`` or an adapter's
config, :func:`~webrl.model_folders.is_model_folder`), so that one which holds none (the store itself, a run's
folder) is refused naming the field before any work, not as a 500 from inside transformers; the configured models
are the operator's and are loaded as configured.

Both refuse a path the file system could not hold (longer than :data:`MAX_PATH_BYTES`, or a name longer than
:data:`MAX_NAME_BYTES`) before any work starts, rather than failing when the job writes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from webrl.config import Settings
from webrl.model_folders import is_model_folder
from webrl.wire.contracts import InvalidRequest

#: Linux's PATH_MAX and NAME_MAX (bytes): a longer path or file name would pass the checks and fail in the file
#: system later, when a job writes it.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
#: The models that ship with the package (the SFT actors `make demo`, `webrl eval` and the tests start from).
SHIPPED_MODELS = Path(__file__).parents[1] / "assets"


class PathOutsideArtifacts(InvalidRequest):
    """A path in a request the artifacts store cannot hold: it resolves outside the store, or is no path at all."""


def artifacts_root(settings: Settings) -> Path:
    """The artifacts store, absolute with symlinks resolved (it need not exist yet)."""
    assert settings.artifacts_dir is not None  # Settings fills it in from home
    return Path(settings.artifacts_dir).expanduser().resolve()


def path_problem(value: str) -> str | None:
    """Why ``value`` cannot name a file at all (blank, a NUL byte, not UTF-8, longer than the file system holds),
    or None."""
    if not value.strip() or "\x00" in value:
        return "must be a path (not blank, no NUL byte)"
    try:
        encoded = value.encode()
    except UnicodeEncodeError:  # a lone surrogate: no file system name
        return "must be UTF-8 text"
    if len(encoded) > MAX_PATH_BYTES:
        return f"is {len(encoded)} bytes long; a path holds at most {MAX_PATH_BYTES}"
    longest = max(len(name) for name in encoded.split(b"/"))
    if longest > MAX_NAME_BYTES:
        return f"has a name of {longest} bytes; a file or folder name holds at most {MAX_NAME_BYTES}"
    return None


def _resolved(value: str, field: str, refusal: type[InvalidRequest], base: Path | None = None) -> Path:
    """``value`` made absolute (relative to ``base``, else the working directory) with ``~``, symlinks and ``..``
    resolved; ``refusal`` naming ``field`` when it is no usable path."""
    problem = path_problem(value)
    if problem:
        raise refusal(field, problem)
    try:
        path = Path(value).expanduser()
        return ((base / path) if base is not None else path).resolve()  # an absolute value replaces base
    except RuntimeError:  # "~name/..." of a user this machine does not know
        raise refusal(field, f"{value!r} names the home folder of an unknown user") from None
    except OSError as error:  # a permission error on the way
        raise refusal(field, f"not a usable path: {error.strerror or error}") from None


def confined_path(settings: Settings, value: str, field: str) -> Path:
    """``value`` resolved inside the artifacts store (relative paths are relative to it); raises
    :class:`PathOutsideArtifacts` naming ``field`` when it points anywhere else, the store itself included."""
    root = artifacts_root(settings)
    resolved = _resolved(value, field, PathOutsideArtifacts, base=root)
    if resolved == root or not resolved.is_relative_to(root):
        raise PathOutsideArtifacts(field, f"{value!r} is outside the artifacts store {str(root)!r}; give a path "
                                          "relative to it (WEBRL_ARTIFACTS_DIR)")
    return resolved


def model_roots(settings: Settings) -> list[Path]:
    """The folders a request may name a model folder inside: the artifacts store, the shipped models and
    ``settings.security.model_dirs`` (resolved)."""
    extra = [Path(folder).expanduser().resolve() for folder in settings.security.model_dirs]
    return [artifacts_root(settings), SHIPPED_MODELS.resolve(), *extra]


def requested_model_folder(settings: Settings, value: str, field: str,
                           configured: str | Iterable[str | None] | None = None) -> Path:
    """The model folder a request names in ``field``, checked: exactly one of the ``configured`` models, or inside one
    of :func:`model_roots` (symlinks and ``..`` resolved) and a folder that holds a model
    (:func:`~webrl.model_folders.is_model_folder`); anything else is an :class:`~webrl.wire.contracts.InvalidRequest`
    naming ``field`` (whether a folder elsewhere exists is not told)."""
    return _requested(settings, value, field, configured, folder=True)


def requested_model_file(settings: Settings, value: str, field: str) -> Path:
    """A file a request names in ``field`` for a model to read (a flips probe), checked as
    :func:`requested_model_folder` checks a folder: inside one of :func:`model_roots`, and an existing file."""
    return _requested(settings, value, field, None, folder=False)


def is_configured_model(folder: Path, configured: str | Iterable[str | None] | None) -> bool:
    """Whether the resolved ``folder`` is exactly one of the ``configured`` models (the operator's settings)."""
    wanted = [configured] if isinstance(configured, str) else [c for c in configured or () if c]
    return any(folder == Path(model).expanduser().resolve() for model in wanted)


def _requested(settings: Settings, value: str, field: str, configured: str | Iterable[str | None] | None,
               folder: bool) -> Path:
    resolved = _resolved(value, field, InvalidRequest)
    try:
        operators = is_configured_model(resolved, configured)
        allowed = operators or any(resolved.is_relative_to(root) and resolved != root for root in model_roots(settings))
        if not allowed:
            raise InvalidRequest(field, f"{value!r} is outside the artifacts store and WEBRL_SECURITY__MODEL_DIRS; put "
                                        "the model there or add its folder to WEBRL_SECURITY__MODEL_DIRS")
        if folder and not resolved.is_dir():
            raise InvalidRequest(field, f"no model folder at {value!r}")
        if folder and not operators and not is_model_folder(resolved):
            raise InvalidRequest(field, f"{value!r} is not a model folder (no config.json or adapter_config.json)")
        if not folder and not resolved.is_file():
            raise InvalidRequest(field, f"no file at {value!r}")
    except OSError as error:  # a permission error on the way
        raise InvalidRequest(field, f"not a usable path: {error.strerror or error}") from None
    except RuntimeError:  # a model_dirs entry "~name/..." of a user this machine does not know
        raise InvalidRequest(field, "WEBRL_SECURITY__MODEL_DIRS names the home folder of an unknown user") from None
    return resolved
