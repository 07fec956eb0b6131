"""Per-namespace deletion topics (tenant isolation, seeds/001): which topics the settings name."""

from __future__ import annotations

from ledger_deletion.settings import Settings


def tenant_topics(settings: Settings) -> list[str]:
    """Explicit per-namespace deletion topics (``LEDGER_DELETION_TENANT_TOPICS``, comma-separated)."""
    return [t.strip() for t in settings.tenant_topics.split(",") if t.strip() and t.strip() != settings.topic]


def topic_patterns(settings: Settings) -> list[str]:
    """Regexes (``LEDGER_DELETION_TOPIC_PATTERN``, whitespace-separated), each within one namespace."""
    return settings.topic_pattern.split()


def tenant_of_topic(topic: str) -> str:
    """``persistent://tenant/ns/local`` or ``tenant/ns/local`` → ``tenant``."""
    return topic.split("://", 1)[-1].split("/", 1)[0]
