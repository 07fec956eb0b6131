"""A private pulsar-lite broker on free loopback ports, with its metrics endpoint, for one test module.

The shared stack's broker is started once and shared; a test that needs what only a fresh broker has (its
metrics endpoint switched on, a topic's backlog nobody else touches) starts one of these beside it. Dev/test
tooling, not product code.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

HOST = "127.0.0.1"


def pulsar_lite_binary() -> Path:
    override = os.environ.get("PULSAR_LITE_BINARY")
    if override and Path(override).exists():
        return Path(override)
    spec = importlib.util.find_spec("pulsar_lite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "pulsar-lite"
        if candidate.exists():
            return candidate
    raise FileNotFoundError("no pulsar-lite binary: pip install pulsar-lite (the stack's own requirement)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((HOST, port)) == 0


class PrivatePulsarLite:
    """``with PrivatePulsarLite() as broker:`` ``broker.url`` and ``broker.metrics_url`` answer."""

    def __init__(self, partitions: int = 4) -> None:
        self._partitions = partitions
        self._dir = tempfile.TemporaryDirectory(prefix="pulsar-lite-")
        self._process: subprocess.Popen[bytes] | None = None
        self.port = _free_port()
        self.metrics_port = _free_port()

    @property
    def url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}/metrics"

    def start(self, timeout: float = 30.0) -> PrivatePulsarLite:
        root = Path(self._dir.name)
        config = root / "pulsar-lite.toml"
        config.write_text(
            f"default_partitions = {self._partitions}\n\n[metrics]\nenabled = true\n"
            f'addr = "{HOST}:{self.metrics_port}"\n'
        )
        # The child writes to its own copy of the descriptor: this process's is closed once it is started.
        with (root / "pulsar-lite.log").open("wb") as log:
            self._process = subprocess.Popen(
                [
                    str(pulsar_lite_binary()),
                    "--config",
                    str(config),
                    "--addr",
                    f"{HOST}:{self.port}",
                    "--db-path",
                    str(root / "data"),
                    "--log-level",
                    "warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not (_listening(self.port) and _listening(self.metrics_port)):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pulsar-lite did not start: {(root / 'pulsar-lite.log').read_text()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        self._dir.cleanup()

    def __enter__(self) -> PrivatePulsarLite:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
