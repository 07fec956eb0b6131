"""What A's extras make the Temporal server write: persistence operations per workflow, counted, not timed.

    python bench/server_writes.py --variants plain,attrs,upsert,upsert-last

Timing the server (``bench/server_cost.py``) is noisy: the same variant moves ±10 % from run to run. This
script counts instead. It starts a dev server of its own with its Prometheus endpoint on (the embedded stack
leaves it off), runs ``--n`` workflows of each ``bench/server_cost.py`` variant, and prints the server's
``persistence_requests`` and ``visibility_persistence_requests`` per workflow, by operation. The counts are
exact. This is how the outcome upsert's extra visibility write was found (docs/performance.md, change 13).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402

from bench.server_cost import VARIANTS, run_variant, variant_workers  # noqa: E402
from bench.server_metrics import per_item, scrape  # noqa: E402
from devstack.stack import HOST, temporal_server_argv  # noqa: E402

PERSISTENCE = ("persistence_requests", "visibility_persistence_requests")


async def connect(address: str, timeout: float = 60.0) -> Client:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await Client.connect(address)
        except RuntimeError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def count(args: argparse.Namespace, database: Path) -> None:
    address, metrics_url = f"{HOST}:{args.port}", f"http://{HOST}:{args.port + 2}/metrics"
    # The embedded stack's server, with its Prometheus endpoint on.
    argv = temporal_server_argv(args.port, args.port + 1, database, "--metrics-port", str(args.port + 2))
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = await connect(address)
        queue = "server-writes"
        async with variant_workers(client, queue, concurrency=32):
            await run_variant(client, queue, "plain", 20, 20)  # warm-up: namespace and queue creation
            for variant in args.variants.split(","):
                await asyncio.sleep(args.settle)
                before = scrape(metrics_url, PERSISTENCE)
                await run_variant(client, queue, variant, args.n, 50)
                # Visibility writes trail the workflow's completion: let the queue drain.
                await asyncio.sleep(args.settle)
                after = scrape(metrics_url, PERSISTENCE)
                print(f"== {variant}: per workflow")
                for key, value in per_item(before, after, args.n).items():
                    metric, operation = key.split(" ", 1)
                    print(f"  {metric:<34} {operation:<40} {value:6.2f}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--n", type=int, default=100, help="workflows per variant")
    parser.add_argument("--port", type=int, default=28233, help="gRPC port; UI on +1, metrics on +2")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to let background writes finish")
    args = parser.parse_args()
    database = Path(tempfile.mkdtemp(prefix="ld-server-writes-"))
    try:
        asyncio.run(count(args, database / "temporal.db"))
    finally:
        shutil.rmtree(database, ignore_errors=True)


if __name__ == "__main__":
    main()
