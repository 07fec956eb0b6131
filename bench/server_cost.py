"""What A's extras cost the Temporal server: dev-server CPU per trivial workflow with and without them.

    python bench/server_cost.py --n 400 --rounds 3 --fresh

The deletion workflow asks more of the server than benchmark C's trivial workflow: it carries seven search
attributes from the start and upserts two when it decides. This script runs the same 5-activity trivial
workflow (two in parallel, then three) in variants, alternating them ``--rounds`` times in a rotating order,
and prints the dev server's CPU milliseconds per workflow (from /proc) for each:

* ``plain`` — ``start_workflow``, nothing else (benchmark C);
* ``signal`` — signal-with-start (how the ingest started runs until 2026-11-23);
* ``attrs`` — the seven search attributes at start;
* ``upsert`` — one upsert of two search attributes before the last activity (the outcome written before
  the acks, as runs did until 2026-11-23);
* ``upsert-last`` — the same upsert in the workflow task that completes the run;
* ``deletion`` — ``attrs`` and ``upsert-last``, as the deletion workflow runs now;
* ``all`` — ``signal``, ``attrs`` and ``upsert``, as it ran before;
* ``split`` — ``plain`` with one of the two parallel activities finishing ``--split-ms`` after the other, as
  a deletion's verify (ZooKeeper) usually finishes before its check topic (admin REST): the two results
  then wake the workflow in two workflow tasks, the first of them empty;
* ``bytes`` — ``plain`` with payloads as large as a deletion's: a start input of ``--input-bytes`` and
  activity inputs of ``--activity-bytes`` (the request, its policy and the activity header), so what the
  bytes alone cost can be told apart from the attributes.

The server's cost per workflow drifts up as its database grows (+60 % over a few thousand workflows):
``--fresh`` restarts it on an empty database before every run, which makes the variants comparable.
It starts its own stack (ports 26xxx, ``--port-base``; the Temporal database is emptied first unless
``--keep-state``). Workers are in this process, unsandboxed: only the server's CPU is compared.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio import activity, workflow  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.common import TypedSearchAttributes  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from bench.processes import bench_ports, cpu_seconds, restart_temporal_empty  # noqa: E402
from bench.trivial import noop  # noqa: E402
from devstack.stack import Stack  # noqa: E402
from ledger_deletion import search_attributes as sa  # noqa: E402
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo  # noqa: E402
from workers.ingest import search_attributes_for  # noqa: E402

VARIANTS = ("plain", "signal", "attrs", "upsert", "upsert-last", "deletion", "all", "split", "bytes")
WITH_ATTRIBUTES = ("attrs", "deletion", "all")
WITH_START_SIGNAL = ("signal", "all")
UPSERT_BEFORE_LAST_ACTIVITY = ("upsert", "all")
UPSERT_AT_COMPLETION = ("upsert-last", "deletion")
WITH_BYTES = ("bytes",)
WITH_SPLIT = ("split",)
ACTIVITIES = 5
# A deletion's start input is ~1.6 KB (request, policy, first message) and its activity inputs with their
# header ~420 B on average (docs/performance.md): the bytes variant's sizes unless told otherwise.
DEFAULT_INPUT_BYTES = 1600
DEFAULT_ACTIVITY_BYTES = 420
DEFAULT_SPLIT_MS = 300  # how much later the split variant's second parallel activity finishes


@activity.defn(name="late_noop")
def late_noop(step: int, delay_ms: int) -> int:
    time.sleep(delay_ms / 1000)
    return step


@activity.defn(name="echo_length")
def echo_length(padding: str) -> int:
    return len(padding)


@workflow.defn(name="ServerCost")
class ServerCostWorkflow:
    def __init__(self) -> None:
        self.messages: list[str] = []

    @workflow.signal(name="add_message")
    def add_message(self, ref: str) -> None:
        self.messages.append(ref)

    @workflow.run
    async def run(
        self,
        queue: str,
        upsert_before_last: bool,
        upsert_at_completion: bool,
        padding: str = "",
        activity_bytes: int = 0,
        split_ms: int = 0,
    ) -> int:
        def call(step: int) -> Any:
            # Which no-op, and with what input, is all that tells the variants' activities apart.
            fn: Any
            args: list[Any]
            if split_ms and step == 1:
                fn, args = late_noop, [step, split_ms]
            elif activity_bytes:
                fn, args = echo_length, [padding[:activity_bytes]]
            else:
                fn, args = noop, [step]
            return workflow.execute_activity(
                fn, args=args, task_queue=queue, start_to_close_timeout=timedelta(seconds=60)
            )

        await asyncio.gather(call(0), call(1))
        for step in range(2, ACTIVITIES):
            if upsert_before_last and step == ACTIVITIES - 1:
                _upsert_outcome()
            await call(step)
        if upsert_at_completion:
            _upsert_outcome()
        return ACTIVITIES


def _upsert_outcome() -> None:
    workflow.upsert_search_attributes(
        [sa.DELETION_OUTCOME.value_set("DELETED"), sa.DELETION_STEP.value_set("done")]
    )


def _attributes(index: int) -> TypedSearchAttributes:
    """Exactly what the ingest loop writes at start, for a made-up data ledger."""
    return search_attributes_for(
        PendingDeleteLedgerInfo(
            topic_name=f"t/ns/topic-{index % 50}",
            ledger_component=LedgerComponent.MANAGED_LEDGER,
            ledger_type=LedgerType.LEDGER,
            ledger_id=index,
        )
    )


@asynccontextmanager
async def variant_workers(client: Client, queue: str, concurrency: int) -> AsyncIterator[None]:
    """The variants' workers, in this process: the workflow (unsandboxed) on ``queue``, the no-op activity
    on ``<queue>-activities``."""
    with ThreadPoolExecutor(concurrency) as executor:
        async with (
            Worker(
                client,
                task_queue=queue,
                workflows=[ServerCostWorkflow],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ),
            Worker(
                client,
                task_queue=f"{queue}-activities",
                activities=[noop, late_noop, echo_length],
                activity_executor=executor,
                max_concurrent_activities=concurrency,
            ),
        ):
            yield


async def run_variant(
    client: Client,
    queue: str,
    variant: str,
    n: int,
    inflight: int,
    sizes: tuple[int, int] = (DEFAULT_INPUT_BYTES, DEFAULT_ACTIVITY_BYTES),
    split_ms: int = DEFAULT_SPLIT_MS,
) -> None:
    input_bytes, activity_bytes = sizes
    limit = asyncio.Semaphore(inflight)
    sized = variant in WITH_BYTES

    async def one(index: int) -> None:
        options: dict[str, Any] = {}
        if variant in WITH_ATTRIBUTES:
            options["search_attributes"] = _attributes(index)
        if variant in WITH_START_SIGNAL:
            options.update(start_signal="add_message", start_signal_args=[f"queue|{index}"])
        async with limit:
            handle = await client.start_workflow(
                "ServerCost",
                args=[
                    f"{queue}-activities",
                    variant in UPSERT_BEFORE_LAST_ACTIVITY,
                    variant in UPSERT_AT_COMPLETION,
                    # JSON-encoded, a string of x's is as many bytes as characters.
                    "x" * input_bytes if sized else "",
                    activity_bytes if sized else 0,
                    split_ms if variant in WITH_SPLIT else 0,
                ],
                id=f"{queue}/{variant}/{index}/{uuid.uuid4().hex[:6]}",
                task_queue=queue,
                **options,
            )
            await handle.result()

    await asyncio.gather(*(one(i) for i in range(n)))


async def main_async(args: argparse.Namespace) -> None:
    stack = Stack(args.state_dir, bench_ports(args.port_base))
    if not args.keep_state:
        stack.down()
        shutil.rmtree(args.state_dir / "data", ignore_errors=True)
    endpoints = stack.up()
    queue = f"server-cost-{uuid.uuid4().hex[:6]}"
    costs: dict[str, list[float]] = defaultdict(list)
    variants = args.variants.split(",")
    client = await Client.connect(endpoints.temporal_address)
    for round_ in range(args.rounds):
        # The server's cost drifts up as its database grows: rotate the order so that no variant
        # always runs last (or, with --fresh, give every run an empty database).
        shift = round_ % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            if args.fresh:
                restart_temporal_empty(stack)
                client = await Client.connect(endpoints.temporal_address)
            server = stack.pid("temporal")
            assert server is not None
            async with variant_workers(client, queue, concurrency=64):
                before, began = cpu_seconds(server), time.monotonic()
                sizes = (args.input_bytes, args.activity_bytes)
                await run_variant(client, queue, variant, args.n, args.inflight, sizes, args.split_ms)
                per_wf = (cpu_seconds(server) - before) * 1000 / args.n
            costs[variant].append(per_wf)
            rate = args.n / (time.monotonic() - began)
            print(
                f"round {round_ + 1} {variant:<7} {rate:6.1f} wf/s  server {per_wf:6.1f} ms/wf",
                flush=True,
            )
    print()
    print(f"{'variant':<8} {'median ms':>9} {'runs':>30}")
    base = statistics.median(costs["plain"]) if costs.get("plain") else float("nan")
    for variant, values in costs.items():
        median = statistics.median(values)
        runs = " ".join(f"{v:.0f}" for v in values)
        print(f"{variant:<8} {median:>9.1f} {runs:>30}  ({median / base - 1:+.0%} vs plain)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="workflows per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--inflight", type=int, default=100)
    parser.add_argument(
        "--input-bytes", type=int, default=DEFAULT_INPUT_BYTES, help="start input of the bytes variant"
    )
    parser.add_argument(
        "--split-ms", type=int, default=DEFAULT_SPLIT_MS, help="the split variant's late activity"
    )
    parser.add_argument(
        "--activity-bytes", type=int, default=DEFAULT_ACTIVITY_BYTES, help="activity inputs, bytes variant"
    )
    # Its own stack, so a benchmark running on 23xxx is not disturbed (nor its database emptied).
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/ld-server-cost-stack"))
    parser.add_argument("--port-base", type=int, default=26000)
    parser.add_argument("--keep-state", action="store_true")
    parser.add_argument(
        "--fresh", action="store_true", help="restart the server on an empty database before every run"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
