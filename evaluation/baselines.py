"""Built-in baseline drivers for ``python -m evaluation``: pure functions of a batch of
observations (and, for the expert and the reactive driver, the env's infos) to actions [B, 2] (lateral
index, longitudinal index).

| name                | sees                                        | drives                                          |
|---------------------|---------------------------------------------|-------------------------------------------------|
| ``expert``          | ``info["expert_action"]``                   | log replay: the env's IL labels, which replay    |
|                     |                                             | the logged drive (RAD's zero-collision reference)|
| ``stop``            | nothing                                     | stands still: (centre lateral bin, longitudinal  |
|                     |                                             | bin 0) -- RAD's four events never fire on it;    |
|                     |                                             | progress_deviation must fail it                  |
| ``constant-velocity`` | ``ego`` (speed)                           | straight ahead (centre lateral bin), holding its |
|                     |                                             | speed (the longitudinal bin nearest v x 0.5 s)   |
| ``lane-follow``     | ``ego`` (speed), ``map`` + ``map_mask``     | holds its speed like constant-velocity, and      |
|                     | (lane-centre points); ``route`` only when   | steers along the centre line of the lane it is   |
|                     | no lane point is in view                    | in (pure pursuit); blind to agents and obstacles |
| ``reactive``        | ``info["ego_state"]``, ``info["step"]`` and | the reactive expert (``scenarios.reactive``) in  |
|                     | the clip's ground truth now: its route with | closed loop: follows the route at the speed      |
|                     | speed limits, the agents in range (pose,    | limit, IDM behind leaders, yields to crossing    |
|                     | size, velocity) and static obstacles        | and merging cars, nudges around parked ones      |
| ``reactive:k=v,..`` | the same                                    | the reactive expert with other settings          |
|                     |                                             | (``scenarios.ReactiveSettings`` by name), e.g.   |
|                     |                                             | DAgger's labeller of ``il.labeller``             |

None but ``reactive`` looks at the agents or the static obstacles, and none at the cameras:
constant-velocity and lane-follow drive into whatever is in their way, which is what makes the suite's
kinds tell them apart (a constant-velocity driver hits the lead / cutting-in / crossing car and the
parked car, and leaves a curve; a lane follower takes the curve but still hits everything in its lane).
``reactive`` is the rule that drove every clip's logged expert, now at the states it reaches itself: it
passes a clip unless its drive drifts from the log's. It reads each clip's ground truth at the env's step
from the suite's scenarios, which the evaluation hands it (``evaluation.policies``: the policy entry carries
the scenario files, :meth:`ReactiveBaseline.bind_scenarios` takes them where it drives).

Frames as the observation (``envs.observation``): ego frame, x forward, y left, metres; an action is
the anchor ``ANCHOR_HORIZON`` = 0.5 s ahead (``scenarios.actions``). Everything here is numpy; no env, no torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scenarios.actions import nearest_bins
from scenarios.io import load
from scenarios.reactive import DEFAULT_SETTINGS, ReactiveScene, ReactiveSettings
from sim.dynamics import ANCHOR_HORIZON

BASELINES = ("expert", "reactive", "stop", "constant-velocity", "lane-follow")


def split_baseline(spec: str) -> tuple[str, ReactiveSettings] | None:
    """(name, reactive settings) of a baseline spec, None when ``spec`` names no baseline. ``reactive:k=v,k=v``
    is the reactive expert with those ``scenarios.ReactiveSettings`` (e.g. DAgger's labeller, ``il.labeller``);
    a setting it does not know or a value that is not a number > 0 is a ValueError."""
    name, sep, rest = spec.partition(":")
    if name not in BASELINES or (sep and name != "reactive"):
        return None
    overrides: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise ValueError(f"baseline {spec!r}: expected reactive:name=value,name=value; got {item!r}")
        overrides[k.strip()] = v.strip()
    return name, ReactiveSettings.with_overrides(overrides, f"baseline {spec!r}")


# observation parts each baseline reads (the evaluation switches the rest off: cameras cost most)
PARTS = {
    "expert": ("ego",),
    "stop": ("ego",),
    "constant-velocity": ("ego",),
    "lane-follow": ("ego", "route", "map"),
    "reactive": ("ego",),  # it reads the infos and the clip's ground truth, not the observation
}

# lane-follow's settings
LOOKAHEAD_S = ANCHOR_HORIZON  # s: pure-pursuit look-ahead time (the anchor's: it then lies on the centre line) ...
MIN_LOOKAHEAD = 3.0  # m: ... and its minimum distance
ALIGNED_COS = float(np.cos(np.radians(35.0)))  # lane points whose heading is within 35 deg of the ego's
NEAR_X = 4.0  # m: lane points within this of the ego (along x) decide which lane it is in
LINK_MAX_STEP = 5.0  # m: consecutive points of one lane's centre line are at most this far apart ...
LINK_MAX_OFFSET = 1.0  # m: ... and this far off the previous point's tangent (lanes are >3 m apart)


def hold_speed_bins(speed: np.ndarray, longitudinal: np.ndarray) -> np.ndarray:
    """The longitudinal bin that holds each speed: nearest to v x ANCHOR_HORIZON. speed [B] m/s -> [B] int64."""
    want = np.asarray(speed, dtype=np.float64)[:, None] * ANCHOR_HORIZON
    return np.argmin(np.abs(np.asarray(longitudinal)[None, :] - want), axis=1).astype(np.int64)


def nearest_lateral_bins(lat_m: np.ndarray, long_idx: np.ndarray, spec) -> np.ndarray:
    """The feasible lateral bin nearest to each lateral displacement, given the longitudinal bins. [B] int64."""
    lat = np.asarray(spec.lateral)
    j = np.argmin(np.abs(lat[None, :] - np.asarray(lat_m, dtype=np.float64)[:, None]), axis=1)
    lo, hi = spec.band
    return np.clip(j, lo[long_idx], hi[long_idx]).astype(np.int64)


def expert(infos: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Log replay: each env's ``info["expert_action"]`` (the label for the observation it came with). [B, 2]."""
    missing = [i for i, info in enumerate(infos) if "expert_action" not in info]
    if missing:
        raise KeyError(f"expert baseline: env(s) {missing} gave no info['expert_action']")
    return np.stack([np.asarray(info["expert_action"], dtype=np.int64) for info in infos])


def stop(obs: Mapping[str, np.ndarray], spec) -> np.ndarray:
    """Stand still: (centre lateral bin, longitudinal bin 0 = 0 m in 0.5 s) for every env. [B, 2]."""
    B = len(next(iter(obs.values())))
    return np.tile(np.array([[spec.center, 0]], dtype=np.int64), (B, 1))


def constant_velocity(obs: Mapping[str, np.ndarray], spec) -> np.ndarray:
    """Straight ahead at the current speed: (centre lateral bin, bin holding the speed). [B, 2]."""
    speed = _speed(obs)
    lon = hold_speed_bins(speed, spec.longitudinal)
    lat = np.full_like(lon, spec.center)
    return np.stack([lat, lon], axis=1)


def lane_follow(obs: Mapping[str, np.ndarray], spec) -> np.ndarray:
    """Keep the lane and the speed (see the module docstring). [B, 2].

    Per env: the lane-centre points aligned with the ego's heading are linked into the centre line of
    the lane the ego is in (:func:`lane_centre_line`); the target is the point of that line
    ``max(MIN_LOOKAHEAD, LOOKAHEAD_S * v)`` metres ahead; the anchor is the point 0.5 s along the
    circle arc that leaves the ego tangent to its heading and passes through the target (pure pursuit),
    snapped to the nearest feasible lateral bin. With no lane point in view it aims at the route's
    waypoint at that distance; with neither, straight ahead.
    """
    speed = _speed(obs)
    lon = hold_speed_bins(speed, spec.longitudinal)
    long_m = np.asarray(spec.longitudinal)[lon]
    B = len(speed)
    lat_m = np.zeros(B)
    for b in range(B):
        look = max(MIN_LOOKAHEAD, LOOKAHEAD_S * float(speed[b]))
        target = None
        if "map" in obs:
            mask = obs["map_mask"][b] if "map_mask" in obs else np.ones(len(obs["map"][b]))
            line = lane_centre_line(np.asarray(obs["map"][b], np.float64), np.asarray(mask) > 0.5)
            if line is not None:
                target = point_ahead(line, look)
        if target is None and "route" in obs:
            route = np.asarray(obs["route"][b], np.float64)
            route = route[np.any(route != 0.0, axis=1)]
            if len(route):
                target = point_ahead(np.concatenate([np.zeros((1, 2)), route]), look)
        if target is not None:
            lat_m[b] = arc_lateral(target[0], target[1], long_m[b])
    return np.stack([nearest_lateral_bins(lat_m, lon, spec), lon], axis=1)


def lane_centre_line(points: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """The centre line of the ego's lane from lane-centre points, ego frame: [n, 2] ordered forward, or None.

    points: [M, 4] (x, y, cos heading, sin heading), mask: [M] bool. The ego's lane is the one whose
    tangent line (through an aligned point within ``NEAR_X`` of the ego) passes closest to the ego;
    from that point the line is followed forward, each next point being the nearest one ahead within
    ``LINK_MAX_STEP`` and within ``LINK_MAX_OFFSET`` of the current point's tangent.
    """
    p = points[mask]
    p = p[p[:, 2] > ALIGNED_COS]
    if len(p) == 0:
        return None
    near = np.flatnonzero(np.abs(p[:, 0]) <= NEAR_X)
    if len(near) == 0:
        near = np.array([int(np.argmin(np.hypot(p[:, 0], p[:, 1])))])
    # where each near point's lane line crosses x = 0 (its lateral offset from the ego)
    y0 = p[near, 1] - p[near, 0] * p[near, 3] / p[near, 2]
    k = int(near[np.argmin(np.abs(y0))])
    # from that point, walk forward along its lane
    line = [p[k]]
    used = np.zeros(len(p), dtype=bool)
    used[k] = True
    for _ in range(len(p)):
        cur = line[-1]
        d = p[:, :2] - cur[:2]
        along = d[:, 0] * cur[2] + d[:, 1] * cur[3]
        off = np.abs(-d[:, 0] * cur[3] + d[:, 1] * cur[2])
        ok = (~used) & (along > 0.1) & (along <= LINK_MAX_STEP) & (off <= LINK_MAX_OFFSET)
        if not ok.any():
            break
        j = int(np.flatnonzero(ok)[np.argmin(along[ok])])
        used[j] = True
        line.append(p[j])
    return np.stack(line)[:, :2]


def point_ahead(line: np.ndarray, distance: float) -> np.ndarray:
    """The point of polyline ``line`` [n, 2] (ordered forward) at ``distance`` m from the ego (the origin),
    going past the end along the last segment (or along x from a single point). [2]."""
    r = np.hypot(line[:, 0], line[:, 1])
    beyond = np.flatnonzero((r >= distance) & (line[:, 0] > 0))
    if len(beyond):
        i = int(beyond[0])
        if i == 0:
            return line[0]
        a, b = line[i - 1], line[i]
        ra, rb = r[i - 1], r[i]
        t = 0.0 if rb == ra else float(np.clip((distance - ra) / (rb - ra), 0.0, 1.0))
        return a + t * (b - a)
    last = line[-1]
    direction = line[-1] - line[-2] if len(line) >= 2 else np.array([1.0, 0.0])
    norm = float(np.hypot(*direction))
    direction = direction / norm if norm > 1e-9 else np.array([1.0, 0.0])
    return last + max(distance - float(np.hypot(*last)), 0.0) * direction


def arc_lateral(x: float, y: float, s: float) -> float:
    """Lateral offset (m, left) after arclength s along the circle that leaves the origin heading +x
    and passes through (x, y): pure pursuit's curvature k = 2y / (x^2 + y^2), offset (1 - cos ks) / k."""
    d2 = x * x + y * y
    if d2 < 1e-9:
        return 0.0
    k = 2.0 * y / d2
    if abs(k) < 1e-9:
        return 0.0
    ks = min(abs(k) * s, np.pi / 2)  # at most a quarter turn within one anchor
    return float(np.sign(k) * (1.0 - np.cos(ks)) / abs(k))


class ReactiveBaseline:
    """``reactive``: the reactive expert on each env's clip at its step and ego state (module docstring).

    ``act(obs, infos) -> actions [B, 2]``: per env, ``info["scenario"]`` (id), ``info["step"]`` and
    ``info["ego_state"]`` (x, y, yaw, v); the clip's ``ReactiveScene`` comes from the scenarios given to
    :meth:`bind_scenarios` (built once per clip). The target displacement goes to the env's bins with
    ``nearest_bins`` on its action spec."""

    def __init__(self, spec, settings: ReactiveSettings = DEFAULT_SETTINGS):
        self.spec = spec
        self.settings = settings
        self._scenarios: dict[str, object] = {}
        self._scenes: dict[str, ReactiveScene] = {}

    def bind_scenarios(self, scenarios) -> None:
        """The scenarios this baseline may be asked to drive: Scenarios, or a mapping of scenario id to a
        Scenario or its file (read when the clip is first driven)."""
        items = scenarios.items() if isinstance(scenarios, Mapping) else ((str(s.id), s) for s in scenarios)
        for sid, ref in items:
            if self._scenarios.get(str(sid)) is not ref:
                self._scenarios[str(sid)] = ref
                self._scenes.pop(str(sid), None)

    def scene(self, sid: str) -> ReactiveScene:
        if sid not in self._scenes:
            if sid not in self._scenarios:
                raise KeyError(
                    f"reactive baseline: no scenario {sid!r} bound (bind_scenarios(scenarios) first; bound: "
                    f"{len(self._scenarios)})"
                )
            ref = self._scenarios[sid]
            sc = load(ref) if isinstance(ref, str | os.PathLike) else ref
            self._scenes[sid] = ReactiveScene.of(sc, self.settings)  # type: ignore[arg-type]  # a Scenario
        return self._scenes[sid]

    def __call__(self, obs, infos: Sequence[Mapping[str, Any]]) -> np.ndarray:
        out = np.zeros((len(infos), 2), dtype=np.int64)
        for b, info in enumerate(infos):
            missing = [k for k in ("scenario", "step", "ego_state") if k not in info]
            if missing:
                raise KeyError(f"reactive baseline: env {b} gave no info {missing}")
            row = self.scene(str(info["scenario"])).actions(np.asarray(info["ego_state"])[None], int(info["step"]))[0]
            out[b] = nearest_bins(row[0], row[1], self.spec)
        return out


def baseline_act(name: str, spec):
    """``act(obs, infos) -> actions [B, 2]`` of baseline ``name`` (one of BASELINES, or ``reactive:<settings>``,
    :func:`split_baseline`) for an action spec."""
    if name.startswith("reactive:"):
        parsed = split_baseline(name)
        if parsed is None:
            raise ValueError(f"unknown baseline {name!r}")
        return ReactiveBaseline(spec, parsed[1])
    if name == "expert":
        return lambda obs, infos: expert(infos)
    if name == "stop":
        return lambda obs, infos: stop(obs, spec)
    if name == "constant-velocity":
        return lambda obs, infos: constant_velocity(obs, spec)
    if name == "lane-follow":
        return lambda obs, infos: lane_follow(obs, spec)
    if name == "reactive":
        return ReactiveBaseline(spec)
    raise ValueError(f"unknown baseline {name!r}; built-in baselines are {', '.join(BASELINES)}")


def _speed(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    if "ego" not in obs:
        raise KeyError("baselines need the observation's 'ego' part (speed); it is switched off in the env config")
    return np.asarray(obs["ego"], dtype=np.float64)[:, 0]
