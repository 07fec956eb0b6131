"""The embedded development stack (ZooKeeper, Temporal, pulsar-lite, S3, admin emulator) and its helpers.

Dev/test tooling only, shipped as its own distribution (``ledger-deletion-devstack``): it drives the service
from outside, and nothing in the product (``ledger_deletion``, ``workflows``, ``activities``, ``workers``,
``reconcile``) imports from here (tests/unit/test_layout.py holds that). Its commands (``stack``, ``demo``,
``soak``) join ``ledger-deletion`` through the ``ledger_deletion.commands`` entry points.
"""
