"""The file ``spark-submit`` runs: ``ledger-deletion reconcile``'s options, parsed, then the same run.

A module of its own, above ``reconcile.cli`` (which reads the settings and calls ``reconcile.job``), so the
job itself imports nothing of the command line. The ``spark-submit`` line: ``reconcile.job``'s docstring.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from reconcile.cli import run_from_settings


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit reconcile/spark_submit.py ...``: the same options as ``ledger-deletion reconcile``."""
    parser = argparse.ArgumentParser(
        prog="reconcile/spark_submit.py", description="Find orphaned Pulsar ledgers."
    )
    parser.add_argument("--master", default=None, help="default: spark-submit's --master")
    parser.add_argument("--min-age", default="24h")
    parser.add_argument("--tenant", default=None)
    parser.add_argument("--out", default="reconcile-out")
    parser.add_argument("--submit", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--extract-workers", type=int, default=2)
    args = parser.parse_args(argv)
    return run_from_settings(
        master=args.master,
        min_age=args.min_age,
        tenant=args.tenant,
        out=Path(args.out),
        submit=args.submit,
        resume=args.resume,
        extract_workers=args.extract_workers,
    )


if __name__ == "__main__":
    raise SystemExit(main())
