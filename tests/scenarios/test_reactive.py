"""The reactive expert: its rules checked against values computed by hand on a straight road (IDM behind a
moving and a stopped car, a crossing car it yields to, one that will have passed and one it passes
first, a parked car it nudges around, an ego off its route steered back), the numba kernel against the
plain-numpy reference, and its closed-loop drive against sim.dynamics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scenarios.actions import LATERAL_BINS, LONGITUDINAL_BINS, half_widths, nearest_feasible_bins
from scenarios.drive import reactive_drive
from scenarios.expert import _kin_step, displacements_from_states, replay_labels, simulate_actions
from scenarios.format import EgoSpec, Lane, MapData
from scenarios.reactive import (
    MODES,
    ReactiveRoute,
    ReactiveScene,
    ReactiveSettings,
    agent_velocities,
    reactive_action,
    reactive_actions,
)
from scenarios.reactive_reference import plan_reference
from sim import dynamics

LIMIT = 50 / 3.6  # 13.89 m/s: the expert cruises at 13.5 (rounded down to 0.5 m/s)
CAR = (4.6, 1.9)
S0, T_GAP, A_MAX, B = 2.0, 1.3, 1.5, 2.5  # the default IDM settings, as REFERENCE.md's


def _road() -> ReactiveRoute:
    """One lane along +x (y = 0) with a lane to its left; curbs at y = -2.25 and y = 5.75."""
    x = np.arange(-100.0, 301.0, 1.0)
    lanes = (
        Lane("a", np.stack([x, np.zeros_like(x)], 1), 3.5, left="b", speed_limit=LIMIT),
        Lane("b", np.stack([x, np.full_like(x, 3.5)], 1), 3.5, right="a", speed_limit=LIMIT),
    )
    edges = (np.array([[-100.0, -2.25], [300.0, -2.25]]), np.array([[-100.0, 5.75], [300.0, 5.75]]))
    return ReactiveRoute.from_map(MapData(lanes, edges), ["a"])


ROAD = _road()


def act(state, agents=(), obstacles=()):
    """The expert at state among agents (x, y, yaw, vx, vy) and obstacles (x, y, yaw, length, width)."""
    a = np.array(agents, dtype=np.float64).reshape(-1, 5)
    o = np.array(obstacles, dtype=np.float64).reshape(-1, 5)
    return reactive_action(
        ROAD, state, a[:, :2], a[:, 2], np.tile(CAR, (len(a), 1)), a[:, 3:5], np.ones(len(a), bool), o[:, :2],
        o[:, 2], o[:, 3:5],
    )  # fmt: skip


def idm_by_hand(v, v_lead, gap):
    s_star = S0 + v * T_GAP + v * (v - v_lead) / (2 * math.sqrt(A_MAX * B))
    return A_MAX * (1 - (s_star / gap) ** 2)


def straight_displacement(v, a):
    return v * 0.5 + 0.5 * a * 0.25


def test_route_cruise_speed_is_the_limit_rounded_down():
    assert ROAD.v_allow[50] == 13.5 and abs(ROAD.limit[50] - LIMIT) < 1e-12
    np.testing.assert_allclose(ROAD.room[50], [5.75, 2.25])


def test_free_road_accelerates_toward_the_cruise_speed():
    r = act([0.0, 0.0, 0.0, 13.3])
    assert r.mode == "free" and abs(r.accel - (13.5 - 13.3) / 0.4) < 1e-12 and r.v_cruise == 13.5
    np.testing.assert_allclose(r.displacement, [0.0, straight_displacement(13.3, 0.5)], atol=1e-12)
    assert (r.bins == nearest_feasible_bins(r.displacement)).all()
    assert act([0.0, 0.0, 0.0, 5.0]).accel == 1.5  # far below: at most the IDM's a_max


def test_idm_behind_a_slower_car():
    # the leader's centre 30 m ahead: gap = 30 - 2.3 (its half length) - 3.8 (rear axle to the ego's front)
    r = act([0.0, 0.0, 0.0, 10.0], agents=[(30.0, 0.0, 0.0, 8.0, 0.0)])
    gap = 30.0 - 2.3 - 3.8
    want = idm_by_hand(10.0, 8.0, gap)  # s* = 2 + 13 + 20 / (2 sqrt 3.75) = 20.16 -> 0.432 m/s^2
    assert abs(want - 0.4322) < 1e-3
    assert r.mode == "leader" and abs(r.accel - want) < 1e-12
    assert abs(r.ttc - gap / 2.0) < 1e-12
    np.testing.assert_allclose(r.displacement, [0.0, straight_displacement(10.0, want)], atol=1e-12)


def test_stopped_car_ahead_brakes_at_most_max_decel():
    r = act([0.0, 0.0, 0.0, 10.0], agents=[(40.0, 0.0, 0.0, 0.0, 0.0)])
    want = idm_by_hand(10.0, 0.0, 40.0 - 2.3 - 3.8)  # s* = 40.8 m on a 33.9 m gap
    assert r.mode == "leader" and abs(r.accel - want) < 1e-12 and -2.0 < want < -0.5
    close = act([0.0, 0.0, 0.0, 10.0], agents=[(25.0, 0.0, 0.0, 0.0, 0.0)])
    assert idm_by_hand(10.0, 0.0, 25.0 - 6.1) < -5.0 and close.accel == -5.0  # clipped at max_decel
    np.testing.assert_allclose(close.displacement, [0.0, straight_displacement(10.0, -5.0)], atol=1e-12)
    # a car in the next lane is no leader
    assert act([0.0, 0.0, 0.0, 10.0], agents=[(25.0, 3.5, 0.0, 0.0, 0.0)]).mode == "free"


def _crossing(x, y0, speed):
    return (x, y0, math.pi / 2, 0.0, speed)  # driving +y across the ego's road


def test_a_crossing_car_that_will_be_there_is_yielded_to():
    # across the road the car's box reaches 2.3 m (half its length): the corridor is 1.0 + 2.3 + 0.4 = 3.7 m
    # either side. From y = -16 at 8 m/s it is in it for t in (1.54, 2.46) s: samples every 0.2 s enter at
    # 1.6 (t_in = 1.4, the sample before) and leave at 2.6. The zone: x = 40 +- (0.95 + 1.0).
    r = act([0.0, 0.0, 0.0, 10.0], agents=[_crossing(40.0, -16.0, 8.0)])
    d_front = 40.0 - 0.95 - 1.0 - 3.8
    # accelerating at 1.5 to 13.5 m/s it could be there after 2.33 + (34.25 - 27.42) / 13.5 = 2.84 s, before
    # the car has left (2.6 + 0.5 s); and it would not clear the zone (3.48 s + 1 s) before 1.4 s
    assert r.mode == "yield" and abs(r.accel - idm_by_hand(10.0, 0.0, d_front)) < 1e-12
    assert r.accel < 0


def test_a_crossing_car_that_will_have_passed_is_not():
    # from y = -4.5 at 12 m/s it is in the corridor for t in (0.07, 0.68) s: gone at 0.8 + 0.5 s < 2.84 s
    r = act([0.0, 0.0, 0.0, 10.0], agents=[_crossing(40.0, -4.5, 12.0)])
    assert r.mode == "free" and r.accel == 1.5


def test_the_ego_goes_first_when_it_clears_the_zone_early():
    # 10 m before the zone at 10 m/s: its rear leaves x = 41.95 after (-10 + sqrt(100 + 3 * 12.95)) / 1.5 =
    # 1.19 s; the car from y = -30 enters at t_in = 3.2 s > 1.19 + 1.0
    r = act([30.0, 0.0, 0.0, 10.0], agents=[_crossing(40.0, -30.0, 8.0)])
    assert r.mode == "free"
    slow = act([30.0, 0.0, 0.0, 1.0], agents=[_crossing(40.0, -30.0, 8.0)])  # crawling it would not
    assert slow.mode == "yield"


def _smooth(u):
    u = min(max(u, 0.0), 1.0)
    return u**3 * (10 - 15 * u + 6 * u * u)


def test_a_parked_car_is_nudged_around():
    # a parked car at x = 60, its left side at y = -0.1: passing 0.7 m clear needs the ego's centre at
    # y = -0.1 + 0.7 + 1.0 = 1.6; there is room on the left (curb 5.75 m away), none on the right
    parked = [(60.0, -1.0, 0.0, 4.5, 1.8)]
    ramp = max(15.0, 2.5 * 13.5)
    s_in, s_out = 60.0 - 2.25 - 3.8 - 1.0 - ramp, 60.0 + 2.25 + 1.0 + 1.0
    r = act([40.0, 0.0, 0.0, 10.0], obstacles=parked)
    look = 8.0  # max(5 m, 0.8 s * 10 m/s)
    off = 1.6 * (_smooth((40.0 + look - s_in) / ramp) - _smooth((40.0 + look - s_out) / ramp))
    k = 2 * off / (look**2 + off**2)
    dist = straight_displacement(10.0, 1.5)
    assert r.mode == "free" and r.accel == 1.5  # nudged, it is no obstacle in the way
    np.testing.assert_allclose(r.displacement, [(1 - math.cos(k * dist)) / k, math.sin(k * dist) / k], atol=1e-12)
    # on the plateau beside it, already 1.6 m left: straight on
    beside = act([55.0, 1.6, 0.0, 10.0], obstacles=parked)  # the plateau: s from 53 to 64.25
    np.testing.assert_allclose(beside.displacement, [0.0, dist], atol=1e-9)
    # with no room to pass (curb on the left, too), it stops behind it instead
    wide = [(60.0, 0.3, 0.0, 4.5, 3.4)]  # 3.4 m wide across the lane: +-2.0 around y = 0.3, needs 4.0 m
    r = act([20.0, 0.0, 0.0, 10.0], obstacles=wide)
    assert r.mode == "static" and abs(r.accel - idm_by_hand(10.0, 0.0, 60.0 - 2.25 - 23.8)) < 1e-12


def test_settings_overridden_by_name_change_what_it_senses():
    """ReactiveSettings.with_overrides (il.labeller): the parked car of the test above, 20 m from the rear axle,
    is out of a 18 m sensing range: the ego drives straight on at its free-road acceleration."""
    short = ReactiveSettings.with_overrides({"sensing_range": 18}, "il.labeller")
    assert short == ReactiveSettings(sensing_range=18.0) and short.array[0] == 18.0
    parked = np.array([[60.0, -1.0]]), np.zeros(1), np.array([[4.5, 1.8]])
    none = np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0, bool)
    r = reactive_action(ROAD, [40.0, 0.0, 0.0, 10.0], *none, *parked, settings=short)
    np.testing.assert_allclose(r.displacement, [0.0, straight_displacement(10.0, 1.5)], atol=1e-12)
    with pytest.raises(ValueError, match=r"il.labeller: unknown setting\(s\) \['range'\]"):
        ReactiveSettings.with_overrides({"range": 18}, "il.labeller")
    with pytest.raises(ValueError, match=r"il.labeller: ReactiveSettings: every setting must be > 0, got horizon=-1"):
        ReactiveSettings.with_overrides({"horizon": -1}, "il.labeller")


def test_an_ego_off_its_route_is_steered_back():
    r = act([20.0, 2.0, 0.0, 8.0])  # 2 m left of its lane's centre, heading along it
    look = max(5.0, 0.8 * 8.0)
    k = 2 * -2.0 / (look**2 + 4.0)
    dist = straight_displacement(8.0, 1.5)
    np.testing.assert_allclose(r.displacement, [(1 - math.cos(k * dist)) / k, math.sin(k * dist) / k], atol=1e-12)
    # and in closed loop it comes back without overshooting much, from 2 m off and 20 degrees off its heading
    state = np.array([20.0, 2.0, math.radians(20.0), 8.0])
    ds = []
    for _ in range(60):
        a = act(state)
        state = simulate_actions(state, a.bins[None], 0.1, EgoSpec())[-1]
        ds.append(state[1])
    assert abs(ds[-1]) < 0.05 and min(ds) > -0.5 and abs(state[2]) < math.radians(1.0)


def test_batched_equals_one_at_a_time():
    rng = np.random.default_rng(0)
    states = np.column_stack(
        [rng.uniform(0, 80, 8), rng.uniform(-2, 2, 8), rng.uniform(-0.3, 0.3, 8), rng.uniform(0, 14, 8)]
    )
    agents = np.array([(45.0, 0.3, 0.0, 6.0, 0.0), _crossing(70.0, -20.0, 9.0)])
    rows = reactive_actions(
        ROAD, states, agents[:, :2], agents[:, 2], np.tile(CAR, (2, 1)), agents[:, 3:], np.ones(2, bool)
    )
    for b in range(8):
        one = act(states[b], agents=agents)
        np.testing.assert_array_equal(rows[b, :2], one.displacement)
        assert MODES[int(rows[b, 3])] == one.mode and rows[b, 2] == one.accel


def _curvy() -> ReactiveRoute:
    t = np.arange(0.0, 260.0, 1.0)
    centre = np.stack([t, 12.0 * np.sin(t / 40.0)], 1)
    return ReactiveRoute.from_map(MapData((Lane("r", centre, 3.5, speed_limit=12.0),)), ["r"])


def test_kernel_matches_the_numpy_reference():
    route = _curvy()
    rng = np.random.default_rng(1)
    settings = ReactiveSettings()
    modes = set()
    for _ in range(300):
        s = rng.uniform(10, 180)
        i = int(np.searchsorted(route.s, s))
        p, t = route.xy[i], route.tangent[i]
        n = np.array([-t[1], t[0]])
        yaw = math.atan2(t[1], t[0]) + rng.normal(0, 0.15)
        state = np.array([*(p + rng.normal(0, 1.0) * n), yaw, rng.uniform(0, 13)])
        N = int(rng.integers(0, 5))
        ahead = route.xy[np.clip(i + rng.integers(2, 30, N), 0, len(route.xy) - 1)]
        axy = ahead + rng.normal(0, 2.5, (N, 2))
        ayaw = rng.uniform(-np.pi, np.pi, N)
        asz = np.column_stack([rng.uniform(3.5, 6.0, N), rng.uniform(1.6, 2.2, N)])
        avel = rng.normal(0, 5, (N, 2))
        apr = rng.random(N) < 0.9
        K = int(rng.integers(0, 2))
        j = np.clip(i + rng.integers(5, 25, K), 0, len(route.xy) - 1)
        oxy = route.xy[j] + rng.uniform(-2.5, 2.5, (K, 1)) * np.stack([-route.tangent[j, 1], route.tangent[j, 0]], 1)
        oyaw, osz = rng.uniform(-0.2, 0.2, K), np.column_stack([rng.uniform(1, 5, K), rng.uniform(0.5, 2, K)])
        args = (state, axy, ayaw, asz, avel, apr, oxy, oyaw, osz)
        fast = reactive_actions(route, state[None], *args[1:], settings=settings)[0]
        ref = plan_reference(route, *args, settings=settings)
        np.testing.assert_allclose(fast, ref, rtol=1e-9, atol=1e-9)
        modes.add(MODES[int(fast[3])])
    assert modes >= {"free", "leader", "yield", "static"}, modes  # the random cases reach every rule


def test_agent_velocities_by_hand():
    xy = np.array([[[0.0, 0.0]], [[1.0, 0.0]], [[3.0, 0.0]], [[3.0, 0.0]]])  # [T=4, N=1, 2], dt = 0.5
    present = np.array([[True], [True], [True], [False]])
    v = agent_velocities(xy, present, 0.5)
    np.testing.assert_allclose(v[:, 0, 0], [2.0, 3.0, 4.0, 0.0])  # forward only, mean, backward only, absent


def test_kin_step_matches_sim_dynamics():
    rng = np.random.default_rng(2)
    hw = half_widths()
    x = np.array([3.0, -1.0, 0.4, 7.0])
    actions = []
    for _ in range(60):
        i = int(rng.integers(0, 61))
        j = 30 + int(rng.integers(-hw[i], hw[i] + 1))
        actions.append((j, i))
    ref = simulate_actions(x, np.array(actions), 0.1, EgoSpec())
    s = tuple(x)
    for k, (j, i) in enumerate(actions):
        s = _kin_step(*s, LATERAL_BINS[j], LONGITUDINAL_BINS[i], EgoSpec().wheelbase, 0.1, dynamics.V_MAX,
                      dynamics.MAX_ACCEL, dynamics.MAX_DECEL, dynamics.MAX_STEER, 0.5)  # fmt: skip
        np.testing.assert_allclose(s, ref[k + 1], atol=1e-9)


@pytest.mark.parametrize("consistent", [False, True])
def test_closed_loop_drive_on_a_curve_and_its_labels(consistent):
    route = _curvy()
    empty = np.zeros((81, 0, 2))
    scene = ReactiveScene(
        route, empty, np.zeros((81, 0)), np.zeros((0, 2)), empty, np.zeros((81, 0), bool), np.zeros((0, 2)),
        np.zeros(0), np.zeros((0, 2)),
    )  # fmt: skip
    x0 = np.array([*route.xy[30], math.atan2(*route.tangent[30][::-1]), 8.0])
    d = reactive_drive(scene, x0, 85, consistent=consistent)
    np.testing.assert_array_equal(d.states, simulate_actions(x0, d.actions, 0.1, EgoSpec()))  # the env's kinematics
    assert abs(d.states[-1, 3] - 12.0) < 0.3  # cruising at the limit (12 m/s is on the 0.5 m/s grid)
    t = np.arange(86) * 0.1
    labels = nearest_feasible_bins(displacements_from_states(d.states, t))[:80]
    err = np.hypot(*(replay_labels(d.states, labels, 0.1, EgoSpec())[:, :2] - d.states[:81, :2]).T).max()
    if consistent:  # choosing among neighbouring bins by what the labels replay keeps the replay close
        assert err < 0.5, err
