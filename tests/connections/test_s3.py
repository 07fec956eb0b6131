"""S3 over HTTPS with the store's CA given by botocore's own AWS_CA_BUNDLE: the embedded stack's moto behind
a TLS-terminating proxy."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.errors import BucketNotFound, ObjectStoreUnavailable
from tests.tls_support import Pki, make_pki, server_context, tls_proxy

pytestmark = pytest.mark.stack


def test_the_object_store_works_over_https_with_the_ca_bundle(
    stack: Any, s3: Any, pki: Pki, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    bucket = f"tls-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    moto = urlsplit(stack.s3_endpoint)
    server = pki.issue("s3", ips=("127.0.0.1",))
    with tls_proxy(server_context(server), (moto.hostname, moto.port)) as proxy:
        endpoint = f"https://127.0.0.1:{proxy.port}"
        monkeypatch.setenv("AWS_CA_BUNDLE", str(pki.ca))
        store = ObjectStore(endpoint)
        store.require_bucket(bucket)
        assert store.head(bucket, "no-such-key") is None
        with pytest.raises(BucketNotFound):
            store.require_bucket(f"{bucket}-missing")

        other = make_pki(tmp_path / "other", "other-ca")
        monkeypatch.setenv("AWS_CA_BUNDLE", str(other.ca))
        with pytest.raises(ObjectStoreUnavailable):
            ObjectStore(endpoint).require_bucket(bucket)
