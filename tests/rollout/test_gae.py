"""GAE per reward part against values computed by hand (gamma 0.9, lambda 0.95: RAD's; gamma * lambda = 0.855)."""

from __future__ import annotations

import pytest
import torch

from rollout.gae import gae

G, L = 0.9, 0.95


def col(*xs) -> torch.Tensor:
    """One env, one reward part: [T] -> [T, 1, 1]."""
    return torch.tensor(xs, dtype=torch.float64)[:, None, None]


def flags(*xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool)[:, None]


def test_no_boundary_bootstraps_from_last_next_value():
    # delta = (1 + .9*1.0 - .5, 0 + .9*.2 - 1.0, 2 + .9*.4 - .2) = (1.4, -0.82, 2.16)
    # A2 = 2.16; A1 = -0.82 + .855*2.16 = 1.0268; A0 = 1.4 + .855*1.0268 = 2.277914
    adv, ret = gae(col(1, 0, 2), col(0.5, 1.0, 0.2), col(1.0, 0.2, 0.4), flags(0, 0, 0), flags(0, 0, 0), gamma=G, lam=L)
    torch.testing.assert_close(adv.flatten(), torch.tensor([2.277914, 1.0268, 2.16], dtype=torch.float64))
    torch.testing.assert_close(ret.flatten(), torch.tensor([2.777914, 2.0268, 2.36], dtype=torch.float64))


def test_terminated_step_does_not_bootstrap_and_cuts_the_trace():
    # Episode ends (terminated) at t=1; a new episode starts at t=2. next_values[1] = 7 is ignored.
    # delta0 = 0 + .9*(-.4) - .3 = -0.66; delta1 = -1 - (-.4) = -0.6; delta2 = .5 + .9*.1 - .6 = -0.01
    # A2 = -0.01; A1 = -0.6 (nothing from t=2); A0 = -0.66 + .855*(-0.6) = -1.173
    adv, ret = gae(
        col(0, -1, 0.5), col(0.3, -0.4, 0.6), col(-0.4, 7.0, 0.1), flags(0, 1, 0), flags(0, 0, 0), gamma=G, lam=L
    )
    torch.testing.assert_close(adv.flatten(), torch.tensor([-1.173, -0.6, -0.01], dtype=torch.float64))
    torch.testing.assert_close(ret.flatten(), torch.tensor([-0.873, -1.0, 0.59], dtype=torch.float64))


def test_truncated_step_bootstraps_from_final_observation_value():
    # Truncated at t=1 with V(final obs) = 0.5 in next_values[1].
    # delta = (.9*.4 - .2, .9*.5 - .4, 1 + 0 - .3) = (0.16, 0.05, 0.7); A1 = 0.05 (trace cut); A0 = .16 + .855*.05
    r, v, nv = col(0, 0, 1), col(0.2, 0.4, 0.3), col(0.4, 0.5, 0.0)
    adv, _ = gae(r, v, nv, flags(0, 0, 0), flags(0, 1, 0), gamma=G, lam=L)
    torch.testing.assert_close(adv.flatten(), torch.tensor([0.20275, 0.05, 0.7], dtype=torch.float64))
    # The same step terminated instead: no bootstrap, delta1 = -0.4, A0 = 0.16 - 0.342 = -0.182.
    adv, _ = gae(r, v, nv, flags(0, 1, 0), flags(0, 0, 0), gamma=G, lam=L)
    torch.testing.assert_close(adv.flatten(), torch.tensor([-0.182, -0.4, 0.7], dtype=torch.float64))
    # Both flags on one step (an event on the clip's last step): terminated wins.
    adv, _ = gae(r, v, nv, flags(0, 1, 0), flags(0, 1, 0), gamma=G, lam=L)
    torch.testing.assert_close(adv.flatten(), torch.tensor([-0.182, -0.4, 0.7], dtype=torch.float64))


def test_two_reward_parts_and_independent_envs():
    # [T=2, B=2, P=2]. Env 0: a lateral event (-1 on the lateral part) terminates at t=1.
    #   lateral:      delta0 = 0 + .9*(-.5) + .2 = -0.25; delta1 = -1 + .5 = -0.5; A0 = -0.25 + .855*(-.5) = -0.6775
    #   longitudinal: delta0 = 0 + .9*(-.3) + .1 = -0.17; delta1 = 0 + .3 = 0.3;   A0 = -0.17 + .855*.3 = 0.0865
    # Env 1: no event, V = 0, next_values = (0, 1) on both parts: delta = (0, 0.9); A = (0.7695, 0.9).
    rewards = torch.tensor([[[0.0, 0.0], [0.0, 0.0]], [[-1.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    values = torch.tensor([[[-0.2, -0.1], [0.0, 0.0]], [[-0.5, -0.3], [0.0, 0.0]]], dtype=torch.float64)
    next_values = torch.tensor([[[-0.5, -0.3], [0.0, 0.0]], [[9.0, 9.0], [1.0, 1.0]]], dtype=torch.float64)
    terminated = torch.tensor([[False, False], [True, False]])
    truncated = torch.zeros(2, 2, dtype=torch.bool)
    adv, ret = gae(rewards, values, next_values, terminated, truncated, gamma=G, lam=L)
    expected = torch.tensor([[[-0.6775, 0.0865], [0.7695, 0.7695]], [[-0.5, 0.3], [0.9, 0.9]]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_gamma_zero_is_one_step_and_lambda_one_is_monte_carlo():
    r, v, nv = col(1.0, 2.0, 3.0), col(0.5, 0.5, 0.5), col(0.5, 0.5, 4.0)
    no = flags(0, 0, 0)
    adv, _ = gae(r, v, nv, no, no, gamma=0.0, lam=L)
    torch.testing.assert_close(adv.flatten(), torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64))
    # lambda = 1: return = discounted rewards + gamma^3 * bootstrap: 3 + .9*4 = 6.6; 2 + .9*6.6 = 7.94; 1 + .9*7.94
    _, ret = gae(r, v, nv, no, no, gamma=G, lam=1.0)
    torch.testing.assert_close(ret.flatten(), torch.tensor([8.146, 7.94, 6.6], dtype=torch.float64))


def test_shape_errors_are_actionable():
    r = torch.zeros(3, 2, 2)
    ok = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"rewards must be \[T, B, P\]"):
        gae(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), ok, ok, gamma=G, lam=L)
    with pytest.raises(ValueError, match="next_values"):
        gae(r, r, torch.zeros(3, 2, 1), ok, ok, gamma=G, lam=L)
    with pytest.raises(ValueError, match="truncated"):
        gae(r, r, r, ok, torch.zeros(3, dtype=torch.bool), gamma=G, lam=L)
