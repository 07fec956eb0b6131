"""TLS material the clients are given as files: checked when a command starts, and the client context built
from them for the clients that take one (the admin REST).

A file that is missing, unreadable or not PEM would otherwise surface at the first connection, deep in a
library (a C++ client's log line, a gRPC handshake error), long after the process reported itself started.
"""

from __future__ import annotations

import ssl
from pathlib import Path

PEM_MARKER = b"-----BEGIN "


def pem_problem(path: str, variable: str, kind: str = "certificate") -> str | None:
    """Why the PEM file ``path`` set by ``variable`` cannot be used, or None when it can.

    ``kind``: ``certificate`` (one or more certificates) or ``private key``.
    """
    file = Path(path)
    if not file.is_file():
        return f"{variable}: no such file {path}"
    try:
        content = file.read_bytes()
    except OSError as exc:
        return f"{variable}: cannot read {path} ({exc.strerror or type(exc).__name__})"
    return pem_text_problem(content, variable, kind, where=path)


def pem_text_problem(content: bytes, variable: str, kind: str, *, where: str = "its value") -> str | None:
    """Why PEM text cannot be used as ``kind``, or None."""
    expected = b"PRIVATE KEY-----" if kind == "private key" else b"CERTIFICATE-----"
    if PEM_MARKER not in content or expected not in content:
        return f"{variable}: {where} is not a PEM {kind}"
    return None


def client_context(
    ca_file: str = "", cert_file: str = "", key_file: str = "", *, verify_hostname: bool = True
) -> ssl.SSLContext:
    """A client context trusting ``ca_file`` (the system's trust store when empty), presenting the client
    certificate when one is given, checking the server's name unless ``verify_hostname`` is False (the
    certificate itself is always checked)."""
    context = ssl.create_default_context(cafile=ca_file or None)
    context.check_hostname = verify_hostname
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context
