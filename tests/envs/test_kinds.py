"""The env on generated scenarios, one of each kind: gymnasium's checker, the expert's labels replay
the clip with no event (the expert is RAD's zero-collision reference), and the kinds are real --
holding the initial speed runs into the lead / cutting-in car, and driving straight on into the
parked car is a static collision found from the background Gaussians alone.

The suite is generated once (small backgrounds) into ``.cache/envs-test-suite/<hash of the
generator's sources>``, so reruns reuse it; ``SPLATDRIVE_ENV_TEST_SUITE=/path`` tests another
(e.g. a built-in suite's folder) instead -- then every scenario in it is replayed.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs import DrivingEnv
from tests.generated import generated_suite

pytestmark = pytest.mark.slow

FAST = {"resolution": (32, 16)}


@pytest.fixture(scope="session")
def suite_dir() -> Path:
    return generated_suite("envs-test-suite", "envtest", "SPLATDRIVE_ENV_TEST_SUITE")


@pytest.fixture(scope="session")
def scenario_files(suite_dir) -> list[Path]:
    from scenarios.io import scenario_files

    files = scenario_files(suite_dir)
    assert files, f"no scenarios in {suite_dir}"
    return files


def by_kind(files: list[Path], kind: str) -> list[Path]:
    from scenarios.io import load

    return [f for f in files if load(f).kind == kind]


KINDS = ("lane_keep_straight", "lane_keep_curve", "lead_vehicle", "cut_in", "parked_obstacle", "crossing", "merge")


@pytest.mark.parametrize("kind", KINDS)
def test_check_env_on_each_kind(scenario_files, kind):
    files = by_kind(scenario_files, kind)
    assert files, f"the suite has no {kind} scenario"
    env = gym.make("SplatDrive-v0", config=FAST, scenarios=[str(files[0])], render_mode="rgb_array").unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=False)
    assert env.quarantined == []


def _builtin_files() -> list[Path]:
    """Scenario files of the built-in suites already generated in the cache (never generated here)."""
    from scenarios.builtin import BUILTIN_SUITES, is_generated, suite_folder
    from scenarios.io import scenario_files

    out = []
    for name in BUILTIN_SUITES:
        if is_generated(name):
            out += scenario_files(suite_folder(name))
    return out


def test_expert_labels_replay_every_scenario_without_an_event(scenario_files):
    """Every scenario of the test suite, and of the built-in suites where they have been generated."""
    from scenarios.expert import expert_labels
    from scenarios.io import load

    files = scenario_files + _builtin_files()
    env = DrivingEnv({**FAST, "cameras": False}, scenarios=[str(f) for f in files])
    for f in files:
        sc = load(f)
        _, info = env.reset(seed=0, options={"scenario": sc.id})
        labels = expert_labels(sc)
        steps, worst = 0, 0.0
        while True:
            np.testing.assert_array_equal(info["expert_action"], labels[info["step"]])
            _, r, te, tr, info = env.step(info["expert_action"])
            steps += 1
            worst = max(worst, info["path_distance"])
            assert not te, f"{sc.id} ({sc.kind}): {info['event']} at step {steps} ({info['collision_with']})"
            assert r == 0.0 and info["static_gaussians"] < env.config.static_min_gaussians
            if tr:
                break
        assert steps == sc.horizon and "error" not in info, sc.id
        assert worst < 1.0, f"{sc.id}: replay drifted {worst:.2f} m from the expert path"
    assert env.quarantined == []


def constant_speed(env, scenario_id, **reset):
    """Hold the initial speed (the longitudinal bin nearest v0 x 0.5 s), lateral centre."""
    obs, info = env.reset(seed=0, options={"scenario": scenario_id})
    v0 = float(obs["ego"][0])
    lon = int(np.argmin(np.abs(env.action_spec.longitudinal - 0.5 * v0)))
    lat = env.action_spec.center
    while True:
        _, r, te, tr, info = env.step([lat, lon])
        if te or tr:
            return r, te, info


@pytest.mark.parametrize("kind", ["lead_vehicle", "cut_in"])
def test_constant_speed_hits_the_other_car(scenario_files, kind):
    files = by_kind(scenario_files, kind)
    env = DrivingEnv({**FAST, "cameras": False}, scenarios=[str(f) for f in files])
    for sid in env.pool.ids:
        r, te, info = constant_speed(env, sid)
        assert te and r == -1.0 and info["event"] == "dynamic_collision", (sid, info["event"])
        # credited by where the ego was hit: a side alone to the lateral part, front, rear, corners longitudinal
        side = info["collision_location"] in ("left", "right")
        np.testing.assert_array_equal(info["reward_parts"], [-1.0, 0.0] if side else [0.0, -1.0])
        assert info["collision_with"] in {a.id for a in env.scenario.agents}
        assert info["collision_location"].startswith("front") or kind == "cut_in"


def test_parked_car_is_a_static_collision_from_the_gaussians(scenario_files):
    files = by_kind(scenario_files, "parked_obstacle")
    # obstacle boxes off: only the background Gaussians (the car is baked in) can find it
    env = DrivingEnv({**FAST, "cameras": False, "static_obstacle_boxes": False}, scenarios=[str(f) for f in files])
    for sid in env.pool.ids:
        r, te, info = constant_speed(env, sid)
        assert te and r == -1.0 and info["event"] == "static_collision", (sid, info["event"])
        assert info["collision_with"] == "static_gaussians"
        assert info["static_gaussians"] >= env.config.static_min_gaussians
        np.testing.assert_array_equal(info["reward_parts"], [-1.0, 0.0])
        # and it is the parked car: the hit is within a few metres of its box
        o = env.scenario.static_obstacles[0]
        c, _, _ = env.ego_box()
        assert np.hypot(*(c - o.pose[:2])) < 8.0
