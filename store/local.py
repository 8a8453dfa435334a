"""The local back end: a directory on a local or shared file system (NFS, a FUSE mount).

Files are written to a temporary name, fsync'ed and renamed (or hard-linked, for create-only), and
their folder fsync'ed, so a crash leaves either the whole file or none of it. The run lease is
``LOCK.json`` created with ``O_CREAT|O_EXCL`` and rewritten in place through its open descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from store.layout import MANIFEST, lock_rel, parse_version_dir, version_dir, version_rel
from store.lease import parse_lease_record

log = logging.getLogger(__name__)


# What os.link raises on a file system without hard links (FUSE mounts of object stores, some network shares).
_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def _tmp_beside(final: str) -> str:
    """A fresh hidden name in ``final``'s folder, for a file renamed or linked onto ``final`` once whole."""
    return os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp-{uuid.uuid4().hex}")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBackend:
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
            version = parse_version_dir(entry.name)
            if version is not None and entry.is_dir():
                try:
                    out[version] = set(os.listdir(entry.path))
                except FileNotFoundError:  # removed by cleanup/retain while we listed
                    continue
        return out

    def read(self, rel: str) -> bytes:
        with open(self.describe(rel), "rb") as f:
            return f.read()

    def list_files(self, rel: str) -> dict[str, int]:
        """{path below ``rel`` ('/'-joined): size in bytes} of every file under the folder ``rel``
        (recursive; empty if there is no such folder)."""
        base = self.describe(rel)
        out: dict[str, int] = {}
        for folder, _, names in os.walk(base):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    out[os.path.relpath(path, base).replace(os.sep, "/")] = os.stat(path).st_size
                except FileNotFoundError:  # replaced or removed while we walked
                    continue
        return out

    def make_dirs(self, rel: str) -> None:
        """Create the folder ``rel`` and its parents (for files written outside version folders)."""
        os.makedirs(self.describe(rel), exist_ok=True)

    def _write_tmp(self, final: str, data: bytes) -> str:
        tmp = _tmp_beside(final)
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

    def copy(self, src_rel: str, rel: str) -> None:
        """``rel`` becomes the file ``src_rel`` (atomic): a hard link, so no byte is written again and
        deleting either name leaves the other whole; a copy where the file system has no hard links.
        FileNotFoundError if ``src_rel`` is not there."""
        src, final = self.describe(src_rel), self.describe(rel)
        tmp = _tmp_beside(final)
        try:
            try:
                os.link(src, tmp)
            except OSError as exc:
                if exc.errno not in (*_NO_HARD_LINKS, errno.EXDEV):
                    raise
                shutil.copyfile(src, tmp)
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, final)  # a no-op that leaves tmp where final already is this very file
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def publish(self, rel: str, data: bytes) -> bool:
        """Create-only and atomic (tmp + fsync + link): False if the file already exists."""
        final = self.describe(rel)
        tmp = self._write_tmp(final, data)
        try:
            os.link(tmp, final)  # fails if final exists, and shows the content whole or not at all
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
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
        fsync_dir(os.path.dirname(final))
        return True

    def delete(self, rel: str) -> None:
        """Remove one file (its folder fsync'ed); no error if it is not there."""
        path = self.describe(rel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        fsync_dir(os.path.dirname(path))

    def prepare_version(self, run: str, version: int) -> bool:
        """Create the version folder; False if it exists (another writer took that number)."""
        run_dir = self.describe(run)
        if not os.path.isdir(run_dir):
            os.makedirs(run_dir, exist_ok=True)
            fsync_dir(os.path.dirname(run_dir))
        try:
            os.mkdir(os.path.join(run_dir, version_dir(version)))
        except FileExistsError:
            return False
        fsync_dir(run_dir)
        return True

    def sync_dir(self, rel: str) -> None:
        fsync_dir(self.describe(rel))

    def delete_version(self, run: str, version: int) -> None:
        """Manifest first, so a crash half-way leaves an invisible folder, never a broken visible one."""
        vdir = self.describe(version_rel(run, version))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(vdir, MANIFEST))
            fsync_dir(vdir)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(vdir)
        fsync_dir(self.describe(run))

    def lease_ops(self, run: str) -> LocalLeaseOps:
        return LocalLeaseOps(self.describe(lock_rel(run)))


@dataclass
class LocalHandle:
    fd: int
    dev: int
    ino: int


class LocalLeaseOps:
    """LOCK.json on a file system. The holder keeps it open and rewrites it in place through its fd,
    so a holder that was taken over (its file renamed away) can never clobber the new lease."""

    def __init__(self, path: str):
        self.path = path
        self.where = path
        self.settle = 0.0  # O_EXCL and rename are atomic: no need to look again

    def create(self, body: bytes) -> LocalHandle | None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        try:
            os.pwrite(fd, body, 0)
            os.fsync(fd)
            fsync_dir(os.path.dirname(self.path))
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        return LocalHandle(fd, st.st_dev, st.st_ino)

    def _read_file(self, path: str) -> tuple[dict | None, tuple[int, int] | None, float | None]:
        for attempt in range(3):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read()
            except FileNotFoundError:
                return None, None, None
            record = parse_lease_record(data)
            if record is not None or attempt == 2:
                return record, (st.st_dev, st.st_ino), st.st_mtime
            time.sleep(0.02)  # the holder may sit between its O_EXCL create and its first write
        raise AssertionError("unreachable")

    def read(self) -> tuple[dict | None, Any, float | None]:
        """(record or None if unreadable, tag or None if absent, mtime)."""
        return self._read_file(self.path)

    def adopt(self, tag: Any) -> LocalHandle | None:
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != tag:
            os.close(fd)
            return None
        return LocalHandle(fd, st.st_dev, st.st_ino)

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

    def takeover(self, tag: Any, body: bytes, stale: Callable[[dict | None, float], str | None]) -> LocalHandle | None:
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

    def verify(self, h: LocalHandle, token: str = "") -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == (h.dev, h.ino)

    def refresh(self, h: LocalHandle, body: bytes, token: str) -> bool:
        if not self.verify(h):
            return False
        os.pwrite(h.fd, body, 0)
        os.fsync(h.fd)
        return True

    def release(self, h: LocalHandle, token: str = "") -> None:
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
            fsync_dir(os.path.dirname(self.path))
        finally:
            with contextlib.suppress(OSError):
                os.close(h.fd)

    def close(self, h: LocalHandle) -> None:
        with contextlib.suppress(OSError):
            os.close(h.fd)
