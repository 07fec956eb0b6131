"""ZooKeeper access (kazoo): BookKeeper's ledger metadata, and Pulsar's metadata store, read-only.

:class:`LedgerReader` reads ledger znodes and has no way to change them: the workflow pool's read-only checks
hold it. :class:`LedgerStore` adds the compare-and-delete, and only the bookkeeper pool holds one. Every
ledger path either touches is checked to lie under the configured ledgers root, so no request can make the
service read or delete anything else in ZooKeeper. :class:`PulsarMetadataStore` only reads: managed ledgers,
cursors and schema locators. BookKeeper's and Pulsar's may be one ZooKeeper (Pulsar's default deployment) or
two; each client keeps its own session.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionClosedRequireSaslError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from ledger_deletion.errors import (
    AuthorizationError,
    ConfigurationError,
    InvalidRequestError,
    LedgerDeletionError,
    LedgersRootNotFound,
    MetadataStoreUnavailable,
    PulsarMetadataNotFound,
)
from ledger_deletion.formats.bk_paths import LAYOUT_ZNODE, is_under_root, ledger_path

# kazoo's default reconnect backoff doubles without a useful cap (max_delay 3600 s): after a ZooKeeper outage
# of T seconds the next attempt can come up to ~T seconds after the server is back. The server gives restored
# sessions one session timeout to reconnect, so a late client loses its session and every request queued
# meanwhile fails with SessionExpiredError. Retrying about once a second (plus kazoo's jitter of up to 0.4 s)
# keeps the session and resumes work as soon as ZooKeeper answers.
RECONNECT_MAX_DELAY_SECONDS = 1.0

log = logging.getLogger(__name__)

SCHEMAS_ROOT = "/schemas"  # BookkeeperSchemaStorage's SchemaPath
MANAGED_LEDGERS_ROOT = "/managed-ledgers"  # MetaStoreImpl's BASE_NODE


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """SASL and TLS of a ZooKeeper connection; digest credentials travel apart, as kazoo's auth data.

    SASL is DIGEST-MD5 (a user of the server's JAAS ``DigestLoginModule``), which kazoo does through
    pure-sasl. TLS goes to the server's ``secureClientPort``: its certificate is checked against ``ca_file``
    (the system's trust store when empty) and, unless ``verify_hostname`` is False, its name as ZooKeeper's
    own client checks it (``zookeeper.ssl.hostnameVerification``); ``cert_file``/``key_file`` answer the
    server's ``ssl.clientAuth``.
    """

    sasl: str | None = None  # "user:password"
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    verify_hostname: bool = True

    def kazoo_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.sasl:
            user, _, password = self.sasl.partition(":")
            options["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": user, "password": password}
        if self.tls:
            options.update(
                use_ssl=True,
                verify_certs=True,
                check_hostname=self.verify_hostname,
                ca=self.ca_file or None,
                certfile=self.cert_file or None,
                keyfile=self.key_file or None,
            )
        return options


NO_SECURITY = ZooKeeperSecurity()


class _ClosingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's handler, closing the socket of a connection attempt that failed.

    kazoo's ``create_tcp_connection`` (kazoo/handlers/utils.py, 2.10 and 2.11) wraps a new socket for TLS,
    and when the handshake fails (a certificate the server refuses, a host name it does not carry) re-raises
    without closing it: one socket per attempt left to the garbage collector, and a client retries forever.
    The socket is reachable only from the failed call's frame, so it is closed from the traceback.
    """

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().create_connection(*args, **kwargs)
        except BaseException as exc:
            trace = exc.__traceback__
            while trace is not None:
                for value in list(trace.tb_frame.f_locals.values()):
                    if isinstance(value, socket.socket):
                        value.close()
                trace = trace.tb_next
            raise


def kazoo_client(
    hosts: str,
    timeout_seconds: float,
    auth_data: list[tuple[str, str]] | None = None,
    security: ZooKeeperSecurity = NO_SECURITY,
    **options: Any,
) -> KazooClient:
    """An unstarted kazoo client that reconnects forever, never pausing long (see the comment above)."""
    return KazooClient(
        hosts=hosts,
        timeout=timeout_seconds,
        auth_data=auth_data,
        connection_retry=KazooRetry(max_tries=-1, max_delay=RECONNECT_MAX_DELAY_SECONDS),
        **security.kazoo_options(),
        **{"handler": _ClosingHandler(), **options},
    )


# ``LAYOUT``: "<layout format version>\n<manager factory class>:<manager version>" (BookKeeper's
# LedgerLayout). Pulsar's own metadata driver (PulsarLedgerManager) uses the same hybrid hierarchical paths.
SUPPORTED_LEDGER_MANAGERS = frozenset(
    {
        "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
        "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory",
    }
)


def supported_ledger_manager(layout: bytes) -> str:
    """The manager factory class of a ``LAYOUT`` znode's content, if it is one whose paths this code uses."""
    lines = layout.decode("utf-8", errors="replace").strip().splitlines()
    factory = lines[1].rsplit(":", 1)[0].strip() if len(lines) >= 2 else ""
    if factory in SUPPORTED_LEDGER_MANAGERS:
        return factory
    raise ConfigurationError(
        f"BookKeeper's LAYOUT names ledger manager {factory or layout[:80]!r}; only the default "
        "hierarchical manager's ledger paths are supported, so every ledger would be looked for in the "
        "wrong place"
    )


class ZooKeeperSession:
    """One lazily started kazoo session, and the translation of kazoo's errors into the project's tree."""

    def __init__(
        self,
        hosts: str,
        timeout_seconds: float,
        digest: str | None,
        security: ZooKeeperSecurity = NO_SECURITY,
    ) -> None:
        self.hosts = hosts
        self._timeout_seconds = timeout_seconds
        self._digest = digest  # "user:password"
        self._security = security
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    def client(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                auth = [("digest", self._digest)] if self._digest else None
                client = kazoo_client(self.hosts, self._timeout_seconds, auth, self._security)
                try:
                    client.start(timeout=self._timeout_seconds)
                except KazooTimeoutError as exc:
                    client.close()
                    hints = []
                    if self._security.tls:
                        hints.append(" over TLS (check the secure port and LEDGER_DELETION_ZOOKEEPER_TLS_*)")
                    hints.append(self._sasl_hint())
                    raise MetadataStoreUnavailable(
                        f"ZooKeeper {self.hosts} unreachable{''.join(hints)}"
                    ) from exc
                except (AuthFailedError, SessionClosedRequireSaslError) as exc:
                    client.close()
                    raise AuthorizationError(
                        f"ZooKeeper {self.hosts} requires a SASL login it did not get "
                        f"({type(exc).__name__}): check LEDGER_DELETION_ZOOKEEPER_SASL or _READ_SASL"
                    ) from exc
                except KazooException as exc:
                    client.close()
                    raise MetadataStoreUnavailable(f"ZooKeeper {self.hosts}: {type(exc).__name__}") from exc
                self._client = client
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """A znode's data and stat, or None when it does not exist."""
        with self.translated():
            try:
                data, stat = self.client().get(path)
            except NoNodeError:
                return None
        return data or b"", stat

    def _sasl_hint(self) -> str:
        # The server drops a connection whose SASL login fails: to the client it is a connection lost.
        return (
            " (or a SASL login it refused: LEDGER_DELETION_ZOOKEEPER_SASL or _READ_SASL)"
            if self._security.sasl
            else ""
        )

    @contextmanager
    def translated(self) -> Iterator[None]:
        try:
            yield
        except NoAuthError as exc:
            raise AuthorizationError(f"ZooKeeper {self.hosts} refused access (NoAuth)") from exc
        except SessionClosedRequireSaslError as exc:  # enforce.auth.schemes=sasl, and no login was made
            raise AuthorizationError(
                f"ZooKeeper {self.hosts} requires a SASL login it did not get: check "
                "LEDGER_DELETION_ZOOKEEPER_SASL or _READ_SASL"
            ) from exc
        except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError) as exc:
            raise MetadataStoreUnavailable(
                f"ZooKeeper {self.hosts}: {type(exc).__name__}{self._sasl_hint()}"
            ) from exc
        except KazooException as exc:
            raise MetadataStoreUnavailable(f"ZooKeeper {self.hosts}: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class Znode:
    data: bytes
    version: int
    ctime_ms: int
    mtime_ms: int


@dataclass
class LedgerReader:
    """Read ledger znodes and check that the ledgers root is BookKeeper's; no method here changes anything."""

    hosts: str
    ledgers_root: str = "/ledgers"
    timeout_seconds: float = 10.0
    digest: str | None = None  # "user:password"
    security: ZooKeeperSecurity = NO_SECURITY
    _session: ZooKeeperSession = field(init=False, repr=False)
    _formatted: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.ledgers_root.startswith("/") or self.ledgers_root.rstrip("/") == "":
            raise ConfigurationError(f"ledgers root {self.ledgers_root!r} must be an absolute, non-root path")
        self._session = ZooKeeperSession(self.hosts, self.timeout_seconds, self.digest, self.security)

    def close(self) -> None:
        self._session.close()

    def path_of(self, ledger_id: int) -> str:
        path = ledger_path(ledger_id, self.ledgers_root)
        self._guard(path)  # reads as well as deletes: every path this adapter uses is checked
        return path

    def read(self, ledger_id: int) -> Znode | None:
        """The ledger's znode, or None when it does not exist."""
        found = self._session.get(self.path_of(ledger_id))
        if found is None:
            return None
        data, stat = found
        return Znode(data=data, version=stat.version, ctime_ms=stat.ctime, mtime_ms=stat.mtime)

    def check_layout(self) -> str:
        """The ledger manager named in ``<root>/LAYOUT``, refused unless it is BookKeeper's default.

        Ledger paths here are the hierarchical manager's (legacy path below 2^31, long path above). A
        cluster formatted with another manager keeps its ledgers elsewhere, and a root without LAYOUT is no
        BookKeeper's at all: either way every request would find no znode and be acked as already deleted
        while the orphan stays.

        Raises:
            ConfigurationError: no LAYOUT, another ledger manager, or a LAYOUT this code cannot read.
        """
        return self._check_layout(ConfigurationError)

    def confirm_formatted(self) -> None:
        """Raise unless the ledgers root is BookKeeper's (has ``LAYOUT``): only there does "no znode" mean
        "no ledger". Asked when a ledger is not found; a root seen formatted once stays so.

        Raises:
            LedgersRootNotFound: no ``<root>/LAYOUT``.
            ConfigurationError: a LAYOUT of another ledger manager (the start-up check was skipped while
                ZooKeeper was out of reach): its ledgers are elsewhere, so "not found" proves nothing.
        """
        if not self._formatted:
            self._check_layout(LedgersRootNotFound)

    def _check_layout(self, missing: type[LedgerDeletionError]) -> str:
        """The supported manager named in ``<root>/LAYOUT`` (remembered as formatted); ``missing`` without."""
        found = self._session.get(f"{self.ledgers_root.rstrip('/')}/{LAYOUT_ZNODE}")
        if found is None:
            raise missing(self._not_formatted())
        manager = supported_ledger_manager(found[0])
        self._formatted = True
        return manager

    def _not_formatted(self) -> str:
        return (
            f"no {self.ledgers_root.rstrip('/')}/{LAYOUT_ZNODE} on ZooKeeper {self.hosts}: not a BookKeeper "
            "ledgers root (every formatted one has it); check LEDGER_DELETION_ZOOKEEPER (with its chroot) "
            "and LEDGER_DELETION_BK_LEDGERS_ROOT"
        )

    def _guard(self, path: str) -> bool:
        if not is_under_root(path, self.ledgers_root):
            raise ConfigurationError(
                f"refusing to touch {path!r}: outside the ledgers root {self.ledgers_root!r}"
            )
        return True


@dataclass
class LedgerStore(LedgerReader):
    """A :class:`LedgerReader` that can also compare-and-delete ledger znodes: the bookkeeper pool's."""

    def delete(self, ledger_id: int, version: int) -> bool | None:
        """Delete the znode only if it still has ``version``.

        Returns True when deleted, None when it was already gone, False when its version changed.
        """
        path = self.path_of(ledger_id)
        self._guard(path)
        with self._translated():
            try:
                self._zk().delete(path, version=version)
            except NoNodeError:
                return None
            except BadVersionError:
                return False
        self._prune_empty_parents(path)
        return True

    def _prune_empty_parents(self, path: str) -> None:
        """As BookKeeper does after a delete: remove now-empty intermediate znodes, never the root itself.

        Best effort, after the ledger is gone: a connection lost here must not fail the delete, whose retry
        would find no znode and report the ledger as deleted by someone else. An empty parent left behind
        costs nothing; BookKeeper's own garbage collection prunes it too.
        """
        root = self.ledgers_root.rstrip("/")
        parent = path.rsplit("/", 1)[0]
        while parent != root and self._guard(parent):
            try:
                self._zk().delete(parent)
            except (NotEmptyError, NoNodeError):
                return
            except (KazooException, KazooTimeoutError, MetadataStoreUnavailable) as exc:
                log.info("left empty parent %s of a deleted ledger: %s", parent, type(exc).__name__)
                return
            parent = parent.rsplit("/", 1)[0]

    def _zk(self) -> KazooClient:
        return self._session.client()

    def _translated(self) -> AbstractContextManager[None]:
        return self._session.translated()


@dataclass
class PulsarMetadataStore:
    """Reads of a Pulsar cluster's own metadata store (``metadataStoreUrl``), where managed ledgers and schema
    locators live: this cluster's, and one per other cluster sharing the BookKeeper
    (``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH``), each read with the same reading credentials as ours."""

    hosts: str
    timeout_seconds: float = 10.0
    digest: str | None = None  # "user:password"
    security: ZooKeeperSecurity = NO_SECURITY
    _session: ZooKeeperSession = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._session = ZooKeeperSession(self.hosts, self.timeout_seconds, self.digest, self.security)

    def close(self) -> None:
        self._session.close()

    def read_managed_ledger(self, managed_ledger_name: str) -> bytes | None:
        """The content of ``/managed-ledgers/<name>`` (a ``ManagedLedgerInfo``), or None when there is none.

        Raises:
            InvalidRequestError: a name that is not ``tenant/[cluster/]ns/persistent/local``.
        """
        return self._read(
            MANAGED_LEDGERS_ROOT, managed_ledger_name, (4, 5), "managed ledger", "a managed ledger name"
        )

    def read_managed_cursor(self, managed_ledger_name: str, cursor_name: str) -> bytes | None:
        """The content of ``/managed-ledgers/<name>/<cursor>`` (a ``ManagedCursorInfo``), or None.

        Raises:
            InvalidRequestError: a managed ledger name or a cursor name (one path segment) that is not valid.
        """
        if "/" in cursor_name:
            raise InvalidRequestError(f"cursor name {cursor_name[:80]!r} is not one path segment")
        return self._read(
            MANAGED_LEDGERS_ROOT,
            f"{managed_ledger_name}/{cursor_name}",
            (5, 6),
            "managed cursor",
            "a managed ledger name and a cursor name",
        )

    def confirm_managed_ledgers_root(self) -> None:
        """A managed ledger or cursor not found proves nothing in a store without ``/managed-ledgers``.

        Raises:
            PulsarMetadataNotFound: no ``/managed-ledgers``: this is not the store Pulsar keeps topics in.
        """
        if self._session.get(MANAGED_LEDGERS_ROOT) is None:
            raise PulsarMetadataNotFound(
                f"ZooKeeper {self.hosts} has no {MANAGED_LEDGERS_ROOT}, so it is not where Pulsar keeps its "
                "topics: set LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER to Pulsar's metadata store"
            )

    def knows_namespace(self, namespace: str) -> bool:
        """Whether this cluster has the namespace ``tenant/ns`` (or v1's ``tenant/cluster/ns``): its
        ``/managed-ledgers/<namespace>`` exists.

        Narrow on purpose, since a namespace being known is what lets its ledgers be deleted. That znode is in
        the cluster's LOCAL metadata store: it is created (as a parent) with the namespace's first managed
        ledger (``MetaStoreImpl.getManagedLedgerInfo``, creating ``/managed-ledgers/<ns>/persistent/<topic>``)
        and removed by the namespace's deletion (``NamespacesBase.internalDeleteNamespace*`` ->
        ``internalClearZkSources`` -> ``TopicResources.clearDomainPersistence`` then
        ``clearNamespacePersistence``). Not ``/admin/policies/<ns>``: that is the configuration store, which
        geo-replicated clusters share, so another cluster's namespace would look like ours. Not
        ``/namespace/<ns>`` (bundle ownership: what it holds depends on the load manager in use) nor
        ``/admin/local-policies/<ns>`` (written only once a local policy is set or a bundle split). A
        namespace that never had a persistent topic may still have schema ledgers (a non-persistent topic's
        schema): unknown, so never deleted, which errs on the side of keeping.

        Raises:
            InvalidRequestError: a namespace that is not ``tenant/ns`` or ``tenant/cluster/ns``.
        """
        segments = namespace.split("/")
        if len(segments) not in (2, 3) or any(part in ("", ".", "..") for part in segments):
            raise InvalidRequestError(f"namespace {namespace[:80]!r} is not tenant/ns or tenant/cluster/ns")
        return self._session.get(f"{MANAGED_LEDGERS_ROOT}/{namespace}") is not None

    def read_schema_locator(self, schema_id: str) -> bytes | None:
        """The content of ``/schemas/<schema_id>`` (a ``SchemaLocator``), or None when there is none.

        Raises:
            InvalidRequestError: a schema id that is not ``tenant/namespace/topic``.
            PulsarMetadataNotFound: no locator, and no ``/schemas`` at all: this store is not the one Pulsar
                writes its schemas to, so "no locator" proves nothing.
        """
        data = self._read(SCHEMAS_ROOT, schema_id, (3,), "schema id", "tenant/namespace/topic")
        if data is None and self._session.get(SCHEMAS_ROOT) is None:
            raise PulsarMetadataNotFound(
                f"ZooKeeper {self.hosts} has no {SCHEMAS_ROOT}, so it is not where Pulsar keeps its "
                "schemas: set LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER to Pulsar's metadata store"
            )
        return data

    def _read(
        self, root: str, name: str, segment_counts: tuple[int, ...], kind: str, form: str
    ) -> bytes | None:
        """``<root>/<name>``'s content, or None; ``name`` must have one of ``segment_counts`` path parts."""
        segments = name.split("/")
        if len(segments) not in segment_counts or any(part in ("", ".", "..") for part in segments):
            raise InvalidRequestError(f"{kind} {name[:80]!r} is not {form}")
        found = self._session.get(f"{root}/{name}")
        return None if found is None else found[0]
