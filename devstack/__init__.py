"""The embedded development stack (ZooKeeper, Temporal, pulsar-lite, S3, admin emulator) and its helpers.

Dev/test tooling only: nothing in ``ledger_deletion`` imports from here.
"""
