"""The S3 back end: ``s3://bucket/prefix``, data through pyarrow.fs, conditional PUTs through boto3.

The manifest and the run lease need create-only writes (``If-None-Match: *``) and the lease also
compare-and-swap (``If-Match: <etag>``), which pyarrow does not offer; boto3 does them. Both are
imported on first use (opening a store does no I/O and needs neither), and their clients are
shared by every store with the same settings.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from store.errors import StoreError, StoreUnavailable
from store.layout import MANIFEST, QUARANTINE, lock_rel, parse_version_dir, version_rel
from store.lease import parse_lease_record

T = TypeVar("T")


class _NoConditionalPut(Exception):
    """The S3 endpoint answered 501 to a PUT with If-Match (OpenStack Swift's s3api does)."""


class _NoConditionalDelete(Exception):
    """The S3 endpoint answered 501 to a DELETE with If-Match."""


_S3_QUERY_KEYS = (
    "endpoint_override",
    "scheme",
    "region",
    "access_key",
    "secret_key",
    "session_token",
    "connect_timeout",
    "request_timeout",
)
# pyarrow reports S3 errors as OSError text; these mean a retry cannot help.
_S3_PERMANENT_MARKERS = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "HTTP status 403")
_S3_TRANSIENT_CODES = frozenset(
    {"RequestTimeout", "SlowDown", "Throttling", "ThrottlingException", "InternalError", "ServiceUnavailable"}
)


def _client_status(exc: Exception) -> tuple[int | None, str]:
    response = getattr(exc, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode"), str(response.get("Error", {}).get("Code", ""))


@contextlib.contextmanager
def _s3_errors(what: str) -> Iterator[None]:
    """Map boto3/pyarrow errors: transient ones to StoreUnavailable, the rest propagate."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    try:
        yield
    except FileNotFoundError:
        raise
    except ClientError as exc:
        status, code = _client_status(exc)
        if code in _S3_TRANSIENT_CODES or status == 429 or (status is not None and status >= 500 and status != 501):
            raise StoreUnavailable(f"{what}: {exc}") from exc
        raise
    except (ConnectionError, HTTPClientError) as exc:  # refused, reset, timed out
        raise StoreUnavailable(f"{what}: {exc}") from exc
    except OSError as exc:  # pyarrow: network errors, 5xx, and a bucket not (yet) there
        if any(marker in str(exc) for marker in _S3_PERMANENT_MARKERS):
            raise StoreError(f"{what}: {exc}") from exc
        raise StoreUnavailable(f"{what}: {exc}") from exc


_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(kind: str, settings: tuple, make: Callable[[], T]) -> T:
    with _CLIENTS_LOCK:
        key = (kind, settings)
        if key not in _CLIENTS:
            if not _CLIENTS:
                import pyarrow.fs  # noqa: F401  (registers pyarrow's S3 exit hook first)

                # Exit hooks run last-registered first: the shared clients go before pyarrow
                # finalises its S3 subsystem, which must not happen while an S3FileSystem lives.
                atexit.register(_CLIENTS.clear)
            _CLIENTS[key] = make()
        return _CLIENTS[key]


class S3Backend:
    """``s3://bucket/prefix``: data through pyarrow.fs, conditional PUTs (manifest, lease) through boto3."""

    def __init__(self, uri: str):
        parts = urlsplit(uri)
        self.bucket = parts.netloc
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", self.bucket or ""):
            raise ValueError(f"store URI {uri.split('?')[0]!r}: {self.bucket!r} is not a valid S3 bucket name")
        self.prefix = unquote(parts.path).strip("/")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - set(_S3_QUERY_KEYS))
        if unknown:
            raise ValueError(f"store URI: unknown query keys {unknown}; allowed: {list(_S3_QUERY_KEYS)}")
        q = {k: v[-1] for k, v in query.items()}
        endpoint, scheme = q.get("endpoint_override"), q.get("scheme")
        env_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if not endpoint and env_endpoint:
            u = urlsplit(env_endpoint)
            endpoint, scheme = u.netloc, scheme or u.scheme
        self.endpoint, self.scheme = endpoint or None, scheme or "https"
        self.region = (
            q.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        )
        self.access_key = q.get("access_key") or os.environ.get("AWS_ACCESS_KEY_ID")
        self.secret_key = q.get("secret_key") or os.environ.get("AWS_SECRET_ACCESS_KEY")
        self.session_token = q.get("session_token") or os.environ.get("AWS_SESSION_TOKEN")
        try:
            self.connect_timeout = float(q.get("connect_timeout", 5.0))
            self.request_timeout = float(q.get("request_timeout", 60.0))
        except ValueError:
            raise ValueError("store URI: connect_timeout and request_timeout must be numbers (seconds)") from None
        self._fs: Any = None
        self._client: Any = None
        # None: not known yet; False after the endpoint answered 501 to a PUT with If-Match.
        self.conditional_put: bool | None = None

    def _settings(self) -> tuple:
        return (
            self.endpoint,
            self.scheme,
            self.region,
            self.access_key,
            self.secret_key,
            self.session_token,
            self.connect_timeout,
            self.request_timeout,
        )

    # Clients are made on first use (opening a store does no I/O) and shared by every store with the
    # same settings: a boto3 client or a pyarrow S3FileSystem takes about a second to make.
    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = _shared_client("pyarrow", self._settings(), self._make_fs)
        return self._fs

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _shared_client("boto3", self._settings(), self._make_client)
        return self._client

    def _make_fs(self) -> Any:
        from pyarrow import fs as pafs

        kwargs: dict[str, Any] = dict(
            region=self.region,
            scheme=self.scheme,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            # Our RetryPolicy does the retrying; the SDK's own would multiply the waits.
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        )
        if self.endpoint:
            kwargs["endpoint_override"] = self.endpoint
        if self.access_key and self.secret_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return pafs.S3FileSystem(**kwargs)

    def _make_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise StoreError("s3:// checkpoint stores need boto3 (for conditional PUTs): pip install boto3") from None
        options: dict[str, Any] = dict(
            retries={"max_attempts": 1, "mode": "standard"},
            connect_timeout=self.connect_timeout,
            read_timeout=self.request_timeout,
            s3={"addressing_style": "path"} if self.endpoint else None,
        )
        try:
            # No CRC trailers: S3-compatible stores (Swift, older MinIO) reject them (botocore >= 1.36).
            config = Config(
                **options, request_checksum_calculation="when_required", response_checksum_validation="when_required"
            )
        except TypeError:
            config = Config(**options)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=f"{self.scheme}://{self.endpoint}" if self.endpoint else None,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token,
            config=config,
        )

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _path(self, rel: str) -> str:
        return f"{self.bucket}/{self.key(rel)}"

    def describe(self, rel: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(rel)}" if rel else f"s3://{self.bucket}/{self.prefix}"

    def list_run(self, run: str) -> dict[int, set[str]]:
        from pyarrow import fs as pafs

        base = self._path(run)
        out: dict[int, set[str]] = {}
        with _s3_errors(f"listing {self.describe(run)}"):
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        for info in infos:
            parts = info.path[len(base) + 1 :].split("/")
            version = parse_version_dir(parts[0])
            if version is None:
                continue
            names = out.setdefault(version, set())
            if len(parts) == 2 and info.type == pafs.FileType.File:
                names.add(parts[1])
        return out

    def read(self, rel: str) -> bytes:
        with _s3_errors(f"reading {self.describe(rel)}"), self.fs.open_input_stream(self._path(rel)) as f:
            return f.read()

    def list_files(self, rel: str) -> dict[str, int]:
        """{key below ``rel`` ('/'-joined): size in bytes} of every object under the prefix ``rel/``."""
        from pyarrow import fs as pafs

        base = self._path(rel).rstrip("/")
        with _s3_errors(f"listing {self.describe(rel)}"):
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        return {info.path[len(base) + 1 :]: int(info.size or 0) for info in infos if info.type == pafs.FileType.File}

    def make_dirs(self, rel: str) -> None:
        pass  # no folders on S3: a key's prefix needs no creating

    def write(self, rel: str, data: bytes) -> None:
        """One object, atomic per upload: readers see all of it or none."""
        with _s3_errors(f"writing {self.describe(rel)}"), self.fs.open_output_stream(self._path(rel)) as f:
            f.write(data)

    def put(self, rel: str, data: bytes, **conditions: str) -> Any:
        with _s3_errors(f"writing {self.describe(rel)}"):
            return self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, **conditions)

    def copy(self, src_rel: str, rel: str) -> None:
        """``rel`` becomes a copy of the object ``src_rel``, made by the server (CopyObject, multipart
        past 5 GB): no byte goes through this machine. FileNotFoundError if ``src_rel`` is not there."""
        from botocore.exceptions import ClientError

        source = {"Bucket": self.bucket, "Key": self.key(src_rel)}
        try:
            with _s3_errors(f"copying {self.describe(src_rel)} to {self.describe(rel)}"):
                self.client.copy(source, self.bucket, self.key(rel))
        except ClientError as exc:
            status, code = _client_status(exc)
            if status == 404 or code in ("NoSuchKey", "404"):
                raise FileNotFoundError(self.describe(src_rel)) from exc
            raise

    def publish(self, rel: str, data: bytes) -> bool:
        """Create-only (``If-None-Match: *``): False if the object already exists."""
        from botocore.exceptions import ClientError

        try:
            self.put(rel, data, IfNoneMatch="*")
        except ClientError as exc:
            if _client_status(exc)[0] in (409, 412):
                return False
            raise
        return True

    def delete(self, rel: str) -> None:
        """Remove one object; no error if it is not there."""
        with _s3_errors(f"deleting {self.describe(rel)}"), contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self._path(rel))

    def prepare_version(self, run: str, version: int) -> bool:
        """False if the version holds a manifest (committed) or a quarantined one: never write into it.

        There are no folders to create on S3; the number comes from a listing, and listings may lag
        behind writes (Swift's container listings do after a restart), so a committed version can be
        missing from one. Object reads are consistent where listings are not: ask for the two
        markers by name (one HEAD each) before writing a single file under the number.
        """
        return not any(self._exists(version_rel(run, version, name)) for name in (MANIFEST, QUARANTINE))

    def _exists(self, rel: str) -> bool:
        """One HEAD request (pyarrow's file info adds a listing, the very thing that may lag)."""
        from botocore.exceptions import ClientError

        try:
            with _s3_errors(f"checking {self.describe(rel)}"):
                self.client.head_object(Bucket=self.bucket, Key=self.key(rel))
        except ClientError as exc:
            if _client_status(exc)[0] == 404:
                return False
            raise
        return True

    def sync_dir(self, rel: str) -> None:
        pass

    def delete_version(self, run: str, version: int) -> None:
        """Manifest first, so a crash half-way leaves an invisible folder, never a broken visible one."""
        vdir = version_rel(run, version)
        with _s3_errors(f"deleting {self.describe(vdir)}"):
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self._path(f"{vdir}/{MANIFEST}"))
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_dir(self._path(vdir))

    def lease_ops(self, run: str) -> S3LeaseOps:
        return S3LeaseOps(self, lock_rel(run))


@dataclass
class S3Handle:
    etags: list[str] = field(default_factory=list)  # every ETag this lease wrote, newest last


class S3LeaseOps:
    """LOCK.json on S3: create with If-None-Match: *, take over and refresh with If-Match: <etag>.

    On stores that answer 501 to a PUT with If-Match (OpenStack Swift's s3api), a takeover or refresh
    is a DELETE with If-Match (which they honour) followed by a create-only PUT; a newcomer that slips
    in between wins, and this side sees RunLocked/LeaseLost. Swift also checks its conditions when a
    request starts, so two simultaneous creates can both succeed: acquire() therefore reads its lease
    back after a moment, and every commit checks the lease's ETag before its manifest, so the loser
    of such a race stops before it publishes anything.
    """

    def __init__(self, backend: S3Backend, rel: str):
        self.b = backend
        self.rel = rel
        self.where = backend.describe(rel)
        self.settle = 0.1  # seconds before acquire() reads its lease back (see store.lease.acquire)

    def _call(self, fn: Callable[[], T], what: str) -> T:
        with _s3_errors(f"{what} {self.where}"):
            return fn()

    def create(self, body: bytes) -> S3Handle | None:
        from botocore.exceptions import ClientError

        try:
            resp = self.b.put(self.rel, body, IfNoneMatch="*")
        except ClientError as exc:
            if _client_status(exc)[0] in (409, 412):
                return None
            raise
        return S3Handle([resp["ETag"]])

    def read(self) -> tuple[dict | None, Any, float | None]:
        from botocore.exceptions import ClientError

        def get() -> tuple[Any, bytes]:
            resp = self.b.client.get_object(Bucket=self.b.bucket, Key=self.b.key(self.rel))
            return resp, resp["Body"].read()

        try:
            resp, data = self._call(get, "reading")
        except ClientError as exc:
            if _client_status(exc)[0] == 404:
                return None, None, None
            raise
        return parse_lease_record(data), resp["ETag"], resp["LastModified"].timestamp()

    def adopt(self, tag: Any) -> S3Handle | None:
        return S3Handle([tag])

    def _conditional_put(self, body: bytes, etag: str) -> str | None:
        """PUT If-Match; new ETag, or None on 412/409/404. Raises _NoConditionalPut on 501."""
        from botocore.exceptions import ClientError

        if self.b.conditional_put is False:
            raise _NoConditionalPut
        try:
            resp = self.b.put(self.rel, body, IfMatch=etag)
        except ClientError as exc:
            status, code = _client_status(exc)
            if status in (404, 409, 412):
                return None
            if status == 501 or code == "NotImplemented":
                self.b.conditional_put = False
                raise _NoConditionalPut from None
            raise
        self.b.conditional_put = True
        return resp["ETag"]

    def _conditional_delete(self, etag: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._call(
                lambda: self.b.client.delete_object(Bucket=self.b.bucket, Key=self.b.key(self.rel), IfMatch=etag),
                "deleting",
            )
        except ClientError as exc:
            status, code = _client_status(exc)
            if status in (404, 409, 412):
                return False
            if status == 501 or code == "NotImplemented":
                raise _NoConditionalDelete from None
            raise
        return True

    def _replace(self, etag: str, body: bytes) -> str | None:
        """Replace the lease whose ETag is ``etag`` with ``body``; the new ETag, or None if it changed."""
        try:
            return self._conditional_put(body, etag)
        except _NoConditionalPut:
            try:
                if not self._conditional_delete(etag):
                    return None
            except _NoConditionalDelete:
                raise StoreError(
                    f"{self.where}: this S3 endpoint supports neither If-Match PUTs nor If-Match DELETEs, so a lease "
                    "cannot be replaced safely; delete the lease file by hand once sure its holder has stopped"
                ) from None
            handle = self.create(body)
            return handle.etags[-1] if handle else None

    def takeover(self, tag: Any, body: bytes, stale: Callable[[dict | None, float], str | None]) -> S3Handle | None:
        etag = self._replace(tag, body)
        return S3Handle([etag]) if etag else None

    def verify(self, h: S3Handle, token: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            resp = self._call(
                lambda: self.b.client.head_object(Bucket=self.b.bucket, Key=self.b.key(self.rel)), "checking"
            )
        except ClientError as exc:
            if _client_status(exc)[0] == 404:
                return False
            raise
        if resp["ETag"] in h.etags:
            return True
        # An ETag we never saw: a write of ours whose answer was lost still shows our token.
        record, etag, _ = self.read()
        if record is not None and record.get("token") == token and etag is not None:
            h.etags = [*h.etags[-7:], etag]
            return True
        return False

    def refresh(self, h: S3Handle, body: bytes, token: str) -> bool:
        etag = self._replace(h.etags[-1], body)
        if etag is None:
            return self.verify(h, token)  # still ours if only the answer to our last write was lost
        h.etags = [*h.etags[-7:], etag]
        return True

    def release(self, h: S3Handle, token: str) -> None:
        # Look first: a store that ignored If-Match on DELETE would otherwise delete a successor's lease.
        if not self.verify(h, token):
            return
        try:
            self._conditional_delete(h.etags[-1])
        except _NoConditionalDelete:
            self._call(lambda: self.b.client.delete_object(Bucket=self.b.bucket, Key=self.b.key(self.rel)), "deleting")

    def close(self, h: S3Handle) -> None:
        pass
