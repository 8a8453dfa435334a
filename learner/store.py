"""The checkpoint store: versioned, checksummed checkpoints of training runs behind one URI.

The root is a plain path, ``file:///abs/path`` or ``s3://bucket/prefix``. For S3 the endpoint,
region and credentials come from the URI query
(``?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1&access_key=..&secret_key=..``)
and/or the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``...).
Layout, the same on both::

    <root>/<run>/LOCK.json                     the run lease {owner, host, pid, heartbeat, token, ...}
    <root>/<run>/LOCK.json.takeover            (local only) flock'ed while a stale lease is taken over
    <root>/<run>/ckpt-00000001/<file>          payload files, written first
    <root>/<run>/ckpt-00000001/MANIFEST.json   written last, create-only: every file's size and
                                               sha256, plus the caller's meta (iteration, env_steps,
                                               metrics...), wall_time and format_version
    <root>/<run>/ckpt-00000002/...

A checkpoint is visible only once its manifest exists (the commit marker, as in
torch.distributed.checkpoint and Orbax); a folder without one is a crashed or in-flight write that
readers never see and :meth:`RunStore.cleanup` removes. Versions are found by listing, never
through a mutable "latest" pointer. Loading checks every file against the manifest.

Two writers on one run are kept apart by a lease, ``LOCK.json``, created create-only (local:
``O_CREAT|O_EXCL``; S3: PUT with ``If-None-Match: *``) and taken over atomically once stale (holder
process gone, or no heartbeat for ``lease_timeout``). Every store operation goes through
:func:`retry` (exponential backoff with jitter on transient errors only); :class:`AsyncCommitter`
commits in the background so that training goes on while the store is down.

Nothing read from the store is ever unpickled: payloads are bytes, tensors travel as safetensors
(:func:`tensors_to_bytes`) and everything else as JSON (:func:`json_bytes`,
:func:`state_to_payload` for nested python + tensor structures such as optimizer state).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

T = TypeVar("T")

MANIFEST = "MANIFEST.json"
LOCK = "LOCK.json"
FORMAT_VERSION = 1
LEASE_FORMAT_VERSION = 1

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VERSION_RE = re.compile(r"ckpt-(\d{8,})")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
# The local lease file is rewritten in place at a fixed size, so a heartbeat is one pwrite of one page.
_LEASE_BYTES = 4096
_MAX_OWNER_CHARS = 200


# --------------------------------------------------------------------------------------------------
# Errors


class StoreError(Exception):
    """Base class of the checkpoint store's errors."""


class StoreUnavailable(StoreError):
    """The store could not be reached, or answered with a transient error. Retried by :func:`retry`."""


class CheckpointNotFound(StoreError, FileNotFoundError):
    """The run has no committed checkpoint of that version. Never retried."""


class CorruptCheckpoint(StoreError):
    """A committed checkpoint does not match its manifest (or the manifest itself is unreadable)."""

    def __init__(self, run: str, version: int, file: str, problem: str, where: str):
        self.run, self.version, self.file, self.problem, self.where = run, version, file, problem, where
        super().__init__(f"corrupt checkpoint: run '{run}' version {version} ({where}): file '{file}' {problem}")


class RunLocked(StoreError):
    """Another live writer holds the run's lease."""

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


class LeaseLost(StoreError):
    """This writer's lease was taken over (or removed): it must stop writing the run."""


class _Stopped(StoreError):
    """A retry loop was told to stop (AsyncCommitter.close)."""


class _NoConditionalPut(Exception):
    """The S3 endpoint answered 501 to a PUT with If-Match (OpenStack Swift's s3api does)."""


class _NoConditionalDelete(Exception):
    """The S3 endpoint answered 501 to a DELETE with If-Match."""


# --------------------------------------------------------------------------------------------------
# Retries

# errno values a shared file system (NFS, FUSE mounts of object stores) returns while it recovers.
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,
        errno.EINTR,
        errno.EIO,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: connection refused/reset, timeouts, 5xx, S3 client errors.

    Logic errors (a missing checkpoint, validation, corruption, a lost lease) are not.
    """
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, StoreError):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


@dataclass(frozen=True)
class RetryPolicy:
    """How store operations are retried on transient errors: exponential backoff with jitter.

    Retry n (1-based) waits a random time in ``[d/2, d]`` with ``d = min(max_delay, base_delay * 2**(n-1))``;
    the jitter keeps many clients from hammering a recovering store in lock step.
    ``max_attempts`` counts the first try; ``max_attempts`` / ``total_timeout`` of ``None`` mean no
    limit (what :class:`AsyncCommitter` uses: a checkpoint waits out any outage). Seconds throughout.
    """

    max_attempts: int | None = 8
    base_delay: float = 0.25
    max_delay: float = 8.0
    total_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1 or None, got {self.max_attempts}")
        if not (self.base_delay >= 0 and self.max_delay >= self.base_delay):
            raise ValueError(f"RetryPolicy needs 0 <= base_delay <= max_delay, got {self.base_delay}, {self.max_delay}")
        if self.total_timeout is not None and self.total_timeout <= 0:
            raise ValueError(f"RetryPolicy.total_timeout must be > 0 or None, got {self.total_timeout}")

    def delay(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * 2.0 ** min(retry_number - 1, 62))
        return random.uniform(cap / 2, cap)


def retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    what: str,
    stop: threading.Event | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying transient errors (:func:`is_transient`) per ``policy``.

    Non-transient errors propagate at once. When the policy gives up, raises :class:`StoreUnavailable`
    naming ``what``, chained to the last error. ``stop`` (an Event) aborts the wait between attempts;
    ``on_retry(attempt, exc)`` is called before each wait.
    """
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            elapsed = time.monotonic() - start
            if policy.max_attempts is not None and attempt >= policy.max_attempts:
                raise StoreUnavailable(f"{what}: gave up after {attempt} attempts in {elapsed:.1f} s: {exc}") from exc
            wait = policy.delay(attempt)
            if policy.total_timeout is not None and elapsed + wait > policy.total_timeout:
                raise StoreUnavailable(
                    f"{what}: gave up after {attempt} attempts in {elapsed:.1f} s "
                    f"(total_timeout {policy.total_timeout} s): {exc}"
                ) from exc
            # Attempts 1, 2, 4, 8...: a long outage logs a handful of lines, not one per attempt.
            if attempt & (attempt - 1) == 0:
                log.warning("%s failed (attempt %d): %s; retrying in %.2f s", what, attempt, exc, wait)
            if on_retry is not None:
                on_retry(attempt, exc)
            if stop is None:
                time.sleep(wait)
            elif stop.wait(wait):
                raise _Stopped(f"{what}: stopped while retrying after {attempt} attempts: {exc}") from exc


@dataclass
class _Retrier:
    """A retry policy bound to a stop event and a retry counter, passed down one commit."""

    policy: RetryPolicy
    stop: threading.Event | None = None
    on_retry: Callable[[int, BaseException], None] | None = None

    def __call__(self, fn: Callable[[], T], what: str) -> T:
        return retry(fn, self.policy, what=what, stop=self.stop, on_retry=self.on_retry)


# --------------------------------------------------------------------------------------------------
# Names and payload checks


def check_name(kind: str, name: object) -> str:
    """Validate a run or file name: ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`` and no ``..``.

    This keeps every name one path segment inside the store (no ``/``, no absolute path, no parent).
    """
    if not isinstance(name, str):
        raise ValueError(f"{kind} name must be a str, got {type(name).__name__}")
    if not _NAME_RE.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{kind} name {name!r} is not allowed: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit, without '..' (no slashes, no absolute or parent paths)"
        )
    return name


def _check_payload(run: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> tuple[dict[str, bytes], dict]:
    """Validate a commit's inputs before any I/O; returns private copies (the caller may mutate its own)."""
    if not isinstance(files, Mapping):
        raise ValueError(f"commit to run '{run}': files must be a dict of name -> bytes, got {type(files).__name__}")
    out: dict[str, bytes] = {}
    for name, data in files.items():
        check_name("file", name)
        if name == MANIFEST:
            raise ValueError(f"commit to run '{run}': file name {MANIFEST!r} is reserved for the manifest")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"commit to run '{run}': file '{name}' must be bytes, got {type(data).__name__}")
        out[name] = bytes(data)
    if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
        raise ValueError(f"commit to run '{run}': meta must be a dict with str keys")
    try:
        meta_copy = json.loads(json.dumps(dict(meta), allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"commit to run '{run}': meta must be JSON-serialisable: {exc}") from None
    for key in ("iteration", "env_steps"):
        value = meta_copy.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"commit to run '{run}': meta['{key}'] must be an int >= 0, got {value!r}")
    if "metrics" in meta_copy and not isinstance(meta_copy["metrics"], dict):
        raise ValueError(f"commit to run '{run}': meta['metrics'] must be a dict of name -> number")
    return out, meta_copy


def _check_version(version: object) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"checkpoint version must be an int >= 1, got {version!r}")
    return version


def _version_dir(version: int) -> str:
    return f"ckpt-{version:08d}"


def _validate_manifest(obj: object, run: str, version: int) -> str | None:
    """What is wrong with a parsed manifest, or None."""
    if not isinstance(obj, dict):
        return "is not a JSON object"
    fv = obj.get("format_version")
    if fv != FORMAT_VERSION:
        return f"has format_version {fv!r}; this code reads {FORMAT_VERSION} (written by another splatdrive version?)"
    if obj.get("run") != run or obj.get("version") != version:
        return f"names run {obj.get('run')!r} version {obj.get('version')!r}, not run '{run}' version {version}"
    if not isinstance(obj.get("meta"), dict) or not isinstance(obj.get("wall_time"), (int, float)):
        return "lacks 'meta' (an object) or 'wall_time' (a number)"
    files = obj.get("files")
    if not isinstance(files, dict):
        return "lacks 'files' (an object)"
    for name, entry in files.items():
        if not _NAME_RE.fullmatch(name) or ".." in name or name == MANIFEST:
            return f"lists an invalid file name {name!r}"
        if not isinstance(entry, dict):
            return f"entry for '{name}' is not an object"
        size, digest = entry.get("size"), entry.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"entry for '{name}' has no valid size"
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            return f"entry for '{name}' has no valid sha256"
    return None


# --------------------------------------------------------------------------------------------------
# Payloads without pickle


def tensors_to_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """Serialise a flat ``{name: tensor}`` dict with safetensors (moved to CPU, made contiguous)."""
    import torch
    from safetensors.torch import save

    out: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"tensors_to_bytes needs a dict of str -> Tensor; entry {name!r} is {type(tensor).__name__}"
            )
        t = tensor.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr and ptr in storages:
            t = t.clone()  # safetensors refuses tensors that share memory (tied weights): store a copy
        storages.add(ptr)
        out[name] = t
    return save(out)


def bytes_to_tensors(data: bytes) -> dict[str, torch.Tensor]:
    """Inverse of :func:`tensors_to_bytes`; tensors come back on CPU."""
    from safetensors.torch import load

    try:
        return load(bytes(data))
    except Exception as exc:
        raise ValueError(f"not a valid safetensors payload ({len(data)} bytes): {exc}") from None


def json_bytes(obj: Any) -> bytes:
    """UTF-8 JSON of ``obj`` (NaN and infinities allowed, as Python's json reads them back)."""
    return json.dumps(obj, allow_nan=True, ensure_ascii=False).encode("utf-8")


def from_json_bytes(data: bytes) -> Any:
    """Inverse of :func:`json_bytes`."""
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a valid JSON payload ({len(data)} bytes): {exc}") from None


_MARKERS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__")


def state_to_payload(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested python structure holding tensors into ``(tensors, json_tree)``, without pickle.

    Handles dicts (any hashable JSON-able keys, e.g. the int parameter ids of an optimizer state),
    lists, tuples (kept as tuples, e.g. Adam's ``betas``), None/bool/int/float/str, torch tensors and
    numpy arrays. Each tensor is replaced in the tree by ``{"__tensor__": key}``, its key being its
    path (``state/0/exp_avg``). Store the parts with :func:`tensors_to_bytes` and :func:`json_bytes`;
    :func:`payload_to_state` is the inverse.
    """
    import numpy as np
    import torch

    tensors: dict[str, torch.Tensor] = {}

    def key_for(path: list[str]) -> str:
        key = "/".join(path) or "."
        n = 1
        while key in tensors:
            key = f"{'/'.join(path)}#{n}"
            n += 1
        return key

    def enc(obj: Any, path: list[str]) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, torch.Tensor):
            key = key_for(path)
            tensors[key] = obj
            return {"__tensor__": key}
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy object array at '{'/'.join(path)}' without pickle")
            key = key_for(path)
            tensors[key] = torch.from_numpy(np.ascontiguousarray(obj))
            return {"__ndarray__": key}
        if isinstance(obj, np.generic):
            return enc(obj.item(), path)
        if isinstance(obj, list):
            return [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"__tuple__": [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in obj):
                return {k: enc(v, [*path, k]) for k, v in obj.items()}
            # JSON object keys are strings: other keys (ints, tuples) go as [key, value] pairs.
            return {"__dict__": [[enc(k, [*path, "key"]), enc(v, [*path, str(k)])] for k, v in obj.items()]}
        raise TypeError(
            f"cannot store a {type(obj).__name__} at '{'/'.join(path) or '.'}' without pickle: use tensors, "
            "numpy arrays, numbers, strings, None, lists, tuples or dicts"
        )

    return tensors, enc(state, [])


def payload_to_state(tensors: Mapping[str, torch.Tensor], tree: Any) -> Any:
    """Inverse of :func:`state_to_payload`."""

    def tensor(key: str) -> torch.Tensor:
        try:
            return tensors[key]
        except KeyError:
            raise ValueError(f"payload refers to tensor '{key}', which is not among the stored tensors") from None

    def dec(obj: Any) -> Any:
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        if isinstance(obj, dict):
            if len(obj) == 1:
                ((k, v),) = obj.items()
                if k == "__tensor__":
                    return tensor(v)
                if k == "__ndarray__":
                    return tensor(v).numpy()
                if k == "__tuple__":
                    return tuple(dec(x) for x in v)
                if k == "__dict__":
                    return {dec(pk): dec(pv) for pk, pv in v}
            return {k: dec(v) for k, v in obj.items()}
        return obj

    return dec(tree)


def optimizer_state_to_payload(state_dict: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict]:
    """``optimizer.state_dict()`` -> ``(tensors, json_tree)`` (see :func:`state_to_payload`).

    Keeps everything a resume needs: per-parameter state including step counts (tensors in torch 2),
    and every param group's hyperparameters, so the next step after a resume is bit-identical.
    """
    if not isinstance(state_dict, Mapping) or "state" not in state_dict or "param_groups" not in state_dict:
        raise TypeError("optimizer_state_to_payload needs an optimizer.state_dict() (keys 'state' and 'param_groups')")
    return state_to_payload(dict(state_dict))


def optimizer_state_from_payload(tensors: Mapping[str, torch.Tensor], tree: Any) -> dict:
    """Inverse of :func:`optimizer_state_to_payload`; pass the result to ``optimizer.load_state_dict``."""
    state = payload_to_state(tensors, tree)
    if not isinstance(state, dict) or "state" not in state or "param_groups" not in state:
        raise ValueError("payload is not an optimizer state (no 'state' / 'param_groups')")
    return state


# --------------------------------------------------------------------------------------------------
# Backends: the few primitives a run needs, on a local file system or on S3.


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse_lease(data: bytes) -> dict | None:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


class _LocalBackend:
    """A directory on a local or shared file system; paths below are ``/``-joined relative to root."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def describe(self, rel: str = "") -> str:
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def list_run(self, run: str) -> dict[int, set[str]]:
        base = self.describe(run)
        out: dict[int, set[str]] = {}
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            return out
        for entry in entries:
            m = _VERSION_RE.fullmatch(entry.name)
            if m and entry.is_dir():
                try:
                    out[int(m.group(1))] = set(os.listdir(entry.path))
                except FileNotFoundError:  # removed by cleanup/retain while we listed
                    continue
        return out

    def read(self, rel: str) -> bytes:
        with open(self.describe(rel), "rb") as f:
            return f.read()

    def _write_tmp(self, final: str, data: bytes) -> str:
        tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def write(self, rel: str, data: bytes) -> None:
        """Atomic: a reader sees the old file or the whole new one (tmp + fsync + os.replace)."""
        final = self.describe(rel)
        tmp = self._write_tmp(final, data)
        try:
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def publish(self, rel: str, data: bytes) -> bool:
        """Create-only and atomic (tmp + fsync + link): False if the file already exists."""
        final = self.describe(rel)
        tmp = self._write_tmp(final, data)
        try:
            os.link(tmp, final)  # fails if final exists, and shows the content whole or not at all
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            # No hard links (FUSE mounts of object stores): create-only but not atomic; a reader that
            # catches it half-written sees invalid JSON, i.e. no valid commit yet.
            try:
                fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _fsync_dir(os.path.dirname(final))
        return True

    def prepare_version(self, run: str, version: int) -> bool:
        """Create the version folder; False if it exists (another writer took that number)."""
        run_dir = self.describe(run)
        if not os.path.isdir(run_dir):
            os.makedirs(run_dir, exist_ok=True)
            _fsync_dir(os.path.dirname(run_dir))
        try:
            os.mkdir(os.path.join(run_dir, _version_dir(version)))
        except FileExistsError:
            return False
        _fsync_dir(run_dir)
        return True

    def sync_dir(self, rel: str) -> None:
        _fsync_dir(self.describe(rel))

    def delete_version(self, run: str, version: int) -> None:
        """Manifest first, so a crash half-way leaves an invisible folder, never a broken visible one."""
        vdir = self.describe(f"{run}/{_version_dir(version)}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(vdir, MANIFEST))
            _fsync_dir(vdir)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(vdir)
        _fsync_dir(self.describe(run))

    def lease_ops(self, run: str) -> _LocalLeaseOps:
        return _LocalLeaseOps(self.describe(f"{run}/{LOCK}"))


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


class _S3Backend:
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
            m = _VERSION_RE.fullmatch(parts[0])
            if not m:
                continue
            names = out.setdefault(int(m.group(1)), set())
            if len(parts) == 2 and info.type == pafs.FileType.File:
                names.add(parts[1])
        return out

    def read(self, rel: str) -> bytes:
        with _s3_errors(f"reading {self.describe(rel)}"), self.fs.open_input_stream(self._path(rel)) as f:
            return f.read()

    def write(self, rel: str, data: bytes) -> None:
        """One object, atomic per upload: readers see all of it or none."""
        with _s3_errors(f"writing {self.describe(rel)}"), self.fs.open_output_stream(self._path(rel)) as f:
            f.write(data)

    def put(self, rel: str, data: bytes, **conditions: str) -> Any:
        with _s3_errors(f"writing {self.describe(rel)}"):
            return self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, **conditions)

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

    def prepare_version(self, run: str, version: int) -> bool:
        return True  # no folders on S3; the run lease and the create-only manifest keep writers apart

    def sync_dir(self, rel: str) -> None:
        pass

    def delete_version(self, run: str, version: int) -> None:
        """Manifest first, so a crash half-way leaves an invisible folder, never a broken visible one."""
        vdir = f"{run}/{_version_dir(version)}"
        with _s3_errors(f"deleting {self.describe(vdir)}"):
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self._path(f"{vdir}/{MANIFEST}"))
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_dir(self._path(vdir))

    def lease_ops(self, run: str) -> _S3LeaseOps:
        return _S3LeaseOps(self, f"{run}/{LOCK}")


def _open_backend(uri: str) -> _LocalBackend | _S3Backend:
    if not uri:
        raise ValueError("store URI is empty: give a path, file:///abs/path or s3://bucket/prefix")
    scheme = urlsplit(uri).scheme.lower()
    if scheme == "s3":
        return _S3Backend(uri)
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"store URI {uri!r}: file:// URIs must be local (file:///abs/path)")
        return _LocalBackend(unquote(parts.path))
    if "://" in uri:
        raise ValueError(f"store URI {uri!r}: unsupported scheme '{scheme}'; use a path, file:// or s3://")
    return _LocalBackend(uri)


# --------------------------------------------------------------------------------------------------
# Lease primitives


@dataclass
class _LocalHandle:
    fd: int
    dev: int
    ino: int


class _LocalLeaseOps:
    """LOCK.json on a file system. The holder keeps it open and rewrites it in place through its fd,
    so a holder that was taken over (its file renamed away) can never clobber the new lease."""

    def __init__(self, path: str):
        self.path = path
        self.where = path
        self.settle = 0.0  # O_EXCL and rename are atomic: no need to look again

    def create(self, body: bytes) -> _LocalHandle | None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        try:
            os.pwrite(fd, body, 0)
            os.fsync(fd)
            _fsync_dir(os.path.dirname(self.path))
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        return _LocalHandle(fd, st.st_dev, st.st_ino)

    def _read_file(self, path: str) -> tuple[dict | None, tuple[int, int] | None, float | None]:
        for attempt in range(3):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read()
            except FileNotFoundError:
                return None, None, None
            record = _parse_lease(data)
            if record is not None or attempt == 2:
                return record, (st.st_dev, st.st_ino), st.st_mtime
            time.sleep(0.02)  # the holder may sit between its O_EXCL create and its first write
        raise AssertionError("unreachable")

    def read(self) -> tuple[dict | None, Any, float | None]:
        """(record or None if unreadable, tag or None if absent, mtime)."""
        return self._read_file(self.path)

    def adopt(self, tag: Any) -> _LocalHandle | None:
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != tag:
            os.close(fd)
            return None
        return _LocalHandle(fd, st.st_dev, st.st_ino)

    @contextlib.contextmanager
    def _takeover_lock(self) -> Iterator[None]:
        """Serialise takeovers: a taker that renames the lease away to inspect it leaves the path empty
        for a moment, and another taker's create must not slip into that gap. The kernel drops an
        flock when its holder dies, so a crashed taker blocks nobody."""
        fd = os.open(f"{self.path}.takeover", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:  # a file system without flock: rename + O_EXCL alone
                log.debug("no flock on %s (%s); taking over without it", self.path, exc)
            yield
        finally:
            os.close(fd)

    def takeover(self, tag: Any, body: bytes, stale: Callable[[dict | None, float], str | None]) -> _LocalHandle | None:
        """Re-judge the lease under the takeover lock, rename it to a unique name (only one renamer can
        move it), check the moved file is the one judged stale, then create-only. None if someone else
        won or the lease turned out live."""
        with self._takeover_lock():
            record, now_tag, mtime = self._read_file(self.path)
            if now_tag is None:
                return self.create(body)  # gone meanwhile (released, or taken over and released)
            if mtime is not None and stale(record, mtime) is None:
                return None  # renewed or re-acquired since we looked
            moved = f"{self.path}.stale-{uuid.uuid4().hex}"
            try:
                os.rename(self.path, moved)
            except FileNotFoundError:
                return self.create(body)
            try:
                st = os.stat(moved)
                if (st.st_dev, st.st_ino) != now_tag:
                    # Released and re-acquired between our read and the rename: put it back, create-only.
                    with contextlib.suppress(FileExistsError):
                        os.link(moved, self.path)
                    return None
                return self.create(body)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(moved)

    def verify(self, h: _LocalHandle, token: str = "") -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (h.dev, h.ino)

    def refresh(self, h: _LocalHandle, body: bytes, token: str) -> bool:
        if not self.verify(h):
            return False
        os.pwrite(h.fd, body, 0)
        os.fsync(h.fd)
        return True

    def release(self, h: _LocalHandle, token: str = "") -> None:
        try:
            if not self.verify(h):
                return
            moved = f"{self.path}.released-{uuid.uuid4().hex}"
            try:
                os.rename(self.path, moved)
            except FileNotFoundError:
                return
            st = os.stat(moved)
            if (st.st_dev, st.st_ino) != (h.dev, h.ino):  # taken over in between: put theirs back
                with contextlib.suppress(FileExistsError):
                    os.link(moved, self.path)
            os.unlink(moved)
            _fsync_dir(os.path.dirname(self.path))
        finally:
            with contextlib.suppress(OSError):
                os.close(h.fd)

    def close(self, h: _LocalHandle) -> None:
        with contextlib.suppress(OSError):
            os.close(h.fd)


@dataclass
class _S3Handle:
    etags: list[str] = field(default_factory=list)  # every ETag this lease wrote, newest last


class _S3LeaseOps:
    """LOCK.json on S3: create with If-None-Match: *, take over and refresh with If-Match: <etag>.

    On stores that answer 501 to a PUT with If-Match (OpenStack Swift's s3api), a takeover or refresh
    is a DELETE with If-Match (which they honour) followed by a create-only PUT; a newcomer that slips
    in between wins, and this side sees RunLocked/LeaseLost. Swift also checks its conditions when a
    request starts, so two simultaneous creates can both succeed: acquire() therefore reads its lease
    back after a moment, and every commit checks the lease's ETag before its manifest, so the loser
    of such a race stops before it publishes anything.
    """

    def __init__(self, backend: _S3Backend, rel: str):
        self.b = backend
        self.rel = rel
        self.where = backend.describe(rel)
        self.settle = 0.1  # seconds before acquire() reads its lease back (see RunStore.acquire)

    def _call(self, fn: Callable[[], T], what: str) -> T:
        with _s3_errors(f"{what} {self.where}"):
            return fn()

    def create(self, body: bytes) -> _S3Handle | None:
        from botocore.exceptions import ClientError

        try:
            resp = self.b.put(self.rel, body, IfNoneMatch="*")
        except ClientError as exc:
            if _client_status(exc)[0] in (409, 412):
                return None
            raise
        return _S3Handle([resp["ETag"]])

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
        return _parse_lease(data), resp["ETag"], resp["LastModified"].timestamp()

    def adopt(self, tag: Any) -> _S3Handle | None:
        return _S3Handle([tag])

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

    def takeover(self, tag: Any, body: bytes, stale: Callable[[dict | None, float], str | None]) -> _S3Handle | None:
        etag = self._replace(tag, body)
        return _S3Handle([etag]) if etag else None

    def verify(self, h: _S3Handle, token: str) -> bool:
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

    def refresh(self, h: _S3Handle, body: bytes, token: str) -> bool:
        etag = self._replace(h.etags[-1], body)
        if etag is None:
            return self.verify(h, token)  # still ours if only the answer to our last write was lost
        h.etags = [*h.etags[-7:], etag]
        return True

    def release(self, h: _S3Handle, token: str) -> None:
        # Look first: a store that ignored If-Match on DELETE would otherwise delete a successor's lease.
        if not self.verify(h, token):
            return
        try:
            self._conditional_delete(h.etags[-1])
        except _NoConditionalDelete:
            self._call(lambda: self.b.client.delete_object(Bucket=self.b.bucket, Key=self.b.key(self.rel)), "deleting")

    def close(self, h: _S3Handle) -> None:
        pass


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: it holds nothing
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _stale_reason(record: dict | None, mtime: float, lease_timeout: float, now: float | None = None) -> str | None:
    """Why a lease may be taken over, or None while it is live."""
    now = time.time() if now is None else now
    if record is None:
        age = now - mtime
        return f"unreadable lease file, unchanged for {age:.1f} s" if age > lease_timeout else None
    pid, host, heartbeat = record.get("pid"), record.get("host"), record.get("heartbeat")
    if host == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
        return f"its process (pid {pid} on this host, {host}) is gone"
    if not isinstance(heartbeat, (int, float)):
        heartbeat = mtime
    age = now - heartbeat
    if age > lease_timeout:
        return f"its last heartbeat was {age:.1f} s ago (lease_timeout {lease_timeout} s)"
    return None


def _describe_holder(record: dict | None) -> str:
    if record is None:
        return "an unreadable lease"
    age = time.time() - record["heartbeat"] if isinstance(record.get("heartbeat"), (int, float)) else float("nan")
    return (
        f"owner {record.get('owner')!r} (host {record.get('host')}, pid {record.get('pid')}, "
        f"last heartbeat {age:.1f} s ago)"
    )


# --------------------------------------------------------------------------------------------------
# The public API


@dataclass(frozen=True)
class Checkpoint:
    """One loaded checkpoint: every file's bytes (checked against the manifest) and the meta."""

    run: str
    version: int
    files: dict[str, bytes]
    meta: dict
    wall_time: float


class CheckpointStore:
    """The store at ``uri`` (a path, ``file:///abs/path`` or ``s3://bucket/prefix?...``).

    Opening does no I/O. ``retry`` governs every store operation of its runs.
    """

    def __init__(self, uri: str | os.PathLike, *, retry: RetryPolicy | None = None):
        self.retry = retry if retry is not None else RetryPolicy()
        self._backend = _open_backend(os.fspath(uri))
        self.uri = self._backend.describe()

    def run(self, name: str) -> RunStore:
        """The run called ``name`` (validated: one path segment, see :func:`check_name`)."""
        return RunStore(self, check_name("run", name))

    def __repr__(self) -> str:
        return f"CheckpointStore({self.uri!r})"


class RunStore:
    """The checkpoints of one run: commit, list, load, clean up, retain, and the run lease."""

    def __init__(self, store: CheckpointStore, name: str):
        self.store = store
        self.name = name
        self._b = store._backend
        self._lease: Lease | None = None
        self._writing: set[int] = set()  # versions this object is writing now (AsyncCommitter included)
        self._writing_lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self._b.describe(self.name)

    def __repr__(self) -> str:
        return f"RunStore({self.uri!r})"

    def _retrier(self, policy: RetryPolicy | None = None) -> _Retrier:
        return _Retrier(policy or self.store.retry)

    def _where(self, version: int, file: str | None = None) -> str:
        rel = f"{self.name}/{_version_dir(version)}"
        return self._b.describe(f"{rel}/{file}" if file else rel)

    def _listing(self, r: _Retrier) -> dict[int, set[str]]:
        return r(lambda: self._b.list_run(self.name), f"listing {self.uri}")

    # -- reading ---------------------------------------------------------------------------------

    def versions(self) -> list[int]:
        """Committed versions (a version folder holding MANIFEST.json), ascending."""
        return sorted(v for v, names in self._listing(self._retrier()).items() if MANIFEST in names)

    def latest(self) -> int | None:
        """The newest committed version, found by listing; None if there is none."""
        versions = self.versions()
        return versions[-1] if versions else None

    def _read_manifest(self, version: int, r: _Retrier) -> dict:
        rel = f"{self.name}/{_version_dir(version)}/{MANIFEST}"
        try:
            data = r(lambda: self._b.read(rel), f"reading {self._b.describe(rel)}")
        except FileNotFoundError:
            raise CheckpointNotFound(
                f"run '{self.name}' has no committed version {version}: {self._b.describe(rel)} does not exist"
            ) from None
        try:
            manifest = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorruptCheckpoint(
                self.name, version, MANIFEST, f"is not valid JSON ({exc})", self._where(version)
            ) from None
        problem = _validate_manifest(manifest, self.name, version)
        if problem:
            raise CorruptCheckpoint(self.name, version, MANIFEST, problem, self._where(version))
        return manifest

    def load(self, version: int, *, retry: RetryPolicy | None = None) -> Checkpoint:
        """Load a committed version, checking every file's size and sha256 against the manifest.

        Raises CheckpointNotFound (no such committed version) or CorruptCheckpoint (naming the file).
        """
        version = _check_version(version)
        r = self._retrier(retry)
        manifest = self._read_manifest(version, r)
        files: dict[str, bytes] = {}
        for name, entry in manifest["files"].items():
            rel = f"{self.name}/{_version_dir(version)}/{name}"
            try:
                data = r(lambda rel=rel: self._b.read(rel), f"reading {self._b.describe(rel)}")
            except FileNotFoundError:
                raise CorruptCheckpoint(
                    self.name, version, name, "is listed in the manifest but missing", self._where(version)
                ) from None
            if len(data) != entry["size"]:
                raise CorruptCheckpoint(
                    self.name,
                    version,
                    name,
                    f"has {len(data)} bytes, the manifest says {entry['size']} (truncated?)",
                    self._where(version),
                )
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry["sha256"]:
                raise CorruptCheckpoint(
                    self.name,
                    version,
                    name,
                    f"has sha256 {digest}, the manifest says {entry['sha256']} (changed bytes)",
                    self._where(version),
                )
            files[name] = data
        return Checkpoint(self.name, version, files, manifest["meta"], float(manifest["wall_time"]))

    def load_latest(self) -> Checkpoint | None:
        """The newest committed version that loads intact; corrupt ones are skipped with a warning."""
        for version in reversed(self.versions()):
            try:
                return self.load(version)
            except (CorruptCheckpoint, CheckpointNotFound) as exc:
                log.warning(
                    "run '%s': skipping checkpoint version %d, falling back to an older one: %s",
                    self.name,
                    version,
                    exc,
                )
        return None

    # -- writing ---------------------------------------------------------------------------------

    def commit(self, files: Mapping[str, bytes], meta: Mapping[str, Any], *, retry: RetryPolicy | None = None) -> int:
        """Write a new version: each file (atomically), then MANIFEST.json last. Returns the version.

        The version is the next integer after the highest existing folder, committed or not. If this
        RunStore holds the run lease, the lease is checked before writing and again before the
        manifest: a writer that was taken over raises LeaseLost and publishes nothing.
        """
        files, meta = _check_payload(self.name, files, meta)
        return self._commit(files, meta, self._retrier(retry))

    def _commit(self, files: dict[str, bytes], meta: dict, r: _Retrier) -> int:
        self._check_lease(r)
        version = max(self._listing(r), default=0) + 1
        while True:
            # Reserve the number before its folder exists, so cleanup() never takes our folder for
            # debris, and two commits through this object (AsyncCommitter + direct) never share one.
            with self._writing_lock:
                while version in self._writing:
                    version += 1
                self._writing.add(version)
            try:
                created = r(lambda v=version: self._b.prepare_version(self.name, v), f"creating {self._where(version)}")
            except BaseException:
                with self._writing_lock:
                    self._writing.discard(version)
                raise
            if created:
                break
            with self._writing_lock:
                self._writing.discard(version)
            version += 1  # another writer took that number (local file systems only)
        try:
            entries = {}
            for name, data in files.items():
                rel = f"{self.name}/{_version_dir(version)}/{name}"
                r(lambda rel=rel, data=data: self._b.write(rel, data), f"writing {self._b.describe(rel)}")
                entries[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            vrel = f"{self.name}/{_version_dir(version)}"
            r(lambda: self._b.sync_dir(vrel), f"syncing {self._where(version)}")
            manifest = {
                "format_version": FORMAT_VERSION,
                "run": self.name,
                "version": version,
                "wall_time": time.time(),
                "meta": meta,
                "files": entries,
            }
            body = (json.dumps(manifest, indent=2, allow_nan=True) + "\n").encode("utf-8")
            self._check_lease(r)  # the point of no return: a writer that lost the run publishes nothing
            mrel = f"{vrel}/{MANIFEST}"
            if not r(lambda: self._b.publish(mrel, body), f"writing {self._b.describe(mrel)}"):
                # Our own earlier attempt may have landed with its answer lost; anything else is a second writer.
                if r(lambda: self._b.read(mrel), f"reading {self._b.describe(mrel)}") != body:
                    raise StoreError(
                        f"run '{self.name}' version {version}: {self._b.describe(mrel)} was written by another "
                        "writer at the same time; writers of one run must hold its lease (acquire())"
                    )
        finally:
            with self._writing_lock:
                self._writing.discard(version)
        log.info(
            "run '%s': committed version %d (%d files, %d bytes)",
            self.name,
            version,
            len(files),
            sum(map(len, files.values())),
        )
        return version

    # -- housekeeping ----------------------------------------------------------------------------

    def _require_lease(self, what: str, r: _Retrier) -> None:
        if self._lease is None:
            raise RuntimeError(
                f"{what} of run '{self.name}' deletes folders: hold the run lease first (acquire()), so that "
                "no live writer's checkpoint is removed"
            )
        self._check_lease(r)

    def cleanup(self) -> list[int]:
        """Remove version folders without a valid manifest (half-written); returns their versions.

        Needs the run lease (so no other live writer exists) and skips the versions this RunStore is
        writing itself right now.
        """
        r = self._retrier()
        self._require_lease("cleanup", r)
        removed = []
        for version in sorted(self._listing(r)):
            with self._writing_lock:
                if version in self._writing:
                    continue
            # Read the manifest afresh, after the check above: the listing may predate a commit that
            # has finished since (a commit publishes its manifest before it leaves _writing).
            try:
                self._read_manifest(version, r)
                continue
            except CheckpointNotFound:
                reason = "no MANIFEST.json (a write that never finished)"
            except CorruptCheckpoint as exc:
                reason = str(exc)
            log.warning("run '%s': removing %s: %s", self.name, self._where(version), reason)
            r(lambda v=version: self._b.delete_version(self.name, v), f"deleting {self._where(version)}")
            removed.append(version)
        return removed

    def retain(self, keep_last: int, keep_best: int = 1, metric: str | None = None, mode: str = "min") -> list[int]:
        """Keep the newest ``keep_last`` committed versions plus the ``keep_best`` best by
        ``meta["metrics"][metric]`` (lowest for mode "min", highest for "max"; ties go to the newer);
        delete the other committed versions. Returns the deleted versions. Needs the run lease."""
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(f"retain: keep_last must be an int >= 1 (resume needs the latest), got {keep_last!r}")
        if isinstance(keep_best, bool) or not isinstance(keep_best, int) or keep_best < 0:
            raise ValueError(f"retain: keep_best must be an int >= 0, got {keep_best!r}")
        if mode not in ("min", "max"):
            raise ValueError(f"retain: mode must be 'min' or 'max', got {mode!r}")
        r = self._retrier()
        self._require_lease("retain", r)
        versions = self.versions()
        keep = set(versions[-keep_last:])
        if metric is not None and keep_best > 0:
            scored = []
            for version in versions:
                try:
                    value = (self._read_manifest(version, r)["meta"].get("metrics") or {}).get(metric)
                except (CorruptCheckpoint, CheckpointNotFound):
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    scored.append((value if mode == "min" else -value, -version))
            keep.update(-neg_version for _, neg_version in sorted(scored)[:keep_best])
        deleted = [v for v in versions if v not in keep]
        for version in deleted:
            r(lambda v=version: self._b.delete_version(self.name, v), f"deleting {self._where(version)}")
        if deleted:
            log.info("run '%s': retention deleted versions %s, kept %s", self.name, deleted, sorted(keep))
        return deleted

    # -- the run lease ---------------------------------------------------------------------------

    def acquire(self, owner: str, *, lease_timeout: float = 60.0) -> Lease:
        """Take the run's lease (``<run>/LOCK.json``), or raise RunLocked naming the live holder.

        A stale lease (its process gone on this host, or no heartbeat for ``lease_timeout`` s) is
        taken over atomically; the old holder then gets LeaseLost on its next heartbeat or commit.
        Call :meth:`Lease.heartbeat` more often than ``lease_timeout``.
        """
        if not isinstance(owner, str) or not owner or len(owner) > _MAX_OWNER_CHARS:
            raise ValueError(f"acquire: owner must be a non-empty str of at most {_MAX_OWNER_CHARS} characters")
        if not (isinstance(lease_timeout, (int, float)) and lease_timeout > 0):
            raise ValueError(f"acquire: lease_timeout must be > 0 seconds, got {lease_timeout!r}")
        r = self._retrier()
        ops = self._b.lease_ops(self.name)
        lease = Lease(self, owner, float(lease_timeout), ops)

        def stale(record: dict | None, mtime: float) -> str | None:
            return _stale_reason(record, mtime, lease.lease_timeout)

        for _ in range(10):
            handle = r(lambda: ops.create(lease._body()), f"creating {ops.where}")
            if handle is not None:
                break
            record, tag, mtime = r(ops.read, f"reading {ops.where}")
            if tag is None:
                continue  # released in between: try to create it again
            if record is not None and record.get("token") == lease.token:
                handle = ops.adopt(tag)  # our own create landed, but its answer was lost
                if handle is not None:
                    break
                continue
            reason = stale(record, mtime)
            if reason is None:
                raise RunLocked(
                    f"run '{self.name}' is locked ({ops.where}): held by {_describe_holder(record)}. Another "
                    f"writer is training this run; use another run name, or wait until it stops or its lease is "
                    f"older than lease_timeout={lease.lease_timeout} s",
                    record,
                )
            handle = r(lambda tag=tag: ops.takeover(tag, lease._body(), stale), f"taking over {ops.where}")
            if handle is not None:
                log.warning("run '%s': took over the lease of %s: %s", self.name, _describe_holder(record), reason)
                break
        else:
            raise RunLocked(f"run '{self.name}' ({ops.where}): the lease kept changing hands; try again")
        lease._handle = handle
        if ops.settle:
            # Some S3-compatible stores (Swift) check If-None-Match / If-Match when a request starts,
            # so two simultaneous acquirers can both be told yes; the object shows who really won.
            time.sleep(ops.settle)
            if not r(lambda: ops.verify(handle, lease.token), f"checking {ops.where}"):
                record = r(ops.read, f"reading {ops.where}")[0]
                raise RunLocked(
                    f"run '{self.name}' is locked ({ops.where}): {_describe_holder(record)} acquired it at the "
                    "same moment and won",
                    record,
                )
        self._lease = lease
        return lease

    def _check_lease(self, r: _Retrier) -> None:
        if self._lease is not None:
            self._lease._check(r)


class Lease:
    """A held run lease. Use as a context manager, or call :meth:`release`.

    ``heartbeat()`` refreshes the heartbeat time in LOCK.json; call it every training iteration
    (the lease goes stale after ``lease_timeout`` s without one). It raises LeaseLost if another
    process took the run over; then stop training and do not commit.
    """

    def __init__(self, run_store: RunStore, owner: str, lease_timeout: float, ops: Any):
        self.run_store = run_store
        self.run = run_store.name
        self.owner = owner
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token = uuid.uuid4().hex  # tells this lease from another by the same owner/pid
        self.lease_timeout = lease_timeout
        self.acquired = time.time()
        self._ops = ops
        self._handle: Any = None
        self._lost: str | None = None
        self._released = False
        self._lock = threading.Lock()  # one refresh at a time; a check waits for one in flight
        # After a heartbeat that could not reach the store, the next ones within this many seconds
        # return False at once: an outage costs training one short stall now and then, not one per call.
        self.heartbeat_backoff = 5.0
        self._failed_at: float | None = None  # monotonic time of the last heartbeat that could not reach the store

    def _body(self) -> bytes:
        record = {
            "format_version": LEASE_FORMAT_VERSION,
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "heartbeat": time.time(),
            "acquired": self.acquired,
            "lease_timeout": self.lease_timeout,
            "token": self.token,
        }
        body = json.dumps(record).encode("utf-8")
        # Fixed size: a local heartbeat rewrites the file in place without truncating it.
        return body + b" " * (_LEASE_BYTES - len(body) - 1) + b"\n"

    @property
    def held(self) -> bool:
        """False once released or known to be lost."""
        return not self._released and self._lost is None

    def _mark_lost(self, why: str) -> None:
        """Record the loss and drop the handle; call with self._lock held (the handle is used under it)."""
        if self._lost is not None:
            return
        try:
            holder = _describe_holder(self._ops.read()[0])
        except Exception:
            holder = "unknown (store unreachable)"
        self._lost = f"{why}; the lease file now shows {holder}"
        self._ops.close(self._handle)

    def _error(self) -> LeaseLost:
        if self._released:
            return LeaseLost(f"lease of run '{self.run}' held by owner {self.owner!r} was released")
        return LeaseLost(
            f"lease of run '{self.run}' ({self._ops.where}) held by owner {self.owner!r} was lost: {self._lost}. "
            "Another process owns this run now: stop writing it"
        )

    def _check(self, r: _Retrier) -> None:
        if self._released or self._lost is not None:
            raise self._error()
        if r(lambda: self._ops.verify(self._handle, self.token), f"checking {self._ops.where}"):
            return
        with self._lock:  # a heartbeat in flight may have just written a new version of our lease
            if self._released or self._lost is not None:
                raise self._error()
            if r(lambda: self._ops.verify(self._handle, self.token), f"checking {self._ops.where}"):
                return
            self._mark_lost("LOCK.json is no longer ours (taken over or deleted)")
        raise self._error()

    def check(self) -> None:
        """Raise LeaseLost unless this lease still holds the run (one cheap read of the store)."""
        self._check(self.run_store._retrier())

    def heartbeat(self, timeout: float = 2.0) -> bool:
        """Refresh the lease. True if refreshed; False (with a warning) if the store could not be
        reached within about ``timeout`` s — training goes on, and heartbeats in the next
        ``heartbeat_backoff`` s return False without trying. Raises LeaseLost if another process
        took the run over."""
        if self._failed_at is not None and time.monotonic() < self._failed_at + self.heartbeat_backoff and self.held:
            return False
        base = self.run_store.store.retry
        policy = RetryPolicy(
            max_attempts=None, base_delay=base.base_delay, max_delay=base.max_delay, total_timeout=timeout
        )
        with self._lock:
            if self._released or self._lost is not None:
                raise self._error()
            try:
                ok = retry(
                    lambda: self._ops.refresh(self._handle, self._body(), self.token),
                    policy,
                    what=f"heartbeat of {self._ops.where}",
                )
            except StoreUnavailable as exc:
                self._failed_at = time.monotonic()
                log.warning(
                    "run '%s': could not refresh the lease (store unreachable), will try again in %.0f s: %s",
                    self.run,
                    self.heartbeat_backoff,
                    exc,
                )
                return False
            self._failed_at = None
            if not ok:
                self._mark_lost("LOCK.json is no longer ours (taken over or deleted)")
        if not ok:
            raise self._error()
        return True

    def release(self) -> None:
        """Give the run up (deletes LOCK.json if it is still ours). Idempotent."""
        with self._lock:
            if self._released:
                return
            self._released = True
            if self.run_store._lease is self:
                self.run_store._lease = None
            if self._lost is not None:
                return
            try:
                retry(
                    lambda: self._ops.release(self._handle, self.token),
                    self.run_store.store.retry,
                    what=f"releasing {self._ops.where}",
                )
            except StoreUnavailable as exc:
                log.warning(
                    "run '%s': could not delete the lease; it goes stale after %s s: %s",
                    self.run,
                    self.lease_timeout,
                    exc,
                )

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else ("released" if self._released else "lost")
        return f"Lease(run={self.run!r}, owner={self.owner!r}, {state})"


@dataclass
class _Job:
    files: dict[str, bytes]
    meta: dict
    submitted: float


class AsyncCommitter:
    """Commits checkpoints of one run on a background thread, so training never waits on the store.

    ``submit(files, meta)`` returns at once. The thread commits with ``retry`` (by default without
    limit: a checkpoint waits out any outage). Only the newest checkpoints matter: when more than
    ``max_pending`` wait un-started, the oldest waiting one is dropped with a warning. A commit
    either fully appears (manifest last) or not at all. ``on_commit(version, meta)`` runs on the
    thread after each commit. After a LeaseLost the committer stops and ``submit`` raises it.

    Attributes: ``last_committed`` (version or None), ``errors`` (exceptions of failed commits),
    ``dropped`` (count), ``retries`` (transient failures retried so far). Call ``close()`` (or use
    ``with``) before exiting: it flushes, then stops the thread.
    """

    def __init__(
        self,
        run_store: RunStore,
        max_pending: int = 2,
        *,
        retry: RetryPolicy | None = None,
        on_commit: Callable[[int, dict], None] | None = None,
    ):
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"AsyncCommitter: max_pending must be an int >= 1, got {max_pending!r}")
        self.run_store = run_store
        self.max_pending = max_pending
        self.retry = retry or RetryPolicy(max_attempts=None, base_delay=0.5, max_delay=30.0, total_timeout=None)
        self.on_commit = on_commit
        self.last_committed: int | None = None
        self.errors: list[BaseException] = []
        self.dropped = 0
        self.retries = 0
        self._pending: deque[_Job] = deque()
        self._busy = False
        self._fatal: LeaseLost | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name=f"checkpoint-committer-{run_store.name}", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Checkpoints submitted and not yet committed or dropped (the one in flight included)."""
        with self._cond:
            return len(self._pending) + int(self._busy)

    def submit(self, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> None:
        """Queue a checkpoint and return at once (inputs are validated and copied here)."""
        if self._fatal is not None:
            raise LeaseLost(
                f"checkpoint committer of run '{self.run_store.name}' stopped: {self._fatal}"
            ) from self._fatal
        if self._stop.is_set():
            raise RuntimeError(f"checkpoint committer of run '{self.run_store.name}' is closed")
        job = _Job(*_check_payload(self.run_store.name, files, meta), submitted=time.time())
        with self._cond:
            self._pending.append(job)
            while len(self._pending) > self.max_pending:
                old = self._pending.popleft()
                self.dropped += 1
                log.warning(
                    "run '%s': dropping an un-started checkpoint (iteration %s, submitted %.1f s ago): %d newer ones "
                    "are waiting and only the newest matter",
                    self.run_store.name,
                    old.meta.get("iteration"),
                    time.time() - old.submitted,
                    len(self._pending),
                )
            self._cond.notify_all()

    def _count_retry(self, attempt: int, exc: BaseException) -> None:
        self.retries += 1

    def _work(self) -> None:
        retrier = _Retrier(self.retry, self._stop, self._count_retry)
        while True:
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                job = self._pending.popleft()
                self._busy = True
            try:
                version = self.run_store._commit(job.files, job.meta, retrier)
            except _Stopped as exc:
                log.warning(
                    "run '%s': committer closed before a checkpoint was committed: %s", self.run_store.name, exc
                )
            except LeaseLost as exc:
                self.errors.append(exc)
                self._fatal = exc
                log.error("run '%s': checkpoint not committed, lease lost: %s", self.run_store.name, exc)
                with self._cond:
                    self.dropped += len(self._pending)
                    self._pending.clear()
            except Exception as exc:
                self.errors.append(exc)
                log.error("run '%s': checkpoint not committed: %s", self.run_store.name, exc, exc_info=True)
            else:
                self.last_committed = version
                if self.on_commit is not None:
                    try:
                        self.on_commit(version, job.meta)
                    except Exception:
                        log.exception(
                            "run '%s': on_commit callback failed for version %d", self.run_store.name, version
                        )
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted checkpoint is committed, dropped or failed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush (up to ``timeout`` s), then stop the thread, abandoning what is left. True if all done."""
        done = self.flush(timeout)
        if not done:
            log.warning(
                "run '%s': closing the committer with %d checkpoint(s) not committed", self.run_store.name, self.pending
            )
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=30.0)
        return done

    def __enter__(self) -> AsyncCommitter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = [
    "FORMAT_VERSION",
    "LOCK",
    "MANIFEST",
    "AsyncCommitter",
    "Checkpoint",
    "CheckpointNotFound",
    "CheckpointStore",
    "CorruptCheckpoint",
    "Lease",
    "LeaseLost",
    "RetryPolicy",
    "RunLocked",
    "RunStore",
    "StoreError",
    "StoreUnavailable",
    "bytes_to_tensors",
    "check_name",
    "from_json_bytes",
    "is_transient",
    "json_bytes",
    "optimizer_state_from_payload",
    "optimizer_state_to_payload",
    "payload_to_state",
    "retry",
    "state_to_payload",
    "tensors_to_bytes",
]
