"""Fixed ports come from one place (devstack.ports), so no two stacks, tests or benchmarks can collide.

Two that did: the watcher's ZooKeeper-restart test and the benchmark's end-to-end stack both took 26181, and
the watch benchmark's ZooKeeper took 27181, the port of test_stack's stack on other ports.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from devstack import ports

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "bench", "devstack/src/devstack")

# A port number in the blocks' range assigned in code: `port=24901`, `PORT = 26181`, `zookeeper=27181`,
# `default=22181` next to a port option. Upstream defaults (bookiePort=3181) are facts about Pulsar, and
# addresses in strings (`127.0.0.1:24901`, "temporal:7233") data under test: no port of ours.
_LITERAL = re.compile(
    r"(?i)\b(\w*port\w*|temporal\w*|pulsar\w*|zookeeper|s3|admin\w*)\s*=\s*(\d{4,5})\b"
    r"|--\w*-port\",[^)]*default=(\d{4,5})"
)


def test_no_two_blocks_share_a_port() -> None:
    used = ports.all_ports()
    clashes = {
        port: [k for k, v in used.items() if v == port] for port, n in Counter(used.values()).items() if n > 1
    }
    assert not clashes


def test_every_block_is_below_the_ephemeral_range() -> None:
    """A port the kernel hands out for ``port=0`` must never be one a stack will bind later."""
    assert all(1024 < port < ports.EPHEMERAL_FIRST for port in ports.all_ports().values())


def test_the_blocks_are_the_ones_their_users_take() -> None:
    """The soak and the benchmark take their blocks through functions of their own; the fault tests and the
    ZooKeeper-restart test name theirs in place, and the scan below keeps any number out of them."""
    from bench.processes import bench_ports
    from devstack.soak import soak_ports, soak_proxy_port

    assert (soak_ports(), soak_proxy_port()) == (ports.block(ports.SOAK), ports.s3_proxy(ports.SOAK))
    assert bench_ports() == ports.block(ports.BENCH)


def test_no_module_writes_a_port_number_of_its_own() -> None:
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "ports.py" or path == Path(__file__).resolve():
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for match in _LITERAL.finditer(line):
                    port = int(next(group for group in match.groups()[1:] if group))
                    if 10000 <= port < ports.EPHEMERAL_FIRST:  # where our stacks take blocks
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "take a block from devstack.ports, or port=0:\n" + "\n".join(found)
