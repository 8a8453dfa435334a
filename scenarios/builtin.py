"""Built-in suites: procedural suites generated on first use into a cache, so that
``load_suite("train")`` (and the env's default) works on a fresh machine with no data.

Suites (100k Gaussians per background; place seeds from the suite's own range of
``scenarios.generation``, so no suite shares a background with another):

- ``train``: 144 scenarios per kind (1,008): 126 places (18 per kind), 8 traffic variants on each;
- ``val``: 10 per kind (70): 35 places, 2 variants on each;
- ``test``: 20 per kind (140): 70 places, 2 variants on each.

Why these sizes: RAD trained on thousands of clips; 42 clips let an IL policy learn each by heart. A
background (a place: its roads, speed limits, obstacles, buildings, trees) is ~6.7 MB at 100k Gaussians,
and most of a clip's build time, so train draws many traffic variants (the ego's lane, start and speed,
every other road user) per place: 1,008 clips in ~1 GB. The held-out suites are about places train
never saw (generalisation to new places, as RAD's held-out clips), so they keep few variants per
place; on 70 clips one clip is 1.4 points of a rate and the 95 % interval of 21/70 spans 0.21-0.42, and
paired comparisons (``evaluation.stats``) on the same clips resolve differences of a few clips. ``val``
picks checkpoints and settings; ``test`` is only for final reports. Each kind draws its parameters per
seed, so a suite holds a spread of the difficulty tags easy / medium / hard
(``scenarios.generation.difficulty``).

**Shards.** A suite is built in shards, each a complete suite folder of its own (``shard-00``,
``shard-01``, ...: JSONs, backgrounds, assets and its ``suite.yaml``, written last), built under its own
lock in a temporary folder and renamed into place: train's 9 shards hold 112 scenarios each (2 places
per kind, 8 variants), val's one 70, test's two 70 each. Within a shard, scenario i is variant
i // P of place i % P, so any prefix has every kind in turn. ``load_suite("train:256")`` (a *suite spec*:
a name, a colon, a count) takes the first 256 scenarios in that order and builds only the shards that hold
them (here 3); ``load_suite("train")`` builds them all. When every shard is there, the suite's folder gets
its own ``suite.yaml`` (the shards' manifests summed: places, scenarios, rejected draws by reason).
:func:`planned_places` lists a suite's places (ids, kinds, seeds) without building anything.

Smaller suites for quick checks: ``SPLATDRIVE_BUILTIN_PER_KIND=1`` and ``SPLATDRIVE_BUILTIN_GAUSSIANS=4000``
(or the ``per_kind`` / ``gaussians`` arguments) give other suites, cached under their own folder name
(``builtin-val-v5-1x4000``), never mistaken for the real ones (variants per place: the largest divisor
of a shard's scenarios per kind up to the suite's).

Cache: ``$SPLATDRIVE_CACHE/scenarios/builtin-<suite>-v<BUILTIN_VERSION>/shard-NN/`` when the variable is
set, else ``<repo>/.cache/scenarios/...`` (or ``~/.cache/splatdrive/scenarios/...`` outside a checkout). A
crash leaves no half-written shard behind (only a ``.tmp-*`` folder, removed by the next build).

Waiting never hangs: the builder writes its pid, host and progress into a shard's lock file
(``.shard-NN.lock``); a process that finds the lock taken polls it, logs who holds it, and gives up with
:class:`SuiteLockTimeout` (naming the holder) once the holder has made no progress for
``SPLATDRIVE_LOCK_TIMEOUT`` seconds (default 300). A ``multiprocessing`` child that re-runs its parent's
main script while the parent builds (a script without an ``if __name__ == "__main__":`` guard that starts
processes) is refused at once with what to do, since its parent would wait for it forever. The builder's
own workers are plain subprocesses (``scenarios.generation``), which run none of the caller's code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from scenarios import generation
from scenarios.format import KINDS, Scenario
from scenarios.io import ScenarioError, load_files, load_folder
from sim.files import atomic_write, cache_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, the rename into place still keeps a shard whole
    fcntl = None  # type: ignore[assignment]  # no fcntl module off POSIX: _suite_lock checks for None

log = logging.getLogger(__name__)

BUILTIN_VERSION = 5  # bump when generation changes, so caches of older suites are not reused
BUILTIN_SUITES = {"train": 144, "val": 10, "test": 20}  # scenarios per kind
BUILTIN_VARIANTS = {"train": 8, "val": 2, "test": 2}  # traffic variants per place (background)
SHARD_PER_KIND = {"train": 16, "val": 10, "test": 10}  # scenarios per kind in a shard
BUILTIN_GAUSSIANS = 100_000
LOCK_TIMEOUT_S = 300.0  # seconds a waiter allows the lock's holder without progress
POLL_S = 0.25  # seconds between two looks at a taken lock
PER_KIND_VAR = "SPLATDRIVE_BUILTIN_PER_KIND"
GAUSSIANS_VAR = "SPLATDRIVE_BUILTIN_GAUSSIANS"
LOCK_TIMEOUT_VAR = "SPLATDRIVE_LOCK_TIMEOUT"
_COMPLETE = "suite.yaml"  # written last by generate_suite (a shard) and here (a whole suite): marks it complete


class SuiteLockTimeout(RuntimeError):
    """Gave up waiting for another process to build a built-in suite's shard; the message names it."""


def cache_root() -> Path:
    """Where built-in suites live: ``sim.files.cache_dir("scenarios")`` (``$SPLATDRIVE_CACHE/scenarios``,
    else ``<repo>/.cache/scenarios``)."""
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


def parse_spec(spec: str) -> tuple[str, int | None]:
    """A suite spec -> (built-in suite name, count or None for all): ``"train"``, ``"train:256"``."""
    name, sep, count = str(spec).partition(":")
    if name not in BUILTIN_SUITES:
        raise ValueError(f"unknown built-in suite {name!r}; built-in suites are {', '.join(BUILTIN_SUITES)}")
    if not sep:
        return name, None
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"suite spec {spec!r}: expected <name>:<count>, a count of scenarios >= 1, got {count!r}")
    return name, int(count)


def is_builtin_spec(spec) -> bool:
    """Whether ``spec`` names a built-in suite or a prefix of one (``train``, ``train:256``)."""
    try:
        parse_spec(str(spec))
    except ValueError:
        return False
    return True


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


@dataclass(frozen=True)
class Shard:
    """One shard of a built-in suite: ``count`` scenarios from place seed ``seed`` (within the suite's
    range), ``variants`` traffic variants per place."""

    index: int
    count: int
    seed: int
    variants: int

    @property
    def name(self) -> str:
        return f"shard-{self.index:02d}"


def shards(name: str, per_kind: int | None = None) -> list[Shard]:
    """The shards of built-in suite ``name`` at this size, in order."""
    n, _ = suite_size(name, per_kind, BUILTIN_GAUSSIANS)
    k = SHARD_PER_KIND[name]
    full_places = len(KINDS) * math.ceil(k / BUILTIN_VARIANTS[name])  # places of a full shard: seeds apart
    out = []
    for s in range(math.ceil(n / k)):
        n_s = min(k, n - s * k)
        v = max(d for d in range(1, min(BUILTIN_VARIANTS[name], n_s) + 1) if n_s % d == 0)
        out.append(Shard(s, n_s * len(KINDS), s * full_places, v))
    return out


def planned_places(name: str, per_kind: int | None = None) -> list[tuple[str, str, int]]:
    """(place id, kind, place seed) of every place of built-in suite ``name``, from its shards' plans: what
    its backgrounds are, without building anything."""
    base = generation.suite_seed_base(name)
    out = []
    for sh in shards(name, per_kind):
        for j in range(math.ceil(sh.count / sh.variants)):
            kind, seed = KINDS[j % len(KINDS)], base + sh.seed + j
            out.append((generation.place_id(name, kind, seed), kind, seed))
    return out


def suite_folder(name: str, per_kind: int | None = None, gaussians: int | None = None) -> Path:
    """The cache folder of built-in suite ``name`` at this size (generated or not); its shards are in it."""
    n, g = suite_size(name, per_kind, gaussians)
    tag = f"builtin-{name}-v{BUILTIN_VERSION}"
    if (n, g) != (BUILTIN_SUITES[name], BUILTIN_GAUSSIANS):
        tag += f"-{n}x{g}"
    return cache_root() / tag


def shard_folder(name: str, index: int, per_kind: int | None = None, gaussians: int | None = None) -> Path:
    return suite_folder(name, per_kind, gaussians) / f"shard-{index:02d}"


def is_generated(name: str, per_kind: int | None = None, gaussians: int | None = None) -> bool:
    """Whether built-in suite spec ``name`` is in the cache (nothing is generated): a whole suite
    (``train``) every shard, a prefix (``train:256``) the shards that hold it."""
    suite, count = parse_spec(name)
    root = suite_folder(suite, per_kind, gaussians)
    if (root / _COMPLETE).is_file():
        return True
    if count is None:
        return False
    total = 0
    for sh in shards(suite, per_kind):
        if total >= count:
            break
        if not (root / sh.name / _COMPLETE).is_file():
            return False
        total += sh.count
    return True


def lock_path(name: str, per_kind: int | None = None, gaussians: int | None = None, shard: int = 0) -> Path:
    """The lock file a process holds while it builds shard ``shard`` of built-in suite ``name``."""
    return suite_folder(name, per_kind, gaussians) / f".shard-{shard:02d}.lock"


def builtin_suite(
    name: str,
    gaussians: int | None = None,
    progress: bool = True,
    per_kind: int | None = None,
    workers: int = 0,
    lock_timeout: float | None = None,
) -> Path:
    """The folder of built-in suite ``name`` (``train``, ``val``, ``test``; or a spec ``train:256``,
    which builds only the shards holding its first 256 scenarios), generated on first use.

    Safe to call from many processes at once: one builds a shard (under its lock), the others wait for
    it, for at most ``lock_timeout`` seconds without progress (None: ``SPLATDRIVE_LOCK_TIMEOUT``, else
    300). ``workers`` generation subprocesses (0: one per CPU, at most 4).
    """
    suite, count = parse_spec(name)
    root = suite_folder(suite, per_kind, gaussians)
    if (root / _COMPLETE).is_file():
        return root
    plan = shards(suite, per_kind)
    need, total = [], 0
    for sh in plan:
        if count is not None and total >= count:
            break
        need.append(sh)
        total += sh.count
    for sh in need:
        _build_shard(suite, sh, len(plan), per_kind, gaussians, progress, workers, lock_timeout)
    if len(need) == len(plan) and not (root / _COMPLETE).is_file():
        _write_manifest(suite, root, plan)
    return root


def builtin_files(spec: str, **kw) -> list[Path]:
    """The scenario files of a built-in suite spec (``val``, ``train:256``), in the suite's order (shard
    by shard, each in its manifest's order), building the shards that hold them first. ``kw`` as
    :func:`builtin_suite`'s."""
    suite, count = parse_spec(spec)
    root = builtin_suite(spec, **kw)
    files: list[Path] = []
    for sh in shards(suite, kw.get("per_kind")):
        if count is not None and len(files) >= count:
            break
        manifest = yaml.safe_load((root / sh.name / _COMPLETE).read_text()) or {}
        files += [root / sh.name / f"{s['id']}.json" for s in manifest.get("scenarios", [])]
    if count is not None and count > len(files):
        raise ScenarioError(f"{spec}: built-in suite {suite!r} holds {len(files)} scenarios, fewer than {count}")
    return files if count is None else files[:count]


def _build_shard(suite: str, sh: Shard, of: int, per_kind, gaussians, progress, workers, lock_timeout) -> Path:
    """Build one shard under its lock (nothing when it is there, or another process built it meanwhile)."""
    root = suite_folder(suite, per_kind, gaussians)
    final = root / sh.name
    if (final / _COMPLETE).is_file():
        return final
    _, g = suite_size(suite, per_kind, gaussians)
    root.mkdir(parents=True, exist_ok=True)
    what = f"generating built-in suite {suite!r} shard {sh.index + 1}/{of} ({sh.count} scenarios) into {final}"
    with suite_lock(lock_path(suite, per_kind, gaussians, sh.index), what, lock_timeout) as lock:
        if (final / _COMPLETE).is_file():  # another process built it while we waited
            return final
        for old in root.glob(f".tmp-{sh.name}-*"):  # left by a crashed build
            shutil.rmtree(old, ignore_errors=True)
        tmp = root / f".tmp-{sh.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        log.info("%s", what)
        t0 = time.perf_counter()
        try:
            generation.generate_suite(
                tmp, suite=suite, count=sh.count, seed=sh.seed, kinds=KINDS, gaussians=g, workers=workers,
                progress=progress, on_scenario=lock.progress, variants=sh.variants,
            )  # fmt: skip
            if final.exists():  # an incomplete leftover (no suite.yaml): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("built-in suite %r shard %d/%d ready in %.1f s", suite, sh.index + 1, of, time.perf_counter() - t0)
    return final


def _write_manifest(suite: str, root: Path, plan: list[Shard]) -> None:
    """The whole suite's ``suite.yaml``: its shards' manifests summed."""
    parts = [yaml.safe_load((root / sh.name / _COMPLETE).read_text()) or {} for sh in plan]
    reasons: dict[str, int] = {}
    for p in parts:
        for k, v in (p.get("rejections") or {}).get("by_reason", {}).items():
            reasons[k] = reasons.get(k, 0) + int(v)
    manifest = {
        "suite": suite,
        "version": BUILTIN_VERSION,
        "scenarios": sum(len(p.get("scenarios", [])) for p in parts),
        "places": sum(len(p.get("places", [])) for p in parts),
        "generated_in_s": round(sum(float(p.get("generated_in_s", 0.0)) for p in parts), 1),
        "rejections": {"total": sum(reasons.values()), "by_reason": dict(sorted(reasons.items()))},
        "shards": [
            {"name": sh.name, "scenarios": sh.count, "variants": sh.variants, "seed_range": p.get("seed_range")}
            for sh, p in zip(plan, parts, strict=True)
        ],
    }
    atomic_write(root / _COMPLETE, yaml.safe_dump(manifest, sort_keys=False))


def load_suite(dir_or_name: str | os.PathLike, skip_broken: bool = False) -> list[Scenario]:
    """Every scenario of a suite: a folder of scenario files (a built-in suite's folder with its shards
    too), or a built-in suite spec (``train``, ``val:35``: generated into the cache on first use). See
    ``scenarios.io.load_folder`` for broken files and ``skip_broken``."""
    p = Path(dir_or_name)
    if p.is_dir():
        return load_folder(p, skip_broken=skip_broken)
    if not is_builtin_spec(dir_or_name):
        raise ScenarioError(
            f"{dir_or_name}: not a folder of scenario files, nor a built-in suite ({', '.join(BUILTIN_SUITES)}, "
            "or a prefix such as train:256)"
        )
    files = builtin_files(str(dir_or_name))
    if not files:
        folder = suite_folder(parse_spec(str(dir_or_name))[0])
        raise ScenarioError(f"{dir_or_name}: no scenario files in built-in suite {folder}")
    return load_files(files, str(dir_or_name), skip_broken=skip_broken)


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
