"""Gaussian clouds, SH, frames, cameras and scene composition, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sim.camera import PinholeCamera, make_rig
from sim.frames import EGO_R_CV, invert_rigid, is_rigid, pose_matrix, transform_points, wrap_angle
from sim.gaussians import GaussianCloud, covariances, quat_to_rotmat, rotmat_to_quat
from sim.scene import ActorTrack, Composite, Instance, Scene
from sim.sh import eval_sh, num_sh_bases, rotate_sh, sh_basis, sh_degree_from_bases


def cloud(n=50, degree=2, seed=0):
    rng = np.random.default_rng(seed)
    return GaussianCloud.create(
        rng.normal(size=(n, 3)),
        rng.normal(size=(n, 4)),
        np.exp(rng.normal(-2, 0.5, (n, 3))),
        rng.uniform(0.1, 0.9, n),
        rng.normal(size=(n, num_sh_bases(degree), 3)),
    )


def test_sh_degree_counts():
    assert [num_sh_bases(d) for d in range(4)] == [1, 4, 9, 16]
    assert sh_degree_from_bases(16) == 3
    with pytest.raises(ValueError):
        sh_degree_from_bases(5)


def test_sh_band0_and_band1_by_hand():
    # band 0: 0.5 + C0 * f; band 1 along +y: coefficient 1 has basis -C1 * y
    sh = torch.zeros(1, 4, 3)
    sh[0, 0] = torch.tensor([1.0, 0.0, -1.0])
    sh[0, 1] = torch.tensor([1.0, 1.0, 1.0])
    c = eval_sh(sh, torch.tensor([[0.0, 2.0, 0.0]]))
    c0, c1 = 0.28209479177387814, 0.4886025119029199
    assert c[0].tolist() == pytest.approx([0.5 + c0 - c1, max(0.0, 0.5 - c1), max(0.0, 0.5 - c0 - c1)], abs=1e-6)


def test_sh_basis_is_orthonormal():
    # Monte Carlo over the sphere: E[Y_i Y_j] * 4 pi = delta_ij
    g = torch.Generator().manual_seed(0)
    d = torch.nn.functional.normalize(torch.randn(400_000, 3, generator=g, dtype=torch.float64), dim=-1)
    Y = sh_basis(d, 3)
    gram = (Y.T @ Y) / d.shape[0] * 4 * math.pi
    assert torch.allclose(gram, torch.eye(16, dtype=torch.float64), atol=0.02)


def test_rotate_sh_keeps_colour_along_rotated_directions():
    sh = torch.randn(20, 16, 3, dtype=torch.float64)
    R = pose_matrix(0, 0, 0, 0.8)[:3, :3] @ np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]])  # yaw after a roll
    d = torch.randn(20, 3, dtype=torch.float64)
    before = eval_sh(sh, d)
    after = eval_sh(rotate_sh(sh, R), d @ torch.from_numpy(R).T)
    assert torch.allclose(before, after, atol=1e-10)


def test_quaternion_matrix_round_trip():
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        q = q if q[0] >= 0 else -q
        R = quat_to_rotmat(torch.tensor(q)).numpy()
        assert np.allclose(R @ R.T, np.eye(3), atol=1e-12)
        assert np.allclose(rotmat_to_quat(R), q, atol=1e-9)
    # 90 deg about z: x -> y
    R = quat_to_rotmat(torch.tensor([math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)], dtype=torch.float64))
    assert np.allclose(R.numpy() @ [1, 0, 0], [0, 1, 0], atol=1e-12)


def test_covariance_by_hand():
    # scales (1, 2, 3) rotated 90 deg about z: variances become (4, 1, 9)
    q = torch.tensor([[math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)]])
    cov = covariances(q, torch.tensor([[1.0, 2.0, 3.0]]))[0]
    assert torch.allclose(cov, torch.diag(torch.tensor([4.0, 1.0, 9.0])), atol=1e-5)


def test_create_validates_and_normalises():
    c = GaussianCloud.create([[0, 0, 0]], [[2, 0, 0, 0]], [[1, 1, 1]], [0.5], [[0.1, 0.2, 0.3]])
    assert c.quats.tolist() == [[1.0, 0.0, 0.0, 0.0]] and c.sh.shape == (1, 1, 3) and c.sh_degree == 0
    with pytest.raises(ValueError, match="opacities"):
        GaussianCloud(c.means, c.quats, c.scales, torch.zeros(2), c.sh)
    with pytest.raises(ValueError, match="float32"):
        GaussianCloud(c.means.double(), c.quats, c.scales, c.opacities, c.sh)
    with pytest.raises(ValueError, match="sh"):
        GaussianCloud(c.means, c.quats, c.scales, c.opacities, torch.zeros(1, 5, 3))


def test_cat_pads_sh_and_subset():
    a, b = cloud(10, 0, 1), cloud(5, 3, 2)
    c = GaussianCloud.cat([a, b])
    assert len(c) == 15 and c.sh_degree == 3
    assert torch.equal(c.sh[:10, 0], a.sh[:, 0]) and float(c.sh[:10, 1:].abs().max()) == 0.0
    assert torch.equal(c.subset(torch.arange(10, 15)).means, b.means)
    assert len(GaussianCloud.cat([])) == 0


def test_transform_moves_everything_consistently():
    c = cloud(30, 3, 3)
    T = pose_matrix(5.0, -2.0, 0.5, 1.1) @ np.block(
        [[np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]]), np.zeros((3, 1))], [np.zeros((1, 3)), np.ones((1, 1))]]
    )
    m = c.transform(T)
    assert np.allclose(m.means.numpy(), transform_points(T, c.means.numpy()), atol=1e-5)
    R = torch.tensor(T[:3, :3], dtype=torch.float32)
    assert torch.allclose(covariances(m.quats, m.scales), R @ covariances(c.quats, c.scales) @ R.T, atol=1e-5)
    # colour seen from a camera position: same before (asset frame) and after (world frame)
    cam_asset = np.array([3.0, 1.0, 2.0])
    cam_world = transform_points(T, cam_asset)
    before = eval_sh(c.sh, c.means - torch.tensor(cam_asset, dtype=torch.float32))
    after = eval_sh(m.sh, m.means - torch.tensor(cam_world, dtype=torch.float32))
    assert torch.allclose(before, after, atol=1e-4)
    with pytest.raises(ValueError, match="rigid"):
        c.transform(np.diag([2.0, 1.0, 1.0, 1.0]))


def test_frames():
    T = pose_matrix(1.0, 2.0, 0.0, math.pi / 2)
    assert np.allclose(transform_points(T, [1.0, 0.0, 0.0]), [1.0, 3.0, 0.0])
    assert np.allclose(invert_rigid(T) @ T, np.eye(4))
    assert is_rigid(T) and not is_rigid(np.diag([1, 1, 2, 1.0]))
    assert np.allclose(wrap_angle([3 * math.pi, -math.pi / 2]), [-math.pi, -math.pi / 2])
    # OpenCV axes written in the ego frame: x right = -y_ego, y down = -z_ego, z forward = +x_ego
    assert np.allclose(EGO_R_CV @ [0, 0, 1], [1, 0, 0]) and np.allclose(EGO_R_CV @ [1, 0, 0], [0, -1, 0])


def test_camera_projects_a_point_ahead_to_the_centre_and_left_to_the_left():
    rig = make_rig("front3", 128, 64)
    ego = pose_matrix(10.0, 5.0, 0.0, 0.3)
    vm = rig.viewmats(ego).numpy()
    K = rig.Ks().numpy()
    front = rig.names.index("front")
    cam = rig.cameras[front]
    # a point 20 m along the front camera's optical axis projects to the principal point
    p_ego = cam.ego_T_cam[:3, 3] + 20.0 * cam.ego_T_cam[:3, 2]
    p_world = transform_points(ego, p_ego)
    pc = vm[front, :3, :3] @ p_world + vm[front, :3, 3]
    uv = (K[front] @ pc)[:2] / pc[2]
    assert np.allclose(uv, [64.0, 32.0], atol=1e-3)
    # a point further to the ego's left lands left of centre
    p2 = transform_points(ego, p_ego + np.array([0.0, 3.0, 0.0]))
    pc2 = vm[front, :3, :3] @ p2 + vm[front, :3, 3]
    assert (K[front] @ pc2)[0] / pc2[2] < 64.0
    assert len(make_rig("surround6", 64, 32)) == 6
    with pytest.raises(ValueError, match="unknown camera rig"):
        make_rig("front7")
    with pytest.raises(ValueError):
        PinholeCamera.mounted("c", 0, 10, 60)


def test_scene_composes_actors_present_at_a_step():
    asset = cloud(8, 1, 4)
    poses = np.zeros((3, 4))
    poses[:, 0] = [0.0, 1.0, 2.0]
    scene = Scene(
        cloud(20, 0, 5),
        {"car": asset},
        {"a": ActorTrack("car", poses, np.array([True, True, False])), "b": ActorTrack("car", poses, np.ones(3, bool))},
    )
    assert len(scene.compose(0).instances) == 2 and len(scene.compose(2).instances) == 1
    comp = scene.compose(1)
    world = comp.to_cloud()
    assert len(world) == 20 + 16
    assert torch.allclose(world.means[20:28], asset.means + torch.tensor([1.0, 0.0, 0.0]), atol=1e-6)
    with pytest.raises(ValueError, match="asset"):
        Scene(cloud(2), {}, {"a": ActorTrack("bus", poses, np.ones(3, bool))})
    assert isinstance(comp, Composite) and isinstance(comp.instances[0], Instance)
