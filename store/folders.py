"""Plain files in a store beside the checkpoints: a run's tracking files, a report folder.

    <root>/<run>/tracking/<path>      a run's tracking files (learner.tracking): metrics.jsonl, run.json,
                                      config.yaml, summary.json, TensorBoard event files, reports
    <any store URI>/<path>            a report folder given as a URI (``python -m evaluation --out s3://...``)

A :class:`StoreFolder` writes whole files through the store's back ends (atomic per file: a reader sees
the old file or the new one; S3 has no append, so a growing file is uploaded whole again), lists and
reads them back. Nothing in it is ever taken for a checkpoint: no path segment may look like a version
folder (``ckpt-00000003``) or a lease (``LOCK.json``), so a run's version listing, ``cleanup`` and
``retain`` never see these files, and these files never shadow a run's.

A :class:`FolderMirror` keeps a local folder copied into a StoreFolder: :meth:`FolderMirror.push` uploads
the files that changed (size or modification time) since it last looked, :meth:`FolderMirror.pull`
copies the StoreFolder into the local folder. :class:`OutputFolder` is the report folder of a tool whose
``--out`` may be a local path (written in place) or a store URI (written into a local scratch copy and
pushed).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

from store.backends import open_backend
from store.layout import LOCK, parse_version_dir
from store.retries import RetryPolicy, retry

SCRATCH_VAR = "SPLATDRIVE_SCRATCH"  # where local working copies go (scratch_folder)
TRACKING = "tracking"  # <run>/tracking/: a run's tracking files (no version folder is ever named so)

SEGMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@=+-]{0,254}")


def check_path(path: str) -> str:
    """A file's path in a StoreFolder: '/'-joined segments of ``[A-Za-z0-9][A-Za-z0-9._@=+-]*`` (at most
    255 characters each), none of them ``..``, a version folder's name (``ckpt-XXXXXXXX``) or the
    lease's (``LOCK.json``). Raises ValueError naming the path and the rule."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"store folder path must be a non-empty str, got {path!r}")
    for seg in path.split("/"):
        if not SEGMENT_RE.fullmatch(seg) or ".." in seg:
            raise ValueError(
                f"store folder path {path!r}: segment {seg!r} is not allowed (1-255 characters from A-Z a-z "
                "0-9 . _ @ = + -, starting with a letter or digit, no '..')"
            )
        if parse_version_dir(seg) is not None or seg.startswith(LOCK):
            raise ValueError(
                f"store folder path {path!r}: segment {seg!r} is a checkpoint version's or a lease's name, which "
                "the store keeps for its runs"
            )
    return path


def is_uri(text: str) -> bool:
    """True for a store URI with a scheme (``s3://...``, ``file://...``), False for a plain path."""
    return "://" in text


def join_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path; an S3 query (endpoint, credentials) stays at the end:
    ``join_uri("s3://b/p?endpoint_override=h:9000", "run")`` is ``s3://b/p/run?endpoint_override=h:9000``."""
    head, mark, query = uri.partition("?") if is_uri(uri) else (uri, "", "")
    head = head.rstrip("/") or head
    for part in parts:
        head = f"{head.rstrip('/')}/{part.strip('/')}"
    return head + mark + query


def split_uri(uri: str) -> tuple[str, str]:
    """(parent URI, last path segment): the inverse of :func:`join_uri` for one segment. ValueError if
    there is no parent."""
    head, mark, query = uri.partition("?") if is_uri(uri) else (uri, "", "")
    parent, _, last = head.rstrip("/").rpartition("/")
    if not last or not parent or parent.endswith(":/"):
        raise ValueError(
            f"{uri!r}: expected <store>/<name> (a path, file:///abs/path/<name> or s3://bucket/prefix/<name>)"
        )
    return parent + mark + query, last


def scratch_folder(key: str, name: str = "") -> Path:
    """A local folder for the working copy of the store folder ``key`` (its URI): the same one for the
    same key in later processes of this user, ``<root>/<name>-<hash of key>`` (``name``: the key's last
    segment by default). The root is ``$SPLATDRIVE_SCRATCH``, else ``<tmp>/splatdrive-<uid>``."""
    head = key.partition("?")[0] if is_uri(key) else key
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name or head.rstrip("/").rpartition("/")[2]) or "out"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    root = os.environ.get(SCRATCH_VAR) or os.path.join(tempfile.gettempdir(), f"splatdrive-{os.getuid()}")
    return Path(root) / f"{name}-{digest}"


class StoreFolder:
    """The files under ``rel`` in the store at ``uri`` (a path, ``file:///abs/path`` or
    ``s3://bucket/prefix?...``): write, read and list them. ``retry`` governs every operation."""

    def __init__(self, uri: str | os.PathLike, rel: str = "", *, retry: RetryPolicy | None = None):
        self._b = open_backend(os.fspath(uri))
        self.rel = rel.strip("/")
        if self.rel:
            check_path(self.rel)
        self.retry = retry if retry is not None else RetryPolicy()

    @classmethod
    def of_run(cls, store_uri: str | os.PathLike, run: str, *, retry: RetryPolicy | None = None) -> StoreFolder:
        """A run's tracking folder, ``<store>/<run>/tracking``."""
        from store.names import check_name

        return cls(store_uri, f"{check_name('run', run)}/{TRACKING}", retry=retry)

    def _rel(self, path: str) -> str:
        check_path(path)
        return f"{self.rel}/{path}" if self.rel else path

    @property
    def uri(self) -> str:
        """Where the folder is, for messages (a path or ``s3://bucket/key``, without the query)."""
        return self._b.describe(self.rel)

    @property
    def local_path(self) -> Path | None:
        """The folder as a local path, for a store on a file system; None on S3."""
        from store.local import LocalBackend

        return Path(self._b.describe(self.rel)) if isinstance(self._b, LocalBackend) else None

    def write(self, path: str, data: bytes, *, policy: RetryPolicy | None = None) -> None:
        """Write one file whole (replacing any earlier one), atomically."""
        rel = self._rel(path)
        parent = rel.rpartition("/")[0]
        where = self._b.describe(rel)
        p = policy or self.retry
        retry(lambda: self._b.make_dirs(parent), p, what=f"creating {self._b.describe(parent)}")
        retry(lambda: self._b.write(rel, bytes(data)), p, what=f"writing {where}")

    def read(self, path: str) -> bytes:
        """One file's bytes; FileNotFoundError if it is not there."""
        rel = self._rel(path)
        return retry(lambda: self._b.read(rel), self.retry, what=f"reading {self._b.describe(rel)}")

    def list(self) -> dict[str, int]:
        """{path: size in bytes} of every file in the folder (a local writer's temporaries left out)."""
        found = retry(lambda: self._b.list_files(self.rel), self.retry, what=f"listing {self.uri}")
        out = {}
        for path, size in found.items():
            try:
                out[check_path(path)] = size
            except ValueError:  # a temporary of an interrupted local write (.name.tmp-...), or foreign
                continue
        return dict(sorted(out.items()))

    def __repr__(self) -> str:
        return f"StoreFolder({self.uri!r})"


def local_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(path relative to ``folder``, '/'-joined; the file) of every file under ``folder`` that a
    StoreFolder can hold (hidden temporaries and other names it refuses are left out)."""
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if SEGMENT_RE.fullmatch(d))
        for name in sorted(names):
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            try:
                check_path(rel)
            except ValueError:
                continue
            yield rel, path


class FolderMirror:
    """A local folder kept copied into a StoreFolder, one whole file at a time.

    ``push()`` uploads each file whose (size, modification time) differs from when it was last
    uploaded or pulled; files that vanished locally are left in the store. Not thread-safe by itself:
    the caller that writes the folder passes its lock to ``push`` (the files are read under it, uploaded
    outside it)."""

    def __init__(self, local: str | os.PathLike, remote: StoreFolder):
        self.local = Path(local)
        self.remote = remote
        self._sent: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) of what the store has

    def pull(self) -> dict[str, int]:
        """Copy every file of the store folder into the local folder; {path: size}."""
        got = {}
        for path in self.remote.list():
            data = self.remote.read(path)
            dest = self.local / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.pull-{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
            st = dest.stat()
            self._sent[path] = (st.st_size, st.st_mtime_ns)
            got[path] = len(data)
        return got

    def changed(self) -> list[tuple[str, Path, tuple[int, int]]]:
        """(path, local file, its (size, mtime_ns)) of every local file the store does not have as it is."""
        out = []
        for rel, path in local_files(self.local):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            key = (st.st_size, st.st_mtime_ns)
            if self._sent.get(rel) != key:
                out.append((rel, path, key))
        return out

    def push(self, lock: threading.Lock | None = None, policy: RetryPolicy | None = None) -> list[str]:
        """Upload the files that changed; their paths. ``lock``: held while the files are read (the
        writer's, so that no file is read half-written); ``policy``: the retries (the folder's default)."""
        snapshot = []
        with lock if lock is not None else nullcontext():
            for rel, path, key in self.changed():
                try:
                    snapshot.append((rel, path.read_bytes(), key))
                except FileNotFoundError:
                    continue
        for rel, data, key in snapshot:
            self.remote.write(rel, data, policy=policy)
            self._sent[rel] = key
        return [rel for rel, _, _ in snapshot]


class OutputFolder:
    """A tool's report folder: ``out`` is a local folder (written in place) or a store URI with a scheme
    (``s3://bucket/prefix/evaluations/x``, ``file:///abs/path``), written into a local scratch copy
    (:func:`scratch_folder`) that :meth:`sync` pushes; ``resume``: first copy what the store folder holds
    into the scratch copy (a tool that reads its earlier results back)."""

    def __init__(self, out: str, *, resume: bool = False):
        self.out = out
        self.mirror: FolderMirror | None = None
        if is_uri(out):
            remote = StoreFolder(out)
            self.path = scratch_folder(out)
            shutil.rmtree(self.path, ignore_errors=True)  # an older copy: the store holds the truth
            self.path.mkdir(parents=True, exist_ok=True)
            self.mirror = FolderMirror(self.path, remote)
            if resume:
                self.mirror.pull()
        else:
            self.path = Path(out)
            self.path.mkdir(parents=True, exist_ok=True)

    @property
    def where(self) -> str:
        """The folder as the user named it (a path, or the store URI without its query)."""
        return self.describe(self.out)

    @staticmethod
    def describe(out: str) -> str:
        """``out`` for messages: a path as it is, a store URI without its query (credentials); no I/O."""
        return StoreFolder(out).uri if is_uri(out) else out

    def sync(self) -> list[str]:
        """Push what changed to the store (nothing to do for a local folder); the paths pushed."""
        return self.mirror.push() if self.mirror is not None else []
