"""``python -m evaluation``: baselines that behave as their kinds say, outputs that hold the
records' numbers, policies refused before any env exists, videos, and Ray equal to in-process.

The suite: one generated scenario per kind with small backgrounds, cached in
``.cache/evaluate-test-suite/<hash of the generator's sources>`` (``SPLATDRIVE_EVAL_TEST_SUITE=/path``
evaluates another folder instead, e.g. a built-in suite's).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from evaluation import baselines
from evaluation.evaluate import EvaluateConfig, PolicyError, main, parse_args, run
from evaluation.metrics import EVENTS, rad_metrics
from evaluation.report import RAD_COLUMNS, worst_first
from scenarios.actions import ActionSpec
from tests.generated import generated_suite

KINDS = ("lane_keep_straight", "lane_keep_curve", "lead_vehicle", "cut_in", "parked_obstacle", "crossing", "merge")
BASELINES = ("expert", "reactive", "constant-velocity", "lane-follow")
SMALL = {"resolution": [32, 16]}  # small cameras for the videos: the tests check logic, not pictures
TINY_NET = {"cnn_channels": [4], "cnn_kernels": [3], "embed_dim": 16, "hidden_dim": 32, "trunk_layers": 1}


# -- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def suite_dir() -> Path:
    return generated_suite("evaluate-test-suite", "evaltest", "SPLATDRIVE_EVAL_TEST_SUITE")


@pytest.fixture(scope="session")
def baseline_eval(suite_dir, tmp_path_factory):
    """The baselines side by side, in this process, one video each."""
    out = tmp_path_factory.mktemp("eval-baselines")
    cfg = EvaluateConfig(compare=BASELINES, suite=str(suite_dir), out=str(out), env=SMALL, num_actors=0,
                         videos=1, progress=False)  # fmt: skip
    return run(cfg)


def _by_kind(result, policy: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in result.records[policy]:
        out.setdefault(r["kind"], []).append(r)
    return out


def make_checkpoint(
    store: Path, run_name: str = "tiny", cameras: bool = False, resolution=(32, 16), env=None, space=None
) -> str:
    """A committed checkpoint of a tiny random policy (what the store loader and policy.sources read):
    policy weights, config.json (env, policy) and obs_space.json. Returns the store URI of the run.

    env: the training env config (default: cameras on or off); space: its observation space (default: the
    env's as it is now; a hand-built one stands for a checkpoint of an older observation)."""
    import torch

    from envs.config import EnvConfig
    from envs.observation import observation_space
    from policy.sources import spaces_json
    from rollout.worker import build_policy
    from sim.camera import make_rig
    from store import CheckpointStore, json_bytes, tensors_to_bytes

    torch.manual_seed(0)
    env = {"cameras": cameras} if env is None else env
    cfg = EnvConfig.from_dict(env)
    rig = make_rig("front3", *resolution)
    space = observation_space(cfg, len(rig), *resolution) if space is None else space
    net = build_policy(space, cfg.action_spec, TINY_NET)
    files = {
        "policy.safetensors": tensors_to_bytes(net.state_dict()),
        "config.json": json_bytes({"env": env, "policy": TINY_NET, "suite": "val"}),
        "obs_space.json": json_bytes(spaces_json(space, cfg.action_spec, ("front3", *resolution))),
    }
    CheckpointStore(str(store)).run(run_name).commit(files, {"iteration": 1})
    return f"{store}/{run_name}"


@pytest.fixture
def no_env(monkeypatch):
    """Any attempt to build an env (vector or single) fails the test: refusals must come first."""
    import envs.driving
    import envs.vector

    def refuse(*args, **kwargs):
        raise AssertionError("an env was built before the policy was refused")

    monkeypatch.setattr(envs.vector.VectorDrivingEnv, "__init__", refuse)
    monkeypatch.setattr(envs.driving.DrivingEnv, "__init__", refuse)


# -- baselines, pure -----------------------------------------------------------------------------------


def _spec():
    return ActionSpec()


def _lane_points(offsets, heading_rate: float = 0.0, spacing: float = 2.0, n: int = 16):
    """Lane-centre points [M, 4] (x, y, cos, sin) of straight (or gently curving) lanes at lateral offsets."""
    pts = []
    for y0 in offsets:
        for i in range(-3, n):
            s = i * spacing
            h = heading_rate * s
            pts.append([s, y0 + 0.5 * heading_rate * s * s, math.cos(h), math.sin(h)])
    return np.array(pts, dtype=np.float32)


def test_hold_speed_bin_is_the_nearest_to_half_a_second_of_driving():
    spec = _spec()
    np.testing.assert_array_equal(baselines.hold_speed_bins(np.array([0.0, 10.0, 10.2, 30.0]), spec.longitudinal),
                                  [0, 20, 20, 60])  # fmt: skip
    obs = {"ego": np.array([[10.0, 0, 0, 0, 0, 0]], np.float32)}
    np.testing.assert_array_equal(baselines.constant_velocity(obs, spec), [[spec.center, 20]])


def test_expert_baseline_replays_the_labels():
    infos = [{"expert_action": np.array([31, 20])}, {"expert_action": np.array([29, 18])}]
    np.testing.assert_array_equal(baselines.expert(infos), [[31, 20], [29, 18]])
    with pytest.raises(KeyError, match="expert_action"):
        baselines.expert([{}])


def test_lane_centre_line_picks_the_ego_lane_and_follows_it():
    pts = _lane_points([-3.5, 0.4, 3.9])  # the ego is 0.4 m right of the middle lane's centre
    line = baselines.lane_centre_line(pts, np.ones(len(pts), bool))
    np.testing.assert_allclose(line[:, 1], 0.4, atol=1e-6)
    assert (np.diff(line[:, 0]) > 0).all() and line[-1, 0] >= 28.0
    # opposite-direction lanes are not the ego's, even when nearer
    back = pts.copy()
    back[:, 2] *= -1
    both = np.concatenate([back[back[:, 1] < 1], pts[pts[:, 1] > 3]])
    line = baselines.lane_centre_line(both, np.ones(len(both), bool))
    np.testing.assert_allclose(line[:, 1], 3.9, atol=1e-6)
    assert baselines.lane_centre_line(pts, np.zeros(len(pts), bool)) is None


def test_lane_follow_steers_back_to_the_lane_centre_and_along_a_curve():
    spec = _spec()
    ego = np.array([[10.0, 0, 0, 0, 0, 0, 0]], np.float32)
    for offset, sign in ((0.8, 1), (-0.8, -1), (0.0, 0)):
        pts = _lane_points([offset])
        obs = {"ego": ego, "map": pts[None], "map_mask": np.ones((1, len(pts)), np.float32)}
        lat, lon = baselines.lane_follow(obs, spec)[0]
        assert lon == 20
        assert np.sign(spec.lateral[lat]) == sign, (offset, spec.lateral[lat])
        assert spec.mask[lon, lat]
    curve = _lane_points([0.0], heading_rate=1 / 60.0)  # a left curve of 60 m radius
    obs = {"ego": ego, "map": curve[None], "map_mask": np.ones((1, len(curve)), np.float32)}
    lat, _ = baselines.lane_follow(obs, spec)[0]
    # on the circle, 5 m along: lateral 5^2 / (2 * 60) = 0.21 m
    assert abs(spec.lateral[lat] - 25 / 120) <= 0.025 + 1e-9


def test_arc_lateral_is_the_pure_pursuit_circle():
    assert baselines.arc_lateral(10.0, 0.0, 5.0) == 0.0
    k = 2 * 1.0 / (10.0**2 + 1.0)
    assert math.isclose(baselines.arc_lateral(10.0, 1.0, 5.0), (1 - math.cos(k * 5.0)) / k)
    assert baselines.arc_lateral(10.0, -1.0, 5.0) == -baselines.arc_lateral(10.0, 1.0, 5.0)


def test_worst_first_orders_failures_then_by_add():
    recs = [
        dict(scenario="ok-far", event="", steps=3, path_distance=[0, 1, 1, 1]),
        dict(scenario="ok-near", event="", steps=3, path_distance=[0, 0, 0, 0]),
        dict(scenario="hit", event="dynamic_collision", steps=2, path_distance=[0, 0, 0]),
        dict(scenario="off", event="position_deviation", steps=2, path_distance=[0, 0.5, 2.1]),
    ]
    assert worst_first(recs) == ["off", "hit", "ok-far", "ok-near"]


# -- the CLI ---------------------------------------------------------------------------------------------


def test_cli_parses_policies_flags_and_overrides(tmp_path):
    cfg = parse_args(["--compare", "expert", "lane-follow", "num_actors=0", "env.cameras=false", "--out", "x"])
    assert cfg.policies == ("expert", "lane-follow") and cfg.num_actors == 0 and cfg.env == {"cameras": False}
    cfg = parse_args(["--policy", "s3://b/p/run@3?endpoint_override=h:9000", "--compare", "expert", "videos=0"])
    assert cfg.policies == ("s3://b/p/run@3?endpoint_override=h:9000", "expert") and cfg.videos == 0
    conf = tmp_path / "eval.yaml"
    conf.write_text("suite: test\nnum_envs: 2\n")
    cfg = parse_args(["--config", str(conf), "--policy", "expert", "num_envs=3"])
    assert (cfg.suite, cfg.num_envs) == ("test", 3)
    with pytest.raises(SystemExit):
        parse_args(["--policy", "expert", "no_such_key=1"])
    with pytest.raises(SystemExit):
        parse_args(["num_actors=0"])  # no policy
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0


@pytest.mark.parametrize("module", ["evaluation", "evaluation.evaluate"])
def test_every_entry_point_runs_the_evaluation(module, tmp_path):
    """``python -m evaluation`` and ``-m evaluation.evaluate`` are one CLI;
    a suite that is not there is refused with exit 2 and the folder named, before anything is written."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    run_ = dict(cwd=root, capture_output=True, text=True, timeout=300)
    out = subprocess.run([sys.executable, "-m", module, "--help"], **run_)
    assert out.returncode == 0 and "usage: python -m evaluation" in out.stdout, out.stderr[-2000:]
    missing = tmp_path / "no-such-suite"
    args = ["--policy", "expert", "--suite", str(missing), "--out", str(tmp_path / "o"), "num_actors=0"]
    out = subprocess.run([sys.executable, "-m", module, *args], **run_)
    assert out.returncode == 2 and str(missing) in out.stderr, out.stderr[-2000:]
    assert "RuntimeWarning" not in out.stderr  # the module is not imported twice (by the package, then run)
    assert not (tmp_path / "o" / "metrics.json").exists()


# -- baselines, closed loop --------------------------------------------------------------------------------


@pytest.mark.slow
def test_expert_never_collides_nor_deviates_on_any_kind(baseline_eval):
    per_kind = baseline_eval.summary["policies"]["expert"]["by_kind"]
    assert set(KINDS) <= set(per_kind), f"the suite lacks kinds: {set(KINDS) - set(per_kind)}"
    for kind, m in per_kind.items():
        assert m["CR"] == 0 and m["DR"] == 0, (kind, m)
    for r in baseline_eval.records["expert"]:
        assert r["steps"] == r["horizon"] and not r["error"], r["scenario"]


@pytest.mark.slow
def test_the_reactive_driver_passes_every_kind_close_to_the_log(baseline_eval):
    """The reactive expert in closed loop, from the states it reaches: no event on any clip, and never far
    from the logged drive (which it drove, choosing among neighbouring bins the ones whose labels replay
    it: a yield can then start a step apart), well inside the 10 m progress threshold."""
    for r in baseline_eval.records["reactive"]:
        assert r["event"] == "" and r["steps"] == r["horizon"] and not r["error"], (r["scenario"], r["event"])
        assert max(abs(x) for x in r["progress_lag"]) < 6.0, r["scenario"]


def test_the_reactive_expert_with_other_settings_is_a_baseline(suite_dir, tmp_path):
    """reactive:<settings> (DAgger's labeller of il.labeller, scored alone): the reactive expert with those
    scenarios.ReactiveSettings. One that senses 3 m (the parked car's centre is past that until it is hit) drives
    into the parked car the default one nudges around; unknown settings are refused before any rollout."""
    clip = next(suite_dir.glob("*parked_obstacle*.json"))
    short = "reactive:sensing_range=3,nudge_ramp_time=1.5"
    res = run(EvaluateConfig(compare=("reactive", short), suite=str(clip), out=str(tmp_path / "o"), num_actors=0,
                             videos=0, progress=False, plot=False))  # fmt: skip
    assert [r["event"] for r in res.records["reactive"]] == [""]
    assert [r["event"] for r in res.records[short]] == ["static_collision"]
    assert baselines.split_baseline(short)[1].nudge_ramp_time == 1.5 and baselines.split_baseline("s3://b/r") is None
    for bad, why in (("reactive:range=3", r"unknown setting\(s\) \['range'\]"), ("reactive:3", "name=value"),
                     ("lane-follow:x=1", "cannot be loaded"), ("reactive:max_nudge=0", "must be > 0")):  # fmt: skip
        with pytest.raises(PolicyError, match=why):
            run(EvaluateConfig(policy=bad, suite=str(clip), out=str(tmp_path / "bad"), num_actors=0, progress=False))


@pytest.mark.slow
def test_constant_velocity_runs_into_the_lead_and_the_cutting_in_car(baseline_eval):
    kinds = _by_kind(baseline_eval, "constant-velocity")
    expect = {"lead_vehicle": "dynamic_collision", "cut_in": "dynamic_collision", "crossing": "dynamic_collision",
              "parked_obstacle": "static_collision", "lane_keep_straight": ""}  # fmt: skip
    for kind, event in expect.items():
        for r in kinds[kind]:
            assert r["event"] == event, (r["scenario"], r["event"])


@pytest.mark.slow
def test_lane_follow_keeps_its_lane_and_hits_the_parked_car(baseline_eval):
    kinds = _by_kind(baseline_eval, "lane-follow")
    for r in kinds["parked_obstacle"]:
        assert r["event"] == "static_collision", (r["scenario"], r["event"])
    for r in kinds["lead_vehicle"]:  # blind to agents, it keeps its speed
        assert r["event"] == "dynamic_collision", (r["scenario"], r["event"])
    for r in kinds["lane_keep_straight"] + kinds["lane_keep_curve"]:
        # it keeps its lane; it may fall behind an expert that speeds up to the limit (it holds its start speed)
        assert r["event"] in ("", "progress_deviation"), (r["scenario"], r["event"])
        # on the lane centre all along (the last step excepted: holding its speed, it may pass the end of
        # the expert's slower log, and the distance is then to that end point)
        assert max(r["path_distance"][:-1]) < 0.5, r["scenario"]


def _by_hand(recs) -> dict:
    """CR, DCR, SCR, DR, PDR, HDR, success rate, ADD and the event counts of clip records, counted here in
    plain Python from the definitions (not with ``evaluation.metrics``): first failure per clip, over all
    clips; ADD over the path distances before any failure (a failed clip's last one is the failing step's)."""
    n = len(recs)
    count = {e: 0 for e in EVENTS}
    dists = []
    for r in recs:
        if r["event"]:
            count[r["event"]] += 1
        d = list(r["path_distance"])
        dists += d[:-1] if r["event"] else d
    dcr, scr = count["dynamic_collision"] / n, count["static_collision"] / n
    pdr, hdr = count["position_deviation"] / n, count["heading_deviation"] / n
    return dict(
        n=n, DCR=dcr, SCR=scr, CR=dcr + scr, PDR=pdr, HDR=hdr, DR=pdr + hdr,
        success_rate=sum(1 for r in recs if not r["event"]) / n,
        ADD=sum(dists) / len(dists) if dists else None,
        **{f"count_{e}": c for e, c in count.items()},
    )  # fmt: skip


def _assert_close(got: dict, want: dict, where) -> None:
    for k, v in want.items():
        assert (got[k] is None and v is None) or got[k] == pytest.approx(v, rel=1e-12, abs=1e-12), (where, k)


def test_metrics_json_holds_hand_counted_rates_of_hand_made_records(tmp_path):
    """Records whose CR, DR and ADD are known by hand, written by the evaluation's own summary and writer."""
    from evaluation.evaluate import summarise, write_outputs
    from evaluation.policies import PolicyEntry

    def rec(sid, kind, event, pd):
        n = len(pd)
        return dict(scenario=sid, kind=kind, horizon=3, event=event, steps=n - 1, ret=0.0, path_distance=pd,
                    speed=[10.0] * n, yaw=[0.0] * n, error="", collision_location="")  # fmt: skip

    recs = [
        rec("a", "merge", "", [0.0, 0.5, 1.0, 1.5]),  # clean: all four distances count
        rec("b", "cut_in", "dynamic_collision", [0.2, 0.4, 9.0]),  # 9.0 is the failing step's: left out
        rec("c", "cut_in", "position_deviation", [1.0, 3.0, 2.5]),
        rec("d", "merge", "static_collision", [0.0, 7.0]),
    ]
    scen = [type("S", (), dict(id=r["scenario"], tags={"kind": r["kind"]}))() for r in recs]
    cfg = EvaluateConfig(policy="expert", suite="hand", out=str(tmp_path), plot=False, progress=False)
    entry = PolicyEntry("expert", "expert", "baseline", {})
    summary = summarise([entry], {"expert": recs}, scen, cfg, "hand", 0.0)
    write_outputs(summary, {"expert": recs}, {}, cfg, tmp_path)
    got = json.loads((tmp_path / "metrics.json").read_text())["policies"]["expert"]
    o = got["overall"]
    # by hand: 4 clips; one dynamic and one static collision, one position deviation, one success
    assert (o["n"], o["DCR"], o["SCR"], o["CR"], o["PDR"], o["HDR"], o["DR"]) == (4, 0.25, 0.25, 0.5, 0.25, 0.0, 0.25)
    assert o["success_rate"] == 0.25 and o["count_dynamic_collision"] == 1 and o["count_heading_deviation"] == 0
    assert o["ADD"] == pytest.approx((0 + 0.5 + 1.0 + 1.5 + 0.2 + 0.4 + 1.0 + 3.0 + 0.0) / 9)
    assert got["by_kind"]["cut_in"]["CR"] == 0.5 and got["by_kind"]["cut_in"]["DR"] == 0.5
    assert got["by_kind"]["merge"]["CR"] == 0.5 and got["by_kind"]["merge"]["n"] == 2
    assert got["by_kind"]["merge"]["ADD"] == pytest.approx((0 + 0.5 + 1.0 + 1.5 + 0.0) / 5)
    _assert_close(o, _by_hand(recs), "hand-made")  # the helper the closed-loop test relies on agrees too


@pytest.mark.slow
def test_metrics_json_holds_rad_metrics_of_the_records(baseline_eval):
    data = json.loads((baseline_eval.out / "metrics.json").read_text())
    assert data["order"] == list(BASELINES)
    assert data["scenarios"] == [r["scenario"] for r in baseline_eval.records["expert"]]
    for p in BASELINES:
        recs = baseline_eval.records[p]
        assert [r["scenario"] for r in recs] == data["scenarios"]  # same scenarios, same order
        assert all(len(r["speed"]) == len(r["yaw"]) == r["steps"] + 1 for r in recs)  # ego_state filled
        _assert_close(data["policies"][p]["overall"], _by_hand(recs), p)
        kinds = sorted({r["kind"] for r in recs})
        assert sorted(data["policies"][p]["by_kind"]) == kinds
        for kind in kinds:
            _assert_close(data["policies"][p]["by_kind"][kind], _by_hand([r for r in recs if r["kind"] == kind]), kind)
    # the comparison has something to compare: the expert never fails, constant-velocity does
    assert data["policies"]["expert"]["overall"]["CR"] == 0
    assert data["policies"]["constant-velocity"]["overall"]["CR"] > 0


@pytest.mark.slow
def test_csv_has_one_row_per_policy_and_scenario(baseline_eval):
    with open(baseline_eval.out / "scenarios.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(BASELINES) * len(baseline_eval.records["expert"])
    by = {(r["policy"], r["scenario"]): r for r in rows}
    for p in BASELINES:
        for rec in baseline_eval.records[p]:
            row = by[(p, rec["scenario"])]
            assert row["event"] == rec["event"] and int(row["steps"]) == rec["steps"] and row["kind"] == rec["kind"]
            assert int(row["success"]) == int(not rec["event"])
            assert row["step"] == (str(rec["steps"]) if rec["event"] else "")
            add = rad_metrics([rec])["ADD"]
            if math.isfinite(add):
                assert float(row["ADD"]) == pytest.approx(add, abs=1e-6)
            else:
                assert row["ADD"] == "-"


@pytest.mark.slow
def test_report_has_rads_table_one_row_per_policy(baseline_eval):
    text = (baseline_eval.out / "report.md").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| policy |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert header[:10] == ["policy", *(h for h, _ in RAD_COLUMNS)]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2 : start + 2 + len(BASELINES)]]
    assert [r[0] for r in rows] == list(BASELINES)
    for r in rows:
        m = baseline_eval.summary["policies"][r[0]]["overall"]
        for cell, (_, key) in zip(r[1:10], RAD_COLUMNS):
            assert cell == (f"{m[key]:.3f}" if math.isfinite(m[key]) else "-"), (r[0], key)
    assert lines[start + 2 + len(BASELINES)] == ""  # nothing else in the table
    assert "![metrics](metrics.png)" in text and (baseline_eval.out / "metrics.png").stat().st_size > 1000


@pytest.mark.slow
def test_videos_show_the_clip_with_the_event_frame_held(baseline_eval):
    import imageio.v2 as imageio

    vids = baseline_eval.videos
    assert set(vids) == set(BASELINES) and all(len(v) == 1 for v in vids.values())
    for p, (v,) in vids.items():
        # worst first: a failure when the policy has one
        if any(r["event"] for r in baseline_eval.records[p]):
            assert v["event"]
        rec = next(r for r in baseline_eval.records[p] if r["scenario"] == v["scenario"])
        assert (v["event"], v["step"]) == (rec["event"], rec["steps"])  # the filmed drive is the evaluated one
        path = baseline_eval.out / v["path"]
        reader = imageio.get_reader(path)
        frames = [f for f in reader]
        reader.close()
        assert len(frames) == v["frames"] == rec["steps"] + 1 + 10  # start, each step, ~1 s held at 10 fps
        if v["event"]:
            band = frames[-1][-12:-4, :, :].reshape(-1, 3).mean(axis=0)
            assert band[0] > 150 and band[1] < 90, band  # the red event banner at the bottom
            assert (np.abs(frames[-1].astype(int) - frames[-11].astype(int)).mean()) < 2.0  # held


# -- policies refused before any rollout -----------------------------------------------------------------


def test_missing_checkpoint_is_refused_before_any_env(suite_dir, tmp_path, no_env, capsys):
    store = tmp_path / "store"
    uri = make_checkpoint(store)
    cfg = EvaluateConfig(policy=f"{uri}@7", suite=str(suite_dir), out=str(tmp_path / "o"), num_actors=0, progress=False)
    with pytest.raises(PolicyError, match=r"no committed version 7.*committed versions: 1"):
        run(cfg)
    assert not (tmp_path / "o" / "metrics.json").exists()
    with pytest.raises(PolicyError, match="no committed checkpoint"):
        run(EvaluateConfig(policy=f"{store}/nobody", suite=str(suite_dir), out=str(tmp_path / "o"), num_actors=0))
    rc = main(["--policy", f"{uri}@7", "--suite", str(suite_dir), "--out", str(tmp_path / "o"), "num_actors=0"])
    assert rc == 2 and "no committed version 7" in capsys.readouterr().err


def test_corrupt_checkpoint_is_refused_before_any_env(suite_dir, tmp_path, no_env):
    uri = make_checkpoint(tmp_path / "store")
    weights = tmp_path / "store" / "tiny" / "ckpt-00000001" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    cfg = EvaluateConfig(policy=f"{uri}@1", suite=str(suite_dir), out=str(tmp_path / "o"), num_actors=0)
    with pytest.raises(PolicyError, match=r"policy\.safetensors.*truncated"):
        run(cfg)


def test_a_checkpoint_of_the_old_observation_is_refused_before_any_env(suite_dir, tmp_path, no_env):
    """Checkpoints from before the speed limits and the privileged ego without elapsed time: camera mode's
    lacks the limits part, privileged mode's has an ego of 7 and no limits. Both are refused, saying what."""
    import gymnasium as gym

    def box(*shape):
        return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)

    old_camera = gym.spaces.Dict({"ego": box(4), "navigation": box(5, 2), "command": box(3)})
    uri = make_checkpoint(tmp_path / "camera", env={"cameras": False}, space=old_camera)
    base = dict(suite=str(suite_dir), out=str(tmp_path / "o"), num_actors=0, progress=False)
    with pytest.raises(PolicyError, match=r"env gives observation part 'limits', which the policy was not built wi"):
        run(EvaluateConfig(policy=f"{uri}@1", **base))
    old_privileged = gym.spaces.Dict(
        {"ego": box(7), "route": box(10, 2), "agents": box(8, 8), "agents_mask": box(8), "map": box(64, 4),
         "map_mask": box(64)}
    )  # fmt: skip
    env = {"cameras": False, "observation": "privileged"}
    uri = make_checkpoint(tmp_path / "privileged", env=env, space=old_privileged)
    with pytest.raises(PolicyError, match=r"'limits'.*ego: the policy expects shape \[7\], the env gives \[6\]"):
        run(EvaluateConfig(policy=f"{uri}@1", **base))
    assert not (tmp_path / "o" / "metrics.json").exists()


@pytest.mark.slow
def test_exported_policy_for_other_cameras_is_refused_before_any_env(suite_dir, tmp_path, monkeypatch):
    from policy.export import export_policy

    uri = make_checkpoint(tmp_path / "store", cameras=True, resolution=(32, 16))
    export_policy(f"{uri}@1", tmp_path / "exported")
    import envs.driving
    import envs.vector

    def refuse(*args, **kwargs):
        raise AssertionError("an env was built before the policy was refused")

    monkeypatch.setattr(envs.vector.VectorDrivingEnv, "__init__", refuse)
    monkeypatch.setattr(envs.driving.DrivingEnv, "__init__", refuse)
    base = dict(policy=str(tmp_path / "exported"), suite=str(suite_dir), out=str(tmp_path / "o"), num_actors=0)
    # the suite's cameras are 128x64; the policy saw 32x16
    with pytest.raises(PolicyError, match=r"expects 3 camera\(s\) of 32x16, the env gives 3 of 128x64"):
        run(EvaluateConfig(**base))
    # an observation part the policy needs, switched off
    with pytest.raises(PolicyError, match="needs observation part 'cameras'"):
        run(EvaluateConfig(**base, env={"cameras": False, "resolution": [32, 16]}))
    # (a camera-mode policy: its parts are cameras, ego, navigation, command and limits; map is not one of them)
    with pytest.raises(PolicyError, match="needs observation part 'ego'"):
        run(EvaluateConfig(**base, env={"ego": False, "resolution": [32, 16]}))


# -- trained policies, Ray -------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_actors_and_in_process_give_identical_metrics(suite_dir, tmp_path, ray_session):
    """A trained policy (a checkpoint: weights to the actors through the object store) beside a baseline."""
    uri = make_checkpoint(tmp_path / "store", cameras=False)
    common = dict(compare=(f"{uri}@latest", "lane-follow"), suite=str(suite_dir), videos=0, plot=False,
                  progress=False, num_envs=3)  # fmt: skip
    local = run(EvaluateConfig(**common, out=str(tmp_path / "local"), num_actors=0))
    remote = run(EvaluateConfig(**common, out=str(tmp_path / "ray"), num_actors=2))
    assert local.summary["order"] == remote.summary["order"] == ["tiny@1", "lane-follow"]
    for p in local.summary["order"]:
        assert local.summary["policies"][p]["overall"] == remote.summary["policies"][p]["overall"]
        assert local.summary["policies"][p]["by_kind"] == remote.summary["policies"][p]["by_kind"]
        for a, b in zip(local.records[p], remote.records[p]):
            assert (a["scenario"], a["event"], a["steps"]) == (b["scenario"], b["event"], b["steps"])
            assert a["path_distance"] == b["path_distance"] and a["speed"] == b["speed"]
    prov = local.summary["policies"]["tiny@1"]["provenance"]
    assert prov["run"] == "tiny" and prov["version"] == 1 and len(prov["manifest_sha256"]) == 64
