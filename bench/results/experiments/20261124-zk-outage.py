"""Throwaway probe (2026-11-24): how soon after ZooKeeper is back does a kazoo client resume?

kazoo's default reconnect backoff against ``kazoo_client()`` (at least one attempt a second), both
connected to the default stack's ZooKeeper during the same outage. Usage, with the default stack up:
``python <this file> 10 30 60`` (outages in s). Output in 20261124-zk-outage.txt.
"""

from __future__ import annotations

import sys
import threading
import time

from kazoo.client import KazooClient

from devstack.faults import ServiceControl
from devstack.stack import Stack, default_state_dir
from ledger_deletion.adapters.zookeeper import kazoo_client


def first_request_ok(client: KazooClient, at: dict[str, float], name: str) -> None:
    while True:
        try:
            client.exists("/")
        except Exception:  # noqa: BLE001 - any failure means "not back yet"
            time.sleep(0.05)
            continue
        at[name] = time.monotonic()
        return


def main() -> None:
    stack = Stack(default_state_dir())
    stack.up(install=False)
    hosts = stack.endpoints().zookeeper
    services = ServiceControl(stack)
    for outage in (float(arg) for arg in sys.argv[1:]):
        clients = {"default": KazooClient(hosts=hosts, timeout=10.0), "capped": kazoo_client(hosts, 10.0)}
        for client in clients.values():
            client.start(timeout=10)
        sessions = {name: client.client_id[0] for name, client in clients.items()}
        services.stop("zookeeper")
        stopped = time.monotonic()
        time.sleep(outage)
        services.start()
        healthy = time.monotonic()
        ok_at: dict[str, float] = {}
        probes = [
            threading.Thread(target=first_request_ok, args=(client, ok_at, name))
            for name, client in clients.items()
        ]
        for probe in probes:
            probe.start()
        for probe in probes:
            probe.join(120)
        for name, client in clients.items():
            kept = "kept" if client.client_id[0] == sessions[name] else "EXPIRED"
            print(
                f"outage {outage:4.0f}s (down {healthy - stopped:5.1f}s incl. restart)  {name:8s} "
                f"first request ok {ok_at[name] - healthy:5.1f}s after healthy, session {kept}",
                flush=True,
            )
            client.stop()
            client.close()


if __name__ == "__main__":
    main()
