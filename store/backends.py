"""The few primitives a run needs from where its bytes live, and the URI that picks the back end.

``/path`` or ``file:///abs/path``: :class:`store.local.LocalBackend`; ``s3://bucket/prefix?...``:
:class:`store.s3.S3Backend`. Paths handed to a back end are ``/``-joined and relative to its root
(``<run>/ckpt-00000001/policy.safetensors``, see :mod:`store.layout`); names in them are checked
before they get here.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import unquote, urlsplit

from store.lease import LeaseOps
from store.local import LocalBackend
from store.s3 import S3Backend


class Backend(Protocol):
    """What :class:`store.RunStore` asks of a back end."""

    def describe(self, rel: str = "") -> str:
        """The full location of ``rel`` (or of the root) for messages: a path or an s3:// URI."""

    def list_run(self, run: str) -> dict[int, set[str]]:
        """{version: names of the files in its folder} of every version folder of the run."""

    def read(self, rel: str) -> bytes:
        """The whole file; FileNotFoundError if it is not there."""

    def list_files(self, rel: str) -> dict[str, int]:
        """{path below ``rel``: size} of every file under the folder ``rel`` (recursive; {} if none)."""

    def make_dirs(self, rel: str) -> None:
        """Create the folder ``rel`` where folders exist (a no-op on S3)."""

    def write(self, rel: str, data: bytes) -> None:
        """Atomic: a reader sees the old file or the whole new one."""

    def copy(self, src_rel: str, rel: str) -> None:
        """``rel`` becomes the file ``src_rel`` without its bytes passing through here (a hard link; a
        server-side copy on S3); atomic. FileNotFoundError if ``src_rel`` is not there."""

    def publish(self, rel: str, data: bytes) -> bool:
        """Create-only: False if the file already exists (the manifest's commit)."""

    def delete(self, rel: str) -> None:
        """Remove one file; no error if it is not there."""

    def prepare_version(self, run: str, version: int) -> bool:
        """Reserve the version's number; False if it is taken (a folder on disk; a manifest or quarantine on S3)."""

    def sync_dir(self, rel: str) -> None:
        """Make the folder's entries durable (a no-op where there are no folders)."""

    def delete_version(self, run: str, version: int) -> None:
        """Remove a version, manifest first, so that a crash half-way leaves it invisible."""

    def lease_ops(self, run: str) -> LeaseOps:
        """The lease primitives on the run's LOCK.json."""


def open_backend(uri: str) -> LocalBackend | S3Backend:
    """The back end for a store URI (a path, ``file:///abs/path`` or ``s3://bucket/prefix?...``); no I/O."""
    if not uri:
        raise ValueError("store URI is empty: give a path, file:///abs/path or s3://bucket/prefix")
    scheme = urlsplit(uri).scheme.lower()
    if scheme == "s3":
        return S3Backend(uri)
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"store URI {uri!r}: file:// URIs must be local (file:///abs/path)")
        return LocalBackend(unquote(parts.path))
    if "://" in uri:
        raise ValueError(f"store URI {uri!r}: unsupported scheme '{scheme}'; use a path, file:// or s3://")
    return LocalBackend(uri)
