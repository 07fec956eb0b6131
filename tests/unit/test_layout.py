"""The product and the dev stack stay apart: the product imports nothing from ``devstack``, and the root
project's wheel holds the product's packages only (the dev stack is its own distribution, devstack/)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("ledger_deletion", "workflows", "activities", "workers", "reconcile")

# Imports every module of the product with ``devstack`` made unimportable and every attempt recorded (a
# product module that caught the ImportError would otherwise pass). The CLI's entry-point commands are
# left out: other distributions add them through metadata, which is the one sanctioned way in.
IMPORT_EVERYTHING = """
import importlib, importlib.metadata, json, pkgutil, sys

attempts = []

class NoDevstack:
    def find_spec(self, name, path=None, target=None):
        if name == "devstack" or name.startswith("devstack."):
            attempts.append(name)
            raise ImportError(f"the product imported {name}")
        return None

sys.meta_path.insert(0, NoDevstack())
entry_points = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda **kw: (
    () if kw.get("group") == "ledger_deletion.commands" else entry_points(**kw)
)
imported = []
for top in sys.argv[1:]:
    package = importlib.import_module(top)
    imported.append(top)
    for module in pkgutil.walk_packages(package.__path__, top + "."):
        importlib.import_module(module.name)
        imported.append(module.name)
loaded = [m for m in sys.modules if m.startswith("devstack")]
print(json.dumps({"imported": imported, "devstack": attempts, "loaded": loaded}))
"""


def test_the_product_imports_nothing_from_the_dev_stack() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING, *PRODUCT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["devstack"] == [] and report["loaded"] == []
    # The walk really happened: the CLI, the workflow, an activity module and the worker pools were imported.
    expected = {"ledger_deletion.cli", "workflows.ledger_deletion", "activities.bookkeeper", "workers.pools"}
    assert expected <= set(report["imported"])


def _wheel(project: Path, out: Path) -> zipfile.ZipFile:
    """The wheel pip builds of ``project``: offline, from the build backend already installed."""
    build = ["wheel", str(project), "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run(
        [sys.executable, "-m", "pip", *build],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _source_copy(tmp_path: Path) -> Path:
    """The repository's files (devstack/ included), away from the working tree a build would write into."""
    copy = tmp_path / "src"
    copy.mkdir()  # before the first entry, which may be a file
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "results")
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name in ("build", "dist"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, copy / entry.name, ignore=skip)
        else:
            shutil.copy2(entry, copy / entry.name)
    return copy


@pytest.mark.packaging
def test_the_wheels_hold_the_product_and_the_dev_stack_apart(tmp_path: Path) -> None:
    source = _source_copy(tmp_path)

    product = _wheel(source, tmp_path / "product")
    tops = {name.split("/")[0] for name in product.namelist() if ".dist-info/" not in name}
    assert tops == set(PRODUCT)
    (metadata,) = (n for n in product.namelist() if n.endswith(".dist-info/METADATA"))
    assert "Provides-Extra: stack" not in product.read(metadata).decode()

    devstack = _wheel(source / "devstack", tmp_path / "devstack")
    assert {name.split("/")[0] for name in devstack.namelist() if ".dist-info/" not in name} == {"devstack"}
    (entry_points,) = (n for n in devstack.namelist() if n.endswith(".dist-info/entry_points.txt"))
    commands = devstack.read(entry_points).decode().split("[ledger_deletion.commands]")[1]
    assert {line.split("=")[0].strip() for line in commands.strip().splitlines()} == {"stack", "demo", "soak"}
