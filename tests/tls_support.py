"""Certificates made for a test (a CA, server and client certificates signed by it) and a TLS-terminating
proxy, so a client's TLS settings meet a real handshake on loopback in front of a service of the embedded
stack that speaks none (Temporal's dev server, the admin emulator)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Pki:
    """A CA and what it issued, as PEM files in a directory."""

    directory: Path
    ca: Path
    ca_pem: bytes
    _ca_key: ec.EllipticCurvePrivateKey
    _ca_cert: x509.Certificate

    def issue(self, name: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Issued:
        """A certificate for ``name`` (server and client use) with these subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        alt_names += [x509.IPAddress(ip_address(i)) for i in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()), critical=False
            )
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_path.write_bytes(cert_pem)
        key_path.write_bytes(key_pem)
        return Issued(cert_path, key_path, cert_pem, key_pem)


def make_pki(directory: Path, name: str = "test-ca") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    path = directory / f"{name}.crt"
    path.write_bytes(pem)
    return Pki(directory, path, pem, key, cert)


def server_context(
    issued: Issued, *, client_ca: Path | None = None, alpn: tuple[str, ...] = ()
) -> ssl.SSLContext:
    """A server context presenting ``issued``; with ``client_ca`` it requires a client certificate."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert, issued.key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


@dataclass
class TlsProxy:
    """Terminates TLS on ``port`` and forwards the clear bytes to ``upstream`` (host, port)."""

    port: int
    handshakes: int = 0  # completed TLS handshakes (a refused one never reaches the upstream)


@contextmanager
def tls_proxy(context: ssl.SSLContext, upstream: tuple[str, int]) -> Iterator[TlsProxy]:
    """A TLS terminator on a free loopback port, run on its own event loop thread for the test's length."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[TlsProxy] = loop.create_future()
    stop = asyncio.Event()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        proxy = TlsProxy(port=0)
        handlers: set[asyncio.Task[None]] = set()
        writers: set[asyncio.StreamWriter] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            task.add_done_callback(handlers.discard)
            proxy.handshakes += 1
            try:
                up_reader, up_writer = await asyncio.open_connection(*upstream)
            except OSError:
                writer.close()
                return
            writers.update((writer, up_writer))
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        proxy.port = server.sockets[0].getsockname()[1]
        ready.set_result(proxy)
        async with server:
            await stop.wait()
            for writer in writers:  # every pipe then reads its end of file and returns
                writer.close()
            await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), 10)

    def run() -> None:
        loop.run_until_complete(serve())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    proxy = asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=10)
    try:
        yield proxy
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


async def _wait(future: asyncio.Future[TlsProxy]) -> TlsProxy:
    return await future
