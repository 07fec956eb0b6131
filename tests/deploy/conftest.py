"""Fixtures of the deployment tests: the tools that check the files offline (promtool, kubectl kustomize).

No Docker engine and no Kubernetes cluster run here, so the files are checked by what each tool or schema
says about them, and against the code they configure.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus' own rule and config checker, from Debian's prometheus package (installed when missing, as
    the embedded stack installs ZooKeeper, so a fresh machine and CI get it)."""
    found = shutil.which("promtool")
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        # A fresh machine often has no package lists yet.
        subprocess.run([*sudo, "apt-get", "update"], env=env, capture_output=True, check=True)
        subprocess.run(install, env=env, capture_output=True, check=True)
    found = shutil.which("promtool")
    assert found, "apt-get installed prometheus but promtool is not on PATH"
    return found
