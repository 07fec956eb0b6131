"""Benchmark of the reconcile pipeline: extract and reconcile time per cluster size, against plain Python.

    python bench/reconcile_benchmark.py --sizes 1000,100000,1000000

For each size it generates a synthetic cluster (``reconcile.generator``) into a ZooKeeper chroot and an S3
bucket of its own, then measures

* extract: the parallel exporter (ZooKeeper BK ledgers + Pulsar references + bucket listing -> Parquet);
* reconcile: ``reconcile.transform`` on Spark ``local[2]`` (read Parquet, anti-joins, filters, classification,
  candidates counted, findings written as Parquet);
* baseline: a single-process Python set difference over the same Parquet data (pyarrow -> sets);

and checks both against the generator's ground truth. Large clusters do not fit the embedded stack's
ZooKeeper (256 MiB heap, shared with the tests), so by default the benchmark starts its own ZooKeeper
(``--zk-heap``, forceSync off) and moto S3 on spare ports under ``--state-dir``; ``--zookeeper``/``--s3``
point it at running servers instead. Generated clusters are cached in the state dir (``--regenerate`` to
rebuild), so a re-run only measures.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reconcile.generator import ClusterSpec, GroundTruth, plan_cluster, write_plan  # noqa: E402

ZK_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_JAR = "/usr/share/java/slf4j-simple.jar"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_servers(state: Path, zk_port: int, s3_port: int, zk_heap: str) -> list[int]:
    """Start ZooKeeper and moto if nothing answers on their ports; returns the pids started."""
    pids: list[int] = []
    state.mkdir(parents=True, exist_ok=True)
    if not _port_open(zk_port):
        (state / "zk").mkdir(exist_ok=True)
        cfg = state / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={state / 'zk'}",
                    f"clientPort={zk_port}",
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
            f"-Xmx{zk_heap}",
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
            pids.append(subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True).pid)
    if not _port_open(s3_port):
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)]
        with open(os.devnull, "wb") as devnull:
            pids.append(subprocess.Popen(argv, stdout=devnull, stderr=devnull, start_new_session=True).pid)
    deadline = time.monotonic() + 60
    while not (_port_open(zk_port) and _port_open(s3_port)):
        if time.monotonic() > deadline:
            raise SystemExit("ZooKeeper/moto did not start; see the logs in the state dir")
        time.sleep(0.3)
    return pids


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


def _bucket_exists(endpoint: str, bucket: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3_client(endpoint).head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


def spec_for(size: int, bucket: str) -> ClusterSpec:
    # Offloading is rarer in big clusters here only to keep moto (~250 puts/s) within minutes.
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
    root = KazooClient(hosts=zookeeper)
    root.start()
    root.ensure_path(entry["chroot"])
    root.stop()
    root.close()
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


def python_set_difference(extract_dir: Path, cutoff_ms: int) -> dict[str, Any]:
    """The baseline: one Python process, pyarrow -> sets, the rules of the Spark transform (no owners)."""
    import re

    import pyarrow.parquet as pq

    started = time.monotonic()
    bk = pq.read_table(
        extract_dir / "bk_ledgers",
        columns=["ledger_id", "application", "component", "ctime_ms", "state", "mtime_ms", "parse_error"],
    ).to_pydict()
    refs = pq.read_table(extract_dir / "references", columns=["ledger_id"]).column("ledger_id").to_pylist()
    ctx = pq.read_table(extract_dir / "offload_contexts", columns=["ledger_id", "uuid"]).to_pydict()
    objs = pq.read_table(extract_dir / "offload_objects", columns=["key", "last_modified_ms"]).to_pydict()
    referenced = set(refs) | set(ctx["ledger_id"])
    ctx_pairs = set(zip(ctx["uuid"], ctx["ledger_id"], strict=True))
    ctx_uuids = set(ctx["uuid"])
    bk_candidates = 0
    for i, ledger_id in enumerate(bk["ledger_id"]):
        if ledger_id in referenced or bk["application"][i] != "pulsar" or bk["ctime_ms"][i] >= cutoff_ms:
            continue
        if bk["state"][i] != "CLOSED" and bk["mtime_ms"][i] >= cutoff_ms:
            continue
        if bk["component"][i] in ("managed-ledger", "schema"):
            bk_candidates += 1
    ledger_key = re.compile(r"^([0-9a-f-]{36})-ledger-([0-9]+)(-index)?$")
    offload_groups: set[tuple[str, int]] = set()
    for key, modified in zip(objs["key"], objs["last_modified_ms"], strict=True):
        m = ledger_key.match(key)
        if m is None:
            continue
        pair = (m.group(1), int(m.group(2)))
        if pair not in ctx_pairs and pair[1] not in referenced and modified < cutoff_ms:
            offload_groups.add(pair)
    del ctx_uuids
    return {
        "seconds": time.monotonic() - started,
        "bk_candidates": bk_candidates,
        "offload_candidates": len(offload_groups),
    }


def measure(
    entry: dict[str, Any], state: Path, zookeeper: str, s3_endpoint: str, spark: Any, compare_spark_scan: bool
) -> dict[str, Any]:
    from rich.console import Console

    from ledger_deletion.request import LedgerType
    from reconcile.extract import ExtractConfig, list_bk_units, spark_scan_bk_ledgers
    from reconcile.job import JobConfig, run

    size = entry["size"]
    out = state / f"out-{size}"
    if out.exists():
        shutil.rmtree(out)
    config = JobConfig(
        extract=ExtractConfig(
            zookeeper=zookeeper + entry["chroot"],
            s3_endpoint=s3_endpoint,
            buckets=(entry["bucket"],),
            workers=2,
        ),
        out=out,
        min_age_seconds=0,
        master="local[2]",
    )
    quiet = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115 - process lifetime
    result = run(config, spark=spark, console=quiet, s3_client=s3_client(s3_endpoint))
    truth = load_truth(state, size)
    got_bk = {
        r.ledger_id: r.ledger_component.value for r in result.requests if r.ledger_type is LedgerType.LEDGER
    }
    got_off = {r.ledger_id for r in result.requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER}
    correct = got_bk == truth.bk_candidates and got_off == {i for _, i in truth.offload_candidates}
    baseline = python_set_difference(out / "extract", result.cutoff_ms)
    row: dict[str, Any] = {
        "size": size,
        "bk_ledgers": result.extract.rows.get("bk_ledgers", 0),
        "objects": result.extract.rows.get("offload_objects", 0),
        "references": result.extract.rows.get("references", 0),
        "extract_s": result.timings["extract"],
        "extract_bk_s": result.timings.get("extract_bk_ledgers", 0.0),
        "extract_objects_s": result.timings.get("extract_offload_objects", 0.0),
        "extract_refs_s": result.timings.get("extract_references", 0.0),
        "reconcile_s": result.timings["reconcile"],
        "outputs_s": result.timings["outputs"],
        "candidates": len(result.requests),
        "correct": correct,
        "python_s": baseline["seconds"],
        "python_candidates": baseline["bk_candidates"] + baseline["offload_candidates"],
    }
    if compare_spark_scan:
        ex = config.extract
        started = time.monotonic()
        units = list_bk_units(ex)
        rows = spark_scan_bk_ledgers(spark, ex, units).count()
        row["spark_scan_s"] = time.monotonic() - started
        row["spark_scan_rows"] = rows
    return row


def scan_ab(entry: dict[str, Any], state: Path, zookeeper: str, spark: Any, rounds: int = 2) -> list[str]:
    """BK ledger scan only, both ways, alternating: the exporter (process pool -> Parquet) and kazoo inside
    Spark tasks (-> DataFrame -> Parquet). Same units, same output, same machine load."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from reconcile.extract import ExtractConfig, list_bk_units, run_unit, spark_scan_bk_ledgers

    config = ExtractConfig(zookeeper=zookeeper + entry["chroot"], workers=2)
    lines = []
    for r in range(rounds):
        out = state / f"ab-{entry['size']}"
        shutil.rmtree(out, ignore_errors=True)
        started = time.monotonic()
        units = list_bk_units(config)
        with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
            rows = sum(
                f.result()["bk_ledgers"] for f in [pool.submit(run_unit, config, u, str(out)) for u in units]
            )
        exporter = time.monotonic() - started
        started = time.monotonic()
        units = list_bk_units(config)
        spark_scan_bk_ledgers(spark, config, units).write.mode("overwrite").parquet(str(out / "spark"))
        in_spark = time.monotonic() - started
        lines.append(
            f"round {r + 1}: {rows:,} BK ledgers: exporter {exporter:.1f} s, "
            f"kazoo in Spark tasks {in_spark:.1f} s"
        )
        print(lines[-1], flush=True)
    return lines


def print_table(rows: list[dict[str, Any]], spark_start_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"reconcile benchmark (Spark local[2]; JVM start {spark_start_s:.1f} s not included)")
    for col in (
        "ledgers",
        "objects",
        "extract s (bk/obj/refs)",
        "extract ledgers/s",
        "reconcile s (Spark)",
        "reconcile ledgers/s",
        "python set-diff s",
        "candidates (python)",
        "exact",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        items = r["bk_ledgers"] + r["objects"]
        table.add_row(
            f"{r['bk_ledgers']:,}",
            f"{r['objects']:,}",
            f"{r['extract_s']:.1f} "
            f"({r['extract_bk_s']:.1f}/{r['extract_objects_s']:.1f}/{r['extract_refs_s']:.1f})",
            f"{r['bk_ledgers'] / max(r['extract_bk_s'], 1e-9):,.0f}",
            f"{r['reconcile_s']:.1f}",
            f"{items / max(r['reconcile_s'], 1e-9):,.0f}",
            f"{r['python_s']:.1f}",
            f"{r['candidates']:,} ({r['python_candidates']:,})",
            "yes" if r["correct"] else "NO",
        )
    Console(width=160).print(table)
    for r in rows:
        if "spark_scan_s" in r:
            print(
                f"BK scan of {r['bk_ledgers']:,} ledgers: parallel exporter {r['extract_bk_s']:.1f} s "
                f"vs kazoo in Spark tasks {r['spark_scan_s']:.1f} s ({r['spark_scan_rows']:,} rows)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,100000", help="comma-separated ledger counts")
    parser.add_argument("--state-dir", default="/tmp/reconcile-bench", type=Path)
    parser.add_argument("--zookeeper", default="", help="use this ZooKeeper instead of starting one")
    parser.add_argument("--s3", default="", help="use this S3 endpoint instead of starting moto")
    parser.add_argument("--zk-port", type=int, default=22181)
    parser.add_argument("--s3-port", type=int, default=29000)
    parser.add_argument("--zk-heap", default="6g")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument(
        "--compare-spark-scan", action="store_true", help="also time kazoo in Spark tasks (<= 100k)"
    )
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--scan-ab", action="store_true", help="only compare the two BK scan strategies")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    state: Path = args.state_dir
    if not (args.zookeeper and args.s3):
        start_servers(state, args.zk_port, args.s3_port, args.zk_heap)
    zookeeper = args.zookeeper or f"127.0.0.1:{args.zk_port}"
    s3_endpoint = args.s3 or f"http://127.0.0.1:{args.s3_port}"
    entries = []
    for size in sizes:
        entry = generate(state, size, zookeeper, s3_endpoint, args.regenerate)
        print(f"cluster {size}: {json.dumps(entry)}", flush=True)
        entries.append(entry)
    if args.generate_only:
        return 0
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    from reconcile.job import spark_session

    started = time.monotonic()
    spark = spark_session("local[2]", shuffle_partitions=8)
    spark.range(1).count()
    spark_start_s = time.monotonic() - started
    if args.scan_ab:
        for entry in entries:
            scan_ab(entry, state, zookeeper, spark)
        return 0
    rows = []
    for entry in entries:
        compare = args.compare_spark_scan and entry["size"] <= 100_000
        row = measure(entry, state, zookeeper, s3_endpoint, spark, compare)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print_table(rows, spark_start_s)
    if args.json:
        args.json.write_text(json.dumps({"spark_start_s": spark_start_s, "rows": rows}, indent=2))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise SystemExit(main())
