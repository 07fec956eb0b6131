"""Messages in forms Pulsar allows on any topic but the ingest cannot take as requests still end in the
dead-letter topic, acked, and hold nothing up: a chunked message over the broker's maximum message size
(reassembled by the consumer, so the dead letter is as large), and an end-to-end encrypted message this
service holds no key for. Real pulsar-lite (chunking, encryption), real Temporal dev server.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.client import Client

from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.integration.ingest_loop import Loop, running_loop
from tests.integration.test_ingest_dead_letters import assert_never_started
from tests.support import eventually
from workers.ingest import Ingestor

pytestmark = pytest.mark.stack

# Over the broker's maximum message size (5 MB): only a chunking producer can publish it.
OVER_MAX_MESSAGE_SIZE = 6_000_000


@pytest.fixture
async def loop(settings: Settings, temporal_client: Client) -> AsyncIterator[Loop]:
    async with running_loop(Loop, settings, temporal_client) as made:
        yield made


def valid_request(ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo("forms/ns/t", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


async def assert_a_valid_request_still_starts(
    loop: Loop, ingestor: Ingestor, temporal_client: Client, ledger_id: int
) -> None:
    """A valid request sent next starts its run; once the loop stops, it alone is left unacked (no worker
    polls the loop's workflow queue, so nothing acks it): the message before it was acked."""
    request = valid_request(ledger_id)
    loop.workflow_ids.append(request.workflow_id)
    loop.send(encode_request(request))

    def started() -> None:
        assert ingestor.stats.started_or_joined == 1

    await eventually(started)
    await temporal_client.get_workflow_handle(request.workflow_id).describe()
    assert await loop.unacked() == [encode_request(request)]


def rsa_key_pair(directory: Path) -> tuple[str, str]:
    """PEM files of a fresh RSA key pair, as Pulsar's default CryptoKeyReader reads them."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "private.pem", directory / "public.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(public), str(private)


def decrypt(ciphertext: bytes, properties: dict[str, str], key: dict[str, str], private_pem: str) -> bytes:
    """What an operator holding the private key does with a dead letter: unwrap the data key (RSA-OAEP),
    then decrypt the payload (AES-GCM, the IV in ``param``), as Pulsar's clients do."""
    private_key = serialization.load_pem_private_key(Path(private_pem).read_bytes(), password=None)
    assert isinstance(private_key, rsa.RSAPrivateKey)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    data_key = private_key.decrypt(base64.b64decode(key["value"]), oaep)
    iv = base64.b64decode(properties["ledger-deletion.encryption.param"])
    return AESGCM(data_key).decrypt(iv, ciphertext, None)


async def test_chunked_message_over_the_max_message_size_is_dead_lettered_whole(
    loop: Loop, temporal_client: Client, new_ledger_id
) -> None:
    ingestor = loop.start()
    payload = bytes(range(256)) * (OVER_MAX_MESSAGE_SIZE // 256)
    chunking = loop.client.create_producer(loop.full_topic, batching_enabled=False, chunking_enabled=True)
    chunking.send(payload)
    chunking.close()

    # The dead letter is as large as the message: its producer must chunk it too, or it never leaves. Six
    # megabytes through pulsar-lite twice (in, then out as chunks) took over 30 s once on a loaded machine.
    letter = await loop.dead_letter(timeout_seconds=120)
    props = letter.properties()
    assert letter.data() == payload
    assert props["ledger-deletion.failed-step"] == "decode" and "exceeds" in props["ledger-deletion.reason"]
    assert props["ledger-deletion.origin-schema-version"] == ""  # a producer without schema

    await assert_a_valid_request_still_starts(loop, ingestor, temporal_client, new_ledger_id())
    assert ingestor.stats.dead_lettered == 1


async def test_encrypted_message_is_dead_lettered_with_what_decrypts_it(
    loop: Loop, temporal_client: Client, new_ledger_id, tmp_path: Path
) -> None:
    ingestor = loop.start()
    public_pem, private_pem = rsa_key_pair(tmp_path)
    sealed_request = valid_request(new_ledger_id())
    sealed = encode_request(sealed_request)  # a valid request, but nobody here can read it
    encrypting = loop.client.create_producer(
        loop.full_topic,
        batching_enabled=False,
        encryption_key="deletions",
        crypto_key_reader=pulsar.CryptoKeyReader(public_pem, private_pem),
    )
    encrypting.send(sealed, properties={"sender": "tenant-a"})
    encrypting.close()

    letter = await loop.dead_letter()
    props = letter.properties()
    assert props["ledger-deletion.failed-step"] == "decrypt"
    assert "encrypted" in props["ledger-deletion.reason"] and "deletions" in props["ledger-deletion.reason"]
    assert props["sender"] == "tenant-a"  # the sender's own properties are kept, as for any dead letter
    assert letter.data() != sealed  # kept as it was sent: still encrypted
    # Everything Pulsar's encryption metadata says, so that whoever holds the private key can decrypt it.
    assert "ledger-deletion.encryption.algorithm" in props  # empty: the client's default (AES-GCM)
    assert props["ledger-deletion.encryption.compression-type"] == "NONE"
    assert props["ledger-deletion.encryption.uncompressed-size"] == "0"
    assert props["ledger-deletion.encryption.batch-size"] == "-1"  # not batched
    [key] = json.loads(props["ledger-deletion.encryption.keys"])
    assert key["name"] == "deletions" and key["metadata"] == {}
    assert decrypt(letter.data(), props, key, private_pem) == sealed

    await assert_a_valid_request_still_starts(loop, ingestor, temporal_client, new_ledger_id())
    assert ingestor.stats.dead_lettered == 1
    await assert_never_started(temporal_client, sealed_request.workflow_id)  # its payload never decoded
