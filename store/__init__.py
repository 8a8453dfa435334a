"""The checkpoint store: versioned, checksummed checkpoints of training runs behind one URI.

The root is a plain path, ``file:///abs/path`` or ``s3://bucket/prefix``. For S3 the endpoint,
region and credentials come from the URI query
(``?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1&access_key=..&secret_key=..``)
and/or the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``...).
Layout, the same on both::

    <root>/<run>/LOCK.json                     the run lease {owner, host, pid, heartbeat, token, ...}
    <root>/<run>/LOCK.json.takeover            (local only) flock'ed while a stale lease is taken over
    <root>/<run>/ckpt-00000001/<file>          payload files, written first
    <root>/<run>/ckpt-00000001/MANIFEST.json   written last, create-only: every file's size and
                                               sha256, plus the caller's meta (iteration, env_steps,
                                               metrics...), wall_time and format_version
    <root>/<run>/ckpt-00000002/...
    <root>/<run>/tracking/<path>               the run's tracking files (metrics, TensorBoard events...):
                                               plain files beside the versions, never taken for one
    <root>/<run>/ckpt-00000003/CORRUPT.json    instead of MANIFEST.json: a version that failed its check,
                                               moved aside by retention (RunStore.retain) and never loaded

A checkpoint is visible only once its manifest exists (the commit marker, as in
torch.distributed.checkpoint and Orbax); a folder without one (nor CORRUPT.json) is a crashed or
in-flight write that readers never see and :meth:`RunStore.cleanup` removes. Versions are found by
listing, never through a mutable "latest" pointer (``run@latest`` means the newest committed
version). Loading checks every file against the manifest. A file that an earlier version holds
unchanged can be committed as :class:`Reuse` (its size and sha256, and how to make it): it is linked
(a hard link; a server-side copy on S3) rather than serialised and written again.

Two writers on one run are kept apart by a lease, ``LOCK.json``, created create-only (local:
``O_CREAT|O_EXCL``; S3: PUT with ``If-None-Match: *``) and taken over atomically once stale (holder
process gone, or no heartbeat for ``lease_timeout``). Every store operation goes through
:func:`retry` (exponential backoff with jitter on transient errors only); :class:`AsyncCommitter`
commits in the background so that training goes on while the store is down.

Nothing read from the store is ever unpickled: payloads are bytes, tensors travel as safetensors
(:func:`tensors_to_bytes`) and everything else as JSON (:func:`json_bytes`,
:func:`state_to_payload` for nested python + tensor structures such as optimizer state).

Modules, bottom up (this package imports nothing from the rest of splatdrive): ``errors``,
``names`` (one path segment per name), ``retries`` (:class:`RetryPolicy`, :func:`retry`),
``layout`` (version folder names, ``run@version`` refs, the manifest), ``codec`` (safetensors and
JSON payloads), ``lease`` (the run lease), ``local`` and ``s3`` (the back ends), ``backends``
(the URI -> back end), ``retention`` (keep_last + best), ``checkpoint_store``
(:class:`CheckpointStore`, :class:`RunStore`), ``committer`` (:class:`AsyncCommitter`) and ``folders``
(plain files beside the checkpoints: :class:`StoreFolder`, :class:`FolderMirror`, :class:`OutputFolder`).
"""

from store.checkpoint_store import Checkpoint, CheckpointStore, RunStore
from store.codec import (
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    json_safe,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    payload_to_state,
    state_to_payload,
    tensors_to_bytes,
)
from store.committer import AsyncCommitter
from store.errors import CheckpointNotFound, CorruptCheckpoint, LeaseLost, RunLocked, StoreError, StoreUnavailable
from store.folders import (
    TRACKING,
    FolderMirror,
    OutputFolder,
    StoreFolder,
    is_uri,
    join_uri,
    scratch_folder,
    split_uri,
)
from store.layout import FORMAT_VERSION, LATEST, LOCK, MANIFEST, Reuse, parse_ref, parse_version_dir, version_dir
from store.lease import Lease
from store.names import check_name
from store.retries import RetryPolicy, is_transient, retry

__all__ = [
    "FORMAT_VERSION",
    "LATEST",
    "LOCK",
    "MANIFEST",
    "TRACKING",
    "AsyncCommitter",
    "Checkpoint",
    "CheckpointNotFound",
    "CheckpointStore",
    "CorruptCheckpoint",
    "FolderMirror",
    "Lease",
    "LeaseLost",
    "OutputFolder",
    "RetryPolicy",
    "Reuse",
    "RunLocked",
    "RunStore",
    "StoreError",
    "StoreFolder",
    "StoreUnavailable",
    "bytes_to_tensors",
    "check_name",
    "from_json_bytes",
    "is_transient",
    "is_uri",
    "join_uri",
    "json_bytes",
    "json_safe",
    "optimizer_state_from_payload",
    "optimizer_state_to_payload",
    "parse_ref",
    "parse_version_dir",
    "payload_to_state",
    "retry",
    "scratch_folder",
    "split_uri",
    "state_to_payload",
    "tensors_to_bytes",
    "version_dir",
]
