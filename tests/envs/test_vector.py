"""VectorDrivingEnv: equal to N single envs, one render call per step, same-step autoreset, and a
broken scenario that ends its own episodes without taking the others down."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

import sim.rendering
from envs import DrivingEnv, VectorDrivingEnv
from sim.seeding import derive_seed
from tests.envs.conftest import FAST


def obs_i(obs, i):
    return {k: v[i] for k, v in obs.items()}


def test_spaces_and_autoreset_mode(plain):
    venv = VectorDrivingEnv([plain], 3, FAST)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.num_envs == 3 and venv.single_action_space == gym.spaces.MultiDiscrete([61, 61])
    assert venv.action_space.shape == (3, 2)
    assert venv.observation_space["cameras"].shape == (3, 3, 16, 32, 3)
    obs, infos = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)
    assert infos["action_mask"].shape == (3, 61, 61) and infos["_action_mask"].all()


def test_vector_equals_single_envs_rendering_included(plain, lead, parked_box):
    scs = [plain, lead, parked_box]
    N = 4
    venv = VectorDrivingEnv(scs, N, FAST)
    singles = [DrivingEnv(FAST, scenarios=scs) for _ in range(N)]
    obs, infos = venv.reset(seed=11)
    for i, e in enumerate(singles):
        o, info = e.reset(seed=derive_seed(11, i))
        assert data_equivalence(o, obs_i(obs, i), exact=True)
        assert info["scenario"] == infos["scenario"][i]
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(70):
        act = np.stack([[30 + rng.integers(-4, 5), 20 + rng.integers(-3, 4)] for _ in range(N)])
        obs, rew, term, trunc, infos = venv.step(act)
        for i, e in enumerate(singles):
            o, r, te, tr, info = e.step(act[i])
            assert (r, te, tr) == (rew[i], term[i], trunc[i]), (t, i)
            np.testing.assert_array_equal(info["reward_parts"], infos["reward_parts"][i])
            assert info["event"] == infos["event"][i]
            if te or tr:
                ends += 1
                assert data_equivalence(o, infos["final_obs"][i], exact=True)  # cameras included
                assert infos["final_info"]["event"][i] == info["event"]
                o, info = e.reset()
            assert data_equivalence(o, obs_i(obs, i), exact=True), (t, i)
            assert info["scenario"] == infos["scenario"][i]
            np.testing.assert_array_equal(info["expert_action"], infos["expert_action"][i])
    assert ends >= 4  # the comparison went through autoresets


def test_one_render_call_per_step(plain, lead, monkeypatch):
    venv = VectorDrivingEnv([plain, lead], 3, FAST)
    calls = []
    real = sim.rendering.render

    def counting(scenes, viewmats, *a, **k):
        calls.append(len(scenes))
        return real(scenes, viewmats, *a, **k)

    monkeypatch.setattr(sim.rendering, "render", counting)
    venv.reset(seed=0)
    assert calls == [3]
    venv.step(np.tile([30, 20], (3, 1)))
    assert calls == [3, 3]
    # an episode ends: its final frame and its successor's first frame ride in a second call
    for _ in range(40):
        calls.clear()
        *_, term, trunc, _ = venv.step(np.tile([30, 20], (3, 1)))
        if (term | trunc).any():
            assert calls == [3, int((term | trunc).sum())]
            break
        assert calls == [3]
    else:
        raise AssertionError("no episode ended")


def test_cameras_off_means_no_render(plain, monkeypatch):
    venv = VectorDrivingEnv([plain], 2, {**FAST, "cameras": False, "static_gaussians": False})

    def boom(*a, **k):
        raise AssertionError("rendered")

    monkeypatch.setattr(sim.rendering, "render", boom)
    venv.reset(seed=0)
    for _ in range(35):
        venv.step(np.tile([30, 20], (2, 1)))


def test_truncation_bootstraps_from_final_obs(plain):
    venv = VectorDrivingEnv([plain], 2, {**FAST, "observation": "privileged"})
    venv.reset(seed=0)
    for _k in range(30):  # speeding up to 12 m/s (6 m per 0.5 s anchor): the final state is faster than a start
        obs, _r, term, trunc, infos = venv.step(np.tile([30, 24], (2, 1)))
    assert trunc.all() and not term.any()
    assert infos["_final_obs"].all()
    final = infos["final_obs"][0]
    # end of one (12 m/s, the last anchor 6 m), start of next (10 m/s, the anchor that holds it: 5 m)
    assert final["ego"][0] == pytest.approx(12.0, abs=0.05) and final["ego"][5] == pytest.approx(6.0)
    assert obs["ego"][0, 0] == pytest.approx(10.0) and obs["ego"][0, 5] == pytest.approx(5.0)
    assert infos["final_info"]["step"][0] == 30 and infos["step"][0] == 0
    np.testing.assert_array_equal(infos["reward_parts"], np.zeros((2, 2)))


def test_bad_actions(plain):
    venv = VectorDrivingEnv([plain], 2, FAST)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="num_envs=2"):
        venv.step(np.array([30, 20]))
    with pytest.raises(ValueError, match=r"env 1.*out of range"):
        venv.step(np.array([[30, 20], [30, 99]]))
    venv.step(np.array([[30, 20], [30, 20]]))


def test_broken_scenario_is_quarantined_and_the_rest_go_on(plain, lead, corrupt, caplog):
    venv = VectorDrivingEnv([corrupt, plain, lead], 4, {**FAST, "quarantine_after": 2})
    obs, infos = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)
    assert set(infos["scenario"]) <= {"plain", "lead"}
    errors = [e for e, m in zip(infos.get("error", []), infos.get("_error", [])) if m]
    for _ in range(80):
        obs, _r, _term, _trunc, infos = venv.step(np.tile([30, 20], (4, 1)))
        assert venv.observation_space.contains(obs)
        errors += [e for e, m in zip(infos.get("error", []), infos.get("_error", [])) if m]
    assert venv.quarantined == ["corrupt"]
    assert errors and all("corrupt" in e for e in errors)
    assert venv.pool.failures[venv.pool.index_of("corrupt")] == 2
    assert "quarantined corrupt" in caplog.text


def test_failure_mid_episode_in_one_sub_env(plain, lead, monkeypatch):
    venv = VectorDrivingEnv([plain, lead], 3, FAST)
    venv.reset(seed=0, options={"scenario": ["plain", "lead", "plain"]})
    venv.step(np.tile([30, 20], (3, 1)))
    victim = venv.envs[1]

    def broken(*a, **k):
        raise MemoryError("corrupt splat")

    monkeypatch.setattr(victim, "_collisions", broken)
    _obs, _r, term, trunc, infos = venv.step(np.tile([30, 20], (3, 1)))
    assert trunc.tolist() == [False, True, False] and not term.any()
    assert infos["_error"].tolist() == [False, True, False] and "corrupt splat" in infos["error"][1]
    assert "lead" in infos["error"][1] and infos["final_info"]["_error"][1]
    monkeypatch.undo()
    steps = venv.envs[0]._t
    _obs, *_ = venv.step(np.tile([30, 20], (3, 1)))
    assert venv.envs[0]._t == steps + 1 and venv.envs[2]._t == steps + 1  # the others never noticed


def test_render_failure_is_pinned_on_its_sub_env(plain, lead, monkeypatch):
    venv = VectorDrivingEnv([plain, lead], 3, FAST)
    venv.reset(seed=0, options={"scenario": ["plain", "lead", "plain"]})
    real = sim.rendering.render
    bad = venv.envs[1]._scene.background

    def picky(scenes, *a, **k):
        if any(s.background is bad for s in scenes):
            raise RuntimeError("renderer choked")
        return real(scenes, *a, **k)

    monkeypatch.setattr(sim.rendering, "render", picky)
    _obs, _r, _term, trunc, infos = venv.step(np.tile([30, 20], (3, 1)))
    assert trunc.tolist() == [False, True, False]
    assert "renderer choked" in infos["error"][1]
    assert infos["scenario"][1] == "plain"  # lead cannot render now: the reset drew plain after it failed


def test_make_vec_gives_the_batched_env(plain):
    venv = gym.make_vec("SplatDrive-v0", num_envs=2, config=FAST, scenarios=[plain])
    assert isinstance(venv, VectorDrivingEnv) and venv.num_envs == 2
    obs, _ = venv.reset(seed=0)
    assert obs["cameras"].shape == (2, 3, 16, 32, 3)


def test_dagger_labels_from_a_reactive_expert_with_other_settings(lead):
    """rollout.teachers: il.labeller's expert labels each sub-env's state as scenarios.ReactiveScene built from the
    scenario with those settings does; a stopped car 16 m ahead (its centre from the rear axle) makes the default
    expert brake, one that senses 5 m drives on as on a free road."""
    from rollout.teachers import ReactiveTeacher, make_teacher, reactive_labels
    from scenarios.actions import nearest_bins
    from scenarios.reactive import ReactiveScene, ReactiveSettings

    venv = VectorDrivingEnv([lead], 2, {**FAST, "cameras": False})
    _, infos = venv.reset(seed=0)
    short = make_teacher("reactive", {"sensing_range": 5})
    assert isinstance(short, ReactiveTeacher) and make_teacher("reactive", {}) is reactive_labels

    def by_scene(settings):
        scene = ReactiveScene.of(lead, settings)
        rows = [scene.actions(infos["ego_state"][i][None], int(infos["step"][i]))[0] for i in range(2)]
        return np.stack([nearest_bins(r[0], r[1], venv.envs[0].action_spec) for r in rows])

    np.testing.assert_array_equal(short(venv, None, infos), by_scene(ReactiveSettings(sensing_range=5.0)))
    np.testing.assert_array_equal(reactive_labels(venv, None, infos), by_scene(ReactiveSettings()))
    brakes, drives_on = reactive_labels(venv, None, infos)[0], short(venv, None, infos)[0]
    assert brakes[1] < drives_on[1]  # a shorter longitudinal displacement: it brakes for the car it sees
    with pytest.raises(ValueError, match=r"il.labeller sets the reactive expert's settings, but il.teacher='x'"):
        make_teacher("x", {"sensing_range": 5})
