"""Kinematic bicycle model of the ego, and RAD's anchor action turned into controls.

State, per environment: (x, y, yaw, v) of the rear-axle centre (the ego frame's origin,
``sim.frames``): world metres, radians from +x towards +y, m/s along the heading. With
acceleration a and front-wheel steering angle delta held constant,

    x' = v cos(yaw),  y' = v sin(yaw),  yaw' = v tan(delta) / L,  v' = a,

so the path is a circular arc of constant curvature k = tan(delta) / L run at a speed that
changes linearly in time. :func:`bicycle_step` integrates this exactly over one step.

Speed lives in [0, v_max]: the ego never reverses. Braking that would carry v below 0 within a
step stops the ego where v reaches 0 (it then stays); accelerating past v_max cruises at v_max
from the moment it is reached.

RAD's action is an *anchor*: the ego's displacement after ``horizon`` = 0.5 s, in the current
ego frame. :func:`anchor_to_controls` turns it into the (accel, steer) that, held for the whole
horizon, drive the arc through that point; the env applies them for one 0.1 s step and then
re-plans from the new state (RAD re-plans at 10 Hz).
"""

from __future__ import annotations

import numpy as np

from sim.frames import wrap_angle

WHEELBASE = 2.765  # metres, RAD's anchor generation
V_MAX = 30.0  # m/s; RAD's longitudinal anchors reach 15 m per 0.5 s
MAX_ACCEL = 6.0  # m/s^2
MAX_DECEL = 9.0  # m/s^2, about a dry-road emergency stop
MAX_STEER = float(np.deg2rad(49.0))  # RAD's anchors span +-49 degrees of front-wheel angle
ANCHOR_HORIZON = 0.5  # s: an anchor is the ego's displacement after this long (RAD); the one definition


def _sinc(u: np.ndarray) -> np.ndarray:
    """sin(u) / u, equal to 1 at 0, accurate for tiny |u| (no division by ~0)."""
    u = np.asarray(u, dtype=np.float64)
    small = np.abs(u) < 1e-4
    safe = np.where(small, 1.0, u)
    return np.where(small, 1.0 - u * u / 6.0, np.sin(safe) / safe)


def _as_batch(name: str, a, B: int, where: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(B, float(a))
    if a.shape != (B,):
        raise ValueError(f"{where}: {name} must be [B={B}] or a scalar, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{where}: {name} must be finite")
    return a


def bicycle_step(state, accel, steer, dt: float, wheelbase: float = WHEELBASE, v_max: float = V_MAX) -> np.ndarray:
    """One step of the kinematic bicycle model, exact for controls held constant over ``dt``.

    state: [B, 4] (x, y, yaw, v) of the rear-axle centre, world metres / radians / m/s;
    accel: [B] m/s^2 (or a scalar); steer: [B] front-wheel angle, radians, |steer| < pi/2
    (positive turns left); dt: seconds > 0. Returns the new state [B, 4] float64, yaw wrapped to
    [-pi, pi), v in [0, v_max]. An incoming v outside [0, v_max] is clipped first.

    The distance run is s = v0 t1 + a t1^2 / 2 + v1 (dt - t1), where t1 is when the speed hits
    0 or v_max (dt if it does not) and v1 the speed then; the pose moves s along the arc of
    curvature k = tan(steer) / L: with u = k s / 2, the chord is s sinc(u) at heading yaw + u,
    which is the straight line exactly when k = 0.
    """
    where = "bicycle_step"
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 2 or state.shape[1] != 4:
        raise ValueError(f"{where}: state must be [B, 4] (x, y, yaw, v), got shape {state.shape}")
    if not np.isfinite(state).all():
        raise ValueError(f"{where}: state must be finite")
    B = state.shape[0]
    a = _as_batch("accel", accel, B, where)
    delta = _as_batch("steer", steer, B, where)
    if (np.abs(delta) >= np.pi / 2).any():
        raise ValueError(f"{where}: |steer| must be < pi/2 rad, got max {np.abs(delta).max():.4f}")
    if not (dt > 0 and np.isfinite(dt)):
        raise ValueError(f"{where}: dt must be a positive number of seconds, got {dt}")
    if not (wheelbase > 0 and v_max > 0):
        raise ValueError(f"{where}: wheelbase and v_max must be > 0, got {wheelbase}, {v_max}")

    x, y, yaw = state[:, 0], state[:, 1], state[:, 2]
    v0 = np.clip(state[:, 3], 0.0, v_max)
    # time t1 at which the speed reaches a bound (dt when it stays inside [0, v_max])
    room = np.where(a < 0, -v0, v_max - v0)  # speed change available before a bound, same sign as a
    t_bound = np.divide(room, a, out=np.full(B, np.inf), where=a != 0)
    t1 = np.minimum(dt, t_bound)
    v1 = np.clip(v0 + a * t1, 0.0, v_max)
    s = np.maximum(v0 * t1 + 0.5 * a * t1 * t1 + v1 * (dt - t1), 0.0)  # [B] metres along the arc

    k = np.tan(delta) / wheelbase  # [B] 1/m
    u = 0.5 * k * s  # half the heading change
    chord = s * _sinc(u)
    out = np.empty((B, 4))
    out[:, 0] = x + chord * np.cos(yaw + u)
    out[:, 1] = y + chord * np.sin(yaw + u)
    out[:, 2] = wrap_angle(yaw + 2.0 * u)
    out[:, 3] = v1
    return out


def anchor_to_controls(
    v0,
    lateral,
    longitudinal,
    horizon: float = ANCHOR_HORIZON,
    wheelbase: float = WHEELBASE,
    *,
    max_accel: float = MAX_ACCEL,
    max_decel: float = MAX_DECEL,
    max_steer: float = MAX_STEER,
) -> tuple[np.ndarray, np.ndarray]:
    """Controls (accel [B] m/s^2, steer [B] rad) that drive the ego to an anchor in ``horizon`` s.

    v0: [B] current speed, m/s >= 0; lateral: [B] metres, left positive (ego y); longitudinal:
    [B] metres forward (ego x), >= 0. Scalars broadcast. The anchor is reached along the circular
    arc that leaves the origin tangent to +x and passes through (x, y) = (longitudinal, lateral):

    - curvature k = 2 y / (x^2 + y^2) (0 when x = y = 0), steer = atan(L k) clipped to
      +-max_steer;
    - arc length s = d phi / sin(phi), d = |(x, y)|, phi = atan2(y, x) the chord's angle (the arc
      turns by 2 phi); s = x on a straight line, and s = 0 (stop) when x = y = 0;
    - accel a = 2 (s - v0 T) / T^2, covering s in T from v0 at constant acceleration. When that
      would end with a negative speed (s < v0 T / 2), the ego would have to reverse to be at s at
      T, so instead it brakes to stop exactly at s: a = -v0^2 / (2 s) (it arrives before T and
      stays); with s = 0 that is the hardest allowed braking. a is clipped to
      [-max_decel, max_accel].

    Without clipping (and below v_max), holding the controls for the whole horizon in
    :func:`bicycle_step` lands on the anchor. The env holds them for one 0.1 s step and
    re-plans (RAD). Defaults: RAD's wheelbase and +-49 degree steering; accel limits of a road car.
    """
    where = "anchor_to_controls"
    v0, lat, lon = np.broadcast_arrays(*(np.asarray(t, dtype=np.float64) for t in (v0, lateral, longitudinal)))
    if v0.ndim > 1:
        raise ValueError(f"{where}: v0, lateral, longitudinal must be [B] or scalars, got shape {v0.shape}")
    if not (np.isfinite(v0).all() and np.isfinite(lat).all() and np.isfinite(lon).all()):
        raise ValueError(f"{where}: v0, lateral and longitudinal must be finite")
    if (v0 < 0).any():
        raise ValueError(f"{where}: v0 must be >= 0 (the ego does not reverse), got min {v0.min()}")
    if (lon < 0).any():
        raise ValueError(f"{where}: longitudinal must be >= 0 m (no reversing), got min {lon.min()}")
    if not (horizon > 0 and wheelbase > 0 and max_accel >= 0 and max_decel > 0 and 0 <= max_steer < np.pi / 2):
        raise ValueError(
            f"{where}: need horizon > 0, wheelbase > 0, max_accel >= 0, max_decel > 0, "
            f"0 <= max_steer < pi/2; got {horizon}, {wheelbase}, {max_accel}, {max_decel}, {max_steer}"
        )
    d2 = lon * lon + lat * lat
    k = np.divide(2.0 * lat, d2, out=np.zeros_like(d2), where=d2 > 0)
    phi = np.arctan2(lat, lon)  # in [-pi/2, pi/2] as lon >= 0; 0 at the origin
    s = np.sqrt(d2) / _sinc(phi)
    steer = np.clip(np.arctan(wheelbase * k), -max_steer, max_steer)

    T = horizon
    a_const = 2.0 * (s - v0 * T) / (T * T)
    reverses = s < 0.5 * v0 * T  # constant acceleration would end with v < 0
    a_stop = np.divide(-v0 * v0, 2.0 * s, out=np.full_like(s, -np.inf), where=s > 0)
    accel = np.clip(np.where(reverses, a_stop, a_const), -max_decel, max_accel)
    return accel, steer


def ego_box_center(state, center_offset: float) -> np.ndarray:
    """World xy [B, 2] of the ego box's bottom-face centre, ``center_offset`` m ahead of the rear axle.

    state: [B, 4] (x, y, yaw, v) as in :func:`bicycle_step`.
    """
    state = np.asarray(state, dtype=np.float64)
    yaw = state[:, 2]
    return state[:, :2] + center_offset * np.stack([np.cos(yaw), np.sin(yaw)], axis=1)
