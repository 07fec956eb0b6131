"""Settings, read once from the environment at the edge (CLI / worker start) and passed down as values.

Every variable is listed in the README's settings table. Defaults point at the embedded stack
(``ledger-deletion stack up``), so everything works on one machine without configuration; for a real cluster
set the endpoints (``eval "$(ledger-deletion stack env)"`` shows the full list).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    PositiveFloat,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger_deletion.contracts import Step
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.formats.offload_keys import normalise_endpoint

DEFAULT_TOPIC = "persistent://pulsar/system/__ledger_deletion"
DEFAULT_SUBSCRIPTION = "ledger-deletion-worker"

POOLS = ("workflow", "pulsar", "bookkeeper", "offload")
COLOCATED = "all"  # the pool name (and task queue suffix) of every pool with ``colocate_pools``

# Steps that take a retry override (the dead letter is retried until it is published, the ack three times)
# and steps that take a timeout override: every activity.
RETRIED_STEPS = frozenset(
    s.value
    for s in (
        Step.CHECK_TOPIC,
        Step.ASK_OWNER_BROKER,
        Step.VERIFY_BK_METADATA,
        Step.DELETE_BK_LEDGER,
        Step.DELETE_OFFLOAD_SEGMENT,
    )
)
TIMED_STEPS = RETRIED_STEPS | {Step.PUBLISH_DEAD_LETTER.value, Step.ACK_MESSAGES.value}


class StepRetry(BaseModel):
    """Override of the retry policy for one step, e.g. ``{"delete_offload_segment": {"max_attempts": 3}}``."""

    max_attempts: int | None = Field(default=None, ge=1)
    initial_seconds: float | None = Field(default=None, gt=0)
    max_interval_seconds: float | None = Field(default=None, gt=0)


class Settings(BaseSettings):
    """All settings of the service. Environment names are ``LEDGER_DELETION_<FIELD>`` unless noted."""

    model_config = SettingsConfigDict(env_prefix="LEDGER_DELETION_", extra="ignore", frozen=True)

    # Temporal (standard TEMPORAL_* names, as the Temporal CLI uses)
    temporal_address: str = Field(
        default="127.0.0.1:17233",
        validation_alias=AliasChoices("TEMPORAL_ADDRESS", "LEDGER_DELETION_TEMPORAL_ADDRESS"),
    )
    temporal_namespace: str = Field(
        default="default",
        validation_alias=AliasChoices("TEMPORAL_NAMESPACE", "LEDGER_DELETION_TEMPORAL_NAMESPACE"),
    )
    temporal_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("TEMPORAL_API_KEY", "LEDGER_DELETION_TEMPORAL_API_KEY")
    )
    temporal_tls: bool = Field(
        default=False, validation_alias=AliasChoices("TEMPORAL_TLS", "LEDGER_DELETION_TEMPORAL_TLS")
    )
    temporal_ui_url: str = "http://127.0.0.1:18233"
    task_queue_prefix: str = "ledger-deletion"

    # Pulsar
    pulsar_url: str = "pulsar://127.0.0.1:16650"
    pulsar_admin_url: str = "http://127.0.0.1:18080"
    pulsar_token: SecretStr | None = None
    topic: str = DEFAULT_TOPIC
    dlq_topic: str = ""  # empty: "<topic>-DLQ"
    subscription: str = DEFAULT_SUBSCRIPTION
    # Tenant isolation (seeds/001): per-namespace deletion topics, consumed with the system topic above.
    # tenant_topics: comma-separated topic names (works on every broker). topic_pattern: whitespace-separated
    # regexes, each within one namespace as Pulsar's pattern subscriptions are (needs the broker's namespace
    # topic listing, which pulsar-lite lacks).
    tenant_topics: str = ""
    topic_pattern: str = ""
    admin_timeout_seconds: float = Field(default=10.0, gt=0)
    admin_max_redirects: int = Field(default=5, ge=0)

    # BookKeeper metadata in ZooKeeper
    zookeeper: str = "127.0.0.1:12181"
    zookeeper_digest: SecretStr | None = None  # "user:password" for ZooKeeper digest auth
    bk_ledgers_root: str = "/ledgers"
    zookeeper_timeout_seconds: float = Field(default=10.0, gt=0)
    # Pulsar's own metadata store (managed ledgers, cursors, schema locators) when it is not the ZooKeeper
    # above: Pulsar's ``metadataStoreUrl`` as ``host:port[,host:port][/chroot]``. Empty: the same ZooKeeper,
    # as in Pulsar's default deployment. Read for schema locators and by reconcile; never written.
    pulsar_metadata_zookeeper: str = ""
    pulsar_metadata_zookeeper_digest: SecretStr | None = None  # None: zookeeper_digest

    # Tiered storage (S3-compatible). Empty endpoint = AWS default chain and endpoints.
    s3_endpoint: str = "http://127.0.0.1:19000"
    s3_region: str = "us-east-1"
    # Other URLs of that same endpoint, comma-separated, as brokers may name it in an offload's driver
    # metadata (serviceEndpoint): a proxy, a load balancer, another DNS name. An offload whose metadata names
    # any other endpoint, or another region, is refused (dead-lettered): its objects are not in our store.
    s3_endpoint_aliases: str = ""
    offload_bucket: str = "pulsar-offload"

    # Retry / grace policy (PIP-186 defaults)
    max_attempts: int = Field(default=10, ge=1)
    retry_initial_seconds: float = Field(default=1.0, gt=0)
    retry_max_interval_seconds: float = Field(default=600.0, gt=0)
    step_retry: dict[str, StepRetry] = Field(default_factory=dict)
    activity_timeout_seconds: float = Field(default=60.0, gt=0)
    # Start-to-close timeouts of single steps, e.g. ``{"check_topic": 15}``. Steps left out that make one
    # call to the admin API or ZooKeeper get three times that client's timeout (ledger_deletion.policy).
    step_timeout_seconds: dict[str, PositiveFloat] = Field(default_factory=dict)
    in_use_rechecks: int = Field(default=3, ge=0)
    in_use_recheck_seconds: float = Field(default=60.0, ge=0)
    ack_schedule_to_start_seconds: float = Field(default=120.0, gt=0)
    ack_sweep_seconds: float = Field(default=60.0, gt=0)  # how often held messages of ended workflows settle

    # Pools
    workflow_concurrency: int = Field(default=100, ge=1)
    pulsar_concurrency: int = Field(default=64, ge=1)
    bookkeeper_concurrency: int = Field(default=64, ge=1)
    offload_concurrency: int = Field(default=32, ge=1)
    # Long polls each worker keeps open for tasks. The SDK's 5 leave the server idle while polls travel to
    # a busy worker and back: 32 raised deletions/s by 15-20 % (docs/performance.md, change 15). Workflow
    # pollers split between the shared and the worker's sticky queue, so at least 2.
    workflow_task_pollers: int = Field(default=32, ge=2)
    activity_task_pollers: int = Field(default=32, ge=1)
    ingest_max_inflight: int = Field(default=1000, ge=1)  # received, not yet acked messages per process
    # After this long without a message the ingest loop subscribes a fresh consumer (0: never): a broker that
    # stops dispatching to a consumer must not leave the backlog stuck (docs/reliability.md).
    ingest_resubscribe_idle_seconds: float = Field(default=60.0, ge=0)
    # Every pool on one task queue, for processes that each run all pools (``--pool all``): an activity then
    # starts eagerly on the worker whose workflow scheduled it, with no task-queue round trip through the
    # server (docs/performance.md). Pools can then no longer be deployed and scaled apart.
    colocate_pools: bool = False
    # Run workflow code in the Temporal SDK's sandbox. The sandbox is a development aid: it catches a
    # non-deterministic call (clock, random, I/O) in workflow code when it runs. Here the workflow code is the
    # project's own: the workflow tests run it sandboxed and the replay tests both ways. In the service the
    # sandbox costs a third of the workflow pool's CPU, ~4 % of throughput (docs/performance.md, change 14).
    workflow_sandbox: bool = False
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)

    # Observability: Prometheus endpoints per process (one process per pool in production); 0 turns one off.
    # Traces go over OTLP when the standard OTEL_* variables are set (see ledger_deletion.observability).
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    temporal_metrics_port: int = Field(default=9465, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"
    # How often a pulsar-pool process refreshes the ledger_deletion_inflight_estimate gauge (a visibility
    # query and the admin API's topic stats each time); 0 turns it off.
    inflight_metric_seconds: float = Field(default=60.0, ge=0)

    @field_validator("step_retry")
    @classmethod
    def _known_retried_steps(cls, value: dict[str, StepRetry]) -> dict[str, StepRetry]:
        return _known_steps(value, RETRIED_STEPS)

    @field_validator("s3_endpoint_aliases")
    @classmethod
    def _endpoint_urls(cls, value: str) -> str:
        for alias in _split(value):
            normalise_endpoint(alias)  # raises ValueError, which pydantic reports against the variable
        return value

    @field_validator("step_timeout_seconds")
    @classmethod
    def _known_timed_steps(cls, value: dict[str, float]) -> dict[str, float]:
        return _known_steps(value, TIMED_STEPS)

    @property
    def pulsar_token_value(self) -> str | None:
        """The Pulsar token in clear, for the clients that send it (``None``: no authentication)."""
        return self.pulsar_token.get_secret_value() if self.pulsar_token else None

    @property
    def s3_endpoint_alias_list(self) -> tuple[str, ...]:
        return _split(self.s3_endpoint_aliases)

    @property
    def pulsar_metadata_hosts(self) -> str:
        """The ZooKeeper that holds Pulsar's metadata (``/managed-ledgers``, ``/schemas``)."""
        return self.pulsar_metadata_zookeeper or self.zookeeper

    @property
    def pulsar_metadata_digest_value(self) -> str | None:
        """Digest credentials for Pulsar's metadata store: its own, else BookKeeper's ZooKeeper's."""
        digest = self.pulsar_metadata_zookeeper_digest or self.zookeeper_digest
        return digest.get_secret_value() if digest else None

    @property
    def zookeeper_digest_value(self) -> str | None:
        return self.zookeeper_digest.get_secret_value() if self.zookeeper_digest else None

    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.topic}-DLQ"

    def task_queue(self, pool: str) -> str:
        if pool not in POOLS:
            raise ConfigurationError(f"unknown pool {pool!r}; pools are {', '.join(POOLS)}")
        return f"{self.task_queue_prefix}-{COLOCATED if self.colocate_pools else pool}"

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some fields changed (tests, CLI flags)."""
        return self.model_copy(update=changes)


def _split(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _known_steps(value: dict[str, Any], steps: frozenset[str]) -> dict[str, Any]:
    """A misspelt step would otherwise be ignored without a word, and the default apply."""
    unknown = sorted(set(value) - steps)
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(unknown)}; steps are {', '.join(sorted(steps))}")
    return value


def load_settings(**overrides: Any) -> Settings:
    """Read the environment once. Call only at the edge (CLI commands, worker ``main``).

    Raises:
        ConfigurationError: naming each offending variable, e.g. ``LEDGER_DELETION_MAX_ATTEMPTS: ...``.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            problems.append(f"{env_name(field)}: {error['msg']}")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None
    return settings.with_overrides(**overrides) if overrides else settings


def env_name(field: str) -> str:
    """The environment variable that sets a field."""
    info = Settings.model_fields.get(field)
    if info is None:
        return field  # pydantic reports aliased fields by the alias that was set
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"LEDGER_DELETION_{field.upper()}"


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
