"""Generated scenarios: every kind is real (pure geometry), the reactive expert's drive is safe, on its
route and reproduced by its own labels, every rejected draw is counted by reason, generation is
deterministic, places carry many traffic variants, suites are disjoint, obstacles are baked into the
background where the env's static query finds them."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import yaml

import scenarios
from scenarios import generate, generation
from scenarios.checks import (
    CLEARANCE,
    MAX_DECEL,
    MAX_REPLAY_ERROR,
    REASONS,
    collision_steps,
    constant_speed_states,
    expert_checks,
    expert_replay,
    expert_report,
    first_constant_speed_collision,
)
from scenarios.format import KINDS, Agent, Track
from scenarios.garage import ProceduralGarage
from scenarios.generate import parse_args
from scenarios.generation import (
    SEEDS_PER_SUITE,
    SUITE_SEED_BASE,
    TrafficExhausted,
    plan_traffic,
    scenario_id,
    suite_plan,
    suite_seed_base,
)
from scenarios.places import PLACES
from scenarios.scene import load_scene
from sim.geometry import boxes_overlap, project_to_polyline

SHOP = ProceduralGarage()
FAST_SEEDS = (0,)
SLOW_SEEDS = (1, 2, 3, 4, 5)


def _place(kind: str, seed: int, attempt: int = 0):
    return PLACES[kind](np.random.default_rng([seed, KINDS.index(kind), attempt]), SHOP.garage())


def _plan(kind: str, seed: int, variant: int = 0, rejections=None):
    return plan_traffic(_place(kind, seed), seed, variant, "train", SHOP.garage(), rejections=rejections)


@pytest.fixture(scope="module")
def planned():
    """One planned scenario per kind (no Gaussians: geometry only)."""
    return {(k, s): _plan(k, s) for k in KINDS for s in FAST_SEEDS}


# -- checks shared by the fast and the slow tests ---------------------------------------------------


def check_scenario(p) -> None:
    sc = p.scenario
    H = sc.horizon
    assert len(sc.expert.t) == H + 6 and all(a.poses.shape == (H + 1, 4) for a in sc.agents)
    states = sc.expert.states()

    # collision-free with margin, against every agent and static obstacle, at every step; its labels' replay too
    hits = collision_steps(states, sc, margin=CLEARANCE)
    assert len(hits["dynamic"]) == 0 and len(hits["static"]) == 0, (sc.id, hits)
    replay = expert_replay(sc)
    assert sum(len(h) for h in collision_steps(replay, sc).values()) == 0, sc.id

    # speeds within the limit (cruise rounded down to 0.5 m/s), braking within bounds over 0.5 s windows
    v = states[: H + 1, 3]
    limits = sc.map.route_speed_limits(sc.route)
    assert (v >= 0).all() and v.max() <= max(limits.max(), v[0]) + 0.3, (sc.id, v.max(), limits.max())
    r = expert_report(sc)
    assert r["max_decel"] <= MAX_DECEL + 1e-9 and r["max_accel"] <= 3.0 + 1e-9, (sc.id, r)
    assert r["replay_max_error"] < MAX_REPLAY_ERROR, (sc.id, r)
    assert r["distance"] >= 25.0

    # it follows its route: within 0.75 m of its centre line (a nudge around an obstacle is the exception)
    route = sc.map.route_polyline(sc.route)
    _, lat, h = project_to_polyline(states[:, :2], route)
    assert np.abs(lat).max() < 0.75 + (2.0 if sc.static_obstacles else 0.0), (sc.id, np.abs(lat).max())
    assert np.abs((states[:, 2] - h + np.pi) % (2 * np.pi) - np.pi).max() < np.deg2rad(30)

    # the kind is real: holding the initial speed straight ahead (along the route for a merge) hits
    kind = sc.kind
    if kind in ("lead_vehicle", "cut_in", "crossing"):
        assert first_constant_speed_collision(sc)[0] == "dynamic", sc.id
    elif kind == "parked_obstacle":
        assert first_constant_speed_collision(sc)[0] == "static", sc.id
    elif kind == "merge":
        assert first_constant_speed_collision(sc, along_route=True)[0] == "dynamic", sc.id
    else:  # lane keeping: nothing in the way
        assert first_constant_speed_collision(sc, along_route=True) == (None, None), sc.id

    # log-replayed traffic is consistent: no two agents overlap
    poses, sizes, present = sc.agent_arrays()
    for i in range(len(poses)):
        for j in range(i + 1, len(poses)):
            both = present[i] & present[j]
            o = boxes_overlap(
                poses[i, :, :2], poses[i, :, 3], sizes[i, :2], poses[j, :, :2], poses[j, :, 3], sizes[j, :2]
            )
            assert not (o & both).any(), (sc.id, sc.agents[i].id, sc.agents[j].id)
    assert sc.tags["difficulty"] in ("easy", "medium", "hard") and sc.tags["place"] == sc.id[:-3]


@pytest.mark.parametrize("kind", KINDS)
def test_generated_kind(planned, kind):
    for s in FAST_SEEDS:
        check_scenario(planned[(kind, s)])


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_generated_kind_many_seeds(kind):
    for s in SLOW_SEEDS:
        for v in (0, 1):
            check_scenario(_plan(kind, s, v))


def test_constant_speed_states_by_hand(planned):
    sc = planned[("lead_vehicle", 0)].scenario
    st = constant_speed_states(sc)
    v0, (x0, y0, _, yaw0) = sc.expert.speed[0], sc.expert.poses[0]
    np.testing.assert_allclose(st[10, :2], [x0 + v0 * np.cos(yaw0), y0 + v0 * np.sin(yaw0)])
    assert (st[:, 2] == yaw0).all() and (st[:, 3] == v0).all()


def test_deterministic_and_variants_share_their_place(planned):
    a = planned[("cut_in", 0)].scenario
    b = _plan("cut_in", 0).scenario
    np.testing.assert_array_equal(a.expert.poses, b.expert.poses)
    np.testing.assert_array_equal(a.agent_arrays()[0], b.agent_arrays()[0])
    assert a.tags == b.tags
    other = _plan("cut_in", 0, variant=1).scenario  # the same roads, other traffic
    assert other.id == scenario_id("train", "cut_in", 0, 1) == "train-cut_in-00000000-01"
    assert [ln.id for ln in other.map.lanes] == [ln.id for ln in a.map.lanes]
    for la, lb in zip(other.map.lanes, a.map.lanes, strict=True):
        np.testing.assert_array_equal(la.centerline, lb.centerline)
        assert la.speed_limit == lb.speed_limit
    assert not np.array_equal(a.expert.poses, other.expert.poses)
    c = _plan("cut_in", 1).scenario  # another place
    assert not np.array_equal(a.map.lanes[0].centerline, c.map.lanes[0].centerline) or (
        a.map.lanes[0].speed_limit != c.map.lanes[0].speed_limit or len(a.map.lanes) != len(c.map.lanes)
    )


def test_speed_limits_are_drawn_per_road_and_the_expert_cruises_at_them(planned):
    for (kind, _), p in planned.items():
        limits = {round(ln.speed_limit * 3.6) for ln in p.scenario.map.lanes}
        assert limits <= {30, 40, 50, 60}, (kind, limits)
    sc = planned[("lane_keep_straight", 0)].scenario  # nothing in the way: it ends at the limit, rounded down
    limit = sc.map.lane(sc.route[0]).speed_limit
    assert abs(sc.expert.speed[sc.horizon] - np.floor(limit / 0.5) * 0.5) < 0.05


def test_rejected_draws_are_counted_by_reason():
    # the first lead-vehicle places whose first traffic draws fail: every failed draw is counted
    found = False
    for seed in range(10):
        counts: Counter = Counter()
        p = _plan("lead_vehicle", seed, rejections=counts)
        assert set(counts) <= set(REASONS)
        assert sum(counts.values()) >= p.attempts - 1 and (p.attempts == 1) == (not counts)
        found |= p.attempts > 1
    assert found  # some draws are rejected (the lead's timing does not make holding v0 collide)


def test_expert_checks_name_their_reason(planned):
    sc = planned[("lane_keep_straight", 0)].scenario
    assert expert_checks(sc) == {}
    # a car parked on the expert's track at step 40: a collision
    x, y, _, yaw = sc.expert.poses[40]
    T = sc.horizon + 1
    blocker = Agent("x", "vehicle", None, np.array([4.5, 1.9, 1.5]), np.tile([x, y, 0, yaw], (T, 1)), np.ones(T, bool))
    assert "collision" in expert_checks(replace(sc, agents=(*sc.agents, blocker)))
    # the whole track 2 m to the side of its route: a deviation
    e = sc.expert
    side = Track(e.t, e.poses + np.array([0.0, 2.0, 0.0, 0.0]), e.speed)
    assert "deviation" in expert_checks(replace(sc, expert=side))
    # standing still: no progress
    still = Track(e.t, np.tile(e.poses[0], (len(e.t), 1)), np.zeros(len(e.t)))
    assert "progress" in expert_checks(replace(sc, expert=still))
    # a lane-keeping clip is no lead-vehicle clip: holding the speed hits nothing
    assert "kind" in expert_checks(sc, must_collide="dynamic")


def test_suites_draw_from_disjoint_seed_ranges():
    names = ["train", "val", "test", "my-suite", "other"]
    ranges = [(suite_seed_base(n), suite_seed_base(n) + SEEDS_PER_SUITE) for n in names]
    for i in range(len(ranges)):
        for j in range(i + 1, len(ranges)):
            assert ranges[i][1] <= ranges[j][0] or ranges[j][1] <= ranges[i][0], (names[i], names[j])
    assert SUITE_SEED_BASE == {"train": 0, "val": 1_000_000, "test": 2_000_000}
    assert scenario_id("val", "merge", 1_000_003, 4) == "val-merge-01000003-04"
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--seed", str(SEEDS_PER_SUITE - 1), "--count", "2"])


def test_suite_plan_puts_every_place_before_a_second_variant():
    kinds = ("a", "b", "c")
    plan = suite_plan(7, 0, kinds, 3)  # 3 places of 3 variants, the last cut
    assert plan == [("a", 0, 0), ("b", 1, 0), ("c", 2, 0), ("a", 0, 1), ("b", 1, 1), ("c", 2, 1), ("a", 0, 2)]


# -- full generation: PLYs, JSON, static Gaussians -------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    generation.generate_suite(
        out, "test", count=4, kinds=("parked_obstacle", "crossing"), gaussians=5000, progress=False, workers=1,
        variants=2,
    )  # fmt: skip
    return out


def test_generated_files_load(generated):
    suite = scenarios.load_suite(generated)
    assert [s.kind for s in suite] == ["crossing", "crossing", "parked_obstacle", "parked_obstacle"]  # by name
    for sc in suite:
        assert sc.tags["suite"] == "test" and sc.tags["seed"] >= SUITE_SEED_BASE["test"]
        assert sc.tags["difficulty"] in ("easy", "medium", "hard")
        assert sc.scene.background == (generated / "backgrounds" / f"{sc.tags['place']}.ply").resolve()
        assert all(p.parent == (generated / "assets").resolve() for p in sc.scene.assets.values())
        scene = load_scene(sc)
        assert len(scene.background) > 1000 and set(scene.actors) == {a.id for a in sc.agents}
    assert len(list((generated / "backgrounds").glob("*.ply"))) == 2  # one per place, shared by its variants
    manifest = yaml.safe_load((generated / "suite.yaml").read_text())
    assert [s["id"] for s in manifest["scenarios"]] == [
        "test-parked_obstacle-02000000-00", "test-crossing-02000001-00", "test-parked_obstacle-02000000-01",
        "test-crossing-02000001-01",
    ]  # fmt: skip
    assert [p["id"] for p in manifest["places"]] == ["test-parked_obstacle-02000000", "test-crossing-02000001"]
    rej = manifest["rejections"]
    assert rej["total"] == sum(rej["by_reason"].values()) == sum(sum(k.values()) for k in rej["by_kind"].values())
    attempts = sum(s["attempts"] - 1 for s in manifest["scenarios"])
    assert rej["total"] >= attempts


def test_obstacle_gaussians_found_by_static_index(generated):
    from sim.collision import StaticIndex

    sc = next(s for s in scenarios.load_suite(generated) if s.kind == "parked_obstacle")
    index = StaticIndex.from_cloud(load_scene(sc).background, opacity_threshold=0.5)
    lift = 0.3  # the env's query box starts this high (curbs and paint stay below)
    (o,) = sc.static_obstacles
    assert index.count_in_box([o.pose[0], o.pose[1], lift], o.size - [0, 0, lift], float(o.pose[3])) >= 50
    # ... and the expert's box meets none along its drive, while the constant-speed one does
    ego = sc.ego

    def counts(states):
        yaw = states[:, 2]
        c = states[:, :2] + ego.center_offset * np.stack([np.cos(yaw), np.sin(yaw)], 1)
        centers = np.concatenate([c, np.full((len(c), 1), lift)], 1)
        return index.count_in_boxes(centers, [ego.length, ego.width, ego.height - lift], yaw)

    assert counts(sc.expert.states()).max() == 0
    assert counts(constant_speed_states(sc)).max() >= 8


@pytest.mark.slow
def test_generation_is_byte_deterministic(generated, tmp_path):
    """The same files from two worker subprocesses as from this process (the fixture's)."""
    done = []
    files = generation.generate_suite(
        tmp_path, "test", count=4, kinds=("parked_obstacle", "crossing"), gaussians=5000, progress=False, workers=2,
        on_scenario=lambda k, n: done.append((k, n)), variants=2,
    )  # fmt: skip
    assert sorted(f.name for f in files) == sorted(f.name for f in generated.glob("*.json"))
    assert sorted(done) == [(2, 4), (4, 4)]
    for f in files:
        assert f.read_text() == (generated / f.name).read_text()
    for bg in (generated / "backgrounds").glob("*.ply"):
        assert (tmp_path / "backgrounds" / bg.name).read_bytes() == bg.read_bytes()


def test_a_place_whose_traffic_cannot_pass_is_refused(monkeypatch):
    monkeypatch.setattr(generation, "MAX_TRAFFIC_ATTEMPTS", 1)
    counts: Counter = Counter()
    with pytest.raises(TrafficExhausted, match="no traffic passed in 1 draws"):
        for seed in range(10):  # some first draw of a lead-vehicle place fails
            _plan("lead_vehicle", seed, rejections=counts)
    assert counts


def test_cli(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--kinds", "lane_keep_straight", "count=2", "variants=2", "gaussians=2000", "-q"]
    assert generate.main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["scenarios"] == 2
    assert [scenarios.load(f).kind for f in sorted(tmp_path.glob("*.json"))] == ["lane_keep_straight"] * 2
    assert len(list((tmp_path / "backgrounds").glob("*.ply"))) == 1


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--count", "2"], "missing config key out: output folder"),
        (["--out", "x", "--kinds", "lane_keep,merge"], "unknown kind(s) lane_keep"),
        (["--out", "x", "colour=red"], "unknown config key colour"),
        (["--out", "x", "count=two"], "count: expected an integer, got 'two'"),
        (["--out", "x", "--count", "0"], "count: expected >= 1, got 0"),
        (["--out", "x", "--variants", "0"], "variants: expected >= 1, got 0"),
        (["--out", "x", "gaussians=10"], "gaussians: expected >= 1000, got 10"),
        (["--out", "x", "--seed", "999999", "--count", "2"], "seed + places: expected <= 1000000"),
        (["--out", "x", "--cout", "2"], "unrecognized arguments: --cout"),
        (["--out", "x", "cout=2"], "unknown config key cout (did you mean count?)"),
    ],
)
def test_cli_errors(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--kinds" in text and "cut_in" in text and "1,000,000" in text and "--variants" in text


def test_progress_off_a_terminal_is_about_ten_plain_lines():
    """A Ray worker's log or a file gets a line each time the count passes a tenth of the total (by hand:
    14 places of 8 scenarios, a tenth of 112 rounded up is 12: lines at 16, 24, 40, 48, 64, 72, 88, 96 and
    112), never a carriage return; a terminal gets the tqdm bar instead."""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    results = [{"scenarios": [{}] * 8, "place": f"p{i}", "seconds": 0.5} for i in range(14)]
    for stream in (io.StringIO(), Terminal()):
        step = generation._progress(112, True, stream)
        for r in results:
            step(r)
        step(None)
        text = stream.getvalue()
        if stream.isatty():
            assert "generating" in text and "112/112" in text and "scenarios (" not in text
            continue
        assert "\r" not in text
        counts = [int(line.split()[1].split("/")[0]) for line in text.splitlines()]
        assert counts == [16, 24, 40, 48, 64, 72, 88, 96, 112]
        assert text.splitlines()[-1].startswith("generating: 112/112 scenarios (") and "last p13 in 0.5 s" in text
    assert generation._progress(112, False)(results[0]) is None
