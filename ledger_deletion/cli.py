"""``ledger-deletion``: the one command of the service. Settings are read here, once, and passed down."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ledger_deletion.loading import load_settings
from ledger_deletion.ops.options import Output, OutputOption
from ledger_deletion.settings import POOLS, TEMPORAL, WATCH_REQUIRES, pool_deletes, pool_endpoints

app = typer.Typer(
    name="ledger-deletion",
    help=(
        "Durable two-phase deletion of orphaned Apache Pulsar ledgers (the consumer side of PIP-186), "
        "orchestrated by Temporal. Settings come from the environment (LEDGER_DELETION_*, listed in "
        "docs/settings.md). Where the dev stack "
        "(ledger-deletion-devstack) is installed, `stack`, `demo` and `soak` run the service on loopback."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)
DISTRIBUTION = "ledger-deletion"


def version_text() -> str:
    """``ledger-deletion <version>``, the installed distribution's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{DISTRIBUTION} {version(DISTRIBUTION)}"
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return f"{DISTRIBUTION} (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Durable two-phase deletion of orphaned Apache Pulsar ledgers."""


class RunMode(StrEnum):
    live = "live"
    shadow = "shadow"


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
    mode: Annotated[
        RunMode | None,
        typer.Option(
            help="shadow: decide every request and delete nothing (WOULD_DELETE), on a subscription and task "
            "queues of its own; live: delete. Default: LEDGER_DELETION_MODE (live)."
        ),
    ] = None,
) -> None:
    """Run worker pools until SIGTERM/SIGINT.

    workflow: runs LedgerDeletionWorkflow. pulsar: consumes the deletion topic (Shared subscription), asks
    the admin API, acks, dead-letters. bookkeeper: verifies and deletes ledger znodes in ZooKeeper.
    offload: deletes offloaded objects in S3. Each pool is one Temporal task queue; run one process per
    pool to scale them independently. Rolling it out (shadow, canary, pause): docs/rollout.md.
    """
    from ledger_deletion.contracts import Mode
    from workers.main import main as run_worker

    names = sorted({p.value for p in pool})
    pools = list(POOLS) if "all" in names else names
    chosen = {"mode": Mode(mode.value)} if mode else {}  # with_overrides does not validate: the enum itself
    run_worker(pools, load_settings(require=pool_endpoints(pools), deletes=pool_deletes(pools), **chosen))


@app.command()
def submit(
    jsonl: Annotated[
        str,
        typer.Option("--jsonl", help="File of JSON lines, one PendingDeleteLedgerInfo each; '-' for stdin."),
    ],
    dry_run: Annotated[bool, typer.Option(help="Validate every line, publish nothing.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """Publish deletion requests to the deletion topic.

    Each line is an object with the Avro schema's field names: topicName, ledgerComponent, ledgerType,
    ledgerId, cursorName, schemaId, checkLedgerStillInUse, properties and context = {ledgerId,
    offloadContext: {uidMsb, uidLsb, complete, driverMetadata: {name, properties}, offloadSegment: [...]}}.
    A bad line is reported with its number and skipped; the exit code is 1 if any line was bad.
    """
    from rich.progress import Progress

    from ledger_deletion.submit import LineError, RequestPublisher, parse_jsonl

    settings = load_settings(require=() if dry_run else ("pulsar_url",))
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
                    # Who sent it, for the audit log's `source`; a file's own tag (reconcile's) stays.
                    publisher.publish(replace(item, properties={"source": "submit", **item.properties}))
                published += 1
        if publisher is not None:
            publisher.close()
    finally:
        if stream is not sys.stdin:
            stream.close()
    verb = "valid" if dry_run else "published"
    if output is Output.json:
        print(json.dumps({verb: published, "rejected": bad}))
    else:
        console.print(f"{published} {verb}, {bad} rejected")
    if bad:
        raise typer.Exit(1)


@app.command()
def setup(output: OutputOption = Output.table) -> None:
    """Register the custom search attributes on the Temporal namespace (idempotent; for production)."""
    import asyncio

    from ledger_deletion.operator import register_search_attributes

    added = asyncio.run(register_search_attributes(load_settings(require=TEMPORAL)))
    if output is Output.json:
        print(json.dumps({"search_attributes_added": added}))
    else:
        console.print(f"search attributes registered ({added} new)")


@app.command()
def watch() -> None:
    """Catch new orphans as they happen: follow Pulsar's metadata in ZooKeeper and request the deletion of
    what leaves it and is still there after LEDGER_DELETION_WATCH_DELAY_SECONDS (docs/watcher.md).

    Run two or more: one watches (elected in Pulsar's metadata store), every one runs the suspects' checks
    and, with LEDGER_DELETION_RECONCILE_SCHEDULE set, keeps the periodic reconcile's Temporal Schedule.
    """
    from workers.watcher import main as run_watcher

    run_watcher(load_settings(require=WATCH_REQUIRES, deletes=()))  # it only reads, and publishes requests


@app.command()
def tripwire(
    clear: Annotated[
        bool, typer.Option("--clear", help="Clear it, once the other cluster's store is listed or checked.")
    ] = False,
    output: OutputOption = Output.table,
) -> None:
    """Show (or clear) the shared-BookKeeper tripwire: with LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none, a
    recent ledger of a namespace this cluster does not have trips it, and until it is cleared no ledger of
    an unknown namespace is deleted. Before clearing: list the other cluster's metadata store in
    LEDGER_DELETION_BOOKKEEPER_SHARED_WITH, or check that the namespaces it names were this cluster's
    (docs/deployment.md#shared-bookkeeper). The flag is the Temporal Schedule
    <prefix>-shared-bookkeeper-tripwire (paused: tripped), whose note names the evidence."""
    import asyncio

    from ledger_deletion import kill_switch
    from ledger_deletion import tripwire as wire
    from ledger_deletion.temporal_client import connect_temporal

    settings = load_settings(require=TEMPORAL)
    wire_id = wire.tripwire_id(settings.task_queue_prefix)

    async def run() -> wire.TripState:
        client = await connect_temporal(settings)
        if clear:
            return await wire.clear(client, wire_id, kill_switch.operator())
        return await wire.read(client, wire_id)

    state = asyncio.run(run())
    if output is Output.json:
        print(
            json.dumps(
                {
                    "tripwire": wire_id,
                    "tripped": state.tripped,
                    "namespaces": list(state.namespaces),
                    "note": state.note,
                }
            )
        )
    else:
        console.print(f"{wire_id}: {escape(state.describe())}", soft_wrap=True)


COMMANDS_GROUP = "ledger_deletion.commands"
# Optional extras of pyproject.toml: a name for people and the modules a command needs from each.
EXTRAS = {"spark": ("Spark", ("pyspark", "pyarrow", "matplotlib"))}


def needs_extra(extra: str, name: str, command: Callable[..., Any]) -> Callable[..., Any]:
    """Command ``name``, refusing to start with one line naming the ``pip install`` when ``extra`` is missing.

    Checked before the command runs, so a long job does not fail half-way at its first import of the extra.
    """
    label, modules = EXTRAS[extra]

    @functools.wraps(command)  # typer reads the options from the wrapped signature
    def checked(*args: Any, **kwargs: Any) -> Any:
        if any(importlib.util.find_spec(module) is None for module in modules):
            typer.echo(f"{name} needs the {label} extra: pip install 'ledger-deletion[{extra}]'", err=True)
            raise typer.Exit(2)
        return command(*args, **kwargs)

    return checked


def _mount_commands() -> None:
    """The operator commands and reconcile always; commands of other installed distributions from the
    ``ledger_deletion.commands`` entry points (the dev stack's ``stack``, ``demo`` and ``soak``), so a
    deployment without the dev stack has no command that would need it."""
    from ledger_deletion.ops.cli import mount as mount_operator_commands
    from reconcile.cli import reconcile

    mount_operator_commands(app)  # list, show, inflight, dlq
    app.command(name="reconcile")(needs_extra("spark", "reconcile", reconcile))
    for entry in entry_points(group=COMMANDS_GROUP):
        try:
            command = entry.load()
        except Exception as exc:  # a broken add-on must not take the service's own commands down with it
            errors.print(f"[yellow]command {entry.name!r} ({entry.value}) not loaded:[/yellow] {exc}")
            continue
        panel = entry.dist.name if entry.dist is not None else None
        if isinstance(command, typer.Typer):
            app.add_typer(command, name=entry.name, rich_help_panel=panel)
        else:
            app.command(name=entry.name, rich_help_panel=panel)(command)


_mount_commands()


def main() -> None:
    from ledger_deletion.errors import LedgerDeletionError

    try:
        app()
    except LedgerDeletionError as exc:
        # Messages name settings such as host:port[/chroot]: printed as text, not markup, on one line.
        errors.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
