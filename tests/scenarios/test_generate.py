"""Generated scenarios: every kind is real (pure geometry), the expert is safe, comfortable and
reproduced by its own labels, generation is deterministic, suites are disjoint, obstacles are baked
into the background where the env's static query finds them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scenarios
from scenarios import generate, generation
from scenarios.checks import (
    CLEARANCE,
    collision_steps,
    constant_speed_states,
    expert_report,
    first_constant_speed_collision,
)
from scenarios.format import KINDS
from scenarios.generate import parse_args
from scenarios.generation import (
    SEEDS_PER_SUITE,
    SUITE_SEED_BASE,
    ProceduralGarage,
    plan_scenario,
    scenario_id,
    suite_seed_base,
)
from scenarios.scene import load_scene
from sim.geometry import boxes_overlap, project_to_polyline

SHOP = ProceduralGarage()
FAST_SEEDS = (0,)
SLOW_SEEDS = (1, 2, 3, 4, 5)


def _plan(kind: str, seed: int):
    return plan_scenario(kind, suite_seed_base("train") + seed, "train", SHOP.garage())


@pytest.fixture(scope="module")
def planned():
    """One planned scenario per kind (no Gaussians: geometry only)."""
    return {(k, s): _plan(k, s) for k in KINDS for s in FAST_SEEDS}


# -- checks shared by the fast and the slow tests ---------------------------------------------------


def check_scenario(p) -> None:
    sc, draft = p.scenario, p.draft
    H = sc.horizon
    assert len(sc.expert.t) == H + 6 and all(a.poses.shape == (H + 1, 4) for a in sc.agents)
    states = sc.expert.states()

    # collision-free with margin, against every agent and static obstacle, at every step
    hits = collision_steps(states, sc, margin=CLEARANCE)
    assert len(hits["dynamic"]) == 0 and len(hits["static"]) == 0, (sc.id, hits)

    # human-like speed: accel within +-3 m/s^2 every step, braking over 0.5 s comfortable, small jerk
    v = states[: H + 1, 3]
    a = np.diff(v) / sc.dt
    assert (v >= 0).all() and v.max() < 16.0
    assert np.abs(a).max() <= 3.0 + 1e-6, (sc.id, np.abs(a).max())
    assert ((v[:-5] - v[5:]) / 0.5).max() <= 3.0 + 1e-6
    r = expert_report(sc)
    assert r["mean_jerk"] <= 6.0, (sc.id, r)

    # the IL labels, replayed open-loop from the first pose, reproduce the drive
    assert r["replay_max_error"] < 0.5, (sc.id, r)

    # it follows its route: within a lane of the route's centre line (the nudge is the exception)
    route = sc.map.route_polyline(sc.route)
    _, lat, h = project_to_polyline(states[:, :2], route)
    limit = 0.5 + draft.params.get("nudge", 0.0)
    assert np.abs(lat).max() < limit, (sc.id, np.abs(lat).max())
    assert np.abs((states[:, 2] - h + np.pi) % (2 * np.pi) - np.pi).max() < np.deg2rad(20)

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


@pytest.mark.parametrize("kind", KINDS)
def test_generated_kind(planned, kind):
    for s in FAST_SEEDS:
        check_scenario(planned[(kind, s)])


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_generated_kind_many_seeds(kind):
    for s in SLOW_SEEDS:
        check_scenario(_plan(kind, s))


def test_constant_speed_states_by_hand(planned):
    sc = planned[("lead_vehicle", 0)].scenario
    st = constant_speed_states(sc)
    v0, (x0, y0, _, yaw0) = sc.expert.speed[0], sc.expert.poses[0]
    np.testing.assert_allclose(st[10, :2], [x0 + v0 * np.cos(yaw0), y0 + v0 * np.sin(yaw0)])
    assert (st[:, 2] == yaw0).all() and (st[:, 3] == v0).all()


def test_deterministic_from_seed(planned):
    a = planned[("cut_in", 0)].scenario
    b = _plan("cut_in", 0).scenario
    np.testing.assert_array_equal(a.expert.poses, b.expert.poses)
    np.testing.assert_array_equal(a.agent_arrays()[0], b.agent_arrays()[0])
    assert a.tags == b.tags
    c = _plan("cut_in", 1).scenario
    assert not np.array_equal(a.expert.poses, c.expert.poses)


def test_suites_draw_from_disjoint_seed_ranges():
    names = ["train", "val", "test", "my-suite", "other"]
    ranges = [(suite_seed_base(n), suite_seed_base(n) + SEEDS_PER_SUITE) for n in names]
    for i in range(len(ranges)):
        for j in range(i + 1, len(ranges)):
            assert ranges[i][1] <= ranges[j][0] or ranges[j][1] <= ranges[i][0], (names[i], names[j])
    assert SUITE_SEED_BASE == {"train": 0, "val": 1_000_000, "test": 2_000_000}
    assert scenario_id("val", "merge", 1_000_003) == "val-merge-01000003"
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--seed", str(SEEDS_PER_SUITE - 1), "--count", "2"])


# -- full generation: PLYs, JSON, static Gaussians -------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    generation.generate_suite(
        out, "test", count=2, kinds=("parked_obstacle", "crossing"), gaussians=5000, progress=False, workers=1
    )
    return out


def test_generated_files_load(generated):
    suite = scenarios.load_suite(generated)
    assert [s.kind for s in suite] == ["crossing", "parked_obstacle"]  # sorted by file name
    for sc in suite:
        assert sc.tags["suite"] == "test" and sc.tags["seed"] >= SUITE_SEED_BASE["test"]
        assert sc.tags["difficulty"] in ("easy", "medium", "hard")
        assert sc.scene.background.parent == (generated / "backgrounds").resolve()
        assert all(p.parent == (generated / "assets").resolve() for p in sc.scene.assets.values())
        scene = load_scene(sc)
        assert len(scene.background) > 1000 and set(scene.actors) == {a.id for a in sc.agents}
    assert (generated / "suite.yaml").is_file()


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
        tmp_path, "test", count=2, kinds=("parked_obstacle", "crossing"), gaussians=5000, progress=False, workers=2,
        on_scenario=lambda k, n: done.append((k, n)),
    )  # fmt: skip
    assert [f.name for f in files] == sorted(f.name for f in generated.glob("*.json"))[::-1]  # kinds in order
    assert done == [(1, 2), (2, 2)]
    for f in files:
        assert f.read_text() == (generated / f.name).read_text()
        bg = f"backgrounds/{f.stem}.ply"
        assert (tmp_path / bg).read_bytes() == (generated / bg).read_bytes()


def test_cli(tmp_path, capsys):
    assert (
        generate.main(["--out", str(tmp_path), "--kinds", "lane_keep_straight", "count=1", "gaussians=2000", "-q"]) == 0
    )
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["scenarios"] == 1
    (f,) = tmp_path.glob("*.json")
    assert scenarios.load(f).kind == "lane_keep_straight"


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--count", "2"], "missing config key out: output folder"),
        (["--out", "x", "--kinds", "lane_keep,merge"], "unknown kind(s) lane_keep"),
        (["--out", "x", "colour=red"], "unknown config key colour"),
        (["--out", "x", "count=two"], "count: expected an integer, got 'two'"),
        (["--out", "x", "--count", "0"], "count: expected >= 1, got 0"),
        (["--out", "x", "gaussians=10"], "gaussians: expected >= 1000, got 10"),
        (["--out", "x", "--seed", "999999", "--count", "2"], "seed + count: expected <= 1000000"),
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
    assert "--kinds" in text and "cut_in" in text and "1,000,000" in text
