"""The benchmark's wrapper around ``ledger-deletion worker``: fault injection and a pulsar-lite workaround.

    LEDGER_DELETION_BENCH_FAULT_RATE=0.2 LEDGER_DELETION_BENCH_CONSUMER_OFFSET=1 \
        python bench/worker.py worker --pool pulsar

* ``LEDGER_DELETION_BENCH_FAULT_RATE``: see ``bench/faults.py``.
* ``LEDGER_DELETION_BENCH_CONSUMER_OFFSET=k``: before the pool subscribes, open ``k * 16`` throw-away
  consumers on the same client, so the real consumer's ids start at ``k * 16``. pulsar-lite keys consumers of
  a subscription by consumer id across connections ("Consumer 0 already exists"), which a real broker does
  not; with a different offset per process, two pulsar-pool processes can share the Shared subscription.

Then it runs the ordinary ``ledger-deletion`` CLI; nothing in the product changes.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

CONSUMER_OFFSET_ENV = "LEDGER_DELETION_BENCH_CONSUMER_OFFSET"
IDS_PER_OFFSET = 16


def offset_consumer_ids(offset: int) -> None:
    if offset <= 0:
        return
    import pulsar

    import workers.pools as pools

    original = pools.subscribe_all  # type: ignore[attr-defined]

    def subscribe_all(client: pulsar.Client, *args: Any, **kwargs: Any) -> Any:
        topic = f"persistent://public/default/__bench-dummy-{uuid.uuid4().hex[:8]}"
        for _ in range(offset * IDS_PER_OFFSET):
            client.subscribe(topic, f"dummy-{uuid.uuid4().hex[:8]}")  # kept open: its id stays taken
        return original(client, *args, **kwargs)

    pools.subscribe_all = subscribe_all  # type: ignore[attr-defined]


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench import faults
    from ledger_deletion.cli import main as cli

    faults.install()
    offset_consumer_ids(int(os.environ.get(CONSUMER_OFFSET_ENV, "0") or 0))
    sys.argv[0] = "ledger-deletion"
    cli()


if __name__ == "__main__":
    main()
