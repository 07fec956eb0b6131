"""The xdist scheduling plugin (tests/scheduling.py): heavy work first, the fault tier in two scopes."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import FAULTS_SECOND, HEAVY_FIRST, rank, scope_of

ROOT = Path(__file__).resolve().parents[2]
FAULT_MODULES = sorted(p.name for p in (ROOT / "tests" / "faults").glob("test_*.py"))


def test_every_named_path_exists() -> None:
    """A renamed module would silently fall back to the default order or scope."""
    assert [prefix for prefix in HEAVY_FIRST if not list(ROOT.glob(prefix.rstrip("/") + "*"))] == []
    assert set(FAULT_MODULES) >= FAULTS_SECOND


def test_the_fault_tier_is_two_scopes_and_everything_else_its_module() -> None:
    scopes = {scope_of(f"tests/faults/{name}::test_x") for name in FAULT_MODULES}
    assert scopes == {"tests/faults (1)", "tests/faults (2)"}
    assert scope_of("tests/integration/test_watcher.py::test_a[1]") == "tests/integration/test_watcher.py"
    assert scope_of("tests/workflow/test_x.py::Class::test_y") == "tests/workflow/test_x.py"


def test_service_restarts_run_last_in_their_scope() -> None:
    """They restart the worker's fault stack: whatever shares the scope must have run before."""
    second = [name for name in FAULT_MODULES if name in FAULTS_SECOND]
    assert second[-1] == "test_zz_service_restarts.py"


def test_heavy_modules_rank_before_the_rest() -> None:
    assert rank("tests/faults/test_fuzz.py::t") < rank("tests/reconcile/test_reconcile_job.py::t")
    assert rank("tests/reconcile/test_reconcile_job.py::t") < rank("tests/unit/test_ports.py::t")
    assert rank("tests/unit/test_ports.py::t") == rank("tests/workflow/test_workflow_logic.py::t")
