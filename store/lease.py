"""The run lease: one live writer per run, ``<run>/LOCK.json``.

The lease file is created create-only (local: ``O_CREAT|O_EXCL``; S3: PUT with ``If-None-Match: *``)
and taken over atomically once stale (holder process gone, or no heartbeat for ``lease_timeout``);
the back ends' lease primitives (``store.local.LocalLeaseOps``, ``store.s3.S3LeaseOps``) do the
atomic parts, this module decides when a lease is stale and keeps the holder's side of it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from store.errors import LeaseLost, RunLocked, StoreUnavailable
from store.retries import Retrier, RetryPolicy, retry

log = logging.getLogger(__name__)

LEASE_FORMAT_VERSION = 1
# The local lease file is rewritten in place at a fixed size, so a heartbeat is one pwrite of one page.
LEASE_BYTES = 4096
MAX_OWNER_CHARS = 200


def parse_lease_record(data: bytes) -> dict | None:
    """The lease record in LOCK.json's bytes, or None if they are not a JSON object."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def pid_alive(pid: int) -> bool:
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


def stale_reason(record: dict | None, mtime: float, lease_timeout: float, now: float | None = None) -> str | None:
    """Why a lease may be taken over, or None while it is live."""
    now = time.time() if now is None else now
    if record is None:
        age = now - mtime
        return f"unreadable lease file, unchanged for {age:.1f} s" if age > lease_timeout else None
    pid, host, heartbeat = record.get("pid"), record.get("host"), record.get("heartbeat")
    if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
        return f"its process (pid {pid} on this host, {host}) is gone"
    if not isinstance(heartbeat, (int, float)):
        heartbeat = mtime
    age = now - heartbeat
    if age > lease_timeout:
        return f"its last heartbeat was {age:.1f} s ago (lease_timeout {lease_timeout} s)"
    return None


def describe_holder(record: dict | None) -> str:
    if record is None:
        return "an unreadable lease"
    age = time.time() - record["heartbeat"] if isinstance(record.get("heartbeat"), (int, float)) else float("nan")
    return (
        f"owner {record.get('owner')!r} (host {record.get('host')}, pid {record.get('pid')}, "
        f"last heartbeat {age:.1f} s ago)"
    )


class LeasedRun(Protocol):
    """What a lease needs of its :class:`store.RunStore` (which imports this module, not the reverse)."""

    name: str
    store: Any  # the CheckpointStore: its ``retry`` policy
    _lease: Lease | None  # the lease the run store holds; cleared when that lease is released


class LeaseOps(Protocol):
    """A back end's lease primitives on one run's LOCK.json; a handle is what the holder keeps.

    ``where`` names the lease file in messages; ``settle`` is how long :func:`acquire` waits before
    reading its lease back (0 where create-only and takeover are atomic).
    """

    where: str
    settle: float

    def create(self, body: bytes) -> Any:
        """Create-only: a handle, or None if the file exists."""

    def read(self) -> tuple[dict | None, Any, float | None]:
        """(record or None if unreadable, tag or None if absent, mtime)."""

    def adopt(self, tag: Any) -> Any:
        """A handle on the lease with this tag (our own create whose answer was lost), or None."""

    def takeover(self, tag: Any, body: bytes, stale: Callable[[dict | None, float], str | None]) -> Any:
        """Replace the stale lease with this tag by ``body``: a handle, or None if someone else won."""

    def verify(self, h: Any, token: str) -> bool:
        """True while the lease file is still the one this handle wrote."""

    def refresh(self, h: Any, body: bytes, token: str) -> bool:
        """Rewrite the lease (a heartbeat); False if it is no longer ours."""

    def release(self, h: Any, token: str) -> None:
        """Delete the lease if it is still ours."""

    def close(self, h: Any) -> None:
        """Drop the handle without touching the file."""


def acquire(run_store: LeasedRun, ops: LeaseOps, owner: str, lease_timeout: float, r: Retrier) -> Lease:
    """Take the lease of ``run_store``'s run through its back end's primitives ``ops``, or raise
    RunLocked naming the live holder (see :meth:`store.RunStore.acquire`)."""
    if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
        raise ValueError(f"acquire: owner must be a non-empty str of at most {MAX_OWNER_CHARS} characters")
    if not (isinstance(lease_timeout, (int, float)) and lease_timeout > 0):
        raise ValueError(f"acquire: lease_timeout must be > 0 seconds, got {lease_timeout!r}")
    lease = Lease(run_store, owner, float(lease_timeout), ops)

    def stale(record: dict | None, mtime: float) -> str | None:
        return stale_reason(record, mtime, lease.lease_timeout)

    for _ in range(10):
        handle = r(lambda: ops.create(lease._body()), f"creating {ops.where}")
        if handle is not None:
            break
        record, tag, mtime = r(ops.read, f"reading {ops.where}")
        if tag is None or mtime is None:
            continue  # released in between: try to create it again
        if record is not None and record.get("token") == lease.token:
            handle = ops.adopt(tag)  # our own create landed, but its answer was lost
            if handle is not None:
                break
            continue
        reason = stale(record, mtime)
        if reason is None:
            raise RunLocked(
                f"run '{run_store.name}' is locked ({ops.where}): held by {describe_holder(record)}. Another "
                f"writer is training this run; use another run name, or wait until it stops or its lease is "
                f"older than lease_timeout={lease.lease_timeout} s",
                record,
            )

        def take_over(tag: Any = tag) -> Any:
            return ops.takeover(tag, lease._body(), stale)

        handle = r(take_over, f"taking over {ops.where}")
        if handle is not None:
            log.warning("run '%s': took over the lease of %s: %s", run_store.name, describe_holder(record), reason)
            break
    else:
        raise RunLocked(f"run '{run_store.name}' ({ops.where}): the lease kept changing hands; try again")
    lease._handle = handle
    if ops.settle:
        # Some S3-compatible stores (Swift) check If-None-Match / If-Match when a request starts,
        # so two simultaneous acquirers can both be told yes; the object shows who really won.
        time.sleep(ops.settle)
        if not r(lambda: ops.verify(handle, lease.token), f"checking {ops.where}"):
            record = r(ops.read, f"reading {ops.where}")[0]
            raise RunLocked(
                f"run '{run_store.name}' is locked ({ops.where}): {describe_holder(record)} acquired it at the "
                "same moment and won",
                record,
            )
    return lease


class Lease:
    """A held run lease. Use as a context manager, or call :meth:`release`.

    ``heartbeat()`` refreshes the heartbeat time in LOCK.json; call it every training iteration
    (the lease goes stale after ``lease_timeout`` s without one). It raises LeaseLost if another
    process took the run over; then stop training and do not commit.
    """

    def __init__(self, run_store: LeasedRun, owner: str, lease_timeout: float, ops: Any):
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
        return body + b" " * (LEASE_BYTES - len(body) - 1) + b"\n"

    @property
    def held(self) -> bool:
        """False once released or known to be lost."""
        return not self._released and self._lost is None

    def _mark_lost(self, why: str) -> None:
        """Record the loss and drop the handle; call with self._lock held (the handle is used under it)."""
        if self._lost is not None:
            return
        try:
            holder = describe_holder(self._ops.read()[0])
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

    def _check(self, r: Retrier) -> None:
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
        self._check(Retrier(self.run_store.store.retry))

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
