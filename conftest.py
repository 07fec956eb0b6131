"""The root of both test trees, ``tests/`` and ``bench/tests/``: it registers the fixtures they share, defined
once in ``tests/fixtures.py`` (the embedded stack, the session's settings, ledger ids, simulated clusters).

Registered here, at the root, because pytest takes ``pytest_plugins`` from the root conftest only; a tier's
own ``conftest.py`` still overrides any of them for its folder (the workflow tier's ``stack``, the fault
tier's ``cluster_store``).
"""

pytest_plugins = ["tests.fixtures", "tests.scheduling"]
