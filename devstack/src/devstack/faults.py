"""Fault injection for the embedded stack: a misbehaving S3 proxy, killed services, killed worker pools.

Used by ``tests/faults`` and by ``ledger-deletion soak``. Everything here acts on loopback processes this
machine started (stack services by their pid files, pool processes by the ``Popen`` we hold); nothing is
found or killed by name. Dev/test tooling, not product code.

* :class:`S3FaultProxy` sits between the service and moto: it forwards S3 requests, and on demand answers
  500 / 503 / ``SlowDown`` for a while, or stops listening altogether (connection refused). moto keeps its
  objects in memory, so "S3 unavailable" has to be simulated in front of it: killing moto would lose the data.
* :class:`ServiceControl` kills (``SIGKILL``), stops (``SIGTERM``) and restarts single stack services.
* :class:`PoolProcess` / :class:`PoolSet` run ``ledger-deletion worker --pool X`` as subprocesses, so a pool
  can be killed with ``SIGKILL`` in the middle of a batch and started again.
* :func:`count_redeliverable` and :func:`read_dead_letters` observe the invariants from outside.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr

from devstack.stack import Stack
from devstack.stack import _alive as _stack_alive  # pid liveness incl. reaping our own children
from ledger_deletion.settings import Settings

log = logging.getLogger(__name__)

FailMode = Literal["500", "503", "SlowDown", "mixed"]

# Bodies as S3 sends them, so botocore classifies them exactly as it would classify the real thing
# (InternalError and SlowDown are retryable in botocore's standard mode, like any 5xx).
_S3_ERRORS: dict[str, tuple[int, str, str]] = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "ServiceUnavailable", "Service is unable to handle request."),
    "SlowDown": (503, "SlowDown", "Please reduce your request rate."),
}
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
}


# --- S3 fault proxy -----------------------------------------------------------------------------------------


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: S3FaultProxy


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3 expects from S3
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per request would drown the test output

    def setup(self) -> None:
        super().setup()
        self.server.proxy._track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.proxy._track(self.connection, add=False)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._body()
        proxy.requests += 1
        proxy._record(self.command, self.path, body)
        failure = proxy._failure()
        if failure is not None:
            proxy.failed += 1
            status, code, message = _S3_ERRORS[failure]
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                f"</Message><RequestId>{uuid.uuid4().hex}</RequestId></Error>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError:
            # Upstream gone: the client sees a dropped connection, as it would without the proxy.
            self.close_connection = True
            return
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        # HEAD answers carry the object's length but no body.
        length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815 - BaseHTTPRequestHandler API


class S3FaultProxy:
    """An HTTP proxy on loopback in front of an S3 endpoint that fails on demand.

    ``fail("SlowDown", 10)`` answers every request with that error for 10 s; ``go_down()`` closes the port
    and every open connection (clients get connection refused / reset) until ``come_back()``.
    """

    def __init__(self, upstream: str, *, port: int = 0, host: str = "127.0.0.1") -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.host = host
        self.port = port
        self.requests = 0
        self.failed = 0
        # (method, path with query, body) of the most recent requests: what the service asked S3 to do.
        self.recorded: list[tuple[str, str, bytes]] = []
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None
        self._mode: FailMode | None = None
        self._until = 0.0
        self._cycle = itertools.cycle(("500", "503", "SlowDown"))
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> S3FaultProxy:
        server = _ProxyServer((self.host, self.port), _ProxyHandler)
        server.proxy = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.go_down()

    def fail(self, mode: FailMode = "mixed", seconds: float | None = None) -> None:
        """Answer errors from now on: for ``seconds``, or until :meth:`heal` when None."""
        with self._lock:
            self._mode = mode
            self._until = time.monotonic() + seconds if seconds is not None else float("inf")

    def heal(self) -> None:
        with self._lock:
            self._mode = None

    def go_down(self) -> None:
        """Stop listening and cut every open connection: the endpoint is unreachable."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def come_back(self) -> None:
        if self._server is None:
            self.start()

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _failure(self) -> str | None:
        with self._lock:
            if self._mode is None or time.monotonic() >= self._until:
                self._mode = None
                return None
            return next(self._cycle) if self._mode == "mixed" else self._mode

    def _record(self, method: str, path: str, body: bytes) -> None:
        with self._lock:
            self.recorded.append((method, path, body[:65536]))
            del self.recorded[:-5000]

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


# --- stack services -----------------------------------------------------------------------------------------


class ServiceControl:
    """Kill, stop and restart single services of a :class:`Stack` (found by its pid files only)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def pid(self, name: str) -> int | None:
        # Stack keeps its service table private; its pid check (pid file + cmdline markers) is the one to use.
        services = {s.name: s for s in self.stack._services()}
        return self.stack._pid(services[name])

    def kill9(self, name: str, timeout: float = 10.0) -> int:
        """SIGKILL the service's process group (a crash: no shutdown hooks, no flush)."""
        return self._signal(name, signal.SIGKILL, timeout)

    def stop(self, name: str, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it is still alive after ``timeout``."""
        try:
            return self._signal(name, signal.SIGTERM, timeout)
        except TimeoutError:
            return self._signal(name, signal.SIGKILL, 10.0)

    def start(self, timeout: float = 120.0) -> None:
        """Start whatever is not running and wait until every service is healthy (``Stack.up``)."""
        self.stack.up(install=False, timeout=timeout)

    def _signal(self, name: str, sig: int, timeout: float) -> int:
        pid = self.pid(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running (no live pid file under {self.stack.state_dir})")
        with contextlib.suppress(ProcessLookupError):
            # start_new_session made the service a group leader: the group holds its helper processes.
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        service = next(s for s in self.stack._services() if s.name == name)
        # Not self.pid(): a dying process's cmdline is already empty, so it stops "matching" while it still
        # holds its ports. Wait for the process itself to be gone (reaped, if it is our child) and for its
        # ports to close, or the restart finds them busy.
        while _stack_alive(pid) or service.is_listening():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} (pid {pid}) still alive {timeout:.0f} s after signal {sig}")
            time.sleep(0.1)
        log.info("%s (pid %d) ended by signal %d", name, pid, sig)
        return pid


# --- worker pools as subprocesses ---------------------------------------------------------------------------


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes ``load_settings()`` in a child process equal to ``settings``."""
    env: dict[str, str] = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, dict):
            value = json.dumps(
                {k: v.model_dump() if hasattr(v, "model_dump") else v for k, v in value.items()}
            )
        elif isinstance(value, bool):
            value = "true" if value else "false"
        env[f"LEDGER_DELETION_{name.upper()}"] = str(value)
    # Several pool processes on one machine: no fixed metrics ports (they would collide).
    env["LEDGER_DELETION_METRICS_PORT"] = "0"
    env["LEDGER_DELETION_TEMPORAL_METRICS_PORT"] = "0"
    return env


def _worker_argv(pools: tuple[str, ...]) -> list[str]:
    script = Path(sys.executable).parent / "ledger-deletion"
    base = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from ledger_deletion.cli import main; main()"]
    )
    argv = [*base, "worker"]
    for pool in pools:
        argv += ["--pool", pool]
    return argv


@dataclass
class PoolProcess:
    """One ``ledger-deletion worker --pool ...`` process."""

    pools: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log_offset: int = field(default=0, init=False)

    @property
    def name(self) -> str:
        return "+".join(self.pools)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> PoolProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                _worker_argv(self.pools),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # its own group: SIGKILL reaches the process and nothing else
            )
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the process logged that its pools run (workers polling, consumer subscribed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"pool {self.name} exited during start-up; see {self.log_path}")
            with open(self.log_path, "rb") as log_file:
                log_file.seek(self._log_offset)
                if b"running (ack queue" in log_file.read():
                    return
            time.sleep(0.1)
        raise TimeoutError(f"pool {self.name} not ready after {timeout:.0f} s; see {self.log_path}")

    def kill9(self) -> None:
        self._signal(signal.SIGKILL, 10.0)

    def terminate(self, timeout: float = 30.0) -> None:
        """SIGTERM (the pools' graceful shutdown), SIGKILL if it takes longer than ``timeout``."""
        try:
            self._signal(signal.SIGTERM, timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, timeout: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=timeout)


@dataclass
class PoolSet:
    """One process per pool (the production layout), each killable on its own."""

    settings: Settings
    log_dir: Path
    pools: tuple[str, ...] = ("workflow", "pulsar", "bookkeeper", "offload")
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, PoolProcess] = field(default_factory=dict)

    def _process(self, pool: str) -> PoolProcess:
        env = {**settings_env(self.settings), **self.extra_env}
        return PoolProcess((pool,), env, self.log_dir / f"pool-{pool}.log")

    def start(self, timeout: float = 90.0) -> PoolSet:
        for pool in self.pools:
            self.processes[pool] = self._process(pool).start()
        for process in self.processes.values():
            process.wait_ready(timeout)
        return self

    def kill9(self, pool: str) -> None:
        self.processes[pool].kill9()

    def restart(self, pool: str, timeout: float = 90.0) -> None:
        """Start a fresh process for ``pool`` (after a kill or a stop) and wait until it runs."""
        old = self.processes.get(pool)
        if old is not None and old.alive:
            old.kill9()
        self.processes[pool] = self._process(pool).start()
        self.processes[pool].wait_ready(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        for process in self.processes.values():
            if process.alive and process.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.proc.pid, signal.SIGTERM)
        for process in self.processes.values():
            process.terminate(timeout)

    def __enter__(self) -> PoolSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- observing the invariants from outside ------------------------------------------------------------------


def _pulsar_client(settings: Settings) -> Any:
    import pulsar

    return pulsar.Client(
        settings.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def count_redeliverable(
    settings: Settings, quiet_seconds: float = 3.0, limit: int = 100_000, passes: int = 2
) -> int:
    """Messages of the deletion subscription still unacked: join it as one more consumer and count what
    Pulsar hands over until it stays quiet for ``quiet_seconds``. Nothing is acked: they stay unacked.

    pulsar-lite can stall a dispatch part-way (see :func:`read_dead_letters`), which would undercount
    here; a count that is too low would hide lost acks. So it reads ``passes`` times, each with a fresh
    consumer (closing one hands its unacked messages back for redelivery), and counts the union.

    Meaningful only when no pool consumes at the same time (Shared: they would split the backlog).
    """
    import pulsar

    from workers.topics import subscribe_all

    client = _pulsar_client(settings)
    try:
        seen: set[str] = set()
        for _ in range(passes):
            consumer = subscribe_all(client, settings, 1000)
            last = time.monotonic()
            while time.monotonic() - last < quiet_seconds and len(seen) < limit:
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                seen.add(f"{message.topic_name()}|{message.message_id()}")
                last = time.monotonic()
            consumer.close()
        return len(seen)
    finally:
        client.close()


def read_dead_letters(
    settings: Settings, quiet_seconds: float = 2.0, expect: int | None = None, timeout: float = 60.0
) -> list[Any]:
    """Every message of the dead-letter topic, from the earliest (each message once).

    pulsar-lite (0.2.0) sometimes stops dispatching to a consumer part-way through a large backlog and
    never resumes it (seen with the 10k fuzz corpus and its megabyte payloads: a pass from the earliest
    position ended 1,000–5,000 messages short at random points, whatever the receiver queue size or the
    quiet time). So this reads with a throwaway subscription that acks what it gets, and after
    ``quiet_seconds`` without a message subscribes again: the new consumer resumes after the acked
    messages, so every pass makes progress. ``expect`` is a lower bound: it stops after a pass that ends
    with at least ``expect`` messages, or (without ``expect``) after two passes in a row that add
    nothing (a pass may stall at once), or at ``timeout``.
    The subscription is left behind (see the end).
    """
    import pulsar

    client = _pulsar_client(settings)
    subscription = f"dead-letter-reader-{uuid.uuid4().hex[:8]}"
    letters: dict[tuple[str, str], Any] = {}
    began = time.monotonic()
    empty_passes = 0
    try:
        while time.monotonic() - began < timeout and (expect is None or len(letters) < expect):
            before = len(letters)
            consumer = client.subscribe(
                settings.dead_letter_topic,
                subscription,
                consumer_type=pulsar.ConsumerType.Exclusive,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=100,
            )
            last = time.monotonic()
            while time.monotonic() - last < quiet_seconds:
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                letters.setdefault((message.topic_name(), str(message.message_id())), message)
                consumer.acknowledge(message)
                last = time.monotonic()
            consumer.close()
            empty_passes = empty_passes + 1 if len(letters) == before else 0
            if expect is None and empty_passes >= 2:
                break
        # The subscription is left on the (test or soak) topic: harmless there, whereas pulsar-client's
        # unsubscribe crashed its process with a segmentation fault after a broker restart
        # (test_zz_service_restarts under scripts/test).
        return list(letters.values())
    finally:
        client.close()


@contextlib.contextmanager
def s3_proxy(upstream: str, port: int = 0) -> Iterator[S3FaultProxy]:
    proxy = S3FaultProxy(upstream, port=port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
