"""Settings: the one place webrl reads its environment (prefix ``WEBRL_``).

Every other module receives a :class:`Settings` (usually through :func:`get_settings`) and never touches
``os.environ``. Values are validated once, at load. Settings are deployment facts (where things are, how they
are served); the method's knobs (thresholds, bands, beta, learning rates) are :mod:`webrl.method.hyperparams`.

Settings come in groups (``settings.actor.backend``, ``settings.browser.pool_size``), each field set in the
environment as ``WEBRL_<GROUP>__<FIELD>`` (``WEBRL_ACTOR__BACKEND``); the few global ones are top-level
(``WEBRL_HOME``). The flat names of before the groups (``WEBRL_ACTOR_BACKEND``) are refused with their new name
(:func:`renamed_variables`), not silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from webrl.errors import UserError

#: WebArena's site placeholders, in the order WebArena's configs use them.
SITE_PLACEHOLDERS: dict[str, str] = {
    "shopping": "__SHOPPING__",
    "shopping_admin": "__SHOPPING_ADMIN__",
    "reddit": "__REDDIT__",
    "gitlab": "__GITLAB__",
    "map": "__MAP__",
    "wikipedia": "__WIKIPEDIA__",
}

#: The sites the built-in sandbox serves (``webrl.sandbox.sites``); map and wikipedia have no sandbox site.
SANDBOX_SITES = ("shopping", "shopping_admin", "reddit", "gitlab")

#: Ports of the built-in sandbox sites (``webrl sites serve``); one port per site.
SANDBOX_PORTS: dict[str, int] = {
    "shopping": 7770,
    "shopping_admin": 7780,
    "reddit": 9999,
    "gitlab": 8023,
    "map": 3000,
    "wikipedia": 8888,
}


#: The services others reach over HTTP (by folder in services/) and the setting holding each one's base URL.
SERVICE_URL_SETTINGS: dict[str, tuple[str, str]] = {"actor": ("actor", "url"), "browser_pool": ("browser", "pool_url")}

#: Default gap between the longest job and Redis' visibility timeout (a slow ack after a long job).
VISIBILITY_MARGIN_S = 600.0


#: Environment: ``WEBRL_`` + the top-level field, or + the group, this delimiter and the group's field.
ENV_PREFIX = "WEBRL_"
NESTED_DELIMITER = "__"


class RenamedSetting(UserError):
    """The environment still sets a setting by its flat name of before the groups."""


def _split_list(value: object) -> object:
    """A comma-separated string as its items (blank ones dropped); anything else unchanged."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return value
        return [h.strip() for h in text.split(",") if h.strip()]
    return value


class Group(BaseModel):
    """A group of settings: ``settings.<group>.<field>``, ``WEBRL_<GROUP>__<FIELD>`` in the environment. An
    unknown field is an error (a misspelt ``WEBRL_ACTOR__BAKEND`` is refused, not ignored)."""

    model_config = ConfigDict(extra="forbid")

    #: Before the groups every setting was top-level: a field's flat name was this prefix and its name ...
    flat_prefix: ClassVar[str] = ""
    #: ... or, for the fields named here, this name (field -> flat name). :func:`renamed_variables` reads both.
    flat_names: ClassVar[dict[str, str]] = {}

    @classmethod
    def flat_name(cls, field: str) -> str:
        """The field's top-level name before the groups (``backend`` of the actor: ``actor_backend``)."""
        return cls.flat_names.get(field, cls.flat_prefix + field)


class DatabaseSettings(Group):
    """The SQL database (webrl/db)."""

    flat_prefix = "database_"

    url: str | None = Field(
        None, description="SQLAlchemy URL. Default: SQLite at <home>/webrl.db. Postgres: postgresql+psycopg://..."
    )

    @field_validator("url")
    @classmethod
    def _a_database_url(cls, url: str | None) -> str | None:
        """Refused at load, in words that never quote the URL (it carries the password), rather than by SQLAlchemy
        at the first connection with a traceback."""
        problem = database_url_problem(url) if url is not None else None
        if problem:
            raise ValueError(f"{problem} (expected dialect+driver://user:password@host:port/database, e.g. "
                             "postgresql+psycopg://webrl:...@127.0.0.1:5432/webrl or sqlite:///path/webrl.db)")
        return url


def database_url_problem(url: str) -> str | None:
    """What is wrong with a SQLAlchemy URL (unparsable, a port that is no number, an unknown dialect or driver),
    or None. Never quotes the URL: a password misplaced by a typo (a missing ``@``) would land in any part."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return "not a database URL"
    except ValueError:  # int() of the port
        return "its port is not a number"
    try:
        parsed.get_dialect()
    except NoSuchModuleError:
        return "unknown database dialect or driver"
    return None


class JobsSettings(Group):
    """Jobs (webrl/wire/queue.py): the Celery broker, how long one job may run and when Redis gives up on its worker;
    and the Redis that carries checkpoint events."""

    flat_names = {"time_limit_s": "job_time_limit_s", "visibility_timeout_s": "broker_visibility_timeout_s"}

    broker_url: str | None = Field(
        None, description="Celery broker (redis://...). None runs every job eagerly in the calling process."
    )
    result_backend: str | None = Field(None, description="Celery result backend; defaults to the broker URL.")
    redis_url: str | None = Field(
        None, description="Redis for checkpoint events (channel webrl:checkpoints); defaults to a redis broker."
    )
    time_limit_s: float = Field(
        6 * 3600.0, gt=0, description="Hard limit of one Celery job: the worker process running it is killed "
        "(the soft limit, 95% of it, raises in the job first). Size it to the longest job, a training phase.")
    visibility_timeout_s: float | None = Field(
        None, gt=0, description="Seconds Redis waits for a job's acknowledgement before giving it to another "
        "worker (its worker was killed whole). Must exceed time_limit_s, else a job still running is handed "
        "out twice. Default: time_limit_s + 10 minutes.")
    dispatch_timeout_s: float | None = Field(
        None, gt=0, description="How long `dispatch` waits for a job's result before raising. Default: "
        "visibility_timeout_s + time_limit_s (a killed worker's job handed out again and run again).")

    @model_validator(mode="after")
    def _defaults(self) -> JobsSettings:
        if self.result_backend is None and self.broker_url:
            self.result_backend = self.broker_url
        if self.redis_url is None and self.broker_url and self.broker_url.startswith("redis"):
            self.redis_url = self.broker_url
        if self.visibility_timeout_s is None:
            self.visibility_timeout_s = self.time_limit_s + VISIBILITY_MARGIN_S
        if self.visibility_timeout_s <= self.time_limit_s:
            raise ValueError(f"visibility_timeout_s ({self.visibility_timeout_s:g}) must exceed time_limit_s "
                             f"({self.time_limit_s:g}): a running job would be handed out twice")
        if self.dispatch_timeout_s is None:
            self.dispatch_timeout_s = self.visibility_timeout_s + self.time_limit_s
        return self


class SitesSettings(Group):
    """Sites: where the WebArena placeholders resolve. Default: the built-in sandbox on localhost."""

    sandbox_host: str = Field("127.0.0.1", description="Host the sandbox sites listen on.")
    shopping_url: str | None = None
    shopping_admin_url: str | None = None
    reddit_url: str | None = None
    gitlab_url: str | None = None
    map_url: str | None = None
    wikipedia_url: str | None = None
    homepage_url: str | None = None


class SecuritySettings(Group):
    """Who may call the services, and what a request may make them reach or load."""

    api_key: str | None = Field(None, description="When set, every route but health and metrics wants Bearer.")
    allow_no_auth: bool = Field(False, description="Serve without api_key on a non-loopback address (refused "
                                "otherwise: `webrl serve` will not start, a service answers only loopback).")
    allowed_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Base URLs a request may name as a model endpoint (a rollout policy's url, taskgen's llm "
                    "endpoint), besides the configured actor.url, actor.endpoint, orm.endpoint and "
                    "llm_judge.endpoint. Comma-separated; compared by scheme, host and port.",
    )
    model_dirs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Folders, besides the artifacts store and the shipped models (webrl/assets), a request may "
                    "name a model folder in (the ORM's `orm`, the critic's `critic`, a trainer job's base, actor, "
                    "critic, critic_base and reference, a rollout policy's checkpoint path, actor.act's model); the "
                    "configured models (actor.model, critic.model, orm.model) are always allowed. Comma-separated.",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts (host:port, or host for any port) a browser may reach. Empty: the hosts of the "
                    "configured site URLs and of the sandbox sites that are served.",
    )

    @field_validator("allowed_hosts", "allowed_endpoints", "model_dirs", mode="before")
    @classmethod
    def _split_lists(cls, value: object) -> object:
        return _split_list(value)


class LimitsSettings(Group):
    """Bounded work: what one request may ask of a service."""

    max_request_bytes: int = Field(8 * 2**20, ge=1024, description="Largest request body a route takes (413 over "
                                   "it), except the routes that carry batches of pages.")
    max_batch_request_bytes: int = Field(
        64 * 2**20, ge=1024, description="Largest body of the routes that carry batches of pages or prompts "
        "(/v1/act, /v1/completions, /v1/logprobs, /v1/orm/score, /v1/critic/value).")
    model_request_timeout_s: float = Field(
        600.0, gt=0, description="How long one request's model work (generation, scoring, values) may take before "
        "the request answers 504; also how long it waits for a model busy with other requests.")


class ModelsSettings(Group):
    """Models: loading local models, and the tiny CPU model `webrl bootstrap` builds."""

    device: str = Field("cpu", description="torch device for local models.")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    trust_remote_code: bool = Field(False, description="Let a model folder run its own code (older GLM-4).")
    torch_threads: int | None = Field(
        None, ge=1, description="Intra-op CPU threads for local models (None: torch's default). 1 avoids OpenMP "
                                "stalls on a shared, oversubscribed CPU.")
    tiny_size: Literal["test", "small", "base", "large"] = Field(
        "small", description="Size preset of the tiny Llama `webrl bootstrap` builds (webrl.models.tiny.SIZES).")
    tiny_vocab_size: int = Field(4096, ge=512, description="BPE vocabulary of the tiny model's tokenizer.")
    bootstrap_minutes: float = Field(10.0, gt=0, description="Budget of `webrl bootstrap`; its SFT gets half.")


class ActorSettings(Group):
    """The actor: its model and how it is served, and the actor service rollouts go through."""

    flat_prefix = "actor_"
    flat_names = {"rollout_policy": "rollout_policy"}

    backend: Literal["local", "openai", "tgi"] = "local"
    endpoint: str | None = Field(None, description="Base URL of a vLLM/SGLang/TGI server or actor service.")
    model: str | None = Field(None, description="Model path (local) or served model name (openai).")
    api_key: str | None = Field(None, description="Bearer key sent to an OpenAI/TGI/actor endpoint.")
    max_prompt_tokens: int = Field(1024, ge=64, description="Context budget of the actor prompt.")
    max_new_tokens: int = Field(64, ge=1, description="Most tokens the actor generates per step (the longest "
                                "sandbox demonstration, an `# Element:` line plus a Type action, is 60).")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0 = greedy.")
    max_batch: int = Field(16, ge=1, description="Most prompts the local backend batches together.")
    batch_wait_ms: float = Field(5.0, ge=0.0, description="How long the local batcher waits for company.")
    kept_prompts: int | None = Field(
        None, ge=0, description="Whole prompts the local backend keeps cached so that a later prompt (an episode's "
        "next step) computes only what it does not share with one; None: twice max_batch, 0: none kept.")
    url: str = Field(
        "http://127.0.0.1:8102", description="Base URL of the actor service. A rollout policy {kind: endpoint} may "
        "name it (it is on endpoint_allow_list), and only there does the endpoint policy send the bearer key "
        "(actor.api_key, else security.api_key).")
    rollout_policy: Literal["endpoint", "checkpoint"] | None = Field(
        None, description="How `webrl train` rolls its actor out. endpoint: every step asks the actor service at "
        "actor.url, which hot-reloads each published actor (the pipeline waits until it serves the phase's); "
        "checkpoint: each rollout worker loads the actor folder itself. None: endpoint in the distributed mode, "
        "checkpoint in the embedded one.")
    reload_timeout_s: float = Field(
        600.0, gt=0, description="How long the pipeline waits for the actor service to serve the checkpoint a "
        "rollout needs (hot reload) before it stops with an error.")


class LlmJudgeSettings(Group):
    """The LLM judge of WebArena's fuzzy_match evaluator: an OpenAI-compatible endpoint."""

    flat_prefix = "llm_judge_"

    endpoint: str | None = Field(None, description="OpenAI-compatible endpoint for fuzzy_match.")
    model: str | None = None
    api_key: str | None = Field(None, description="Bearer key sent to the llm_judge endpoint.")
    timeout_s: float = Field(60.0, gt=0, description="Timeout of one LLM-judge request.")


class EvaluationSettings(Group):
    """Evaluation: WebArena's program_html evaluator."""

    flat_prefix = "evaluation_"

    settle_s: float = Field(
        0.0, ge=0.0, description="Extra wait after program_html navigates (WebArena sleeps 3 s for its JS sites)."
    )
    nav_timeout_s: float = Field(30.0, gt=0, description="Timeout of one program_html navigation.")


class OrmSettings(Group):
    """The ORM: the outcome reward model and its service."""

    flat_prefix = "orm_"

    backend: Literal["local", "openai"] = Field("local", description="ORM inference: transformers or an "
                                                "OpenAI-compatible server's YES/NO log-probs.")
    model: str | None = Field(None, description="ORM folder (local) or served model name (openai).")
    endpoint: str | None = Field(None, description="Base URL (…/v1) of the OpenAI-compatible ORM server.")
    api_key: str | None = Field(None, description="Bearer key sent to orm.endpoint.")
    max_prompt_tokens: int = Field(16384, ge=64, description="ORM prompt budget; only the observation is "
                                   "cut (WebRL: cutoff_len 16384). The model's own limit also applies.")
    batch_size: int = Field(8, ge=1, description="Prompts per ORM forward pass (local backend).")
    layout: Literal["auto", "llama3", "chat_template"] = Field(
        "auto", description="ORM prompt rendering: WebRL's exact Llama-3 string, the chat template, or auto.")


class CriticSettings(Group):
    """The critic: the value model and its service."""

    flat_prefix = "critic_"

    model: str | None = Field(None, description="Critic folder served by the critic service.")
    batch_size: int = Field(8, ge=1, description="States per critic forward pass.")
    max_prompt_tokens: int = Field(1024, ge=64, description="Context budget of the critic's input.")


class TrainerSettings(Group):
    """The trainer: how training jobs run."""

    flat_prefix = "trainer_"
    flat_names = {"threads": "train_threads"}

    accelerate_config: Path | None = Field(
        None, description="Accelerate config file; when set, training jobs run under `accelerate launch` with it "
        "(e.g. configs/accelerate/deepspeed_zero3.yaml on GPUs). None: in the worker's own process.")
    processes: int | None = Field(
        None, ge=1, description="Processes a job launched with accelerate_config runs on (`--num_processes`: one per "
        "GPU). None: the config file's num_processes.")
    threads: int | None = Field(
        None, ge=1, description="Intra-op CPU threads while a training job runs in this process (None: every core: "
                                "the embedded train stage has the CPU to itself; models.torch_threads applies again "
                                "after).")


class BrowserSettings(Group):
    """The browser pool (services/browser_pool): where it is, Chromium, pool size, step and episode time limits.
    The actor's agent runs (services/actor/agent.py) drive the pool over HTTP at pool_url."""

    flat_prefix = "browser_"
    flat_names = {"chromium_path": "chromium_path"}

    pool_url: str = Field("http://127.0.0.1:8101", description="Base URL of the browser-pool service.")
    chromium_path: str = Field("/usr/bin/chromium", description="Chromium executable Playwright launches.")
    cdp_url: str | None = Field(
        None, description="A browser server (`webrl browser serve`, ws://HOST:PORT/) the pool connects each of its "
        "browsers to over CDP, a fresh Chromium per connection, instead of launching Chromium in its own process.")
    cdp_token: str | None = Field(
        None, description="The credential between a browser server and the pool: `webrl browser serve` admits only "
        "connections with `Authorization: Bearer <token>` (and refuses to listen off loopback without one); the pool "
        "sends it to cdp_url.")
    pool_size: int = Field(2, ge=1, description="Browsers the browser-pool service keeps.")
    step_timeout_s: float = Field(60.0, gt=0, description="Limit on one step (action + observation).")
    episode_timeout_s: float = Field(900.0, gt=0, description="Limit on one whole episode.")
    episode_idle_s: float = Field(
        300.0, gt=0, description="A REST episode (POST /v1/episodes) left without a step, evaluate or delete this "
        "long is closed and its browser freed (an abandoned client would otherwise hold it forever).")


class Settings(BaseSettings):
    """webrl's configuration. A top-level field is ``WEBRL_<FIELD>`` in the environment, a group's field
    ``WEBRL_<GROUP>__<FIELD>`` (:func:`setting_variables` lists them all). The environment only: no ``.env`` is
    read unless given (``Settings(_env_file=...)``), since the ``.env`` in a checkout is docker compose's (its
    ``WEBRL_*`` lines name paths inside the containers, and its API key), which a host command run beside it must
    not pick up."""

    # hide_input_in_errors: an invalid setting's error (a service's traceback at start) must not print its value,
    # which may be a key or a URL with a password; the CLI names the variable and the problem only.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED_DELIMITER,
                                      env_file=None, extra="ignore", hide_input_in_errors=True)

    home: Path = Field(Path(".webrl"), description="Working directory for state: SQLite file, artifacts, logs.")
    artifacts_dir: Path | None = Field(None, description="Checkpoints and reports. Default: <home>/artifacts.")
    seed: int = 0
    log_level: str = Field("WARNING", description="Log level of the CLI (its progress bars carry the news); -v: DEBUG.")

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    sites: SitesSettings = Field(default_factory=SitesSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    models: ModelsSettings = Field(default_factory=ModelsSettings)
    actor: ActorSettings = Field(default_factory=ActorSettings)
    llm_judge: LlmJudgeSettings = Field(default_factory=LlmJudgeSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    orm: OrmSettings = Field(default_factory=OrmSettings)
    critic: CriticSettings = Field(default_factory=CriticSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        _refuse_renamed({"the environment": env_settings, ".env": dotenv_settings})  # an env file only if given
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @model_validator(mode="after")
    def _defaults_under_home(self) -> Settings:
        if self.artifacts_dir is None:
            self.artifacts_dir = self.home / "artifacts"
        if self.database.url is None:
            self.database.url = f"sqlite:///{(self.home / 'webrl.db').as_posix()}"
        return self

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``: a top-level field by name, a group's fields as a mapping merged into a copy of
        the group (``settings.replace(seed=1, actor={"url": url, "max_new_tokens": 8})``). A name that is no
        field is an error. Like ``model_copy(update=...)``, the values are not validated."""
        copied = self.model_copy(deep=True)
        for name, value in changes.items():
            if name not in type(self).model_fields:
                raise ValueError(f"Settings has no field {name!r}")
            group = getattr(copied, name)
            if isinstance(group, Group) and isinstance(value, Mapping):
                unknown = sorted(set(value) - set(type(group).model_fields))
                if unknown:
                    raise ValueError(f"settings group {name!r} has no field {', '.join(unknown)}")
                value = group.model_copy(update=dict(value))
            setattr(copied, name, value)
        return copied

    # Derived views
    @property
    def eager(self) -> bool:
        """Jobs run in the calling process when no broker is configured (the embedded mode)."""
        return not self.jobs.broker_url

    @property
    def rollouts_through_actor(self) -> bool:
        """Whether `webrl train` rolls out through the actor service (``actor.rollout_policy``, by mode by
        default)."""
        return (self.actor.rollout_policy or ("checkpoint" if self.eager else "endpoint")) == "endpoint"

    def site_url(self, site: str) -> str:
        """Base URL of a site: the configured one, else the built-in sandbox."""
        if site not in SITE_PLACEHOLDERS and site != "homepage":
            raise ValueError(f"unknown site {site!r}; known: {sorted(SITE_PLACEHOLDERS)}")
        configured = getattr(self.sites, f"{site}_url")
        if configured:
            return str(configured).rstrip("/")
        port = SANDBOX_PORTS.get(site, 4399)
        return f"http://{self.sites.sandbox_host}:{port}"

    def service_url(self, service: str) -> str | None:
        """Base URL of a service (a folder in services/) others reach over HTTP; None for the others."""
        path = SERVICE_URL_SETTINGS.get(service)
        return getattr(getattr(self, path[0]), path[1]) if path else None

    def site_urls(self) -> dict[str, str]:
        return {site: self.site_url(site) for site in SITE_PLACEHOLDERS}

    def host_allow_list(self) -> list[str]:
        """Hosts (``host:port`` or bare host) a browser may contact: ``security.allowed_hosts`` when set, else
        ``host:port`` of each site that exists: each configured ``sites.<site>_url`` and the sandbox's own sites
        (not the sandbox ports of map and wikipedia, where nothing is served). A site URL without a port gives its
        scheme's default port, never the bare host: a bare host is every port, so a page of
        ``https://gitlab.example.com`` could reach that host's other services (its Redis on 6379, say)."""
        if self.security.allowed_hosts:
            return list(self.security.allowed_hosts)
        sites = [site for site in SITE_PLACEHOLDERS if getattr(self.sites, f"{site}_url") or site in SANDBOX_SITES]
        return sorted({_host_and_port(self.site_url(site)) for site in sites})

    def endpoint_allow_list(self) -> list[str]:
        """Base URLs a request body may send the services to: ``security.allowed_endpoints`` and the configured
        model endpoints (the actor service, the actor/ORM model servers, the LLM judge)."""
        configured = [self.actor.url, self.actor.endpoint, self.orm.endpoint, self.llm_judge.endpoint]
        return [url for url in [*configured, *self.security.allowed_endpoints] if url]

    def ensure_dirs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        assert self.artifacts_dir is not None
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)


def _groups() -> dict[str, type[Group]]:
    """Settings' groups by field name."""
    return {name: field.annotation for name, field in Settings.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, Group)}


def env_name(*path: str) -> str:
    """The environment variable of a setting: ``env_name("actor", "backend")`` is ``WEBRL_ACTOR__BACKEND``,
    ``env_name("home")`` is ``WEBRL_HOME``."""
    return ENV_PREFIX + NESTED_DELIMITER.join(path).upper()


def setting_variables() -> dict[str, tuple[str, ...]]:
    """Every setting's environment variable -> its path in :class:`Settings` (``WEBRL_ACTOR__BACKEND`` ->
    ``("actor", "backend")``, ``WEBRL_HOME`` -> ``("home",)``), in the order Settings declares them."""
    groups = _groups()
    out: dict[str, tuple[str, ...]] = {}
    for name in Settings.model_fields:
        paths = [(name, field) for field in groups[name].model_fields] if name in groups else [(name,)]
        out.update({env_name(*path): path for path in paths})
    return out


@lru_cache(maxsize=1)
def renamed_variables() -> dict[str, str]:
    """The variables of the settings that moved into groups: old flat name -> new name
    (``WEBRL_ACTOR_BACKEND`` -> ``WEBRL_ACTOR__BACKEND``, ``WEBRL_CHROMIUM_PATH`` -> ``WEBRL_BROWSER__CHROMIUM_PATH``),
    from each group's :meth:`Group.flat_name`."""
    return {env_name(group.flat_name(field)): env_name(name, field)
            for name, group in _groups().items() for field in group.model_fields}


def _refuse_renamed(sources: Mapping[str, PydanticBaseSettingsSource]) -> None:
    """Raise :class:`RenamedSetting` naming each old flat variable a source sets, and its new name."""
    renamed = renamed_variables()
    found = []
    for where, source in sources.items():
        present = {name.upper() for name in getattr(source, "env_vars", {})}
        found += [f"{old} is now {new} (set in {where})" for old, new in renamed.items() if old in present]
    if found:
        raise RenamedSetting(f"renamed settings: {'; '.join(found)}. Settings are grouped: "
                             f"{ENV_PREFIX}<GROUP>{NESTED_DELIMITER}<FIELD>")


def _host_and_port(url: str) -> str:
    """``host:port`` of a site URL, the scheme's default port where it names none (IPv6 hosts in brackets)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once. Tests call ``get_settings.cache_clear()`` after changing env."""
    return Settings()
