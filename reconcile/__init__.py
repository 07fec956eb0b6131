"""Find the orphans that already exist: the reconcile pipeline (PySpark) that feeds the deletion service.

Modules, one concern each:

* :mod:`reconcile.extract` — parallel, restartable scan of ZooKeeper (BK ledger ids, Pulsar references, the
  metadata of the unreferenced ledgers) and the offload bucket(s) into Parquet;
* :mod:`reconcile.transform` — pure ``DataFrame -> DataFrame`` reconciliation (anti-joins, classification,
  safety filters);
* :mod:`reconcile.report` — counts and reclaimable bytes (terminal table + PNG chart);
* :mod:`reconcile.job` — orchestration (the ``spark-submit`` entry point);
* :mod:`reconcile.cli` — the ``ledger-deletion reconcile`` command.

Its ZooKeeper reads are :mod:`ledger_deletion.adapters.zk_reads` (shared with the watcher); the synthetic
clusters of tests and benchmarks come from :mod:`devstack.generator`.
"""
