"""Rollout workers and the Ray actor group: fragments, bootstrapping, and a SIGKILLed actor."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from envs.driving import DrivingEnv
from rollout.fragment import Fragment, stack_time
from rollout.group import ActorResources, RolloutGroup
from rollout.infos import AUX_FLAGS, aux_flags, env_info
from rollout.worker import RolloutWorker, WorkerSpec, to_torch
from scenarios import save
from tests.envs.handmade import straight_scenario
from tests.killing import KillWhileSampling

# privileged: what these fragment checks were written against (the random policy's events and truncations)
ENV = {"resolution": (32, 16), "render_backend": "cpu", "observation": "privileged"}
POLICY = {"embed_dim": 32, "hidden_dim": 64}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("rollout_suite")
    save(straight_scenario(d, sid="plain", horizon=12), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=12, lead_gap=6.0, lead_speed=0.0), d / "lead.json")
    return d


@pytest.fixture(scope="module")
def hm_dir_rollout(tmp_path_factory):
    return tmp_path_factory.mktemp("rollout_handmade")


def spec_for(suite, num_envs=3, seed=0):
    return WorkerSpec(scenarios=(str(suite),), env_config=ENV, policy_config=POLICY, num_envs=num_envs, seed=seed)


def test_fragment_shapes_and_tags(suite):
    w = RolloutWorker(spec_for(suite))
    w.set_weights(7, w.policy.state_dict())
    f = w.sample(20)
    assert isinstance(f, Fragment) and f.shape == (20, 3) and f.env_steps == 60 and f.policy_version == 7
    assert f.obs["cameras"].shape == (20, 3, 3, 16, 32, 3) and f.obs["cameras"].dtype == np.uint8
    assert f.actions.shape == (20, 3, 2) and f.logp.shape == (20, 3, 2) and f.values.shape == (20, 3, 2)
    # horizon 12 and 20 steps: every env ended at least one episode, truncated (clip end) or terminated (event)
    ended = f.terminated | f.truncated
    assert ended.any(axis=0).all()
    assert not (f.terminated & f.truncated).any()
    # rewards are -1 exactly on terminated steps, in the part the event belongs to
    assert np.all(f.rewards.sum(-1)[f.terminated] == -1.0) and np.all(f.rewards[~f.terminated] == 0.0)
    assert len(f.episodes) == int(ended.sum())
    for ep in f.episodes:
        assert ep["terminated"] == bool(ep["event"]) and ep["ret"] in (0.0, -1.0)
    # actions are feasible
    mask = w.env.action_mask
    assert mask[f.actions[..., 1], f.actions[..., 0]].all()


def test_values_and_bootstrap_match_the_policy(suite):
    """values[t] = V(obs[t]); on a non-final step next_values[t] = values[t+1]; on a truncated step it is
    V(final observation), which differs from V(the next episode's first observation)."""
    w = RolloutWorker(spec_for(suite, num_envs=2, seed=3))
    f = w.sample(64)  # long enough for a random policy to reach a clip's end (12 steps) in some episode
    with torch.no_grad():
        flat = {k: torch.from_numpy(v.reshape(-1, *v.shape[2:])) for k, v in f.obs.items()}
        v = w.policy.act(flat).values.numpy().reshape(64, 2, 2)
    np.testing.assert_allclose(v, f.values, atol=1e-5)
    cont = ~(f.terminated | f.truncated)
    np.testing.assert_allclose(f.next_values[:-1][cont[:-1]], f.values[1:][cont[:-1]], atol=1e-5)
    trunc = np.argwhere(f.truncated[:-1])
    assert len(trunc)
    assert any(not np.allclose(f.next_values[t, b], f.values[t + 1, b], atol=1e-4) for t, b in trunc)


def test_stack_time_concatenates_envs(suite):
    w = RolloutWorker(spec_for(suite, num_envs=2))
    a, b = w.sample(5), w.sample(5)
    batch = stack_time([a, b])
    assert batch.actions.shape == (5, 4, 2) and batch.obs["cameras"].shape[:2] == (5, 4) and batch.env_steps == 20
    assert torch.equal(batch.rewards[:, 2:], torch.from_numpy(b.rewards))


def test_env_info_and_aux_flags():
    infos = {
        "event": np.array(["dynamic_collision", ""], dtype=object),
        "_event": np.array([True, True]),
        "reward_terms": {"x": np.array([-1.0, 0.0]), "_x": np.array([True, False])},
        "_reward_terms": np.array([True, True]),
    }
    assert env_info(infos, 0) == {"event": "dynamic_collision", "reward_terms": {"x": -1.0}}
    assert env_info(infos, 1) == {"event": "", "reward_terms": {}}
    assert aux_flags({"event": "dynamic_collision", "collision_location": "front_left"}).tolist() == [1, 0, 0, 0, 0]
    assert aux_flags({"event": "dynamic_collision", "collision_location": "rear"}).tolist() == [0, 1, 0, 0, 0]
    assert not aux_flags({"event": "dynamic_collision", "collision_location": "left"}).any()  # side: no direction
    # position deviation: the side of the path (lateral_offset), whatever the heading; heading: the turn
    info = {"event": "position_deviation", "lateral_offset": -2.1, "heading_error": 0.3}
    assert aux_flags(info).tolist() == [0, 0, 0, 1, 0]
    info = {"event": "heading_deviation", "lateral_offset": -0.4, "heading_error": 0.8}
    assert aux_flags(info).tolist() == [0, 0, 1, 0, 0]
    assert aux_flags({"event": "progress_deviation"}).tolist() == [0, 0, 0, 0, 1]
    assert not aux_flags({"event": ""}).any() and not aux_flags({"event": "static_collision"}).any()


def test_aux_flags_from_a_real_drift_to_the_left(hm_dir_rollout):
    """The env's own info: drifting left of the path (lateral bin 50 = +0.5 m at 10 m/s) ends in a position
    deviation on the left, which asks to steer right."""
    env = DrivingEnv(ENV, scenarios=[straight_scenario(hm_dir_rollout, sid="drift", horizon=40)])
    env.reset(seed=0)
    while True:
        _, _, te, tr, info = env.step([50, 20])
        if te or tr:
            break
    assert info["event"] == "position_deviation" and info["lateral_offset"] > 2.0
    assert aux_flags(info).tolist() == [0, 0, 1, 0, 0]


def _fixed_action(worker: RolloutWorker, action) -> None:
    """Make the worker's policy always take ``action`` (its values and log-probs stay the network's)."""
    real = worker.policy.act

    def act(obs, deterministic=False):
        out = real(obs, deterministic=deterministic)
        return out._replace(action=torch.tensor(action).expand_as(out.action).clone())

    worker.policy.act = act


def test_aux_flags_cover_the_steps_that_led_to_the_event(hm_dir_rollout):
    """A stopped ego on the 12-step straight road with a 3 m progress threshold fails at its 9th step
    (lag 0.045 n^2 > 3 first at n = 9): each episode is steps k..k+8 of the run. The flag (progress_behind)
    is on every step of such an episode before its terminal step, off on the terminal step itself
    (RAD's code leaves the collided frame out); an episode that crosses into the next fragment is flagged
    there on the steps that fragment holds."""
    d = hm_dir_rollout / "flags"
    d.mkdir(exist_ok=True)
    save(straight_scenario(d, sid="plain12", horizon=12), d / "plain12.json")
    spec = WorkerSpec(
        scenarios=(str(d),),
        env_config={**ENV, "cameras": False, "progress_threshold": 3.0},
        policy_config=POLICY,
        num_envs=1,
    )
    w = RolloutWorker(spec)
    _fixed_action(w, [30, 0])
    a, b = w.sample(20), w.sample(20)
    # fragment a: episodes end at steps 8 and 17; steps 18, 19 start a third, which ends at b's step 6
    np.testing.assert_array_equal(np.flatnonzero(a.terminated[:, 0]), [8, 17])
    np.testing.assert_array_equal(np.flatnonzero(b.terminated[:, 0]), [6, 15])
    assert [e["event"] for e in a.episodes] == ["progress_deviation"] * 2
    want_a = np.zeros(20, bool)
    want_a[0:8] = want_a[9:17] = True
    want_b = np.zeros(20, bool)
    want_b[0:6] = want_b[7:15] = True
    np.testing.assert_array_equal(a.aux_flags[:, 0, AUX_FLAGS.index("progress_behind")], want_a)
    np.testing.assert_array_equal(b.aux_flags[:, 0, AUX_FLAGS.index("progress_behind")], want_b)
    assert a.aux_flags[..., :4].sum() == 0 and b.aux_flags[..., :4].sum() == 0  # no other direction
    assert a.aux_flags.shape == (20, 1, len(AUX_FLAGS))
    # the batch the learner gets carries them
    assert stack_time([a]).aux_flags.shape == (20, 1, 5)


def test_serial_group_is_the_local_worker(suite):
    g = RolloutGroup(spec_for(suite, num_envs=2), num_actors=0)
    g.set_weights(3, g.local.policy.state_dict())
    frags = g.sample(4)
    assert len(frags) == 1 and frags[0].policy_version == 3 and g.actor_pids() == [os.getpid()]
    _ = to_torch(frags[0].obs)


@pytest.mark.slow
def test_sigkilled_actor_is_replaced_and_its_fragment_redone(suite, ray_session):
    """Two rollout actors; one is SIGKILLed while sampling. The group replaces it, pushes the weights,
    asks again, and returns one fragment per slot, all of the current version."""
    g = RolloutGroup(spec_for(suite, num_envs=2), num_actors=2, resources=ActorResources(num_cpus=0.5))
    try:
        assert len(g.actor_pids()) == 2
        g.set_weights(5, g.weights())
        pids = g.actor_pids()
        victim = pids[1]
        killed: list = []
        g.actors[1] = KillWhileSampling(g.actors[1], killed)  # SIGKILLed 50 ms into its fragment
        frags = g.sample(60)
        assert killed == [(victim, False)]  # the fragment was not done when the kill landed
        assert len(frags) == 2 and all(f.shape == (60, 2) for f in frags)
        assert all(f.policy_version == 5 for f in frags)
        assert g.restarts == 1
        new_pids = g.actor_pids()
        assert new_pids[0] == pids[0] and new_pids[1] != victim
        # and it keeps working
        assert len(g.sample(3)) == 2
    finally:
        g.shutdown()
