"""A ZooKeeper of the test's own (Debian's, as the embedded stack runs it) on free loopback ports, with TLS on
its secureClientPort or SASL DIGEST-MD5 enforced: the shared stack's ZooKeeper is never restarted or
reconfigured for a test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from devstack.stack import ZOOKEEPER_JAR
from tests.tls_support import Issued

_SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
# Netty's server needs these besides the jars zookeeper.jar's manifest names (Debian's libnetty-java).
_NETTY = [Path(f"/usr/share/java/netty-{name}.jar") for name in ("codec", "resolver")]


@dataclass(frozen=True)
class PrivateZooKeeper:
    port: int  # plain clientPort (its four-letter words say when it is up)
    secure_port: int | None
    log: Path

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure_hosts(self) -> str:
        assert self.secure_port is not None
        return f"127.0.0.1:{self.secure_port}"


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


@contextmanager
def private_zookeeper(
    directory: Path,
    *,
    tls: Issued | None = None,
    client_ca: Path | None = None,
    sasl_users: dict[str, str] | None = None,
) -> Iterator[PrivateZooKeeper]:
    """Start a ZooKeeper; with ``tls`` it serves TLS on a secure port too (client certificates required,
    checked against ``client_ca``), with ``sasl_users`` it admits only clients that log in as one of them."""
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    secure_port = _free_port() if tls is not None else None
    lines = [
        "tickTime=2000",
        f"dataDir={directory / 'data'}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok",
    ]
    java_options = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=info"]
    if tls is not None:
        assert client_ca is not None
        keystore = directory / "server.pem"
        keystore.write_bytes(tls.key_pem + tls.cert_pem)  # ZooKeeper's PEM keystore: key and chain, one file
        lines += [
            f"secureClientPort={secure_port}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={client_ca}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=need",
            # The server would check the client certificate's name against the client's address too.
            "ssl.hostnameVerification=false",
        ]
    if sasl_users:
        jaas = directory / "jaas.conf"
        users = "\n".join(f'    user_{name}="{password}"' for name, password in sasl_users.items())
        jaas.write_text(
            f"Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n{users};\n}};\n"
        )
        java_options.append(f"-Djava.security.auth.login.config={jaas}")
        lines += [
            "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=sasl",
        ]
    config = directory / "zoo.cfg"
    config.write_text("\n".join(lines) + "\n")
    extra = [_SLF4J_SIMPLE, *(_NETTY if tls is not None else [])]
    classpath = [str(ZOOKEEPER_JAR)] + [str(jar) for jar in extra if jar.exists()]
    log = directory / "zookeeper.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                shutil.which("java") or "java",
                "-Xmx128m",
                "-XX:+UseSerialGC",
                "-Djava.net.preferIPv4Stack=true",
                "-Dzookeeper.jmx.log4j.disable=true",
                *java_options,
                "-cp",
                os.pathsep.join(classpath),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        # The secure port too: a TLS client that finds it closed retries, and kazoo leaves each failed
        # attempt's socket open (create_tcp_connection raises without closing it).
        while not (_ruok(port) and (secure_port is None or _accepts(secure_port))):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private ZooKeeper did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield PrivateZooKeeper(port, secure_port, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
