"""The Dockerfile cannot be built here (no Docker engine): check it against the lock, the package layout and
the manifests that run it, and the lock against pyproject.toml and what the tests ran with."""

from __future__ import annotations

import re
import shlex
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.support import ROOT, load_all_yaml

BUILD_BACKEND = {"setuptools", "wheel"}
# An entry of requirements.lock: the pin, then one hash line per file, each but the last continued.
_LOCKED = re.compile(
    r"^([a-z0-9][a-z0-9._-]*)==([^\s\\]+) \\\n((?:    --hash=sha256:[0-9a-f]{64} \\\n)*"
    r"    --hash=sha256:[0-9a-f]{64})$",
    re.M,
)
# The line above the spark extra's own packages: the service image installs the lock down to it.
RECONCILE_ONLY = "# --- the reconcile image only: the spark extra's own packages ---"


@cache
def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"^\s*#.*\n", "", (ROOT / "Dockerfile").read_text(), flags=re.M)
    text = text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


def of(keyword: str) -> list[str]:
    return [rest for name, rest in instructions() if name == keyword]


@cache
def stages() -> dict[str, list[tuple[str, str]]]:
    """The instructions of each build stage, by name, with those of the stages it is built FROM first."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            image, _, name = rest.partition(" AS ")
            current = list(found.get(image, []))
            found[name] = current
        current.append((keyword, rest))
    return found


def stage_runs(stage: str) -> str:
    return " ".join(rest for keyword, rest in stages()[stage] if keyword == "RUN")


@cache
def locked() -> dict[str, str]:
    text = (ROOT / "requirements.lock").read_text()
    entries = {canonicalize_name(name): version for name, version, _ in _LOCKED.findall(text)}
    # Every non-comment line belongs to an entry of that exact form (name==version and one sha256).
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    hashes = sum(m.group(3).count("--hash=") for m in _LOCKED.finditer(text))
    assert len(body) == len(entries) + hashes, (
        "requirements.lock has lines that are not a pin with its hashes"
    )
    return entries


@cache
def project() -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return loaded


def product_packages() -> set[str]:
    """The top-level packages pyproject.toml ships (``include`` patterns of setuptools' find)."""
    patterns = project()["tool"]["setuptools"]["packages"]["find"]["include"]  # type: ignore[index]
    return {pattern.rstrip("*") for pattern in patterns}


def test_every_copied_directory_is_a_product_package_and_every_package_is_copied() -> None:
    copied_dirs, copied_files = set(), set()
    for arguments in of("COPY"):
        *sources, _ = shlex.split(arguments)
        for source in sources:
            (copied_dirs if (ROOT / source).is_dir() else copied_files).add(source)
    assert copied_dirs == product_packages(), "COPY exactly the product's packages"
    assert copied_files == {"requirements.lock", "pyproject.toml", "README.md"}
    assert "reconcile" in copied_dirs  # the reconcile job ships in the image
    assert (ROOT / "devstack").name not in copied_dirs


def test_pip_installs_only_the_lock_with_hashes_and_the_product_without_dependencies() -> None:
    commands = [c.strip() for run in of("RUN") for c in run.split("&&") if "pip install" in c]
    locked_installs = [c for c in commands if "-r " in c]
    assert locked_installs and all("--require-hashes" in c and "--no-deps" in c for c in locked_installs)
    assert any(c.endswith("-r requirements.lock") for c in locked_installs)
    product = [c for c in commands if c not in locked_installs]
    assert product == ["pip install --no-cache-dir --no-deps --no-build-isolation ."], product
    assert any("pip check" in run for run in of("RUN")), "pip check: the lock holds every dependency"
    # The build backend's entries, each with all its hash lines, are taken from the lock too.
    assert any(
        "awk '/^(setuptools|wheel)==/ {keep = 1} keep {print} keep && !/\\\\$/ {keep = 0}' requirements.lock"
        in run
        for run in of("RUN")
    )


def test_the_reconcile_image_has_a_java_runtime_for_spark() -> None:
    assert "openjdk-17-jre-headless" in stage_runs("reconcile")


def test_the_service_image_has_neither_a_java_runtime_nor_pyspark() -> None:
    """The pools, the watcher and setup import no Spark: their image (the default target, the last stage)
    installs the lock down to the line above the spark extra's own packages, and no JRE."""
    assert list(stages())[-1] == "service", "the default target (the last stage) is the service image"
    runs = stage_runs("service")
    assert "openjdk" not in runs and "-r requirements.lock" not in runs
    marker_prefix = RECONCILE_ONLY.removesuffix(": the spark extra's own packages ---")
    assert f"sed '/^{marker_prefix}/,$d' requirements.lock >service.lock" in runs
    assert "-r service.lock" in runs
    lock = (ROOT / "requirements.lock").read_text()
    service_part, marker, reconcile_part = lock.partition(RECONCILE_ONLY)
    assert marker, "requirements.lock has the reconcile-only marker line"
    above = {canonicalize_name(m.group(1)) for m in _LOCKED.finditer(service_part)}
    below = {canonicalize_name(m.group(1)) for m in _LOCKED.finditer(reconcile_part)}
    assert {"pyspark", "py4j", "matplotlib"} <= below and not above & below
    dependencies = project()["project"]["dependencies"]  # type: ignore[index]
    assert _closure(dependencies) <= above, "the service's own dependencies are above the marker"


def test_the_reconcile_image_names_sparks_uid() -> None:
    """apache/spark's images (apache/spark-docker, 4.x Dockerfiles: ARG spark_uid=185, useradd --uid
    ${spark_uid} spark) run as 185, and so does the Spark-on-Kubernetes driver here; Hadoop's
    UserGroupInformation, which Spark calls at start, fails for a uid with no passwd entry."""
    runs = stage_runs("reconcile")
    assert "useradd --system --uid 185 --gid 185" in runs and "groupadd --system --gid 185" in runs
    assert "--uid 185" not in stage_runs("service")


def _image_user() -> tuple[str, int]:
    users = set(of("USER"))
    assert len(of("USER")) == 2, "each target (service, reconcile) sets its user"
    (user,) = users
    uid = int(user.split(":")[0])
    named = re.search(r"useradd .*--uid (\d+) .*?(\S+)$", " ".join(of("RUN")), re.M)
    assert named is not None, "the uid has a name (useradd)"
    return user, uid


def test_the_image_runs_as_a_named_user_that_is_not_root() -> None:
    user, uid = _image_user()
    assert uid > 0 and user == f"{uid}:{uid}"
    run = " ".join(of("RUN"))
    assert f"useradd --system --uid {uid} --gid {uid}" in run and f"groupadd --system --gid {uid}" in run
    assert set(of("ENTRYPOINT")) == {'["ledger-deletion"]'}


def test_the_manifests_run_the_pods_as_the_images_user() -> None:
    _, uid = _image_user()
    users = set()
    for path in (ROOT / "deploy" / "kubernetes").rglob("*.yaml"):
        if "spark-on-kubernetes" in path.parts:
            continue  # its driver runs as Spark's image user (185), whose executors write what it creates
        for document in load_all_yaml(path.read_text()):
            for match in re.finditer(r"'runAsUser': (\d+)", str(document)):
                users.add(int(match.group(1)))
    assert users == {uid}


def test_the_base_image_is_pinned() -> None:
    base, *targets = of("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+ AS base", base), base
    assert targets == ["base AS reconcile", "base AS service"]


# --- the lock -----------------------------------------------------------------------------------------------


def _closure(requirements: list[str], extras: frozenset[str] = frozenset()) -> set[str]:
    """Every distribution ``requirements`` need on this platform, from the installed metadata."""
    seen: set[str] = set()
    pending = [(Requirement(r), extras) for r in requirements]
    while pending:
        requirement, wanted = pending.pop()
        environments = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
        if requirement.marker and not any(requirement.marker.evaluate(env) for env in environments):
            continue
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for dependency in metadata.requires(name) or []:
            pending.append((Requirement(dependency), frozenset(requirement.extras)))
    return {key.split("[")[0] for key in seen}


def test_the_lock_holds_exactly_the_service_and_its_spark_extra_with_their_build_backend() -> None:
    dependencies = project()["project"]["dependencies"]  # type: ignore[index]
    spark = project()["project"]["optional-dependencies"]["spark"]  # type: ignore[index]
    needed = _closure([*dependencies, *spark])
    assert set(locked()) - BUILD_BACKEND == needed
    assert set(locked()) >= BUILD_BACKEND


def test_the_lock_is_what_the_tests_ran_with() -> None:
    """scripts/bootstrap installs within the lock, so a stale lock shows here (regenerate: scripts/lock)."""
    differ = {
        name: (version, metadata.version(name))
        for name, version in locked().items()
        if name not in BUILD_BACKEND and metadata.version(name) != version
    }
    assert not differ, f"locked vs installed: {differ}"


def test_every_dependency_has_an_upper_bound() -> None:
    for path in (ROOT / "pyproject.toml", ROOT / "devstack" / "pyproject.toml"):
        loaded = tomllib.loads(path.read_text())["project"]
        listed = [*loaded["dependencies"]]
        for extra in (loaded.get("optional-dependencies") or {}).values():
            listed += extra
        for text in listed:
            operators = {spec.operator for spec in Requirement(text).specifier}
            assert operators & {"<", "<=", "==", "~=", "==="}, f"{path.name}: {text} has no upper bound"


def test_the_lock_script_and_the_bootstrap_agree() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert re.search(r"-c <\(sed .*requirements\.lock\)", bootstrap), "the venv installs within the lock"
    assert "requirements.lock | sha1sum" in bootstrap
    assert '".[spark]" setuptools wheel' in (ROOT / "scripts" / "lock").read_text()


def test_the_build_context_leaves_local_state_out() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {"**/__pycache__", ".venv", ".git"} <= ignored
    assert Path("requirements.lock").name not in ignored
