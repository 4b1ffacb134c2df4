"""docker-compose.yml without Docker: interpolation, loading, and the same services as local processes.

- :func:`interpolate` applies compose's variable syntax (``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-d}``,
  ``${VAR-d}``, ``${VAR:?e}``, ``${VAR?e}``, ``${VAR:+a}``, ``${VAR+a}``) to the file's text before YAML
  parsing (compose applies it to parsed values and then casts by its schema; on text the casts come free,
  which is why docker-compose.yml quotes every interpolated environment value).
- :func:`load` reads the file with the variables of ``.env.example`` plus an API key and a Redis password (or any
  mapping) and resolves YAML anchors and merge keys, giving the project as compose sees it.
- :func:`local_processes` turns the default-profile services into local commands and environments, exactly
  compose's, with compose's DNS names and ports rewritten to 127.0.0.1 and free ports, and the databases
  replaced by the caller's (and the sandbox sites moved by ``--port-offset``); tests/deploy/test_deploy_stack.py
  starts them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
#: The example a user copies to each file docker-compose.yml names as an ``env_file`` (what reaches the containers).
ENV_FILE_EXAMPLES = {"webrl.env": ROOT / "docker" / "webrl.env.example", ".env": ENV_EXAMPLE}

_VAR = re.compile(r"\$(?:(\$)|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|-|:\?|\?|:\+|\+)(?P<arg>.*))?$", re.S)


class InterpolationError(ValueError):
    """A ``${VAR:?message}`` whose variable is unset, or a malformed ``${...}``."""


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a .env file (comments and blank lines skipped)."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            env[key.strip()] = value.strip().strip("'\"")
    return env


def documented_variables(path: Path) -> set[str]:
    """Names an example env file sets or shows commented out (``# NAME=value``)."""
    return set(read_env_file(path)) | set(re.findall(r"^#\s*([A-Z][A-Z0-9_]*)=", path.read_text(), re.M))


def _substitute(match: re.Match[str], env: dict[str, str]) -> str:
    if match.group(1):
        return "$"
    if match.group("bare"):
        return env.get(match.group("bare"), "")
    spec = _BRACED.match(match.group("braced"))
    if spec is None:
        raise InterpolationError(f"invalid interpolation ${{{match.group('braced')}}}")
    name, op, arg = spec.group("name"), spec.group("op"), spec.group("arg") or ""
    value = env.get(name)
    present, non_empty = value is not None, bool(value)
    if op is None:
        return value or ""
    if op in (":-", "-"):
        return value if (non_empty if op == ":-" else present) else arg  # type: ignore[return-value]
    if op in (":?", "?"):
        if not (non_empty if op == ":?" else present):
            raise InterpolationError(f"required variable {name} is missing: {arg}")
        return value  # type: ignore[return-value]
    return arg if (non_empty if op == ":+" else present) else ""


def interpolate(text: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: _substitute(m, env), text)


def variables_used(text: str) -> set[str]:
    """Names of the variables ``${...}`` / ``$VAR`` the text interpolates (``$$`` escapes excluded)."""
    names = set()
    for match in _VAR.finditer(text):
        if match.group("bare"):
            names.add(match.group("bare"))
        elif match.group("braced") is not None:
            spec = _BRACED.match(match.group("braced"))
            if spec:
                names.add(spec.group("name"))
    return names


#: The API key and Redis password the tests put in .env (compose refuses to start without them; .env.example
#: leaves them empty).
TEST_API_KEY = "compose-test-api-key"
TEST_REDIS_PASSWORD = "compose-test-redis-password"


def example_env() -> dict[str, str]:
    """What a user's .env holds: .env.example's values with the required API key and Redis password filled in."""
    return {**read_env_file(ENV_EXAMPLE), "WEBRL_SECURITY__API_KEY": TEST_API_KEY,
            "REDIS_PASSWORD": TEST_REDIS_PASSWORD}


def load(env: dict[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose project as a dict, interpolated with ``env`` (default: :func:`example_env`)."""
    env = example_env() if env is None else env
    return yaml.safe_load(interpolate(path.read_text(), env))


def environment_of(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as a dict of strings (map or ``KEY=VALUE`` list form)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.partition("=")[::2] for item in raw)
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def host_ports(service: dict[str, Any]) -> list[int]:
    """Host ports a service publishes (``[IP:]HOST:CONTAINER`` short syntax or the long syntax)."""
    ports = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.append(int(entry.get("published", entry["target"])))
        else:
            parts = str(entry).split(":")
            ports.append(int(parts[-2] if len(parts) >= 2 else parts[-1]))
    return ports


def published(service: dict[str, Any]) -> list[tuple[str | None, int]]:
    """``(host address, host port)`` of each port a service publishes; None: every address (no address given)."""
    out = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            out.append((entry.get("host_ip"), int(entry.get("published", entry["target"]))))
            continue
        parts = str(entry).rsplit(":", 2)
        address = parts[0].strip("[]") if len(parts) == 3 else None
        out.append((address or None, int(parts[-2] if len(parts) >= 2 else parts[-1])))
    return out


def env_file_variables(service: dict[str, Any]) -> set[str]:
    """Names a service's ``env_file`` entries pass into its container, read from each file's example."""
    entries = service.get("env_file") or []
    names: set[str] = set()
    for entry in [entries] if isinstance(entries, str) else entries:
        path = entry if isinstance(entry, str) else entry["path"]
        assert path in ENV_FILE_EXAMPLES, f"env_file {path} has no example to read its variables from"
        names |= documented_variables(ENV_FILE_EXAMPLES[path])
    return names


def container_port_of(command: list[str]) -> int | None:
    """The port a uvicorn command listens on (``--port N``)."""
    return int(command[command.index("--port") + 1]) if "--port" in command else None


# ------------------------------------------------------------------ the stack as local processes


@dataclass
class LocalProcess:
    name: str
    command: list[str]
    env: dict[str, str]
    port: int | None = None  # the local port of an API
    depends_on: list[str] = field(default_factory=list)


@dataclass
class LocalPlan:
    """What to run locally: one-shot jobs first (in order), then the long-running processes."""

    jobs: list[LocalProcess]
    processes: list[LocalProcess]
    ports: dict[tuple[str, int], int]  # (compose service, container port) -> local port


def _rewrite_url(value: str, ports: dict[tuple[str, int], int]) -> str:
    parts = urlsplit(value)
    if parts.hostname and parts.port and (parts.hostname, parts.port) in ports:
        local = ports[(parts.hostname, parts.port)]
        return value.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{local}", 1)
    return value


def _is_sites(command: list[str]) -> bool:
    return command[:3] == ["webrl", "sites", "serve"]


def local_processes(project: dict[str, Any], *, database_url: str, broker_url: str, home: Path,
                    free_port: Callable[[], int], free_offset: Callable[[list[int]], int],
                    replaced: frozenset[str] = frozenset({"postgres", "redis"})) -> LocalPlan:
    """Default-profile services of ``project`` as local processes.

    ``replaced`` services (the databases) are not started: ``WEBRL_DATABASE__URL`` and ``WEBRL_JOBS__BROKER_URL``
    point at the caller's. Every ``host:port`` of a compose service that appears in an environment value
    or a ``--port`` becomes ``127.0.0.1:<free_port()>``; the sandbox sites' ports move by one free offset
    (``free_offset``), and ``webrl sites serve`` listens where its rewritten ``WEBRL_SITES__<SITE>_URL`` values say.
    Container paths under ``/var/lib/webrl`` move under ``home``; ``0.0.0.0``
    binds become ``127.0.0.1``. Commands are otherwise compose's, unchanged.
    """
    from webrl.config import SANDBOX_PORTS

    services = {name: svc for name, svc in project["services"].items() if not svc.get("profiles")}
    ports: dict[tuple[str, int], int] = {}
    offsets = {name: free_offset(list(SANDBOX_PORTS.values())) for name, svc in services.items()
               if _is_sites([str(p) for p in svc.get("command") or []])}
    for name, offset in offsets.items():
        ports.update({(name, port): port + offset for port in SANDBOX_PORTS.values()})
    for name, svc in services.items():
        for key, value in environment_of(svc).items():
            parts = urlsplit(value) if "://" in value else None
            target = (parts.hostname, parts.port) if parts else None
            if target and target[0] in services and target[1] and key != "WEBRL_DATABASE__URL" and target not in ports:
                ports[target] = free_port()
        port = container_port_of(list(svc.get("command") or []))
        if port is not None and (name, port) not in ports:
            ports[(name, port)] = free_port()
    jobs, processes = [], []
    for name, svc in services.items():
        if name in replaced:
            continue
        command = [str(part) for part in svc["command"]]
        port = container_port_of(command)
        if port is not None:
            command[command.index("--port") + 1] = str(ports[(name, port)])
        command = ["127.0.0.1" if part == "0.0.0.0" else part for part in command]
        env = {}
        for key, value in environment_of(svc).items():
            if key == "WEBRL_DATABASE__URL":
                value = database_url
            elif key == "WEBRL_JOBS__BROKER_URL":
                value = broker_url
            elif value.startswith("/var/lib/webrl"):
                value = str(home) + value.removeprefix("/var/lib/webrl")
            elif value == "0.0.0.0":
                value = "127.0.0.1"
            else:
                value = _rewrite_url(value, ports)
            env[key] = value
        depends = [d for d in (svc.get("depends_on") or {}) if d in services and d not in replaced]
        item = LocalProcess(name, command, env, ports.get((name, port)) if port else None, depends)
        (jobs if svc.get("restart") == "no" else processes).append(item)
    return LocalPlan(jobs=jobs, processes=processes, ports=ports)
