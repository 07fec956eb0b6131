"""Pulsar admin REST emulator: the three read-only calls the service makes, served from real metadata.

No Pulsar broker can run here (pulsar-lite has no admin API), so this small Flask app answers ``partitions``,
``internal-info`` and ``internalStats`` from the metadata a broker keeps in ZooKeeper (``/managed-ledgers``,
``/schemas``, ``/admin/partitioned-topics``, BK ledger znodes), with the response shapes of Pulsar's
``PersistentTopics`` endpoints (``PersistentTopicsBase`` in apache/pulsar), errors included: a topic without
a managed ledger gets internal-info's bare 500 and the partitioned metadata's 404, as from a broker since
2.8 (through 4.x). It plays two brokers: each topic is owned by ``brokers[crc32(full topic name) % 2]``, and
the other broker answers ``internalStats`` (and a topic's ``stats``) with a 307 to the owner, as
``validateTopicOwnershipAsync`` does; ``/admin/v2/brokers/<cluster>`` lists both. Optional bearer-token
auth on every request shows that a client keeps its token across that redirect.

What a broker knows only in memory (counters, read positions, the open ledger) is derived from the stored
metadata or left at neutral values, except where a test makes the owner's memory differ from the store
(``devstack.broker_state``: a trim whose store write failed) or scripts the passing failures of a rolling
restart. ``stats`` and ``partitioned-stats`` report the subscriptions pulsar-lite reports on its metrics
endpoint (``--pulsar-metrics``): the deletion topics live there, not in ZooKeeper. Dev/test tooling, not
product code.

Run: ``python -m devstack.admin_emulator --zookeeper 127.0.0.1:12181 --port 18080 --owner-port 18081
--pulsar-metrics http://127.0.0.1:18090/metrics``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import socket
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlencode

import httpx
from cheroot.wsgi import Server as WSGIServer
from flask import Flask, Response, jsonify, request
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from devstack.broker_state import (
    CONTROL_PREFIX,
    Fault,
    OwnerMemory,
    PartitionBacklog,
    ScriptedFaults,
    SubscriptionMetrics,
)
from ledger_deletion.adapters.zookeeper import kazoo_client
from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.bk_metadata import parse_ledger_metadata
from ledger_deletion.formats.bk_paths import DEFAULT_LEDGERS_ROOT, ledger_path
from ledger_deletion.formats.managed_ledger import (
    managed_ledger_name,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_id_for_topic,
    schema_ledger_ids,
)
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb

log = logging.getLogger(__name__)
SERVER_THREADS = 8  # requests served at once per emulated broker
# A broker's Jetty keeps every idle keep-alive connection and takes the OS's accept backlog. cheroot keeps
# 10 (it answers the 11th client with "Connection: close") and accepts a backlog of 5.
ACCEPT_BACKLOG = 1024

COMPACTION_CURSOR = "__compaction"  # Compactor.COMPACTION_SUBSCRIPTION
COMPACTED_TOPIC_LEDGER_PROPERTY = "CompactedTopicLedger"  # Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY
TOPIC_NOT_FOUND = {"reason": "Topic not found"}
DEFAULT_CLUSTER = "standalone"  # the cluster name of a Pulsar standalone
# TopicName.isTransactionInternalName: the transaction coordinator's log and the pending-ack stores are
# managed ledgers a broker opens itself but refuses to load as topics.
TRANSACTION_LOG_PREFIX = "persistent://pulsar/system/__transaction_log_"
PENDING_ACK_STORE_SUFFIX = "__transaction_pending_ack"
PARTITION_NAME = re.compile(r"-partition-\d+$")  # TopicName.isPartitioned (PARTITIONED_TOPIC_SUFFIX + index)
# Jersey 2's servlet ResponseWriter.failure: sendError(500, "Request failed.") for an exception no
# ExceptionMapper maps; Jetty's ErrorHandler puts the message in its error page.
UNMAPPED_EXCEPTION_MESSAGE = "Request failed."
JERSEY_SERVLET = (
    "org.glassfish.jersey.servlet.ServletContainer-6d4e5011"  # ServletHolder's name, as Jetty shows it
)


# ---------------------------------------------------------------------------------------------------------
# Names and ownership
# ---------------------------------------------------------------------------------------------------------


def java_url_encode(text: str) -> str:
    """``URLEncoder.encode(text, UTF_8)`` (Pulsar's ``Codec.encode``): space -> ``+``, ``~`` -> %7E."""
    return quote_plus(text, safe="*").replace("~", "%7E")


@dataclass(frozen=True)
class TopicRef:
    """A persistent topic as addressed by an admin URL; ``local`` is in its encoded (managed-ledger) form."""

    namespace: str  # tenant/ns (V2) or tenant/cluster/ns (V1)
    local: str

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.local}"

    @property
    def full_name(self) -> str:
        return f"persistent://{self.name}"

    @property
    def topic_name(self) -> str:
        """``TopicName.toString()``: the full name, local part decoded, as Pulsar's messages show it."""
        return f"persistent://{self.namespace}/{unquote_plus(self.local)}"

    def partition(self, index: int) -> TopicRef:
        return TopicRef(self.namespace, f"{self.local}-partition-{index}")

    @property
    def managed_ledger_path(self) -> str:
        return f"/managed-ledgers/{managed_ledger_name(self.name)}"

    @property
    def partitioned_metadata_path(self) -> str:
        return f"/admin/partitioned-topics/{self.namespace}/persistent/{self.local}"

    @property
    def schema_path(self) -> str:
        return f"/schemas/{schema_id_for_topic(self.name)}"


def owner_index(topic_name: str, brokers: int = 2) -> int:
    """Which broker owns a topic: ``crc32("persistent://tenant/ns/local") % brokers``.

    ``topic_name`` may be given with or without the ``persistent://`` prefix. Stands in for Pulsar's bundle
    assignment (a hash of the topic name mapped to a namespace bundle owned by one broker).
    """
    full = topic_name if topic_name.startswith("persistent://") else f"persistent://{topic_name}"
    return zlib.crc32(full.encode("utf-8")) % brokers


def _format_date(millis: int) -> str:
    """Pulsar's ``DateFormatter.format``: ISO-8601 with offset (UTC here), millisecond precision."""
    return (
        datetime.fromtimestamp(millis / 1000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _position(ledger_id: int, entry_id: int) -> str:
    return f"{ledger_id}:{entry_id}"  # PositionImpl#toString


# ---------------------------------------------------------------------------------------------------------
# Response bodies (pure functions of the stored records, so they can be tested without a server)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CursorRecord:
    name: str
    info: ml_pb.ManagedCursorInfo
    version: int
    ctime: int
    mtime: int


@dataclass(frozen=True)
class LedgerRecord:
    info: ml_pb.ManagedLedgerInfo
    version: int
    ctime: int
    mtime: int


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    # Pulsar's ObjectMapper leaves null fields out (JsonInclude.NON_NULL).
    return {key: value for key, value in values.items() if value is not None}


def internal_info_body(ml: LedgerRecord, cursors: Sequence[CursorRecord]) -> dict[str, Any]:
    """``org.apache.bookkeeper.mledger.ManagedLedgerInfo`` as ``internal-info`` returns it."""
    info = ml.info
    ledgers = [
        _without_none(
            {
                "ledgerId": li.ledgerId,
                "entries": li.entries if li.HasField("entries") else None,
                "size": li.size if li.HasField("size") else None,
                "timestamp": li.timestamp if li.HasField("timestamp") else None,
                "isOffloaded": li.HasField("offloadContext"),
            }
        )
        for li in info.ledgerInfo
    ]
    terminated = (
        {"ledgerId": info.terminatedPosition.ledgerId, "entryId": info.terminatedPosition.entryId}
        if info.HasField("terminatedPosition")
        else None
    )
    cursor_bodies: dict[str, Any] = {}
    for cursor in cursors:
        ci = cursor.info
        cursor_bodies[cursor.name] = _without_none(
            {
                "version": cursor.version,
                "creationDate": _format_date(cursor.ctime),
                "modificationDate": _format_date(cursor.mtime),
                "cursorsLedgerId": ci.cursorsLedgerId,
                "markDelete": {"ledgerId": ci.markDeleteLedgerId, "entryId": ci.markDeleteEntryId}
                if ci.HasField("markDeleteLedgerId")
                else None,
                "individualDeletedMessages": [
                    {
                        "from": {"ledgerId": r.lowerEndpoint.ledgerId, "entryId": r.lowerEndpoint.entryId},
                        "to": {"ledgerId": r.upperEndpoint.ledgerId, "entryId": r.upperEndpoint.entryId},
                    }
                    for r in ci.individualDeletedMessages
                ]
                or None,
                "properties": {p.name: p.value for p in ci.properties} or None,
            }
        )
    return _without_none(
        {
            "version": ml.version,
            "creationDate": _format_date(ml.ctime),
            "modificationDate": _format_date(ml.mtime),
            "ledgers": ledgers,
            "terminatedPosition": terminated,
            "cursors": cursor_bodies,
            "properties": {kv.key: kv.value for kv in info.properties} or None,
        }
    )


@dataclass(frozen=True)
class StoredLedger:
    """What BookKeeper's metadata says about a ledger outside the managed ledger (schema, compacted)."""

    ledger_id: int
    entries: int
    size: int


def internal_stats_body(
    ml: LedgerRecord,
    cursors: Sequence[CursorRecord],
    schema_ledgers: Sequence[StoredLedger],
    compacted: StoredLedger | None,
) -> dict[str, Any]:
    """``PersistentTopicInternalStats`` as the owner's ``internalStats`` returns it (``metadata=false``)."""
    info = ml.info
    ledgers = [
        {
            "ledgerId": li.ledgerId,
            "entries": li.entries,
            "size": li.size,
            "offloaded": li.HasField("offloadContext") and li.offloadContext.complete,
            "underReplicated": False,
        }
        for li in info.ledgerInfo
    ]
    last = info.ledgerInfo[-1] if info.ledgerInfo else None
    first_ledger = info.ledgerInfo[0].ledgerId if info.ledgerInfo else -1
    cursor_stats: dict[str, Any] = {}
    for cursor in sorted(cursors, key=lambda c: c.name):  # the broker keeps them in a TreeMap
        ci = cursor.info
        if ci.HasField("markDeleteLedgerId"):
            mark_ledger, mark_entry = ci.markDeleteLedgerId, ci.markDeleteEntryId
        else:  # position lives in the cursor ledger, which we cannot read: "before the first entry"
            mark_ledger, mark_entry = first_ledger, -1
        ranges = ", ".join(
            f"({_position(r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId)}.."
            f"{_position(r.upperEndpoint.ledgerId, r.upperEndpoint.entryId)}]"
            for r in ci.individualDeletedMessages
        )
        cursor_stats[cursor.name] = {
            "markDeletePosition": _position(mark_ledger, mark_entry),
            "readPosition": _position(mark_ledger, mark_entry + 1),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": 0,
            "cursorLedger": ci.cursorsLedgerId,
            "cursorLedgerLastEntry": -1,  # would need the cursor ledger's entries
            "individuallyDeletedMessages": f"[{ranges}]",
            "lastLedgerSwitchTimestamp": _format_date(cursor.mtime),
            "state": "Open" if ci.cursorsLedgerId >= 0 else "NoLedger",
            "active": False,
            "numberOfEntriesSinceFirstNotAckedMessage": 0,
            "totalNonContiguousDeletedMessagesRange": 0,
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": {p.name: p.value for p in ci.properties},
        }
    return {
        "entriesAddedCounter": 0,
        "numberOfEntries": sum(li.entries for li in info.ledgerInfo),
        "totalSize": sum(li.size for li in info.ledgerInfo),
        "currentLedgerEntries": last.entries if last else 0,
        "currentLedgerSize": last.size if last else 0,
        "lastLedgerCreatedTimestamp": _format_date(last.timestamp if last else ml.mtime),
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": _position(last.ledgerId, last.entries - 1) if last else "-1:-1",
        "state": "Terminated" if info.HasField("terminatedPosition") else "LedgerOpened",
        "ledgers": ledgers,
        "cursors": cursor_stats,
        "schemaLedgers": [
            {
                "ledgerId": s.ledger_id,
                "entries": s.entries,
                "size": s.size,
                "offloaded": False,
                "underReplicated": False,
            }
            for s in schema_ledgers
        ],
        "compactedLedger": {
            "ledgerId": compacted.ledger_id,
            "entries": compacted.entries,
            "size": compacted.size,
        }
        if compacted
        else {"ledgerId": -1, "entries": -1, "size": -1},
    }


def _subscription_stats(backlog: int, unacked: int) -> dict[str, Any]:
    """``SubscriptionStatsImpl``: the backlog and unacked count pulsar-lite reports, neutral values for
    the rates and times it does not."""
    return {
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "bytesOutCounter": 0,
        "msgOutCounter": 0,
        "msgRateRedeliver": 0.0,
        "messageAckRate": 0.0,
        "chunkedMessageRate": 0,
        "msgBacklog": backlog,
        "backlogSize": 0,
        "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": backlog,
        "blockedSubscriptionOnUnackedMsgs": False,
        "msgDelayed": 0,
        "unackedMessages": unacked,
        "msgRateExpired": 0.0,
        "totalMsgExpired": 0,
        "lastExpireTimestamp": 0,
        "lastConsumedFlowTimestamp": 0,
        "lastConsumedTimestamp": 0,
        "lastAckedTimestamp": 0,
        "lastMarkDeleteAdvancedTimestamp": 0,
        "consumers": [],
        "isDurable": True,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "subscriptionProperties": {},
    }


def topic_stats_body(samples: Sequence[PartitionBacklog], owner: str) -> dict[str, Any]:
    """``TopicStatsImpl`` as ``stats`` returns it; ``samples`` are this topic's (or summed partitions')
    subscriptions. Subscriptions are summed as ``PartitionedTopicStatsImpl.add`` sums them."""
    totals: dict[str, dict[str, int]] = {}
    for sample in samples:
        into = totals.setdefault(sample.subscription, {"msgBacklog": 0, "unackedMessages": 0})
        for name in into:
            into[name] += int(sample.fields.get(name, 0))
    return {
        "msgRateIn": 0.0,
        "msgThroughputIn": 0.0,
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "bytesInCounter": 0,
        "msgInCounter": 0,
        "bytesOutCounter": 0,
        "msgOutCounter": 0,
        "averageMsgSize": 0.0,
        "msgChunkPublished": False,
        "storageSize": 0,
        "backlogSize": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "publishers": [],
        "waitingPublishers": 0,
        "subscriptions": {
            name: _subscription_stats(t["msgBacklog"], t["unackedMessages"]) for name, t in totals.items()
        },
        "replication": {},
        "deduplicationStatus": "Disabled",
        "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "ownerBroker": owner,
    }


def partitioned_stats_body(
    samples: Sequence[PartitionBacklog], partitions: int, owner: str
) -> dict[str, Any]:
    """``PartitionedTopicStatsImpl`` with ``perPartition=false``: the partitions' stats summed, the partition
    count, no per-partition map."""
    return {**topic_stats_body(samples, owner), "metadata": {"partitions": partitions}, "partitions": {}}


# ---------------------------------------------------------------------------------------------------------
# Reading the metadata store
# ---------------------------------------------------------------------------------------------------------


class MetadataReader:
    """Reads a broker's view of a topic from ZooKeeper."""

    def __init__(self, zk: KazooClient, ledgers_root: str = DEFAULT_LEDGERS_ROOT) -> None:
        self.zk = zk
        self.ledgers_root = ledgers_root

    def partitions(self, topic: TopicRef) -> int:
        try:
            data, _ = self.zk.get(topic.partitioned_metadata_path)
        except NoNodeError:
            return 0
        return int(json.loads(data or b"{}").get("partitions", 0))

    def managed_ledger_exists(self, topic: TopicRef) -> bool:
        return self.zk.exists(topic.managed_ledger_path) is not None

    def managed_ledger(self, topic: TopicRef) -> LedgerRecord | None:
        try:
            data, stat = self.zk.get(topic.managed_ledger_path)
        except NoNodeError:
            return None
        return LedgerRecord(parse_managed_ledger_info(data or b""), stat.version, stat.ctime, stat.mtime)

    def cursors(self, topic: TopicRef) -> list[CursorRecord]:
        path = topic.managed_ledger_path
        records: list[CursorRecord] = []
        try:
            names = self.zk.get_children(path)
        except NoNodeError:
            return records
        for name in sorted(names):
            try:
                data, stat = self.zk.get(f"{path}/{name}")
            except NoNodeError:
                continue  # deleted between the listing and the read
            records.append(
                CursorRecord(
                    name, parse_managed_cursor_info(data or b""), stat.version, stat.ctime, stat.mtime
                )
            )
        return records

    def stored_ledger(self, ledger_id: int) -> StoredLedger | None:
        """Entries and size from the ledger's BK metadata; None when the ledger no longer exists."""
        try:
            data, _ = self.zk.get(ledger_path(ledger_id, self.ledgers_root))
        except NoNodeError:
            return None
        md = parse_ledger_metadata(data)
        return StoredLedger(ledger_id, md.last_entry_id + 1, md.length)

    def schema_ledgers(self, topic: TopicRef) -> list[StoredLedger]:
        """Like the broker: the locator's ledgers whose BK metadata exists (missing ones are skipped)."""
        try:
            data, _ = self.zk.get(topic.schema_path)
        except NoNodeError:
            return []
        found = (self.stored_ledger(i) for i in sorted(schema_ledger_ids(parse_schema_locator(data))))
        return [s for s in found if s is not None]

    def compacted_ledger(self, cursors: Sequence[CursorRecord]) -> StoredLedger | None:
        for cursor in cursors:
            if cursor.name != COMPACTION_CURSOR:
                continue
            for prop in cursor.info.properties:
                if prop.name == COMPACTED_TOPIC_LEDGER_PROPERTY:
                    return self.stored_ledger(prop.value) or StoredLedger(prop.value, -1, -1)
        return None


# ---------------------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------------------


def _error(status: int, reason: str) -> Response:
    response = jsonify({"reason": reason})
    response.status_code = status
    return response


def _unmapped_exception() -> Response:
    """A broker's answer when a resource resumes with an exception nothing maps: Jersey's sendError(500,
    "Request failed.") rendered by Jetty 9.4's ErrorHandler, in the first type the Accept header allows."""
    uri = _raw_path()
    for accepted in (part.split(";")[0].strip() for part in request.headers.get("Accept", "*/*").split(",")):
        if accepted in ("application/json", "text/json"):
            fields = {
                "url": uri,
                "status": "500",
                "message": UNMAPPED_EXCEPTION_MESSAGE,
                "servlet": JERSEY_SERVLET,
            }
            return Response(json.dumps(fields), status=500, content_type="application/json")
        if accepted in ("text/html", "text/*", "*/*"):
            rows = (
                ("URI", uri),
                ("STATUS", "500"),
                ("MESSAGE", UNMAPPED_EXCEPTION_MESSAGE),
                ("SERVLET", JERSEY_SERVLET),
            )
            table = "".join(f"<tr><th>{name}:</th><td>{value}</td></tr>\n" for name, value in rows)
            title = f"500 {UNMAPPED_EXCEPTION_MESSAGE}"
            page = (
                f"<html>\n<head>\n<title>Error {title}</title>\n</head>\n"
                f"<body><h2>HTTP ERROR {title}</h2>\n<table>\n{table}</table>\n\n</body>\n</html>\n"
            )
            return Response(page, status=500, content_type="text/html;charset=iso-8859-1")
    return Response(status=500)  # nothing acceptable: Jetty sends no page


def _exception_data(exception: str, message: str) -> str:
    """``RestException.getExceptionData``: the reason of a 500 for an exception Pulsar wraps itself (the
    stack trace's frames left out)."""
    return (
        "\n --- An unexpected error occurred in the server ---\n\n"
        f"Message: {message}\n\nStacktrace:\n\n{exception}: {message}\n"
    )


def _raw_path() -> str:
    """The request path as sent, before percent-decoding: encoded topic names must survive unchanged."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI")
    return str(raw).split("?", 1)[0] if raw else quote(request.path, safe="/")


def _parse_topic(raw_path: str) -> tuple[TopicRef, str] | None:
    """``/admin/v2/persistent/t/ns/local/<op>`` or V1 ``/admin/persistent/t/c/ns/local/<op>``."""
    segments = raw_path.strip("/").split("/")
    if segments[:3] == ["admin", "v2", "persistent"] and len(segments) == 7:
        names = segments[3:6]
    elif segments[:2] == ["admin", "persistent"] and len(segments) == 7:
        names = segments[2:6]
    else:
        return None
    *namespace, local = names
    # JAX-RS hands Pulsar the raw segment (@Encoded); it decodes once (Codec.decode) and the managed-ledger
    # name re-encodes it, so "a%3Ab" and "a:b" address the same topic.
    ref = TopicRef("/".join(unquote(part) for part in namespace), java_url_encode(unquote_plus(local)))
    return ref, segments[-1]


@dataclass
class BrokerState:
    """What both emulated brokers of one emulator share besides ZooKeeper (``devstack.broker_state``)."""

    memory: OwnerMemory
    faults: ScriptedFaults
    backlogs: SubscriptionMetrics | None = None  # None: no pulsar-lite metrics endpoint to read
    cluster: str = DEFAULT_CLUSTER


def _drop_connection() -> Response:
    """Close the client's connection before answering, as a broker that dies mid-request does.

    cheroot keeps the socket inside ``wsgi.input``; it is shut down (with a zero linger, so the close that
    cheroot does next resets it) and left for cheroot to close, which it then does without a reply.
    """
    sock = _socket_of(request.environ.get("wsgi.input"))
    if sock is None:  # another WSGI server: the nearest thing is an answer without a body
        return Response(status=502)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.shutdown(socket.SHUT_RDWR)
    return Response(status=500)  # written to a closed socket: never arrives


def _socket_of(stream: object, depth: int = 0) -> socket.socket | None:
    if isinstance(stream, socket.socket):
        return stream
    if stream is None or depth > 6:
        return None
    for name in ("rfile", "raw", "_sock"):
        found = _socket_of(getattr(stream, name, None), depth + 1)
        if found is not None:
            return found
    return None


def create_app(
    zk: KazooClient,
    *,
    broker_urls: Sequence[str],
    index: int,
    token: str | None = None,
    ledgers_root: str = DEFAULT_LEDGERS_ROOT,
    state: BrokerState | None = None,
) -> Flask:
    """One emulated broker; ``broker_urls[index]`` is its own base URL (the list may be filled later)."""
    app = Flask(f"pulsar-admin-emulator-{index}")
    reader = MetadataReader(zk, ledgers_root)
    shared = state or BrokerState(OwnerMemory(), ScriptedFaults())

    @app.before_request
    def authenticate() -> Response | None:
        # AuthenticationProviderToken: "Authorization: Bearer <jwt>"; compared verbatim here.
        if token is not None and request.headers.get("Authorization") != f"Bearer {token}":
            return _error(401, "HTTP 401 Unauthorized")
        return None

    @app.after_request
    def log_request(response: Response) -> Response:
        log.debug("%s %s -> %d", request.method, request.full_path, response.status_code)
        return response

    @app.errorhandler(KazooException)
    @app.errorhandler(KazooTimeoutError)
    def zookeeper_unavailable(exc: Exception) -> Response:
        return _error(503, f"metadata store unavailable: {type(exc).__name__}")

    @app.errorhandler(MetadataFormatError)
    def corrupt_metadata(exc: MetadataFormatError) -> Response:
        return _error(500, f"cannot read metadata: {exc}")

    @app.get("/health")
    def health() -> Response:
        if not zk.connected:
            return _error(503, "not connected to ZooKeeper")
        return jsonify({"status": "ok", "broker": broker_urls[index]})

    def scripted(topic: TopicRef, endpoint: str) -> Response | None:
        fault = shared.faults.take(topic.full_name, endpoint)
        if fault is None:
            return None
        if fault.drop_connection:
            return _drop_connection()
        if fault.location:
            return Response(status=307, headers={"Location": fault.location})
        # validateTopicOwnershipAsync while no broker's web service URL is known for the bundle.
        return _error(fault.status, fault.reason or f"Failed to find ownership for topic:{topic.topic_name}")

    def topic_route(handler: Callable[[TopicRef], Response], endpoint: str) -> Callable[..., Response]:
        def view(**_: str) -> Response:
            parsed = _parse_topic(_raw_path())
            if parsed is None:
                return _error(412, "Topic name is not valid")  # AdminResource.validateTopicName
            return scripted(parsed[0], endpoint) or handler(parsed[0])

        view.__name__ = handler.__name__
        return view

    def redirect_to_owner(topic: TopicRef) -> Response | None:
        """validateTopicOwnershipAsync: the other broker's URL, same path and query, authoritative."""
        owner = owner_index(topic.full_name, len(broker_urls))
        if owner == index:
            return None
        query = request.args.to_dict(flat=True)
        query["authoritative"] = "true"
        location = f"{broker_urls[owner]}{_raw_path()}?{urlencode(query)}"
        return Response(status=307, headers={"Location": location})

    def partitions(topic: TopicRef) -> Response:
        count = reader.partitions(topic)
        # internalGetPartitionedMetadataAsync (2.8+): without auto-creation (checkAllowAutoCreation=false,
        # the default) 0 partitions are answered only for an existing non-partitioned topic
        # (checkNonPartitionedTopicExists: its managed ledger's znode), else Pulsar's 404.
        auto_create = request.args.get("checkAllowAutoCreation", "false").lower() == "true"
        if count == 0 and not auto_create and not reader.managed_ledger_exists(topic):
            return _error(404, f"Topic {topic.topic_name} not found")  # getTopicNotFoundErrorMessage
        return jsonify({"partitions": count})

    def internal_info(topic: TopicRef) -> Response:
        # internalGetManagedLedgerInfo: read from the metadata store, no owner check. A base name with
        # partitioned metadata is answered from each partition's internal-info (PartitionedManagedLedgerInfo).
        if not PARTITION_NAME.search(topic.local) and (count := reader.partitions(topic)) > 0:
            infos: dict[str, Any] = {}
            for part in (topic.partition(i) for i in range(count)):
                ml = reader.managed_ledger(part)
                if ml is None:
                    # The partition's own answer is the bare 500 below; the admin client makes it a
                    # ServerSideErrorException ("HTTP 500 Server Error", apache/pulsar#19168) that the base
                    # name's handler reports as RestException(t).
                    exception = "org.apache.pulsar.client.admin.PulsarAdminException$ServerSideErrorException"
                    return _error(500, _exception_data(exception, "HTTP 500 Server Error"))
                infos[part.topic_name] = internal_info_body(ml, reader.cursors(part))
            return jsonify({"version": 0, "partitions": infos})
        ml = reader.managed_ledger(topic)
        if ml is None:
            # internalGetManagedLedgerInfoForNonPartitionedTopic: getInfoFailed resumes the request with the
            # raw MetadataNotFoundException("Managed ledger not found"), which no ExceptionMapper maps
            # (apache/pulsar#17121, still so in 4.x): a 500 without Pulsar's error body, never a 404.
            return _unmapped_exception()
        return jsonify(internal_info_body(ml, reader.cursors(topic)))

    def internal_stats(topic: TopicRef) -> Response:
        if (redirect := redirect_to_owner(topic)) is not None:
            return redirect
        name = topic.topic_name
        if name.startswith(TRANSACTION_LOG_PREFIX) or name.endswith(PENDING_ACK_STORE_SUFFIX):
            # getTopicReferenceAsync loads the topic; BrokerService.createPersistentTopic0 refuses with
            # NotAllowedException, which RestException answers as 409 (older brokers: 500), same reason.
            return _error(409, f"Can not create transaction system topic {name}")
        ml = reader.managed_ledger(topic)
        if ml is None:
            return _error(404, TOPIC_NOT_FOUND["reason"])
        # PersistentTopic#getInternalStats lists ManagedLedgerImpl's in-memory ledgers, which a trim whose
        # store write failed left different from the store (OwnerMemory).
        remembered = shared.memory.view(topic.full_name, ml.info)
        if remembered is not None:
            ml = LedgerRecord(remembered, ml.version, ml.ctime, ml.mtime)
        cursors = reader.cursors(topic)
        body = internal_stats_body(
            ml, cursors, reader.schema_ledgers(topic), reader.compacted_ledger(cursors)
        )
        return jsonify(body)

    def subscriptions_of(topic: TopicRef) -> list[PartitionBacklog] | Response:
        if shared.backlogs is None:
            return _error(503, "this emulator reads no pulsar-lite metrics endpoint (--pulsar-metrics)")
        try:
            return shared.backlogs.of(topic.namespace, unquote_plus(topic.local))
        except httpx.HTTPError as exc:
            return _error(503, f"pulsar-lite metrics unavailable: {type(exc).__name__}")

    def own_address() -> str:
        return broker_urls[index].split("://", 1)[-1]

    def stats(topic: TopicRef) -> Response:
        """PersistentTopicsBase.internalGetStatsAsync: the owner's stats of one partition or topic."""
        if (redirect := redirect_to_owner(topic)) is not None:
            return redirect
        base, separator, number = topic.local.rpartition("-partition-")
        if separator and number.isdigit():
            found = subscriptions_of(TopicRef(topic.namespace, base))
            wanted = int(number)
        else:
            found, wanted = subscriptions_of(topic), -1
        if isinstance(found, Response):
            return found
        samples = [s for s in found if s.partition == wanted]
        if not samples:
            return _error(404, f"Topic {topic.topic_name} not found")
        return jsonify(topic_stats_body(samples, own_address()))

    def partitioned_stats(topic: TopicRef) -> Response:
        """internalGetPartitionedStats: any broker sums the partitions' stats; a topic without partitions is
        Pulsar's 404. pulsar-lite's topics have no partitioned metadata in ZooKeeper: the partitions it
        reports are the topic's."""
        found = subscriptions_of(topic)
        if isinstance(found, Response):
            return found
        partitioned = [s for s in found if s.partition >= 0]
        if not partitioned:
            return _error(404, f"Partitioned Topic not found: {topic.topic_name} does not exist")
        count = max(s.partition for s in partitioned) + 1
        return jsonify(partitioned_stats_body(partitioned, count, own_address()))

    for prefix in (
        "/admin/v2/persistent/<tenant>/<namespace>/<topic>",
        "/admin/persistent/<tenant>/<cluster>/<namespace>/<topic>",
    ):
        for endpoint, handler in (
            ("partitions", partitions),
            ("internal-info", internal_info),
            ("internalStats", internal_stats),
            ("stats", stats),
            ("partitioned-stats", partitioned_stats),
        ):
            app.add_url_rule(
                f"{prefix}/{endpoint}",
                view_func=topic_route(handler, endpoint),
                endpoint=f"{prefix}:{endpoint}",
            )

    @app.get("/admin/v2/brokers/<cluster>")
    def active_brokers(cluster: str) -> Response:
        """BrokersBase.getActiveBrokers: the web service addresses (host:port) of the cluster's brokers. A
        broker without authorization takes any cluster name (PulsarWebResource.isValidCluster); with it,
        another cluster's name is redirected there, or 404 when the cluster is unknown (as here)."""
        if token is not None and cluster != shared.cluster:
            return _error(404, f"Cluster does not exist: cluster={cluster}")
        return jsonify(sorted(url.split("://", 1)[-1] for url in broker_urls))

    # --- test hooks (not Pulsar's API) ------------------------------------------------------------------

    def hook_topic() -> TopicRef:
        name = str((request.get_json(silent=True) or {}).get("topic") or request.args.get("topic", ""))
        *namespace, local = name.removeprefix("persistent://").split("/")
        return TopicRef("/".join(namespace), local)

    @app.post(f"{CONTROL_PREFIX}/owner-memory")
    def diverge_memory() -> Response:
        body = request.get_json(force=True)
        topic = hook_topic()
        ml = reader.managed_ledger(topic)
        if ml is None:
            return _error(404, f"no managed ledger for {topic.full_name}")
        view = shared.memory.diverge(
            topic.full_name,
            ml.info,
            dropped=[int(i) for i in body.get("dropped", [])],
            bookkeeper_deleted=[int(i) for i in body.get("bookkeeper_deleted", [])],
        )
        return jsonify({"ledgers": [li.ledgerId for li in view.ledgerInfo]})

    @app.delete(f"{CONTROL_PREFIX}/owner-memory")
    def reload_topic() -> Response:
        return jsonify({"reloaded": shared.memory.reload(hook_topic().full_name)})

    @app.post(f"{CONTROL_PREFIX}/faults")
    def add_fault() -> Response:
        body = request.get_json(force=True)
        fault = Fault(
            endpoint=str(body.get("endpoint", "*")),
            times=int(body.get("times", 1)),
            status=int(body.get("status", 412)),
            reason=str(body.get("reason", "")),
            location=str(body.get("location", "")),
            drop_connection=bool(body.get("drop_connection", False)),
        )
        shared.faults.add(hook_topic().full_name, fault)
        return jsonify(fault.as_json())

    @app.delete(f"{CONTROL_PREFIX}/faults")
    def clear_faults() -> Response:
        return jsonify({"unserved": shared.faults.clear(hook_topic().full_name)})

    return app


class AdminEmulator:
    """Two emulated brokers in one process (threads), sharing one ZooKeeper session.

    Ports may be 0 (pick free ports); :attr:`urls` holds the real base URLs once :meth:`start` returned.
    """

    def __init__(
        self,
        zookeeper: str,
        *,
        host: str = "127.0.0.1",
        port: int = 18080,
        owner_port: int = 18081,
        token: str | None = None,
        ledgers_root: str = DEFAULT_LEDGERS_ROOT,
        pulsar_metrics: str | None = None,
        cluster: str = DEFAULT_CLUSTER,
    ) -> None:
        # Retry the connection forever: the stack starts ZooKeeper and the emulator at the same time, and
        # /health reports 503 until the session is up.
        self.zk = kazoo_client(zookeeper, 10.0)
        self.urls: list[str] = []
        self._servers: list[WSGIServer] = []
        self._threads: list[threading.Thread] = []
        self._spec = (host, (port, owner_port), token, ledgers_root)
        # One memory and one fault script for both brokers: a test sets them through either.
        self.state = BrokerState(
            OwnerMemory(),
            ScriptedFaults(),
            SubscriptionMetrics(pulsar_metrics) if pulsar_metrics else None,
            cluster,
        )

    def start(self) -> AdminEmulator:
        host, ports, token, ledgers_root = self._spec
        self.zk.start_async()
        urls: list[str] = []  # filled below, after binding: with port 0 the URLs are known only then
        for index, port in enumerate(ports):
            app = create_app(
                self.zk,
                broker_urls=urls,
                index=index,
                token=token,
                ledgers_root=ledgers_root,
                state=self.state,
            )
            # cheroot, not werkzeug's development server: that one closes the connection after every
            # response, which a broker (Jetty) does not, and the reconnects cost both sides CPU.
            server = WSGIServer(
                (host, port), app, numthreads=SERVER_THREADS, request_queue_size=ACCEPT_BACKLOG
            )
            # Unlimited, as Jetty; cheroot documents None for that, its annotation says int.
            server.keep_alive_conn_limit = None  # type: ignore[assignment]
            server.prepare()  # binds, so the port is known now even when asked for port 0
            self._servers.append(server)
        urls.extend(f"http://{host}:{server.bind_addr[1]}" for server in self._servers)
        self.urls = urls
        for server in self._servers:
            thread = threading.Thread(target=server.serve, name=f"admin-{server.bind_addr[1]}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> AdminEmulator:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    from devstack.ports import DEFAULT  # the stack imports this module: read its ports only when run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--zookeeper", default=f"127.0.0.1:{DEFAULT.zookeeper}", help="ZooKeeper connect string"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    parser.add_argument("--port", type=int, default=DEFAULT.admin, help="broker A (the configured admin URL)")
    parser.add_argument("--owner-port", type=int, default=DEFAULT.admin_owner, help="broker B")
    parser.add_argument(
        "--token", default=None, help="require 'Authorization: Bearer <token>' on every request"
    )
    parser.add_argument("--ledgers-root", default=DEFAULT_LEDGERS_ROOT, help="BookKeeper ledgers root")
    parser.add_argument(
        "--pulsar-metrics", default=None, help="pulsar-lite's /metrics URL, for topic and partitioned stats"
    )
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="the cluster name the brokers belong to")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose:
        log.setLevel(logging.DEBUG)  # one line per request
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    emulator = AdminEmulator(
        args.zookeeper,
        host=args.host,
        port=args.port,
        owner_port=args.owner_port,
        token=args.token,
        ledgers_root=args.ledgers_root,
        pulsar_metrics=args.pulsar_metrics,
        cluster=args.cluster,
    ).start()
    log.info("admin emulator serving %s (ZooKeeper %s)", ", ".join(emulator.urls), args.zookeeper)
    stop.wait()
    emulator.stop()


if __name__ == "__main__":
    main()
