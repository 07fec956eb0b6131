"""Thin adapters in front of each external system; library errors become ``ledger_deletion.errors`` here."""
