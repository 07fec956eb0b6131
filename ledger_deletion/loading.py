"""Reading the settings at a command's edge: the environment once, then the checks that need more than the
model (Temporal's own configuration profile, each connection setting of the systems the command uses, the
deleting logins a process must not hold).

Above ``ledger_deletion.settings`` (the model, at the ground floor) and the modules those checks use
(``connections``, ``temporal_client``), which import the model: so the model imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from ledger_deletion.connections import delete_credential_problems
from ledger_deletion.connections import problems as connection_problems
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import STACK_HINT, Settings, env_name, missing_endpoints
from ledger_deletion.temporal_client import resolve_profile


def load_settings(
    *, require: Iterable[str] = (), deletes: Iterable[str] | None = None, **overrides: Any
) -> Settings:
    """Read the environment once. Call only at the edge (CLI commands, worker ``main``).

    ``require``: the endpoints (:data:`ENDPOINTS`) the command connects to and the declarations
    (:data:`DECLARATIONS`) it depends on; each one unset is named.
    ``deletes``: the stores the process deletes in (:func:`pool_deletes`), for a service process; a login
    that deletes anywhere else is refused. ``None`` (an operator's command): not checked.

    Raises:
        ConfigurationError: naming each offending variable, e.g. ``LEDGER_DELETION_MAX_ATTEMPTS: ...``, or
            each missing endpoint with what it is, or each connection setting of a required system that
            cannot work (a certificate file that is not there, a client certificate without its key), or
            each deleting login a process that deletes nothing there holds.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            problems.append(f"{env_name(field)}: {error['msg']}")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None
    settings = settings.with_overrides(**overrides) if overrides else settings
    required = tuple(require)
    if "temporal_address" in required:
        settings = resolve_profile(settings)  # Temporal's own configuration file, as the SDK reads it
    missing = missing_endpoints(settings, required)
    if missing:
        named = ", ".join(f"{env_name(f)} ({Settings.model_fields[f].title})" for f in missing)
        raise ConfigurationError(f"missing settings: {named}; {STACK_HINT}")
    found = connection_problems(settings, required)
    if found:
        raise ConfigurationError("connection settings that cannot work: " + "; ".join(found))
    if deletes is not None:
        held = delete_credential_problems(settings, deletes)
        if held:
            raise ConfigurationError("credentials this process must not hold: " + "; ".join(held))
    return settings
