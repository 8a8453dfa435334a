"""PPO (+ the directional aux losses) learns: a few iterations on a tiny scenario cut the failure rate,
and with the gradient path broken (learning rate 0) the same run from the same seed does not.

The task is longitudinal: a straight road whose expert drives 20 m/s, a 2 m progress threshold, and
three lateral bins 1 cm apart (the lateral head has almost nothing to decide). A fresh policy is
near uniform over the 61 longitudinal bins; most of them (anchors under 10 m per 0.5 s) slow the ego
down, so it falls behind the expert and nearly every episode ends in ``progress_deviation``. Learning
means picking the fast bins, which the PPO loss (the longitudinal advantage) and the progress aux loss
both push toward. Cameras off, privileged vector observations: about ten seconds on one core.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.config import PPOConfig, TrainConfig
from learner.learner import Learner
from learner.train import learner_settings
from rollout.fragment import stack_time
from rollout.worker import RolloutWorker, WorkerSpec, build_policy
from scenarios import save
from tests.envs.handmade import straight_scenario

ITERATIONS, T, ENVS = 10, 32, 8
ENV = {
    "cameras": False,
    "static_gaussians": False,
    "progress_threshold": 2.0,
    "n_lat": 3,
    "lat_max": 0.01,
}
POLICY = {"embed_dim": 32, "hidden_dim": 64}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("learning")
    save(straight_scenario(d, sid="fast", horizon=20, speed=20.0, n_ground=200), d / "fast.json")
    return d


def failure_rates(suite, lr: float, seed: int = 0) -> tuple[float, float]:
    """Failure rate (episodes ending in an event / episodes) of the first 2 and of the last 3 iterations."""
    # one speed limit all along this road: the limits part would be a constant input, left out
    env = {**ENV, "limits": False}
    spec = WorkerSpec(scenarios=(str(suite),), env_config=env, policy_config=POLICY, num_envs=ENVS, seed=seed)
    worker = RolloutWorker(spec)
    torch.manual_seed(seed)
    policy = build_policy(worker.env.single_observation_space, worker.env.action_spec, POLICY)
    ppo = PPOConfig(lr_final_fraction=1.0, epochs=4, minibatches=4, ent_coef=0.01)  # aux weights: 0.1 each
    settings = learner_settings(TrainConfig(seed=seed, ppo=ppo), total_updates=1000, lr=lr)
    learner = Learner(policy, settings)
    failed: list[list[bool]] = []
    for it in range(ITERATIONS):
        worker.set_weights(it, learner.weights())
        frag = worker.sample(T)
        failed.append([bool(e["event"]) for e in frag.episodes])
        learner.update_rl(stack_time([frag]))
    first = [f for it in failed[:2] for f in it]
    last = [f for it in failed[-3:] for f in it]
    return float(np.mean(first)), float(np.mean(last))


def test_ppo_cuts_the_failure_rate(suite):
    first, last = failure_rates(suite, lr=1e-3)
    assert first > 0.8  # the fresh policy falls behind in nearly every episode
    assert last < 0.5 * first, (first, last)


def test_no_gradient_no_improvement(suite):
    """The same run with lr = 0 (weights never move; only the observation statistics do): no cut."""
    first, last = failure_rates(suite, lr=0.0)
    assert first > 0.8 and last > 0.8 * first, (first, last)
