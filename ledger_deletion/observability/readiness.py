"""Is this process connected to what its pools need? ``/ready``, served beside ``/metrics``.

``/metrics`` answers as long as the process lives, so a probe on it says only that: a pool whose Temporal
client cannot reach the frontend, or whose Pulsar consumer has lost its broker, would still look ready, and a
rolling update (``maxUnavailable: 0``) would stop the old pod for a new one that cannot work. ``/ready``
answers 200 only while the process has checks (its pools add them once started) and every one passed within
the last few periods, else 503, with each check's last answer as JSON either way.

The checks run on the process's own event loop (the clients they ask are bound to it) every ``period``
seconds; the HTTP thread only reads their last answers. A check that has not answered for three periods
counts as failed, so a wedged loop is not ready either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[str]]  # "" when fine, else what is wrong (one line)
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
PATH = "/ready"
STALE_PERIODS = 3


@dataclass(frozen=True)
class Answer:
    problem: str  # "" when fine
    at: float  # time.monotonic() of the answer


class Readiness:
    """The checks of one process and their last answers."""

    def __init__(self, period_seconds: float = 5.0, timeout_seconds: float = 5.0) -> None:
        self._period = period_seconds
        self._timeout = timeout_seconds
        self._checks: dict[str, Check] = {}
        # Replaced whole, never mutated: the HTTP thread reads it while the event loop writes it.
        self._answers: dict[str, Answer] = {}
        self._lock = threading.Lock()

    def add(self, name: str, check: Check) -> None:
        """Check ``name`` from now on (a pool adds one per system it needs)."""
        self._checks[name] = check

    def discard(self, name: str) -> None:
        """Stop checking ``name`` (its pools stopped, its clients closed)."""
        self._checks.pop(name, None)
        with self._lock:
            self._answers = {k: v for k, v in self._answers.items() if k != name}

    async def check_once(self) -> dict[str, str]:
        """Run every check now (each bounded by the timeout); their answers become the current ones."""
        names = list(self._checks)
        results = await asyncio.gather(*(self._run(self._checks[name]) for name in names))
        now = time.monotonic()
        with self._lock:
            self._answers = {
                **self._answers,
                **{n: Answer(p, now) for n, p in zip(names, results, strict=True)},
            }
        return dict(zip(names, results, strict=True))

    async def run(self, stop: asyncio.Event) -> None:
        """Check every period until ``stop``; a failure that starts or ends is logged once."""
        last: dict[str, str] = {}
        while not stop.is_set():
            for name, problem in (await self.check_once()).items():
                if problem != last.get(name, ""):
                    log.warning("readiness %s: %s", name, problem or "ok again")
                last[name] = problem
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._period)

    def status(self) -> tuple[bool, dict[str, str]]:
        """Ready? And each check's state ("ok" or its problem), as the HTTP thread serves them."""
        with self._lock:
            answers = self._answers
        now = time.monotonic()
        states: dict[str, str] = {}
        for name in self._checks:
            answer = answers.get(name)
            if answer is None:
                states[name] = "not checked yet"
            elif now - answer.at > STALE_PERIODS * self._period + self._timeout:
                states[name] = f"no answer for {now - answer.at:.0f} s"
            else:
                states[name] = answer.problem or "ok"
        # No check yet: the metrics server is up before the pools, which add their checks once connected; a
        # process that has not got that far is not ready.
        return bool(states) and all(state == "ok" for state in states.values()), states

    async def _run(self, check: Check) -> str:
        try:
            return await asyncio.wait_for(check(), self._timeout)
        except TimeoutError:
            return f"no answer within {self._timeout:g} s"
        except Exception as exc:  # a check that fails is a problem to report, not a reason to stop checking
            return f"{type(exc).__name__}: {exc}"[:300]


_current = Readiness()


def current() -> Readiness:
    """The process's readiness (one per process, as its metrics)."""
    return _current


def serve_ready(app: WsgiApp, readiness: Callable[[], Readiness] = current) -> WsgiApp:
    """``app`` (Prometheus' WSGI app) with ``/ready`` in front of it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return app(environ, start_response)
        ready, states = readiness().status()
        body = json.dumps({"ready": ready, "checks": states}).encode()
        status = "200 OK" if ready else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return wrapped


class _QuietHandler(WSGIRequestHandler):
    """Probes every few seconds would flood the log."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


def start_server(port: int, host: str) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` (prometheus_client's own WSGI app) and ``/ready`` on ``host:port``, from a daemon
    thread: what ``prometheus_client.start_http_server`` does, with ``/ready`` added.

    Raises:
        OSError: the port is taken.
    """
    # The family of the address asked for (an IPv6 one needs AF_INET6), picked as prometheus_client does.
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    app = serve_ready(make_wsgi_app())
    server = make_server(str(address[0]), port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
