"""The lift encoder: where the grid's points land in the rig's images (against the pinhole model written out
by hand and the perception stage's visible cells), that a cell's features come from the pixels it projects to,
the frames of ``env.camera_history``, what ``freeze_cameras`` keeps, and the grid checks of the configs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.config import TrainConfig
from learner.perception.heads import PerceptionNet
from learner.perception.labels import BEVGrid, visible_cells
from policy.lift import LiftEncoder, earlier_points, grid_points, project, projections, rig_tensors
from policy.network import CAMERA_PARTS, ActorCritic, PolicyConfig, example_observation_space, random_obs
from scenarios.actions import ActionSpec
from sim.camera import make_rig
from sim.configs import from_dict

LIFT = PolicyConfig(camera_encoder="lift", embed_dim=32, hidden_dim=64)


def test_a_point_straight_ahead_lands_in_the_front_cameras_centre_column():
    rig = make_rig("front3", 128, 64)
    f = 0.5 * 128 / math.tan(math.radians(35.0))  # 70 degrees across 128 pixels
    # the front camera sits at (1.6, 0, 1.55) looking along +x, pitched 2 degrees down: a point ahead at its
    # height is in its centre column, f tan(2 deg) pixels above the centre row
    grid, valid = projections(rig, np.array([[11.6, 0.0, 1.55]]))
    assert valid[0, 0] and np.isclose(grid[0, 0, 0], 0.0, atol=1e-6)
    assert np.isclose(grid[0, 0, 1], -f * math.tan(math.radians(2.0)) / 32.0, atol=2e-3)
    # 1 m to the left at 10 m depth: u = cx - f * 1 / 10 pixels (x right in the image is -y in the ego frame)
    grid, _ = projections(rig, np.array([[11.6, 1.0, 1.55]]))
    assert np.isclose(grid[0, 0, 0], 2.0 * (64.0 - f * 0.1) / 128 - 1.0, atol=2e-3)
    # behind the rig: no camera sees it
    _, valid = projections(rig, np.array([[-5.0, 0.0, 0.5]]))
    assert not valid[:, 0].any()


def test_front4s_narrow_camera_sees_what_is_ahead_at_finer_scale_and_the_lift_averages_it_in():
    rig = make_rig("front4", 128, 64)
    assert rig.names == ("front", "front_left", "front_right", "front_narrow")
    narrow = rig.names.index("front_narrow")

    def u(fov_deg: float, pitch_deg: float, rel) -> float:
        """Image column of a point at rel (x forward, y left, z up) from a camera of that field of view and
        pitch, by hand: depth along the optical axis (pitched down), x right is -y."""
        f = 0.5 * 128 / math.tan(math.radians(fov_deg / 2))
        p = math.radians(pitch_deg)
        depth = rel[0] * math.cos(p) - rel[2] * math.sin(p)
        return 64.0 - f * rel[1] / depth

    # 30 m ahead of the front cameras at the narrow one's height, 1 m left: 2.6x the pixels off centre
    grid, valid = projections(rig, np.array([[31.6, 1.0, 1.6]]))
    assert valid[[0, narrow], 0].all() and not valid[1:3, 0].any()
    col = (grid[:, 0, 0] + 1.0) * 64.0  # grid_sample's coordinates back to pixels
    assert np.isclose(col[0], u(70.0, 2.0, (30.0, 1.0, 0.05)), atol=1e-3)
    assert np.isclose(col[narrow], u(30.0, 1.0, (30.0, 1.0, 0.0)), atol=1e-3)
    ratio = (64.0 - col[narrow]) / (64.0 - col[0])
    assert np.isclose(ratio, math.tan(math.radians(35)) / math.tan(math.radians(15)), rtol=2e-3)  # 2.61
    # 10 m left at 30 m is past the narrow camera's 15 deg half-angle (8.0 m there) but in the front one's
    _, valid = projections(rig, np.array([[31.6, 10.0, 1.6]]))
    assert valid[0, 0] and not valid[narrow, 0]
    # the lift averages the cameras that see a point: far ahead on the grid, front and front_narrow half each
    enc = LiftEncoder(4, 64, 128, PolicyConfig(camera_encoder="lift", lift_rig="front4", embed_dim=32))
    w = enc.weight[:, 0, 0]  # [C, G, G] at the lowest height
    g = enc.cells
    ahead = (g - 2, g // 2)  # the second row from the grid's far end, the middle column
    assert torch.allclose(w[:, ahead[0], ahead[1]], torch.tensor([0.5, 0.0, 0.0, 0.5]))
    assert torch.allclose(w.sum(0)[w.sum(0) > 0], torch.tensor(1.0))


def test_ground_points_seen_are_the_perception_stages_visible_cells():
    rig = make_rig("front3", 128, 64)
    g = BEVGrid(32, 40.0, 4.0)
    _, valid = projections(rig, grid_points(32, 40.0, 4.0, [0.0]))
    seen = valid.any(0).reshape(32, 32)
    vis = visible_cells(g, rig)
    # visible_cells asks only for the image's columns; the lift also for its rows (the ground beneath a
    # camera's lower edge is not in its image): every lifted cell is visible, and most visible ones lifted
    assert not (seen & ~vis).any() and seen.sum() >= 0.8 * vis.sum()


def test_the_earlier_points_by_hand():
    """The ego drove 10 m/s for 0.3 s: straight, a point now 1 m ahead was 4 m ahead then; turning left at
    0.5 rad/s (dθ = 0.15) it was at R(0.15) p + the chord 3 sinc(0.075) at angle 0.075 (written out here)."""
    p = torch.tensor([[1.0, 2.0, 0.5]])
    out = earlier_points(p, torch.tensor([[10.0, 0.0], [10.0, 0.5], [0.0, 0.0]]), 0.3)
    assert out.shape == (3, 1, 3)
    torch.testing.assert_close(out[0, 0], torch.tensor([4.0, 2.0, 0.5]))
    chord = 3.0 * math.sin(0.075) / 0.075
    x = math.cos(0.15) * 1.0 - math.sin(0.15) * 2.0 + chord * math.cos(0.075)
    y = math.sin(0.15) * 1.0 + math.cos(0.15) * 2.0 + chord * math.sin(0.075)
    torch.testing.assert_close(out[1, 0], torch.tensor([x, y, 0.5]))
    torch.testing.assert_close(out[2, 0], p[0])  # standing still: where it is


def test_the_per_sample_projection_is_the_rigs():
    """``project`` (torch, per sample) against ``projections`` (numpy) for the grid's points now and as they
    were under two different ego motions."""
    rig = make_rig("front3", 128, 64)
    pts = torch.from_numpy(grid_points(32, 40.0, 4.0, (0.25, 0.85, 1.45)).reshape(-1, 3).astype(np.float32))
    moved = earlier_points(pts, torch.tensor([[0.0, 0.0], [12.0, 0.0], [6.0, -0.4]]), 0.3)
    grid, ok = project(moved, *rig_tensors(rig))
    for b in range(3):
        want, seen = projections(rig, moved[b].double().numpy())
        assert np.array_equal(ok[b].numpy(), seen)
        np.testing.assert_allclose(grid[b].numpy(), want, atol=1e-5)


def test_aligned_frames_line_up_what_stands_still(tmp_path):
    """With lift_align_s the earlier frame is read where each point was. Standing still it is the plain lift;
    driving a rendered straight road at ~10 m/s, the road's pixels (the images themselves as the features)
    lifted from the frame of 0.3 s ago match now's far better aligned than at the same points, and best at the
    ego's own speed."""
    from envs.driving import DrivingEnv
    from scenarios import save
    from tests.envs.handmade import straight_scenario

    torch.manual_seed(0)
    cfg = PolicyConfig(camera_encoder="lift", lift_heights=(0.0,), embed_dim=32, lift_align_s=0.3)
    aligned = LiftEncoder(6, 64, 128, cfg)
    plain = LiftEncoder(6, 64, 128, PolicyConfig(camera_encoder="lift", lift_heights=(0.0,), embed_dim=32))
    plain.load_state_dict(aligned.state_dict())
    images = torch.randint(0, 256, (2, 6, 64, 128, 3), dtype=torch.uint8)
    still = torch.zeros(2, 4)
    torch.testing.assert_close(aligned.bev(images, still), plain.bev(images, still), atol=1e-5, rtol=1e-5)

    save(straight_scenario(tmp_path, sid="road", horizon=12, n_ground=4000), tmp_path / "road.json")
    env = DrivingEnv({"resolution": [128, 64], "camera_history": 3, "render_backend": "cpu"}, scenarios=str(tmp_path))
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(np.array([ActionSpec().center, 20]))
    env.close()
    ego = torch.from_numpy(obs["ego"])[None]
    assert 5.0 < float(ego[0, 0]) < 15.0  # driving
    cams = torch.from_numpy(obs["cameras"]).float().permute(0, 3, 1, 2)  # [2C, 3, H, W]: the pixels as features
    # the road between the kerb walls (at y = +-8, whose pixels are not at the ground points behind them)
    pts = grid_points(32, 40.0, 4.0, [0.0])[0]
    road = torch.from_numpy((np.abs(pts[..., 1]) < 6.5) & (pts[..., 0] < 30.0))

    def mismatch(motion: torch.Tensor) -> float:
        lifted = aligned._lift_aligned(cams, motion)[0].view(2, 3, 32, 32)  # [frame, channel, G, G]
        seen = road & (lifted[0].abs().sum(0) > 0) & (lifted[1].abs().sum(0) > 0)
        assert int(seen.sum()) > 100
        return float((lifted[0] - lifted[1]).abs().sum(0)[seen].mean())

    now = ego[:, :2]
    plain_err, err = mismatch(torch.zeros(1, 2)), mismatch(now)  # motion 0: both frames at the same points
    assert err < 0.6 * plain_err, (err, plain_err)
    assert err < mismatch(0.5 * now) and err < mismatch(1.5 * now)  # the ego's own motion lines them up best


@pytest.mark.parametrize("backbone", ["small", "deep"])
def test_a_cells_feature_comes_from_the_pixels_it_projects_to(backbone):
    """Bright pixels around one grid point's projection in the front camera light up that cell (and cells
    along its ray), never the cells behind the ego or ones no camera sees there; with either backbone (the
    deep one's features at 1/4 of the image, the small one's at 1/8)."""
    torch.manual_seed(0)
    cfg = PolicyConfig(camera_encoder="lift", lift_heights=(0.85,), embed_dim=32, lift_backbone=backbone)
    enc = LiftEncoder(3, 64, 128, cfg)
    feats = enc.backbone(torch.zeros(2, 3, 64, 128))
    assert feats.shape == ((2, 16, 16, 32) if backbone == "deep" else (2, 16, 8, 16))
    with torch.no_grad():  # a backbone that passes brightness through: every channel = mean of the pixels
        for m in enc.backbone.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.weight.fill_(1.0 / (m.weight[0].numel()))
                m.bias.zero_()
        enc.bev_net = torch.nn.Identity()  # bev() then returns the lifted grid itself
    i, j = 20, 16  # the cell 20 rows ahead (x = 21.6 m), in the middle column (y = 0.6 m)
    p = grid_points(32, 40.0, 4.0, [0.85])[0, i, j]
    grid, valid = projections(make_rig("front3", 128, 64), p[None])
    assert valid[0, 0]
    u, v = (grid[0, 0] + 1.0) * np.array([128, 64]) / 2.0
    img = torch.zeros(1, 3, 64, 128, 3, dtype=torch.uint8)
    img[0, 0, int(v) - 8 : int(v) + 8, int(u) - 8 : int(u) + 8] = 255
    dark = torch.zeros_like(img)
    with torch.no_grad():
        diff = (enc.bev(img)[0].mean(0) - enc.bev(dark)[0].mean(0)).numpy()  # [G, G]
    assert diff[i, j] > 0.1
    assert diff[:4].max() <= 1e-6  # behind the rear axle: nothing


@pytest.mark.parametrize(("dilation", "reach"), [((1, 1), 2), ((2, 4), 6), ((3, 1), 4)])
def test_the_grid_cnns_dilation_sets_how_far_a_cell_sees(dilation, reach):
    """The grid CNN (conv 1x1, then two 3x3 convolutions dilated d1 and d2) makes a cell's feature depend on the
    lifted grid up to d1 + d2 cells away, no further: the gradient of one cell's output reaches exactly that
    far (by hand: each 3x3 convolution with dilation d reaches d cells)."""
    torch.manual_seed(0)
    cfg = PolicyConfig(camera_encoder="lift", lift_heights=(0.85,), embed_dim=32, lift_bev_dilation=dilation)
    enc = LiftEncoder(3, 64, 128, cfg)
    c_in = enc.bev_net[0][0].in_channels
    x = torch.randn(1, c_in, 32, 32, requires_grad=True)
    enc.bev_net(x)[0, :, 16, 16].sum().backward()
    rows, cols = np.nonzero(x.grad.abs().sum(1)[0].numpy())
    assert max(np.abs(rows - 16).max(), np.abs(cols - 16).max()) == reach
    if dilation == (2, 4):  # the taps land on even offsets only
        assert np.all((rows - 16) % 2 == 0) and np.all((cols - 16) % 2 == 0)
    for bad in ((0, 1), (1, 17), (1, 2, 3)):
        with pytest.raises(ValueError, match="lift_bev_dilation: expected two integers in"):
            PolicyConfig(camera_encoder="lift", lift_bev_dilation=bad)


def test_two_frames_and_the_frozen_part():
    space = example_observation_space(6, 64, 128, CAMERA_PARTS)  # front3, now and k steps earlier
    net = ActorCritic(space, ActionSpec(), LIFT)
    enc = net.encoders["cameras"]
    assert isinstance(enc, LiftEncoder) and enc.frames == 2 and enc.cameras == 3
    obs = {k: torch.as_tensor(np.asarray(v.sample()))[None] for k, v in space.spaces.items()}
    out = net(obs)
    assert out.action.shape == (1, 2)
    frozen = net.freeze_cameras()
    assert frozen == sum(p.numel() for p in enc.perceptual()) > 0
    assert all(p.requires_grad for p in enc.reduce.parameters())  # the policy still learns to read the grid
    with pytest.raises(ValueError, match="lift_rig"):
        ActorCritic(example_observation_space(4, 64, 128, CAMERA_PARTS), ActionSpec(), LIFT)
    with pytest.raises(ValueError, match="lift_backbone: expected one of small, deep"):
        PolicyConfig(camera_encoder="lift", lift_backbone="huge")


def test_perception_heads_read_the_lifted_grid_and_the_grids_must_agree():
    net = PerceptionNet(3, 64, 128, LIFT, 32)
    out = net(torch.zeros(2, 3, 64, 128, 3, dtype=torch.uint8))
    assert out.shape == (2, 5, 32, 32)
    with pytest.raises(ValueError, match="bev_cells"):
        PerceptionNet(3, 64, 128, LIFT, 16)
    follows = from_dict(
        TrainConfig, {"policy": {"camera_encoder": "lift"}, "perception": {"range_m": 30.0, "cells": 16}}
    )
    assert (follows.policy.bev_cells, follows.policy.bev_range_m) == (16, 30.0)  # the lift's grid is perception's
    with pytest.raises(ValueError, match="perception grid"):
        from_dict(TrainConfig, {"policy": {"camera_encoder": "lift", "bev_cells": 16}, "perception": {"cells": 32}})
    with pytest.raises(ValueError, match="camera_encoder"):
        PolicyConfig(camera_encoder="depth")
    # the alignment's gap is the frames' (training's env.camera_history=3 steps of 0.1 s)
    assert from_dict(TrainConfig, {"policy": {"lift_align_s": 0.3}}).policy.lift_align_s == 0.3
    with pytest.raises(ValueError, match=r"lift_align_s=0.2 must be the gap .* = 0.3 s"):
        from_dict(TrainConfig, {"policy": {"lift_align_s": 0.2}})
    with pytest.raises(ValueError, match=r"lift_align_s=0.3 must be the gap .* = 0 s"):
        from_dict(TrainConfig, {"policy": {"lift_align_s": 0.3}, "env": {"camera_history": 0}})
    with pytest.raises(ValueError, match="lift_align_s: expected seconds"):
        PolicyConfig(camera_encoder="lift", lift_align_s=-0.1)


def test_a_frozen_lift_grid_computed_once_gives_the_same_outputs_and_gradients():
    """The learner computes a frozen lift's BEV grid once per batch (obs[BEV_KEY]); the network's outputs
    and the gradients of what still trains are those of the full forward."""
    from policy.network import BEV_KEY

    torch.manual_seed(0)
    space = example_observation_space(6, 32, 64, CAMERA_PARTS)  # front3, now and one step earlier
    net = ActorCritic(space, ActionSpec(), PolicyConfig(camera_encoder="lift", embed_dim=32, bev_cells=8))
    obs = random_obs(space, 5, generator=torch.Generator().manual_seed(1))
    assert net.frozen_grid(obs) is None  # perception still training: nothing may be cached
    net.freeze_cameras()
    grid = net.frozen_grid(obs, chunk=2)  # in chunks, as the learner does on a big batch
    assert grid is not None and grid.shape == (5, 16, 8, 8) and not grid.requires_grad
    actions = torch.zeros(5, 2, dtype=torch.int64)
    outs = []
    for o in (obs, {**obs, BEV_KEY: grid}):
        net.zero_grad()
        out = net.evaluate_actions(o, actions)
        (out.log_prob.sum() + out.values.sum()).backward()
        reduce_grad = net.encoders["cameras"].reduce[-2].weight.grad.clone()
        outs.append((out.log_prob.detach(), out.values.detach(), reduce_grad))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_imitation_data_keeps_a_frozen_lifts_grid_in_place_of_its_images():
    """learner.dagger.as_grids: the images of imitation data replaced by the frozen lift's grid (float16, computed
    once); the policy's logits from it are those from the images to float16's rounding, and DAgger's rounds that
    held images are converted (written anew), those that hold grids kept as they are."""
    from learner.dagger import GRID_DTYPE, Labelled, as_grids
    from learner.learner import Demos
    from policy.network import BEV_KEY

    torch.manual_seed(0)
    space = example_observation_space(6, 32, 64, CAMERA_PARTS)
    net = ActorCritic(space, ActionSpec(), PolicyConfig(camera_encoder="lift", embed_dim=32, bev_cells=8))
    obs = random_obs(space, 5, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([[0, 1], [2, 3], [1, 0], [0, 0], [3, 2]])
    d = Demos(obs, labels)
    assert as_grids(d, net) is d  # perception still training: its grid would change
    net.freeze_cameras()
    g = as_grids(d, net)
    assert "cameras" not in g.obs and set(g.obs) == set(d.obs) - {"cameras"} | {BEV_KEY}
    assert g.obs[BEV_KEY].dtype == GRID_DTYPE and g.obs[BEV_KEY].shape == (5, 16, 8, 8)
    assert torch.equal(g.labels, labels) and all(g.obs[k] is d.obs[k] for k in d.obs if k != "cameras")
    full = net.frozen_grid(obs)
    assert full is not None
    # float16 keeps 11 significant bits: each value within 2^-11 of itself (and of the smallest normal near 0)
    assert torch.all((g.obs[BEV_KEY].float() - full).abs() <= full.abs() * 2.0**-11 + 6.2e-5)
    with torch.no_grad():
        for a, b in zip(net.logits(d.obs, labels[:, 1]), net.logits(g.obs, labels[:, 1]), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)
    assert as_grids(g, net) is g  # no images left
    lab = Labelled([d])
    lab.files()  # serialised once: the next checkpoint would link it
    kept = lab._reuse[0]
    lab.convert(lambda r: as_grids(r, net))
    assert "cameras" not in lab.rounds[0].obs and lab._reuse[0] is None and kept is not None
    lab.files()
    kept = lab._reuse[0]
    lab.convert(lambda r: as_grids(r, net))
    assert lab._reuse[0] is kept  # grids already: the file stays as written
