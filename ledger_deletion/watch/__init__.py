"""What Pulsar references, and what leaves it: the watcher's pure logic (no I/O).

* :mod:`~ledger_deletion.watch.paths` — which record a znode under Pulsar's metadata roots is;
* :mod:`~ledger_deletion.watch.suspects` — a suspect (a ledger or offload that left Pulsar's metadata), the
  request it becomes and the workflow id that dedupes it;
* :mod:`~ledger_deletion.watch.diff` — one record's old and new content -> the suspects;
* :mod:`~ledger_deletion.watch.compact` — a managed ledger's references in a few bytes (ids, offload uuids);
* :mod:`~ledger_deletion.watch.snapshot` — what the watcher knows Pulsar references, record by record;
* :mod:`~ledger_deletion.watch.resync` — BookKeeper ledgers no record references, after a gap in watching.

The process that reads ZooKeeper and starts the suspects' workflows is ``workers/watcher.py``.
"""
