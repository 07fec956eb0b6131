"""Workflow definitions: deterministic code only, no I/O imports."""

from workflows.ledger_deletion import LedgerDeletionWorkflow

__all__ = ["LedgerDeletionWorkflow"]
