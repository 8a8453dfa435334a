"""Which committed versions a run keeps: the newest ``keep_last`` plus the ``keep_best`` best by a metric.

Pure: :meth:`store.RunStore.retain` reads the metrics from the manifests, answers which versions are
intact (verifying their files), and deletes the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence


def check_retention(keep_last: object, keep_best: object, mode: object) -> None:
    """ValueError unless keep_last >= 1, keep_best >= 0 (ints) and mode is 'min' or 'max'."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"retain: keep_last must be an int >= 1 (resume needs the latest), got {keep_last!r}")
    if isinstance(keep_best, bool) or not isinstance(keep_best, int) or keep_best < 0:
        raise ValueError(f"retain: keep_best must be an int >= 0, got {keep_best!r}")
    if mode not in ("min", "max"):
        raise ValueError(f"retain: mode must be 'min' or 'max', got {mode!r}")


def versions_to_keep(
    versions: Sequence[int],
    keep_last: int,
    keep_best: int = 1,
    scores: Mapping[int, object] | None = None,
    mode: str = "min",
    intact: Callable[[int], bool] | None = None,
) -> set[int]:
    """The versions to keep of ``versions`` (ascending): the newest ``keep_last``, plus the
    ``keep_best`` best by ``scores`` ({version: metric value}; lowest for mode "min", highest for
    "max"; ties go to the newer). Values that are not finite numbers never count as best.

    ``intact(version)`` (default: all are) says whether a version passed its checks; one that did not
    is never kept and never counted, so the newest ``keep_last`` are the newest intact ones and the
    best the best intact ones. It is asked only of candidates, newest first and then best first, until
    both counts are met, so a caller that reads a version's bytes to answer reads only what it keeps
    (and the few failed ones in between)."""
    check_retention(keep_last, keep_best, mode)
    ok = intact if intact is not None else (lambda version: True)
    keep: set[int] = set()
    for version in reversed(versions):
        if len(keep) == keep_last:
            break
        if ok(version):
            keep.add(version)
    if scores and keep_best > 0:
        ranked = []
        for version, value in scores.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                ranked.append((value if mode == "min" else -value, -version))
        best = 0
        for _, neg_version in sorted(ranked):
            if best == keep_best:
                break
            if -neg_version in keep or ok(-neg_version):
                keep.add(-neg_version)
                best += 1
    return keep
