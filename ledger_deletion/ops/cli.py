"""``list``, ``show``, ``report``, ``inflight``, ``pause``, ``resume`` and ``dlq list|replay``: tables for
people, ``-o json`` for scripts.

Settings come from the environment, read once here (the edge), like every other command.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger_deletion.loading import load_settings
from ledger_deletion.ops.audit import audit
from ledger_deletion.ops.options import JsonOption, Output, OutputOption
from ledger_deletion.settings import TEMPORAL, Settings

errors = Console(stderr=True)


def _console() -> Console:
    # Made per command, so the width follows COLUMNS at call time (tables are wide; pipes default to 80).
    return Console()


class ModeChoice(StrEnum):
    live = "live"
    shadow = "shadow"


def _as_json(output: Output, as_json: bool) -> bool:
    return as_json or output is Output.json


def _emit_json(value: Any) -> None:
    # Plain print: rich would wrap long lines and break the JSON for pipes.
    print(json.dumps(value, indent=2, default=str))


def _age(when: datetime | None) -> str:
    if when is None:
        return ""
    seconds = (datetime.now(UTC) - when).total_seconds()
    return _duration(seconds) + " ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


async def _client(settings: Settings) -> Any:
    from ledger_deletion.temporal_client import connect_temporal

    return await connect_temporal(settings)


# --- list ------------------------------------------------------------------------------------------------


def list_deletions(
    outcome: Annotated[
        str | None,
        typer.Option(
            help="DELETED, ALREADY_DELETED, SKIPPED_IN_USE, SKIPPED_METADATA_MISMATCH, "
            "SKIPPED_NOT_PULSAR, SKIPPED_UNKNOWN_NAMESPACE, SKIPPED_LEFT_OPEN, DEAD_LETTERED, and in shadow "
            "WOULD_DELETE or WOULD_DEAD_LETTER."
        ),
    ] = None,
    topic: Annotated[str | None, typer.Option(help="Exact topic name, e.g. public/default/orders.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Pulsar tenant.")] = None,
    running: Annotated[bool, typer.Option("--running", help="Only deletions still in progress.")] = False,
    mode: Annotated[
        ModeChoice | None,
        typer.Option(help="Only live deletions, or only shadow runs (which delete nothing)."),
    ] = None,
    step: Annotated[
        str | None, typer.Option(help="Current step, e.g. paused, wait_in_use (the DeletionStep attribute).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows (newest first).")] = 200,
    output: OutputOption = Output.table,
    as_json: JsonOption = False,
) -> None:
    """List deletion workflows from Temporal visibility, newest first.

    Filters are search attributes, so the same query works in the Temporal UI: it is printed under the
    table (paste it into the UI's search box).
    """
    from ledger_deletion.ops.deletions import list_deletions as fetch
    from ledger_deletion.ops.deletions import visibility_query

    settings = load_settings(require=TEMPORAL)
    query = visibility_query(
        outcome=outcome,
        topic=topic,
        tenant=tenant,
        running=running,
        mode=mode.value if mode else None,
        step=step,
    )

    async def run() -> list[Any]:
        return await fetch(await _client(settings), query, limit)

    rows = asyncio.run(run())
    if _as_json(output, as_json):
        _emit_json({"query": query, "deletions": [r.as_json() for r in rows]})
        return
    table = Table(title=f"{len(rows)} deletion(s)", expand=False)
    for column in ("ledger", "type", "component", "topic", "mode", "status", "step", "outcome", "started"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row.ledger_id if row.ledger_id is not None else ""),
            row.ledger_type,
            row.component,
            row.topic,
            row.mode,
            row.status,
            row.step,
            row.outcome,
            _age(row.started),
        )
    _console().print(table)
    _console().print(f"[dim]query: {query}[/dim]", soft_wrap=True)


# --- show ------------------------------------------------------------------------------------------------


def show(
    ref: Annotated[str, typer.Argument(help="A ledger id (all its deletion workflows) or a workflow id.")],
    output: OutputOption = Output.table,
    as_json: JsonOption = False,
) -> None:
    """Explain one deletion: its steps with timings, attempts and errors, from the workflow history.

    For a running workflow the pending activity's attempt and last error come from Temporal, and the
    workflow's own `status` query (step, attempts, last error, messages collected) is shown too.
    """
    from temporalio.service import RPCError

    from ledger_deletion.ops.deletions import describe_deletion, find_workflow_ids

    settings = load_settings(require=TEMPORAL)

    async def run() -> list[Any]:
        client = await _client(settings)
        ids = await find_workflow_ids(client, ref)
        details = []
        for workflow_id in ids:
            try:
                details.append(await describe_deletion(client, workflow_id))
            except RPCError as exc:
                errors.print(f"[red]{workflow_id}:[/red] {exc}")
        return details

    details = asyncio.run(run())
    if not details:
        errors.print(f"no deletion workflow found for {ref!r}")
        raise typer.Exit(1)
    if _as_json(output, as_json):
        _emit_json([d.as_json() for d in details])
        return
    for detail in details:
        row = detail.row
        _console().rule(f"[bold]{row.workflow_id}[/bold]")
        _console().print(detail.summary or "")
        _console().print(
            f"status [bold]{row.status}[/bold]  outcome [bold]{row.outcome or '-'}[/bold]  step {row.step}  "
            f"tenant {row.tenant}  started {_age(row.started)}  messages joined {detail.messages}"
        )
        if detail.result:
            result = detail.result
            _console().print(
                f"result: {result.get('outcome')} {result.get('reason') or ''}  "
                f"acked {result.get('messages_acked')}"
            )
            # Messages that joined with other requests for the ledger: each was decided on its own.
            for decision in result.get("decisions") or []:
                _console().print(
                    f"  decided: {decision.get('outcome')} for {decision.get('request')} "
                    f"{decision.get('reason') or ''}".rstrip()
                )
        if detail.failure:
            _console().print(f"[red]failure:[/red] {detail.failure}")
        if detail.status:
            s = detail.status
            _console().print(
                f"live: step {s.step}, attempts {s.attempts}, messages {s.messages_collected} "
                f"(acked {s.messages_acked}) {('last error: ' + s.last_error) if s.last_error else ''}"
            )
        table = Table(show_edge=False)
        for column in ("step", "state", "attempts", "took", "started", "error"):
            table.add_column(column, overflow="fold")
        for step in detail.steps:
            table.add_row(
                step.step,
                step.state,
                str(step.attempts),
                _duration(step.seconds),
                step.scheduled.strftime("%H:%M:%S.%f")[:-3] if step.scheduled else "",
                step.error,
            )
        _console().print(table)


# --- report ----------------------------------------------------------------------------------------------


def report(
    mode: Annotated[
        ModeChoice, typer.Option(help="shadow: what live mode would delete; live: what was deleted.")
    ] = ModeChoice.shadow,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Only this namespace (tenant/namespace).")] = None,
    ledgers: Annotated[bool, typer.Option("--ledgers", help="List the ledger ids in the table too.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """What live mode would delete (shadow, the default) or has deleted (live), per tenant and namespace.

    Counts each workflow's latest run: ledgers and offloaded ledgers (would be) deleted, their bytes where
    metadata gives them (BookKeeper's ledger length, the objects' sizes from HEAD), and every other outcome.
    Read from Temporal visibility; the query is printed under the table for the Temporal UI.
    """
    from ledger_deletion.contracts import Mode
    from ledger_deletion.ops.report import report as fetch

    settings = load_settings(require=TEMPORAL)

    async def run() -> Any:
        return await fetch(await _client(settings), Mode(mode.value), tenant=tenant, namespace=namespace)

    found = asyncio.run(run())
    if output is Output.json:
        _emit_json(found.as_json())
        return
    title = "what live mode would delete" if found.mode.value == "shadow" else "what was deleted"
    table = Table(title=f"{title} ({found.deleting.value})")
    for column in ("tenant", "namespace", "ledgers", "offloaded", "bytes", "other outcomes"):
        table.add_column(column, justify="right" if column in ("ledgers", "offloaded", "bytes") else "left")
    for _, entry in sorted(found.namespaces.items()):
        others = ", ".join(f"{k} {v}" for k, v in sorted(entry.outcomes.items()) if k != found.deleting.value)
        ids = f" ({', '.join(map(str, sorted(entry.ledgers + entry.offloaded)))})" if ledgers else ""
        table.add_row(
            entry.tenant,
            entry.namespace + ids,
            str(len(entry.ledgers)),
            str(len(entry.offloaded)),
            _bytes(entry.bytes),
            others,
        )
    table.add_row("[bold]total[/bold]", "", str(found.ledgers), str(found.offloaded), _bytes(found.bytes), "")
    _console().print(table)
    _console().print(f"[dim]query: {found.query}[/dim]", soft_wrap=True)


def _bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


# --- pause / resume ---------------------------------------------------------------------------------------


def pause(
    reason: Annotated[
        str, typer.Option(help="Why, for the note others will read (e.g. an incident id).")
    ] = "",
    show: Annotated[bool, typer.Option("--show", help="Only show whether deletes are paused.")] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Return only once no delete can start any more (LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS "
            "after the switch is on); --no-wait: right after the switch is on, while deleting processes "
            "may still start deletes until they look again.",
        ),
    ] = True,
    output: OutputOption = Output.table,
) -> None:
    """Stop every delete of this deployment (the kill switch); checks keep running.

    Once this returns, no delete starts in any deleting process: it turns the switch on, then waits
    LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS (10 s by default), by which time each process has read the
    switch since it went on, or refuses every delete on its older view. That needs the same
    LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS here as in the bookkeeper and offload pools (or a larger one
    here). A delete already past the switch when this returns finishes its one ZooKeeper or S3 call.

    Runs that reach their delete wait, visibly (DeletionStep=paused), holding their messages: nothing is
    lost or dead-lettered. The switch is a Temporal Schedule, <prefix>-kill-switch: without this CLI, pause
    it in the Temporal UI (Schedules) or with `temporal schedule toggle --schedule-id <prefix>-kill-switch
    --pause --reason ...`, and allow the same wait before counting on it.
    """
    from ledger_deletion import kill_switch
    from ledger_deletion.ops import pause as switch

    settings = load_settings(require=TEMPORAL)

    def waiting(seconds: float) -> None:
        errors.print(
            f"kill switch {settings.kill_switch_id} is on; waiting {seconds:g} s "
            "(LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS) until no deleting process can start a delete"
        )

    async def run() -> Any:
        client = await _client(settings)
        if show:
            return await switch.state(client, settings)
        return await switch.pause(
            client, settings, reason, kill_switch.operator(), wait=wait, waiting=waiting
        )

    _report_switch(asyncio.run(run()), output)


def resume(output: OutputOption = Output.table) -> None:
    """Turn the kill switch off, and signal every run waiting on it to delete now."""
    from ledger_deletion import kill_switch
    from ledger_deletion.ops import pause as switch

    settings = load_settings(require=TEMPORAL)

    async def run() -> Any:
        return await switch.resume(await _client(settings), settings, kill_switch.operator())

    _report_switch(asyncio.run(run()), output)


def _report_switch(found: Any, output: Output) -> None:
    if output is Output.json:
        _emit_json(found.as_json())
        return
    _console().print(f"kill switch {found.switch_id}: {found.state.describe()}")
    if found.holds:
        _console().print(
            f"no delete starts from now on (waited {found.waited_seconds:.1f} s: every deleting process has "
            f"read the switch since, or refuses on an older view); a delete already under way finishes"
        )
    elif found.state.paused and found.stale_seconds:  # pause --no-wait
        _console().print(
            f"not waited: a deleting process may still start deletes for up to {found.stale_seconds:g} s "
            "(LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS), until it reads the switch again"
        )
    if found.waiting_runs or found.signal_failures:
        _console().print(
            f"signalled {found.waiting_runs} waiting run(s) to resume"
            + (
                f"; {found.signal_failures} not reached (they resume at their next look)"
                if found.signal_failures
                else ""
            )
        )


# --- inflight --------------------------------------------------------------------------------------------


def inflight(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    metrics_url: Annotated[
        list[str] | None,
        typer.Option(
            help="A pulsar-pool /metrics URL (repeat per process): also show the messages they hold unacked."
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait (with a progress bar) until the estimate drains to zero.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Give up waiting after this many seconds.")] = 600.0,
    output: OutputOption = Output.table,
    as_json: JsonOption = False,
) -> None:
    """Estimated in-flight deletions per tenant (PIP-186): running workflows + unacked subscription backlog.

    Measured: running workflows from Temporal visibility (by PulsarTenant); the deletion subscription's
    backlog from the brokers' admin REST topic stats (system-topic backlog is shown as "(system topic)",
    it cannot be split by tenant before it is read). Where the admin REST has no topic stats the backlog is
    shown as unavailable, not guessed. --metrics-url adds the messages each pulsar-pool process holds
    received-but-unacked (its pending-ack gauge); those belong to running workflows, so they are shown
    beside the estimate, not added to it.
    """
    from ledger_deletion.ops.inflight import InflightReport, estimate

    settings = load_settings(require=(*TEMPORAL, "pulsar_admin_url"))

    async def once() -> InflightReport:
        return await estimate(await _client(settings), settings, tenant, metrics_url or [])

    report = asyncio.run(once())
    if wait:
        report = _wait_for_drain(report, once, timeout)
    if _as_json(output, as_json):
        _emit_json(report.as_json())
        return
    table = Table(title="estimated in-flight deletions")
    for column in ("tenant", "running workflows", "backlog", "estimate"):
        table.add_column(column, justify="right" if column != "tenant" else "left")
    for entry in sorted(report.tenants.values(), key=lambda t: t.tenant):
        table.add_row(
            entry.tenant,
            str(entry.running_workflows),
            "n/a" if entry.backlog is None else str(entry.backlog),
            str(entry.estimate),
        )
    table.add_row("[bold]total[/bold]", "", "", f"[bold]{report.total}[/bold]")
    _console().print(table)
    if report.backlog_error:
        _console().print(f"[yellow]{report.backlog_error}[/yellow] (running workflows only)")
    else:
        _console().print(f"[dim]backlog from {report.backlog_source}[/dim]")
    if report.held_by_pulsar_pools is not None:
        _console().print(f"held unacked by pulsar pools: {report.held_by_pulsar_pools}")
    if report.held_error:
        _console().print(f"[yellow]{report.held_error}[/yellow]")
    if wait and report.total:
        raise typer.Exit(1)


def _wait_for_drain(first: Any, once: Any, timeout: float) -> Any:
    report = first
    start_total = max(1, first.total)
    deadline = time.monotonic() + timeout
    with Progress(
        TextColumn("draining"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=errors
    ) as progress:
        task = progress.add_task("drain", total=start_total, completed=start_total - first.total)
        while report.total and time.monotonic() < deadline:
            time.sleep(1.0)
            report = asyncio.run(once())
            progress.update(task, completed=max(0, start_total - report.total))
    return report


# --- dlq -------------------------------------------------------------------------------------------------

dlq_app = typer.Typer(
    help="The dead-letter topic: list entries (non-destructively) and replay them.", no_args_is_help=True
)


@dlq_app.command("list")
def dlq_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's requests.")] = None,
    output: OutputOption = Output.table,
    as_json: JsonOption = False,
) -> None:
    """Every entry the dead-letter topic retains: reason, failed step, attempts, age.

    Read with a Reader, which holds no subscription: listing never acks or moves anything. Entries already
    replayed stay listed until topic retention removes them (replay tracks them by its own subscription).
    """
    from ledger_deletion.ops.dlq import read_dead_letters

    settings = load_settings(require=("pulsar_url",))
    letters = [d for d in read_dead_letters(settings) if tenant is None or d.tenant == tenant]
    if _as_json(output, as_json):
        _emit_json({"topic": settings.dead_letter_topic, "dead_letters": [d.as_json() for d in letters]})
        return
    table = Table(title=f"{len(letters)} dead letter(s) in {settings.dead_letter_topic}")
    for column in ("ledger", "type", "topic", "step", "attempts", "age", "reason", "workflow"):
        table.add_column(column, overflow="fold")
    for d in letters:
        table.add_row(
            "" if d.ledger_id is None else str(d.ledger_id),
            d.ledger_type,
            d.topic,
            d.failed_step,
            str(d.attempts),
            _duration(d.age_seconds()),
            d.reason,
            d.workflow_id,
        )
    _console().print(table)


@dlq_app.command("replay")
def dlq_replay(
    all_: Annotated[bool, typer.Option("--all", help="Replay every entry.")] = False,
    ledger: Annotated[
        int | None, typer.Option("--ledger", help="Replay the entries of this ledger id.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Show what a replay would find now (entries not replayed yet); ack nothing.")
    ] = False,
    output: OutputOption = Output.table,
    as_json: JsonOption = False,
) -> None:
    """Re-submit dead letters to the deletion topic each came from (the system topic if none is recorded);
    each is acked in the DLQ only after the re-submit is durable, so a crash mid-replay loses nothing (at
    worst a request is submitted twice, which the workflow id dedupes). Entries not selected stay for a later
    replay. Every safety check runs again."""
    from ledger_deletion.ops.dlq import DeadLetter, replay

    if all_ == (ledger is not None):
        errors.print("choose exactly one of --all or --ledger N")
        raise typer.Exit(2)
    settings = load_settings(require=("pulsar_url",))

    def select(letter: DeadLetter) -> bool:
        return all_ or letter.ledger_id == ledger

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=errors, transient=True
    ) as progress:
        task = progress.add_task("replaying" if not dry_run else "checking", total=None)
        report = replay(
            settings,
            select,
            dry_run=dry_run,
            on_start=lambda total: progress.update(task, total=total),
            on_progress=lambda _: progress.advance(task),
        )
    if _as_json(output, as_json):
        _emit_json(report.as_json())
    else:
        verb = "would replay" if dry_run else "replayed"
        count = len(report.selected) if dry_run else len(report.replayed)
        _console().print(f"{verb} {count} dead letter(s)")
        # Each entry goes back to the deletion topic it came from (a namespace's own, or the system topic).
        for topic, entries in sorted(report.destinations().items()):
            _console().print(f"  {entries} to {topic}")
        for letter, error in report.failed:
            _console().print(f"[red]failed[/red] {letter.message_id} (ledger {letter.ledger_id}): {error}")
    if report.failed:
        raise typer.Exit(1)


def mount(app: typer.Typer) -> None:
    """Add the operator commands to the main ``ledger-deletion`` app."""
    app.command(name="list")(list_deletions)
    app.command(name="show")(show)
    app.command(name="report")(report)
    app.command(name="inflight")(inflight)
    app.command(name="pause")(pause)
    app.command(name="resume")(resume)
    app.command(name="audit")(audit)
    app.add_typer(dlq_app, name="dlq")
