"""Built-in suites: small procedural suites generated on first use into a cache, so that
``load_suite("train")`` (and the env's default) works on a fresh machine with no data.

Suites (per kind of ``KINDS``, 100k Gaussians per background, seeds from the suite's own range of
``scenarios.generate``, so no suite shares a scenario with another):

- ``train``: 6 per kind (42 scenarios), seeds 0..41 of the train range;
- ``val``: 2 per kind (14), seeds 0..13 of the val range (1,000,000..);
- ``test``: 2 per kind (14), seeds 0..13 of the test range (2,000,000..).

Why these sizes: with 2 clips per kind the IL policy learns each training clip by heart, drives all
of them without a collision, and RL then sees no failure to learn from; with 6 per kind it fails on
some (10-25% of RL episodes collide in the default run), so PPO has a signal. Two per kind in ``val``
makes a collision rate step 1/14 rather than 1/7.

Cache: ``$SPLATDRIVE_CACHE/scenarios/builtin-<suite>-v<BUILTIN_VERSION>/`` when the variable is set,
else ``<repo>/.cache/scenarios/...`` (or ``~/.cache/splatdrive/scenarios/...`` outside a checkout).
A suite is built in a temporary folder beside it and renamed into place when complete, under an
exclusive lock file: concurrent first uses by several processes build it once, and a crash leaves
no half-written suite behind (only a ``.tmp-*`` folder, removed by the next build).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from scenarios.format import KINDS

log = logging.getLogger(__name__)

BUILTIN_VERSION = 3  # bump when generation changes, so caches of older suites are not reused
BUILTIN_SUITES = {"train": 6, "val": 2, "test": 2}  # scenarios per kind
BUILTIN_GAUSSIANS = 100_000
_COMPLETE = "suite.yaml"  # written last by generate_suite: its presence marks a complete suite


def cache_root() -> Path:
    """Where built-in suites live: ``$SPLATDRIVE_CACHE/scenarios``, else ``<repo>/.cache/scenarios``."""
    env = os.environ.get("SPLATDRIVE_CACHE")
    if env:
        return Path(env).expanduser() / "scenarios"
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file():
        return repo / ".cache" / "scenarios"
    return Path.home() / ".cache" / "splatdrive" / "scenarios"


def builtin_suite(name: str, gaussians: int = BUILTIN_GAUSSIANS, progress: bool = True) -> Path:
    """The folder of built-in suite ``name`` (``train``, ``val``, ``test``), generated on first use.

    Safe to call from many processes at once: one builds (under a lock), the others wait for it.
    """
    if name not in BUILTIN_SUITES:
        raise ValueError(f"unknown built-in suite {name!r}; built-in suites are {', '.join(BUILTIN_SUITES)}")
    root = cache_root()
    tag = f"builtin-{name}-v{BUILTIN_VERSION}"
    final = root / tag
    if (final / _COMPLETE).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{tag}.lock"):
        if (final / _COMPLETE).is_file():  # another process built it while we waited
            return final
        for old in root.glob(f".tmp-{tag}-*"):  # left by a crashed build
            shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".tmp-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        from scenarios.generate import generate_suite

        count = BUILTIN_SUITES[name] * len(KINDS)
        log.info("generating built-in suite %r (%d scenarios) into %s", name, count, final)
        t0 = time.perf_counter()
        try:
            generate_suite(
                tmp, suite=name, count=count, seed=0, kinds=KINDS, gaussians=gaussians, workers=0, progress=progress
            )
            if final.exists():  # an incomplete leftover (no suite.yaml): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("built-in suite %r ready in %.1f s", name, time.perf_counter() - t0)
    return final


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on ``path`` (fcntl where there is one; elsewhere a no-op, and the
    rename into place still keeps the result whole)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
