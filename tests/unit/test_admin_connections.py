"""The admin client keeps a connection alive for each thread that calls it at once.

httpx keeps 20 connections alive by default; the pulsar pool calls from up to ``pulsar_concurrency`` threads,
so past 20 every call opened and closed a TCP connection (and, against a real broker, a TLS session).
"""

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer

import httpx
import pytest

from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from tests.unit.admin_stub import AdminHandler, serving

CALLERS = 40


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self._lock = threading.Lock()

    def process_request(self, request: object, client_address: object) -> None:
        with self._lock:
            self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


class _Handler(AdminHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        time.sleep(0.3)  # long enough that all callers are in flight at once, on a loaded machine too
        self.reply(200, json.dumps({"partitions": 0}).encode())


@pytest.fixture
def server() -> Iterator[_CountingServer]:
    with serving(_CountingServer()) as srv:
        yield srv


def _rounds(client: PulsarAdminClient, rounds: int) -> None:
    with ThreadPoolExecutor(CALLERS) as pool:
        for _ in range(rounds):
            assert (
                list(pool.map(lambda i: client.partitions(f"t/n/topic-{i}"), range(CALLERS))) == [0] * CALLERS
            )


def test_concurrent_callers_reuse_their_connections(server: _CountingServer) -> None:
    client = PulsarAdminClient(f"http://127.0.0.1:{server.server_port}", max_connections=CALLERS)
    try:
        _rounds(client, 3)
    finally:
        client.close()
    assert server.connections <= CALLERS


def test_httpx_defaults_reconnect(server: _CountingServer) -> None:
    """What the client did before: httpx keeps 20 alive by default, so 40 callers reconnect each round."""
    client = PulsarAdminClient(f"http://127.0.0.1:{server.server_port}")
    client._http.close()
    client._http = httpx.Client(follow_redirects=False)
    try:
        _rounds(client, 3)
    finally:
        client.close()
    assert server.connections > CALLERS
