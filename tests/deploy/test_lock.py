"""requirements.lock installs on both architectures the images are built for, and scripts/bootstrap still
reads its pins. Offline: the lock names, in a comment above each entry, the file of each hash (scripts/lock
writes them from PyPI's list of the release's files); these tests read those names, and a recorded list of
the packages that ship compiled code, so a lock that lost an architecture's wheel fails here, not in a build
on a Graviton or Apple Silicon host."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.deploy.support import ROOT

LOCK = ROOT / "requirements.lock"
# Packages with compiled code in the lock (recorded from the lock of 2026-11, PyPI's files of each pinned
# release): each must have a manylinux wheel for x86-64 and one for aarch64. grpcio, pulsar-client, numpy and
# pyarrow are the ones `pip install --require-hashes` refused on aarch64 when the lock had x86-64 hashes only.
BINARY_PACKAGES = {
    "charset-normalizer",
    "contourpy",
    "cramjam",
    "fastavro",
    "fonttools",
    "grpcio",
    "kiwisolver",
    "lz4",
    "matplotlib",
    "numpy",
    "pillow",
    "protobuf",
    "pulsar-client",
    "pyarrow",
    "pydantic-core",
    "temporalio",
    "zstandard",
}
ARCHITECTURES = ("x86_64", "aarch64")
_ENTRY = re.compile(
    r"((?:^#   \S+\n)+)^([a-z0-9][a-z0-9._-]*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64} \\\n)*"
    r"    --hash=sha256:[0-9a-f]{64})$",
    re.M,
)


@cache
def entries() -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (version, the files named above the entry, its hashes)."""
    found: dict[str, tuple[str, list[str], list[str]]] = {}
    for files, name, version, hashes in _ENTRY.findall(LOCK.read_text()):
        found[canonicalize_name(name)] = (
            version,
            [line.removeprefix("#   ") for line in files.splitlines()],
            re.findall(r"sha256:([0-9a-f]{64})", hashes),
        )
    return found


def platforms(filename: str) -> set[str]:
    """The platform tags of a wheel; ``any`` for a pure wheel or a source distribution."""
    if not filename.endswith(".whl"):
        return {"any"}
    return {tag.platform for tag in parse_wheel_filename(filename)[3]}


def test_every_entry_names_one_file_per_hash() -> None:
    pins = re.findall(r"^[a-z0-9][^ ]*==", LOCK.read_text(), re.M)
    assert len(entries()) == len(pins) > 50
    for name, (version, files, hashes) in entries().items():
        assert len(files) == len(hashes) == len(set(hashes)), name
        for filename in files:
            assert filename.lower().replace("_", "-").startswith(f"{name}-{version}".lower()), filename


def test_every_binary_package_has_a_manylinux_wheel_for_each_architecture() -> None:
    """A package with compiled code has a manylinux wheel (glibc, as Debian bookworm's python image) for each
    of x86-64 and aarch64 with its hash; the recorded list keeps a package from silently losing them."""
    binary = {name for name, (_, files, _) in entries().items() if any(platforms(f) - {"any"} for f in files)}
    assert binary >= BINARY_PACKAGES, f"no longer compiled, or gone: {BINARY_PACKAGES - binary}"
    for name in binary:
        _, files, _ = entries()[name]
        tags = set().union(*(platforms(f) for f in files))
        for architecture in ARCHITECTURES:
            assert (
                any(t.startswith("manylinux") and t.endswith(f"_{architecture}") for t in tags)
                or "any" in tags
            ), f"{name}: no manylinux {architecture} wheel"
        assert not any(t.startswith(("win", "macosx", "musllinux")) for t in tags), name


def test_the_bootstrap_reads_every_pin_and_installs_within_them(tmp_path: Path) -> None:
    """scripts/bootstrap passes the lock's pins without their hashes to pip as constraints (`-c`): its sed
    must still find every entry, one `name==version` per line, and nothing else."""
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    (expression,) = re.findall(r"sed -n '([^']+)' requirements\.lock", bootstrap)
    done = subprocess.run(["sed", "-n", expression, str(LOCK)], capture_output=True, text=True, check=True)
    pins = done.stdout.split()
    assert {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in pins} == {
        name: version for name, (version, _, _) in entries().items()
    }
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*==[^\s=]+", pin) for pin in pins)
