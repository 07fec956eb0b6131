"""The ledger store's ZooKeeper client keeps trying to connect at least about once a second.

kazoo's default backoff doubles up to an hour: after a ZooKeeper outage of T seconds its next attempt
could come ~T seconds after the server is back, past the session timeout the server allows a restored
session, and every request queued meanwhile then fails with SessionExpiredError (a CI run of the
ZooKeeper-outage fault test did). Here a listener that accepts and drops every connection stands for an
unreachable ZooKeeper, and records when each attempt arrives.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time

import pytest

from ledger_deletion.adapters.zookeeper import RECONNECT_MAX_DELAY_SECONDS, LedgerStore
from ledger_deletion.errors import MetadataStoreUnavailable

# kazoo adds up to 0.4 s of jitter to each delay; the rest is room for a loaded machine. The default policy's
# gaps in the same 10 s are 0.2, 0.4, 0.8, 1.6, 3.2 s and then ~3.7 s to the deadline.
ALLOWED_GAP_SECONDS = RECONNECT_MAX_DELAY_SECONDS + 1.5


def test_connection_attempts_never_pause_longer_than_the_reconnect_cap() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    attempts: list[float] = []
    done = threading.Event()

    def drop_every_connection() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            attempts.append(time.monotonic())
            conn.close()

    thread = threading.Thread(target=drop_every_connection, daemon=True)
    thread.start()
    store = LedgerStore(f"127.0.0.1:{port}", timeout_seconds=10.0)
    began = time.monotonic()
    try:
        with pytest.raises(MetadataStoreUnavailable):
            store.read(1)
    finally:
        ended = time.monotonic()
        done.set()
        thread.join()
        listener.close()
        store.close()

    points = [began, *attempts, ended]
    gaps = [later - earlier for earlier, later in itertools.pairwise(points)]
    assert len(attempts) >= 7, f"only {len(attempts)} connection attempts in {ended - began:.1f} s"
    assert max(gaps) < ALLOWED_GAP_SECONDS, f"longest pause between attempts {max(gaps):.1f} s: {gaps}"
