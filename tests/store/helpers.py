"""What the store tests share: payloads, retry policies, and the store's objects reached around it.

Corruption, half-written folders and stale leases are made by hand, around the store, with plain
file operations or boto3; the store itself is never mocked.
"""

from __future__ import annotations

import time
from pathlib import Path

from store import CheckpointStore, RetryPolicy, json_bytes
from tests.s3_servers import S3Server

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, total_timeout=5.0)
UNBOUNDED = RetryPolicy(max_attempts=None, base_delay=0.02, max_delay=0.2, total_timeout=None)


def payload(i: int) -> dict[str, bytes]:
    return {"policy.safetensors": bytes([i % 256]) * (1000 + i), "counters.json": json_bytes({"iteration": i})}


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Raw:
    """The store's objects, reached around the store (a directory, or boto3 on the bucket)."""

    def __init__(self, root: Path | None = None, server: S3Server | None = None, prefix: str = ""):
        self.root, self.server, self.prefix = root, server, prefix
        self.client = server.client() if server else None

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def read(self, rel: str) -> bytes:
        if self.root is not None:
            return (self.root / rel).read_bytes()
        return self.client.get_object(Bucket=self.server.bucket, Key=self._key(rel))["Body"].read()

    def write(self, rel: str, data: bytes) -> None:
        if self.root is not None:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_bytes(data)
        else:
            self.client.put_object(Bucket=self.server.bucket, Key=self._key(rel), Body=data)

    def delete(self, rel: str) -> None:
        if self.root is not None:
            (self.root / rel).unlink()
        else:
            self.client.delete_object(Bucket=self.server.bucket, Key=self._key(rel))

    def names(self, rel: str) -> list[str]:
        """Every file below ``rel``, relative to it."""
        if self.root is not None:
            base = self.root / rel
            return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.exists() else []
        resp = self.client.list_objects_v2(Bucket=self.server.bucket, Prefix=self._key(rel) + "/")
        return sorted(
            o["Key"][len(self._key(rel)) + 1 :] for o in resp.get("Contents", []) if not o["Key"].endswith("/")
        )

    def exists(self, rel: str) -> bool:
        parent, _, name = rel.rpartition("/")
        return name in self.names(parent)


class Backend:
    def __init__(self, kind: str, uri: str, raw: Raw):
        self.kind, self.uri, self.raw = kind, uri, raw

    def store(self, retry: RetryPolicy = FAST) -> CheckpointStore:
        return CheckpointStore(self.uri, retry=retry)
