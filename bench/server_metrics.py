"""The Temporal server's own counts of its work, read from its Prometheus endpoint.

Timing the server is noisy (the same run costs it ±15 % CPU from one round to the next); counting is not.
With ``--server-metrics`` the benchmark starts the dev server with its endpoint on and reports, per A
deletion and per C workflow, what the server did: its persistence and visibility requests, the tasks its
queues ran and the requests its services served. (State transitions are read per workflow from
DescribeWorkflowExecution instead: the server's histogram of them sums running totals.) The endpoint is off
by default: recording every metric costs the server some CPU of its own.
"""

from __future__ import annotations

import re
import urllib.request
from collections import Counter

SAMPLE = re.compile(r"^(\w+)\{(.*)\} ([0-9.e+-]+)$")
OPERATION = re.compile(r'operation="([^"]+)"')
SERVICE = re.compile(r'service_name="([^"]+)"')
# What is counted: metric name → how the report groups its samples.
COUNTED = (
    "persistence_requests",
    "visibility_persistence_requests",
    "task_requests",
    "service_requests",
)


def scrape(metrics_url: str, metrics: tuple[str, ...] = COUNTED) -> Counter[str]:
    """Cumulative samples of ``metrics``, keyed ``metric operation`` (``metric service:operation`` for
    requests a service served), summed over every other label."""
    counts: Counter[str] = Counter()
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        sample = SAMPLE.match(line)
        if not sample or sample.group(1) not in metrics:
            continue
        labels = sample.group(2)
        operation = OPERATION.search(labels)
        name = operation.group(1) if operation else "?"
        if sample.group(1) == "service_requests":
            service = SERVICE.search(labels)
            name = f"{service.group(1) if service else '?'}:{name}"
        counts[f"{sample.group(1)} {name}"] += int(float(sample.group(3)))
    return counts


def per_item(before: Counter[str], after: Counter[str], items: int) -> dict[str, float]:
    """What grew between two scrapes, per item (deletion or workflow), rounded to hundredths."""
    return {
        key: round((after[key] - before[key]) / items, 2)
        for key in sorted(after)
        if after[key] > before[key] and items
    }


def totals(work: dict[str, float]) -> dict[str, float]:
    """The per-item counts summed by metric: one line per kind of work for the table."""
    out: dict[str, float] = {}
    for key, value in work.items():
        metric = key.split(" ", 1)[0]
        out[metric] = out.get(metric, 0.0) + value
    return {key: round(value, 2) for key, value in out.items()}
