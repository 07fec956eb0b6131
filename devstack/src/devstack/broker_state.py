"""What an emulated broker knows besides the metadata store: its in-memory view of a topic, the passing
failures a test scripts for it, and its topics' subscription backlogs.

A real broker answers ``internalStats`` from memory (``ManagedLedgerImpl``'s ``ledgers`` map), which can
differ from the store: ``internalTrimLedgers`` removes the trimmed ledgers from memory (and marks offloaded
ones ``bookkeeperDeleted`` there) before ``store.asyncUpdateLedgerIds``, and a store write that fails with
anything but BadVersion is not rolled back. :class:`OwnerMemory` holds such a view per topic until the topic
is "reloaded" (a new owner reads the store). :class:`ScriptedFaults` makes a broker answer what it answers
during a rolling restart or a bundle move (412 "Failed to find ownership for topic", 503, a dropped
connection, a 307 elsewhere) for a given number of calls. :class:`EmulatorControl` is the tests' client for
both. Dev/test tooling, not product code.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb

ANY_ENDPOINT = "*"
CONTROL_PREFIX = "/_emulator"  # the test hooks' paths; no Pulsar endpoint lives there


def full_topic_name(topic: str) -> str:
    return topic if topic.startswith("persistent://") else f"persistent://{topic}"


# ---------------------------------------------------------------------------------------------------------
# The owner's memory
# ---------------------------------------------------------------------------------------------------------


class OwnerMemory:
    """Per topic, how the owner's in-memory ledger list differs from the store, when it does.

    Kept as the difference (ledgers dropped from memory, copies marked released there), applied to the
    store's list at each answer: everything else the owner does reaches the store as well (the ledgers a
    later trim drops, a rollover's new ledger), so memory follows the store except where the failed write
    left it behind. The owner's next successful store write persists its memory: once the store drops a
    ledger too, the difference is gone.
    """

    def __init__(self) -> None:
        self._dropped: dict[str, set[int]] = {}
        self._released: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    def view(self, topic: str, stored: ml_pb.ManagedLedgerInfo) -> ml_pb.ManagedLedgerInfo | None:
        """The owner's list for ``topic`` given the store's, or None when they do not differ."""
        name = full_topic_name(topic)
        with self._lock:
            dropped = set(self._dropped.get(name, ()))
            released = set(self._released.get(name, ()))
        if not dropped and not released:
            return None
        view = _copy(stored)
        kept = [li for li in view.ledgerInfo if li.ledgerId not in dropped]
        del view.ledgerInfo[:]
        view.ledgerInfo.extend(kept)
        for li in view.ledgerInfo:
            if li.ledgerId in released:
                li.offloadContext.bookkeeperDeleted = True
        return view

    def diverge(
        self,
        topic: str,
        stored: ml_pb.ManagedLedgerInfo,
        *,
        dropped: Iterable[int] = (),
        bookkeeper_deleted: Iterable[int] = (),
    ) -> ml_pb.ManagedLedgerInfo:
        """Apply a trim whose store write failed: ``dropped`` leave memory, ``bookkeeper_deleted`` ledgers
        are marked so there (as ``internalTrimLedgers`` does before it writes the store). Returns the owner's
        list, given the store's."""
        name = full_topic_name(topic)
        with self._lock:
            self._dropped.setdefault(name, set()).update(dropped)
            self._released.setdefault(name, set()).update(bookkeeper_deleted)
        return self.view(name, stored) or _copy(stored)

    def reload(self, topic: str) -> bool:
        """The topic is loaded again (a new owner, a restart): memory is read from the store from now on."""
        name = full_topic_name(topic)
        with self._lock:
            had = bool(self._dropped.pop(name, None)) | bool(self._released.pop(name, None))
        return had


def _copy(info: ml_pb.ManagedLedgerInfo) -> ml_pb.ManagedLedgerInfo:
    copy = ml_pb.ManagedLedgerInfo()
    copy.CopyFrom(info)
    return copy


# ---------------------------------------------------------------------------------------------------------
# Scripted failures
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """One answer a broker gives instead of serving the call, for the next ``times`` matching calls.

    ``status`` with ``reason`` (Pulsar's error body), or ``location`` (a 307 there), or ``drop_connection``
    (the connection is closed before any answer, as by a broker that dies mid-request).
    """

    endpoint: str = ANY_ENDPOINT  # internalStats, internal-info, partitions, stats, ... or "*"
    times: int = 1
    status: int = 412
    reason: str = ""  # default: validateTopicOwnershipAsync's "Failed to find ownership for topic:<t>"
    location: str = ""
    drop_connection: bool = False
    served: int = field(default=0, compare=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "times": self.times,
            "status": self.status,
            "reason": self.reason,
            "location": self.location,
            "drop_connection": self.drop_connection,
        }


class ScriptedFaults:
    """Faults queued per topic; each call of a matching endpoint consumes one answer of the first fault."""

    def __init__(self) -> None:
        self._queued: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()

    def add(self, topic: str, fault: Fault) -> None:
        with self._lock:
            self._queued.setdefault(full_topic_name(topic), []).append(fault)

    def clear(self, topic: str) -> int:
        """Drop the topic's remaining faults; returns how many answers they still had."""
        with self._lock:
            return sum(f.times - f.served for f in self._queued.pop(full_topic_name(topic), []))

    def take(self, topic: str, endpoint: str) -> Fault | None:
        with self._lock:
            queued = self._queued.get(full_topic_name(topic), [])
            for fault in queued:
                if fault.endpoint in (ANY_ENDPOINT, endpoint):
                    fault.served += 1
                    if fault.served >= fault.times:
                        queued.remove(fault)
                    return fault
            return None


# ---------------------------------------------------------------------------------------------------------
# Subscription backlogs
# ---------------------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# pulsar-lite's per-subscription gauges (its Prometheus endpoint), by the SubscriptionStats field they fill.
_SUBSCRIPTION_GAUGES = {
    "pulsar_subscription_back_log": "msgBacklog",
    "pulsar_subscription_unacked_messages": "unackedMessages",
    "pulsar_subscription_consumers_count": "consumersCount",
}


@dataclass(frozen=True)
class PartitionBacklog:
    partition: int  # -1: a non-partitioned topic
    subscription: str
    fields: Mapping[str, int]


class SubscriptionMetrics:
    """Subscription stats of pulsar-lite's topics, read from its Prometheus endpoint (cached briefly: it
    refreshes them every few seconds itself)."""

    def __init__(self, metrics_url: str, cache_seconds: float = 1.0) -> None:
        self.metrics_url = metrics_url
        self._cache_seconds = cache_seconds
        self._read_at = 0.0
        self._samples: dict[tuple[str, str], list[PartitionBacklog]] = {}
        self._lock = threading.Lock()

    def of(self, namespace: str, local: str) -> list[PartitionBacklog]:
        """Every (partition, subscription) pulsar-lite reports for ``namespace/local`` (none: unknown topic).

        Raises:
            httpx.HTTPError: pulsar-lite's metrics endpoint cannot be read.
        """
        with self._lock:
            if time.monotonic() - self._read_at > self._cache_seconds:
                self._samples = _parse(httpx.get(self.metrics_url, timeout=5).raise_for_status().text)
                self._read_at = time.monotonic()
            return list(self._samples.get((namespace, local), []))


def _parse(text: str) -> dict[tuple[str, str], list[PartitionBacklog]]:
    merged: dict[tuple[str, str, int, str], dict[str, int]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] not in _SUBSCRIPTION_GAUGES:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        try:
            partition = int(labels.get("partition", "-1"))
        except ValueError:
            partition = -1
        namespace, local = labels.get("namespace", ""), labels.get("topic", "")
        key = (namespace, local, partition, labels.get("subscription", ""))
        merged.setdefault(key, {})[_SUBSCRIPTION_GAUGES[match["name"]]] = int(float(match["value"]))
    found: dict[tuple[str, str], list[PartitionBacklog]] = {}
    for (namespace, local, partition, subscription), fields in sorted(merged.items()):
        found.setdefault((namespace, local), []).append(PartitionBacklog(partition, subscription, fields))
    return found


# ---------------------------------------------------------------------------------------------------------
# The tests' client
# ---------------------------------------------------------------------------------------------------------


class EmulatorControl:
    """Puts an emulated broker into a state a real broker reaches (test hook; both brokers share it)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=10)

    def close(self) -> None:
        self._http.close()

    def fail_trim_store_write(
        self, topic: str, ledger_ids: Iterable[int] = (), *, bookkeeper_deleted: Iterable[int] = ()
    ) -> list[int]:
        """The owner trimmed ``ledger_ids`` (and marked ``bookkeeper_deleted`` copies released) in memory,
        and its store write failed: the store keeps them, the owner no longer does. Returns memory's list."""
        answer = self._http.post(
            f"{CONTROL_PREFIX}/owner-memory",
            json={
                "topic": topic,
                "dropped": list(ledger_ids),
                "bookkeeper_deleted": list(bookkeeper_deleted),
            },
        ).raise_for_status()
        return [int(i) for i in answer.json()["ledgers"]]

    def reload(self, topic: str) -> None:
        """The topic is loaded anew (a new owner reads the store): memory and store agree again."""
        self._http.request("DELETE", f"{CONTROL_PREFIX}/owner-memory", params={"topic": topic})

    def fail_next(self, topic: str, fault: Fault) -> None:
        self._http.post(
            f"{CONTROL_PREFIX}/faults", json={"topic": topic, **fault.as_json()}
        ).raise_for_status()

    def clear_faults(self, topic: str) -> int:
        answer = self._http.request("DELETE", f"{CONTROL_PREFIX}/faults", params={"topic": topic})
        return int(answer.raise_for_status().json()["unserved"])
