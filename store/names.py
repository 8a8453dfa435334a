"""Run and file names: one path segment each, so nothing a name says can leave its folder."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_valid_name(name: object) -> bool:
    """True for a str that :func:`check_name` accepts."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None and ".." not in name


def check_name(kind: str, name: object) -> str:
    """Validate a run or file name: ``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`` and no ``..``.

    This keeps every name one path segment inside the store (no ``/``, no absolute path, no parent).
    ``kind`` ("run", "file") names what is checked in the error.
    """
    if not isinstance(name, str):
        raise ValueError(f"{kind} name must be a str, got {type(name).__name__}")
    if not is_valid_name(name):
        raise ValueError(
            f"{kind} name {name!r} is not allowed: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit, without '..' (no slashes, no absolute or parent paths)"
        )
    return name
