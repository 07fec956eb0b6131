"""Keep secrets out of every log record, whoever logs it.

Our code never formats a secret (settings hold them as ``SecretStr``), but libraries may: kazoo's DEBUG log
prints the ZooKeeper ``Auth`` packet with the digest in clear. So every record is checked against the
secret values of the settings and redacted before any handler sees it. A log-record factory covers every
logger and handler, including ones added later (pytest's, an operator's JSON handler).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from pydantic import SecretStr

from ledger_deletion.settings import Settings

MASK = "***"
MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary words all over the logs

_lock = threading.Lock()
_secrets: set[str] = set()
_installed = False


def secret_values(settings: Settings) -> list[str]:
    """The clear values of every secret setting, and of the password part of ``user:password`` digests."""
    values: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr) and value.get_secret_value():
            clear = value.get_secret_value()
            values.append(clear)
            if ":" in clear:
                values.append(clear.split(":", 1)[1])
    return [v for v in values if len(v) >= MIN_SECRET_LENGTH]


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: "user:pw" before "pw"
        text = text.replace(secret, MASK)
    return text


def install(settings: Settings) -> None:
    """Redact this process's secrets from all log records (idempotent; later calls add more secrets)."""
    global _installed
    with _lock:
        _secrets.update(secret_values(settings))
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if not _secrets:
            return record
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return record
        if any(secret in message for secret in _secrets):
            record.msg, record.args = redact(message, _secrets), None
        return record

    logging.setLogRecordFactory(factory)
