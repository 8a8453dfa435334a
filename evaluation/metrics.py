"""RAD's closed-loop metrics over evaluated clips (pure functions of the per-clip records of ``evaluation.rollouts``).

One record per clip (scenario), from a closed-loop rollout:

- ``scenario``, ``kind``: ids; ``event``: the clip's first failure ('' if none; one of
  dynamic_collision, static_collision, position_deviation, heading_deviation); ``steps``: steps driven;
  ``horizon``: the clip's length;
- ``path_distance`` [n]: distance to the expert path after each step; ``speed`` [n] m/s and
  ``yaw`` [n] rad of the ego after each step (with the start state first: n = steps + 1).

Definitions (RAD, first failure only, over all N evaluated clips):
    DCR = clips whose first failure is a dynamic collision / N;  SCR the same for static; CR = DCR + SCR
    PDR = position deviation / N;  HDR = heading deviation / N;  DR = PDR + HDR
    ADD = mean distance to the expert path over the steps before any failure (pooled over clips)
    longitudinal jerk = mean |d^2 v / dt^2| (dt 0.1 s), lateral jerk = mean |d^2 (yaw rate) / dt^2|
    (yaw jerk, as RAD's code), both pooled over the steps before any failure.
Also: success rate (no failure), route progress (steps driven / horizon, mean), counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

EVENTS = ("dynamic_collision", "static_collision", "position_deviation", "heading_deviation")
METRICS = ("CR", "DCR", "SCR", "DR", "PDR", "HDR", "ADD", "long_jerk", "lat_jerk", "success_rate", "progress")


def _series(r: Mapping, key: str) -> np.ndarray:
    return np.asarray(r.get(key, ()), dtype=np.float64).reshape(-1)


def clip_jerks(speed: np.ndarray, yaw: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-step |longitudinal jerk| (m/s^3) and |yaw jerk| (rad/s^3) from speed [n] and yaw [n].

    Longitudinal: second difference of speed / dt^2. Lateral: yaw rate = unwrapped yaw difference / dt,
    then its second difference / dt^2.
    """
    lj = np.abs(np.diff(speed, 2)) / dt**2 if len(speed) >= 3 else np.zeros(0)
    if len(yaw) >= 4:
        rate = np.diff(np.unwrap(yaw)) / dt
        yj = np.abs(np.diff(rate, 2)) / dt**2
    else:
        yj = np.zeros(0)
    return lj, yj


def rad_metrics(records: Sequence[Mapping], dt: float = 0.1) -> dict[str, float]:
    """RAD's metrics over clip records (see module docstring). Empty input gives NaNs and n = 0."""
    n = len(records)
    out: dict[str, float] = {}
    if n == 0:
        out.update({m: float("nan") for m in METRICS})
        out["n"] = 0
        return out
    first = [str(r.get("event", "") or "") for r in records]
    for e in first:
        if e and e not in EVENTS:
            raise ValueError(f"rad_metrics: unknown event {e!r}; expected one of {EVENTS}")
    rate = {e: sum(f == e for f in first) / n for e in EVENTS}
    out["DCR"] = rate["dynamic_collision"]
    out["SCR"] = rate["static_collision"]
    out["CR"] = out["DCR"] + out["SCR"]
    out["PDR"] = rate["position_deviation"]
    out["HDR"] = rate["heading_deviation"]
    out["DR"] = out["PDR"] + out["HDR"]

    dists, ljs, yjs, progress = [], [], [], []
    for r, e in zip(records, first):
        d = _series(r, "path_distance")
        # before any failure: the failing step itself is excluded
        keep = len(d) - 1 if e else len(d)
        dists.append(d[: max(keep, 0)])
        sp, yw = _series(r, "speed"), _series(r, "yaw")
        if e:  # drop the state the failure step produced
            sp, yw = sp[:-1], yw[:-1]
        lj, yj = clip_jerks(sp, yw, dt)
        ljs.append(lj)
        yjs.append(yj)
        horizon = max(int(r.get("horizon", 0) or 0), 1)
        progress.append(min(1.0, int(r.get("steps", 0)) / horizon))
    alld = np.concatenate(dists) if dists else np.zeros(0)
    allj = np.concatenate(ljs) if ljs else np.zeros(0)
    ally = np.concatenate(yjs) if yjs else np.zeros(0)
    out["ADD"] = float(alld.mean()) if alld.size else float("nan")
    out["long_jerk"] = float(allj.mean()) if allj.size else float("nan")
    out["lat_jerk"] = float(ally.mean()) if ally.size else float("nan")
    out["success_rate"] = sum(1 for e in first if not e) / n
    out["progress"] = float(np.mean(progress))
    out["n"] = n
    for e in EVENTS:
        out[f"count_{e}"] = sum(f == e for f in first)
    return out


def by_kind(records: Sequence[Mapping], dt: float = 0.1) -> dict[str, dict[str, float]]:
    """rad_metrics per scenario kind."""
    kinds = sorted({str(r.get("kind", "")) for r in records})
    return {k: rad_metrics([r for r in records if str(r.get("kind", "")) == k], dt) for k in kinds}
