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
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    state: Path = args.state_dir or default_state_dir()
    out: Path = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    print(f"results: {out}", flush=True)
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
