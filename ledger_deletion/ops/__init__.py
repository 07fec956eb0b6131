"""Operator commands: find deletions, explain one, estimate what is in flight, work the dead-letter topic."""
