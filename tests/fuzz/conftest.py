"""Property-based fuzzing (hypothesis) of everything a user or a file can hand the platform.

Every fuzz test counts the inputs it ran (``tests.fuzz.counting.count``); the totals are printed at
the end of the session ("fuzz inputs run: ..."), so a run says how much was tried, not only that it
passed. Example counts and deadlines are set per test: moderate, so the suite stays fast.
"""

from __future__ import annotations

from tests.fuzz.counting import COUNTS


def pytest_terminal_summary(terminalreporter):
    if COUNTS:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz inputs run: {sum(COUNTS.values())} ({parts})")
