"""The reactive expert's closed-loop drive: the logged expert of generated scenarios.

:func:`reactive_drive` runs the reactive expert (``scenarios.reactive``) through the env's kinematics
from a start state for a number of steps, among a scenario's log-replayed agents, choosing among the
bins next to its own action the ones whose IL labels replay the drive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from scenarios.expert import Drive, _kin_step, _nearest, simulate_actions
from scenarios.reactive import HALF_WIDTHS, LAT_BINS, LON_BINS, ROW, ReactiveScene, ego_array, plan_kernel
from sim.dynamics import ANCHOR_HORIZON, MAX_ACCEL, MAX_DECEL, MAX_STEER, V_MAX

# -- a closed-loop drive (the logged expert of generated scenarios) -------------------------------------


@dataclass(frozen=True)
class ReactiveDrive(Drive):
    """A closed-loop drive of the reactive expert: states [S + 1, 4] (x, y, yaw, v), actions [S, 2] (bins),
    and per step the rules' accel [S] (m/s^2), mode [S] (index into MODES) and ttc [S] (s)."""

    accel: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mode: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ttc: np.ndarray = field(default_factory=lambda: np.zeros(0))


# candidate offsets (lateral, longitudinal bins) around the plain choice, for labels that replay the drive
_NEIGHBOURS = np.array([(dl, dg) for dg in (0, -1, 1) for dl in (0, -1, 1, -2, 2)], dtype=np.int64)


def reactive_drive(scene: ReactiveScene, x0, steps: int, consistent: bool = True) -> ReactiveDrive:
    """The reactive expert driving ``steps`` steps of ``scene.dt`` in closed loop from x0 [4] (x, y, yaw,
    v), through the env's kinematics: each step its action (bins) goes through
    ``sim.dynamics.anchor_to_controls`` and ``bicycle_step``, as in the env. Agents are the scene's at
    each step; past its last step they go on at constant velocity.

    ``consistent``: the env's IL label at a step is the nearest bins to where the drive really is
    0.5 s later, which differs from the action taken wherever the action changes (bins are 2 m/s^2 of
    acceleration apart), and such labels replayed open-loop drift from the drive. So among the plain
    action and its neighbours (+-2 lateral, +-1 longitudinal bins) the expert takes the one nearest its
    target whose own label -- simulating the next 0.5 s with plain actions, the agents predicted at
    constant velocity (what it sees now, nothing more) -- is itself; if none is, the plain action.

    The choices are made by a numba kernel; the states returned are re-simulated from them with
    ``sim.dynamics`` itself (:func:`scenarios.expert.simulate_actions`), so they are what the env does.
    """
    look = round(ANCHOR_HORIZON / scene.dt)
    r = scene.route
    x0 = np.asarray(x0, dtype=np.float64).reshape(4)
    states = np.zeros((steps + 1, 4))
    actions = np.zeros((steps, 2), dtype=np.int64)
    diag = np.zeros((steps, 3))
    _drive_kernel(
        r.xy, r.s, r.tangent, r.v_allow, r.room, scene.agent_xy, scene.agent_yaw, scene.agent_size, scene.agent_vel,
        scene.agent_present, scene.obstacle_xy, scene.obstacle_yaw, scene.obstacle_size, ego_array(scene.ego),
        scene.settings.array, LAT_BINS, LON_BINS, HALF_WIDTHS, _NEIGHBOURS, x0, steps, look, consistent,
        float(scene.dt), V_MAX, MAX_ACCEL, MAX_DECEL, MAX_STEER, float(ANCHOR_HORIZON), states, actions, diag,
    )  # fmt: skip
    return ReactiveDrive(
        simulate_actions(x0, actions, scene.dt, scene.ego), actions, diag[:, 0], diag[:, 1].astype(np.int64),
        diag[:, 2],
    )  # fmt: skip


@njit(cache=True)
def _agents_at(axy, avel, k, t_extra, out):
    """Agents' centres at step k, moved on by t_extra s at their velocity then, into out [N, 2]."""
    for n in range(axy.shape[1]):
        out[n, 0] = axy[k, n, 0] + avel[k, n, 0] * t_extra
        out[n, 1] = axy[k, n, 1] + avel[k, n, 1] * t_extra


@njit(cache=True)
def _label(states, j, fx, fy, lat_bins, lon_bins, hw):
    """The IL label of step j when the drive is at (fx, fy) 0.5 s later: nearest bins to that displacement."""
    dx, dy = fx - states[j, 0], fy - states[j, 1]
    cs, sn = math.cos(states[j, 2]), math.sin(states[j, 2])
    return _nearest(-sn * dx + cs * dy, cs * dx + sn * dy, lat_bins, lon_bins, hw)


@njit(cache=True)
def _drive_kernel(rxy, rs, rt, rv, rroom, axy, ayaw, asz, avel, apr, oxy, oyaw, osz, ego, S, lat_bins, lon_bins, hw,
                  neigh, x0, steps, look, consistent, dt, v_max, a_max, d_max, s_max, T, states, actions,
                  diag):  # fmt: skip
    L = ego[4]
    c = (len(lat_bins) - 1) // 2
    nudge = np.empty((max(oxy.shape[0], 1), 4))
    row = np.empty(ROW)
    pxy = np.empty((axy.shape[1], 2))
    replay = np.zeros((steps + 1, 4))  # the open-loop replay of the labels that are final
    sim = np.zeros((look + 1, 4))  # a candidate's simulated drive: now, then look steps
    x, y, yaw, v = x0[0], x0[1], x0[2], x0[3]
    states[0, 0], states[0, 1], states[0, 2], states[0, 3] = x, y, yaw, v
    replay[0] = states[0]
    last = axy.shape[0] - 1
    for k in range(steps):
        kk = min(k, last)
        _agents_at(axy, avel, kk, (k - kk) * dt, pxy)
        plan_kernel(rxy, rs, rt, rv, rroom, x, y, yaw, v, pxy, ayaw[kk], asz, avel[kk], apr[kk], oxy, oyaw, osz, ego, S,
              lat_bins, lon_bins, hw, nudge, row)  # fmt: skip
        diag[k, 0], diag[k, 1], diag[k, 2] = row[2], row[3], row[6]
        pj, pi = int(row[4]), int(row[5])
        cj, ci = pj, pi
        if consistent:
            j0 = max(k + 1 - look, 0)  # replay[j0] is final: the labels before j0 are
            best = np.inf
            for q in range(neigh.shape[0]):
                j, i = pj + neigh[q, 0], pi + neigh[q, 1]
                if i < 0 or i >= len(lon_bins) or abs(j - c) > hw[i]:
                    continue
                sim[0, 0], sim[0, 1], sim[0, 2], sim[0, 3] = x, y, yaw, v
                sim[1, 0], sim[1, 1], sim[1, 2], sim[1, 3] = _kin_step(
                    x, y, yaw, v, lat_bins[j], lon_bins[i], L, dt, v_max, a_max, d_max, s_max, T
                )
                for m in range(1, look):  # then plain actions, the agents at constant velocity
                    _agents_at(axy, avel, kk, (k - kk + m) * dt, pxy)
                    plan_kernel(rxy, rs, rt, rv, rroom, sim[m, 0], sim[m, 1], sim[m, 2], sim[m, 3], pxy, ayaw[kk], asz,
                          avel[kk], apr[kk], oxy, oyaw, osz, ego, S, lat_bins, lon_bins, hw, nudge, row)  # fmt: skip
                    sim[m + 1, 0], sim[m + 1, 1], sim[m + 1, 2], sim[m + 1, 3] = _kin_step(
                        sim[m, 0], sim[m, 1], sim[m, 2], sim[m, 3], lat_bins[int(row[4])], lon_bins[int(row[5])], L,
                        dt, v_max, a_max, d_max, s_max, T,
                    )  # fmt: skip
                # the labels of steps j0..k as this future makes them, replayed from replay[j0]
                rx, ry, ryaw, rvv = replay[j0, 0], replay[j0, 1], replay[j0, 2], replay[j0, 3]
                for jl in range(j0, k + 1):
                    f = jl + look - k  # index into sim of the state 0.5 s after step jl
                    lj, li = _label(states, jl, sim[f, 0], sim[f, 1], lat_bins, lon_bins, hw)
                    rx, ry, ryaw, rvv = _kin_step(rx, ry, ryaw, rvv, lat_bins[lj], lon_bins[li], L, dt, v_max, a_max,
                                                  d_max, s_max, T)  # fmt: skip
                # the replay's error at step k + 1, and where it heads: in 1 s at the velocity error
                tx, ty, tyaw, tv = sim[1, 0], sim[1, 1], sim[1, 2], sim[1, 3]
                ex = rx - tx + (rvv * math.cos(ryaw) - tv * math.cos(tyaw))
                ey = ry - ty + (rvv * math.sin(ryaw) - tv * math.sin(tyaw))
                e = math.sqrt(ex * ex + ey * ey) + math.sqrt((rx - tx) ** 2 + (ry - ty) ** 2)
                e += 0.01 * (abs(j - pj) + abs(i - pi))  # near-ties go to the plain action
                if e < best:
                    best, cj, ci = e, j, i
        x, y, yaw, v = _kin_step(x, y, yaw, v, lat_bins[cj], lon_bins[ci], L, dt, v_max, a_max, d_max, s_max, T)
        states[k + 1, 0], states[k + 1, 1], states[k + 1, 2], states[k + 1, 3] = x, y, yaw, v
        actions[k, 0], actions[k, 1] = cj, ci
        jf = k + 1 - look  # the label of step jf is final now: move the replay on
        if jf >= 0:
            lj, li = _label(states, jf, x, y, lat_bins, lon_bins, hw)
            replay[jf + 1, 0], replay[jf + 1, 1], replay[jf + 1, 2], replay[jf + 1, 3] = _kin_step(
                replay[jf, 0], replay[jf, 1], replay[jf, 2], replay[jf, 3], lat_bins[lj], lon_bins[li], L, dt, v_max,
                a_max, d_max, s_max, T,
            )  # fmt: skip
