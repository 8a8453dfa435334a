"""The reactive expert: a driver that acts only on what it can observe now, callable at any state.

It is a pure function of (route, ego state, agents and static obstacles as they are now): no memory,
no future of the logs. It labels any state a policy reaches (DAgger), drives the logged expert of
generated scenarios (``scenarios.generation``, through :func:`reactive_drive`), and is the ``reactive``
baseline of ``python -m evaluation``.

**What it sees.** The route: the lane centres of the scenario's route (the rear-axle path), their
speed limits and the road edges (:class:`ReactiveRoute`, built once per scenario); the ego's
rear-axle state (x, y, yaw, v); every agent present within ``sensing_range`` m of the ego (box centre,
yaw, length and width, velocity) and every static obstacle box in range. Frames as ``sim.frames``:
world metres, yaw counter-clockwise from +x.

**What it does**, each call (all in the route's frame: arclength s along the route, lateral d left):

1. *Where it is*: the ego's rear axle projects onto the route at (s_e, d_e).
2. *Nudges*: a static obstacle that reaches within ``nudge_clearance`` of the ego's side, were it
   centred on the route, shifts the ego's target line sideways (the side with room, up to
   ``max_nudge`` and within the road edges): a quintic ramp in over max(``min_nudge_ramp``,
   ``nudge_ramp_time`` x limit) metres, held until the ego's rear is past it, ramped out.
3. *Steering* (lane following): pure pursuit to the target line's point ``max(min_lookahead,
   lookahead_time x v)`` ahead, from wherever the ego is: it comes back to the line with damping
   1/sqrt(2) and tracks a circle without error.
4. *Speed*: cruise at the route's allowed speed at s_e -- the lane's speed limit, capped in curves by
   ``lat_accel`` (v = sqrt(a_lat / curvature)), both rounded down to ``speed_quantum`` (a held
   longitudinal bin drives a multiple of 0.5 m/s: RAD's bins are 0.25 m per 0.5 s), and lowered ahead
   of a slower stretch so that reaching it takes at most ``comfort_decel`` / 2 -- approached as
   a = (v_cruise - v) / ``speed_tau`` within [-comfort_decel, accel].
5. *Car following* (IDM, Treiber et al. 2000): every agent in the ego's corridor ahead (the target
   line, widened by the ego's half width, the agent's half extent across it and ``lateral_margin``) is
   a leader: a = accel [1 - (s*/s)^2], s* = min_gap + v time_gap + v dv / (2 sqrt(accel comfort_decel)).
6. *Yielding*: an agent outside the corridor whose constant-velocity prediction over ``horizon`` s
   -- in the route's frame: its speeds along and across the route held, so that a car following a
   lane beside the ego's stays in it through a curve -- enters the corridor: if it joins the corridor
   and stays (a merge, a cut-in) it is a leader from now on (when it is ahead of the ego's centre); if it
   crosses, the stretch of route it sweeps is a conflict zone,
   and unless the ego (accelerating to its cruise speed) clears the zone ``clear_time`` s before the
   agent enters it, or the agent has left it ``pass_time`` s before the ego could reach it, the zone's
   near edge is a stopped car for IDM. A static obstacle still in the corridor after the nudge is one too.
7. *The action*: the acceleration is the least of these, within [-max_decel, accel]; the target
   displacement is the point of the pure-pursuit arc at the distance that acceleration covers in 0.5 s
   (``sim.dynamics.anchor_to_controls`` inverted); the action is the nearest feasible bin pair.

Fast path: numba kernels (``cache=True``), ~10 us a call; :mod:`scenarios.reactive_reference` is the
plain-numpy reference of the same rules, held to it by tests.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field, fields
from functools import cached_property

import numpy as np
from numba import njit

from scenarios.actions import LATERAL_BINS, LONGITUDINAL_BINS, half_widths
from scenarios.expert import _nearest
from scenarios.format import EgoSpec, MapData, Scenario
from scenarios.roads import simplify_polyline
from sim.geometry import polyline_arclength, polyline_heading, resample_polyline

ROUTE_SPACING = 2.0  # m between the route's vertices
ROUTE_BEFORE, ROUTE_AFTER = 50.0, 150.0  # m of straight route added before its start and after its end
ROOM_CAP = 10.0  # m: lateral room where no road edge is found

# modes (what decided the acceleration): ReactiveAction.mode
FREE, LEADER, YIELD, JOIN, STATIC = 0, 1, 2, 3, 4
MODES = ("free", "leader", "yield", "join", "static")


@dataclass(frozen=True)
class ReactiveSettings:
    """The reactive expert's settings (metres, seconds, m/s, m/s^2); defaults as REFERENCE.md's IDM."""

    sensing_range: float = 70.0  # m: agents and obstacles whose centre is farther from the rear axle are unseen
    time_gap: float = 1.3  # s: IDM's desired time headway T
    min_gap: float = 2.0  # m: IDM's standstill gap s0
    accel: float = 1.5  # m/s^2: IDM's a_max, and the free-road acceleration bound
    comfort_decel: float = 2.5  # m/s^2: IDM's comfortable braking b
    max_decel: float = 5.0  # m/s^2: the hardest braking it commands
    speed_tau: float = 0.4  # s: free road, a = (v_cruise - v) / speed_tau (clipped)
    lat_accel: float = 2.0  # m/s^2: curve speed sqrt(lat_accel / curvature)
    speed_quantum: float = 0.5  # m/s: cruise speeds are rounded down to multiples of this
    horizon: float = 4.0  # s: constant-velocity prediction of the agents
    prediction_step: float = 0.2  # s between predicted positions
    lateral_margin: float = 0.4  # m: corridor half width = ego half width + agent half extent + this
    longitudinal_margin: float = 1.0  # m: added before and after a conflict zone
    clear_time: float = 1.0  # s: the ego goes first only if its rear leaves the zone this long before
    pass_time: float = 0.5  # s: ... or it goes after an agent that left the zone this long before it arrives
    lookahead_time: float = 0.8  # s: pure pursuit looks max(min_lookahead, lookahead_time * v) ahead
    min_lookahead: float = 5.0  # m
    nudge_clearance: float = 0.7  # m between the ego's side and an obstacle it passes
    nudge_ramp_time: float = 2.5  # s at the speed limit: length of the nudge's ramps ...
    min_nudge_ramp: float = 15.0  # m: ... at least this
    max_nudge: float = 2.0  # m: the largest sideways shift
    edge_margin: float = 0.3  # m kept between the ego's side and a road edge when nudging

    def __post_init__(self):
        bad = [f"{k}={v}" for k, v in zip(self.__dataclass_fields__, astuple(self), strict=True) if not v > 0]
        if bad:
            raise ValueError(f"ReactiveSettings: every setting must be > 0, got {', '.join(bad)}")

    @staticmethod
    def with_overrides(overrides: dict, where: str = "ReactiveSettings") -> ReactiveSettings:
        """The defaults with ``overrides`` ({name: number}) in place; an unknown name or a value that is not a
        number > 0 is a ValueError naming ``where`` (the setting a user wrote)."""
        names = [f.name for f in fields(ReactiveSettings)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {unknown}; the reactive expert's are {names}")
        try:
            return ReactiveSettings(**{k: float(v) for k, v in overrides.items()})
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None

    @cached_property
    def array(self) -> np.ndarray:
        """The settings as the kernels take them: float64 [22] in field order."""
        return np.array(astuple(self), dtype=np.float64)


DEFAULT_SETTINGS = ReactiveSettings()
# indices into ReactiveSettings.array (field order)
(_RANGE, _TGAP, _S0, _ACC, _B, _BMAX, _TAU, _LATACC, _QUANT, _HOR, _PSTEP, _LATM, _LONM, _CLEAR, _PASS, _LOOKT,
 _LOOKMIN, _NCLR, _NRAMPT, _NRAMPMIN, _NMAX, _EDGEM) = range(22)  # fmt: skip


def quantise_down(v, quantum: float) -> np.ndarray:
    """Speeds [..] rounded down to multiples of ``quantum`` (m/s), at least one quantum."""
    return np.maximum(np.floor(np.asarray(v, dtype=np.float64) / quantum + 1e-9) * quantum, quantum)


@dataclass(frozen=True)
class ReactiveRoute:
    """The route as the reactive expert reads it: vertices every ``ROUTE_SPACING`` m, with
    ``ROUTE_BEFORE`` / ``ROUTE_AFTER`` m of straight extension at the ends.

    xy [M, 2] (world m), s [M] arclength (m, 0 at the route's first lane's start), tangent [M, 2]
    (unit, of the segment from vertex i; the last repeats), limit [M] (m/s, the lane's speed limit),
    v_allow [M] (m/s: the cruise speed -- limit and curve speed rounded down to the quantum, lowered
    ahead of slower stretches at comfort_decel / 2), room [M, 2] (m from the centre line to the road
    edge on the left and on the right, ``ROOM_CAP`` where there is none), width [M] (m, lane width).
    """

    xy: np.ndarray
    s: np.ndarray
    tangent: np.ndarray
    limit: np.ndarray
    v_allow: np.ndarray
    room: np.ndarray
    width: np.ndarray

    @staticmethod
    def of(scenario: Scenario, settings: ReactiveSettings = DEFAULT_SETTINGS) -> ReactiveRoute:
        return ReactiveRoute.from_map(scenario.map, scenario.route, settings)

    @staticmethod
    def from_map(map_data: MapData, route, settings: ReactiveSettings = DEFAULT_SETTINGS) -> ReactiveRoute:
        """From a map and the route's lane ids (in order)."""
        poly = map_data.route_polyline(route)
        limits = map_data.route_speed_limits(route)
        widths = np.concatenate(
            [np.full(len(map_data.lane(r).centerline), map_data.lane(r).width, dtype=np.float64) for r in route]
        )[: len(poly)]
        s_orig = polyline_arclength(poly)
        xy = resample_polyline(poly, ROUTE_SPACING)
        s = polyline_arclength(xy)
        # a resampled vertex takes the limit and width of the original segment it lies on
        seg = np.clip(np.searchsorted(s_orig, s * (s_orig[-1] / max(s[-1], 1e-9)), side="right") - 1, 0, len(poly) - 1)
        limit, width = limits[seg], widths[np.minimum(seg, len(widths) - 1)]
        h = polyline_heading(xy)
        before = np.arange(np.ceil(ROUTE_BEFORE / ROUTE_SPACING), 0, -1) * ROUTE_SPACING
        after = np.arange(1, np.ceil(ROUTE_AFTER / ROUTE_SPACING) + 1) * ROUTE_SPACING
        d0, d1 = np.array([np.cos(h[0]), np.sin(h[0])]), np.array([np.cos(h[-1]), np.sin(h[-1])])
        xy = np.concatenate([xy[0] - before[:, None] * d0, xy, xy[-1] + after[:, None] * d1])
        limit = np.concatenate([np.full(len(before), limit[0]), limit, np.full(len(after), limit[-1])])
        width = np.concatenate([np.full(len(before), width[0]), width, np.full(len(after), width[-1])])
        s = polyline_arclength(xy) - before[0]
        seg_d = np.diff(xy, axis=0)
        tangent = seg_d / np.linalg.norm(seg_d, axis=1, keepdims=True)
        tangent = np.concatenate([tangent, tangent[-1:]])
        v_allow = allowed_speeds(xy, s, limit, settings)
        room = road_room(xy, tangent, map_data.road_edges)
        c = np.ascontiguousarray
        return ReactiveRoute(c(xy), c(s), c(tangent), c(limit), c(v_allow), c(room), c(width))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.xy, self.s, self.tangent, self.v_allow, self.room


def allowed_speeds(xy: np.ndarray, s: np.ndarray, limit: np.ndarray, settings: ReactiveSettings) -> np.ndarray:
    """[M] m/s: the cruise speed along a route (see :class:`ReactiveRoute`)."""
    h = np.unwrap(np.arctan2(np.diff(xy[:, 1]), np.diff(xy[:, 0])))
    ds = np.diff(s)
    k = np.abs(np.diff(h)) / np.maximum(0.5 * (ds[1:] + ds[:-1]), 1e-6)  # at the inner vertices
    k = np.concatenate([[0.0], k, [0.0]])
    if len(k) >= 5:  # a light smoothing: 1 m vertices of offset lines wobble a little
        k = np.convolve(np.pad(k, 2, mode="edge"), np.ones(5) / 5, mode="valid")
    q = settings.speed_quantum
    v = np.minimum(quantise_down(limit, q), quantise_down(np.sqrt(settings.lat_accel / np.maximum(k, 1e-6)), q))
    b = 0.5 * settings.comfort_decel
    for i in range(len(v) - 2, -1, -1):  # slow down ahead of a slower stretch
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * b * (s[i + 1] - s[i])))
    return v


def road_room(xy: np.ndarray, tangent: np.ndarray, edges) -> np.ndarray:
    """[M, 2] m: along the left and the right normal of each route vertex, the distance to the nearest
    road-edge segment it crosses (``ROOM_CAP`` where none is)."""
    room = np.full((len(xy), 2), ROOM_CAP)
    if not len(edges):
        return room
    edges = [simplify_polyline(e) for e in edges]  # straight curbs: two vertices, not hundreds
    a = np.concatenate([e[:-1] for e in edges])  # [E, 2] segment starts
    b = np.concatenate([e[1:] for e in edges])
    n = np.stack([-tangent[:, 1], tangent[:, 0]], 1)  # [M, 2] left normals
    e = b - a  # [E, 2]
    # p + lam n = a + mu e  ->  solve per (vertex, segment) pair
    den = n[:, None, 0] * (-e[None, :, 1]) - n[:, None, 1] * (-e[None, :, 0])  # [M, E]
    r = a[None] - xy[:, None]  # [M, E, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = (r[..., 0] * (-e[None, :, 1]) - r[..., 1] * (-e[None, :, 0])) / den
        mu = (n[:, None, 0] * r[..., 1] - n[:, None, 1] * r[..., 0]) / den
    ok = (np.abs(den) > 1e-9) & (mu >= 0.0) & (mu <= 1.0)
    left = np.where(ok & (lam > 0), lam, np.inf).min(axis=1)
    right = np.where(ok & (lam < 0), -lam, np.inf).min(axis=1)
    room[:, 0] = np.minimum(left, ROOM_CAP)
    room[:, 1] = np.minimum(right, ROOM_CAP)
    return room


def agent_velocities(xy: np.ndarray, present: np.ndarray, dt: float) -> np.ndarray:
    """[T, N, 2] world m/s of agents at xy [T, N, 2] with present [T, N]: at each step the mean of the
    forward and backward differences that exist (both steps present); 0 where neither does."""
    T = xy.shape[0]
    vel = np.zeros_like(xy, dtype=np.float64)
    if T < 2 or xy.shape[1] == 0:
        return vel
    d = (xy[1:] - xy[:-1]) / dt  # [T-1, N, 2]
    ok = present[1:] & present[:-1]
    fwd, bwd = np.zeros_like(vel), np.zeros_like(vel)
    nf, nb = np.zeros(present.shape), np.zeros(present.shape)
    fwd[:-1] = np.where(ok[..., None], d, 0.0)
    nf[:-1] = ok
    bwd[1:] = np.where(ok[..., None], d, 0.0)
    nb[1:] = ok
    n = nf + nb
    vel = np.divide(fwd + bwd, n[..., None], out=vel, where=n[..., None] > 0)
    vel[~present] = 0.0
    return vel


def ego_array(ego: EgoSpec) -> np.ndarray:
    """(half width, rear axle to front, rear axle to rear, rear axle to box centre, wheelbase) m."""
    return np.array(
        [0.5 * ego.width, ego.center_offset + 0.5 * ego.length, 0.5 * ego.length - ego.center_offset,
         ego.center_offset, ego.wheelbase], dtype=np.float64,
    )  # fmt: skip


LAT_BINS = np.ascontiguousarray(LATERAL_BINS)
LON_BINS = np.ascontiguousarray(LONGITUDINAL_BINS)
HALF_WIDTHS = np.ascontiguousarray(half_widths().astype(np.int64))
ROW = 10  # entries of a plan's output row


@dataclass(frozen=True)
class ReactiveAction:
    """One decision: bins (lateral index, longitudinal index) int64 [2], displacement (lateral m, left;
    longitudinal m) [2] over 0.5 s in the ego frame, accel (m/s^2, what the rules asked for), mode (one
    of MODES: what set the acceleration), ttc (s to the nearest moving leader -- in the corridor, or
    joining it -- at the closing speed; inf without one), route_s and route_d (m: the ego on the route),
    v_cruise (m/s there)."""

    bins: np.ndarray
    displacement: np.ndarray
    accel: float
    mode: str
    ttc: float
    route_s: float
    route_d: float
    v_cruise: float

    @staticmethod
    def from_row(row: np.ndarray) -> ReactiveAction:
        return ReactiveAction(
            np.array([int(row[4]), int(row[5])], dtype=np.int64), row[:2].copy(), float(row[2]), MODES[int(row[3])],
            float(row[6]), float(row[7]), float(row[8]), float(row[9]),
        )  # fmt: skip


def _sizes(a, n: int) -> np.ndarray:
    """Box sizes [n, >= 2] -> contiguous (length, width) [n, 2]."""
    a = np.asarray(a, dtype=np.float64)
    return np.zeros((0, 2)) if n == 0 else np.ascontiguousarray(a.reshape(n, -1)[:, :2])


def _f64(a, shape_tail: tuple, name: str) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.shape[1:] != shape_tail and not (a.size == 0):
        raise ValueError(f"reactive expert: {name} must be [N, {', '.join(map(str, shape_tail))}], got {a.shape}")
    return a.reshape((-1, *shape_tail)) if a.size == 0 else a


def reactive_actions(
    route: ReactiveRoute,
    states,
    agent_xy,
    agent_yaw,
    agent_size,
    agent_vel,
    agent_present,
    obstacle_xy=None,
    obstacle_yaw=None,
    obstacle_size=None,
    ego: EgoSpec | None = None,
    settings: ReactiveSettings = DEFAULT_SETTINGS,
) -> np.ndarray:
    """The reactive expert for B egos on one route among the same agents and obstacles.

    states: [B, 4] (x, y, yaw, v) rear axle; agent_xy [N, 2] box centres, agent_yaw [N], agent_size
    [N, >= 2] (length, width), agent_vel [N, 2] world m/s, agent_present [N] bool; obstacle_xy [K, 2],
    obstacle_yaw [K], obstacle_size [K, >= 2] (None: no obstacles). Returns float64 [B, 10]: lateral
    and longitudinal displacement (m), accel (m/s^2), mode (index into MODES), lateral bin, longitudinal
    bin, ttc (s), route s, route d (m), cruise speed (m/s) -- :meth:`ReactiveAction.from_row` reads a row.
    """
    states = np.ascontiguousarray(states, dtype=np.float64).reshape(-1, 4)
    axy = _f64(agent_xy, (2,), "agent_xy")
    asz = _sizes(agent_size, len(axy))
    ayaw = np.ascontiguousarray(agent_yaw, dtype=np.float64).reshape(len(axy))
    avel = _f64(agent_vel, (2,), "agent_vel")
    apr = np.ascontiguousarray(agent_present, dtype=np.bool_).reshape(len(axy))
    if obstacle_xy is None:
        oxy, oyaw, osz = np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2))
    else:
        oxy = _f64(obstacle_xy, (2,), "obstacle_xy")
        oyaw = np.ascontiguousarray(obstacle_yaw, dtype=np.float64).reshape(len(oxy))
        osz = _sizes(obstacle_size, len(oxy))
    out = np.empty((len(states), ROW))
    _plan_batch_kernel(
        route.xy, route.s, route.tangent, route.v_allow, route.room, states, axy, ayaw, asz, avel, apr, oxy, oyaw,
        osz, ego_array(ego or EgoSpec()),
        settings.array, LAT_BINS, LON_BINS, HALF_WIDTHS, out,
    )  # fmt: skip
    return out


def reactive_action(route: ReactiveRoute, state, *agents_and_obstacles, **kw) -> ReactiveAction:
    """:func:`reactive_actions` for one ego state [4] -> :class:`ReactiveAction`."""
    return ReactiveAction.from_row(reactive_actions(route, np.asarray(state)[None], *agents_and_obstacles, **kw)[0])


@dataclass(frozen=True)
class ReactiveScene:
    """What the reactive expert reads of one scenario, per step t = 0..T-1: the route, the agents
    (agent_xy [T, N, 2] box centres, agent_yaw [T, N], agent_vel [T, N, 2] as the env's
    ``ScenarioData.agent_vel``, agent_present [T, N]; agent_size [N, 2]) and the static obstacles
    (obstacle_xy [K, 2], obstacle_yaw [K], obstacle_size [K, 2])."""

    route: ReactiveRoute
    agent_xy: np.ndarray
    agent_yaw: np.ndarray
    agent_size: np.ndarray
    agent_vel: np.ndarray
    agent_present: np.ndarray
    obstacle_xy: np.ndarray
    obstacle_yaw: np.ndarray
    obstacle_size: np.ndarray
    ego: EgoSpec = field(default_factory=EgoSpec)
    dt: float = 0.1
    settings: ReactiveSettings = DEFAULT_SETTINGS

    @staticmethod
    def of(scenario: Scenario, settings: ReactiveSettings = DEFAULT_SETTINGS) -> ReactiveScene:
        poses, sizes, present = scenario.agent_arrays()  # [N, T, 4], [N, 3], [N, T]
        xy = np.ascontiguousarray(poses[..., :2].transpose(1, 0, 2))
        pr = np.ascontiguousarray(present.T)
        op, osz = scenario.obstacle_arrays()
        c = np.ascontiguousarray
        return ReactiveScene(
            ReactiveRoute.of(scenario, settings), xy, c(poses[..., 3].T), c(sizes[:, :2]),
            agent_velocities(xy, pr, scenario.dt), pr, c(op[:, :2]), c(op[:, 3]), c(osz[:, :2]), scenario.ego,
            float(scenario.dt), settings,
        )  # fmt: skip

    def actions(self, states, t: int) -> np.ndarray:
        """:func:`reactive_actions` rows [B, 10] for egos at states [B, 4] at step t (clipped to 0..T-1)."""
        t = min(max(int(t), 0), self.agent_xy.shape[0] - 1)
        return reactive_actions(
            self.route, states, self.agent_xy[t], self.agent_yaw[t], self.agent_size, self.agent_vel[t],
            self.agent_present[t], self.obstacle_xy, self.obstacle_yaw, self.obstacle_size, self.ego, self.settings,
        )  # fmt: skip

    def action(self, state, t: int) -> ReactiveAction:
        return ReactiveAction.from_row(self.actions(np.asarray(state)[None], t)[0])


# -- the kernels -------------------------------------------------------------------------------------


@njit(cache=True)
def _seg_project(rxy, rs, rt, i, px, py):
    """(squared distance, s, d) of point p on route segment i (clamped to it); d > 0 left of it."""
    ax, ay = rxy[i, 0], rxy[i, 1]
    tx, ty = rt[i, 0], rt[i, 1]
    L = rs[i + 1] - rs[i]
    rx, ry = px - ax, py - ay
    u = min(max(rx * tx + ry * ty, 0.0), L)
    fx, fy = px - (ax + u * tx), py - (ay + u * ty)
    return fx * fx + fy * fy, rs[i] + u, tx * ry - ty * rx


@njit(cache=True)
def _project(rxy, rs, rt, px, py, i0, i1):
    """Nearest point of route segments i0..i1-1 to p: (segment, s, d)."""
    best, bi, bs, bd = np.inf, i0, rs[i0], 0.0
    for i in range(max(i0, 0), min(i1, rs.shape[0] - 1)):
        d2, s, d = _seg_project(rxy, rs, rt, i, px, py)
        if d2 < best:
            best, bi, bs, bd = d2, i, s, d
    return bi, bs, bd


@njit(cache=True)
def _project_near(rxy, rs, rt, px, py, i):
    """Nearest route point to p by descent from segment i: (segment, s, d)."""
    M1 = rs.shape[0] - 1
    i = min(max(i, 0), M1 - 1)
    d2, s, d = _seg_project(rxy, rs, rt, i, px, py)
    while True:
        moved = False
        for j in (i - 1, i + 1):
            if 0 <= j < M1:
                e2, es, ed = _seg_project(rxy, rs, rt, j, px, py)
                if e2 < d2 - 1e-12:
                    i, d2, s, d, moved = j, e2, es, ed, True
                    break
        if not moved:
            return i, s, d


@njit(cache=True)
def _index(rs, s):
    """The route segment holding arclength s (the first or last one outside the route)."""
    i = np.searchsorted(rs, s, side="right") - 1
    return min(max(i, 0), rs.shape[0] - 2)


@njit(cache=True)
def _smooth(u):
    u = min(max(u, 0.0), 1.0)
    return u * u * u * (10.0 - 15.0 * u + 6.0 * u * u)


@njit(cache=True)
def _offset(nudge, n, s):
    """The target line's lateral offset (m, left) at arclength s from n nudges (s_in, s_out, ramp, need)."""
    pos, neg = 0.0, 0.0
    for k in range(n):
        b = nudge[k, 3] * (_smooth((s - nudge[k, 0]) / nudge[k, 2]) - _smooth((s - nudge[k, 1]) / nudge[k, 2]))
        pos, neg = max(pos, b), min(neg, b)
    return pos + neg


@njit(cache=True)
def _idm(v, v_lead, gap, S):
    """IDM's interaction term a_max (1 - (s*/s)^2) (m/s^2) behind a leader at speed v_lead, gap m away."""
    dv = v - v_lead
    s_star = S[_S0] + max(0.0, v * S[_TGAP] + v * dv / (2.0 * math.sqrt(S[_ACC] * S[_B])))
    g = max(gap, 0.1)
    return S[_ACC] * (1.0 - (s_star / g) ** 2)


@njit(cache=True)
def _time_to(d, v, v_top, acc):
    """Seconds to cover d m from speed v, accelerating at acc up to max(v, v_top) (inf when it cannot move)."""
    if d <= 0.0:
        return 0.0
    v_top = max(v_top, v)
    if v_top < 0.05:
        return np.inf
    t1 = (v_top - v) / acc
    d1 = 0.5 * (v + v_top) * t1
    if d <= d1:
        return (-v + math.sqrt(v * v + 2.0 * acc * d)) / acc
    return t1 + (d - d1) / v_top


@njit(cache=True)
def _extents(yaw, length, width, tx, ty):
    """(half extent along the route, half extent across it) of a box at yaw where the route's tangent is t."""
    c, s = math.cos(yaw), math.sin(yaw)
    ca = abs(c * tx + s * ty)
    sa = abs(-s * tx + c * ty)
    return 0.5 * (length * ca + width * sa), 0.5 * (length * sa + width * ca)


@njit(cache=True)
def plan_kernel(rxy, rs, rt, rv, rroom, x, y, yaw, v, axy, ayaw, asz, avel, apr, oxy, oyaw, osz, ego, S, lat_bins,
          lon_bins, hw, nudge, out):  # fmt: skip
    """One decision of the reactive expert (module docstring) into out [10]."""
    half_w, front, rear, centre = ego[0], ego[1], ego[2], ego[3]
    R = S[_RANGE]
    v = max(v, 0.0)
    _i_e, s_e, d_e = _project(rxy, rs, rt, x, y, 0, rs.shape[0] - 1)
    lo = _index(rs, s_e - 20.0)
    hi = _index(rs, s_e + R + 20.0) + 1
    # nudges around static obstacles in range
    n_nudge = 0
    for k in range(oxy.shape[0]):
        if (oxy[k, 0] - x) ** 2 + (oxy[k, 1] - y) ** 2 > R * R:
            continue
        i_o, s_o, _ = _project(rxy, rs, rt, oxy[k, 0], oxy[k, 1], lo, hi)
        c, sn = math.cos(oyaw[k]), math.sin(oyaw[k])
        smin, smax, dmin, dmax = np.inf, -np.inf, np.inf, -np.inf
        for cx in (-0.5, 0.5):
            for cy in (-0.5, 0.5):
                px = oxy[k, 0] + cx * osz[k, 0] * c - cy * osz[k, 1] * sn
                py = oxy[k, 1] + cx * osz[k, 0] * sn + cy * osz[k, 1] * c
                _, sp, dp = _project_near(rxy, rs, rt, px, py, i_o)
                smin, smax, dmin, dmax = min(smin, sp), max(smax, sp), min(dmin, dp), max(dmax, dp)
        clr = S[_NCLR] + half_w
        if dmax <= -clr or dmin >= clr:
            continue
        need_l, need_r = dmax + clr, dmin - clr  # >= 0 (shift left), <= 0 (shift right)
        j = _index(rs, 0.5 * (smin + smax))
        ok_l = need_l <= S[_NMAX] and need_l + half_w + S[_EDGEM] <= rroom[j, 0]
        ok_r = -need_r <= S[_NMAX] and -need_r + half_w + S[_EDGEM] <= rroom[j, 1]
        if ok_l and (not ok_r or need_l <= -need_r):
            need = need_l
        elif ok_r:
            need = need_r
        else:
            continue  # no room: it stays in the corridor, a stopped car below
        ramp = max(S[_NRAMPMIN], S[_NRAMPT] * rv[j])
        if smax + rear + 1.0 + ramp < s_e:
            continue  # passed, and the nudge ramped out
        nudge[n_nudge, 0] = smin - front - 1.0 - ramp
        nudge[n_nudge, 1] = smax + rear + 1.0
        nudge[n_nudge, 2] = ramp
        nudge[n_nudge, 3] = need
        n_nudge += 1
    # steering: pure pursuit to the target line
    look = max(S[_LOOKMIN], S[_LOOKT] * v)
    s_t = s_e + look
    j = _index(rs, s_t)
    u = s_t - rs[j]
    off = _offset(nudge, n_nudge, s_t)
    tx, ty = rt[j, 0], rt[j, 1]
    gx = rxy[j, 0] + u * tx - off * ty
    gy = rxy[j, 1] + u * ty + off * tx
    cy_, sy_ = math.cos(yaw), math.sin(yaw)
    px = cy_ * (gx - x) + sy_ * (gy - y)
    py = -sy_ * (gx - x) + cy_ * (gy - y)
    if px > 0.1:
        kappa = 2.0 * py / (px * px + py * py)
    else:  # the target is beside or behind: turn toward it as hard as the bins allow
        kappa = 0.41 if py >= 0 else -0.41
    # speed: cruise, then every constraint
    jv = _index(rs, s_e)
    f = min(max((s_e - rs[jv]) / (rs[jv + 1] - rs[jv]), 0.0), 1.0)
    v_c = rv[jv] + f * (rv[jv + 1] - rv[jv])
    a = min(max((v_c - v) / S[_TAU], -S[_B]), S[_ACC])
    mode = FREE
    ttc = np.inf
    off_e = _offset(nudge, n_nudge, s_e)
    blend = 2.0 * look
    for n in range(axy.shape[0]):
        if not apr[n]:
            continue
        cx, cy = axy[n, 0], axy[n, 1]
        if (cx - x) ** 2 + (cy - y) ** 2 > R * R:
            continue
        i_a, s_a, d_a = _project(rxy, rs, rt, cx, cy, lo, hi)
        ext_lon, ext_lat = _extents(ayaw[n], asz[n, 0], asz[n, 1], rt[i_a, 0], rt[i_a, 1])
        half = half_w + ext_lat + S[_LATM]
        v_long = avel[n, 0] * rt[i_a, 0] + avel[n, 1] * rt[i_a, 1]
        w = max(0.0, 1.0 - (s_a - s_e) / blend) if s_a > s_e else 1.0
        if abs(d_a - _offset(nudge, n_nudge, s_a) - w * (d_e - off_e)) < half:  # in the corridor now
            if s_a > s_e + centre:
                gap = s_a - ext_lon - (s_e + front)
                acc = _idm(v, max(v_long, 0.0), gap, S)
                if v > v_long:
                    ttc = min(ttc, max(gap, 0.0) / (v - v_long))
                if acc < a:
                    a, mode = acc, LEADER
            continue
        sp_a = math.sqrt(avel[n, 0] ** 2 + avel[n, 1] ** 2)
        if sp_a < 0.3:
            continue
        # constant-velocity prediction in the route's frame: when it enters the corridor, where, when it leaves
        v_lat = -avel[n, 0] * rt[i_a, 1] + avel[n, 1] * rt[i_a, 0]
        n_pred = int(S[_HOR] / S[_PSTEP] + 0.5)
        j_in, t_out, zlo, zhi = -1, np.inf, np.inf, -np.inf
        for m in range(1, n_pred + 1):
            t = m * S[_PSTEP]
            sp, dp = s_a + v_long * t, d_a + v_lat * t
            w = max(0.0, 1.0 - (sp - s_e) / blend) if sp > s_e else 1.0
            if abs(dp - _offset(nudge, n_nudge, sp) - w * (d_e - off_e)) < half:
                if j_in < 0:
                    j_in = m
                zlo, zhi = min(zlo, sp), max(zhi, sp)
            elif j_in >= 0:
                t_out = t
                break
        if j_in < 0:
            continue
        t_in = (j_in - 1) * S[_PSTEP]
        if t_out == np.inf and abs(v_long) > 0.5 * sp_a:  # it joins the corridor and stays: a leader from now
            if s_a > s_e + centre:
                gap = s_a - ext_lon - (s_e + front)
                acc = _idm(v, max(v_long, 0.0), gap, S)
                if v > v_long:
                    ttc = min(ttc, max(gap, 0.0) / (v - v_long))
                if acc < a:
                    a, mode = acc, JOIN
            continue
        zlo -= ext_lon + S[_LONM]
        zhi += ext_lon + S[_LONM]
        d_front = zlo - (s_e + front)
        if d_front <= 0.0:  # the ego's front is already in (or past) the zone: go on through
            continue
        if _time_to(zhi + rear - s_e, v, v_c, S[_ACC]) + S[_CLEAR] <= t_in:
            continue  # the ego clears it first
        t_arr = _time_to(d_front, v, v_c, S[_ACC])
        if t_out + S[_PASS] <= t_arr:
            continue  # it has gone when the ego gets there
        acc = _idm(v, 0.0, d_front, S)
        if acc < a:
            a, mode = acc, YIELD
    # static obstacles still in the (nudged) corridor
    for k in range(oxy.shape[0]):
        if (oxy[k, 0] - x) ** 2 + (oxy[k, 1] - y) ** 2 > R * R:
            continue
        i_o, s_o, d_o = _project(rxy, rs, rt, oxy[k, 0], oxy[k, 1], lo, hi)
        ext_lon, ext_lat = _extents(oyaw[k], osz[k, 0], osz[k, 1], rt[i_o, 0], rt[i_o, 1])
        if s_o + ext_lon < s_e - rear:
            continue
        w = max(0.0, 1.0 - (s_o - s_e) / blend) if s_o > s_e else 1.0
        if abs(d_o - _offset(nudge, n_nudge, s_o) - w * (d_e - off_e)) < half_w + ext_lat + S[_LATM]:
            gap = s_o - ext_lon - (s_e + front)
            acc = _idm(v, 0.0, gap, S)
            if acc < a:
                a, mode = acc, STATIC
    a = min(max(a, -S[_BMAX]), S[_ACC])
    # the displacement over the anchor horizon along the pursuit arc, and its bins
    T = 0.5
    if a >= -v / T:
        dist = v * T + 0.5 * a * T * T
    else:  # it stops within the horizon
        dist = v * v / (2.0 * -a) if a < 0.0 else 0.0
    dist = max(dist, 0.0)
    if abs(kappa) > 1e-9:
        lon = math.sin(kappa * dist) / kappa
        lat = (1.0 - math.cos(kappa * dist)) / kappa
    else:
        lon, lat = dist, 0.0
    lon = max(lon, 0.0)
    bj, bi = _nearest(lat, lon, lat_bins, lon_bins, hw)
    out[0], out[1], out[2], out[3] = lat, lon, a, mode
    out[4], out[5], out[6] = bj, bi, ttc
    out[7], out[8], out[9] = s_e, d_e, v_c


@njit(cache=True)
def _plan_batch_kernel(rxy, rs, rt, rv, rroom, states, axy, ayaw, asz, avel, apr, oxy, oyaw, osz, ego, S, lat_bins,
                lon_bins, hw, out):  # fmt: skip
    nudge = np.empty((max(oxy.shape[0], 1), 4))
    for b in range(states.shape[0]):
        plan_kernel(rxy, rs, rt, rv, rroom, states[b, 0], states[b, 1], states[b, 2], states[b, 3], axy, ayaw, asz,
                    avel, apr, oxy, oyaw, osz, ego, S, lat_bins, lon_bins, hw, nudge, out[b])  # fmt: skip
