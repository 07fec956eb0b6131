"""Every fixed loopback port the dev stack, the tests and the benchmarks use, in one place.

Each stack that may run beside another (the shared embedded stack, the fault tests' private stack, the
soak's, a benchmark's, a test's private ZooKeeper) takes a block of its own: ``base`` plus the default
stack's last three digits (``block(24000).temporal`` is 24233). All blocks lie below Linux's ephemeral range
(32768 and up), so a port the kernel hands out for ``port=0`` never takes one of them.
``tests/unit/test_ports.py`` checks that no two blocks share a port and that no test or benchmark writes a
port number of its own.

A test or a tool that only needs *a* port asks the kernel (``port=0``); only what must be found again by
another process (a stack's pid files and recorded ports, a restart on the same port) takes a block here.
"""

from __future__ import annotations

from devstack.stack import StackPorts

EPHEMERAL_FIRST = 32768  # /proc/sys/net/ipv4/ip_local_port_range's default start


def block(base: int, server_metrics: bool = False) -> StackPorts:
    """A stack's ports at ``base`` (a multiple of 1000): the default ports' last three digits added to it;
    with ``server_metrics`` the Temporal server's Prometheus endpoint at ``base`` + 235 (off otherwise)."""
    return StackPorts(
        temporal=base + 233,
        temporal_ui=base + 234,
        pulsar=base + 650,
        zookeeper=base + 181,
        s3=base + 900,
        admin=base + 80,
        admin_owner=base + 81,
        pulsar_metrics=base + 90,
        temporal_metrics=base + 235 if server_metrics else 0,
    )


def s3_proxy(base: int) -> int:
    """The fault-injecting S3 proxy in front of the block's S3 server."""
    return base + 901


# The shared embedded stack (`ledger-deletion stack up`): StackPorts' defaults, 1xxxx.
DEFAULT = StackPorts()
# A ZooKeeper and S3 stand-in for the reconcile benchmark (`bench/reconcile_benchmark.py`).
RECONCILE_BENCH = 22000
# `bench/benchmark.py`'s stack (its --port-base default).
BENCH = 23000
# tests/faults: the private stack the fault tests kill and restart; one per pytest-xdist worker (the tests
# kill and restart its services, so two workers never share one). Worker gw<n> takes FAULTS_BY_WORKER[n].
FAULTS = 24000
FAULTS_BY_WORKER = (FAULTS, 30000, 31000, 21000, 20000, 15000, 14000, 13000)
# `ledger-deletion soak`'s private stack.
SOAK = 25000
# bench/tests/test_benchmark_end_to_end.py: the benchmark run end to end.
BENCH_TEST = 26000
# tests/stack/test_stack.py: a stack brought up on ports other than the default's.
OTHER_STACK = 27000
# tests/integration/test_watcher_zookeeper_restart.py: a ZooKeeper the test restarts under the watcher.
WATCH_ZK_RESTART = 28000
# `bench/watch_benchmark.py`'s ZooKeeper.
WATCH_BENCH = 29000
# tests/reconcile/test_reconcile_scan.py: a ZooKeeper whose request count (mntr) no other test adds to.
RECONCILE_SCAN_ZK = 11000

BLOCKS: dict[str, int] = {
    "reconcile-bench": RECONCILE_BENCH,
    "bench": BENCH,
    **{f"faults-gw{n}": base for n, base in enumerate(FAULTS_BY_WORKER)},
    "soak": SOAK,
    "bench-test": BENCH_TEST,
    "other-stack": OTHER_STACK,
    "watch-zk-restart": WATCH_ZK_RESTART,
    "watch-bench": WATCH_BENCH,
    "reconcile-scan-zk": RECONCILE_SCAN_ZK,
}


def faults(worker: str | None) -> int:
    """The fault stack's block of pytest-xdist worker ``worker`` (``PYTEST_XDIST_WORKER``: ``gw0``, ``gw1``,
    ...; ``None`` outside xdist, which takes the first)."""
    index = int(worker.removeprefix("gw")) if worker else 0
    if index >= len(FAULTS_BY_WORKER):
        most = len(FAULTS_BY_WORKER)
        raise ValueError(f"{most} fault stacks at most: run pytest with -n {most} or fewer")
    return FAULTS_BY_WORKER[index]


def all_ports() -> dict[str, int]:
    """Every port of every block (and the default stack), by ``<block>.<service>``: what the layout test
    checks for clashes."""
    ports: dict[str, int] = {}
    for name, base in {"default": 10000, **BLOCKS}.items():
        stack = DEFAULT if name == "default" else block(base, server_metrics=True)
        for service, port in vars(stack).items():
            if port:
                ports[f"{name}.{service}"] = port
        if name != "default":
            ports[f"{name}.s3_proxy"] = s3_proxy(base)
    return ports
