"""Where things are in a store, and what a manifest holds. The one owner of version folder names
(``ckpt-00000003``) and of the ``run@version`` / ``run@latest`` syntax::

    <root>/<run>/LOCK.json                     the run lease (store.lease)
    <root>/<run>/ckpt-00000001/<file>          payload files, written first
    <root>/<run>/ckpt-00000001/MANIFEST.json   written last, create-only: the commit marker
    <root>/<run>/ckpt-00000006/CORRUPT.json    instead of MANIFEST.json: a version that failed its
                                               check, moved aside by retention (no loader reads it)

A manifest lists every file with its size and sha256, plus the caller's meta (iteration,
env_steps, metrics...), ``wall_time`` and ``format_version``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from store.names import check_name, is_valid_name

MANIFEST = "MANIFEST.json"
QUARANTINE = "CORRUPT.json"  # a quarantined version's manifest, moved aside (see RunStore.retain)
LOCK = "LOCK.json"
FORMAT_VERSION = 1
LATEST = "latest"

VERSION_DIR_RE = re.compile(r"ckpt-(\d{8,})")
SHA256_RE = re.compile(r"[0-9a-f]{64}")


# --------------------------------------------------------------------------------------------------
# Versions and references


def check_version(version: object) -> int:
    """``version`` if it is an int >= 1, else ValueError."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"checkpoint version must be an int >= 1, got {version!r}")
    return version


def version_dir(version: int) -> str:
    """The folder name of a version: ``ckpt-`` and at least 8 digits (``ckpt-00000003``)."""
    return f"ckpt-{version:08d}"


def parse_version_dir(name: str) -> int | None:
    """The version a folder name stands for (``ckpt-00000003`` -> 3), or None if it is no version folder."""
    m = VERSION_DIR_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def version_rel(run: str, version: int, file: str | None = None) -> str:
    """``<run>/ckpt-XXXXXXXX[/<file>]``, relative to the store's root."""
    rel = f"{run}/{version_dir(version)}"
    return f"{rel}/{file}" if file else rel


def lock_rel(run: str) -> str:
    """``<run>/LOCK.json``, relative to the store's root."""
    return f"{run}/{LOCK}"


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``run`` / ``run@latest`` -> (run, None); ``run@3`` -> (run, 3). None stands for the newest
    committed version. The run name is not checked here (:meth:`store.CheckpointStore.run` does).

    Raises ValueError ("no run name", or "version 'x' is neither an int >= 1 nor 'latest'"); callers
    add which input it was.
    """
    run, at, ver = ref.partition("@")
    if not run:
        raise ValueError("no run name")
    if not at or ver == LATEST:
        return run, None
    if not ver.isdigit() or int(ver) < 1:
        raise ValueError(f"version {ver!r} is neither an int >= 1 nor {LATEST!r}")
    return run, int(ver)


# --------------------------------------------------------------------------------------------------
# Commit payloads and manifests


@dataclass(frozen=True)
class Reuse:
    """A commit's file that an earlier version of the same run may already hold, named by its content.

    :meth:`store.RunStore.commit` takes it from the newest version that RunStore knows intact (committed
    or loaded whole by it) whose manifest lists a file of this size and sha256 (a hard link where there
    are folders, a server-side copy on S3: its bytes pass through nothing), and calls ``make()`` for the
    bytes only where none does, checking them against the digest. For large files that most checkpoints
    carry unchanged (the labelled states DAgger aggregated, one file a round), which would otherwise be
    serialised, hashed and written whole at every checkpoint. The manifest lists the file as any other,
    and loading checks it as any other; on a file system the versions that share a file share one copy
    of it on disk, so damage to it shows in each of them.
    """

    size: int
    sha256: str
    make: Callable[[], bytes]

    @classmethod
    def of(cls, data: bytes, make: Callable[[], bytes]) -> Reuse:
        """The Reuse of ``data`` (which ``make`` gives again), from its bytes at hand now."""
        entry = file_entry(data)
        return cls(entry["size"], entry["sha256"], make)

    @property
    def entry(self) -> dict:
        return {"size": self.size, "sha256": self.sha256}

    def bytes(self) -> bytes:
        """``make()``, checked against the size and digest."""
        data = self.make()
        if file_entry(data) != self.entry:
            raise ValueError(f"Reuse.make() gave {len(data)} bytes that do not match {self.entry}")
        return data


def check_payload(
    run: str, files: Mapping[str, bytes | Reuse], meta: Mapping[str, Any]
) -> tuple[dict[str, bytes | Reuse], dict]:
    """Validate a commit's inputs before any I/O; returns private copies (the caller may mutate its own)."""
    if not isinstance(files, Mapping):
        raise ValueError(f"commit to run '{run}': files must be a dict of name -> bytes, got {type(files).__name__}")
    out: dict[str, bytes | Reuse] = {}
    for name, data in files.items():
        check_name("file", name)
        if name in (MANIFEST, QUARANTINE):
            raise ValueError(f"commit to run '{run}': file name {name!r} is reserved for the manifest")
        if isinstance(data, Reuse):
            if validate_entry(data.entry) or not callable(data.make):
                raise ValueError(f"commit to run '{run}': file '{name}': {data!r} needs a size, a sha256 and make()")
            out[name] = data
            continue
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"commit to run '{run}': file '{name}' must be bytes, got {type(data).__name__}")
        out[name] = bytes(data)
    if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
        raise ValueError(f"commit to run '{run}': meta must be a dict with str keys")
    try:
        meta_copy = json.loads(json.dumps(dict(meta), allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"commit to run '{run}': meta must be JSON-serialisable: {exc}") from None
    for key in ("iteration", "env_steps"):
        value = meta_copy.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"commit to run '{run}': meta['{key}'] must be an int >= 0, got {value!r}")
    if "metrics" in meta_copy and not isinstance(meta_copy["metrics"], dict):
        raise ValueError(f"commit to run '{run}': meta['metrics'] must be a dict of name -> number")
    return out, meta_copy


def file_entry(data: bytes) -> dict:
    """A manifest's entry for one file: ``{"size", "sha256"}``."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def manifest_bytes(run: str, version: int, meta: dict, entries: Mapping[str, dict]) -> bytes:
    """The MANIFEST.json of a commit, stamped with the wall time now."""
    manifest = {
        "format_version": FORMAT_VERSION,
        "run": run,
        "version": version,
        "wall_time": time.time(),
        "meta": meta,
        "files": dict(entries),
    }
    return (json.dumps(manifest, indent=2, allow_nan=True) + "\n").encode("utf-8")


def validate_manifest(obj: object, run: str, version: int) -> str | None:
    """What is wrong with a parsed manifest, or None."""
    if not isinstance(obj, dict):
        return "is not a JSON object"
    fv = obj.get("format_version")
    if fv != FORMAT_VERSION:
        return f"has format_version {fv!r}; this code reads {FORMAT_VERSION} (written by another splatdrive version?)"
    if obj.get("run") != run or obj.get("version") != version:
        return f"names run {obj.get('run')!r} version {obj.get('version')!r}, not run '{run}' version {version}"
    if not isinstance(obj.get("meta"), dict) or not isinstance(obj.get("wall_time"), (int, float)):
        return "lacks 'meta' (an object) or 'wall_time' (a number)"
    files = obj.get("files")
    if not isinstance(files, dict):
        return "lacks 'files' (an object)"
    for name, entry in files.items():
        if not is_valid_name(name) or name in (MANIFEST, QUARANTINE):
            return f"lists an invalid file name {name!r}"
        problem = validate_entry(entry)
        if problem:
            return f"entry for '{name}' {problem}"
    return None


def validate_entry(entry: object) -> str | None:
    """What is wrong with one file's manifest entry (``{"size", "sha256"}``), or None."""
    if not isinstance(entry, dict):
        return "is not an object"
    size, digest = entry.get("size"), entry.get("sha256")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return "has no valid size"
    if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
        return "has no valid sha256"
    return None
