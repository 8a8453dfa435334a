"""The one closed-loop runner's whole episodes: every clip once, in order, the same as a single env driving
it alone; frames that end in the state the episode ended in; per-step extras; and on Ray, an actor killed
mid-suite without losing or repeating an episode."""

from __future__ import annotations

import numpy as np
import pytest

from envs.driving import DrivingEnv
from envs.vector import VectorDrivingEnv
from evaluation.baselines import baseline_act
from evaluation.policies import PolicyEntry
from rollout.episodes import run_episodes
from rollout.group import ActorResources, RolloutGroup
from rollout.worker import RolloutWorker, WorkerSpec
from scenarios import save
from tests.envs.handmade import straight_scenario
from tests.killing import KillWhileSampling

ENV = {"resolution": (32, 16), "render_backend": "cpu", "observation": "privileged", "cameras": False}
SERIES = ("speed", "yaw", "route_completion", "progress_lag", "expert_gap", "expert_speed", "path_distance")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """Five clips of three horizons: three empty roads, two with a stopped car ahead (at two distances) that a
    driver holding its speed hits."""
    d = tmp_path_factory.mktemp("episodes_suite")
    clips = [
        straight_scenario(d, sid="a", horizon=12),
        straight_scenario(d, sid="b", horizon=20, lead_gap=9.0, lead_speed=0.0),
        straight_scenario(d, sid="c", horizon=12, speed=6.0),
        straight_scenario(d, sid="d", horizon=20, lead_gap=16.0, lead_speed=0.0),
        straight_scenario(d, sid="e", horizon=8),
    ]
    for sc in clips:
        save(sc, d / f"{sc.id}.json")
    return d


def alone(suite, sid: str, baseline: str, env=ENV) -> dict:
    """The reference: one DrivingEnv driving the clip step by step with the baseline."""
    env_ = DrivingEnv(env, scenarios=str(suite))
    act = baseline_act(baseline, env_.action_spec)
    obs, info = env_.reset(options={"scenario": sid})
    out = dict(speed=[float(info["ego_state"][3])], event="", steps=0, frames=None)
    while True:
        batch = {k: v[None] for k, v in obs.items()}
        obs, _, term, trunc, info = env_.step(np.asarray(act(batch, [info]))[0])
        out["steps"] += 1
        out["speed"].append(float(info["ego_state"][3]))
        if term or trunc:
            out["event"] = info["event"]
            return out


@pytest.mark.parametrize("baseline", ["stop", "constant-velocity"])
def test_every_clip_once_in_order_as_a_single_env_drives_it(suite, baseline):
    venv = VectorDrivingEnv(str(suite), 2, ENV, autoreset=False)
    ids = ["e", "b", "a", "d", "c"]  # not the pool's order: records come back in the order asked
    done: list[int] = []
    recs = run_episodes(baseline_act(baseline, venv.action_spec), venv, ids, progress=lambda n, t: done.append(n))
    assert [r["scenario"] for r in recs] == ids
    assert done == [1, 2, 3, 4, 5]
    for r in recs:
        ref = alone(suite, r["scenario"], baseline)
        assert (r["event"], r["steps"]) == (ref["event"], ref["steps"]), r["scenario"]
        assert r["speed"] == ref["speed"]
        assert all(len(r[k]) == r["steps"] + 1 for k in SERIES)
    events = {r["scenario"]: r["event"] for r in recs}
    steps = {r["scenario"]: r["steps"] for r in recs}
    if baseline == "stop":  # never hits anything; falls behind the logged drive where it goes far enough
        assert set(events.values()) <= {"", "progress_deviation"} and events["b"] == "progress_deviation"
    else:  # a driver that holds its speed hits both stopped cars, the nearer one sooner, and drives the rest
        assert events["b"] == events["d"] == "dynamic_collision" and steps["b"] < steps["d"] < 20
        assert [events[s] for s in "ace"] == ["", "", ""] and [steps[s] for s in "ace"] == [12, 12, 8]


def test_autoreset_env_is_refused(suite):
    venv = VectorDrivingEnv(str(suite), 2, ENV)
    with pytest.raises(ValueError, match="autoreset=False"):
        run_episodes(baseline_act("stop", venv.action_spec), venv, ["a"])


def test_frames_end_in_the_state_the_episode_ended_in(suite):
    """The last frame of a clip ended by a collision is the picture of the collided state, as a single env
    renders it after its last step; per-step extras get one value per action taken."""
    worker = RolloutWorker(WorkerSpec(num_envs=2, threads=1))
    entry = PolicyEntry("cv", "constant-velocity", "baseline", ENV)

    def speed(venv, obs, infos):
        return obs["ego"][:, 0]

    (rec,) = worker.episodes(entry, [str(suite)], ["b"], 2, frames=True, extras={"speed": speed})
    assert rec["event"] == "dynamic_collision" and len(rec["frames"]) == rec["steps"] + 1
    assert len(rec["extras"]["speed"]) == rec["steps"]
    env = DrivingEnv(ENV, render_mode="rgb_array", scenarios=str(suite))
    act = baseline_act("constant-velocity", env.action_spec)
    obs, info = env.reset(options={"scenario": "b"})
    first = env.render()
    for _ in range(rec["steps"]):
        obs, _, term, _, info = env.step(act({k: v[None] for k, v in obs.items()}, [info])[0])
    assert term and info["event"] == "dynamic_collision"
    np.testing.assert_array_equal(rec["frames"][0], first)
    np.testing.assert_array_equal(rec["frames"][-1], env.render())


@pytest.mark.slow
def test_an_actor_killed_mid_suite_loses_and_repeats_no_episode(suite, ray_session):
    """Two evaluation actors; one is SIGKILLed while it drives its chunk. The group replaces it and drives that
    chunk again: every clip of every policy comes back exactly once, the same as in this process."""
    entries = [PolicyEntry(b, b, "baseline", ENV) for b in ("expert", "constant-velocity")]
    scen = [str(suite / f"{s}.json") for s in "abcde"]
    serial = RolloutGroup(WorkerSpec(num_envs=2), 0).run_episodes(entries, scen, 2)
    g = RolloutGroup(WorkerSpec(num_envs=2), num_actors=2, resources=ActorResources(num_cpus=0.5))
    try:
        victim = g.actor_pids()[1]
        killed: list = []
        g.actors[1] = KillWhileSampling(g.actors[1], killed, method="episodes")  # SIGKILLed 50 ms into its chunk
        ticks: list[int] = []
        out = g.run_episodes(entries, scen, 2, chunk=2, progress=ticks.append)
        assert killed == [(victim, False)]  # the chunk was not done when the kill landed
        assert g.restarts == 1 and g.actor_pids()[1] != victim
        assert sum(ticks) == 10  # each episode counted once
        for e in entries:
            got = out[e.label]
            assert [r["scenario"] for r in got] == list("abcde")
            for a, b in zip(got, serial[e.label]):
                assert (a["event"], a["steps"], a["speed"]) == (b["event"], b["steps"], b["speed"])
    finally:
        g.shutdown()
