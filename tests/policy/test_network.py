"""ActorCritic: shapes, exact feasibility masking, log-probs vs torch.distributions, obs subsets, empty token
sets, in-module normalisation, state_dict round trip, export."""

from __future__ import annotations

import itertools
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from policy.network import MASK_VALUE, ActorCritic, ExportPolicy, PolicyConfig, main
from scenarios.actions import ActionSpec, is_feasible

SPEC = ActionSpec()
PARTS = ("cameras", "ego", "route", "limits", "agents", "map")


def make_space(parts=PARTS, n_cams=3, height=64, width=128, masks=True) -> gym.spaces.Dict:
    """The env spec's observation space, built here independently of the policy package."""
    inf, f32 = np.inf, np.float32
    d = {}
    if "cameras" in parts:
        d["cameras"] = gym.spaces.Box(0, 255, (n_cams, height, width, 3), np.uint8)
    if "ego" in parts:
        d["ego"] = gym.spaces.Box(-inf, inf, (6,), f32)
    if "route" in parts:
        d["route"] = gym.spaces.Box(-inf, inf, (10, 2), f32)
    if "limits" in parts:
        d["limits"] = gym.spaces.Box(0, inf, (3,), f32)
    if "agents" in parts:
        d["agents"] = gym.spaces.Box(-inf, inf, (8, 8), f32)
        if masks:
            d["agents_mask"] = gym.spaces.Box(0, 1, (8,), f32)
    if "map" in parts:
        d["map"] = gym.spaces.Box(-inf, inf, (64, 4), f32)
        if masks:
            d["map_mask"] = gym.spaces.Box(0, 1, (64,), f32)
    return gym.spaces.Dict(d)


def make_obs(space: gym.spaces.Dict, batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    obs = {}
    for key, s in space.spaces.items():
        shape = (batch, *s.shape)
        if key == "cameras":
            obs[key] = torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        elif key.endswith("_mask"):
            obs[key] = (torch.rand(shape, generator=g) > 0.5).float()
        else:
            obs[key] = torch.randn(shape, generator=g) * 3.0 + 1.0
    return obs


SMALL = make_space(n_cams=2, height=32, width=48)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Small models gain nothing from intra-op threads, and on a loaded 2-core box they make each op wait for a
    busy core (100 tiny optimizer steps: 0.5 s on one thread, 26 s on two). Restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def net() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(SMALL, SPEC)


def test_output_shapes_default_front3():
    torch.manual_seed(0)
    space = make_space()
    model = ActorCritic(space, SPEC, PolicyConfig())
    out = model(make_obs(space, 5))
    assert out.action.shape == (5, 2) and out.action.dtype == torch.int64
    assert out.log_prob.shape == (5, 2) and out.entropy.shape == (5, 2)
    assert out.values.shape == (5, 2)
    assert out.logits_long.shape == (5, 61) and out.logits_lat.shape == (5, 61)
    assert all(torch.isfinite(t).all() for t in out)


def test_sampled_actions_are_always_feasible_even_when_logits_prefer_infeasible():
    space = make_space(("ego", "route"))  # the observation does not matter here, the heads do
    obs = make_obs(space, 512, seed=1)
    model = ActorCritic(space, SPEC)
    with torch.no_grad():
        # Push the longitudinal head to the narrow-band bins 0..3 and the lateral head to the outermost bins.
        model.long_head.bias.zero_()[:4] = 20.0
        model.lat_out.bias.zero_()[[0, 1, 59, 60]] = 20.0
    seen_long = set()
    for _ in range(20):
        a = model.act(obs).action.numpy()
        assert is_feasible(a[:, 0], a[:, 1], SPEC).all()
        seen_long |= set(a[:, 1].tolist())
    assert seen_long <= {0, 1, 2, 3} and len(seen_long) == 4
    a = model.act(obs, deterministic=True).action.numpy()
    assert is_feasible(a[:, 0], a[:, 1], SPEC).all()


def test_log_prob_and_entropy_match_torch_distributions(net):
    obs = make_obs(SMALL, 64, seed=2)
    out = net(obs)
    a_lat, a_long = out.action[:, 0], out.action[:, 1]
    feasible = torch.as_tensor(SPEC.feasibility())[a_long]  # [B, n_lat], from the spec, not the network
    assert (out.logits_lat[~feasible] == MASK_VALUE).all()
    assert (out.logits_lat[feasible] > MASK_VALUE / 2).all()
    # Reference: -inf masking, torch.distributions.
    d_long = Categorical(logits=out.logits_long)
    d_lat = Categorical(logits=out.logits_lat.masked_fill(~feasible, -float("inf")))
    torch.testing.assert_close(out.log_prob[:, 1], d_long.log_prob(a_long))
    torch.testing.assert_close(out.log_prob[:, 0], d_lat.log_prob(a_lat))
    torch.testing.assert_close(out.entropy[:, 1], d_long.entropy())
    torch.testing.assert_close(out.entropy[:, 0], d_lat.entropy())
    # Evaluating the sampled actions gives the same numbers.
    ev = net.evaluate_actions(obs, out.action)
    torch.testing.assert_close(ev.log_prob, out.log_prob)
    torch.testing.assert_close(ev.values, out.values)
    assert torch.equal(ev.action, out.action)


def test_sampler_draws_from_the_softmax():
    logits = torch.tensor([0.0, 1.0, -1.0, 2.0, MASK_VALUE])
    torch.manual_seed(3)
    draws = ActorCritic._sample(logits.expand(200_000, -1))
    freq = torch.bincount(draws, minlength=5).double() / draws.numel()
    torch.testing.assert_close(freq, torch.softmax(logits.double(), 0), atol=5e-3, rtol=0)
    assert freq[4] == 0


def test_deterministic_is_argmax_long_then_masked_argmax_lat(net):
    obs = make_obs(SMALL, 32, seed=4)
    out = net.act(obs, deterministic=True)
    assert torch.equal(out.action[:, 1], out.logits_long.argmax(-1))
    feasible = torch.as_tensor(SPEC.feasibility())[out.action[:, 1]]
    ref_lat = out.logits_lat.masked_fill(~feasible, -float("inf")).argmax(-1)
    assert torch.equal(out.action[:, 0], ref_lat)
    logits_long, logits_lat = net.logits(obs)  # conditioned on argmax long by default
    torch.testing.assert_close(logits_long, out.logits_long)
    torch.testing.assert_close(logits_lat, out.logits_lat)
    # Conditioning matters: the lateral logits change with the longitudinal bin.
    _, lat_other = net.logits(obs, long_idx=torch.full((32,), 40))
    assert not torch.allclose(lat_other, logits_lat)


def test_any_subset_of_observation_parts():
    torch.manual_seed(0)
    cfg = PolicyConfig(cnn_channels=(8, 8), cnn_kernels=(3, 3), embed_dim=16, hidden_dim=32)
    for r in range(1, len(PARTS) + 1):
        for parts in itertools.combinations(PARTS, r):
            space = make_space(parts, n_cams=2, height=16, width=24)
            model = ActorCritic(space, SPEC, cfg)
            out = model(make_obs(space, 3))
            assert out.values.shape == (3, 2), parts
            assert torch.isfinite(out.log_prob).all(), parts
    with pytest.raises(ValueError, match="none of"):
        ActorCritic(gym.spaces.Dict({}), SPEC)
    with pytest.raises(ValueError, match="unknown observation keys"):
        ActorCritic(gym.spaces.Dict({"lidar": gym.spaces.Box(0, 1, (3,))}), SPEC)


@pytest.mark.parametrize("pool", ["max", "mean", "attention"])
def test_empty_token_sets_no_nan_and_absent_tokens_ignored(pool):
    torch.manual_seed(0)
    space = make_space(("ego", "agents", "map"))
    model = ActorCritic(space, SPEC, PolicyConfig(token_pool=pool))
    obs = make_obs(space, 6)
    obs["agents_mask"][:] = 0.0
    obs["map_mask"][:3] = 0.0
    out = model.evaluate_actions(obs, torch.tensor([[30, 0]] * 6))
    (out.log_prob.sum() + out.values.sum() + out.entropy.sum()).backward()
    assert all(torch.isfinite(t).all() for t in out)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # Whatever sits in absent token slots does not change the output.
    garbage = dict(obs)
    garbage["agents"] = torch.randn_like(obs["agents"]) * 1e3
    garbage["map"] = torch.where(obs["map_mask"][..., None] > 0, obs["map"], torch.full_like(obs["map"], 7e4))
    with torch.no_grad():
        a, b = model(obs, action=out.action), model(garbage, action=out.action)
    torch.testing.assert_close(a.values, b.values)
    torch.testing.assert_close(a.logits_long, b.logits_long)
    # Token sets are sets: permuting the tokens (with their mask) changes nothing.
    perm = torch.randperm(64)
    permuted = dict(obs, map=obs["map"][:, perm], map_mask=obs["map_mask"][:, perm])
    with torch.no_grad():
        c = model(permuted, action=out.action)
    torch.testing.assert_close(a.values, c.values, atol=1e-5, rtol=1e-5)


def test_missing_mask_key_means_all_tokens_present():
    torch.manual_seed(0)
    space = make_space(("agents",), masks=False)
    model = ActorCritic(space, SPEC)
    obs = make_obs(space, 2)
    with torch.no_grad():
        a = model(obs, action=torch.tensor([[30, 5], [30, 5]]))
        b = model(dict(obs, agents_mask=torch.ones(2, 8)), action=torch.tensor([[30, 5], [30, 5]]))
    torch.testing.assert_close(a.values, b.values)


def test_normalisation_buffers_saved_and_frozen_unless_updated():
    torch.manual_seed(0)
    model = ActorCritic(SMALL, SPEC)
    keys = model.state_dict().keys()
    for part in ("ego", "route", "limits", "agents", "map"):
        for buf in ("mean", "var", "count"):
            assert f"norms.{part}.{buf}" in keys
    assert "encoders.cameras.img_mean" in keys and "encoders.cameras.img_std" in keys
    assert "feasible" not in keys  # derived from the ActionSpec

    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    obs = make_obs(SMALL, 16)
    model(obs)
    model.evaluate_actions(obs, model.act(obs).action)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed without update_obs_stats"

    # Two updates == statistics of the concatenated data; [T, B, ...] leading dims are fine.
    obs2 = make_obs(SMALL, 24, seed=9)
    model.update_obs_stats(obs)
    model.update_obs_stats({k: v.reshape(4, 6, *v.shape[1:]) for k, v in obs2.items()})
    ego = torch.cat([obs["ego"], obs2["ego"]]).double()
    torch.testing.assert_close(model.norms["ego"].mean.double(), ego.mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.norms["ego"].var.double(), ego.var(0, unbiased=False), atol=1e-4, rtol=1e-4)
    assert model.norms["ego"].count.item() == 40
    # Token statistics use only present tokens.
    agents = torch.cat([obs["agents"], obs2["agents"]])
    present = torch.cat([obs["agents_mask"], obs2["agents_mask"]]) > 0.5
    torch.testing.assert_close(model.norms["agents"].mean, agents[present].mean(0), atol=1e-5, rtol=1e-5)
    assert model.norms["agents"].count.item() == present.sum().item()
    # Normalised ego of the data is ~zero-mean, unit-variance.
    normed = model.norms["ego"](ego.float())
    torch.testing.assert_close(normed.mean(0), torch.zeros(6), atol=1e-4, rtol=0)

    # A fresh module loading the state_dict reproduces the outputs exactly (self-contained policy).
    clone = ActorCritic(SMALL, SPEC)
    clone.load_state_dict(model.state_dict())
    a = model.act(obs, deterministic=True)
    b = clone.act(obs, deterministic=True)
    assert torch.equal(a.action, b.action)
    torch.testing.assert_close(a.values, b.values)


def test_non_finite_rows_are_left_out_of_the_statistics():
    torch.manual_seed(0)
    model = ActorCritic(SMALL, SPEC)
    obs = make_obs(SMALL, 8)
    bad = {k: v.clone() for k, v in obs.items()}
    bad["ego"][2, 3] = float("nan")
    bad["ego"][5, 0] = float("inf")
    model.update_obs_stats(bad)
    good = torch.cat([obs["ego"][:2], obs["ego"][3:5], obs["ego"][6:]]).double()
    assert model.norms["ego"].count.item() == 6
    torch.testing.assert_close(model.norms["ego"].mean.double(), good.mean(0), atol=1e-5, rtol=1e-5)
    assert all(torch.isfinite(b).all() for b in model.norms["ego"].buffers())
    # A batch with nothing finite changes nothing.
    before = {k: v.clone() for k, v in model.norms["ego"].state_dict().items()}
    model.update_obs_stats(dict(obs, ego=torch.full_like(obs["ego"], float("nan"))))
    assert all(torch.equal(v, before[k]) for k, v in model.norms["ego"].state_dict().items())


def test_bad_inputs_give_actionable_errors(net):
    obs = make_obs(SMALL, 2)
    with pytest.raises(TypeError, match="uint8"):
        net(dict(obs, cameras=obs["cameras"].float()))
    with pytest.raises(KeyError, match="route"):
        net({k: v for k, v in obs.items() if k != "route"})
    with pytest.raises(ValueError, match=r"\[B, 2\]"):
        net(obs, action=torch.zeros(2, dtype=torch.long))


def test_export_wrapper_matches_eager_and_exports(net):
    net.eval()
    obs = make_obs(SMALL, 4, seed=5)
    wrapper = ExportPolicy(net)
    action, logits_long, lat_all, values = wrapper(obs)
    ref = net.act(obs, deterministic=True)
    assert torch.equal(action, ref.action)
    torch.testing.assert_close(values, ref.values)
    torch.testing.assert_close(logits_long, ref.logits_long)
    assert lat_all.shape == (4, 61, 61)
    # Every row of lat_all is the conditional head for that longitudinal bin.
    for j in (0, 3, 30):
        _, row = net.logits(obs, long_idx=torch.full((4,), j))
        torch.testing.assert_close(lat_all[:, j], row)
    batch = torch.export.Dim("batch", min=1, max=256)
    exported = torch.export.export(wrapper, (obs,), dynamic_shapes=({k: {0: batch} for k in obs},))
    obs7 = make_obs(SMALL, 7, seed=6)
    got, want = exported.module()(obs7), wrapper(obs7)
    assert torch.equal(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        torch.testing.assert_close(g, w)


def test_bench_prints_json(capsys):
    main(["--bench", "--batches", "2", "--repeats", "1"])
    report = json.loads(capsys.readouterr().out)
    assert report["parameters"] > 0 and "batch_2" in report


def test_built_from_the_envs_spec_uses_its_mask():
    spec = ActionSpec(n_lat=61, lat_max=0.75, n_long=61, long_max=30.0)  # a range where rules differ
    space = make_space(("ego",))
    model = ActorCritic(space, spec)
    with torch.no_grad():
        model.long_head.bias.zero_()[:4] = 20.0
        model.lat_out.bias.zero_()[[0, 60]] = 20.0
    obs = make_obs(space, 512)
    a = model.act(obs).action.numpy()
    assert spec.feasibility()[a[:, 1], a[:, 0]].all()
    assert torch.equal(model.feasible, torch.as_tensor(spec.feasibility()))


def _grads(net: ActorCritic, loss: torch.Tensor) -> dict[str, float]:
    net.zero_grad(set_to_none=True)
    loss.backward()
    return {k: float(p.grad.abs().sum()) if p.grad is not None else 0.0 for k, p in net.named_parameters()}


def _moved(grads: dict[str, float], prefix: str) -> bool:
    return any(v > 0 for k, v in grads.items() if k.startswith(prefix))


@pytest.mark.parametrize("critic", ["separate", "detached", "shared"])
def test_the_value_loss_reaches_the_policy_trunk_only_with_a_shared_critic(critic):
    """An untrained critic's first losses must not move a trunk that imitation trained ('separate', 'detached');
    'shared' is the old coupling, kept for comparison. The policy's loss never moves a separate critic."""
    torch.manual_seed(0)
    net = ActorCritic(SMALL, SPEC, PolicyConfig(critic=critic))
    obs = make_obs(SMALL, 4)
    out = net(obs)
    g = _grads(net, out.values.sum())
    assert _moved(g, "value_head")
    assert _moved(g, "trunk") == (critic == "shared")
    assert _moved(g, "encoders.cameras") == (critic == "shared")  # camera features reach other critics detached
    assert _moved(g, "critic_trunk") == (critic == "separate")
    g = _grads(net, net(obs).log_prob.sum())
    assert _moved(g, "trunk") and not _moved(g, "critic_") and not _moved(g, "value_head")
    # the export wrapper gives the same values
    ex = ExportPolicy(net.eval())
    torch.testing.assert_close(ex(obs)[3].float(), net.values(obs))


def test_critic_setting_is_checked():
    with pytest.raises(ValueError, match=r"PolicyConfig\.critic"):
        PolicyConfig(critic="twin")


def test_a_checkpoint_from_before_the_critic_setting_loads_with_the_critic_its_weights_hold():
    from policy.sources import _build_network

    old = ActorCritic(SMALL, SPEC, PolicyConfig(critic="shared")).state_dict()  # no critic_* weights
    net = _build_network(SMALL, SPEC, {"embed_dim": 128}, "old checkpoint", old)  # its config has no 'critic'
    assert net.critic == "shared"
    net.load_state_dict(old)
    new = ActorCritic(SMALL, SPEC, PolicyConfig()).state_dict()
    assert _build_network(SMALL, SPEC, {}, "new checkpoint", new).critic == "separate"


def test_limits_is_a_running_normalised_vector_part_the_heads_read():
    """The speed limits [3] (now, next, metres to the change): their own running statistics, and the logits
    and values move when only they do."""
    torch.manual_seed(0)
    space = make_space(("ego", "limits"))
    model = ActorCritic(space, SPEC).eval()
    assert model.parts == ("ego", "limits") and tuple(model.norms["limits"].mean.shape) == (3,)
    obs = make_obs(space, 4)
    obs["limits"] = torch.tensor([[13.9, 13.9, 100.0], [13.9, 8.3, 40.0], [8.3, 13.9, 5.0], [22.2, 22.2, 100.0]])
    model.update_obs_stats(obs)
    lim = obs["limits"].double()
    torch.testing.assert_close(model.norms["limits"].mean.double(), lim.mean(0), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        a = model.logits(obs, long_idx=torch.full((4,), 20))
        b = model.logits(dict(obs, limits=obs["limits"].flip(0)), long_idx=torch.full((4,), 20))
        va, vb = model.values(obs), model.values(dict(obs, limits=obs["limits"].flip(0)))
    assert not torch.allclose(a[0], b[0]) and not torch.allclose(va, vb)
    with pytest.raises(KeyError, match="limits"):
        model({k: v for k, v in obs.items() if k != "limits"})
