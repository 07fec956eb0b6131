"""A TCP proxy that can cut a client off its server: a network partition on loopback, for tests.

``cut()`` closes every connection through the proxy and refuses new ones (each is accepted and closed at
once) until ``heal()``; the server sees the client go, the client sees its connection drop and its
reconnections fail, as across a partition. Dev/test tooling.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from devstack.stack import HOST

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target: str, port: int = 0) -> None:
        host, _, target_port = target.rpartition(":")
        self._target = (host, int(target_port))
        self._listener = socket.create_server((HOST, port))
        self._cut = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()

    @property
    def address(self) -> str:
        return f"{HOST}:{self._listener.getsockname()[1]}"

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()
        return self

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def heal(self) -> None:
        self._cut.clear()

    def stop(self) -> None:
        self._stopped.set()
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                _close(client)
                continue
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _close(sock)
                with self._lock:
                    self._open.discard(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
