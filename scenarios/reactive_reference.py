"""The reactive expert's rules in plain numpy: the reference the numba kernel (``scenarios.reactive``)
is tested against, written to be read, not to be fast.

:func:`plan_reference` takes what :func:`scenarios.reactive.reactive_action` takes (one ego) and returns
the same numbers. Points are put on the route by an exhaustive search over its segments
(:func:`route_frame`), where the kernel searches a window around the ego and walks downhill from a box's
centre to its corners: they agree wherever the nearest segment is unique (every test input).
"""

from __future__ import annotations

import math

import numpy as np

from scenarios.actions import nearest_feasible_bins
from scenarios.format import EgoSpec
from scenarios.reactive import DEFAULT_SETTINGS, FREE, JOIN, LEADER, STATIC, YIELD, ReactiveRoute, ReactiveSettings


def route_frame(route: ReactiveRoute, p) -> tuple[int, float, float]:
    """(segment, arclength s, lateral d left of the route) of the route's nearest point to p [2]."""
    a, t = route.xy[:-1], route.tangent[:-1]
    L = np.diff(route.s)
    r = np.asarray(p, dtype=np.float64) - a
    u = np.clip((r * t).sum(1), 0.0, L)
    foot = a + u[:, None] * t
    d2 = ((np.asarray(p) - foot) ** 2).sum(1)
    i = int(np.argmin(d2))
    return i, float(route.s[i] + u[i]), float(t[i, 0] * r[i, 1] - t[i, 1] * r[i, 0])


def idm(v: float, v_lead: float, gap: float, st: ReactiveSettings) -> float:
    """IDM's interaction term a (1 - (s*/s)^2), s* = s0 + max(0, v T + v (v - v_lead) / (2 sqrt(a b)))."""
    s_star = st.min_gap + max(0.0, v * st.time_gap + v * (v - v_lead) / (2.0 * math.sqrt(st.accel * st.comfort_decel)))
    return st.accel * (1.0 - (s_star / max(gap, 0.1)) ** 2)


def time_to(d: float, v: float, v_top: float, acc: float) -> float:
    """Seconds to cover d m from speed v, accelerating at acc up to max(v, v_top)."""
    if d <= 0:
        return 0.0
    v_top = max(v_top, v)
    if v_top < 0.05:
        return math.inf
    t1 = (v_top - v) / acc
    d1 = 0.5 * (v + v_top) * t1
    if d <= d1:
        return (-v + math.sqrt(v * v + 2 * acc * d)) / acc
    return t1 + (d - d1) / v_top


def smooth(u: float) -> float:
    u = min(max(u, 0.0), 1.0)
    return u**3 * (10 - 15 * u + 6 * u * u)


def plan_reference(
    route: ReactiveRoute, state, agent_xy, agent_yaw, agent_size, agent_vel, agent_present, obstacle_xy=(),
    obstacle_yaw=(), obstacle_size=(), ego: EgoSpec | None = None, settings: ReactiveSettings = DEFAULT_SETTINGS,
) -> np.ndarray:  # fmt: skip
    """One decision: float64 [10] as a row of ``scenarios.reactive.reactive_actions``."""
    st, ego = settings, ego or EgoSpec()
    half_w, front = ego.width / 2, ego.center_offset + ego.length / 2
    rear, centre = ego.length / 2 - ego.center_offset, ego.center_offset
    x, y, yaw, v = (float(c) for c in state)
    v = max(v, 0.0)
    p = np.array([x, y])
    _, s_e, d_e = route_frame(route, p)

    def seg(s):
        return int(np.clip(np.searchsorted(route.s, s, side="right") - 1, 0, len(route.s) - 2))

    def near(q):
        return float(np.hypot(*(np.asarray(q) - p))) <= st.sensing_range

    # nudges: (s_in, s_out, ramp, need)
    nudges = []
    for c, yw, sz in zip(np.reshape(obstacle_xy, (-1, 2)), np.ravel(obstacle_yaw), np.reshape(obstacle_size, (-1, 2)),
                         strict=True):  # fmt: skip
        if not near(c):
            continue
        R = np.array([[math.cos(yw), -math.sin(yw)], [math.sin(yw), math.cos(yw)]])
        corners = [c + R @ (np.array([cx, cy]) * sz) for cx in (-0.5, 0.5) for cy in (-0.5, 0.5)]
        sd = np.array([route_frame(route, q)[1:] for q in corners])
        smin, smax, dmin, dmax = sd[:, 0].min(), sd[:, 0].max(), sd[:, 1].min(), sd[:, 1].max()
        clr = st.nudge_clearance + half_w
        if dmax <= -clr or dmin >= clr:
            continue
        need_l, need_r = dmax + clr, dmin - clr
        j = seg(0.5 * (smin + smax))
        ok_l = need_l <= st.max_nudge and need_l + half_w + st.edge_margin <= route.room[j, 0]
        ok_r = -need_r <= st.max_nudge and -need_r + half_w + st.edge_margin <= route.room[j, 1]
        if ok_l and (not ok_r or need_l <= -need_r):
            need = need_l
        elif ok_r:
            need = need_r
        else:
            continue
        ramp = max(st.min_nudge_ramp, st.nudge_ramp_time * route.v_allow[j])
        if smax + rear + 1.0 + ramp < s_e:
            continue
        nudges.append((smin - front - 1.0 - ramp, smax + rear + 1.0, ramp, need))

    def offset(s):
        b = [n * (smooth((s - a) / r) - smooth((s - o) / r)) for a, o, r, n in nudges]
        return max([0.0, *b]) + min([0.0, *b])

    # steering: pure pursuit to the target line's point `look` ahead
    look = max(st.min_lookahead, st.lookahead_time * v)
    j = seg(s_e + look)
    t = route.tangent[j]
    g = route.xy[j] + (s_e + look - route.s[j]) * t + offset(s_e + look) * np.array([-t[1], t[0]])
    px = math.cos(yaw) * (g[0] - x) + math.sin(yaw) * (g[1] - y)
    py = -math.sin(yaw) * (g[0] - x) + math.cos(yaw) * (g[1] - y)
    kappa = 2 * py / (px * px + py * py) if px > 0.1 else (0.41 if py >= 0 else -0.41)
    # speed
    v_c = float(np.interp(s_e, route.s, route.v_allow))
    a, mode, ttc = min(max((v_c - v) / st.speed_tau, -st.comfort_decel), st.accel), FREE, math.inf
    blend, off_e = 2 * look, offset(s_e)

    def corridor(s, d, half):
        w = max(0.0, 1.0 - (s - s_e) / blend) if s > s_e else 1.0
        return abs(d - offset(s) - w * (d_e - off_e)) < half

    for c, yw, sz, vel, pr in zip(np.reshape(agent_xy, (-1, 2)), np.ravel(agent_yaw), np.reshape(agent_size, (-1, 2)),
                                  np.reshape(agent_vel, (-1, 2)), np.ravel(agent_present), strict=True):  # fmt: skip
        if not pr or not near(c):
            continue
        i, s_a, d_a = route_frame(route, c)
        t = route.tangent[i]
        ca, sa = abs(math.cos(yw) * t[0] + math.sin(yw) * t[1]), abs(-math.sin(yw) * t[0] + math.cos(yw) * t[1])
        ext_lon, ext_lat = 0.5 * (sz[0] * ca + sz[1] * sa), 0.5 * (sz[0] * sa + sz[1] * ca)
        half = half_w + ext_lat + st.lateral_margin
        v_long, v_lat = float(vel @ t), float(-vel[0] * t[1] + vel[1] * t[0])
        leader = None
        if corridor(s_a, d_a, half):
            leader = LEADER if s_a > s_e + centre else None
        else:
            speed = float(np.hypot(*vel))
            if speed < 0.3:
                continue
            ts = np.arange(1, int(st.horizon / st.prediction_step + 0.5) + 1) * st.prediction_step
            inside = [corridor(s_a + v_long * tt, d_a + v_lat * tt, half) for tt in ts]
            if not any(inside):
                continue
            m_in = inside.index(True)
            m_out = next((m for m in range(m_in, len(ts)) if not inside[m]), None)
            if m_out is None and abs(v_long) > 0.5 * speed:
                leader = JOIN if s_a > s_e + centre else None
            else:
                t_in = m_in * st.prediction_step
                t_out = math.inf if m_out is None else ts[m_out]
                s_in = [s_a + v_long * tt for tt in ts[m_in : m_out if m_out is not None else len(ts)]]
                zlo, zhi = min(s_in) - ext_lon - st.longitudinal_margin, max(s_in) + ext_lon + st.longitudinal_margin
                d_front = zlo - (s_e + front)
                if d_front <= 0 or time_to(zhi + rear - s_e, v, v_c, st.accel) + st.clear_time <= t_in:
                    continue
                if t_out + st.pass_time <= time_to(d_front, v, v_c, st.accel):
                    continue
                acc = idm(v, 0.0, d_front, st)
                if acc < a:
                    a, mode = acc, YIELD
                continue
        if leader is not None:
            gap = s_a - ext_lon - (s_e + front)
            acc = idm(v, max(v_long, 0.0), gap, st)
            if v > v_long:
                ttc = min(ttc, max(gap, 0.0) / (v - v_long))
            if acc < a:
                a, mode = acc, leader
    for c, yw, sz in zip(np.reshape(obstacle_xy, (-1, 2)), np.ravel(obstacle_yaw), np.reshape(obstacle_size, (-1, 2)),
                         strict=True):  # fmt: skip
        if not near(c):
            continue
        i, s_o, d_o = route_frame(route, c)
        t = route.tangent[i]
        ca, sa = abs(math.cos(yw) * t[0] + math.sin(yw) * t[1]), abs(-math.sin(yw) * t[0] + math.cos(yw) * t[1])
        ext_lon, ext_lat = 0.5 * (sz[0] * ca + sz[1] * sa), 0.5 * (sz[0] * sa + sz[1] * ca)
        if s_o + ext_lon >= s_e - rear and corridor(s_o, d_o, half_w + ext_lat + st.lateral_margin):
            acc = idm(v, 0.0, s_o - ext_lon - (s_e + front), st)
            if acc < a:
                a, mode = acc, STATIC
    a = min(max(a, -st.max_decel), st.accel)
    T = 0.5
    dist = v * T + 0.5 * a * T * T if a >= -v / T else (v * v / (-2 * a) if a < 0 else 0.0)
    dist = max(dist, 0.0)
    if abs(kappa) > 1e-9:
        lon, lat = math.sin(kappa * dist) / kappa, (1 - math.cos(kappa * dist)) / kappa
    else:
        lon, lat = dist, 0.0
    lon = max(lon, 0.0)
    bins = nearest_feasible_bins([lat, lon])
    return np.array([lat, lon, a, mode, bins[0], bins[1], ttc, s_e, d_e, v_c])
