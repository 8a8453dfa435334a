"""Files: all-or-nothing writes, a file's sha256, and where caches live.

All-or-nothing file writes: a reader sees the old file or the whole new one, never half of one.

Every writer of a result (reports, scenario files, caches, PLYs, PNGs, videos) writes a temporary file
beside the target and renames it over the target (``os.replace``, atomic on one file system). The
temporary name is unique to the process and the call, so two processes writing the same target never
write into one file; a failed write removes its temporary file and leaves the target as it was.

    atomic_write(path, text_or_bytes)               # the common case
    with atomic_path(path, suffix=".npz") as tmp:   # a library writes the file (np.savez, PIL, imageio)
        np.savez(tmp, **arrays)

(The checkpoint store has its own, in ``store.local``: it sits beside ``sim`` in the layers.)

:func:`sha256_file` is the one digest of a file's bytes (exported policies, cache keys, frame
shards); :func:`cache_dir` the one place caches live (built-in suites, demonstrations, perception frames).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CACHE_VAR", "atomic_path", "atomic_write", "cache_dir", "sha256_file", "temporary_path"]

CACHE_VAR = "SPLATDRIVE_CACHE"  # the environment variable that moves every cache
REPO = Path(__file__).resolve().parents[1]


def temporary_path(path: str | Path, suffix: str = "") -> Path:
    """A hidden name beside ``path``, unique to this process and call, for a writer that streams into
    it and renames it over ``path`` itself when done; ``suffix`` keeps the extension a library reads."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{suffix}")


@contextmanager
def atomic_path(path: str | Path, suffix: str = "", *, mkdir: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; when the block ends without an exception it
    replaces ``path``, otherwise it is removed and ``path`` is untouched. ``suffix`` ends the temporary
    name (for writers that pick the format by extension or append one, as ``np.savez`` does)."""
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path, suffix)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"atomic write of {path}: nothing was written to {tmp}")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(
    path: str | Path, data: str | bytes | Iterable[bytes | memoryview], *, fsync: bool = False, mkdir: bool = True
) -> Path:
    """Write ``data`` (text as UTF-8, bytes, or bytes-like parts in order) to ``path`` all or nothing;
    ``fsync`` flushes it to disk before the rename (for files that must survive a crash, not only a
    failed process). Returns ``path``."""
    path = Path(path)
    parts: Iterable[bytes | memoryview]
    if isinstance(data, str):
        parts = [data.encode("utf-8")]
    elif isinstance(data, bytes | bytearray | memoryview):
        parts = [data]
    else:
        parts = data
    with atomic_path(path, mkdir=mkdir) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    if fsync and hasattr(os, "O_DIRECTORY"):  # make the rename itself durable (POSIX)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return path


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, 64 hex digits, read ``chunk_bytes`` at a time (constant memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_bytes), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_dir(name: str) -> Path:
    """The folder of the cache ``name`` (``"scenarios"``, ``"demos"``...), not created here:
    ``$SPLATDRIVE_CACHE/<name>`` when the variable is set (``~`` expanded), else ``<repo>/.cache/<name>``
    when running from a checkout (the package's parent holds pyproject.toml), else
    ``~/.cache/splatdrive/<name>`` (an installed package, whose folder may not be writable)."""
    env = os.environ.get(CACHE_VAR)
    if env:
        return Path(env).expanduser() / name
    if (REPO / "pyproject.toml").is_file():
        return REPO / ".cache" / name
    return Path.home() / ".cache" / "splatdrive" / name
