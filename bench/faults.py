"""Transient fault injection for the benchmark: the delete steps fail with a given probability.

Nothing in the product changes: :func:`install` wraps the two storage adapters' delete calls
(``LedgerStore.delete``, ``ObjectStore.delete``) so that, with probability ``rate``, a call raises the same
transient error a ZooKeeper connection loss or an S3 5xx would (before touching storage). Both the service's
pools (run through ``bench/worker.py`` or this module's ``__main__``, which then start the ordinary
``ledger-deletion`` CLI) and the PIP-186 baseline (which calls :func:`install` itself) read the rate from
``LEDGER_DELETION_BENCH_FAULT_RATE``.

    LEDGER_DELETION_BENCH_FAULT_RATE=0.2 python bench/faults.py worker --pool bookkeeper
"""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAULT_RATE_ENV = "LEDGER_DELETION_BENCH_FAULT_RATE"

_installed = False
_lock = threading.Lock()
injected = 0  # faults injected in this process


def fault_rate() -> float:
    return float(os.environ.get(FAULT_RATE_ENV, "0") or 0)


def install(rate: float | None = None) -> float:
    """Wrap the storage adapters' deletes; returns the rate in effect (0: nothing wrapped)."""
    global _installed
    rate = fault_rate() if rate is None else rate
    if rate <= 0 or _installed:
        return rate
    from ledger_deletion.adapters.object_store import ObjectStore
    from ledger_deletion.adapters.zookeeper import LedgerStore
    from ledger_deletion.errors import MetadataStoreUnavailable, ObjectStoreUnavailable

    rng = random.Random()

    def flaky(original: Callable[..., Any], error: type[Exception], what: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            global injected
            with _lock:
                fail = rng.random() < rate
                injected += fail
            if fail:
                raise error(f"{what}: injected transient fault (bench)")
            return original(*args, **kwargs)

        return call

    LedgerStore.delete = flaky(LedgerStore.delete, MetadataStoreUnavailable, "ZooKeeper")  # type: ignore[method-assign]
    ObjectStore.delete = flaky(ObjectStore.delete, ObjectStoreUnavailable, "DeleteObjects")  # type: ignore[method-assign]
    _installed = True
    return rate


def main() -> None:
    """Run the ordinary ``ledger-deletion`` CLI with the fault wrapper installed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    install()
    from ledger_deletion.cli import main as cli

    sys.argv[0] = "ledger-deletion"
    cli()


if __name__ == "__main__":
    main()
