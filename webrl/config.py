"""Settings: the one place webrl reads its environment (prefix ``WEBRL_``).

Every other module receives a :class:`Settings` (usually through :func:`get_settings`) and never touches
``os.environ``. Values are validated once, at load. Settings are deployment facts (where things are, how they
are served); the method's knobs (thresholds, bands, beta, learning rates) are :mod:`webrl.hyperparams`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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


#: Default gap between the longest job and Redis' visibility timeout (a slow ack after a long job).
VISIBILITY_MARGIN_S = 600.0


class Settings(BaseSettings):
    """webrl's configuration. Every field can be set as ``WEBRL_<FIELD>`` in the environment or ``.env``."""

    model_config = SettingsConfigDict(env_prefix="WEBRL_", env_file=".env", extra="ignore")

    home: Path = Field(Path(".webrl"), description="Working directory for state: SQLite file, artifacts, logs.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL. Default: SQLite at <home>/webrl.db. Postgres: postgresql+psycopg://..."
    )
    broker_url: str | None = Field(
        None, description="Celery broker (redis://...). None runs every job eagerly in the calling process."
    )
    result_backend: str | None = Field(None, description="Celery result backend; defaults to the broker URL.")
    redis_url: str | None = Field(
        None, description="Redis for checkpoint events (channel webrl:checkpoints); defaults to a redis broker."
    )
    artifacts_dir: Path | None = Field(None, description="Checkpoints and reports. Default: <home>/artifacts.")

    # Sites: where the WebArena placeholders resolve. Default: the built-in sandbox on localhost.
    sandbox_host: str = Field("127.0.0.1", description="Host the sandbox sites listen on.")
    shopping_url: str | None = None
    shopping_admin_url: str | None = None
    reddit_url: str | None = None
    gitlab_url: str | None = None
    map_url: str | None = None
    wikipedia_url: str | None = None
    homepage_url: str | None = None

    api_key: str | None = Field(None, description="When set, every route but health and metrics wants Bearer.")
    allow_no_auth: bool = Field(False, description="Serve without api_key on a non-loopback address (refused "
                                "otherwise: `webrl serve` will not start, a service answers only loopback).")
    allowed_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Base URLs a request may name as a model endpoint (a rollout policy's url, taskgen's llm "
                    "endpoint), besides the configured actor_url, actor_endpoint, orm_endpoint and "
                    "llm_judge_endpoint. Comma-separated; compared by scheme, host and port.",
    )
    model_dirs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Folders, besides the artifacts store, a request may name a model folder in (the ORM's "
                    "`orm`, the critic's `critic`); the configured orm_model and critic_model are always allowed. "
                    "Comma-separated.",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts (host:port, or host for any port) a browser may reach. Empty: the hosts of the "
                    "configured site URLs and of the sandbox sites that are served.",
    )

    # Models and serving
    device: str = Field("cpu", description="torch device for local models.")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    actor_backend: Literal["local", "openai", "tgi"] = "local"
    actor_endpoint: str | None = Field(None, description="Base URL of a vLLM/SGLang/TGI server or actor service.")
    actor_model: str | None = Field(None, description="Model path (local) or served model name (openai).")
    llm_judge_endpoint: str | None = Field(None, description="OpenAI-compatible endpoint for fuzzy_match.")
    llm_judge_model: str | None = None
    seed: int = 0

    # Models & actor (area: models-actor): loading, the tiny CPU model, the actor service.
    trust_remote_code: bool = Field(False, description="Let a model folder run its own code (older GLM-4).")
    tiny_size: Literal["test", "small", "base", "large"] = Field(
        "small", description="Size preset of the tiny Llama `webrl bootstrap` builds (webrl.models.tiny.SIZES).")
    tiny_vocab_size: int = Field(4096, ge=512, description="BPE vocabulary of the tiny model's tokenizer.")
    actor_max_prompt_tokens: int = Field(1024, ge=64, description="Context budget of the actor prompt.")
    actor_max_new_tokens: int = Field(64, ge=1, description="Most tokens the actor generates per step (the longest "
                                      "sandbox demonstration, an `# Element:` line plus a Type action, is 60).")
    actor_temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0 = greedy.")
    actor_max_batch: int = Field(16, ge=1, description="Most prompts the local backend batches together.")
    actor_batch_wait_ms: float = Field(5.0, ge=0.0, description="How long the local batcher waits for company.")
    actor_api_key: str | None = Field(None, description="Bearer key sent to an OpenAI/TGI/actor endpoint.")
    bootstrap_minutes: float = Field(10.0, gt=0, description="Budget of `webrl bootstrap`; its SFT gets half.")
    torch_threads: int | None = Field(
        None, ge=1, description="Intra-op CPU threads for local models (None: torch's default). 1 avoids OpenMP "
                                "stalls on a shared, oversubscribed CPU.")
    train_threads: int | None = Field(
        None, ge=1, description="Intra-op CPU threads while a training job runs in this process (None: every core: "
                                "the embedded train stage has the CPU to itself; torch_threads applies again after).")

    # Evaluation (area: evaluation): WebArena evaluators, the fuzzy_match LLM judge.
    llm_judge_api_key: str | None = Field(None, description="Bearer key sent to the llm_judge_endpoint.")
    llm_judge_timeout_s: float = Field(60.0, gt=0, description="Timeout of one LLM-judge request.")
    evaluation_settle_s: float = Field(
        0.0, ge=0.0, description="Extra wait after program_html navigates (WebArena sleeps 3 s for its JS sites)."
    )
    evaluation_nav_timeout_s: float = Field(30.0, gt=0, description="Timeout of one program_html navigation.")

    # Judges (area: judges): the ORM and critic services.
    orm_backend: Literal["local", "openai"] = Field("local", description="ORM inference: transformers or an "
                                                    "OpenAI-compatible server's YES/NO log-probs.")
    orm_model: str | None = Field(None, description="ORM folder (local) or served model name (openai).")
    orm_endpoint: str | None = Field(None, description="Base URL (…/v1) of the OpenAI-compatible ORM server.")
    orm_api_key: str | None = Field(None, description="Bearer key sent to orm_endpoint.")
    orm_max_prompt_tokens: int = Field(16384, ge=64, description="ORM prompt budget; only the observation is "
                                       "cut (WebRL: cutoff_len 16384). The model's own limit also applies.")
    orm_batch_size: int = Field(8, ge=1, description="Prompts per ORM forward pass (local backend).")
    orm_layout: Literal["auto", "llama3", "chat_template"] = Field(
        "auto", description="ORM prompt rendering: WebRL's exact Llama-3 string, the chat template, or auto.")
    critic_model: str | None = Field(None, description="Critic folder served by the critic service.")
    critic_batch_size: int = Field(8, ge=1, description="States per critic forward pass.")
    critic_max_prompt_tokens: int = Field(1024, ge=64, description="Context budget of the critic's input.")

    # Trainer (area: trainer): how training jobs run.
    trainer_accelerate_config: Path | None = Field(
        None, description="Accelerate config file; when set, training jobs run under `accelerate launch` with it "
        "(e.g. configs/accelerate/deepspeed_zero3.yaml on GPUs). None: in the worker's own process.")

    # Service URLs: the browser pool, which the actor's agent runs (services/actor/agent.py) drive over HTTP,
    # and the actor service, the one endpoint a rollout policy's bearer key is sent to.
    browser_pool_url: str = "http://127.0.0.1:8101"
    actor_url: str = Field(
        "http://127.0.0.1:8102", description="Base URL of the actor service. A rollout policy {kind: endpoint} may "
        "name it (it is on endpoint_allow_list), and only there does the endpoint policy send the bearer key "
        "(actor_api_key, else api_key).")
    rollout_policy: Literal["endpoint", "checkpoint"] | None = Field(
        None, description="How `webrl train` rolls its actor out. endpoint: every step asks the actor service at "
        "actor_url, which hot-reloads each published actor (the pipeline waits until it serves the phase's); "
        "checkpoint: each rollout worker loads the actor folder itself. None: endpoint in the distributed mode, "
        "checkpoint in the embedded one.")
    actor_reload_timeout_s: float = Field(
        600.0, gt=0, description="How long the pipeline waits for the actor service to serve the checkpoint a "
        "rollout needs (hot reload) before it stops with an error.")

    # Browser pool (services/browser_pool): Chromium, pool size, step and episode time limits.
    chromium_path: str = Field("/usr/bin/chromium", description="Chromium executable Playwright launches.")
    browser_cdp_url: str | None = Field(
        None, description="A browser server (`webrl browser serve`, ws://HOST:PORT/) the pool connects each of its "
        "browsers to over CDP, a fresh Chromium per connection, instead of launching Chromium in its own process.")
    browser_pool_size: int = Field(2, ge=1, description="Browsers the browser-pool service keeps.")
    browser_step_timeout_s: float = Field(60.0, gt=0, description="Limit on one step (action + observation).")
    browser_episode_timeout_s: float = Field(900.0, gt=0, description="Limit on one whole episode.")
    browser_episode_idle_s: float = Field(
        300.0, gt=0, description="A REST episode (POST /v1/episodes) left without a step, evaluate or delete this "
        "long is closed and its browser freed (an abandoned client would otherwise hold it forever).")

    # Bounded work: what one request may ask of a service.
    max_request_bytes: int = Field(8 * 2**20, ge=1024, description="Largest request body a route takes (413 over "
                                   "it), except the routes that carry batches of pages.")
    max_batch_request_bytes: int = Field(
        64 * 2**20, ge=1024, description="Largest body of the routes that carry batches of pages or prompts "
        "(/v1/act, /v1/completions, /v1/logprobs, /v1/orm/score, /v1/critic/value).")
    model_request_timeout_s: float = Field(
        600.0, gt=0, description="How long one request's model work (generation, scoring, values) may take before "
        "the request answers 504; also how long it waits for a model busy with other requests.")

    # Jobs (webrl/queue.py): how long one Celery job may run, and when Redis gives up on its worker.
    job_time_limit_s: float = Field(
        6 * 3600.0, gt=0, description="Hard limit of one Celery job: the worker process running it is killed "
        "(the soft limit, 95% of it, raises in the job first). Size it to the longest job, a training phase.")
    broker_visibility_timeout_s: float | None = Field(
        None, gt=0, description="Seconds Redis waits for a job's acknowledgement before giving it to another "
        "worker (its worker was killed whole). Must exceed job_time_limit_s, else a job still running is handed "
        "out twice. Default: job_time_limit_s + 10 minutes.")
    dispatch_timeout_s: float | None = Field(
        None, gt=0, description="How long `dispatch` waits for a job's result before raising. Default: "
        "broker_visibility_timeout_s + job_time_limit_s (a killed worker's job handed out again and run again).")

    log_level: str = Field("WARNING", description="Log level of the CLI (its progress bars carry the news); -v: DEBUG.")

    @field_validator("allowed_hosts", "allowed_endpoints", "model_dirs", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return value
            return [h.strip() for h in text.split(",") if h.strip()]
        return value

    @model_validator(mode="after")
    def _defaults_under_home(self) -> Settings:
        if self.artifacts_dir is None:
            self.artifacts_dir = self.home / "artifacts"
        if self.database_url is None:
            self.database_url = f"sqlite:///{(self.home / 'webrl.db').as_posix()}"
        if self.result_backend is None and self.broker_url:
            self.result_backend = self.broker_url
        if self.redis_url is None and self.broker_url and self.broker_url.startswith("redis"):
            self.redis_url = self.broker_url
        if self.broker_visibility_timeout_s is None:
            self.broker_visibility_timeout_s = self.job_time_limit_s + VISIBILITY_MARGIN_S
        if self.broker_visibility_timeout_s <= self.job_time_limit_s:
            raise ValueError(f"broker_visibility_timeout_s ({self.broker_visibility_timeout_s:g}) must exceed "
                             f"job_time_limit_s ({self.job_time_limit_s:g}): a running job would be handed out twice")
        if self.dispatch_timeout_s is None:
            self.dispatch_timeout_s = self.broker_visibility_timeout_s + self.job_time_limit_s
        return self

    # Derived views
    @property
    def eager(self) -> bool:
        """Jobs run in the calling process when no broker is configured (the embedded mode)."""
        return not self.broker_url

    @property
    def rollouts_through_actor(self) -> bool:
        """Whether `webrl train` rolls out through the actor service (``rollout_policy``, by mode by default)."""
        return (self.rollout_policy or ("checkpoint" if self.eager else "endpoint")) == "endpoint"

    def site_url(self, site: str) -> str:
        """Base URL of a site: the configured one, else the built-in sandbox."""
        if site not in SITE_PLACEHOLDERS and site != "homepage":
            raise ValueError(f"unknown site {site!r}; known: {sorted(SITE_PLACEHOLDERS)}")
        configured = getattr(self, f"{site}_url")
        if configured:
            return str(configured).rstrip("/")
        port = SANDBOX_PORTS.get(site, 4399)
        return f"http://{self.sandbox_host}:{port}"

    def site_urls(self) -> dict[str, str]:
        return {site: self.site_url(site) for site in SITE_PLACEHOLDERS}

    def host_allow_list(self) -> list[str]:
        """Hosts (``host:port`` or bare host) a browser may contact: ``allowed_hosts`` when set, else the
        hosts of the sites that exist: each configured ``<site>_url`` and the sandbox's own sites (not
        the sandbox ports of map and wikipedia, where nothing is served)."""
        if self.allowed_hosts:
            return list(self.allowed_hosts)
        from urllib.parse import urlsplit

        sites = [site for site in SITE_PLACEHOLDERS if getattr(self, f"{site}_url") or site in SANDBOX_SITES]
        return sorted({urlsplit(self.site_url(site)).netloc for site in sites})

    def endpoint_allow_list(self) -> list[str]:
        """Base URLs a request body may send the services to: ``allowed_endpoints`` and the configured
        model endpoints (the actor service, the actor/ORM model servers, the LLM judge)."""
        configured = [self.actor_url, self.actor_endpoint, self.orm_endpoint, self.llm_judge_endpoint]
        return [url for url in [*configured, *self.allowed_endpoints] if url]

    def ensure_dirs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        assert self.artifacts_dir is not None
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once. Tests call ``get_settings.cache_clear()`` after changing env."""
    return Settings()
