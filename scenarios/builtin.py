"""Built-in suites: small procedural suites generated on first use into a cache, so that
``load_suite("train")`` (and the env's default) works on a fresh machine with no data.

Suites (per kind of ``KINDS``, 100k Gaussians per background, seeds from the suite's own range of
``scenarios.generation``, so no suite shares a scenario with another):

- ``train``: 6 per kind (42 scenarios), seeds 0..41 of the train range;
- ``val``: 5 per kind (35), seeds 0..34 of the val range (1,000,000..);
- ``test``: 10 per kind (70), seeds 0..69 of the test range (2,000,000..).

Why these sizes: with 2 clips per kind the IL policy learns each training clip by heart, drives all
of them without a collision, and RL then sees no failure to learn from; with 6 per kind it fails on
some (10-25% of RL episodes collide in the default run), so PPO has a signal. The held-out suites are
sized to see a change: on 14 clips one clip is 7 points of a rate and the 95 % interval of 4/14 spans
0.12-0.55; of 21/70 it spans 0.21-0.42, and paired comparisons (``evaluation.stats``) on the same 70
clips resolve differences of a few clips. Each kind's generator draws its parameters (speeds, gaps,
curve radii, cut-in timing) per seed, so a suite holds a spread of the difficulty tags easy / medium /
hard (``scenarios.generation.difficulty``). ``val`` picks checkpoints and settings; ``test`` is only
for final reports.

Smaller suites for quick checks: ``SPLATDRIVE_BUILTIN_PER_KIND=1`` and ``SPLATDRIVE_BUILTIN_GAUSSIANS=4000``
(or the ``per_kind`` / ``gaussians`` arguments) give other suites, cached under their own folder name
(``builtin-val-v4-1x4000``), never mistaken for the real ones.

Cache: ``$SPLATDRIVE_CACHE/scenarios/builtin-<suite>-v<BUILTIN_VERSION>/`` when the variable is set,
else ``<repo>/.cache/scenarios/...`` (or ``~/.cache/splatdrive/scenarios/...`` outside a checkout).
A suite is built in a temporary folder beside it and renamed into place when complete, under an
exclusive lock file: concurrent first uses by several processes build it once, and a crash leaves
no half-written suite behind (only a ``.tmp-*`` folder, removed by the next build).

Waiting never hangs: the builder writes its pid, host and progress into the lock file; a process that
finds the lock taken polls it, logs who holds it, and gives up with :class:`SuiteLockTimeout` (naming
the holder) once the holder has made no progress for ``SPLATDRIVE_LOCK_TIMEOUT`` seconds (default
300). A ``multiprocessing`` child that re-runs its parent's main script while the parent builds (a
script without an ``if __name__ == "__main__":`` guard that starts processes) is refused at once with
what to do, since its parent would wait for it forever. The builder's own workers are plain
subprocesses (``scenarios.generation``), which run none of the caller's code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from scenarios import generation
from scenarios.format import KINDS, Scenario
from scenarios.io import ScenarioError, load_folder
from sim.files import cache_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, the rename into place still keeps a suite whole
    fcntl = None  # type: ignore[assignment]  # no fcntl module off POSIX: _suite_lock checks for None

log = logging.getLogger(__name__)

BUILTIN_VERSION = 4  # bump when generation changes, so caches of older suites are not reused
BUILTIN_SUITES = {"train": 6, "val": 5, "test": 10}  # scenarios per kind
BUILTIN_GAUSSIANS = 100_000
LOCK_TIMEOUT_S = 300.0  # seconds a waiter allows the lock's holder without progress
POLL_S = 0.25  # seconds between two looks at a taken lock
PER_KIND_VAR = "SPLATDRIVE_BUILTIN_PER_KIND"
GAUSSIANS_VAR = "SPLATDRIVE_BUILTIN_GAUSSIANS"
LOCK_TIMEOUT_VAR = "SPLATDRIVE_LOCK_TIMEOUT"
_COMPLETE = "suite.yaml"  # written last by generate_suite: its presence marks a complete suite


class SuiteLockTimeout(RuntimeError):
    """Gave up waiting for another process to build a built-in suite; the message names it."""


def cache_root() -> Path:
    """Where built-in suites live: ``$SPLATDRIVE_CACHE/scenarios``, else ``<repo>/.cache/scenarios``
    (:func:`sim.files.cache_dir`)."""
    return cache_dir("scenarios")


def _env_number(var: str, lo: float, kind=int):
    raw = os.environ.get(var, "").strip()
    if not raw:
        return None
    try:
        v = kind(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r}: expected a {kind.__name__} >= {lo}") from None
    if not v >= lo:
        raise ValueError(f"{var}={raw!r}: expected a {kind.__name__} >= {lo}")
    return v


def suite_size(name: str, per_kind: int | None = None, gaussians: int | None = None) -> tuple[int, int]:
    """(scenarios per kind, Gaussians per background) of built-in suite ``name``: the arguments where
    given, else ``SPLATDRIVE_BUILTIN_PER_KIND`` / ``SPLATDRIVE_BUILTIN_GAUSSIANS``, else the defaults."""
    if name not in BUILTIN_SUITES:
        raise ValueError(f"unknown built-in suite {name!r}; built-in suites are {', '.join(BUILTIN_SUITES)}")
    if per_kind is None:
        per_kind = _env_number(PER_KIND_VAR, 1) or BUILTIN_SUITES[name]
    if gaussians is None:
        gaussians = _env_number(GAUSSIANS_VAR, 1000) or BUILTIN_GAUSSIANS
    if int(per_kind) < 1 or int(gaussians) < 1000:
        raise ValueError(
            f"built-in suite {name!r}: need per_kind >= 1 and gaussians >= 1000, got {per_kind}, {gaussians}"
        )
    return int(per_kind), int(gaussians)


def suite_folder(name: str, per_kind: int | None = None, gaussians: int | None = None) -> Path:
    """The cache folder of built-in suite ``name`` at this size (generated or not)."""
    n, g = suite_size(name, per_kind, gaussians)
    tag = f"builtin-{name}-v{BUILTIN_VERSION}"
    if (n, g) != (BUILTIN_SUITES[name], BUILTIN_GAUSSIANS):
        tag += f"-{n}x{g}"
    return cache_root() / tag


def is_generated(name: str, per_kind: int | None = None, gaussians: int | None = None) -> bool:
    """Whether built-in suite ``name`` is complete in the cache (nothing is generated)."""
    return (suite_folder(name, per_kind, gaussians) / _COMPLETE).is_file()


def lock_path(name: str, per_kind: int | None = None, gaussians: int | None = None) -> Path:
    """The lock file a process holds while it builds built-in suite ``name``."""
    final = suite_folder(name, per_kind, gaussians)
    return final.parent / f".{final.name}.lock"


def builtin_suite(
    name: str,
    gaussians: int | None = None,
    progress: bool = True,
    per_kind: int | None = None,
    workers: int = 0,
    lock_timeout: float | None = None,
) -> Path:
    """The folder of built-in suite ``name`` (``train``, ``val``, ``test``), generated on first use.

    Safe to call from many processes at once: one builds (under a lock), the others wait for it, for
    at most ``lock_timeout`` seconds without progress (None: ``SPLATDRIVE_LOCK_TIMEOUT``, else 300).
    ``workers`` generation subprocesses (0: one per CPU, at most 4).
    """
    final = suite_folder(name, per_kind, gaussians)
    if (final / _COMPLETE).is_file():
        return final
    n, g = suite_size(name, per_kind, gaussians)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    count = n * len(KINDS)
    what = f"generating built-in suite {name!r} ({count} scenarios) into {final}"
    with suite_lock(lock_path(name, per_kind, gaussians), what, lock_timeout) as lock:
        if (final / _COMPLETE).is_file():  # another process built it while we waited
            return final
        for old in root.glob(f".tmp-{final.name}-*"):  # left by a crashed build
            shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        log.info("%s", what)
        t0 = time.perf_counter()
        try:
            generation.generate_suite(
                tmp, suite=name, count=count, seed=0, kinds=KINDS, gaussians=g, workers=workers, progress=progress,
                on_scenario=lock.progress,
            )  # fmt: skip
            if final.exists():  # an incomplete leftover (no suite.yaml): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("built-in suite %r ready in %.1f s", name, time.perf_counter() - t0)
    return final


def load_suite(dir_or_name: str | os.PathLike, skip_broken: bool = False) -> list[Scenario]:
    """Every scenario of a suite: a folder of scenario files, or a built-in suite's name
    (``BUILTIN_SUITES``, generated into the cache on first use). See ``scenarios.io.load_folder``
    for broken files and ``skip_broken``."""
    p = Path(dir_or_name)
    if not p.is_dir():
        name = str(dir_or_name)
        if name not in BUILTIN_SUITES:
            raise ScenarioError(
                f"{name}: not a folder of scenario files, nor a built-in suite ({', '.join(BUILTIN_SUITES)})"
            )
        p = builtin_suite(name)
    return load_folder(p, skip_broken=skip_broken)


# -- the lock ------------------------------------------------------------------------------------------


class _Holder:
    """The held lock: what it is for, and the progress it reports to waiters (in the lock file)."""

    def __init__(self, f, what: str):
        self._f = f
        self.info = dict(pid=os.getpid(), host=socket.gethostname(), what=what, started=time.time(), done=0, total=0)
        self._write()

    def progress(self, done: int, total: int) -> None:
        self.info.update(done=int(done), total=int(total), updated=time.time())
        self._write()

    def _write(self) -> None:
        self._f.seek(0)
        self._f.truncate()
        self._f.write(json.dumps(self.info) + "\n")
        self._f.flush()


def read_holder(path: Path) -> dict:
    """What the lock file at ``path`` says about its holder ({} when it says nothing readable)."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _holder_text(info: dict) -> str:
    if not info.get("pid"):
        return "a process that wrote no pid into it"
    done = f", {info.get('done', 0)}/{info['total']} scenarios done" if info.get("total") else ""
    return f"pid {info['pid']} on {info.get('host', '?')} ({info.get('what', '?')}{done})"


@contextlib.contextmanager
def suite_lock(path: Path, what: str = "", timeout: float | None = None):
    """Hold the exclusive lock file ``path`` (fcntl.flock) while building ``what``; yields an object
    whose ``progress(done, total)`` tells waiters the build moves on.

    Waits while another process holds it, at most ``timeout`` seconds without progress from it (None:
    ``SPLATDRIVE_LOCK_TIMEOUT``, else ``LOCK_TIMEOUT_S``), then raises :class:`SuiteLockTimeout`
    naming the holder. A ``multiprocessing`` child still bootstrapping (re-running its parent's main
    script) that finds its parent holding the lock raises RuntimeError at once instead of waiting."""
    if timeout is None:
        timeout = _env_number(LOCK_TIMEOUT_VAR, 0.0, float)
        timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    path = Path(path)
    with open(path, "a+") as f:
        if fcntl is None:  # pragma: no cover
            yield _Holder(f, what)
            return
        _acquire(f, path, float(timeout))
        try:
            holder = _Holder(f, what)
            yield holder
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _acquire(f, path: Path, timeout: float) -> None:
    seen, last_change, logged = None, time.monotonic(), 0.0
    while True:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        info = read_holder(path)
        _refuse_bootstrapping_child(info, path)
        now = time.monotonic()
        if info != seen:  # the holder moved on (or a new one took over): the wait starts again
            seen, last_change = info, now
        if now - logged >= 30.0:
            log.warning("waiting for the lock %s, held by %s", path, _holder_text(info))
            logged = now
        if now - last_change >= timeout:
            raise SuiteLockTimeout(
                f"gave up after {timeout:.0f} s without progress waiting for the lock {path}, held by "
                f"{_holder_text(info)}. If that process is stuck, stop it (kill {info.get('pid', '<pid>')}) "
                f"and try again; to wait longer set {LOCK_TIMEOUT_VAR}=<seconds>."
            )
        time.sleep(POLL_S)


def _refuse_bootstrapping_child(info: dict, path: Path) -> None:
    """A multiprocessing child re-running its parent's main script while it starts (spawn; with forkserver,
    the fork server), where the parent holds the lock: the parent waits on this child, so waiting here
    would never end. multiprocessing marks that phase with ``_inheriting`` (``parent_process()`` is
    still None then); the parent is ``os.getppid()``."""
    bootstrapping = getattr(multiprocessing.current_process(), "_inheriting", False)
    parent = os.getppid()
    if not bootstrapping or info.get("pid") != parent:
        return
    raise RuntimeError(
        f"this process (pid {os.getpid()}) is a multiprocessing child re-running its parent's main script "
        f"while it starts, and the parent (pid {parent}) holds {path} ({info.get('what', 'a suite build')}): "
        'waiting would never end. Put the script\'s top-level code under `if __name__ == "__main__":`, or '
        "generate the suite before starting processes (e.g. `python -m scenarios.generate` or "
        "scenarios.builtin_suite(name) in the parent)."
    )
