"""S3 specifics: the conditional PUTs the lease relies on, and settings from the standard environment."""

from __future__ import annotations

import uuid

import pytest

from store import CheckpointStore
from tests.store.helpers import FAST, payload


def test_moto_honours_conditional_puts(moto_s3):
    """The lease relies on If-None-Match: * (create-only) and If-Match (takeover); moto does both."""
    from botocore.exceptions import ClientError

    client, key = moto_s3.client(), f"probe-{uuid.uuid4().hex}"
    first = client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    second = client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"4", IfMatch=first["ETag"])
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=moto_s3.bucket, Key=key)["ETag"] == second["ETag"]


@pytest.mark.slow
def test_swift_refuses_if_match_puts_so_the_lease_falls_back(swift_s3):
    """Swift's s3api: If-None-Match: * is honoured, If-Match on PUT answers 501, on DELETE it works."""
    from botocore.exceptions import ClientError

    client, key = swift_s3.client(), f"probe-{uuid.uuid4().hex}"
    first = client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
    with pytest.raises(ClientError) as info:
        client.delete_object(Bucket=swift_s3.bucket, Key=key, IfMatch='"0123"')
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_s3_settings_from_the_standard_environment(moto_s3, monkeypatch):
    for name, value in moto_s3.env().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{moto_s3.bucket}/t-{uuid.uuid4().hex[:12]}"  # endpoint and credentials from the environment
    rs = CheckpointStore(uri, retry=FAST).run("r")
    assert rs.commit(payload(1), {"iteration": 1}) == 1
    assert rs.load(1).files == payload(1)
    assert CheckpointStore(moto_s3.uri(uri.rsplit("/", 1)[1], credentials=False)).run("r").versions() == [1]
