"""Benchmarks: the throughput benchmark (``benchmark.py``), its baselines and the server-cost probes."""
