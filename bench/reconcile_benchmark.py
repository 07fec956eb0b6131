"""Benchmark of the reconcile job: ZooKeeper requests per ledger, candidates, extract and reconcile time.

    python bench/reconcile_benchmark.py --sizes 1000,100000

For each size it generates a synthetic cluster (``devstack.generator``) into a ZooKeeper chroot and an S3
bucket of its own, then runs the job on it once per mode, side by side on the same cluster:

* ``full`` — the extract before the id listing: every ledger's metadata read, one request per znode
  (``bk_metadata="all"``, ``multi_read=False``);
* ``ids`` — ledger ids listed, metadata read for the unreferenced ones only, one request per znode (what a
  ZooKeeper without multi-read, before 3.6, gets);
* ``ids+multi`` — the same with reads batched into multi-reads: the job as it runs by default.

The headline is the number of requests ZooKeeper received during the extract, read from the server itself
(``zk_packets_received`` of the ``mntr`` four-letter word), per BK ledger and as a ratio to ``full``; the
count the client kept is beside it. Each run also reports its candidates (exactly the generator's ground
truth? the same as ``full``'s?), and wall and CPU seconds of the extract (this process and its pool) and of
the reconcile (this process and Spark's JVM), and the CPU seconds of the ZooKeeper server.

The cluster has to be read by nothing else while it is measured, and large clusters do not fit the embedded
stack's ZooKeeper: so the benchmark starts a ZooKeeper (``mntr`` enabled, ``--zk-heap``, forceSync off) and a
moto S3 of its own, on spare ports, with their data under ``--state-dir``; generated clusters are cached
there too (``--regenerate`` rebuilds them). Results (a JSON file, the table, each run's job output) go to
``--out``, by default ``$XDG_STATE_HOME/ledger-deletion/bench/reconcile-<utc time>/``, outside the
repository; the benchmark prints where.

``--spark-only`` measures the reconcile alone (the Spark part and its outputs) on extract tables written
directly as Parquet (``devstack.extract_tables``), for sizes the ZooKeeper generator cannot reach in
minutes::

    python bench/reconcile_benchmark.py --spark-only --sizes 1000000,3000000,10000000

One fresh process per size (so its peak memory is that size's alone) starts Spark ``local[2]``, runs the job
once unmeasured on a small cluster (class loading, JIT), then ``reconcile.job.run`` on the size's tables, the
HEADs of the offload candidates answered by the generator (``extract_tables.head_owners``). Per size: wall
seconds, CPU seconds of the driver's Python and of the JVM (in ``local`` mode the executors run in it), the
peak resident memory of each (``VmHWM``), CPU and wall per ledger as ratios to the first size, whether the
candidates are exactly the generator's, the S3 requests the job would send (HEADs, listing pages) with the
time AWS S3 would take for the HEADs (requests x ``--s3-latency-ms`` / 16 threads), and the join operator of
the main anti-join's executed plan (``transform.unreferenced_bk``). The tables go under ``--state-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devstack import ports  # noqa: E402
from devstack.generator import ClusterSpec, GroundTruth, plan_cluster, write_plan  # noqa: E402
from reconcile.extract import ExtractConfig  # noqa: E402

ZK_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_JAR = "/usr/share/java/slf4j-simple.jar"
WARMUP_SIZE = 1000
MODES: dict[str, dict[str, Any]] = {
    "full": {"bk_metadata": "all", "multi_read": False},
    "ids": {"bk_metadata": "candidates", "multi_read": False},
    "ids+multi": {"bk_metadata": "candidates", "multi_read": True},
}


def _state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ledger-deletion"


def default_out() -> Path:
    """``$XDG_STATE_HOME/ledger-deletion/bench/reconcile-<utc time>``: outside the repository."""
    return _state_home() / "bench" / f"reconcile-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def default_state_dir() -> Path:
    return _state_home() / "bench" / "reconcile-clusters"


# ---------------------------------------------------------------------------------------------------------
# Servers of our own
# ---------------------------------------------------------------------------------------------------------


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def launch_zookeeper(state: Path, port: int, heap: str) -> subprocess.Popen[bytes]:
    """A ZooKeeper on loopback ``port`` (``mntr`` on, fsync off), its data, config and log under ``state``
    and its pid in ``state/zk.pid``: the benchmarks' own, never the embedded stack's."""
    (state / "zk").mkdir(parents=True, exist_ok=True)
    cfg = state / "zoo.cfg"
    cfg.write_text(
        "\n".join(
            [
                "tickTime=2000",
                f"dataDir={state / 'zk'}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "maxClientCnxns=0",
                "forceSync=no",
                "4lw.commands.whitelist=ruok,srvr,mntr",
                "",
            ]
        )
    )
    argv = [
        shutil.which("java") or "java",
        f"-Xmx{heap}",
        "-XX:+UseParallelGC",
        "-Djava.net.preferIPv4Stack=true",
        "-Djute.maxbuffer=8388608",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        f"{ZK_JAR}:{SLF4J_JAR}",
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(cfg),
    ]
    with open(state / "zk.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    (state / "zk.pid").write_text(str(proc.pid))
    return proc


def start_servers(state: Path, zk_port: int, s3_port: int, zk_heap: str) -> tuple[int | None, int | None]:
    """Start ZooKeeper and moto unless something answers on their ports; returns their pids when they are
    ours (started now, or by an earlier run and still running), else None."""
    state.mkdir(parents=True, exist_ok=True)
    pid_file, moto_pid_file = state / "zk.pid", state / "moto.pid"
    if not _port_open(zk_port):
        launch_zookeeper(state, zk_port, zk_heap)
    if not _port_open(s3_port):
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)]
        with open(os.devnull, "wb") as devnull:
            proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull, start_new_session=True)
        moto_pid_file.write_text(str(proc.pid))
    deadline = time.monotonic() + 60
    while not (_port_open(zk_port) and _port_open(s3_port)):
        if time.monotonic() > deadline:
            raise SystemExit("ZooKeeper/moto did not start; see the logs in the state dir")
        time.sleep(0.3)
    pids = [int(f.read_text()) if f.exists() else None for f in (pid_file, moto_pid_file)]
    zk_pid, moto_pid = (pid if pid is not None and _alive(pid) else None for pid in pids)
    return zk_pid, moto_pid


def s3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(max_pool_connections=64),
    )


def packets_received(zookeeper: str) -> int:
    """Requests the ZooKeeper server has received since it started (``mntr``: ``zk_packets_received``)."""
    host, port = zookeeper.split("/", 1)[0].split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"mntr")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    for line in data.decode().splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_packets_received":
            return int(value)
    raise RuntimeError(f"no zk_packets_received in mntr of {zookeeper}: is mntr in 4lw.commands.whitelist?")


# ---------------------------------------------------------------------------------------------------------
# Clusters
# ---------------------------------------------------------------------------------------------------------


def _bucket_exists(endpoint: str, bucket: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3_client(endpoint).head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


def spec_for(size: int, bucket: str) -> ClusterSpec:
    # Offloading is rarer in big clusters here only to keep moto (a few hundred puts/s) within minutes.
    offloading = 0.4 if size <= 100_000 else 0.12
    return ClusterSpec(ledgers=size, bucket=bucket, offloading_fraction=offloading, seed=size)


def generate(state: Path, size: int, zookeeper: str, s3_endpoint: str, regenerate: bool) -> dict[str, Any]:
    """Generate (or reuse) the cluster of one size; returns its cache entry."""
    from kazoo.client import KazooClient

    cache = state / f"cluster-{size}.json"
    if cache.exists() and not regenerate:
        entry: dict[str, Any] = json.loads(cache.read_text())
        zk = KazooClient(hosts=zookeeper)
        zk.start(timeout=180)  # a restarted ZooKeeper first loads its snapshot
        try:
            # moto keeps objects in memory only: a restarted moto has lost the bucket, so regenerate then.
            if (
                zk.exists(entry["chroot"] + "/ledgers")
                and entry.get("complete")
                and _bucket_exists(s3_endpoint, entry["bucket"])
            ):
                return entry
        finally:
            zk.stop()
            zk.close()
    tag = uuid.uuid4().hex[:8]
    entry = {
        "size": size,
        "chroot": f"/bench-{size}-{tag}",
        "bucket": f"bench-{size}-{tag}",
        "complete": False,
    }
    spec = spec_for(size, entry["bucket"])
    started = time.monotonic()
    plan = plan_cluster(spec)
    zk = KazooClient(hosts=zookeeper, timeout=30)
    zk.start()
    zk.ensure_path(entry["chroot"])
    zk.stop()
    zk.close()
    zk = KazooClient(hosts=zookeeper + entry["chroot"], timeout=30)
    zk.start()
    s3 = s3_client(s3_endpoint)
    s3.create_bucket(Bucket=entry["bucket"])
    last = [0.0]

    def progress(stage: str, n: int) -> None:
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            print(f"  generating {size}: {stage} {n}", flush=True)

    stats = write_plan(zk, s3, plan, bucket=entry["bucket"], progress=progress)
    zk.stop()
    zk.close()
    entry.update(
        complete=True,
        generate_seconds=round(time.monotonic() - started, 1),
        bk_ledgers=len(plan.ledgers),
        znodes=stats.znodes,
        objects=stats.objects,
        managed_ledgers=len(plan.managed_ledgers),
    )
    (state / f"truth-{size}.pickle").write_bytes(pickle.dumps(plan.truth))
    cache.write_text(json.dumps(entry, indent=2))
    return entry


def load_truth(state: Path, size: int) -> GroundTruth:
    truth = pickle.loads((state / f"truth-{size}.pickle").read_bytes())
    assert isinstance(truth, GroundTruth)
    return truth


# ---------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------


def _cpu_of_this_process_and_its_waited_children() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_of(pid: int | None) -> float:
    """User + system CPU seconds of a running process (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Servers:
    zookeeper: str
    s3_endpoint: str
    zk_pid: int | None
    moto_pid: int | None


def measure(entry: dict[str, Any], mode: str, out: Path, servers: Servers, spark: Any) -> dict[str, Any]:
    """One run of the job on one cluster in one mode: extract, then reconcile, each measured apart."""
    from rich.console import Console

    from ledger_deletion.request import LedgerType
    from reconcile.extract import BK_LEDGER_IDS, BK_LEDGERS, OFFLOAD_OBJECTS, REFERENCES, extract_all
    from reconcile.job import JobConfig, run

    shutil.rmtree(out, ignore_errors=True)
    config = JobConfig(
        extract=ExtractConfig(
            zookeeper=servers.zookeeper + entry["chroot"],
            s3_endpoint=servers.s3_endpoint,
            buckets=(entry["bucket"],),
            workers=2,
            **MODES[mode],
        ),
        out=out,
        min_age_seconds=0,
        master="local[2]",
    )
    jvm = spark.sparkContext._gateway.proc.pid
    s3_cpu = _cpu_of(servers.moto_pid)
    packets, cpu, zk_cpu = (
        packets_received(servers.zookeeper),
        _cpu_of_this_process_and_its_waited_children(),
        _cpu_of(servers.zk_pid),
    )
    started = time.monotonic()
    extracted = extract_all(config.extract, out / "extract")
    extract_s = time.monotonic() - started
    extract_cpu = _cpu_of_this_process_and_its_waited_children() - cpu
    zk_server_cpu = _cpu_of(servers.zk_pid) - zk_cpu
    zk_packets = packets_received(servers.zookeeper) - packets
    cpu, jvm_cpu = _cpu_of_this_process_and_its_waited_children(), _cpu_of(jvm)
    quiet = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115 - process lifetime
    started = time.monotonic()
    result = run(
        config, spark=spark, console=quiet, s3_client=s3_client(servers.s3_endpoint), extracted=extracted
    )
    reconcile_s = time.monotonic() - started
    reconcile_cpu = _cpu_of_this_process_and_its_waited_children() - cpu + _cpu_of(jvm) - jvm_cpu
    s3_cpu = _cpu_of(servers.moto_pid) - s3_cpu
    truth = load_truth(Path(entry["state"]), entry["size"])
    got_bk = {
        r.ledger_id: r.ledger_component.value for r in result.requests if r.ledger_type is LedgerType.LEDGER
    }
    got_off = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER}
    ledgers = extracted.rows[BK_LEDGER_IDS]
    return {
        "size": entry["size"],
        "mode": mode,
        "bk_ledgers": ledgers,
        "metadata_read": extracted.rows[BK_LEDGERS],
        "objects": extracted.rows[OFFLOAD_OBJECTS],
        "references": extracted.rows[REFERENCES],
        "zk_requests_server": zk_packets,
        "zk_requests_client": sum(extracted.zk_requests.values()),
        "zk_requests_client_by_stage": extracted.zk_requests,
        "zk_requests_per_ledger": zk_packets / max(ledgers, 1),
        "candidates": len(result.requests),
        "exact": got_bk == truth.bk_candidates and got_off == {i for _, i in truth.offload_candidates},
        "requests": sorted((r.ledger_type.value, r.ledger_id) for r in result.requests),
        "findings": _findings(out / "findings.parquet"),
        "extract_s": extract_s,
        "extract_s_by_stage": extracted.seconds,
        "extract_cpu_s": extract_cpu,
        "zk_server_cpu_s": zk_server_cpu,
        "reconcile_s": reconcile_s,
        "reconcile_s_by_part": result.timings,
        "reconcile_cpu_s": reconcile_cpu,
        # Waiting for S3: the bucket listing (extract) and the HEADs of the offload candidates' objects.
        "s3_s": extracted.seconds[OFFLOAD_OBJECTS] + result.timings.get("reconcile_head_objects", 0.0),
        "s3_server_cpu_s": s3_cpu if servers.moto_pid is not None else None,
        "load_average": os.getloadavg(),
    }


def _findings(path: Path) -> list[tuple[Any, ...]]:
    """Every finding as a sorted list of comparable tuples (what "the same findings" means)."""
    import pyarrow.parquet as pq

    columns = [
        "storage",
        "ledger_id",
        "uuid",
        "status",
        "reason",
        "topic_name",
        "component",
        "bytes",
        "created_ms",
    ]
    table = pq.read_table(path, columns=columns).to_pydict()
    return sorted(zip(*(table[c] for c in columns), strict=True), key=repr)


def compare(rows: list[dict[str, Any]]) -> None:
    """Add, per row, the ratio of its ZooKeeper requests to ``full``'s on the same cluster, and whether its
    candidates and findings are the same as ``full``'s (in the same round)."""
    full = {(r["size"], r["round"]): r for r in rows if r["mode"] == "full"}
    for row in rows:
        base = full.get((row["size"], row["round"]))
        row["ratio_to_full"] = row["zk_requests_server"] / base["zk_requests_server"] if base else None
        row["same_candidates_as_full"] = row["requests"] == base["requests"] if base else None
        row["same_findings_as_full"] = row["findings"] == base["findings"] if base else None


def render(rows: list[dict[str, Any]], spark_start_s: float) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"reconcile benchmark (Spark local[2], JVM start {spark_start_s:.1f} s not included)")
    for col in (
        "ledgers",
        "mode",
        "ZK requests (server)",
        "per ledger",
        "vs full",
        "metadata read",
        "candidates",
        "exact",
        "= full",
        "extract s (CPU s)",
        "reconcile s (CPU s)",
        "total s",
        "of it S3 s",
        "ZK server CPU s",
        "S3 server CPU s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        same = r["same_candidates_as_full"] and r["same_findings_as_full"]
        table.add_row(
            f"{r['bk_ledgers']:,}",
            r["mode"],
            f"{r['zk_requests_server']:,}",
            f"{r['zk_requests_per_ledger']:.4f}",
            "-" if r["ratio_to_full"] is None else f"{r['ratio_to_full']:.4f}",
            f"{r['metadata_read']:,}",
            f"{r['candidates']:,}",
            "yes" if r["exact"] else "NO",
            "-" if r["same_candidates_as_full"] is None else ("yes" if same else "NO"),
            f"{r['extract_s']:.1f} ({r['extract_cpu_s']:.1f})",
            f"{r['reconcile_s']:.1f} ({r['reconcile_cpu_s']:.1f})",
            f"{r['extract_s'] + r['reconcile_s']:.1f}",
            f"{r['s3_s']:.1f}",
            f"{r['zk_server_cpu_s']:.1f}",
            "-" if r["s3_server_cpu_s"] is None else f"{r['s3_server_cpu_s']:.1f}",
        )
    console = Console(width=220, record=True)
    console.print(table)
    return console.export_text()


# ---------------------------------------------------------------------------------------------------------
# Spark only: generated extract tables, 1M to 10M ledgers
# ---------------------------------------------------------------------------------------------------------

SPARK_ONLY_WARMUP_LEDGERS = 8192
NOW_MS = 1_800_000_000_000
MIN_AGE_S = 3600
LIST_PAGE = 1000  # keys per ListObjectsV2 response
HEAD_THREADS = 16  # reconcile.candidates.head_owners


def _status_kib(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int | str) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _candidate_ids(jsonl: Path) -> dict[str, list[int]]:
    """Ledger ids of the requests in ``candidates.jsonl``, by the generator's kinds, read line by line."""
    out: dict[str, list[int]] = {"data": [], "cursor": [], "offload": []}
    with jsonl.open(encoding="utf-8") as lines:
        for line in lines:
            wire = json.loads(line)
            if wire["ledgerType"] == "OFFLOAD_LEDGER":
                out["offload"].append(int(wire["ledgerId"]))
            elif wire["ledgerComponent"] == "MANAGED_CURSOR":
                out["cursor"].append(int(wire["ledgerId"]))
            else:
                out["data"].append(int(wire["ledgerId"]))
    return {k: sorted(v) for k, v in out.items()}


def spark_only_one(size: int, tables: Path, out: Path, shuffle_partitions: int) -> dict[str, Any]:
    """One size, in this (fresh) process: warm up, measure, check, read the plan."""
    from pyspark.sql import functions as F
    from rich.console import Console

    from devstack import extract_tables
    from reconcile import transform as T
    from reconcile.extract import ExtractConfig, ExtractResult
    from reconcile.job import CANDIDATES_JSONL, FINDINGS_PARQUET, JobConfig, read_tables, run, spark_session
    from reconcile.plans import executed_plan, forbidden_operators, join_operators

    started = time.monotonic()
    spark = spark_session("local[2]", shuffle_partitions=shuffle_partitions)
    spark.range(1).count()
    spark_start_s = time.monotonic() - started
    jvm = spark.sparkContext._gateway.proc.pid
    quiet = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115 - process lifetime

    def job(directory: Path, rows: dict[str, int], job_out: Path) -> Any:
        config = JobConfig(
            extract=ExtractConfig(zookeeper="unused:2181"),
            out=job_out,
            min_age_seconds=MIN_AGE_S,
            now_ms=NOW_MS,
            shuffle_partitions=shuffle_partitions,
        )
        extracted = ExtractResult(directory, rows=rows)
        return run(config, spark=spark, console=quiet, extracted=extracted, head=extract_tables.head_owners)

    warm = extract_tables.write_extract_tables(
        out / "warmup-tables", SPARK_ONLY_WARMUP_LEDGERS, now_ms=NOW_MS
    )
    job(warm.directory, warm.rows, out / "warmup")
    rows = json.loads((tables / "rows.json").read_text())
    cpu, jvm_cpu = _cpu_s("self"), _cpu_s(jvm)
    started = time.monotonic()
    result = job(tables, rows, out / "job")
    wall_s = time.monotonic() - started
    python_cpu_s, jvm_cpu_s = _cpu_s("self") - cpu, _cpu_s(jvm) - jvm_cpu
    python_peak, jvm_peak = _status_kib("self", "VmHWM"), _status_kib(jvm, "VmHWM")
    # Checked after the peaks are read: reading the files back is the benchmark's, not the job's.
    got = _candidate_ids(out / "job" / CANDIDATES_JSONL)
    truth = {k: v.tolist() for k, v in extract_tables.truth(size).items()}
    findings = spark.read.parquet(str(out / "job" / FINDINGS_PARQUET))
    offload_candidates = findings.where((F.col("storage") == "offload") & (F.col("status") == T.CANDIDATE))
    heads = offload_candidates.select(F.sum(F.size("keys"))).first()[0] or 0
    tables_read = read_tables(spark, ExtractResult(tables, rows=rows))
    plan = executed_plan(T.unreferenced_bk(tables_read.bk, tables_read.refs, tables_read.ctxs))
    anti = sorted({op for op, kind in join_operators(plan) if kind == "LeftAnti"})
    planned = sorted({op for op, kind in join_operators(plan, final=False) if kind == "LeftAnti"})
    ledgers = rows["bk_ledger_ids"]
    return {
        "size": size,
        "bk_ledgers": ledgers,
        "rows": rows,
        "candidates": result.candidates,
        "exact": got == truth,
        "wall_s": wall_s,
        "python_cpu_s": python_cpu_s,
        "jvm_cpu_s": jvm_cpu_s,
        "cpu_s": python_cpu_s + jvm_cpu_s,
        "cpu_us_per_ledger": (python_cpu_s + jvm_cpu_s) / ledgers * 1e6,
        "wall_us_per_ledger": wall_s / ledgers * 1e6,
        "python_peak_rss_mib": python_peak / 1024,
        "jvm_peak_rss_mib": jvm_peak / 1024,
        "timings": result.timings,
        "s3_head_requests": int(heads),
        "s3_list_requests": -(-rows["offload_objects"] // LIST_PAGE),
        "anti_join": anti,  # as it ran: none when adaptive execution found its other side empty
        "anti_join_planned": planned,
        "forbidden_operators": forbidden_operators(plan),
        "anti_join_plan": plan,
        "spark_start_s": spark_start_s,
        "shuffle_partitions": shuffle_partitions,
        "load_average": os.getloadavg(),
    }


def spark_only(
    sizes: list[int], out: Path, state: Path, shuffle_partitions: int, script: Path
) -> list[dict[str, Any]]:
    """Every size: its tables generated here, measured in a process of its own (this script, ``--one``)."""
    from devstack import extract_tables

    rows = []
    for size in sizes:
        tables = state / f"extract-tables-{size}"
        started = time.monotonic()
        written = extract_tables.write_extract_tables(tables, size, now_ms=NOW_MS)
        (tables / "rows.json").write_text(json.dumps(written.rows))
        generate_s = time.monotonic() - started
        print(f"size {size}: tables in {generate_s:.1f} s: {json.dumps(written.rows)}", flush=True)
        result_file = out / f"size-{size}.json"
        subprocess.run(
            [
                sys.executable,
                str(script),
                "--spark-only-one",
                str(size),
                "--tables",
                str(tables),
                "--out",
                str(out / f"size-{size}"),
                "--result",
                str(result_file),
                "--shuffle-partitions",
                str(shuffle_partitions),
            ],
            check=True,
        )
        row = json.loads(result_file.read_text())
        row["generate_s"] = generate_s
        brief = {k: v for k, v in row.items() if k != "anti_join_plan"}
        print(json.dumps(brief), flush=True)
        rows.append(row)
    return rows


def s3_estimate(requests: int, latency_ms: float, concurrency: int) -> float:
    """Seconds S3 takes for ``requests`` round trips of ``latency_ms``, ``concurrency`` at a time."""
    return requests * latency_ms / 1000 / concurrency


def render_spark_only(rows: list[dict[str, Any]], latency_ms: float) -> str:
    from rich.console import Console
    from rich.table import Table

    base = rows[0]
    table = Table(title=f"reconcile, Spark part only (local[2]); ratios to {base['bk_ledgers']:,} ledgers")
    for col in (
        "ledgers",
        "candidates",
        "exact",
        "wall s",
        "CPU s (Py+JVM)",
        "CPU µs/ledger",
        "vs base",
        "wall µs/ledger",
        "vs base",
        "Py peak MiB",
        "JVM peak MiB",
        "anti-join",
        "HEADs",
        f"AWS s @{latency_ms:g}ms/{HEAD_THREADS}",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['bk_ledgers']:,}",
            f"{r['candidates']:,}",
            "yes" if r["exact"] else "NO",
            f"{r['wall_s']:.1f}",
            f"{r['cpu_s']:.1f} ({r['python_cpu_s']:.1f}+{r['jvm_cpu_s']:.1f})",
            f"{r['cpu_us_per_ledger']:.1f}",
            f"{r['cpu_us_per_ledger'] / base['cpu_us_per_ledger']:.2f}",
            f"{r['wall_us_per_ledger']:.1f}",
            f"{r['wall_us_per_ledger'] / base['wall_us_per_ledger']:.2f}",
            f"{r['python_peak_rss_mib']:.0f}",
            f"{r['jvm_peak_rss_mib']:.0f}",
            ",".join(r.get("anti_join_planned", [])) + ("" if r["anti_join"] else " (dropped: empty)"),
            f"{r['s3_head_requests']:,}",
            f"{s3_estimate(r['s3_head_requests'], latency_ms, HEAD_THREADS):.0f}",
        )
    console = Console(width=220, record=True)
    console.print(table)
    return console.export_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,100000", help="comma-separated ledger counts")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every mode per size, alternating")
    parser.add_argument("--out", type=Path, default=None, help="results (default: see above)")
    parser.add_argument("--state-dir", type=Path, default=None, help="servers' data and generated clusters")
    parser.add_argument("--zk-port", type=int, default=ports.block(ports.RECONCILE_BENCH).zookeeper)
    parser.add_argument("--s3-port", type=int, default=ports.block(ports.RECONCILE_BENCH).s3)
    parser.add_argument("--zk-heap", default="6g")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured run that warms the JVM")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--spark-only", action="store_true", help="the reconcile alone, on generated Parquet")
    parser.add_argument("--shuffle-partitions", type=int, default=8, help="--spark-only: Spark's")
    parser.add_argument("--s3-latency-ms", type=float, default=20.0, help="--spark-only: AWS S3's HEAD")
    parser.add_argument("--spark-only-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tables", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.spark_only_one is not None:  # one size of --spark-only, in a process of its own
        row = spark_only_one(args.spark_only_one, args.tables, args.out, args.shuffle_partitions)
        args.result.write_text(json.dumps(row, indent=2))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    state: Path = args.state_dir or default_state_dir()
    out: Path = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    print(f"results: {out}", flush=True)
    if args.spark_only:
        measured = spark_only(sizes, out, state, args.shuffle_partitions, Path(__file__).resolve())
        text = render_spark_only(measured, args.s3_latency_ms)
        (out / "table.txt").write_text(text)
        (out / "results.json").write_text(
            json.dumps({"argv": sys.argv[1:] if argv is None else argv, "rows": measured}, indent=2)
        )
        print(f"anti-join plan at {measured[-1]['bk_ledgers']:,} ledgers:\n{measured[-1]['anti_join_plan']}")
        print(f"results: {out}", flush=True)
        return 0 if all(r["exact"] and not r["forbidden_operators"] for r in measured) else 1
    zk_pid, moto_pid = start_servers(state, args.zk_port, args.s3_port, args.zk_heap)
    servers = Servers(f"127.0.0.1:{args.zk_port}", f"http://127.0.0.1:{args.s3_port}", zk_pid, moto_pid)
    entries = []
    for size in sizes:
        entry = generate(state, size, servers.zookeeper, servers.s3_endpoint, args.regenerate)
        print(f"cluster {size}: {json.dumps(entry)}", flush=True)
        entries.append({**entry, "state": str(state)})
    if args.generate_only:
        return 0
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    from reconcile.job import spark_session

    started = time.monotonic()
    spark = spark_session("local[2]", shuffle_partitions=8)
    spark.range(1).count()
    spark_start_s = time.monotonic() - started
    if not args.no_warmup:
        # The JVM's first queries run slower (class loading, JIT): pay that on a small cluster, unmeasured.
        warm = {
            **generate(state, WARMUP_SIZE, servers.zookeeper, servers.s3_endpoint, False),
            "state": str(state),
        }
        measure(warm, "ids+multi", out / "warmup", servers, spark)
    rows: list[dict[str, Any]] = []
    for entry in entries:
        for round_ in range(args.rounds):
            order = modes if round_ % 2 == 0 else modes[::-1]
            for mode in order:
                row = measure(
                    entry, mode, out / f"size-{entry['size']}" / f"{mode}-r{round_ + 1}", servers, spark
                )
                row["round"] = round_ + 1
                rows.append(row)
                brief = {k: v for k, v in row.items() if k not in ("requests", "findings")}
                print(json.dumps(brief), flush=True)
    compare(rows)
    text = render(rows, spark_start_s)
    (out / "table.txt").write_text(text)
    (out / "results.json").write_text(
        json.dumps(
            {
                "argv": sys.argv[1:] if argv is None else argv,
                "spark_start_s": spark_start_s,
                "clusters": entries,
                "rows": [{k: v for k, v in r.items() if k not in ("requests", "findings")} for r in rows],
            },
            indent=2,
        )
    )
    print(f"results: {out}", flush=True)
    ok = all(
        r["exact"] and r["same_candidates_as_full"] is not False and r["same_findings_as_full"] is not False
        for r in rows
    )
    return 0 if ok else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise SystemExit(main())
