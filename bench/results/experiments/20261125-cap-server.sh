#!/bin/bash
# Experiment of 2026-11-25 19:25 (runs 8cd173, f15bc5), not part of the benchmark: cap the benchmark's
# Temporal server at QUOTA/PERIOD of one core with a cgroup-v1 CPU quota (root; this VM mounts cgroup v1),
# so that the server is the only bottleneck and the pools and stand-ins have the rest of the machine.
# Keeps every server the benchmark (re)starts in the cgroup. Usage, beside an unpinned benchmark:
#   bench/results/experiments/20261125-cap-server.sh 12000 20000 &   # 0.6 of a core, 20 ms periods
#   python bench/benchmark.py --n 1000 --skip-b --skip-half --skip-faults --rounds 5
# Stop it, move the server back to the root cgroup and rmdir /sys/fs/cgroup/cpu/tserver afterwards.
set -eu
quota=$1 period=$2
cg=/sys/fs/cgroup/cpu/tserver
mkdir -p "$cg"
echo "$period" > "$cg/cpu.cfs_period_us"
echo "$quota" > "$cg/cpu.cfs_quota_us"
while true; do
  for pid in $(pgrep -f 'start-dev.*ld-bench-stack' || true); do
    grep -qx "$pid" "$cg/cgroup.procs" || echo "$pid" > "$cg/cgroup.procs" 2>/dev/null || true
  done
  sleep 0.1
done
