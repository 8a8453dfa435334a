"""PPO / IL / directional auxiliary losses against hand values; advantage normalisation edge cases; NaN guard."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from learner.losses import (
    NonFiniteGuard,
    directional_aux_loss,
    finite_or_skip,
    il_loss,
    normalize_advantages,
    ppo_loss,
)
from policy.network import MASK_VALUE, ActorCritic, PolicyConfig
from scenarios.actions import ActionSpec, nearest_bins

CLEANRL_NAMES = ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Small models gain nothing from intra-op threads, and on a loaded 2-core box they make each op wait for a
    busy core (100 tiny optimizer steps: 0.5 s on one thread, 26 s on two). Restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ppo_loss takes every setting as a keyword without a default: these are the tests' own (CleanRL's clipped
# surrogate with no value clip and no entropy bonus unless a test says otherwise)
PPO_SETTINGS = dict(
    clip=(0.1, 0.2), old_values=None, value_clip=None, entropy=None, ent_coef=0.0, vf_coef=0.5, norm_adv=True
)


def ppo(new_logp, old_logp, adv, **kw) -> dict:
    return ppo_loss(new_logp, old_logp, adv, **{**PPO_SETTINGS, **kw})


def pg(ratio_lat: float, ratio_long: float, adv_lat: float, adv_long: float, **kw) -> dict:
    new_logp = torch.tensor([[math.log(ratio_lat), math.log(ratio_long)]], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(1, 2, dtype=torch.float64)
    adv = torch.tensor([[adv_lat, adv_long]], dtype=torch.float64)
    out = ppo(new_logp, zeros, adv, new_values=zeros, returns=zeros, norm_adv=False, **kw)
    out["_new_logp"] = new_logp
    return out


def test_clipped_surrogate_per_dimension_hand_values():
    # ratio 1.3, A = +2: longitudinal clip 0.2 -> objective 1.2 * A; lateral clip 0.1 -> 1.1 * A.
    out = pg(1.3, 1.3, 2.0, 2.0)
    assert out["losses/policy_loss_long"].item() == pytest.approx(-1.2 * 2.0)
    assert out["losses/policy_loss_lat"].item() == pytest.approx(-1.1 * 2.0)
    assert out["losses/policy_loss"].item() == pytest.approx(-2.4 - 2.2)
    # Clipped: no gradient through the ratio.
    out["loss"].backward()
    assert out["_new_logp"].grad.abs().max().item() == 0.0

    # ratio 0.7, A = -1: pessimistic max(0.7, 0.8) = 0.8 (long), max(0.7, 0.9) = 0.9 (lat).
    out = pg(0.7, 0.7, -1.0, -1.0)
    assert out["losses/policy_loss_long"].item() == pytest.approx(0.8)
    assert out["losses/policy_loss_lat"].item() == pytest.approx(0.9)
    # ratio 1.3, A = -1: the unclipped term is the pessimistic one: 1.3 on both dims, with gradient.
    out = pg(1.3, 1.3, -1.0, -1.0)
    assert out["losses/policy_loss_long"].item() == pytest.approx(1.3)
    assert out["losses/policy_loss_lat"].item() == pytest.approx(1.3)
    out["loss"].backward()
    torch.testing.assert_close(out["_new_logp"].grad, torch.tensor([[1.3, 1.3]], dtype=torch.float64))
    # ratio 0.7, A = +1: unclipped -0.7.
    out = pg(0.7, 0.7, 1.0, 1.0)
    assert out["losses/policy_loss_long"].item() == pytest.approx(-0.7)
    # ratio 1.15 with A = +1: clipped at 1.1 on the lateral dim only.
    out = pg(1.15, 1.15, 1.0, 1.0)
    assert out["losses/policy_loss_lat"].item() == pytest.approx(-1.1)
    assert out["losses/policy_loss_long"].item() == pytest.approx(-1.15)
    assert out["losses/clipfrac_lat"].item() == 1.0 and out["losses/clipfrac_long"].item() == 0.0
    assert out["losses/clipfrac"].item() == 0.5


def test_each_dimension_uses_its_own_advantage_part():
    # ratio 1 on both dims: L_lat = -A_lat, L_long = -A_long.
    out = pg(1.0, 1.0, 2.0, -1.0)
    assert out["losses/policy_loss_lat"].item() == pytest.approx(-2.0)
    assert out["losses/policy_loss_long"].item() == pytest.approx(1.0)
    out["loss"].backward()
    # d loss / d logp = -A * ratio per dimension.
    torch.testing.assert_close(out["_new_logp"].grad, torch.tensor([[-2.0, 1.0]], dtype=torch.float64))


def test_value_loss_entropy_kl_and_total():
    N = 2
    new_logp = torch.tensor([[math.log(1.3), 0.0], [0.0, 0.0]])
    old_logp = torch.zeros(N, 2)
    adv = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    new_values = torch.tensor([[1.0, 2.0], [1.0, 2.0]])
    returns = torch.zeros(N, 2)
    entropy = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = ppo(
        new_logp, old_logp, adv, new_values=new_values, returns=returns, entropy=entropy,
        ent_coef=(0.01, 0.02), vf_coef=0.5, norm_adv=False,
    )  # fmt: skip
    for name in CLEANRL_NAMES:
        assert name in out and not out[name].requires_grad
    # Value: 0.5 * 1^2 (lat) + 0.5 * 2^2 (long).
    assert out["losses/value_loss_lat"].item() == pytest.approx(0.5)
    assert out["losses/value_loss_long"].item() == pytest.approx(2.0)
    assert out["losses/value_loss"].item() == pytest.approx(2.5)
    # Entropy: mean lat 2, mean long 3.
    assert out["losses/entropy_lat"].item() == pytest.approx(2.0)
    assert out["losses/entropy_long"].item() == pytest.approx(3.0)
    assert out["losses/entropy"].item() == pytest.approx(5.0)
    # Policy: lat mean(-1.1, -1.0) = -1.05; long -1.
    assert out["losses/policy_loss"].item() == pytest.approx(-2.05)
    # Joint approx KL: log r = (log 1.3, 0) -> mean((0.3 - log 1.3), 0).
    assert out["losses/approx_kl"].item() == pytest.approx((0.3 - math.log(1.3)) / 2, rel=1e-5)
    assert out["losses/old_approx_kl"].item() == pytest.approx(-math.log(1.3) / 2, rel=1e-5)
    assert out["loss"].item() == pytest.approx(-2.05 - (0.01 * 2 + 0.02 * 3) + 0.5 * 2.5, rel=1e-6)


def test_clipped_value_loss():
    # old V = 0, new V = 1, return 2, clip 0.2: unclipped (1-2)^2 = 1; clipped V = 0.2 -> 3.24; max -> 0.5 * 3.24.
    z = torch.zeros(1, 2)
    out = ppo(
        z, z, z, new_values=torch.ones(1, 2), returns=torch.full((1, 2), 2.0), old_values=z, value_clip=0.2,
        norm_adv=False,
    )  # fmt: skip
    assert out["losses/value_loss_lat"].item() == pytest.approx(1.62)
    with pytest.raises(ValueError, match="old_values"):
        ppo(z, z, z, new_values=z, returns=z, value_clip=0.2)


def test_normalize_advantages_safe_on_tiny_minibatches():
    one = normalize_advantages(torch.tensor([[3.0, -2.0]]), std_floor=0.0)
    assert torch.equal(one, torch.zeros(1, 2))
    same = normalize_advantages(torch.full((5, 2), 0.3), std_floor=0.0)
    assert torch.isfinite(same).all() and same.abs().max().item() < 1e-6
    # Columns are normalised independently: one constant, one varying.
    adv = torch.tensor([[1.0, 0.0], [1.0, 2.0], [1.0, 4.0]])
    out = normalize_advantages(adv, std_floor=0.0)
    assert out[:, 0].abs().max().item() < 1e-6
    assert out[:, 1].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out[:, 1].pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=1e-5)
    # ppo_loss with one sample and norm_adv stays finite (sb3#325).
    z = torch.zeros(1, 2)
    terms = ppo(torch.tensor([[0.1, -0.1]]), z, torch.tensor([[5.0, -5.0]]), new_values=z, returns=z)
    assert finite_or_skip(terms)


def test_a_std_floor_keeps_a_part_without_events_small():
    """Lateral part: only critic noise (std 0.01); longitudinal: one collision's -1 among zeros. Without a floor
    the noise is blown up to unit size like the event; with a floor of 0.1 it stays a tenth of the event's."""
    g = torch.Generator().manual_seed(0)
    noise = 0.01 * torch.randn(100, generator=g)
    event = torch.zeros(100)
    event[7] = -1.0
    adv = torch.stack([noise, event], 1)
    plain = normalize_advantages(adv, std_floor=0.0)
    floored = normalize_advantages(adv, std_floor=0.1)
    assert plain[:, 0].pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=1e-4)
    noise_std = (noise - noise.mean()).pow(2).mean().sqrt().item()
    assert floored[:, 0].pow(2).mean().sqrt().item() == pytest.approx(noise_std / 0.1, rel=1e-4)  # ~0.1
    # the event's part has std ~0.0995 < 0.1: floored too, by hand: (x - mean) / 0.1
    event_std = (event - event.mean()).pow(2).mean().sqrt().item()
    assert event_std < 0.1
    assert floored[7, 1].item() == pytest.approx((-1.0 - event.mean().item()) / 0.1, rel=1e-5)


def test_il_loss_is_cross_entropy_at_the_expert_bins():
    logits_long = torch.log(torch.tensor([[1.0, 3.0]]))  # probs (0.25, 0.75)
    logits_lat = torch.log(torch.tensor([[1.0, 1.0, 2.0]]))  # probs (0.25, 0.25, 0.5)
    out = il_loss(logits_long, logits_lat, expert_lat=torch.tensor([2]), expert_long=torch.tensor([1]), focal_gamma=0.0)
    assert out["losses/il_loss_long"].item() == pytest.approx(-math.log(0.75))
    assert out["losses/il_loss_lat"].item() == pytest.approx(-math.log(0.5))
    assert out["loss"].item() == pytest.approx(-math.log(0.75) - math.log(0.5))
    assert out["il/accuracy_lat"].item() == 1.0 and out["il/accuracy_long"].item() == 1.0
    # Focal, gamma 2: -(1 - p)^2 log p.
    out = il_loss(logits_long, logits_lat, torch.tensor([2]), torch.tensor([1]), focal_gamma=2.0)
    assert out["loss"].item() == pytest.approx(-(0.25**2) * math.log(0.75) - (0.5**2) * math.log(0.5))
    # Equals F.cross_entropy on random logits.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 61, generator=g), torch.randn(16, 61, generator=g)
    t1, t2 = torch.randint(0, 61, (16,), generator=g), torch.randint(0, 61, (16,), generator=g)
    out = il_loss(a, b, t1, t2, focal_gamma=0.0)
    torch.testing.assert_close(out["loss"], F.cross_entropy(b, t1) + F.cross_entropy(a, t2))


def test_il_with_teacher_forcing_fits_expert_bins():
    """A few IL steps on the real network (lateral head conditioned on the expert's longitudinal bin)."""
    torch.manual_seed(0)
    spec = ActionSpec()
    space = gym.spaces.Dict({"ego": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)})
    model = ActorCritic(space, spec, PolicyConfig(embed_dim=32, hidden_dim=64))
    obs = {"ego": torch.randn(8, 7)}
    bins = torch.as_tensor(nearest_bins(np.linspace(-0.3, 0.3, 8), np.linspace(1.0, 10.0, 8), spec))
    expert_lat, expert_long = bins[:, 0], bins[:, 1]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(100):
        logits_long, logits_lat = model.logits(obs, long_idx=expert_long)
        out = il_loss(logits_long, logits_lat, expert_lat, expert_long, focal_gamma=0.0)
        first = first if first is not None else out["loss"].item()
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    assert out["loss"].item() < 0.1 * first
    assert out["il/accuracy_long"].item() == 1.0 and out["il/accuracy_lat"].item() == 1.0
    det = model.act(obs, deterministic=True).action
    assert torch.equal(det[:, 0], expert_lat) and torch.equal(det[:, 1], expert_long)


def _aux_step(flag: int, adv: tuple[float, float], actions=(2, 2)):
    """One SGD step on one flagged term; returns (loss dict, probs before, probs after) for both heads."""
    torch.manual_seed(1)
    logits_long = torch.randn(1, 5, requires_grad=True)
    logits_lat = torch.randn(1, 5)
    logits_lat[0, [0, 4]] = MASK_VALUE  # two infeasible lateral bins
    logits_lat.requires_grad_(True)
    flags = torch.zeros(1, 5, dtype=torch.bool)
    flags[0, flag] = True
    weights = [0.0] * 5
    weights[flag] = 1.0
    kw = dict(actions=torch.tensor([actions]), adv=torch.tensor([adv]), aux_flags=flags, weights=weights)
    out = directional_aux_loss(logits_long, logits_lat, **kw)
    before = (torch.softmax(logits_long, -1).detach(), torch.softmax(logits_lat, -1).detach())
    out["loss"].backward()
    with torch.no_grad():
        after = (
            torch.softmax(logits_long - 1.0 * logits_long.grad, -1),
            torch.softmax(logits_lat - logits_lat.grad, -1),
        )
    return out, before, after, (logits_long.grad, logits_lat.grad)


@pytest.mark.parametrize(
    "flag, head, select",
    [
        (0, 0, slice(0, 2)),  # front collision -> lower longitudinal bins than the taken 2
        (1, 0, slice(3, 5)),  # rear collision  -> higher longitudinal bins
        (2, 1, slice(0, 2)),  # drifted left    -> lateral bins to the right (lower indices)
        (3, 1, slice(3, 5)),  # drifted right   -> lateral bins to the left (higher indices)
        (4, 0, slice(3, 5)),  # behind the expert -> higher longitudinal bins
    ],
)
def test_aux_losses_push_mass_the_corrective_way(flag, head, select):
    out, before, after, grads = _aux_step(flag, adv=(-1.0, -1.0))
    assert after[head][0, select].sum() > before[head][0, select].sum()
    assert grads[1 - head].abs().max().item() == 0.0  # the other head is untouched
    # Hand value: L = w * (-P) with w = -A = 1, N = 1.
    name = ("dc_front", "dc_rear", "dev_left", "dev_right", "progress")[flag]
    assert out[f"losses/aux_{name}"].item() == pytest.approx(-before[head][0, select].sum().item(), rel=1e-5)
    # Masked (infeasible) lateral bins get no mass and no gradient.
    assert after[1][0, 0] == 0.0 and after[1][0, 4] == 0.0


def test_aux_loss_hand_value_and_gating():
    # Uniform longitudinal logits over 4 bins, taken bin 2, A_long = -2, front collision: P(j < 2) = 0.5,
    # L = (1/N) * 2 * (-0.5) with N = 2 (the second step is unflagged).
    logits_long = torch.zeros(2, 4, requires_grad=True)
    logits_lat = torch.zeros(2, 3, requires_grad=True)
    flags = torch.tensor([[True, False, False, False, False], [False, False, False, False, False]])
    actions = torch.tensor([[1, 2], [1, 2]])
    adv = torch.tensor([[0.0, -2.0], [0.0, -2.0]])
    out = directional_aux_loss(logits_long, logits_lat, actions, adv, flags, weights={"dc_front": 0.5})
    assert out["losses/aux_dc_front"].item() == pytest.approx(-0.5)
    assert out["loss"].item() == pytest.approx(-0.25)
    out["loss"].backward()
    assert logits_long.grad[1].abs().max().item() == 0.0  # unflagged step
    # Positive advantage: nothing to correct. Zero weights: loss 0.
    out = directional_aux_loss(logits_long, logits_lat, actions, -adv, flags, weights={"dc_front": 1.0})
    assert out["loss"].item() == 0.0
    assert directional_aux_loss(logits_long, logits_lat, actions, adv, flags, weights=[0.0] * 5)["loss"].item() == 0.0
    # Already at the lowest bin: no lower bin, P = 0, finite.
    out = directional_aux_loss(
        logits_long, logits_lat, torch.tensor([[1, 0], [1, 0]]), adv, flags, weights=[1, 0, 0, 0, 0]
    )
    assert out["loss"].item() == 0.0
    # Progress uses the longitudinal advantage: uniform over 4 bins, taken bin 1, P(j > 1) = 0.5, A_long = -2
    flags = torch.tensor([[False, False, False, False, True], [False, False, False, False, False]])
    out = directional_aux_loss(
        logits_long, logits_lat, torch.tensor([[1, 1], [1, 1]]), adv, flags, weights={"progress": 1.0}
    )
    assert out["losses/aux_progress"].item() == pytest.approx(-0.5) and out["loss"].item() == pytest.approx(-0.5)
    with pytest.raises(ValueError, match=r"aux_flags must be \[N, 5\]"):
        directional_aux_loss(logits_long, logits_lat, actions, adv, flags[:, :4], weights={"progress": 1.0})
    with pytest.raises(ValueError, match="unknown weight names"):
        directional_aux_loss(logits_long, logits_lat, actions, adv, flags, weights={"brake": 1.0})


def test_ppo_on_network_outputs_one_step():
    torch.manual_seed(0)
    spec = ActionSpec()
    space = gym.spaces.Dict(
        {
            "ego": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32),
            "agents": gym.spaces.Box(-np.inf, np.inf, (8, 8), np.float32),
            "agents_mask": gym.spaces.Box(0, 1, (8,), np.float32),
        }
    )
    model = ActorCritic(space, spec)
    obs = {"ego": torch.randn(32, 7), "agents": torch.randn(32, 8, 8), "agents_mask": torch.zeros(32, 8)}
    old = model.act(obs)
    adv = torch.randn(32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    new = model.evaluate_actions(obs, old.action)
    terms = ppo(new.log_prob, old.log_prob, adv, new_values=new.values, returns=old.values + adv, entropy=new.entropy)
    assert terms["losses/approx_kl"].item() == pytest.approx(0.0, abs=1e-6)
    assert terms["losses/clipfrac"].item() == 0.0
    aux = directional_aux_loss(
        new.logits_long, new.logits_lat, old.action, adv, torch.rand(32, 5) > 0.5, weights=(0.1, 0.1, 0.1, 0.1, 0.1)
    )
    loss = terms["loss"] + aux["loss"]
    assert finite_or_skip(terms) and finite_or_skip(loss)
    opt.zero_grad()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    # The step moved the policy in the advantage's direction: joint log-prob of positive-advantage actions rises.
    after = model.evaluate_actions(obs, old.action).log_prob
    gain = (after - old.log_prob)[adv > 0].mean() - (after - old.log_prob)[adv < 0].mean()
    assert gain.item() > 0


def test_finite_guard():
    assert finite_or_skip(torch.tensor(1.0))
    assert not finite_or_skip(torch.tensor(float("nan")))
    assert not finite_or_skip({"loss": torch.tensor(0.0), "losses/value_loss": torch.tensor(float("inf"))})
    guard = NonFiniteGuard()
    assert guard(torch.tensor([1.0, 2.0]))
    assert not guard(torch.tensor([1.0, float("nan")]))
    assert not guard({"loss": torch.tensor(float("-inf"))})
    assert guard.skipped == 2
