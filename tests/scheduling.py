"""How ``scripts/test`` spreads the suite over its pytest-xdist workers: a plugin the root conftest registers.

xdist's ``--dist loadfile`` keeps each module on one worker, so its module fixtures (pool processes, a
SparkSession's data) start once. What it does not do is start the long work first: it queues the modules by
their number of tests, so a fault module of two tests that runs for two minutes can start last and hold the
whole run up. Two changes, and no others:

* **Order.** The heavy modules go first: the fault tier, then the Spark and stack-process tiers, then the
  rest in collection order. The order is the one a serial run takes too.
* **The fault tier in two scopes.** Its modules kill and restart the services of their worker's private
  stack (devstack.ports.faults), so the tier runs on as few workers as keep it off the critical path: two
  scopes of similar length (from ``--durations`` of a calm serial run), each module on its scope's worker in
  collection order, so ``test_zz_service_restarts`` (which restarts the stack's services) still runs last
  on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

# Path prefixes, heaviest first: what a worker should start before anything else.
HEAVY_FIRST = (
    "tests/faults/",
    "tests/reconcile/test_spark_standalone.py",
    "tests/reconcile/",
    "tests/stack/",
    "bench/tests/test_benchmark_end_to_end.py",
    "tests/operators/",
    "tests/integration/test_watcher",
)

# The fault modules of the second scope; every other fault module is in the first. About half of the tier's
# time each (a calm serial run: fuzz 110 s, audit 75 s, S3 60 s, races 80 s, restarts 60 s, kills 90 s).
FAULTS_SECOND = frozenset(
    {
        "test_colocated_kill.py",
        "test_pool_kills.py",
        "test_races.py",
        "test_zz_service_restarts.py",
    }
)


def scope_of(nodeid: str) -> str:
    """The unit a worker takes whole: the module, or for the fault tier one of its two scopes."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/faults/"):
        return "tests/faults (2)" if path.rsplit("/", 1)[-1] in FAULTS_SECOND else "tests/faults (1)"
    return path


def rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(HEAVY_FIRST) if nodeid.startswith(prefix)), len(HEAVY_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within a rank (and so within a module and a fault scope) the collection order holds.
    items.sort(key=lambda item: rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (scripts/test's) made heavy-first; any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class HeavyFirst(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            # Take the scopes in the order collected (heavy first, above), not by their number of tests.
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return HeavyFirst(config, log)
