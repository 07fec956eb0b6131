"""``ledger-deletion worker``: run one or more pools in this process until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import signal

from ledger_deletion.observability import logs
from ledger_deletion.observability.setup import observed_client
from ledger_deletion.settings import Settings
from workers.pools import run_pools


async def serve(pools: list[str], settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Metrics endpoints, tracer provider and interceptors live on the client the pools' workers share.
    client = await observed_client(settings, pools)
    await run_pools(pools, settings, stop, client=client)


def main(pools: list[str], settings: Settings) -> None:
    logs.configure(settings)
    asyncio.run(serve(pools, settings))
