"""Benchmark of the watcher: its memory per 100k topics, and its ZooKeeper reads while brokers roll ledgers.

    python bench/watch_benchmark.py --ledgers 1000000 --rolls-per-minute 3000 --minutes 3

1. A ZooKeeper of its own (``--zk-port``, ``--zk-heap``, ``mntr`` on, forceSync off, data under
   ``--state-dir``) and a cluster from reconcile's generator (``devstack.generator``) written into a chroot
   of it: BookKeeper ledgers, managed ledgers, cursors, schemas. No offloaded objects: the watcher reads
   none of them but in its suspects' checks. Clusters are cached in the state dir.
2. Memory: a full read of Pulsar's metadata into a :class:`~ledger_deletion.watch.snapshot.Snapshot` under
   ``tracemalloc``, the Python memory it keeps afterwards, per managed ledger and per 100k of them; then a
   second read in place (a resync), its peak above what the snapshot keeps. And the issue's shape, built
   in memory (``--scale-topics``, 200k by default): twenty ledgers per topic, half of them offloaded, a
   cursor each, loaded into a snapshot, beside the previous representation (each record's bytes whole, a
   dict entry per cursor) measured in the same run.
3. The resync a starting watcher does (BookKeeper's ids listed, every record read, the unreferenced
   ledgers' metadata read): wall time and the requests ZooKeeper received (``mntr``'s
   ``zk_packets_received``) and the watcher sent.
4. Brokers rolling ledgers (a child process): each roll stores its managed ledger's list with a new
   ledger, then trims the oldest (a rollover followed by a retention trim: two writes), creating and
   deleting the BookKeeper znodes; cursors switch ledgers at their own rate. The watcher follows as in
   production, elected, with its workflow starts counted instead of sent to Temporal. Measured: the
   changes written, the events the watcher received (each change must arrive as one), the znodes it read
   and the requests it sent, its suspects, its CPU.
5. Three reconnections, as a rolling restart of the ensemble makes them: the watcher's connection (through
   a TCP proxy) is cut, brokers change records meanwhile, and it is healed, three times. The bytes the
   watcher read from then to the end (the catch-ups, the reads of what changed, pings), against the bytes
   its start's full resync read; the changes all seen. (tests/integration/test_watcher_zookeeper_restart.py
   restarts a real server.)

Realistic rates come from Pulsar's defaults (``ServiceConfiguration``): a topic rolls its ledger at most
every ``managedLedgerMaxLedgerRolloverTimeMinutes`` (240) and at least ``...MinLedgerRolloverTimeMinutes``
(10) apart; a cursor every ``managedLedgerCursorRolloverTimeInSeconds`` (14400). The table states the
rates measured and scales them per 100k topics.

Results (a JSON file and the table) go to ``--out``, by default
``$XDG_STATE_HOME/ledger-deletion/bench/watch-<utc time>/``, outside the repository; the ZooKeeper this run
started is stopped at the end (``--keep-zookeeper`` leaves it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bench.reconcile_benchmark import launch_zookeeper, packets_received  # noqa: E402
from devstack import ports  # noqa: E402
from devstack.generator import ClusterSpec, plan_cluster, write_plan  # noqa: E402
from devstack.tcp_proxy import TcpProxy  # noqa: E402
from ledger_deletion.adapters.zk_reads import ZkReads  # noqa: E402
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata  # noqa: E402
from ledger_deletion.formats.bk_paths import ledger_path  # noqa: E402
from ledger_deletion.formats.managed_ledger import (  # noqa: E402
    ManagedCursorInfo,
    ManagedLedgerInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    serialize_managed_cursor_info,
    serialize_managed_ledger_info,
)
from ledger_deletion.settings import Settings  # noqa: E402
from ledger_deletion.watch.snapshot import Snapshot  # noqa: E402
from workers.watch_scan import sync_pulsar_metadata  # noqa: E402
from workers.watcher import Watcher  # noqa: E402

PER = 100_000  # results are scaled per this many topics (managed ledgers)


def _state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ledger-deletion"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------------------------------------------------
# ZooKeeper and the cluster
# ---------------------------------------------------------------------------------------------------------


def start_zookeeper(state: Path, port: int, heap: str) -> subprocess.Popen[bytes] | None:
    """A ZooKeeper of this benchmark's own on ``port``; None when the one an earlier run left (``--keep-
    zookeeper``, its pid in the state dir) still answers there.

    Anything else on the port is refused: a cluster of a million ledgers written into somebody else's
    ZooKeeper (the embedded stack's, another benchmark's) would disturb all its users.
    """
    pid_file = state / "zk.pid"
    if _port_open(port):
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        if pid is not None and _is_ours(pid, state / "zoo.cfg"):
            return None
        raise SystemExit(f"port {port} is in use by something else; choose another with --zk-port")
    proc = launch_zookeeper(state, port, heap)
    deadline = time.monotonic() + 120
    while not _port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"ZooKeeper did not start; see {state / 'zk.log'}")
        time.sleep(0.3)
    return proc


def _is_ours(pid: int, config: Path) -> bool:
    """The process ``pid`` is alive and is the ZooKeeper this benchmark started with ``config``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "ZooKeeperServerMain" in cmdline and str(config) in cmdline


class _NoObjects:
    """The generator's S3 client, for a cluster whose offloaded objects nobody reads here."""

    def put_object(self, **_: Any) -> None:
        return None


def cluster(state: Path, zookeeper: str, ledgers: int) -> dict[str, Any]:
    """Generate (or reuse) the cluster of ``ledgers`` ledgers; returns its cache entry."""
    cache = state / f"cluster-{ledgers}.json"
    if cache.exists():
        entry: dict[str, Any] = json.loads(cache.read_text())
        zk = KazooClient(hosts=zookeeper)
        zk.start(timeout=300)  # a restarted ZooKeeper loads its snapshot first
        try:
            if entry.get("complete") and zk.exists(entry["chroot"] + "/ledgers/LAYOUT"):
                return entry
        finally:
            zk.stop()
            zk.close()
    chroot = f"/watch-bench-{ledgers}-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    plan = plan_cluster(ClusterSpec(ledgers=ledgers, seed=ledgers, offloading_fraction=0.4))
    zk = KazooClient(hosts=zookeeper, timeout=30)
    zk.start()
    zk.ensure_path(chroot)
    zk.stop()
    zk.close()
    zk = KazooClient(hosts=zookeeper + chroot, timeout=30)
    zk.start()
    last = [0.0]

    def progress(stage: str, n: int) -> None:
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            print(f"  generating: {stage} {n}", flush=True)

    stats = write_plan(zk, _NoObjects(), plan, bucket="pulsar-offload", progress=progress)
    zk.stop()
    zk.close()
    entry = {
        "ledgers": ledgers,
        "chroot": chroot,
        "complete": True,
        "generate_seconds": round(time.monotonic() - started, 1),
        "bk_ledgers": len(plan.ledgers),
        "managed_ledgers": len(plan.managed_ledgers),
        "cursors": len(plan.cursors),
        "schemas": len(plan.schemas),
        "znodes": stats.znodes,
        "first_free_id": max(i for i, _ in plan.ledgers if i < 2**31) + 1_000_000,
        "ml_names": [name for name, _ in plan.managed_ledgers],
        "cursor_paths": [f"{name}/{c}" for name, c, _ in plan.cursors],
    }
    cache.write_text(json.dumps(entry))
    return entry


# ---------------------------------------------------------------------------------------------------------
# Memory of a full read
# ---------------------------------------------------------------------------------------------------------


def measure_memory(zookeeper: str, chroot: str) -> dict[str, Any]:
    zk = KazooClient(hosts=zookeeper + chroot, timeout=60)
    zk.start()
    try:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        began = time.monotonic()
        snapshot = Snapshot()
        sync_pulsar_metadata(ZkReads(zk), snapshot)
        seconds = time.monotonic() - began
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
        # A resync: the same walk again, into the snapshot in place; its peak above what is kept.
        tracemalloc.reset_peak()
        sync_pulsar_metadata(ZkReads(zk), snapshot)
        peak = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
    finally:
        zk.stop()
        zk.close()
    topics = snapshot.managed_ledger_count
    return {
        "managed_ledgers": topics,
        "cursors": snapshot.cursor_count,
        "schemas": snapshot.schema_count,
        "snapshot_bytes": kept,
        "bytes_per_topic": round(kept / topics),
        "mib_per_100k_topics": round(kept / topics * PER / 2**20, 1),
        "read_seconds_traced": round(seconds, 1),
        "resync_peak_bytes": peak,
        "resync_peak_over_snapshot": round(peak / kept, 3),
    }


def _scale_records(topics: int, ledgers: int, offloaded: int) -> Any:
    """``(ml name, record bytes, cursor name, cursor record bytes)`` per topic, the issue's shape: ids a
    cluster-wide sequence apart (every topic rolls in turn), the oldest ``offloaded`` ledgers offloaded to
    one bucket, realistic entries, sizes and timestamps."""
    rnd = random.Random(42)
    namespaces = [f"tenant-{t}/ns-{n}" for t in range(10) for n in range(10)]
    for topic in range(topics):
        ns = namespaces[topic % len(namespaces)]
        name = f"{ns}/persistent/topic-{topic:07d}-partition-{topic % 16}"
        info = ManagedLedgerInfo()
        for i in range(ledgers):
            li = info.ledgerInfo.add(
                ledgerId=1_000_000 + i * topics + topic,
                entries=rnd.randrange(10_000, 100_000),
                size=rnd.randrange(2**26, 2**30),
                timestamp=1_760_000_000_000 + i * 600_000 + rnd.randrange(60_000),
            )
            if i < offloaded:
                ctx = li.offloadContext
                ctx.uidMsb, ctx.uidLsb = rnd.getrandbits(63), -rnd.getrandbits(63)
                ctx.complete = True
                ctx.timestamp = li.timestamp + 3_600_000
                ctx.driverMetadata.name = "aws-s3"
                for key, value in (
                    ("bucket", "pulsar-offload"),
                    ("region", "eu-west-1"),
                    ("managedLedgerOffloadDriver", "aws-s3"),
                ):
                    ctx.driverMetadata.properties.add(key=key, value=value)
        cursor = ManagedCursorInfo(cursorsLedgerId=1_000_000 + ledgers * topics + topic, markDeleteLedgerId=1)
        yield name, serialize_managed_ledger_info(info), "sub", serialize_managed_cursor_info(cursor)


def _traced(fill: Any) -> tuple[int, Any]:
    """The memory ``fill()``'s result keeps (tracemalloc), and the result."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept_object = fill()
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return kept, kept_object


def measure_scale_memory(topics: int, ledgers: int = 20, offloaded: int = 10) -> dict[str, Any]:
    """The snapshot at ``topics`` topics of the issue's shape, and the previous representation of the same
    records (a dict of each record's bytes, a dict of each cursor's ledger id), measured the same way. The
    records are built first, outside the tracing (the previous representation keeps copies of them)."""
    began = time.monotonic()
    built = list(_scale_records(topics, ledgers, offloaded))

    def previous() -> tuple[dict[str, bytes], dict[tuple[str, str], int]]:
        records: dict[str, bytes] = {}
        cursors: dict[tuple[str, str], int] = {}
        for name, data, cursor, cursor_data in built:
            # Copies, as a read makes its own strings and bytes: the built ones are outside the tracing.
            ml_name = sys.intern((name + "/")[:-1])
            records[ml_name] = bytes(memoryview(data))
            cursor_name = (cursor + "/")[:-1]
            cursors[(ml_name, cursor_name)] = parse_managed_cursor_info(cursor_data).cursorsLedgerId
        return records, cursors

    def compact() -> Snapshot:
        snapshot = Snapshot()
        for name, data, cursor, cursor_data in built:
            snapshot.load(f"/managed-ledgers/{name}", data)
            snapshot.load(f"/managed-ledgers/{name}/{cursor}", cursor_data)
        return snapshot

    before, _ = _traced(previous)
    record_bytes = sum(len(data) for _, data, _, _ in built)
    after, snapshot = _traced(compact)
    assert snapshot.managed_ledger_count == topics and snapshot.cursor_count == topics
    return {
        "topics": topics,
        "ledgers_per_topic": ledgers,
        "offloaded_per_topic": offloaded,
        "cursors_per_topic": 1,
        "record_bytes_per_topic": round(record_bytes / topics),
        "previous_bytes_per_topic": round(before / topics),
        "bytes_per_topic": round(after / topics),
        "ratio_to_previous": round(after / before, 3),
        "seconds": round(time.monotonic() - began, 1),
    }


# ---------------------------------------------------------------------------------------------------------
# Brokers rolling ledgers
# ---------------------------------------------------------------------------------------------------------


def simulate(
    zookeeper: str,
    chroot: str,
    ml_names: list[str],
    cursor_paths: list[str],
    first_id: int,
    rolls_per_minute: float,
    switches_per_minute: float,
    seconds: float,
    results: Any,
) -> None:
    """Roll ledgers and switch cursors at the given rates for ``seconds``; put the counts in ``results``."""
    zk = KazooClient(hosts=zookeeper + chroot, timeout=30)
    zk.start()
    rnd = random.Random(7)
    # Ids no earlier run used either: a run leaves its ledgers in the cached cluster.
    base = first_id + random.Random().randrange(0, 2**31 - 10**8 - first_id, 10**6)
    ids = iter(range(base, 2**31 - 1))
    lock = threading.Lock()
    counts = {"rolls": 0, "trims": 0, "switches": 0, "watched_writes": 0, "missed": 0}

    def new_ledger(ml_name: str) -> int:
        with lock:
            ledger_id = next(ids)
        md = build_pulsar_ledger_metadata(managed_ledger_custom_metadata(ml_name), state="OPEN")
        zk.create(ledger_path(ledger_id), md, makepath=True)
        return ledger_id

    def roll(ml_name: str) -> None:
        path = f"/managed-ledgers/{ml_name}"
        data, stat = zk.get(path)
        info = parse_managed_ledger_info(data)
        new = new_ledger(ml_name)
        info.ledgerInfo.add(ledgerId=new, timestamp=int(time.time() * 1000))
        stat = zk.set(path, serialize_managed_ledger_info(info), version=stat.version)
        writes = 1
        trimmed = None
        if len(info.ledgerInfo) > 2:
            trimmed = info.ledgerInfo[0].ledgerId
            del info.ledgerInfo[0]
            zk.set(path, serialize_managed_ledger_info(info), version=stat.version)
            writes += 1
        if trimmed is not None:
            with contextlib.suppress(NoNodeError):
                zk.delete(ledger_path(trimmed))
        with lock:
            counts["rolls"] += 1
            counts["trims"] += trimmed is not None
            counts["watched_writes"] += writes

    def switch(cursor_path: str) -> None:
        path = f"/managed-ledgers/{cursor_path}"
        data, stat = zk.get(path)
        info = parse_managed_cursor_info(data)
        old = info.cursorsLedgerId if data and info.HasField("cursorsLedgerId") else -1
        info.cursorsLedgerId = new_ledger(cursor_path.rsplit("/", 1)[0])
        zk.set(path, serialize_managed_cursor_info(info), version=stat.version)
        if old >= 0:
            with contextlib.suppress(NoNodeError):
                zk.delete(ledger_path(old))
        with lock:
            counts["switches"] += 1
            counts["watched_writes"] += 1

    def guarded(fn: Any, arg: str) -> None:
        try:
            fn(arg)
        except Exception:  # noqa: BLE001 - a write that lost a race (BadVersion) is simply not counted
            with lock:
                counts["missed"] += 1

    began = time.monotonic()
    done_rolls = done_switches = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        while (elapsed := time.monotonic() - began) < seconds:
            due_rolls = int(elapsed * rolls_per_minute / 60) - done_rolls
            due_switches = int(elapsed * switches_per_minute / 60) - done_switches
            for _ in range(max(0, due_rolls)):
                pool.submit(guarded, roll, rnd.choice(ml_names))
            for _ in range(max(0, due_switches)):
                pool.submit(guarded, switch, rnd.choice(cursor_paths))
            done_rolls += max(0, due_rolls)
            done_switches += max(0, due_switches)
            time.sleep(0.05)
    counts["seconds"] = round(time.monotonic() - began, 1)  # type: ignore[assignment]
    zk.stop()
    zk.close()
    results.put(counts)


class _CountedStarts:
    """Stands in for the Temporal client: the watcher's suspect workflow starts are counted."""

    def __init__(self) -> None:
        self.started = 0

    async def start_workflow(self, *_: Any, **__: Any) -> None:
        self.started += 1


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure_watch(
    zookeeper: str, entry: dict[str, Any], rolls_per_minute: float, switches_per_minute: float, minutes: float
) -> dict[str, Any]:
    hosts = zookeeper + entry["chroot"]
    settings = Settings(
        zookeeper=hosts, watch_delay_seconds=300, watch_election_path="/ledger-deletion/watcher"
    )
    # The watcher reaches Pulsar's store through a proxy the reconnection phase cuts.
    proxy = TcpProxy(zookeeper).start()
    metadata_zk = KazooClient(hosts=proxy.address + entry["chroot"], timeout=30)
    bk_zk = KazooClient(hosts=hosts, timeout=30)
    for zk in (metadata_zk, bk_zk):
        zk.start()
    starts = _CountedStarts()
    watcher = Watcher(settings, cast(Client, starts), metadata_zk, bk_zk, identifier="bench")
    stop = asyncio.Event()
    packets = packets_received(zookeeper)
    cpu, began = _cpu(), time.monotonic()
    task = asyncio.create_task(watcher.run(stop))
    while watcher.stats.resyncs < 1:
        if task.done():
            task.result()
        await asyncio.sleep(0.1)
    resync = {
        "seconds": round(time.monotonic() - began, 1),
        "cpu_seconds": round(_cpu() - cpu, 1),
        "zk_packets": packets_received(zookeeper) - packets,
        "watcher_requests": watcher.reads.requests + watcher.bk_reads.requests,
        "suspects": starts.started,
        "bytes_received": watcher.stats.resync_bytes,
    }
    print(f"resync: {json.dumps(resync)}", flush=True)

    stats0, requests0, starts0 = (
        dict(vars(watcher.stats)),
        watcher.reads.requests,
        starts.started,
    )
    results: Any = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(
        target=simulate,
        args=(
            zookeeper,
            entry["chroot"],
            entry["ml_names"],
            entry["cursor_paths"],
            entry["first_free_id"],
            rolls_per_minute,
            switches_per_minute,
            minutes * 60,
            results,
        ),
    )
    cpu, began = _cpu(), time.monotonic()
    child.start()
    while child.is_alive():
        await asyncio.sleep(0.5)
    counts = results.get(timeout=60)
    # Until the watcher has received an event for every change (or stops receiving any).
    settle = time.monotonic()
    while (
        watcher.stats.events - stats0["events"] < counts["watched_writes"] and time.monotonic() - settle < 60
    ):
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)
    watched_seconds = counts["seconds"]
    events = watcher.stats.events - stats0["events"]
    znodes_read = watcher.stats.znodes_read - stats0["znodes_read"]
    requests = watcher.reads.requests - requests0
    per_minute = 60 / watched_seconds
    watch = {
        "seconds": watched_seconds,
        "rolls": counts["rolls"],
        "cursor_switches": counts["switches"],
        "lost_races": counts["missed"],
        "changes_written": counts["watched_writes"],
        "events_received": events,
        "changes_per_minute": round(counts["watched_writes"] * per_minute),
        "znodes_read_per_minute": round(znodes_read * per_minute),
        "requests_per_minute": round(requests * per_minute),
        "reads_per_change": round(znodes_read / max(1, counts["watched_writes"]), 3),
        "rounds": watcher.stats.rounds - stats0["rounds"],
        "suspects_per_minute": round((starts.started - starts0) * per_minute),
        "watcher_cpu_seconds_per_minute": round((_cpu() - cpu) * 60 / (time.monotonic() - began), 2),
    }
    reconnects = await measure_reconnects(watcher, proxy, zookeeper, entry)
    stop.set()
    await task
    for zk in (metadata_zk, bk_zk):
        zk.stop()
        zk.close()
    proxy.stop()
    return {"resync": resync, "watch": watch, "reconnects": reconnects}


async def measure_reconnects(
    watcher: Watcher,
    proxy: TcpProxy,
    zookeeper: str,
    entry: dict[str, Any],
    turns: int = 3,
    changes: int = 50,
) -> dict[str, Any]:
    """Cut the watcher's connection ``turns`` times, roll ``changes`` topics' ledgers while it is cut,
    heal; the bytes it read from the first cut until it has read every change, against one full resync."""
    writer = KazooClient(hosts=zookeeper + entry["chroot"], timeout=30)
    writer.start()
    rnd = random.Random(11)
    next_id = entry["first_free_id"] + random.Random().randrange(10**8, 2**30, 10**6)
    before, stats0 = watcher.zk_bytes_received, dict(vars(watcher.stats))
    began = time.monotonic()
    wanted: dict[str, bytes] = {}
    for turn in range(1, turns + 1):
        proxy.cut()
        for name in rnd.sample(entry["ml_names"], changes):
            path = f"/managed-ledgers/{name}"
            data, stat = writer.get(path)
            info = parse_managed_ledger_info(data)
            info.ledgerInfo.add(ledgerId=next_id)
            next_id += 1
            if len(info.ledgerInfo) > 2:
                del info.ledgerInfo[0]
            writer.set(path, serialize_managed_ledger_info(info), version=stat.version)
            wanted[path] = writer.get(path)[0]
        await asyncio.sleep(1)
        proxy.heal()
        while watcher.stats.catch_ups < stats0["catch_ups"] + turn:
            await asyncio.sleep(0.1)
        probe = Snapshot()
        for path, data in wanted.items():
            probe.load(path, data)
        deadline = time.monotonic() + 120
        while any(watcher.snapshot.known(p) != probe.known(p) for p in wanted):
            if time.monotonic() > deadline:
                raise SystemExit("the watcher did not read every change made while it was disconnected")
            await asyncio.sleep(0.2)
    writer.stop()
    writer.close()
    read = watcher.zk_bytes_received - before
    return {
        "turns": turns,
        "records_changed_per_turn": changes,
        "bytes_received": read,
        "full_resync_bytes": watcher.stats.resync_bytes,
        "ratio_to_one_resync": round(read / max(1, watcher.stats.resync_bytes), 5),
        "catch_up_bytes": watcher.stats.catch_up_bytes - stats0["catch_up_bytes"],
        "resyncs": watcher.stats.resyncs - stats0["resyncs"],
        "seconds": round(time.monotonic() - began, 1),
    }


# ---------------------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    cluster, mem, resync, watch = result["cluster"], result["memory"], result["resync"], result["watch"]
    scale_mem, reconnects = result.get("scale_memory"), result["reconnects"]
    topics = cluster["managed_ledgers"]
    scale = PER / topics
    lines = [
        f"cluster: {cluster['bk_ledgers']} BK ledgers, {topics} managed ledgers (topics), "
        f"{cluster['cursors']} cursors, {cluster['schemas']} schemas",
        "",
    ]
    if mem is not None:
        lines += [
            "memory of the snapshot (Python objects kept after a full read, tracemalloc):",
            f"  {mem['snapshot_bytes'] / 2**20:.1f} MiB = {mem['bytes_per_topic']} B per topic "
            f"-> {mem['mib_per_100k_topics']} MiB per 100k topics",
            f"  a resync in place peaks {mem['resync_peak_bytes'] / 2**20:.1f} MiB "
            f"({mem['resync_peak_over_snapshot']}x the snapshot)",
            "",
        ]
    if scale_mem is not None:
        lines += [
            f"memory at {scale_mem['topics']} topics of {scale_mem['ledgers_per_topic']} ledgers "
            f"({scale_mem['offloaded_per_topic']} offloaded) and a cursor each, records of "
            f"{scale_mem['record_bytes_per_topic']} B:",
            f"  {scale_mem['bytes_per_topic']} B per topic; the previous representation "
            f"{scale_mem['previous_bytes_per_topic']} B ({scale_mem['ratio_to_previous']}x)",
            "",
        ]
    lines += [
        "resync (watcher start): BK ids listed, every record read, unreferenced ledgers' metadata read:",
        f"  {resync['seconds']} s, {resync['cpu_seconds']} CPU s, "
        f"{resync['zk_packets']} requests at the server "
        f"({resync['watcher_requests']} sent by the watcher's reads); "
        f"per 100k topics: {resync['zk_packets'] * scale:.0f} requests",
        "",
        "watching brokers roll (each roll: list + new ledger, then trim of the oldest) and cursors switch:",
        f"  {watch['changes_per_minute']} changed znodes/min written ({watch['rolls']} rolls, "
        f"{watch['cursor_switches']} switches in {watch['seconds']} s), "
        f"{watch['events_received']} of {watch['changes_written']} changes received as events; "
        f"{watch['lost_races']} writes failed",
        f"  the watcher read {watch['znodes_read_per_minute']} znodes/min in {watch['requests_per_minute']} "
        f"requests/min ({watch['reads_per_change']} reads per change), started "
        f"{watch['suspects_per_minute']} suspects/min, "
        f"used {watch['watcher_cpu_seconds_per_minute']} CPU s/min",
        "",
        f"{reconnects['turns']} reconnections, {reconnects['records_changed_per_turn']} records changed "
        f"during each: {reconnects['bytes_received']} B read "
        f"({reconnects['catch_up_bytes']} B by the catch-ups), "
        f"one full resync {reconnects['full_resync_bytes']} B ({reconnects['ratio_to_one_resync']}x); "
        f"{reconnects['resyncs']} resyncs",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ledgers", type=int, default=1_000_000, help="BK ledgers of the generated cluster")
    parser.add_argument("--rolls-per-minute", type=float, default=3000)
    parser.add_argument("--cursor-switches-per-minute", type=float, default=600)
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--zk-port", type=int, default=ports.block(ports.WATCH_BENCH).zookeeper)
    parser.add_argument("--zk-heap", default="4g")
    parser.add_argument("--state-dir", type=Path, default=_state_home() / "bench" / "watch-clusters")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep-zookeeper", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the (slow, traced) memory read")
    parser.add_argument(
        "--scale-topics", type=int, default=200_000, help="topics of the in-memory shape (0: skip it)"
    )
    args = parser.parse_args(argv)
    out: Path = args.out or _state_home() / "bench" / f"watch-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    out.mkdir(parents=True, exist_ok=True)
    print(f"results: {out}", flush=True)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    zk_proc = start_zookeeper(args.state_dir, args.zk_port, args.zk_heap)
    zookeeper = f"127.0.0.1:{args.zk_port}"
    try:
        entry = cluster(args.state_dir, zookeeper, args.ledgers)
        brief = {k: v for k, v in entry.items() if k not in ("ml_names", "cursor_paths")}
        print(f"cluster: {json.dumps(brief)}", flush=True)
        memory = None if args.no_memory else measure_memory(zookeeper, entry["chroot"])
        print(f"memory: {json.dumps(memory)}", flush=True)
        scale_memory = measure_scale_memory(args.scale_topics) if args.scale_topics else None
        print(f"scale memory: {json.dumps(scale_memory)}", flush=True)
        measured = asyncio.run(
            measure_watch(
                zookeeper, entry, args.rolls_per_minute, args.cursor_switches_per_minute, args.minutes
            )
        )
        result = {
            "argv": sys.argv[1:] if argv is None else argv,
            "cluster": brief,
            "memory": memory,
            "scale_memory": scale_memory,
            **measured,
        }
        text = render(result)
        (out / "results.json").write_text(json.dumps(result, indent=2))
        (out / "table.txt").write_text(text + "\n")
        print(text, flush=True)
        print(f"results: {out}", flush=True)
    finally:
        if zk_proc is not None and not args.keep_zookeeper:
            os.killpg(zk_proc.pid, signal.SIGTERM)
            zk_proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise SystemExit(main())
