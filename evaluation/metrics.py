"""Closed-loop metrics over evaluated clips (pure functions of the per-clip records of ``rollout.episodes``).

One record per clip (scenario), from a closed-loop rollout:

- ``scenario``, ``kind``: ids; ``event``: the clip's first failure ('' if none; one of ``EVENTS``);
  ``steps``: steps driven; ``horizon``: the clip's length;
- ``path_distance`` [n]: distance to the expert path after each step; ``speed`` [n] m/s and
  ``yaw`` [n] rad of the ego after each step (with the start state first: n = steps + 1);
- ``route_completion`` [n], ``progress_lag`` [n]: the env's ``info`` of the same names;
  ``expert_gap`` [n]: metres between the ego and the logged expert at the same step (time-matched);
  ``expert_speed`` [n]: the logged expert's speed at that step. (Older records without them give NaN.)

RAD's definitions (first failure only, over all N evaluated clips):
    DCR = clips whose first failure is a dynamic collision / N;  SCR the same for static; CR = DCR + SCR
    PDR = position deviation / N;  HDR = heading deviation / N;  DR = PDR + HDR
    ADD = mean distance to the expert path over the steps before any failure (pooled over clips)
    longitudinal jerk = mean |d^2 v / dt^2| (dt 0.1 s), lateral jerk = mean |d^2 (yaw rate) / dt^2|
    (yaw jerk, as RAD's code), both pooled over the steps before any failure.

What RAD's table cannot see (a car that stops passes its four events), per clip, then the mean over clips:
    PGR  = progress deviation (the fifth event: too far behind the logged expert) / N
    RC   = route completion at the clip's end: the ego's arc length along the expert path / the expert's
           over the whole horizon, in [0, 1] (a failure freezes it where the ego stopped)
    DS   = driving score = RC x infraction penalty, as CARLA's leaderboard (and HUGSIM's HD-Score) build
           it. An event ends our episode, so a clip has at most one infraction; its factor is CARLA's for
           the closest infraction: dynamic collision 0.60 (CARLA: collision with a vehicle), static
           collision 0.65 (CARLA: with static layout), position or heading deviation 0.70 and progress
           deviation 0.70 (CARLA: scenario timeout / minimum speed, 0.70); no event: 1.0
    ADE  = time-matched average displacement: mean ``expert_gap`` over the clip's states before any
           failure (metres; the logged expert at the same step, not the nearest path point)
    speed_ratio = the ego's mean speed / the expert's over the same steps (clips where the expert moves)
    survival = steps driven / horizon (it was called "progress": it is only how long the clip lasted)
    success_rate = clips with no event over the whole horizon / N
Every rate carries a 95 % Wilson interval (``<key>_ci``) and every mean over clips a bootstrap one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from envs.reward import EVENTS
from evaluation.stats import bootstrap_mean, wilson

RATES = ("CR", "DCR", "SCR", "DR", "PDR", "HDR", "PGR", "success_rate")
CLIP_MEANS = ("RC", "DS", "ADE", "speed_ratio", "survival")
METRICS = (*RATES[:-1], "ADD", "long_jerk", "lat_jerk", *CLIP_MEANS, "success_rate")
PENALTY = {
    "": 1.0,
    "dynamic_collision": 0.60,
    "static_collision": 0.65,
    "position_deviation": 0.70,
    "heading_deviation": 0.70,
    "progress_deviation": 0.70,
}
COLLISIONS = ("dynamic_collision", "static_collision")
DEVIATIONS = ("position_deviation", "heading_deviation")


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


def _before_failure(x: np.ndarray, failed: bool) -> np.ndarray:
    """The states before any failure: the one the failing step produced is dropped."""
    return x[: max(len(x) - 1, 0)] if failed else x


def clip_values(r: Mapping) -> dict[str, float]:
    """One clip's values (see the module docstring): failure indicators (1.0 / 0.0) and RC, DS, ADE,
    speed_ratio, survival. Paired comparisons (``evaluation.stats``) take these clip by clip."""
    e = str(r.get("event", "") or "")
    if e not in PENALTY:
        raise ValueError(f"clip {r.get('scenario', '?')}: unknown event {e!r}; expected one of {EVENTS}")
    rc = _series(r, "route_completion")
    rc_end = float(np.clip(rc[-1], 0.0, 1.0)) if rc.size and np.isfinite(rc[-1]) else float("nan")
    gap = _before_failure(_series(r, "expert_gap"), bool(e))
    sp = _before_failure(_series(r, "speed"), bool(e))
    ex = _before_failure(_series(r, "expert_speed"), bool(e))
    m = min(len(sp), len(ex))
    expert_moves = m > 0 and float(ex[:m].sum()) > 1e-6
    horizon = max(int(r.get("horizon", 0) or 0), 1)
    return {
        "collision": float(e in COLLISIONS),
        "deviation": float(e in DEVIATIONS),
        "progress_failure": float(e == "progress_deviation"),
        "failure": float(bool(e)),
        "success": float(not e),
        "RC": rc_end,
        "DS": rc_end * PENALTY[e],
        "ADE": float(gap.mean()) if gap.size else float("nan"),
        "speed_ratio": float(sp[:m].sum() / ex[:m].sum()) if expert_moves else float("nan"),
        "survival": min(1.0, int(r.get("steps", 0)) / horizon),
    }


def rad_metrics(records: Sequence[Mapping], dt: float = 0.1) -> dict[str, float]:
    """The metrics over clip records (see module docstring): RAD's, then RC, DS, ADE, speed ratio,
    survival and success, each with a 95 % interval in ``<key>_ci``. Empty input gives NaNs, n = 0."""
    n = len(records)
    out: dict = {}
    if n == 0:
        out.update({m: float("nan") for m in METRICS})
        out["n"] = 0
        return out
    first = [str(r.get("event", "") or "") for r in records]
    for e in first:
        if e and e not in EVENTS:
            raise ValueError(f"rad_metrics: unknown event {e!r}; expected one of {EVENTS}")
    count = {e: sum(f == e for f in first) for e in EVENTS}
    counts = {
        "DCR": count["dynamic_collision"],
        "SCR": count["static_collision"],
        "PDR": count["position_deviation"],
        "HDR": count["heading_deviation"],
        "PGR": count["progress_deviation"],
        "success_rate": sum(1 for e in first if not e),
    }
    counts["CR"] = counts["DCR"] + counts["SCR"]
    counts["DR"] = counts["PDR"] + counts["HDR"]
    for k in RATES:
        out[k] = counts[k] / n
        out[f"{k}_ci"] = list(wilson(counts[k], n))

    dists, ljs, yjs = [], [], []
    for r, e in zip(records, first):
        dists.append(_before_failure(_series(r, "path_distance"), bool(e)))
        sp = _before_failure(_series(r, "speed"), bool(e))
        yw = _before_failure(_series(r, "yaw"), bool(e))
        lj, yj = clip_jerks(sp, yw, dt)
        ljs.append(lj)
        yjs.append(yj)
    alld = np.concatenate(dists) if dists else np.zeros(0)
    allj = np.concatenate(ljs) if ljs else np.zeros(0)
    ally = np.concatenate(yjs) if yjs else np.zeros(0)
    out["ADD"] = float(alld.mean()) if alld.size else float("nan")
    out["long_jerk"] = float(allj.mean()) if allj.size else float("nan")
    out["lat_jerk"] = float(ally.mean()) if ally.size else float("nan")
    clips = [clip_values(r) for r in records]
    for k in CLIP_MEANS:
        v = np.array([c[k] for c in clips], dtype=np.float64)
        fin = v[np.isfinite(v)]
        out[k] = float(fin.mean()) if fin.size else float("nan")
        out[f"{k}_ci"] = list(bootstrap_mean(fin))
    out["n"] = n
    for e in EVENTS:
        out[f"count_{e}"] = count[e]
    return out


def by_kind(records: Sequence[Mapping], dt: float = 0.1) -> dict[str, dict[str, float]]:
    """rad_metrics per scenario kind."""
    kinds = sorted({str(r.get("kind", "")) for r in records})
    return {k: rad_metrics([r for r in records if str(r.get("kind", "")) == k], dt) for k in kinds}
