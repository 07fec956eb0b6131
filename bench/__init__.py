"""Benchmarks: the deletion service against a PIP-186 consumer (``benchmark.py``) and reconcile's scan
(``reconcile_benchmark.py``); their tests are in ``bench/tests``."""
