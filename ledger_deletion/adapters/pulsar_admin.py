"""Pulsar admin REST client (httpx): the few read-only calls the service needs.

Redirects are followed by hand, and only into the configured cluster. A broker that does not own a topic's
bundle answers 307 with the owner's web service URL (PulsarWebResource.validateTopicOwnershipAsync:
``Response.temporaryRedirect``, the request URI with the owner's host and port); that is the only redirect
Pulsar's topic endpoints send, so 301/302/303/308 are never followed. A 307 is followed only to a broker of
the configured cluster: the configured admin URL's own address, an address listed in ``trusted_hosts``, or a
broker the cluster itself lists as active (``GET /admin/v2/brokers/<cluster>``, BrokersBase.getActiveBrokers,
asked of the configured admin URL only) — and never from https to http. Elsewhere a 307 can lead: a V1
global namespace replicated to a peer cluster redirects there (validateGlobalNamespaceOwnership), whose
brokers answer about their own metadata, not ours. Such a redirect is refused before anything is sent (the
bearer token included), so no answer from outside the cluster can say that a topic is gone.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, quote, urljoin, urlsplit

import httpx

from ledger_deletion.adapters.oauth2 import TokenSource
from ledger_deletion.adapters.pulsar_security import NO_PULSAR_SECURITY, PulsarSecurity
from ledger_deletion.adapters.tls import client_context
from ledger_deletion.errors import (
    AdminApiUnavailable,
    AuthorizationError,
    InvalidRequestError,
    RedirectRefused,
)

REDIRECT_CODES = {301, 302, 303, 307, 308}
OWNER_REDIRECT = 307
# The cluster's broker list is read again when a redirect names a broker not on it, at most this often: a
# broker that just took over a bundle in a rolling restart registered before it did.
BROKER_LIST_REFRESH_SECONDS = 10.0
DEFAULT_PORTS = {"http": 80, "https": 443}

# What a broker sends when a resource resumes its AsyncResponse with an exception no ExceptionMapper maps
# (Pulsar's WebService.addResourceServlet registers none but UnrecognizedPropertyExceptionMapper): Jersey 2's
# servlet ResponseWriter.failure calls sendError(500, "Request failed.") and Jetty's ErrorHandler renders that
# message in its error page (HTML; JSON {"message": ...} for Accept: application/json). No Pulsar "reason",
# nothing of the exception.
UNMAPPED_EXCEPTION_MESSAGE = "Request failed."
# How a broker's reason begins when it refuses to load a transaction-internal managed ledger as a topic.
TRANSACTION_INTERNAL_REFUSAL = "Can not create transaction system topic"

# The only answers that say a request can never succeed: Pulsar finds the topic name itself invalid
# (AdminResource.validateTopicName: TopicName.get threw IllegalArgumentException;
# validatePartitionedTopicName). Such a request is dead-lettered at once (InvalidRequestError).
INVALID_NAME_REASONS = (
    "Topic name is not valid",
    "Partitioned Topic Name should not contain '-partition-'",
)
# Every other failure is retried (AdminApiUnavailable), then dead-lettered when the retries are spent. A
# broker gives these answers while a rolling restart or a bundle move is under way, so taking them for
# permanent would send a mass of requests to the dead-letter topic:
# - 412 "Failed to find ownership for topic:<t>" (PulsarWebResource.validateTopicOwnershipAsync: no broker's
#   web service URL for the bundle yet, as while it is unloaded or its owner restarts) and 412 "Can't find
#   owner for topic <t>" (the same lookup failing with IllegalArgumentException/IllegalStateException); a 412
#   of a global namespace's replication settings (checkLocalOrGetPeerReplicationCluster), fixed by
#   configuration, is retried the same way;
# - 429 (RateLimitingFilter: sendError(429, "Too Many Requests") past httpRequestsMaxPerSecond);
# - 500 (RestException(Throwable): any exception a resource does not map, a metadata-store timeout among them)
#   and 503 (validateGlobalNamespaceOwnership and the cluster checks: "Failed to validate ... configuration");
# - 409 other than the transaction refusal (resumeAsyncResponseExceptionally maps a metadata-store
#   BadVersionException to "Concurrent modification");
# - any status of a proxy or load balancer in front of the brokers, and a connection reset or timeout.


@dataclass(frozen=True)
class AdminResponse:
    found: bool
    body: Any = None
    served_by: str = ""  # base URL of the broker that answered (the owner, after redirects)
    # Only from ``internal_info(..., unmapped_500_ok=True)``: the broker failed with an unmapped exception
    # (what it says, for the error message). Then ``found`` is False, but the topic was not found missing.
    unmapped_500: str = ""
    # The broker refuses to load the topic at all (a transaction-internal managed ledger): its reason. Then
    # ``found`` is False, but the topic exists; the owner cannot say what it references.
    owner_refuses: str = ""


@dataclass
class PulsarAdminClient:
    base_url: str
    token: str | None = None
    timeout_seconds: float = 10.0
    max_redirects: int = 5
    # Admin addresses a 307 may lead to besides the cluster's listed brokers: "host" (any port) or
    # "host:port" (LEDGER_DELETION_ADMIN_TRUSTED_HOSTS).
    trusted_hosts: frozenset[str] = frozenset()
    # The cluster whose active brokers a 307 may lead to (LEDGER_DELETION_PULSAR_CLUSTER); "" lists none.
    cluster: str = ""
    # As many as the threads calling at once: past httpx's default of 20 kept alive, each extra call opened
    # and closed a TCP connection of its own (and a TLS session, in production).
    max_connections: int = 20
    # TLS (trust store, hostname check, client certificate) and OAuth2, as for the binary client.
    security: PulsarSecurity = NO_PULSAR_SECURITY
    _http: httpx.Client = field(init=False, repr=False)
    _tokens: TokenSource | None = field(default=None, init=False, repr=False)
    _brokers: frozenset[tuple[str, int]] = field(default=frozenset(), init=False, repr=False)
    _brokers_read_at: float | None = field(default=None, init=False, repr=False)
    _brokers_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        security = self.security
        self._http = httpx.Client(
            timeout=self.timeout_seconds,
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=self.max_connections, max_keepalive_connections=self.max_connections
            ),
            verify=client_context(
                security.trust_certs_file,
                security.cert_file,
                security.key_file,
                verify_hostname=security.validate_hostname,
            ),
        )
        if security.oauth2 is not None:
            self._tokens = TokenSource(security.oauth2, timeout_seconds=self.timeout_seconds)

    def close(self) -> None:
        self._http.close()
        if self._tokens is not None:
            self._tokens.close()

    # --- calls ---------------------------------------------------------------------------------------------

    def partitions(self, topic_name: str) -> int:
        """Number of partitions of a partitioned topic; 0 for a non-partitioned or missing topic."""
        return self.partition_count(topic_name) or 0

    def partition_count(self, topic_name: str) -> int | None:
        """Number of partitions of a partitioned topic, 0 for a non-partitioned one; None when Pulsar answers
        its own 404.

        With ``checkAllowAutoCreation=false`` a broker since 2.8 (apache/pulsar#10601; 3.x/4.x
        ``PersistentTopicsBase.internalGetPartitionedMetadataAsync``) answers 0 only for a non-partitioned
        topic whose managed ledger exists (``checkNonPartitionedTopicExists`` →
        ``TopicResources.persistentTopicExists``), and otherwise 404 ``Topic <name> not found``. An older
        broker answers 0 for a missing topic too.

        Raises:
            AdminApiUnavailable: a 200 without Pulsar's ``{"partitions": N}`` (a proxy's empty answer would
                otherwise read as "no such topic" and skip the in-use check), or a 404 that is not Pulsar's.
        """
        response = self._get(f"{topic_path(topic_name)}/partitions", {"checkAllowAutoCreation": "false"})
        if not response.found:
            return None
        body = response.body
        if not isinstance(body, dict) or not isinstance(body.get("partitions"), int):
            raise AdminApiUnavailable(f"partitioned metadata of {topic_name[:80]} has no partition count")
        return int(body["partitions"])

    def internal_info(self, topic_name: str, *, unmapped_500_ok: bool = False) -> AdminResponse:
        """ManagedLedgerInfo from the metadata store (no owner check).

        A broker answers this for a managed ledger that does not exist with a 500, not a 404:
        ``PersistentTopicsBase.internalGetManagedLedgerInfoForNonPartitionedTopic`` resumes the request with
        ``getInfoFailed``'s raw ``ManagedLedgerException`` (``MetadataNotFoundException("Managed ledger not
        found")`` from ``MetaStoreImpl.getManagedLedgerInfo``), which nothing maps (apache/pulsar#17121;
        unchanged in 2.10 through 4.x). Any other exception on that path (a metadata-store timeout) gets the
        same answer, so it tells nothing about the topic. With ``unmapped_500_ok`` that answer comes back as
        ``unmapped_500`` for the caller to settle another way; without it, it raises like any other 500.
        """
        return self._get(f"{topic_path(topic_name)}/internal-info", {}, unmapped_500_ok=unmapped_500_ok)

    def subscription_backlog(self, topic_name: str, subscription: str) -> int:
        """``msgBacklog`` of a subscription: messages published to the topic and not yet acked by it.

        A partitioned topic's ``partitioned-stats`` sums its partitions' (PersistentTopicsBase
        .internalGetPartitionedStats, ``perPartition=false``); for a non-partitioned topic that endpoint
        answers Pulsar's 404 and the topic's own ``stats`` (from its owner, after a 307) has it. 0 when the
        topic or the subscription does not exist: nothing is waiting for it.

        Raises:
            AdminApiUnavailable: an answer without the stats' ``subscriptions`` map.
        """
        path = topic_path(topic_name)
        response = self._get(f"{path}/partitioned-stats", {"perPartition": "false"})
        if not response.found:
            response = self._get(f"{path}/stats", {})
            if not response.found:
                return 0
        body = response.body
        subscriptions = body.get("subscriptions") if isinstance(body, dict) else None
        if not isinstance(subscriptions, dict):
            raise AdminApiUnavailable(f"stats of {topic_name[:80]} without a subscriptions map")
        stats = subscriptions.get(subscription)
        return int(stats.get("msgBacklog", 0)) if isinstance(stats, dict) else 0

    def internal_stats(self, topic_name: str) -> AdminResponse:
        """The owner broker's view of the topic (follows 307 to the owner)."""
        return self._get(
            f"{topic_path(topic_name)}/internalStats", {"authoritative": "false", "metadata": "false"}
        )

    # --- transport -----------------------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, str], *, unmapped_500_ok: bool = False) -> AdminResponse:
        url = urljoin(self.base_url.rstrip("/") + "/", path.lstrip("/"))
        query: dict[str, str] | None = params
        for _ in range(self.max_redirects + 1):
            response = self._send(url, query)
            if response.status_code in REDIRECT_CODES:
                url, query = self._redirect_target(url, response), None  # Location carries the full query
                continue
            return self._interpret(response, url, unmapped_500_ok=unmapped_500_ok)
        raise AdminApiUnavailable(f"more than {self.max_redirects} redirects for {path}")

    def _send(self, url: str, query: dict[str, str] | None) -> httpx.Response:
        """One GET, with the token: every URL sent to is the configured one or a trusted redirect target."""
        headers = {"Accept": "application/json"}
        bearer = self._tokens.token() if self._tokens is not None else self.token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        try:
            response = self._http.get(url, params=query, headers=headers)
        except httpx.RequestError as exc:  # connection refused or reset, timeout, a body cut short
            raise AdminApiUnavailable(
                f"admin API {urlsplit(url).netloc} unreachable: {_request_error(exc)}"
            ) from exc
        if response.status_code == 401 and self._tokens is not None:
            self._tokens.invalidate()  # revoked or expired early: the retry fetches a new one
        return response

    def _redirect_target(self, url: str, response: httpx.Response) -> str:
        """Where a redirect leads, if it may be followed (see the module docstring).

        Raises:
            RedirectRefused: not a 307, no Location, a scheme downgrade, or a target outside the cluster.
            AdminApiUnavailable: the cluster's broker list could not be read.
        """
        here = urlsplit(url).netloc
        if response.status_code != OWNER_REDIRECT:
            raise RedirectRefused(
                f"admin API {here} answered {response.status_code}, a redirect Pulsar's topic endpoints "
                "never send (only 307 to the owner broker is followed)"
            )
        location = response.headers.get("location")
        if not location:
            raise RedirectRefused(f"307 without Location from {here}")
        target = urlsplit(urljoin(url, location))
        origin = urlsplit(self.base_url)
        if origin.scheme == "https" and target.scheme != "https":
            raise RedirectRefused(f"refusing a redirect from https to {target.scheme}://{target.netloc}")
        if target.scheme not in DEFAULT_PORTS or not target.hostname:
            raise RedirectRefused(f"refusing a redirect to {location[:120]!r}")
        if not self._in_cluster(target, origin):
            raise RedirectRefused(
                f"refusing to follow a redirect to {target.netloc}: not a broker of "
                f"{self.cluster or 'the configured admin URL'}'s cluster (a V1 global namespace redirects to "
                "the peer cluster that owns it; list a broker of ours in LEDGER_DELETION_ADMIN_TRUSTED_HOSTS)"
            )
        return str(target.geturl())

    def _in_cluster(self, target: SplitResult, origin: SplitResult) -> bool:
        host, port = _address(target)
        if (host, port) == _address(origin) or {host, f"{host}:{port}"} & self.trusted_hosts:
            return True
        if not self.cluster:
            return False
        brokers = self._cluster_brokers(refresh=False)
        if not _listed(brokers, host, port, target.scheme):
            brokers = self._cluster_brokers(refresh=True)
        return _listed(brokers, host, port, target.scheme)

    def _cluster_brokers(self, *, refresh: bool) -> frozenset[tuple[str, int]]:
        """The web service addresses of the cluster's active brokers, from the configured admin URL (never
        from a redirect target: a 307 there means that URL is not in ``cluster``)."""
        with self._brokers_lock:
            now = time.monotonic()
            fresh = self._brokers_read_at is not None and (
                not refresh or now - self._brokers_read_at < BROKER_LIST_REFRESH_SECONDS
            )
            if fresh:
                return self._brokers
            url = urljoin(self.base_url.rstrip("/") + "/", f"admin/v2/brokers/{quote(self.cluster, safe='')}")
            response = self._send(url, None)
            if response.status_code in (401, 403):
                raise AuthorizationError(
                    f"admin API {urlsplit(url).netloc} refused the broker list of {self.cluster} "
                    f"({response.status_code}): a 307 can be followed only with it"
                )
            if response.status_code != 200:
                raise AdminApiUnavailable(
                    f"cannot read cluster {self.cluster}'s brokers from {urlsplit(url).netloc}: "
                    f"{response.status_code} {response.text[:200]}"
                )
            try:
                listed = response.json()
            except ValueError as exc:
                raise AdminApiUnavailable(f"cluster {self.cluster}'s broker list is not JSON") from exc
            if not isinstance(listed, list):
                raise AdminApiUnavailable(f"cluster {self.cluster}'s broker list is not a list")
            self._brokers = frozenset(_address(urlsplit(f"//{entry}")) for entry in listed)
            self._brokers_read_at = now
            return self._brokers

    @staticmethod
    def _interpret(response: httpx.Response, url: str, *, unmapped_500_ok: bool = False) -> AdminResponse:
        parts = urlsplit(url)
        served_by = f"{parts.scheme}://{parts.netloc}"
        status = response.status_code
        if status == 500 and unmapped_500_ok and _is_unmapped_exception(response):
            return AdminResponse(
                found=False,
                served_by=served_by,
                unmapped_500=f"{parts.netloc} answered 500 {UNMAPPED_EXCEPTION_MESSAGE!r}",
            )
        if status in (409, 500) and (refusal := _transaction_internal_refusal(response)):
            return AdminResponse(found=False, served_by=served_by, owner_refuses=refusal)
        if status == 404:
            if _is_pulsar_error(response):
                return AdminResponse(found=False, served_by=served_by)
            # A proxy, an ingress with a wrong path prefix or a broker without this endpoint answers 404 too.
            # "Not found" skips the in-use check, so only Pulsar's own answer may say it: anything else is
            # an admin API we cannot read, retried and then dead-lettered.
            raise AdminApiUnavailable(
                f"admin API {parts.netloc} answered 404 without Pulsar's error body, not proof the topic "
                f"is gone: {response.text[:200]!r}"
            )
        if status in (401, 403):
            raise AuthorizationError(f"admin API {parts.netloc} answered {status}")
        if status == 412 and _rejects_the_name(response):
            raise InvalidRequestError(f"admin API rejected the topic name ({status}): {response.text[:200]}")
        if status != 200:
            # Everything else may pass: see TRANSIENT_STATUSES. Retried, and dead-lettered with this reason
            # once the retries are spent; never taken for an answer about the topic.
            raise AdminApiUnavailable(f"admin API {parts.netloc} answered {status}: {response.text[:200]}")
        try:
            return AdminResponse(found=True, body=response.json(), served_by=served_by)
        except ValueError as exc:
            raise AdminApiUnavailable(f"admin API {parts.netloc} sent invalid JSON") from exc


def _request_error(exc: httpx.RequestError) -> str:
    """The error's type, and for a failed TLS handshake why (a certificate the trust store does not
    vouch for, or one without the host's name), which says which setting to look at."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"TLS: certificate verify failed: {cause.verify_message} "
            "(LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE, "
            "LEDGER_DELETION_PULSAR_TLS_VALIDATE_HOSTNAME)"
        )
    if isinstance(cause, ssl.SSLError):
        return f"TLS: {cause.reason or type(cause).__name__}"
    return type(exc).__name__


def _address(parts: SplitResult) -> tuple[str, int]:
    """(host, port) of a URL, the scheme's default port when none is given."""
    return (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme, 80)


def _listed(brokers: frozenset[tuple[str, int]], host: str, port: int, scheme: str) -> bool:
    """Is ``host:port`` one of the listed brokers? A broker is listed at its plain web port when it has one
    (its id is advertisedAddress:webServicePort), while a redirect over https names its TLS port: over https
    the listed host is enough, the certificate proves it."""
    return (host, port) in brokers or (scheme == "https" and any(host == h for h, _ in brokers))


def _is_pulsar_error(response: httpx.Response) -> bool:
    """Is this Pulsar's error entity, ``{"reason": "..."}`` (``RestException`` → ``ErrorData``, JSON)?"""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("reason"), str)


def _rejects_the_name(response: httpx.Response) -> bool:
    """Is this Pulsar's 412 for a topic name it finds invalid (``INVALID_NAME_REASONS``)?"""
    try:
        body = response.json()
    except ValueError:
        return False
    reason = body.get("reason") if isinstance(body, dict) else None
    return isinstance(reason, str) and reason.startswith(INVALID_NAME_REASONS)


def _transaction_internal_refusal(response: httpx.Response) -> str:
    """The reason of a broker refusing to load a transaction-internal managed ledger as a topic, or "".

    ``BrokerService.createPersistentTopic0`` fails ``TopicName.isTransactionInternalName`` topics (the
    coordinator's log, pending-ack stores) with NotAllowedException("Can not create transaction system topic
    <topic>"); the admin API answers it as a 409 (2.11 and later) or a 500, with Pulsar's error body.
    """
    try:
        body = response.json()
    except ValueError:
        return ""
    reason = body.get("reason") if isinstance(body, dict) else None
    if isinstance(reason, str) and reason.startswith(TRANSACTION_INTERNAL_REFUSAL):
        return reason[:300]
    return ""


def _is_unmapped_exception(response: httpx.Response) -> bool:
    """Is this the broker's answer to an exception nothing maps (see ``UNMAPPED_EXCEPTION_MESSAGE``)?

    Pulsar's own errors (``RestException``) carry ``{"reason": ...}`` and are not this; nor is a proxy's 500
    page, which lacks Jersey's message.
    """
    return not _is_pulsar_error(response) and UNMAPPED_EXCEPTION_MESSAGE in response.text


def topic_path(topic_name: str) -> str:
    """REST path of a persistent topic: V2 ``tenant/ns/local``, V1 ``tenant/cluster/ns/local``, either with
    or without its ``persistent://`` domain (requests name topics without it, settings with it).

    The local part arrives in its encoded (managed-ledger) form, which Pulsar expects in the path as is.
    """
    domain, separator, rest = topic_name.partition("://")
    if separator:
        if domain != "persistent":
            raise InvalidRequestError(f"topic {topic_name[:80]!r} is not persistent: it has no ledgers")
        topic_name = rest
    parts = topic_name.split("/")
    encoded = [quote(p, safe="%+*=:") for p in parts]
    if len(parts) == 3:
        return "/admin/v2/persistent/" + "/".join(encoded)
    if len(parts) == 4:
        return "/admin/persistent/" + "/".join(encoded)
    raise InvalidRequestError(f"topic name {topic_name[:80]!r} has {len(parts)} parts, expected 3 or 4")


def completely_offloaded(stats: dict[str, Any]) -> set[int]:
    """Ledgers internalStats lists with ``offloaded`` (an OffloadContext that is complete): the broker reads
    them from tiered storage, not from BookKeeper."""
    return {
        int(ledger["ledgerId"]) for ledger in stats.get("ledgers") or [] if ledger.get("offloaded") is True
    }


def listed_ledgers(stats: dict[str, Any]) -> list[int]:
    """The topic's own ledger list in internalStats (``ledgers``), as ids."""
    return [int(ledger["ledgerId"]) for ledger in stats.get("ledgers") or []]


def ledgers_in_use(stats: object) -> dict[int, str]:
    """Every ledger the owner broker references, with what references it.

    In use = topic ledgers ∪ cursor ledgers ∪ schema ledgers ∪ compacted ledger (PIP-186's set plus the
    compacted ledger, which its PR forgot).

    Raises:
        AdminApiUnavailable: an answer without internalStats' ``ledgers`` list (the broker always sends it,
            empty for a topic without ledgers). An empty ``{}`` from a proxy, or another endpoint's body,
            would otherwise read as "references nothing" and let a ledger in use be deleted.
    """
    if not isinstance(stats, dict) or not isinstance(stats.get("ledgers"), list):
        shape = sorted(stats)[:5] if isinstance(stats, dict) else type(stats).__name__
        raise AdminApiUnavailable(
            f"the owner broker's answer is not internalStats (no ledgers list; got {shape}): "
            "it cannot show that the ledger is unused"
        )
    refs: dict[int, str] = {}
    for ledger in stats["ledgers"]:
        refs[int(ledger["ledgerId"])] = "ledgers"
    for name, cursor in (stats.get("cursors") or {}).items():
        ledger_id = int(cursor.get("cursorLedger", -1))
        if ledger_id >= 0:
            refs.setdefault(ledger_id, f"cursor:{name}")
    for ledger in stats.get("schemaLedgers") or []:
        refs.setdefault(int(ledger["ledgerId"]), "schema")
    compacted = int((stats.get("compactedLedger") or {}).get("ledgerId", -1))
    if compacted >= 0:
        refs.setdefault(compacted, "compacted")
    return refs
