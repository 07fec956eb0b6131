"""bench/reconcile_benchmark.py: the server's request count read from ``mntr``, each mode compared with the
full read of the same cluster and round, and the table that shows it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bench.reconcile_benchmark import compare, packets_received, render


@pytest.fixture
def four_letter_server() -> Iterator[str]:
    """A server answering ``mntr`` as ZooKeeper 3.8 does (tab-separated key and value per line)."""
    listener = socket.create_server(("127.0.0.1", 0))
    answer = b"zk_version\t3.8.0\nzk_packets_received\t152406\nzk_packets_sent\t152400\n"

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            assert conn.recv(4) == b"mntr"
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}/some-chroot"
    thread.join(timeout=5)
    listener.close()


def test_packets_received_is_read_from_mntr(four_letter_server: str) -> None:
    assert packets_received(four_letter_server) == 152406


def _row(mode: str, requests: int, candidates: list[tuple[str, int]], **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "size": 1000,
        "round": 1,
        "mode": mode,
        "bk_ledgers": 1005,
        "metadata_read": 1005 if mode == "full" else 64,
        "zk_requests_server": requests,
        "zk_requests_per_ledger": requests / 1005,
        "candidates": len(candidates),
        "exact": True,
        "requests": candidates,
        "findings": [("bookkeeper", i, None, "candidate") for _, i in candidates],
        "extract_s": 6.0,
        "extract_cpu_s": 4.0,
        "reconcile_s": 20.0,
        "reconcile_cpu_s": 25.0,
        "s3_s": 3.0,
        "zk_server_cpu_s": 0.8,
        "s3_server_cpu_s": None,
    }
    row.update(over)
    return row


def test_each_mode_is_compared_with_the_full_read_of_its_cluster_and_round() -> None:
    found = [("LEDGER", 1), ("LEDGER", 2)]
    rows = [
        _row("full", 1593, found),
        _row("ids+multi", 76, found),
        _row("ids", 652, [("LEDGER", 1)]),  # one candidate missing: not the same as the full read
        _row("ids+multi", 80, found, size=100_000),  # no full read of that cluster
    ]

    compare(rows)

    assert [r["ratio_to_full"] for r in rows] == [1.0, 76 / 1593, 652 / 1593, None]
    assert [r["same_candidates_as_full"] for r in rows] == [True, True, False, None]
    assert [r["same_findings_as_full"] for r in rows] == [True, True, False, None]
    table = render(rows, spark_start_s=26.0)
    lines = [line for line in table.splitlines() if line.startswith("│")]  # the rows, not the header
    assert len(lines) == 4
    assert "0.0477" in lines[1] and "yes" in lines[1]
    assert "NO" in lines[2]
