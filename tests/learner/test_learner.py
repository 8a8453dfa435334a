"""The learner: PPO and IL updates on fixed batches, the NaN guard, and N learners = 1 learner."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from learner.config import ILConfig, PPOConfig, TrainConfig
from learner.group import LearnerGroup
from learner.learner import Demos, Learner, NonFiniteLoss
from learner.train import learner_settings
from policy.network import ActorCritic, PolicyConfig, example_observation_space, random_obs
from rollout.fragment import Batch
from scenarios.actions import ActionSpec

SPACE = example_observation_space(n_cams=1, height=16, width=32)
SPEC = ActionSpec()
PCFG = PolicyConfig()


def make_policy():
    return ActorCritic(SPACE, SPEC, PCFG)


def fixed_batch(T=8, B=4, seed=0, nan=False) -> Batch:
    g = torch.Generator().manual_seed(seed)
    obs = random_obs(SPACE, T * B, generator=g)
    feas = torch.as_tensor(np.array(SPEC.mask))  # [n_long, n_lat]
    long_idx = torch.randint(8, 61, (T, B), generator=g)
    lat_idx = torch.full((T, B), 30)
    assert bool(feas[long_idx, lat_idx].all())
    rewards = torch.zeros(T, B, 2)
    rewards[T - 1, :2, 1] = -1.0  # two dynamic collisions at the end
    if nan:
        rewards[:, :, 0] = float("nan")  # every minibatch sees it
    term = torch.zeros(T, B, dtype=torch.bool)
    term[T - 1, :2] = True
    return Batch(
        obs={k: v.reshape(T, B, *v.shape[1:]) for k, v in obs.items()},
        actions=torch.stack([lat_idx, long_idx], -1),
        logp=torch.full((T, B, 2), -4.0),
        values=torch.zeros(T, B, 2),
        next_values=torch.zeros(T, B, 2),
        rewards=rewards,
        terminated=term,
        truncated=torch.zeros(T, B, dtype=torch.bool),
        aux_flags=torch.zeros(T, B, 5, dtype=torch.bool),
    )


def demos(n=64, seed=1) -> Demos:
    g = torch.Generator().manual_seed(seed)
    obs = random_obs(SPACE, n, generator=g)
    return Demos(obs, torch.stack([torch.full((n,), 30), torch.full((n,), 40)], -1))


# built as the driver builds them (learner.train.learner_settings), with the values these tests were written for
NO_AUX = dict(aux_front=0.0, aux_rear=0.0, aux_left=0.0, aux_right=0.0, aux_progress=0.0)
SETTINGS = learner_settings(
    TrainConfig(
        seed=3,
        ppo=PPOConfig(epochs=2, minibatches=2, lr_final_fraction=0.1, ent_coef=0.01, **NO_AUX),
        il=ILConfig(batch_size=32),
    ),
    total_updates=1000,
    lr=3e-4,
)


def test_ppo_update_moves_the_policy_and_reports_cleanrl_names():
    torch.manual_seed(0)
    learner = Learner(make_policy(), SETTINGS)
    before = {k: v.clone() for k, v in learner.weights().items()}
    m = learner.update_rl(fixed_batch())
    assert learner.updates == 4  # 2 epochs x 2 minibatches
    for k in ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac"):
        assert k in m and np.isfinite(m[k])
    after = learner.weights()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_il_rounds_fit_the_expert_bins():
    torch.manual_seed(0)
    learner = Learner(make_policy(), dataclasses.replace(SETTINGS, lr=3e-3))
    d = demos()
    first = learner.update_il(d, 1)["losses/il_loss"]
    for _ in range(10):
        last = learner.update_il(d, 5)
    assert last["losses/il_loss"] < 0.5 * first
    assert last["il/accuracy_long"] > 0.9 and last["il/accuracy_lat"] > 0.9


def test_nan_losses_are_skipped_then_stop_the_run():
    torch.manual_seed(0)
    ppo = dataclasses.replace(SETTINGS.ppo, max_consecutive_skips=3)
    learner = Learner(make_policy(), dataclasses.replace(SETTINGS, ppo=ppo))
    before = {k: v.clone() for k, v in learner.weights().items()}
    with pytest.raises(NonFiniteLoss, match="non-finite"):
        learner.update_rl(fixed_batch(nan=True))
    assert learner.skipped == 3 and learner.updates == 0 and learner.consecutive_skips == 3
    after = learner.weights()
    # parameters untouched (normalisation buffers may have seen the batch)
    for k, v in before.items():
        if "norms" not in k:
            assert torch.equal(v, after[k]), k


def test_state_round_trip_gives_identical_next_steps():
    torch.manual_seed(0)
    a = Learner(make_policy(), SETTINGS)
    a.update_rl(fixed_batch(seed=1))
    state = a.state()
    b = Learner(make_policy(), SETTINGS)
    b.load_state(state)
    a.update_rl(fixed_batch(seed=2))
    b.update_rl(fixed_batch(seed=2))
    for k, v in a.weights().items():
        assert torch.equal(v, b.weights()[k]), k


def test_lr_schedule_restarts_per_stage():
    ppo = dataclasses.replace(SETTINGS.ppo, lr_final_fraction=0.1)
    learner = Learner(make_policy(), dataclasses.replace(SETTINGS, ppo=ppo, lr=1e-3, total_updates=10))
    learner.set_settings(learner.s, "il")
    assert learner.lr_now() == pytest.approx(1e-3)
    learner.updates = 5
    assert learner.lr_now() == pytest.approx(1e-3 * (1 - 0.5 * 0.9))
    learner.set_settings(dataclasses.replace(learner.s, lr=2e-4), "rl")
    assert learner.lr_now() == pytest.approx(2e-4)  # a new stage starts its schedule afresh
    learner.set_settings(learner.s, "rl")
    learner.updates = 15
    assert learner.lr_now() == pytest.approx(2e-4 * (1 - 1.0 * 0.9))


def same_update(init, w1, w2) -> float:
    """How far two learners' weights after the same update differ beyond float rounding: per tensor, the largest
    difference less 5 % of the tensor's largest move (Adam divides each gradient entry by its own running scale,
    so a rounding difference in an entry whose gradient is ~0 -- the two halves of a minibatch summed in
    another order -- becomes a visible fraction of that entry's step), the worst over the tensors (<= 0: same)."""
    out = -1.0
    for k in w1:
        diff = float((w1[k].float() - w2[k].float()).abs().max())
        moved = float((w1[k].float() - init[k].float()).abs().max())
        out = max(out, diff - 0.05 * moved)
    return out


@pytest.mark.slow
def test_two_learners_equal_one(ray_session):
    """Data-parallel: 2 Ray learners (gloo all-reduce) end with the weights of 1 learner, to float rounding (1e-5
    beyond what Adam makes of rounding, ``same_update``)."""
    batch = fixed_batch(T=8, B=4, seed=5)
    torch.manual_seed(0)
    one = LearnerGroup(make_policy, SETTINGS, num_learners=1)
    init = one.weights()
    two = LearnerGroup(make_policy, SETTINGS, num_learners=2)
    try:
        two.load_state({"policy": init})
        one.update_rl(batch)
        two.update_rl(batch)
        w1, w2 = one.weights(), two.weights()
        assert same_update(init, w1, w2) < 1e-5
        # and the weights really moved
        assert max(float((w1[k].float() - init[k].float()).abs().max()) for k in w1) > 1e-4
    finally:
        two.shutdown()


def _norm_counts(learner: Learner) -> dict[str, float]:
    return {k: float(v) for k, v in learner.policy.state_dict().items() if k.endswith(".count")}


def test_ppo_ratio_uses_the_normaliser_that_scored_the_actions():
    """The rollout scored its actions with the policy as the iteration began; the first PPO minibatch, with the
    weights unchanged, must see ratio 1 exactly (approx_kl 0, nothing clipped). Merging the batch into the
    observation statistics before the epochs (as this learner once did) moves every log-prob: with these
    sharpened heads, going from identity statistics to the batch's gives approx_kl ~1.2 and clips 78 % of the
    samples. The batch is merged after the epochs."""
    torch.manual_seed(0)
    policy = make_policy()
    with torch.no_grad():  # a decided policy (the heads start near uniform), so a normaliser change shows
        policy.long_head.weight.mul_(100.0)
        policy.lat_out.weight.mul_(100.0)
    batch = fixed_batch(T=8, B=4, seed=7)
    for k in batch.obs:
        if k in ("ego", "route"):  # far from the identity statistics, so a change would show
            batch.obs[k] = 5.0 + 3.0 * batch.obs[k]
    obs = {k: v.reshape(32, *v.shape[2:]) for k, v in batch.obs.items()}
    with torch.no_grad():
        batch.logp = policy.evaluate_actions(obs, batch.actions.reshape(32, 2)).log_prob.reshape(8, 4, 2)
    ppo = dataclasses.replace(SETTINGS.ppo, epochs=1, minibatches=1)
    learner = Learner(policy, dataclasses.replace(SETTINGS, ppo=ppo))
    before = _norm_counts(learner)
    m = learner.update_rl(batch)
    assert m["losses/approx_kl"] == pytest.approx(0.0, abs=1e-7) and m["losses/clipfrac"] == 0.0
    after = _norm_counts(learner)
    assert after["norms.ego.count"] == before["norms.ego.count"] + 32  # merged once, after the epochs


def test_demonstrations_join_the_statistics_once_not_every_il_round():
    torch.manual_seed(0)
    learner = Learner(make_policy(), SETTINGS)
    d = demos(n=64)
    learner.merge_obs_stats(d)
    counts = _norm_counts(learner)
    assert counts["norms.ego.count"] == 64
    for _ in range(3):
        learner.update_il(d, 2)
    assert _norm_counts(learner) == counts
