"""The checkpoint store's errors: every one is a :class:`StoreError`."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of the checkpoint store's errors."""


class StoreUnavailable(StoreError):
    """The store could not be reached, or answered with a transient error. Retried by :func:`store.retry`."""


class CheckpointNotFound(StoreError, FileNotFoundError):
    """The run has no committed checkpoint of that version. Never retried."""


class CorruptCheckpoint(StoreError):
    """A committed checkpoint does not match its manifest (or the manifest itself is unreadable)."""

    def __init__(self, run: str, version: int, file: str, problem: str, where: str):
        self.run, self.version, self.file, self.problem, self.where = run, version, file, problem, where
        super().__init__(f"corrupt checkpoint: run '{run}' version {version} ({where}): file '{file}' {problem}")


class RunLocked(StoreError):
    """Another live writer holds the run's lease."""

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


class LeaseLost(StoreError):
    """This writer's lease was taken over (or removed): it must stop writing the run."""


class Stopped(StoreError):
    """A retry loop was told to stop (``AsyncCommitter.close``). Internal: never reaches a caller."""
