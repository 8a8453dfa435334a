"""A store and its runs: commit, list, resolve, load, clean up, retain, and the run lease."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from store.backends import open_backend
from store.errors import CheckpointNotFound, CorruptCheckpoint, StoreError
from store.layout import (
    MANIFEST,
    QUARANTINE,
    Reuse,
    check_payload,
    check_version,
    file_entry,
    manifest_bytes,
    parse_ref,
    validate_manifest,
    version_rel,
)
from store.lease import Lease, acquire
from store.names import check_name
from store.retention import check_retention, versions_to_keep
from store.retries import Retrier, RetryPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """One loaded checkpoint: every file's bytes (checked against the manifest) and the meta.

    ``manifest_sha256``: the sha256 of the MANIFEST.json bytes the files were checked against
    (manifests are create-only, so it names this checkpoint's content for good).
    """

    run: str
    version: int
    files: dict[str, bytes]
    meta: dict
    wall_time: float
    manifest_sha256: str = ""


class CheckpointStore:
    """The store at ``uri`` (a path, ``file:///abs/path`` or ``s3://bucket/prefix?...``).

    Opening does no I/O. ``retry`` governs every store operation of its runs; ``on_retry(attempt,
    exc)`` is called before each wait between two attempts of any of them (to count or report an
    outage; :class:`AsyncCommitter` counts its own).
    """

    def __init__(
        self,
        uri: str | os.PathLike,
        *,
        retry: RetryPolicy | None = None,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ):
        self.retry = retry if retry is not None else RetryPolicy()
        self.on_retry = on_retry
        self._backend = open_backend(os.fspath(uri))
        self.uri = self._backend.describe()

    def run(self, name: str) -> RunStore:
        """The run called ``name`` (validated: one path segment, see :func:`store.check_name`)."""
        return RunStore(self, check_name("run", name))

    def resolve(self, ref: str) -> tuple[RunStore, int]:
        """``run``, ``run@latest`` or ``run@<version>`` -> (the run, a committed version of it).

        ``latest`` (or no ``@``) is the newest committed version. Raises ValueError for a malformed
        ref or run name, CheckpointNotFound when there is no such committed version.
        """
        try:
            name, version = parse_ref(ref)
        except ValueError as exc:
            raise ValueError(f"checkpoint {ref!r}: {exc} (expected <run>[@<version>|@latest])") from None
        rs = self.run(name)
        return rs, rs.resolve(version)

    def load(self, ref: str) -> Checkpoint:
        """Load ``run``, ``run@latest`` or ``run@<version>`` (see :meth:`resolve`), every file checked.

        Never falls back: if the newest committed version is corrupt this raises CorruptCheckpoint
        (:meth:`RunStore.load_latest` is the one that falls back, for resuming).
        """
        rs, version = self.resolve(ref)
        return rs.load(version)

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
        # {version: sha256 of its MANIFEST.json} of versions known intact: committed by this object or
        # loaded whole by it. Manifests are create-only, so the digest pins the content that was checked.
        self._intact: dict[int, str] = {}
        self._files: dict[int, dict[str, dict]] = {}  # their manifests' file entries: what a Reuse can take

    @property
    def uri(self) -> str:
        return self._b.describe(self.name)

    def __repr__(self) -> str:
        return f"RunStore({self.uri!r})"

    def _retrier(self, policy: RetryPolicy | None = None) -> Retrier:
        return Retrier(policy or self.store.retry, on_retry=self.store.on_retry)

    def _where(self, version: int, file: str | None = None) -> str:
        return self._b.describe(version_rel(self.name, version, file))

    def _listing(self, r: Retrier) -> dict[int, set[str]]:
        return r(lambda: self._b.list_run(self.name), f"listing {self.uri}")

    # -- reading ---------------------------------------------------------------------------------

    def versions(self) -> list[int]:
        """Committed versions (a version folder holding MANIFEST.json), ascending."""
        return sorted(v for v, names in self._listing(self._retrier()).items() if MANIFEST in names)

    def latest(self) -> int | None:
        """The newest committed version, found by listing; None if there is none."""
        versions = self.versions()
        return versions[-1] if versions else None

    def resolve(self, version: int | None = None) -> int:
        """A committed version: ``version`` itself, or for None the newest (what ``@latest`` means).

        Raises CheckpointNotFound naming the committed versions there are. No fallback: the newest
        committed version is meant even if it turns out corrupt when loaded.
        """
        versions = self.versions()
        if version is None:
            if not versions:
                raise CheckpointNotFound(f"run '{self.name}' has no committed checkpoint in {self.store.uri}")
            return versions[-1]
        version = check_version(version)
        if version not in versions:
            raise CheckpointNotFound(
                f"run '{self.name}' has no committed version {version}: {self._where(version, MANIFEST)} does not "
                f"exist (committed versions: {', '.join(map(str, versions)) or 'none'})"
            )
        return version

    def _read_manifest(self, version: int, r: Retrier) -> tuple[dict, bytes]:
        """(the parsed and validated manifest, its bytes)."""
        rel = version_rel(self.name, version, MANIFEST)
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
        problem = validate_manifest(manifest, self.name, version)
        if problem:
            raise CorruptCheckpoint(self.name, version, MANIFEST, problem, self._where(version))
        return manifest, data

    def _read_file(self, version: int, name: str, entry: dict, r: Retrier) -> bytes:
        """One file of a version, checked against its manifest ``entry`` (size, then sha256)."""
        rel = version_rel(self.name, version, name)
        try:
            data = r(partial(self._b.read, rel), f"reading {self._b.describe(rel)}")
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
        return data

    def load(self, version: int, *, retry: RetryPolicy | None = None) -> Checkpoint:
        """Load a committed version, checking every file's size and sha256 against the manifest.

        Raises CheckpointNotFound (no such committed version) or CorruptCheckpoint (naming the file).
        """
        version = check_version(version)
        r = self._retrier(retry)
        manifest, raw = self._read_manifest(version, r)
        files = {name: self._read_file(version, name, entry, r) for name, entry in manifest["files"].items()}
        manifest_sha256 = hashlib.sha256(raw).hexdigest()
        self._intact[version] = manifest_sha256
        self._files[version] = manifest["files"]
        wall_time = float(manifest["wall_time"])
        return Checkpoint(self.name, version, files, manifest["meta"], wall_time, manifest_sha256)

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

    def commit(
        self, files: Mapping[str, bytes | Reuse], meta: Mapping[str, Any], *, retry: RetryPolicy | None = None
    ) -> int:
        """Write a new version: each file (atomically), then MANIFEST.json last. Returns the version.

        The version is the next integer after the highest existing folder, committed or not. If this
        RunStore holds the run lease, the lease is checked before writing and again before the
        manifest: a writer that was taken over raises LeaseLost and publishes nothing. A file given as
        :class:`store.layout.Reuse` is taken from an earlier version that holds the same bytes where
        this object knows one (a hard link; a server-side copy on S3), else written from its ``make()``.
        """
        files, meta = check_payload(self.name, files, meta)
        return self._commit(files, meta, self._retrier(retry))

    def _commit(self, files: dict[str, bytes | Reuse], meta: dict, r: Retrier) -> int:
        """Commit validated inputs (:func:`store.layout.check_payload`); AsyncCommitter calls this too."""
        self._check_lease(r)
        # A listing may lag behind writes (S3 and Swift listings can): the versions this object itself
        # committed count too, and prepare_version refuses a number whose manifest exists.
        version = max({*self._listing(r), *self._intact}, default=0) + 1
        while True:
            # Reserve the number before its folder exists, so cleanup() never takes our folder for
            # debris, and two commits through this object (AsyncCommitter + direct) never share one.
            with self._writing_lock:
                while version in self._writing:
                    version += 1
                self._writing.add(version)
            try:
                created = r(partial(self._b.prepare_version, self.name, version), f"creating {self._where(version)}")
            except BaseException:
                with self._writing_lock:
                    self._writing.discard(version)
                raise
            if created:
                break
            with self._writing_lock:
                self._writing.discard(version)
            version += 1  # another writer took that number, or a lagging listing hid it
        try:
            entries = {}
            linked = 0
            for name, data in files.items():
                rel = version_rel(self.name, version, name)
                if isinstance(data, Reuse):
                    if self._reuse(data, rel, version, r):
                        linked += data.size
                    else:
                        payload = data.bytes()
                        r(partial(self._b.write, rel, payload), f"writing {self._b.describe(rel)}")
                    entries[name] = data.entry
                    continue
                r(partial(self._b.write, rel, data), f"writing {self._b.describe(rel)}")
                entries[name] = file_entry(data)
            vrel = version_rel(self.name, version)
            r(lambda: self._b.sync_dir(vrel), f"syncing {self._where(version)}")
            body = manifest_bytes(self.name, version, meta, entries)
            self._check_lease(r)  # the point of no return: a writer that lost the run publishes nothing
            mrel = f"{vrel}/{MANIFEST}"
            if not r(lambda: self._b.publish(mrel, body), f"writing {self._b.describe(mrel)}"):
                # Our own earlier attempt may have landed with its answer lost; anything else is a second writer.
                if r(lambda: self._b.read(mrel), f"reading {self._b.describe(mrel)}") != body:
                    raise StoreError(
                        f"run '{self.name}' version {version}: {self._b.describe(mrel)} was written by another "
                        "writer at the same time; writers of one run must hold its lease (acquire())"
                    )
            # The digests in the manifest were computed from the very bytes written: retention need not
            # read them back (see retain()).
            self._intact[version] = hashlib.sha256(body).hexdigest()
            self._files[version] = entries
        finally:
            with self._writing_lock:
                self._writing.discard(version)
        log.info(
            "run '%s': committed version %d (%d files, %d bytes, %d of them taken from earlier versions)",
            self.name,
            version,
            len(files),
            sum(e["size"] for e in entries.values()),
            linked,
        )
        return version

    def _reuse(self, file: Reuse, rel: str, version: int, r: Retrier) -> bool:
        """Put at ``rel`` the same bytes from the newest other version known intact that lists them; False
        if none does (or its file has gone since: retention by another process, say)."""
        for source in sorted(self._files, reverse=True):
            if source == version:
                continue
            for name, entry in self._files[source].items():
                if entry == file.entry:
                    src = version_rel(self.name, source, name)
                    try:
                        r(partial(self._b.copy, src, rel), f"copying {self._b.describe(src)}")
                    except FileNotFoundError:
                        break  # that version has lost it: try an older one
                    return True
        return False

    def _forget(self, version: int) -> None:
        self._intact.pop(version, None)
        self._files.pop(version, None)

    # -- housekeeping ----------------------------------------------------------------------------

    def _require_lease(self, what: str, r: Retrier) -> None:
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
        for version, names in sorted(self._listing(r).items()):
            with self._writing_lock:
                if version in self._writing:
                    continue
            if QUARANTINE in names and MANIFEST not in names:
                continue  # moved aside by retain(), which removes it in its time
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
            r(partial(self._b.delete_version, self.name, version), f"deleting {self._where(version)}")
            removed.append(version)
        return removed

    def retain(self, keep_last: int, keep_best: int = 1, metric: str | None = None, mode: str = "min") -> list[int]:
        """Keep the newest ``keep_last`` intact committed versions plus the ``keep_best`` best intact
        ones by ``meta["metrics"][metric]`` (lowest for mode "min", highest for "max"; ties go to the
        newer); delete the other committed versions. Returns the versions whose folders it deleted,
        ascending. Needs the run lease.

        Intact: every file has the size and sha256 its manifest lists. A version that fails is never
        counted among the kept ones (the next older intact version takes its place in the window): it
        is quarantined, its manifest moved aside to ``CORRUPT.json`` (with what failed), so that no
        loader sees it and its number is never given to a new commit, with a warning naming the
        version and the file. A later retain deletes a quarantined folder once it is older than every
        version kept, so its bytes stay for a look while they are recent and the run's size stays bounded.

        Cost: only candidates are verified, newest first and then best first, until ``keep_last`` and
        ``keep_best`` intact ones are found (:func:`store.retention.versions_to_keep`); versions that
        fall outside are deleted unread. A version this object committed (its digests were computed
        from the bytes it wrote) or loaded whole is not read again, so a training run that retains
        after each commit reads only manifests; the first retain after a resume reads the kept
        versions the resume did not load (``keep_last - 1`` checkpoints, typically). Bytes that change
        after this object wrote or checked them are caught by the next process's load or retain.
        """
        check_retention(keep_last, keep_best, mode)
        r = self._retrier()
        self._require_lease("retain", r)
        listing = self._listing(r)
        versions = sorted(v for v, names in listing.items() if MANIFEST in names)
        quarantined = {v for v, names in listing.items() if QUARANTINE in names and MANIFEST not in names}
        manifests: dict[int, tuple[dict, bytes]] = {}
        failed: dict[int, StoreError] = {}

        def manifest(version: int) -> tuple[dict, bytes] | None:
            if version not in manifests and version not in failed:
                try:
                    manifests[version] = self._read_manifest(version, r)
                except (CorruptCheckpoint, CheckpointNotFound) as exc:
                    failed[version] = exc
            return manifests.get(version)

        checked: dict[int, bool] = {}

        def intact(version: int) -> bool:
            if version not in checked:
                checked[version] = self._verify(version, manifest(version), failed, r)
            return checked[version]

        scores: dict[int, object] = {}
        if metric is not None and keep_best > 0:
            for version in versions:
                m = manifest(version)
                if m is not None:
                    scores[version] = (m[0]["meta"].get("metrics") or {}).get(metric)
        keep = versions_to_keep(versions, keep_last, keep_best, scores, mode, intact)
        self._check_lease(r)  # verifying may have taken a while: still the run's writer?
        now_quarantined = set()
        for version, exc in sorted(failed.items()):
            if isinstance(exc, CorruptCheckpoint) and checked.get(version) is False:
                self._quarantine(version, exc, manifests.get(version), r)
                now_quarantined.add(version)
        oldest_kept = min(keep, default=None)
        deleted = sorted(
            [v for v in versions if v not in keep and v not in now_quarantined]
            + [v for v in quarantined if oldest_kept is not None and v < oldest_kept]
        )
        for version in deleted:
            r(partial(self._b.delete_version, self.name, version), f"deleting {self._where(version)}")
            self._forget(version)
        if deleted:
            log.info("run '%s': retention deleted versions %s, kept %s", self.name, deleted, sorted(keep))
        return deleted

    def _verify(
        self, version: int, manifest: tuple[dict, bytes] | None, failed: dict[int, StoreError], r: Retrier
    ) -> bool:
        """Is a committed version intact (every file against its manifest)? A failure goes to ``failed``.

        ``manifest``: the version's (parsed manifest, bytes), None if it could not be read (then
        ``failed`` already holds why). A version known intact with this very manifest is not read again.
        """
        if manifest is None:
            return False
        parsed, raw = manifest
        digest = hashlib.sha256(raw).hexdigest()
        if self._intact.get(version) == digest:
            return True
        try:
            for name, entry in parsed["files"].items():
                self._read_file(version, name, entry, r)  # checked, then dropped: one file in memory at a time
        except (CorruptCheckpoint, CheckpointNotFound) as exc:
            failed[version] = exc
            return False
        self._intact[version] = digest
        self._files[version] = parsed["files"]
        return True

    def _quarantine(
        self, version: int, exc: CorruptCheckpoint, manifest: tuple[dict, bytes] | None, r: Retrier
    ) -> None:
        """Move a corrupt version's manifest aside: ``CORRUPT.json`` (what failed, and the manifest's
        text) is written first, then MANIFEST.json removed, so a crash in between leaves the version
        as it was (visible, and found corrupt again by the next retain)."""
        log.warning(
            "run '%s': version %d failed its check and is never kept: file '%s' %s; quarantined: its manifest "
            "is moved aside to %s (no loader reads it; retention deletes the folder once every kept version is newer)",
            self.name,
            version,
            exc.file,
            exc.problem,
            self._where(version, QUARANTINE),
        )
        record = {
            "run": self.name,
            "version": version,
            "file": exc.file,
            "problem": exc.problem,
            "quarantined_at": time.time(),
            "manifest": manifest[1].decode("utf-8", errors="replace") if manifest is not None else None,
        }
        qrel = version_rel(self.name, version, QUARANTINE)
        body = (json.dumps(record, indent=2) + "\n").encode("utf-8")
        r(partial(self._b.write, qrel, body), f"writing {self._b.describe(qrel)}")
        mrel = version_rel(self.name, version, MANIFEST)
        r(partial(self._b.delete, mrel), f"deleting {self._b.describe(mrel)}")
        self._forget(version)

    # -- the run lease ---------------------------------------------------------------------------

    def acquire(self, owner: str, *, lease_timeout: float = 60.0) -> Lease:
        """Take the run's lease (``<run>/LOCK.json``), or raise RunLocked naming the live holder.

        A stale lease (its process gone on this host, or no heartbeat for ``lease_timeout`` s) is
        taken over atomically; the old holder then gets LeaseLost on its next heartbeat or commit.
        Call :meth:`Lease.heartbeat` more often than ``lease_timeout``.
        """
        self._lease = acquire(self, self._b.lease_ops(self.name), owner, lease_timeout, self._retrier())
        return self._lease

    def _check_lease(self, r: Retrier) -> None:
        if self._lease is not None:
            self._lease._check(r)
