"""``ledger-deletion``: the one command of the service. Settings are read here, once, and passed down."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ledger_deletion.settings import POOLS, load_settings

app = typer.Typer(
    name="ledger-deletion",
    help=(
        "Durable two-phase deletion of orphaned Apache Pulsar ledgers (the consumer side of PIP-186), "
        "orchestrated by Temporal. Settings come from the environment (see README); defaults point at the "
        "embedded stack started by `ledger-deletion stack up`."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, `| tee`) gets a width that fits the demo table instead of 80 columns.
console = Console(width=None if sys.stdout.isatty() else 150)
errors = Console(stderr=True)


class Pool(StrEnum):
    workflow = "workflow"
    pulsar = "pulsar"
    bookkeeper = "bookkeeper"
    offload = "offload"
    all = "all"


@app.command()
def worker(
    pool: Annotated[
        list[Pool],
        typer.Option("--pool", "-p", help="Pool(s) to run in this process; repeat the option, or 'all'."),
    ] = [Pool.all],  # noqa: B006 - typer needs a literal default for list options
) -> None:
    """Run worker pools until SIGTERM/SIGINT.

    workflow: runs LedgerDeletionWorkflow. pulsar: consumes the deletion topic (Shared subscription), asks
    the admin API, acks, dead-letters. bookkeeper: verifies and deletes ledger znodes in ZooKeeper.
    offload: deletes offloaded objects in S3. Each pool is one Temporal task queue; run one process per
    pool to scale them independently.
    """
    from workers.main import main as run_worker

    names = sorted({p.value for p in pool})
    run_worker(list(POOLS) if "all" in names else names, load_settings())


@app.command()
def submit(
    jsonl: Annotated[
        str,
        typer.Option("--jsonl", help="File of JSON lines, one PendingDeleteLedgerInfo each; '-' for stdin."),
    ],
    dry_run: Annotated[bool, typer.Option(help="Validate every line, publish nothing.")] = False,
) -> None:
    """Publish deletion requests to the deletion topic.

    Each line is an object with the Avro schema's field names: topicName, ledgerComponent, ledgerType,
    ledgerId, cursorName, schemaId, checkLedgerStillInUse, properties and context = {ledgerId,
    offloadContext: {uidMsb, uidLsb, complete, driverMetadata: {name, properties}, offloadSegment: [...]}}.
    A bad line is reported with its number and skipped; the exit code is 1 if any line was bad.
    """
    from rich.progress import Progress

    from ledger_deletion.submit import LineError, RequestPublisher, parse_jsonl

    settings = load_settings()
    if jsonl != "-" and not Path(jsonl).is_file():
        errors.print(f"[red]no such file:[/red] {jsonl}")
        raise typer.Exit(2)
    stream = sys.stdin if jsonl == "-" else open(jsonl, encoding="utf-8")  # noqa: SIM115 - closed below
    total_lines = None if jsonl == "-" else len(Path(jsonl).read_text(encoding="utf-8").splitlines())
    published = bad = 0
    try:
        publisher = None if dry_run else RequestPublisher(settings)
        with Progress(console=errors, transient=True) as progress:
            task = progress.add_task("submitting", total=total_lines)
            for number, item in parse_jsonl(stream):
                progress.update(task, completed=number)
                if isinstance(item, LineError):
                    bad += 1
                    errors.print(f"line {item.line_number}: {item.reason}")
                    continue
                if publisher is not None:
                    publisher.publish(item)
                published += 1
        if publisher is not None:
            publisher.close()
    finally:
        if stream is not sys.stdin:
            stream.close()
    verb = "valid" if dry_run else "published"
    console.print(f"{published} {verb}, {bad} rejected")
    if bad:
        raise typer.Exit(1)


@app.command()
def demo(
    grace_seconds: Annotated[
        float, typer.Option(help="In-use re-check interval used by the demo (production default 60 s).")
    ] = 3.0,
) -> None:
    """The main job on the embedded stack: build a small Pulsar cluster, trim it the way PIP-186's mark
    phase does, run every pool, wait until every request is done, and print what happened to each ledger.

    Starts the stack if needed (and leaves it running; `ledger-deletion stack down` stops it). Exit code 0
    only when every outcome and the state of ZooKeeper and S3 are exactly as the scenario expects."""
    from ledger_deletion.demo import run_demo

    raise typer.Exit(run_demo(console, grace_seconds=grace_seconds))


@app.command()
def setup() -> None:
    """Register the custom search attributes on the Temporal namespace (idempotent; for production)."""
    import asyncio

    from ledger_deletion.operator import register_search_attributes

    added = asyncio.run(register_search_attributes(load_settings()))
    console.print(f"search attributes registered ({added} new)")


def _mount_optional() -> None:
    """Sub-apps that need extras (the dev stack, Spark) are mounted when installed."""
    from ledger_deletion.ops.cli import mount as mount_operator_commands

    mount_operator_commands(app)  # list, show, inflight, dlq: always available
    try:
        from devstack.cli import stack_app

        app.add_typer(
            stack_app, name="stack", help="The embedded stack on loopback: up | down | status | env."
        )
    except ImportError:  # pragma: no cover - stack extra not installed
        pass
    try:
        from reconcile.cli import reconcile

        app.command(name="reconcile")(reconcile)
    except ImportError:  # pragma: no cover - spark extra not installed
        pass
    try:
        import devstack.faults  # noqa: F401 - the soak runs its own embedded stack (stack extra)
        from ledger_deletion.soak import soak_command

        app.command(name="soak")(soak_command())
    except ImportError:  # pragma: no cover - stack extra not installed
        pass


_mount_optional()


def main() -> None:
    from ledger_deletion.errors import LedgerDeletionError

    try:
        app()
    except LedgerDeletionError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        sys.exit(2)
