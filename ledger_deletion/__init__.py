"""Durable two-phase deletion of orphaned Apache Pulsar ledgers (the consumer side of PIP-186)."""

__version__ = "0.1.0"
