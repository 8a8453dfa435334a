"""Background commits: training hands a checkpoint over and goes on while the store is slow or down."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.errors import LeaseLost, Stopped
from store.layout import Reuse, check_payload
from store.retries import Retrier, RetryPolicy

if TYPE_CHECKING:
    from store.checkpoint_store import RunStore

log = logging.getLogger(__name__)


@dataclass
class _Job:
    files: dict[str, bytes | Reuse]
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

    def submit(self, files: Mapping[str, bytes | Reuse], meta: Mapping[str, Any]) -> None:
        """Queue a checkpoint and return at once (inputs are validated and copied here)."""
        if self._fatal is not None:
            raise LeaseLost(
                f"checkpoint committer of run '{self.run_store.name}' stopped: {self._fatal}"
            ) from self._fatal
        if self._stop.is_set():
            raise RuntimeError(f"checkpoint committer of run '{self.run_store.name}' is closed")
        job = _Job(*check_payload(self.run_store.name, files, meta), submitted=time.time())
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
        retrier = Retrier(self.retry, self._stop, self._count_retry)
        while True:
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                job = self._pending.popleft()
                self._busy = True
            try:
                version = self.run_store._commit(job.files, job.meta, retrier)  # validated in submit()
            except Stopped as exc:
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
