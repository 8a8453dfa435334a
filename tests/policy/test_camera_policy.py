"""The camera policy: its actions depend on its images, it reads no privileged key, its perception encoder
can be frozen; a policy refuses an env of the other observation mode (checkpoint, package, evaluation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs.driving import DrivingEnv
from envs.observation import PRIVILEGED_KEYS
from policy.network import CAMERA_PARTS, ActorCritic, PolicyConfig, example_observation_space, random_obs
from scenarios.actions import ActionSpec
from tests.envs.handmade import straight_scenario

SMALL = PolicyConfig(cnn_channels=(8, 16), cnn_kernels=(3, 3), embed_dim=32, hidden_dim=64)


@pytest.fixture(scope="module")
def camera_batch(tmp_path_factory):
    """A real camera-mode env's space and 6 observations of one drive."""
    sc = straight_scenario(tmp_path_factory.mktemp("cam"), sid="lead", horizon=12, lead_gap=8.0)
    env = DrivingEnv({"resolution": (32, 16), "render_backend": "cpu"}, scenarios=[sc])
    obs, _ = env.reset(seed=0)
    frames = [obs]
    for k in range(5):
        obs, *_ = env.step([30 + (k % 3) - 1, 22])
        frames.append(obs)
    space = env.observation_space
    env.close()
    return space, {k: torch.from_numpy(np.stack([f[k] for f in frames])) for k in space.spaces}


def _net(space, seed=0) -> ActorCritic:
    torch.manual_seed(seed)
    net = ActorCritic(space, ActionSpec(), SMALL)
    with torch.no_grad():  # spread the logits out (a fresh head is nearly uniform)
        net.long_head.weight.mul_(300.0)
        net.lat_out.weight.mul_(300.0)
    return net.eval()


def _dist(net, obs):
    with torch.no_grad():
        long_logits, lat_logits = net.logits(obs, long_idx=torch.full((len(obs["ego"]),), 22))
    return torch.softmax(long_logits, -1), torch.softmax(lat_logits, -1)


def test_the_camera_policy_reads_no_privileged_key(camera_batch):
    space, obs = camera_batch
    assert not set(PRIVILEGED_KEYS) & set(space.spaces) and tuple(space["ego"].shape) == (4,)
    net = _net(space)
    assert set(net.parts) == {"cameras", "ego", "navigation", "command", "limits"}
    assert not {k for k in net.state_dict() if any(f".{p}." in k for p in PRIVILEGED_KEYS)}
    # privileged keys beside the camera observation change nothing: the network never reads them
    garbage = {k: v for k, v in random_obs(example_observation_space(3, 16, 32), 6).items() if k in PRIVILEGED_KEYS}
    base, extra = _dist(net, obs), _dist(net, {**obs, **garbage})
    for a, b in zip(base, extra):
        assert torch.equal(a, b)


def test_the_camera_policys_action_distribution_changes_with_its_images(camera_batch):
    """Fixed batch, fixed seed: other images (flat grey, or the batch's frames in another order) move the
    action distribution; the same images give the same distribution."""
    _, obs = camera_batch
    net = _net(camera_batch[0])
    p_long, p_lat = _dist(net, obs)
    again = _dist(net, {k: v.clone() for k, v in obs.items()})
    assert torch.equal(again[0], p_long) and torch.equal(again[1], p_lat)
    grey = {**obs, "cameras": torch.full_like(obs["cameras"], 128)}
    rolled = {**obs, "cameras": obs["cameras"].roll(1, dims=0)}  # each row sees another frame
    for other in (grey, rolled):
        q_long, q_lat = _dist(net, other)
        # total variation distance per row: clearly apart for every observation of the batch
        tv = 0.5 * (q_long - p_long).abs().sum(-1)
        assert (tv > 1e-3).all(), tv
        assert (0.5 * (q_lat - p_lat).abs().sum(-1) > 1e-3).all()
    # ... and the other inputs alone do not explain it: with the images fixed, the distribution is fixed
    fixed = _dist(net, {**grey, "ego": obs["ego"].clone()})
    assert torch.equal(fixed[0], _dist(net, grey)[0])


def test_freeze_cameras_keeps_the_encoder_and_trains_the_rest(camera_batch):
    space, obs = camera_batch
    net = _net(space)
    n = net.freeze_cameras()
    assert n == sum(p.numel() for p in net.encoders["cameras"].parameters()) and n > 0
    before = {k: v.clone() for k, v in net.state_dict().items()}
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    net.train()
    for _ in range(3):
        out = net.evaluate_actions(obs, torch.tensor([[30, 22]] * 6))
        loss = -(out.log_prob.sum() + out.values.sum())
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is None for p in net.encoders["cameras"].parameters())
        opt.step()
    after = net.state_dict()
    cams = [k for k in before if k.startswith("encoders.cameras.")]
    assert cams and all(torch.equal(before[k], after[k]) for k in cams)
    assert not torch.equal(before["trunk.1.weight"], after["trunk.1.weight"])
    # a network without cameras has nothing to freeze
    assert (
        ActorCritic(example_observation_space(parts=("ego", "navigation", "command")), ActionSpec()).freeze_cameras()
        == 0
    )


def test_camera_parts_example_space_fits_the_env(camera_batch):
    space, _ = camera_batch
    ex = example_observation_space(3, 16, 32, parts=CAMERA_PARTS)
    assert {k: v.shape for k, v in ex.spaces.items()} == {k: v.shape for k, v in space.spaces.items()}
