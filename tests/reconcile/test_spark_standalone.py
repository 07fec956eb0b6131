"""The reconcile job on a real Spark cluster: a standalone master and two workers started on loopback from
pyspark's own ``spark-class``, and ``ledger-deletion reconcile --master spark://...`` against a cluster
generated on the embedded stack. Its candidates must equal those of ``local[2]`` and the generator's truth.

What a remote executor cannot do, these cannot either: each worker (and the executor JVMs it starts) runs in a
mount namespace of its own in which the driver's private directory (its working directory, TMPDIR and Spark
local dirs) is an empty tmpfs. Executors share only the ``--out`` directory with the driver, as they would an
NFS mount. pyspark's launcher takes the executors' memory from PYSPARK_SUBMIT_ARGS, as the Kubernetes driver
(deploy/kubernetes/components/spark-on-kubernetes) takes its pod's address from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from devstack.generator import ClusterSpec, plan_cluster, write_plan  # noqa: E402
from ledger_deletion.formats.offload_keys import offload_uuid  # noqa: E402
from ledger_deletion.request import LedgerType  # noqa: E402
from ledger_deletion.submit import LineError, parse_jsonl  # noqa: E402

pytestmark = [pytest.mark.stack, pytest.mark.spark, pytest.mark.timeout(900)]

EXECUTOR_MEMORY_MB = 768  # within each worker's 1 GiB, and not Spark's default (1 GiB): set by the driver
MARK = "driver-only"
# Six JVMs that live a minute on two cores: the quick compiler only and one GC thread spend far less CPU.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class SparkCluster:
    """A standalone master and two workers; ``driver_private`` is hidden from the workers and executors."""

    master_url: str
    web_url: str
    driver_private: Path
    shared: Path
    work_dirs: list[Path]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            loaded: dict[str, Any] = json.load(response)
            return loaded

    def wait_for_workers(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                assert process.poll() is None, f"{name} exited: {self.log_tail(name)}"
            try:
                if self.json()["aliveworkers"] >= count:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"{count} workers never registered: {self.log_tail('master')}")

    def log_tail(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]


def _unshare_works() -> bool:
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    try:
        return subprocess.run(probe, capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """Started in the background; ``wait_for_workers`` before using it (generation and the local run overlap
    the JVMs' start)."""
    if not _unshare_works():
        pytest.skip("needs a mount namespace (root) to hide the driver's directories from the executors")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = str(spark_home / "bin" / "spark-class")
    base = tmp_path_factory.mktemp("spark-standalone")
    master_port, web_port = free_port(), free_port()
    cluster = SparkCluster(
        master_url=f"spark://127.0.0.1:{master_port}",
        web_url=f"http://127.0.0.1:{web_port}",
        driver_private=base / "driver",
        shared=base / "shared",
        work_dirs=[base / "worker-1", base / "worker-2"],
        logs=base / "logs",
    )
    for directory in (cluster.driver_private, cluster.shared, cluster.logs, *cluster.work_dirs):
        directory.mkdir()
    (cluster.driver_private / MARK).write_text("only the driver sees this")
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_JAVA_OPTS": SHORT_LIVED_JVM,
    }

    def start(name: str, argv: list[str]) -> None:
        log = (cluster.logs / f"{name}.log").open("wb")
        # A session of its own: the process group (the daemon and the executors it starts) is stopped as one.
        cluster.processes[name] = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    try:
        start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(master_port), "--webui-port", str(web_port)],
        )  # fmt: skip
        for number, work_dir in enumerate(cluster.work_dirs, 1):
            # mount, then exec: the worker's pid is the Popen's, and its namespace hides driver_private.
            script = 'mount -t tmpfs tmpfs "$1" && exec "$2" org.apache.spark.deploy.worker.Worker "$3" ' + (
                '--host 127.0.0.1 --cores 1 --memory 1g --webui-port 0 --work-dir "$4"'
            )
            start(
                f"worker-{number}",
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                 str(cluster.driver_private), spark_class, cluster.master_url, str(work_dir)],
            )  # fmt: skip
        yield cluster
    finally:
        for process in cluster.processes.values():
            signal_group(process, signal.SIGTERM)  # a worker stops its executors first
        for process in cluster.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=15)
            signal_group(process, signal.SIGKILL)  # whatever of the group is left
            process.wait(timeout=15)


def signal_group(process: subprocess.Popen[bytes], number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone
        os.killpg(process.pid, number)


@pytest.fixture(scope="module")
def cluster(stack: Any, zk: Any, s3: Any, spark_cluster: SparkCluster) -> Iterator[dict[str, Any]]:
    """A generated Pulsar cluster under a ZooKeeper chroot and in a bucket of its own."""
    tag = uuid.uuid4().hex[:10]
    chroot, bucket = f"/reconcile-standalone-{tag}", f"reconcile-standalone-{tag}"
    zk.ensure_path(chroot)
    s3.create_bucket(Bucket=bucket)
    from kazoo.client import KazooClient

    client = KazooClient(hosts=stack.zookeeper + chroot)
    client.start()
    spec = ClusterSpec(
        ledgers=150,
        bucket=bucket,
        seed=11,
        first_ledger_id=random.randrange(10**6, 2**31 - 10**7, 1000),
        first_long_ledger_id=2**32 + random.randrange(0, 2**40, 1000),
    )
    plan = plan_cluster(spec)
    write_plan(client, s3, plan, bucket=bucket)
    client.stop()
    client.close()
    yield {"chroot": chroot, "bucket": bucket, "truth": plan.truth}
    zk.delete(chroot, recursive=True)
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    while objects:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objects]})
        objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    s3.delete_bucket(Bucket=bucket)


def reconcile(
    stack: Any, cluster: dict[str, Any], spark_cluster: SparkCluster, master: str, out: Path
) -> subprocess.CompletedProcess[str]:
    """The CLI as an operator runs it, in the driver's private directory, with the cut-off at its start."""
    private = spark_cluster.driver_private
    (private / "tmp").mkdir(exist_ok=True)
    zookeeper = stack.zookeeper + cluster["chroot"]
    env = {
        **os.environ,
        **stack.as_env(),
        "LEDGER_DELETION_ZOOKEEPER": zookeeper,
        "LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER": zookeeper,
        "LEDGER_DELETION_OFFLOAD_BUCKET": cluster["bucket"],
        "TMPDIR": str(private / "tmp"),
        "SPARK_LOCAL_DIRS": str(private / "spark-local"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The JVM's own temporary files too (java.io.tmpdir ignores TMPDIR).
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.executor.memory={EXECUTOR_MEMORY_MB}m "
        f"--conf 'spark.driver.extraJavaOptions=-Djava.io.tmpdir={private / 'tmp'} {SHORT_LIVED_JVM}' "
        f"--conf 'spark.executor.extraJavaOptions={SHORT_LIVED_JVM}' pyspark-shell",
    }
    command = str(Path(sys.executable).parent / "ledger-deletion")
    argv = [command, "reconcile", "--master", master, "--min-age", "0s"]
    return subprocess.run(
        [*argv, "--out", str(out)], cwd=private, env=env, capture_output=True, text=True, timeout=600
    )


def candidates(out: Path) -> list[Any]:
    with (out / "candidates.jsonl").open(encoding="utf-8") as candidates:
        lines = list(parse_jsonl(candidates))
    assert [item for _, item in lines if isinstance(item, LineError)] == []
    return [item for _, item in lines]


def test_a_standalone_cluster_finds_the_candidates_local_spark_finds(
    stack: Any, cluster: dict[str, Any], spark_cluster: SparkCluster
) -> None:
    local_out, cluster_out = spark_cluster.shared / "local", spark_cluster.shared / "standalone"

    def on_the_cluster() -> subprocess.CompletedProcess[str]:
        spark_cluster.wait_for_workers(2)
        return reconcile(stack, cluster, spark_cluster, spark_cluster.master_url, cluster_out)

    # Side by side: most of each run is a JVM starting and waiting, on a machine with two cores.
    with ThreadPoolExecutor(2) as runs:
        local_run = runs.submit(reconcile, stack, cluster, spark_cluster, "local[2]", local_out)
        cluster_run = runs.submit(on_the_cluster)
        local, ran = local_run.result(), cluster_run.result()
    assert local.returncode == 0, local.stderr[-3000:]
    assert ran.returncode == 0, ran.stderr[-3000:] + spark_cluster.log_tail("master")

    on_cluster, on_local = candidates(cluster_out), candidates(local_out)
    assert on_cluster == on_local and on_cluster  # the same requests, in the same order
    truth = cluster["truth"]
    ledgers = {
        r.ledger_id: r.ledger_component.value for r in on_cluster if r.ledger_type is LedgerType.LEDGER
    }
    offloads = {
        (offload_uuid(r.context.offload_context.uid_msb, r.context.offload_context.uid_lsb), r.ledger_id)
        for r in on_cluster
        if r.ledger_type is LedgerType.OFFLOAD_LEDGER
    }
    assert ledgers == truth.bk_candidates and offloads == truth.offload_candidates
    # The executors wrote the findings into the shared location.
    assert list((cluster_out / "findings.parquet").glob("part-*.parquet"))

    # The application ran on the cluster, each worker's executor in its own JVM, with the driver's settings.
    (app,) = [a for a in spark_cluster.json()["completedapps"] if a["name"] == "ledger-deletion-reconcile"]
    assert app["memoryperexecutor"] == EXECUTOR_MEMORY_MB
    for work_dir in spark_cluster.work_dirs:
        executor_logs = list(work_dir.glob(f"{app['id']}/*/stderr"))
        assert executor_logs, f"no executor ran on {work_dir.name}"
        assert any("Running task" in log.read_text(errors="replace") for log in executor_logs), work_dir.name

    # And none of them could see the driver's private directory (the driver removes its temporary files when
    # it stops; the mark stays).
    assert (spark_cluster.driver_private / MARK).exists()
    for number in (1, 2):
        worker = spark_cluster.processes[f"worker-{number}"]
        assert list(Path(f"/proc/{worker.pid}/root{spark_cluster.driver_private}").iterdir()) == []
