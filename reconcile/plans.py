"""What Spark runs for the reconcile: operators read from a DataFrame's executed physical plan.

The reconcile is a few equi-joins and aggregations over tables of millions of rows; two things would make it
quadratic or slow per row without changing a result: a join Spark cannot run on a key (``CartesianProduct``,
``BroadcastNestedLoopJoin``: every row against every row) and a Python UDF (every row through a Python
worker: ``BatchEvalPython``, ``ArrowEvalPython``). :func:`forbidden_operators` finds them in a plan, and
``tests/reconcile/test_reconcile_plan.py`` fails when any stage of the job has one; the benchmark prints the
main anti-join's operator (:func:`join_operators`).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FORBIDDEN", "executed_plan", "forbidden_operators", "join_operators"]

FORBIDDEN = (
    "CartesianProduct",
    "BroadcastNestedLoopJoin",
    "BatchEvalPython",
    "ArrowEvalPython",
    "PythonUDF",
    "MapInPandas",
    "FlatMapGroupsInPandas",
)
_JOIN = re.compile(
    r"\b(\w*Join)\b.*?\b(Inner|LeftOuter|RightOuter|FullOuter|LeftSemi|LeftAnti|ExistenceJoin)\b"
)


def executed_plan(df: Any, *, run: bool = True) -> str:
    """The physical plan Spark runs for ``df``. ``run``: run it first, through this very plan (its rows
    counted on the executors, none collected): with adaptive execution a plan is final only once it ran, and
    the final plan is the one whose joins were chosen on the real sizes."""
    execution = df._jdf.queryExecution()
    if run:
        execution.toRdd().count()
    return str(execution.executedPlan().toString())


def forbidden_operators(plan: str) -> list[str]:
    """The operators of :data:`FORBIDDEN` in ``plan``, in the order they appear (empty: none)."""
    return [name for line in plan.splitlines() for name in FORBIDDEN if re.search(rf"\b{name}\b", line)]


def join_operators(plan: str, *, final: bool = True) -> list[tuple[str, str]]:
    """Every join of ``plan`` as (operator, join type), e.g. ``("BroadcastHashJoin", "LeftAnti")``.
    ``final``: of an adaptive plan that ran, the final plan's joins only (what ran: adaptive execution may
    have changed a join on the real sizes, or dropped one whose side came out empty); else the initial
    plan's."""
    if "== Final Plan ==" in plan:
        final_plan, _, initial_plan = plan.partition("== Final Plan ==")[2].partition("== Initial Plan ==")
        plan = final_plan if final else initial_plan
    return [(m.group(1), m.group(2)) for line in plan.splitlines() if (m := _JOIN.search(line))]
