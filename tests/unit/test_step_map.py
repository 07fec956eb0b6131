"""CONTRIBUTING.md's table of steps against the code.

The workflow calls activities by name, so a step renamed in the workflow, in an activity's ``@activity.defn``
or in the pool that hosts it fails only on the stack, when a task waits on a queue nobody polls. This test
reads the table and checks each row against the ``Step`` enum, the activity classes (the method defined with
that name, the adapter its constructor takes), the workflow (local activity or activity, and which pool's
queue) and ``workers/pools.py`` (which pool's builder, or the workflow pool's read-only checks, hosts it).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import activities
from ledger_deletion.contracts import Step

ROOT = Path(__file__).resolve().parents[2]
POOLS = ("workflow", "pulsar", "bookkeeper", "offload")


@dataclass(frozen=True)
class Row:
    steps: tuple[str, ...]
    runs_as: str
    pool: str
    queue: str
    activity_class: str
    adapters: tuple[str, ...]


def _cells(text: str) -> list[str]:
    return [c.strip() for c in text.strip().strip("|").split("|")]


def _names(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def table() -> list[Row]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### Steps, activities and pools", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = []
    for line in rows:
        steps, runs_as, pool, queue, cls, adapters = _cells(line)
        out.append(Row(_names(steps), runs_as, pool, queue, cls.strip("`"), _names(adapters)))
    return out


def activity_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in pkgutil.iter_modules(activities.__path__):
        loaded = importlib.import_module(f"activities.{module.name}")
        for name, value in vars(loaded).items():
            if inspect.isclass(value) and value.__module__ == loaded.__name__:
                found[name] = value
    return found


def activity_names(cls: type) -> dict[str, str]:
    """The activity name of each method of ``cls`` defined as an activity -> the method's name."""
    names = {}
    for attr, value in vars(cls).items():
        definition = getattr(value, "__temporal_activity_definition", None)
        if definition is not None:
            names[definition.name] = attr
    return names


def _step_of(node: ast.expr) -> str | None:
    """``Step.X`` or ``Step.X.value`` -> X's value."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Step":
        return str(Step[node.attr].value)
    return None


def workflow_calls() -> tuple[set[str], dict[str, str]]:
    """From the workflow's source: the steps run as local activities, and each remote step's pool (from the
    ``policy.<pool>_queue`` it is sent to; "ack" for the acks, sent to each message's own queue)."""
    tree = ast.parse((ROOT / "workflows" / "ledger_deletion.py").read_text())
    local: set[str] = set()
    remote: dict[str, str] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        steps = [s for s in (_step_of(a) for a in call.args) if s]
        if not steps:
            continue
        if name == "_check":
            local.add(steps[0])
        elif name in ("_activity", "_destructive", "execute_activity"):
            queues = [
                a.attr.removesuffix("_queue")
                for a in [*call.args, *(k.value for k in call.keywords)]
                if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "policy"
            ]
            remote[steps[0]] = queues[0] if queues else "ack"
    return local, remote


def hosted_methods() -> dict[str, str]:
    """From workers/pools.py: each activity method name -> the pool whose builder (``_<pool>_pool``) hosts it
    (the workflow pool for its read-only checks, ``_read_only_checks``)."""
    tree = ast.parse((ROOT / "workers" / "pools.py").read_text())
    builders = {f"_{pool}_pool": pool for pool in POOLS} | {"_read_only_checks": "workflow"}
    hosted: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in builders:
            attributes = {
                n.attr for part in node.body for n in ast.walk(part) if isinstance(n, ast.Attribute)
            }
            hosted |= dict.fromkeys(attributes, builders[node.name])
    return hosted


def test_every_step_has_one_row() -> None:
    listed = [step for row in table() for step in row.steps]
    assert sorted(listed) == sorted(s.value for s in Step)


def test_each_activity_is_defined_by_its_class_with_the_adapter_it_holds() -> None:
    classes = activity_classes()
    for row in table():
        if not row.activity_class:
            continue
        cls = classes[row.activity_class]
        (step,) = row.steps
        assert step in activity_names(cls), f"{row.activity_class} defines no activity {step}"
        signature = " ".join(str(a) for a in inspect.get_annotations(cls.__init__).values())  # type: ignore[misc]
        for adapter in row.adapters:
            assert re.search(rf"\b{adapter}\b", signature), f"{row.activity_class} takes no {adapter}"


def test_the_workflow_runs_each_step_as_the_table_says_on_its_pools_queue() -> None:
    local, remote = workflow_calls()
    for row in table():
        if not row.activity_class:
            continue
        (step,) = row.steps
        if row.runs_as == "local activity":
            assert step in local and step not in remote, step
            assert row.queue == "`<prefix>-workflow`", step
        else:
            assert row.runs_as == "activity" and step in remote, step
            expected = "ack" if "-ack-" in row.queue else row.pool
            assert remote[step] == expected, (
                f"the workflow sends {step} to {remote[step]}, the table {expected}"
            )
            assert row.queue.startswith(f"`<prefix>-{row.pool}"), step


def test_each_pool_hosts_the_steps_the_table_gives_it() -> None:
    hosted = hosted_methods()
    classes = activity_classes()
    for row in table():
        if not row.activity_class:
            continue
        (step,) = row.steps
        method = activity_names(classes[row.activity_class])[step]
        assert hosted.get(method) == row.pool, (
            f"{method} is hosted by {hosted.get(method)}, the table {row.pool}"
        )
        assert row.pool in POOLS
