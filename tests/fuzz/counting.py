"""Inputs run per fuzz target, printed at the end of the session by ``tests/fuzz/conftest.py``."""

from __future__ import annotations

from collections import Counter

COUNTS: Counter = Counter()


def count(kind: str) -> None:
    COUNTS[kind] += 1
