"""The README documents every setting and the two commands it promises."""

from __future__ import annotations

import os
from pathlib import Path

from ledger_deletion.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def env_name(name: str) -> str:
    alias = Settings.model_fields[name].validation_alias
    return (
        str(alias.choices[0])
        if alias is not None and hasattr(alias, "choices")
        else f"LEDGER_DELETION_{name.upper()}"
    )


def test_every_setting_is_in_the_settings_table() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [env_name(n) for n in Settings.model_fields if f"`{env_name(n)}`" not in readme]
    assert missing == []


def test_the_two_commands_exist_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    for script in ("scripts/demo", "scripts/test"):
        assert script in readme and os.access(ROOT / script, os.X_OK)
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_bad_settings_name_the_variable(monkeypatch) -> None:
    import pytest

    from ledger_deletion.errors import ConfigurationError
    from ledger_deletion.settings import load_settings

    monkeypatch.setenv("LEDGER_DELETION_MAX_ATTEMPTS", "0")
    monkeypatch.setenv("TEMPORAL_TLS", "maybe")
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_MAX_ATTEMPTS") as info:
        load_settings()
    assert "TEMPORAL_TLS" in str(info.value)
