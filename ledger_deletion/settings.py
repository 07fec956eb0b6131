"""Settings, read once from the environment at the edge (CLI / worker start) and passed down as values.

Every field carries its description (what it is, its unit): the settings reference is generated from this
model. Endpoints have no defaults: a deployment that forgets one must refuse to start, not talk to some
other host. Each command names the endpoints it needs (``require`` of ``ledger_deletion.loading``'s
``load_settings``), refused with the list of those missing; ``eval "$(ledger-deletion stack env)"`` sets
them all for the embedded stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    PositiveFloat,
    SecretStr,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger_deletion.contracts import Mode, Step
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.formats.offload_keys import normalise_endpoint
from ledger_deletion.rollout import LiveScope, parse_scope_entries
from ledger_deletion.shared_bookkeeper import DOCS as SHARED_BOOKKEEPER_DOCS
from ledger_deletion.shared_bookkeeper import SharedBookKeeper

DEFAULT_TOPIC = "persistent://pulsar/system/__ledger_deletion"
DEFAULT_SUBSCRIPTION = "ledger-deletion-worker"

POOLS = ("workflow", "pulsar", "bookkeeper", "offload")
COLOCATED = "all"  # the pool name (and task queue suffix) of every pool with ``colocate_pools``

# The endpoints each pool connects to: every pool is a Temporal worker. The workflow pool reads the admin API
# and ZooKeeper for its read-only checks (local activities); each other pool talks to the system it changes.
TEMPORAL = ("temporal_address",)
POOL_ENDPOINTS: dict[str, tuple[str, ...]] = {
    "workflow": (*TEMPORAL, "pulsar_admin_url", "zookeeper"),
    "pulsar": (*TEMPORAL, "pulsar_url", "pulsar_admin_url"),
    "bookkeeper": (*TEMPORAL, "zookeeper"),
    "offload": (*TEMPORAL, "s3_endpoint"),
}
# ``ledger-deletion watch``: Temporal, Pulsar's metadata and BookKeeper's ledgers, and the deletion topic.
WATCH_ENDPOINTS = (*TEMPORAL, "zookeeper", "pulsar_url")
# What ``watch`` and ``reconcile --submit`` must be told besides their endpoints (they request deletes).
WATCH_REQUIRES = (*WATCH_ENDPOINTS, "bookkeeper_shared_with")
# The stores a pool deletes in. Only a process running such a pool may hold that store's deleting login
# (load_settings' ``deletes``). S3's rights come from the AWS credential chain, which says nothing about them
# before a request is refused, so only ZooKeeper's logins are checked.
POOL_DELETES: dict[str, tuple[str, ...]] = {"bookkeeper": ("zookeeper",), "offload": ("s3",)}
ENDPOINTS = ("temporal_address", "pulsar_url", "pulsar_admin_url", "zookeeper", "s3_endpoint")
# Settings with no default that are not endpoints: a fact about the deployment only its operator knows, which
# a process that deletes (or requests deletes) must be told. Required and refused the way endpoints are.
DECLARATIONS = ("bookkeeper_shared_with",)
REQUIRED = (*ENDPOINTS, *DECLARATIONS)
# The pools that decide or carry out deletes: each must know who else writes to this BookKeeper.
DELETING_POOLS = ("workflow", "bookkeeper", "offload")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
STACK_HINT = 'for the embedded stack run: eval "$(ledger-deletion stack env)"'

# Steps that take a retry override (the dead letter is retried until it is published, the ack three times)
# and steps that take a timeout override: every activity.
RETRIED_STEPS = frozenset(
    s.value
    for s in (
        Step.CHECK_TOPIC,
        Step.ASK_OWNER_BROKER,
        Step.VERIFY_BK_METADATA,
        Step.CHECK_OFFLOAD_LISTED,
        Step.DELETE_BK_LEDGER,
        Step.DELETE_OFFLOAD_SEGMENT,
        Step.INSPECT_OFFLOAD_SEGMENT,
    )
)
TIMED_STEPS = RETRIED_STEPS | {Step.PUBLISH_DEAD_LETTER.value, Step.ACK_MESSAGES.value}


class StepRetry(BaseModel):
    """Override of the retry policy for one step, e.g. ``{"delete_offload_segment": {"max_attempts": 3}}``."""

    max_attempts: int | None = Field(default=None, ge=1, description="Attempts of the step, at least 1.")
    initial_seconds: float | None = Field(default=None, gt=0, description="First retry backoff, seconds.")
    max_interval_seconds: float | None = Field(default=None, gt=0, description="Backoff cap, seconds.")


class Settings(BaseSettings):
    """All settings of the service. Environment names are ``LEDGER_DELETION_<FIELD>`` unless noted.

    An endpoint's ``title`` names it in the message that refuses a command started without it.
    """

    model_config = SettingsConfigDict(env_prefix="LEDGER_DELETION_", extra="ignore", frozen=True)

    # Temporal (standard TEMPORAL_* names, as the Temporal CLI uses)
    temporal_address: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_ADDRESS", "LEDGER_DELETION_TEMPORAL_ADDRESS"),
        title="Temporal frontend, host:port, or a profile's (TEMPORAL_PROFILE)",
        description="Temporal frontend as host:port, else the address of the Temporal profile; no default, "
        "needed by every pool and by setup, list, show, inflight and watch.",
    )
    temporal_namespace: str = Field(
        default="default",
        validation_alias=AliasChoices("TEMPORAL_NAMESPACE", "LEDGER_DELETION_TEMPORAL_NAMESPACE"),
        description="Temporal namespace the deletion workflows run in (else the profile's).",
    )
    temporal_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("TEMPORAL_API_KEY", "LEDGER_DELETION_TEMPORAL_API_KEY"),
        description="API key for Temporal (e.g. Temporal Cloud), which implies TLS; unset: none.",
    )
    temporal_tls: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("TEMPORAL_TLS", "LEDGER_DELETION_TEMPORAL_TLS"),
        description="TLS to the Temporal frontend: true, false (none, even with an API key), or unset: TLS "
        "when an API key, a certificate or a server name is given.",
    )
    temporal_tls_server_name: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_SERVER_NAME"),
        description="Name the frontend's certificate must carry (and the TLS server name sent), when it is "
        "not the address's host; empty: the address's host.",
    )
    temporal_tls_server_ca_cert_path: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
        description="PEM file of the CA certificate(s) the frontend's certificate is checked against; empty: "
        "the system's trust store.",
    )
    temporal_tls_server_ca_cert_data: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_SERVER_CA_CERT_DATA"),
        description="The same CA certificate(s) as PEM text, instead of a file.",
    )
    temporal_tls_client_cert_path: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_CLIENT_CERT_PATH"),
        description="PEM file of the client certificate presented to the frontend (mTLS), with its key "
        "(TEMPORAL_TLS_CLIENT_KEY_PATH or _DATA).",
    )
    temporal_tls_client_cert_data: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_CLIENT_CERT_DATA"),
        description="The same client certificate as PEM text, instead of a file.",
    )
    temporal_tls_client_key_path: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_TLS_CLIENT_KEY_PATH"),
        description="PEM file of the client certificate's private key.",
    )
    temporal_tls_client_key_data: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("TEMPORAL_TLS_CLIENT_KEY_DATA"),
        description="The same private key as PEM text, instead of a file.",
    )
    # The Python SDK's TLS options have no switch for it: refused rather than ignored.
    temporal_tls_disable_host_verification: bool = Field(
        default=False,
        validation_alias=AliasChoices("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"),
        description="Not supported (the Temporal Python SDK always verifies the frontend's name): true is "
        "refused; set TEMPORAL_TLS_SERVER_NAME to the name the certificate carries instead.",
    )
    temporal_profile: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_PROFILE"),
        description="Profile of the Temporal configuration file to connect with (the SDK's environment "
        "configuration); the TEMPORAL_* variables override what it says; empty: 'default'.",
    )
    temporal_config_file: str = Field(
        default="",
        validation_alias=AliasChoices("TEMPORAL_CONFIG_FILE"),
        description="Temporal's TOML configuration file of profiles (address, namespace, api_key, tls); "
        "empty: temporalio/temporal.toml in the user's configuration directory, when there is one.",
    )
    task_queue_prefix: str = Field(
        default="ledger-deletion",
        description="Prefix of the Temporal task queues: <prefix>-workflow|pulsar|bookkeeper|offload.",
    )

    # Pulsar
    pulsar_url: str = Field(
        default="",
        title="Pulsar service URL, pulsar://host:6650",
        description="Pulsar binary-protocol service URL, e.g. pulsar://broker:6650; no default, needed by "
        "the pulsar pool, submit and dlq.",
    )
    pulsar_admin_url: str = Field(
        default="",
        title="a broker's admin REST URL, http://host:8080",
        description="Any broker's admin REST URL, e.g. http://broker:8080 (redirects to the owner broker are "
        "followed); no default, needed by the workflow pool (its checks), the pulsar pool and inflight.",
    )
    pulsar_token: SecretStr | None = Field(
        default=None,
        description="Bearer token for the Pulsar client and the admin REST, sent on a redirect only to a "
        "broker of the cluster (LEDGER_DELETION_PULSAR_CLUSTER, LEDGER_DELETION_ADMIN_TRUSTED_HOSTS); unset: "
        "no authentication.",
    )
    pulsar_tls_trust_certs_file: str = Field(
        default="",
        description="PEM file of the CA certificate(s) the brokers' certificates are checked against, for "
        "pulsar+ssl:// and https:// URLs (the client and the admin REST alike); empty: the system's trust "
        "store.",
    )
    pulsar_tls_validate_hostname: bool = Field(
        default=True,
        description="Check that a broker's certificate names the host connected to (the client's "
        "tlsHostnameVerificationEnable, and the admin REST's); false only for certificates without the "
        "brokers' names.",
    )
    pulsar_tls_cert_file: str = Field(
        default="",
        description="PEM client certificate presented to the brokers (mTLS), with "
        "LEDGER_DELETION_PULSAR_TLS_KEY_FILE; without a token or OAuth2 it is also how the service "
        "authenticates (Pulsar's AuthenticationTls).",
    )
    pulsar_tls_key_file: str = Field(
        default="", description="PEM private key of LEDGER_DELETION_PULSAR_TLS_CERT_FILE."
    )
    pulsar_oauth2_issuer_url: str = Field(
        default="",
        description="OAuth2 issuer of the client-credentials flow (Pulsar's AuthenticationOAuth2 issuerUrl; "
        "its token endpoint is read from <issuer>/.well-known/openid-configuration), for the client and "
        "the admin REST; empty: no OAuth2.",
    )
    pulsar_oauth2_private_key: str = Field(
        default="",
        description="The client-credentials file (Pulsar's privateKey): JSON with client_id and "
        "client_secret, as a path or a file:// URL.",
    )
    pulsar_oauth2_audience: str = Field(
        default="", description="OAuth2 audience of the tokens (the Pulsar cluster's); empty: none sent."
    )
    pulsar_oauth2_scope: str = Field(default="", description="OAuth2 scope requested; empty: none sent.")
    topic: str = Field(
        default=DEFAULT_TOPIC, description="The deletion topic (partitioned) PIP-186 publishes to."
    )
    dlq_topic: str = Field(default="", description="Dead-letter topic; empty: <topic>-DLQ.")
    subscription: str = Field(
        default=DEFAULT_SUBSCRIPTION,
        description="Shared subscription on the deletion topics (PIP-186's name).",
    )
    tenant_topics: str = Field(
        default="",
        description="Per-tenant/namespace deletion topics consumed with the system topic (tenant isolation), "
        "comma-separated; works on every broker.",
    )
    topic_pattern: str = Field(
        default="",
        description="Whitespace-separated regexes of deletion topics to consume, each within one namespace "
        "as Pulsar's pattern subscriptions are (needs a broker that lists a namespace's topics; pulsar-lite "
        "does not).",
    )
    admin_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of one admin REST call, seconds."
    )
    admin_max_redirects: int = Field(
        default=5, ge=0, description="Redirects (307 to the owner broker) followed per admin REST call."
    )
    pulsar_cluster: str = Field(
        default="",
        description="The Pulsar cluster the admin URL's brokers belong to: a 307 is followed to the active "
        "brokers it lists (/admin/v2/brokers/<cluster>, needs a super-user token where authorization is "
        "on); empty: only to the admin URL's own address and LEDGER_DELETION_ADMIN_TRUSTED_HOSTS.",
    )
    admin_trusted_hosts: str = Field(
        default="",
        description="Other admin addresses of this cluster's brokers a 307 may lead to, comma-separated, "
        "each host (any port) or host:port; a redirect anywhere else is refused and retried.",
    )

    # BookKeeper metadata in ZooKeeper
    zookeeper: str = Field(
        default="",
        title="ZooKeeper holding BookKeeper's ledger metadata, host:port[/chroot]",
        description="ZooKeeper holding BookKeeper's ledger metadata, as host:port[,host:port][/chroot]; no "
        "default, needed by the workflow pool (its checks), the bookkeeper pool and reconcile.",
    )
    # Two logins: the one that may delete ledgers (the bookkeeper pool's) and the one that reads (every other
    # process). A process that runs no bookkeeper pool refuses to start holding the first
    # (ledger_deletion.connections.delete_credential_problems).
    zookeeper_digest: SecretStr | None = Field(
        default=None,
        description="user:password for ZooKeeper digest authentication of the identity that deletes ledgers: "
        "only a process running the bookkeeper pool may hold it; unset: none.",
    )
    zookeeper_sasl: SecretStr | None = Field(
        default=None,
        description="user:password for ZooKeeper SASL authentication (DIGEST-MD5: a user of the server's "
        "JAAS DigestLoginModule) of the identity that deletes ledgers: only a process running the "
        "bookkeeper pool may hold it; unset: none.",
    )
    zookeeper_read_digest: SecretStr | None = Field(
        default=None,
        description="user:password for ZooKeeper digest authentication of the identity that only reads "
        "(the workflow pool's checks, the watcher, reconcile); unset: LEDGER_DELETION_ZOOKEEPER_DIGEST in a "
        "process allowed to hold it, else none.",
    )
    zookeeper_read_sasl: SecretStr | None = Field(
        default=None,
        description="user:password for ZooKeeper SASL authentication of the identity that only reads; "
        "unset: LEDGER_DELETION_ZOOKEEPER_SASL in a process allowed to hold it, else none.",
    )
    zookeeper_tls: bool = Field(
        default=False,
        description="Connect to ZooKeeper over TLS (its secureClientPort in the connect string), both "
        "BookKeeper's and Pulsar's metadata store.",
    )
    zookeeper_tls_ca_file: str = Field(
        default="",
        description="PEM file of the CA certificate(s) ZooKeeper's certificate is checked against; empty: "
        "the system's trust store.",
    )
    zookeeper_tls_cert_file: str = Field(
        default="",
        description="PEM client certificate presented to ZooKeeper (its ssl.clientAuth, 'need' by default), "
        "with LEDGER_DELETION_ZOOKEEPER_TLS_KEY_FILE.",
    )
    zookeeper_tls_key_file: str = Field(
        default="", description="PEM private key of LEDGER_DELETION_ZOOKEEPER_TLS_CERT_FILE."
    )
    zookeeper_tls_verify_hostname: bool = Field(
        default=True,
        description="Check that ZooKeeper's certificate names the host connected to (ZooKeeper's own "
        "client does: zookeeper.ssl.hostnameVerification).",
    )
    bk_ledgers_root: str = Field(
        default="/ledgers", description="BookKeeper's ledgers root znode; nothing outside it is ever deleted."
    )
    zookeeper_timeout_seconds: float = Field(
        default=10.0, gt=0, description="ZooKeeper session and connect timeout, seconds."
    )
    pulsar_metadata_zookeeper: str = Field(
        default="",
        description="Pulsar's own metadata store (its metadataStoreUrl, host:port[,host:port][/chroot]) "
        "when it is not BookKeeper's ZooKeeper; empty: that same ZooKeeper, as in Pulsar's default "
        "deployment. Read for schema locators and by reconcile, never written.",
    )
    bookkeeper_shared_with: str = Field(
        default="",
        title=f"'none' or the other Pulsar clusters' metadata stores sharing this BookKeeper, see "
        f"{SHARED_BOOKKEEPER_DOCS}",
        description="Who else writes to this BookKeeper: 'none' (this Pulsar cluster alone uses it; a "
        "tripwire spot-checks it) or the metadata stores of every other Pulsar cluster that does, "
        "comma-separated ZooKeeper connect strings each ending in its chroot ('/' for the root), e.g. "
        "zk1:2181,zk2:2181/pulsar-b,zkc:2181/; read with Pulsar's metadata store's credentials. No default: "
        "needed by the workflow, bookkeeper and offload pools, watch and reconcile --submit.",
    )
    pulsar_metadata_zookeeper_digest: SecretStr | None = Field(
        default=None,
        description="user:password for Pulsar's metadata store (only read, and the watcher's election); "
        "unset: the reading identity's (LEDGER_DELETION_ZOOKEEPER_READ_DIGEST).",
    )
    pulsar_metadata_zookeeper_sasl: SecretStr | None = Field(
        default=None,
        description="user:password for SASL to Pulsar's metadata store; unset: the reading identity's "
        "(LEDGER_DELETION_ZOOKEEPER_READ_SASL).",
    )

    # Tiered storage (S3-compatible)
    s3_endpoint: str | None = Field(
        default=None,
        title="S3 endpoint of the offload bucket, http://host:port, or empty for AWS",
        description="S3-compatible endpoint of the offload bucket, e.g. http://minio:9000, or the empty "
        "string for AWS's own endpoints; unset is not AWS, the offload pool and reconcile refuse to start "
        "(credentials come from the standard AWS chain).",
    )
    s3_region: str = Field(default="us-east-1", description="Region of the offload bucket.")
    s3_endpoint_aliases: str = Field(
        default="",
        description="Other URLs of that same endpoint that brokers may name in an offload's driver metadata "
        "(serviceEndpoint), comma-separated: a proxy, a load balancer, another DNS name; an offload naming "
        "any other endpoint, or another region, is dead-lettered, its objects are not in this store.",
    )
    offload_bucket: str = Field(
        default="pulsar-offload", description="Offload bucket used when the driver metadata names none."
    )

    # The audit log (ledger_deletion/audit): one Parquet record per decided request, written by the pulsar
    # pool before it acks the request's message.
    audit_bucket: str = Field(
        default="",
        description="Bucket of the audit log, at LEDGER_DELETION_S3_ENDPOINT: the pulsar pool adds one "
        "record per decided request (date-partitioned Parquet) before it acks the request's message, and "
        "never overwrites or deletes one; empty: no audit log (a warning at start).",
    )
    audit_s3_endpoint: str | None = Field(
        default=None,
        description="S3-compatible endpoint of the audit bucket, http://host:port, or the empty string for "
        "AWS's own endpoints; unset: LEDGER_DELETION_S3_ENDPOINT's (credentials: the standard AWS chain).",
    )
    audit_s3_region: str | None = Field(
        default=None, description="Region of the audit bucket; unset: LEDGER_DELETION_S3_REGION."
    )
    audit_prefix: str = Field(
        default="ledger-deletion/audit",
        description="Key prefix of the audit log in its bucket: <prefix>/dt=YYYY-MM-DD/<batch>.parquet.",
    )
    audit_linger_seconds: float = Field(
        default=0.05,
        ge=0,
        le=5,
        description="How long the audit writer waits for more acks before it writes a batch (group commit): "
        "longer, fewer and larger objects; every ack waits that much longer.",
    )

    # Retry / grace policy (PIP-186 defaults)
    max_attempts: int = Field(
        default=10, ge=1, description="Attempts per step before the request is dead-lettered (PIP-186: 10)."
    )
    retry_initial_seconds: float = Field(default=1.0, gt=0, description="First retry backoff, seconds.")
    retry_max_interval_seconds: float = Field(
        default=600.0, gt=0, description="Retry backoff cap, seconds (PIP-186's reconsume interval)."
    )
    step_retry: dict[str, StepRetry] = Field(
        default_factory=dict,
        description='Per-step retry overrides as JSON, e.g. {"delete_offload_segment": {"max_attempts": 3, '
        '"initial_seconds": 5}}; steps: check_topic, ask_owner_broker, verify_bk_metadata, delete_bk_ledger, '
        "delete_offload_segment (a misspelt step is refused at start).",
    )
    activity_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Start-to-close timeout of each activity attempt, seconds, unless the step has its own.",
    )
    step_timeout_seconds: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description='Per-step start-to-close timeouts in seconds as JSON, e.g. {"check_topic": 15}; steps '
        "left out that make one call to the admin API or ZooKeeper get three times that client's timeout, "
        "at most the activity timeout.",
    )
    in_use_rechecks: int = Field(
        default=3, ge=0, description="Re-asks of the owner broker while the ledger is still listed as in use."
    )
    in_use_recheck_seconds: float = Field(
        default=60.0, ge=0, description="Durable timer between those re-asks, seconds."
    )
    min_ledger_age_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A BookKeeper ledger younger than this (its metadata's ctime, else its znode's) is "
        "decided only once it is this old; a rollover lists a new ledger in the store a moment after "
        "creating it. 0: no minimum.",
    )
    ack_schedule_to_start_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long an ack waits for the process that received the message, seconds, before "
        "Pulsar's redelivery takes over.",
    )
    ack_sweep_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often a pulsar-pool process settles held messages of workflows that ended without "
        "reaching it, seconds.",
    )

    # Pools
    workflow_concurrency: int = Field(
        default=100, ge=1, description="Workflow tasks one workflow-pool process runs at once."
    )
    check_concurrency: int = Field(
        default=64,
        ge=1,
        description=(
            "Read-only checks (check_topic, verify_bk_metadata, ask_owner_broker, …) one workflow-pool "
            "process runs at once, as local activities."
        ),
    )
    pulsar_concurrency: int = Field(
        default=64, ge=1, description="Activities one pulsar-pool process runs at once."
    )
    bookkeeper_concurrency: int = Field(
        default=64, ge=1, description="Activities one bookkeeper-pool process runs at once."
    )
    offload_concurrency: int = Field(
        default=32, ge=1, description="Activities one offload-pool process runs at once."
    )
    # The SDK's 5 pollers leave the server idle while polls travel to a busy worker and back. Workflow pollers
    # split between the shared and the worker's sticky queue, hence at least 2.
    workflow_task_pollers: int = Field(
        default=32, ge=2, description="Long polls for workflow tasks each worker keeps open (at least 2)."
    )
    activity_task_pollers: int = Field(
        default=32, ge=1, description="Long polls for activity tasks each worker keeps open."
    )
    ingest_max_inflight: int = Field(
        default=1000, ge=1, description="Messages one process holds received but not yet acked, at most."
    )
    # A broker that stops dispatching to a consumer must not leave the backlog stuck (docs/reliability.md).
    ingest_resubscribe_idle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Seconds without a message after which the ingest loop subscribes a fresh consumer; "
        "0: never.",
    )
    # An activity then starts eagerly on the worker whose workflow scheduled it, with no task-queue round trip
    # through the server; the pools can no longer be deployed and scaled apart.
    colocate_pools: bool = Field(
        default=False,
        description="Put every pool on one task queue, for processes that each run all pools (--pool all).",
    )
    # The sandbox catches a non-deterministic call (clock, random, I/O) in workflow code when it runs. The
    # workflow code is the project's own: the workflow tests run it sandboxed and the replay tests both ways,
    # so the service runs it without the sandbox's CPU cost.
    workflow_sandbox: bool = Field(
        default=False, description="Run workflow code in the Temporal SDK's sandbox (a development aid)."
    )
    shutdown_grace_seconds: float = Field(
        default=20.0,
        ge=0,
        description="After SIGTERM, how long a pulsar-pool process waits for the messages it holds to be "
        "acked, seconds.",
    )

    # Rollout (docs/rollout.md): what a process deletes for real, how fast, and the kill switch it obeys.
    mode: Mode = Field(
        default=Mode.LIVE,
        description="live: delete what every check allows; shadow: make the same decisions and delete "
        "nothing, recording what would be deleted (WOULD_DELETE), reading the deletion topics on a "
        "subscription of its own (<subscription>-shadow) with task queues of its own (<prefix>-shadow-*), "
        "so a live deployment later finds every request still there. Also `worker --mode`.",
    )
    live_allow: str = Field(
        default="",
        description="Tenants and namespaces (tenant or tenant/namespace, comma-separated) a live process "
        "deletes in; any other request it decides in shadow and dead-letters, to be replayed once the list "
        "is widened; empty: every tenant.",
    )
    live_deny: str = Field(
        default="",
        description="Tenants and namespaces a live process never deletes in (decided in shadow and "
        "dead-lettered for replay, as outside the allow-list), whatever LEDGER_DELETION_LIVE_ALLOW says.",
    )
    bk_deletes_per_second: float = Field(
        default=0.0,
        ge=0,
        description="BookKeeper ledgers deleted per second, across every bookkeeper-pool process "
        "(Temporal's task-queue rate limit, enforced by the server): held over a minute, while within one "
        "second a burst of 2-4 times the rate gets through (docs/performance.md, bulk drain); each is a "
        "ZooKeeper delete and a few reads; 0: no limit.",
    )
    offload_deletes_per_second: float = Field(
        default=0.0,
        ge=0,
        description="Offloaded ledgers deleted (or inspected in shadow) per second, across every "
        "offload-pool process (Temporal's task-queue rate limit: held over a minute, short bursts above it, "
        "as for LEDGER_DELETION_BK_DELETES_PER_SECOND): each is two objects (data and index), up to one "
        "DeleteObjects and five HEADs; 0: no limit.",
    )
    kill_switch_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How often a deleting process (bookkeeper, offload pool) reads the kill switch "
        "(ledger-deletion pause), seconds: it sees a pause within about this long. Less than "
        "LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS.",
    )
    # Also how long `pause` waits before it returns: short enough for an operator in an incident, and five
    # looks at the default 2 s, so a slow or missed read of Temporal does not stop deletes by itself.
    kill_switch_stale_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A deleting process whose last read of the kill switch started this long ago deletes "
        "nothing (PauseStateUnknown, retried) until it reads it again, seconds; ledger-deletion pause waits "
        "this long before it returns, so that no delete starts after it has: give the CLI the same value "
        "as the bookkeeper and offload pools (or a larger one).",
    )
    pause_recheck_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a delete held by the kill switch waits before it looks again when no "
        "`ledger-deletion resume` signal comes (the switch turned off in the Temporal UI), seconds; doubled "
        "at each look, up to 600.",
    )

    # Observability: one Prometheus endpoint pair per process (one process per pool in production). Traces go
    # over OTLP when the standard OTEL_* variables are set (ledger_deletion.observability).
    log_level: str = Field(
        default="INFO",
        description="Level of the service's log: DEBUG, INFO, WARNING or ERROR (libraries that log every "
        "request stay at WARNING unless DEBUG).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text: one line per record for people; json: one JSON object per line with the trace "
        "and span ids and the workflow and activity of the record, where it has them.",
    )
    metrics_port: int = Field(
        default=9464, ge=0, le=65535, description="Port of the service's Prometheus endpoint; 0: off."
    )
    temporal_metrics_port: int = Field(
        default=9465, ge=0, le=65535, description="Port of the Temporal SDK's Prometheus endpoint; 0: off."
    )
    metrics_host: str = Field(default="0.0.0.0", description="Address the Prometheus endpoints listen on.")
    # Each refresh is a visibility query and the admin API's topic stats.
    inflight_metric_seconds: float = Field(
        default=60.0,
        ge=0,
        description="How often a pulsar-pool process refreshes the ledger_deletion_inflight_estimate gauge, "
        "seconds; 0: off.",
    )

    # The watcher (``ledger-deletion watch``): catches what leaves Pulsar's metadata as it happens.
    watch_delay_seconds: float = Field(
        default=300.0,
        ge=0,
        description="How long a ledger or offload that left Pulsar's metadata is left to its broker's own "
        "delete, seconds; the watcher then requests the deletion of what is still there.",
    )
    watch_election_path: str = Field(
        default="/ledger-deletion/watcher",
        description="Znode in Pulsar's metadata store under which watcher processes elect the active one; "
        "their ZooKeeper identity needs create and delete rights there (read rights elsewhere).",
    )
    # Finds what no diff can (ledgers never listed, ledgers whose earlier suspects ended, or whose request
    # ended in use) without anyone switching the reconcile schedule on: docs/watcher.md, "Periodic resync".
    watch_resync_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="How often the active watcher resyncs besides its start and reconnections (lists "
        "BookKeeper's ledgers and reads every Pulsar record), seconds: an orphan is requested within "
        "LEDGER_DELETION_WATCH_DELAY_SECONDS plus this; 0: only at start and after reconnections.",
    )
    watch_concurrency: int = Field(
        default=16,
        ge=1,
        description="Suspect checks one watcher process runs at once, and workflow starts it has in flight.",
    )
    reconcile_schedule: str = Field(
        default="",
        description="Cron expression of the periodic reconcile, kept as a Temporal Schedule by the watcher "
        "(e.g. '0 3 * * *', UTC); empty: no schedule.",
    )
    reconcile_command: str = Field(
        default="ledger-deletion reconcile --submit",
        description="Command line the scheduled reconcile runs on a watcher process, split as a shell "
        "would (e.g. a spark-submit of reconcile/spark_submit.py).",
    )
    reconcile_timeout_seconds: float = Field(
        default=6 * 3600.0, gt=0, description="How long one scheduled reconcile may run, seconds."
    )

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

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown level {value!r}; levels are {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("live_allow", "live_deny")
    @classmethod
    def _scope_entries(cls, value: str) -> str:
        parse_scope_entries(value)  # raises ValueError, which pydantic reports against the variable
        return value

    @field_validator("bookkeeper_shared_with")
    @classmethod
    def _shared_with(cls, value: str) -> str:
        if value.strip():
            SharedBookKeeper.parse(value)  # raises ValueError, which pydantic reports against the variable
        return value.strip()

    @field_validator("step_timeout_seconds")
    @classmethod
    def _known_timed_steps(cls, value: dict[str, float]) -> dict[str, float]:
        return _known_steps(value, TIMED_STEPS)

    @property
    def admin_trusted_host_set(self) -> frozenset[str]:
        return frozenset(host.lower() for host in _split(self.admin_trusted_hosts))

    @property
    def pulsar_token_value(self) -> str | None:
        """The Pulsar token in clear, for the clients that send it (``None``: no authentication)."""
        return self.pulsar_token.get_secret_value() if self.pulsar_token else None

    @property
    def audit_store_endpoint(self) -> str | None:
        """Where the audit bucket is: its own endpoint if set, else the offload bucket's (None: AWS)."""
        endpoint = self.audit_s3_endpoint if self.audit_s3_endpoint is not None else self.s3_endpoint
        return endpoint or None

    @property
    def s3_endpoint_alias_list(self) -> tuple[str, ...]:
        return _split(self.s3_endpoint_aliases)

    @property
    def pulsar_metadata_hosts(self) -> str:
        """The ZooKeeper that holds Pulsar's metadata (``/managed-ledgers``, ``/schemas``)."""
        return self.pulsar_metadata_zookeeper or self.zookeeper

    @property
    def shared_bookkeeper(self) -> SharedBookKeeper:
        """Who else writes to this BookKeeper (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH), parsed.

        Raises:
            ConfigurationError: the setting is unset (a process that deletes is refused at start before).
        """
        if not self.bookkeeper_shared_with:
            raise ConfigurationError(
                f"{env_name('bookkeeper_shared_with')} is not set: see {SHARED_BOOKKEEPER_DOCS}"
            )
        return SharedBookKeeper.parse(self.bookkeeper_shared_with)

    @property
    def pulsar_metadata_digest_value(self) -> str | None:
        """Digest credentials for Pulsar's metadata store: its own, else the reading identity's."""
        digest = self.pulsar_metadata_zookeeper_digest
        return digest.get_secret_value() if digest else self.zookeeper_read_digest_value

    @property
    def zookeeper_sasl_value(self) -> str | None:
        """SASL credentials of the identity that deletes ledgers (the bookkeeper pool's)."""
        return self.zookeeper_sasl.get_secret_value() if self.zookeeper_sasl else None

    @property
    def pulsar_metadata_sasl_value(self) -> str | None:
        """SASL credentials for Pulsar's metadata store: its own, else the reading identity's."""
        sasl = self.pulsar_metadata_zookeeper_sasl
        return sasl.get_secret_value() if sasl else self.zookeeper_read_sasl_value

    @property
    def zookeeper_digest_value(self) -> str | None:
        """Digest credentials of the identity that deletes ledgers (the bookkeeper pool's)."""
        return self.zookeeper_digest.get_secret_value() if self.zookeeper_digest else None

    # A reader falls back to the deleting login only where that login is allowed at all: a process that
    # runs the bookkeeper pool (one machine running every pool, one login for everything).
    @property
    def zookeeper_read_digest_value(self) -> str | None:
        """Digest credentials of the identity that reads BookKeeper's ledgers: its own, else the deleter's."""
        digest = self.zookeeper_read_digest or self.zookeeper_digest
        return digest.get_secret_value() if digest else None

    @property
    def zookeeper_read_sasl_value(self) -> str | None:
        """SASL credentials of the identity that reads BookKeeper's ledgers: its own, else the deleter's."""
        sasl = self.zookeeper_read_sasl or self.zookeeper_sasl
        return sasl.get_secret_value() if sasl else None

    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.topic}-DLQ"

    def task_queue(self, pool: str) -> str:
        if pool not in POOLS:
            raise ConfigurationError(f"unknown pool {pool!r}; pools are {', '.join(POOLS)}")
        return f"{self.queue_prefix}-{COLOCATED if self.colocate_pools else pool}"

    @property
    def queue_prefix(self) -> str:
        """The prefix of this process's task queues: a shadow deployment has queues of its own, where no
        delete activity is ever registered."""
        return f"{self.task_queue_prefix}-shadow" if self.mode is Mode.SHADOW else self.task_queue_prefix

    @property
    def ingest_subscription(self) -> str:
        """The subscription this process consumes the deletion topics on: a shadow deployment reads them on
        its own, so the live subscription keeps every request."""
        return f"{self.subscription}-shadow" if self.mode is Mode.SHADOW else self.subscription

    @property
    def live_scope(self) -> LiveScope:
        return LiveScope.of(parse_scope_entries(self.live_allow), parse_scope_entries(self.live_deny))

    @property
    def kill_switch_id(self) -> str:
        """The Temporal Schedule whose paused state is the kill switch of the deployment with this prefix."""
        return f"{self.task_queue_prefix}-kill-switch"

    @property
    def watch_task_queue(self) -> str:
        """The task queue of the watcher's suspect and reconcile workflows and their activities."""
        return f"{self.task_queue_prefix}-watch"

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


def missing_endpoints(settings: Settings, require: Iterable[str]) -> list[str]:
    """The fields of ``require`` (endpoints and declarations) left unset, in order."""
    unknown = set(require) - set(REQUIRED)
    if unknown:
        raise ValueError(f"not endpoints: {', '.join(sorted(unknown))}")
    # The S3 endpoint's empty string is a choice (AWS's own endpoints); every other endpoint's is a gap.
    return [
        field
        for field in dict.fromkeys(require)
        if getattr(settings, field) is None or (getattr(settings, field) == "" and field != "s3_endpoint")
    ]


def pool_endpoints(pools: Iterable[str]) -> tuple[str, ...]:
    """The endpoints a process running ``pools`` connects to, in the order of ``ENDPOINTS``, and the
    declarations it needs: a process running a deleting pool (:data:`DELETING_POOLS`) must be told whether
    its BookKeeper is shared."""
    chosen = tuple(pools)
    wanted = {field for pool in chosen for field in POOL_ENDPOINTS[pool]}
    if any(pool in DELETING_POOLS for pool in chosen):
        wanted.update(DECLARATIONS)
    return tuple(field for field in REQUIRED if field in wanted)


def pool_deletes(pools: Iterable[str]) -> tuple[str, ...]:
    """The stores a process running ``pools`` deletes in (:data:`POOL_DELETES`), e.g. ``("zookeeper",)``."""
    return tuple(dict.fromkeys(store for pool in pools for store in POOL_DELETES.get(pool, ())))


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
