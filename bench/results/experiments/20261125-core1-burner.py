"""Experiment of 2026-11-25 19:09 (run 39787d), not part of the benchmark: keep CPU 1 busy BUSY_MS out of
every BUSY_MS + IDLE_MS (6 and 4: about 60 %), beside a pinned benchmark whose pools and stand-ins run there.

    python bench/results/experiments/20261125-core1-burner.py 6 4 &
"""

import os
import sys
import time

os.sched_setaffinity(0, {1})
busy, idle = float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000
x = 0
while True:
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        x = (x * 31 + 7) % 1000003
    time.sleep(idle)
