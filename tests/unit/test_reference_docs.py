"""The generated reference pages (docs/settings.md, docs/metrics.md) are what the code generates now."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.reference_docs import COMMAND, pages, prometheus_names, stale
from ledger_deletion.observability.metrics import INSTRUMENTS, Instrument
from ledger_deletion.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted(pages()))
def test_the_committed_page_is_what_the_code_generates(path: str) -> None:
    committed = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else ""
    assert committed == pages()[path], f"{path} is stale: run {COMMAND}"


def test_every_setting_and_every_metric_is_on_its_page() -> None:
    generated = pages()
    names = prometheus_names(INSTRUMENTS)
    assert [n for n in Settings.model_fields if f"`{env_name(n)}`" not in generated["docs/settings.md"]] == []
    assert [n for n in names.values() if f"`{n}`" not in generated["docs/metrics.md"]] == []


def test_prometheus_names_come_from_the_exporter() -> None:
    # A counter gets _total, a histogram its unit; an annotation unit such as {request} is dropped.
    counter = Instrument("ld_test_things", "counter", "{thing}", "things", ("pool",))
    histogram = Instrument("ld_test_wait", "histogram", "s", "waits", ())
    gauge = Instrument("ld_test_level", "gauge", "{thing}", "level", ())
    assert prometheus_names([counter, histogram, gauge]) == {
        "ld_test_things": "ld_test_things_total",
        "ld_test_wait": "ld_test_wait_seconds",
        "ld_test_level": "ld_test_level",
    }


def test_a_stale_page_is_reported(tmp_path: Path) -> None:
    for path, text in pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert stale(tmp_path) == []
    (tmp_path / "docs/metrics.md").write_text("# Metrics\n", encoding="utf-8")
    assert stale(tmp_path) == ["docs/metrics.md"]
