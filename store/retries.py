"""Retries of store operations: which errors are transient, and exponential backoff with jitter."""

from __future__ import annotations

import errno
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from store.errors import Stopped, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

# errno values a shared file system (NFS, FUSE mounts of object stores) returns while it recovers.
TRANSIENT_ERRNOS = frozenset(
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
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


@dataclass(frozen=True)
class RetryPolicy:
    """How store operations are retried on transient errors: exponential backoff with jitter.

    Retry n (1-based) waits a random time in ``[d/2, d]`` with ``d = min(max_delay, base_delay * 2**(n-1))``;
    the jitter keeps many clients from hammering a recovering store in lock step.
    ``max_attempts`` counts the first try; ``max_attempts`` / ``total_timeout`` of ``None`` mean no
    limit (what :class:`store.AsyncCommitter` uses: a checkpoint waits out any outage). Seconds throughout.
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
                raise Stopped(f"{what}: stopped while retrying after {attempt} attempts: {exc}") from exc


@dataclass
class Retrier:
    """A retry policy bound to a stop event and a retry counter, passed down one commit."""

    policy: RetryPolicy
    stop: threading.Event | None = None
    on_retry: Callable[[int, BaseException], None] | None = None

    def __call__(self, fn: Callable[[], T], what: str) -> T:
        return retry(fn, self.policy, what=what, stop=self.stop, on_retry=self.on_retry)
