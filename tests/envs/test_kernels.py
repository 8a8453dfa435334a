"""The numba step kernels against their plain references (``sim.geometry``, ``envs.observation``),
and the vector env's info merge against gymnasium's own ``_add_info``."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import VectorEnv

from envs.kernels import first_overlap, nearest_features, nearest_points, path_points, project_path, route_features
from envs.observation import agent_features, map_features, to_ego
from envs.vector import merge_infos
from sim.geometry import boxes_overlap, interpolate_polyline, polyline_arclength, project_to_polyline

YES = np.ones(1, dtype=bool)


def random_path(rng, m=40):
    heading = np.cumsum(rng.normal(0, 0.15, m))
    step = rng.uniform(0.3, 2.0, m)
    xy = np.cumsum(np.stack([step * np.cos(heading), step * np.sin(heading)], 1), 0)
    return xy + rng.normal(0, 50, 2)


@pytest.mark.parametrize("seed", range(5))
def test_project_path_matches_sim_geometry(seed):
    rng = np.random.default_rng(seed)
    path = random_path(rng)
    s_path = polyline_arclength(path)
    yaw = rng.uniform(-3, 3, len(path))
    dyaw = np.diff(yaw)
    z = rng.uniform(-1, 1, len(path))
    pts = path[rng.integers(0, len(path), 200)] + rng.normal(0, 3, (200, 2))
    pts[:5] = path[:5]  # on vertices
    pts[5] = path[0] - 10 * (path[1] - path[0])  # before the start
    s_ref, lat_ref, _ = project_to_polyline(pts, path)
    for p, s_r, l_r in zip(pts, s_ref, lat_ref):
        d, s, y, zz = project_path(p[0], p[1], path, s_path, yaw, dyaw, z)
        assert d == pytest.approx(abs(l_r), abs=1e-9)
        assert s == pytest.approx(s_r, abs=1e-9)
        j = min(np.searchsorted(s_path, s, side="right") - 1, len(path) - 2)
        u = (s - s_path[j]) / (s_path[j + 1] - s_path[j])
        assert y == pytest.approx(yaw[j] + u * dyaw[j], abs=1e-9)
        assert zz == pytest.approx(z[j] + u * (z[j + 1] - z[j]), abs=1e-9)


def test_path_points_and_route_match_sim_geometry():
    rng = np.random.default_rng(0)
    path = random_path(rng)
    s_path = polyline_arclength(path)
    s = np.concatenate([[-5.0, 0.0], rng.uniform(0, s_path[-1], 50), [s_path[-1], s_path[-1] + 12.0]])
    out = np.empty((len(s), 2))
    path_points(path, s_path, s, out)
    np.testing.assert_allclose(out, interpolate_polyline(path, s)[0], atol=1e-9)
    route = np.empty((10, 2))
    ego, yaw, s0 = np.array([3.0, -2.0]), 0.7, 17.0
    route_features(ego[0], ego[1], yaw, path, s_path, s0, 5.0, route)
    want = to_ego(interpolate_polyline(path, s0 + 5.0 * np.arange(1, 11))[0], ego, np.cos(yaw), np.sin(yaw))
    np.testing.assert_allclose(route, want, atol=1e-9)


def test_first_overlap_matches_boxes_overlap():
    rng = np.random.default_rng(0)
    n = 3000
    xy = rng.uniform(-6, 6, (n, 2))
    yaws = rng.uniform(-np.pi, np.pi, n)
    sizes = rng.uniform(0.5, 6, (n, 3))
    ref = boxes_overlap([0.3, -0.2], 0.4, [4.8, 2.0], xy, yaws, sizes[:, :2])
    got = np.array(
        [first_overlap(0.3, -0.2, 0.4, 4.8, 2.0, xy[i : i + 1], yaws[i : i + 1], sizes[i : i + 1], YES) == 0
         for i in range(n)]
    )  # fmt: skip
    assert 0.1 < ref.mean() < 0.9 and (got == ref).all()
    # first index, masks, touching boxes, nothing
    mask = np.ones(n, bool)
    assert first_overlap(0.3, -0.2, 0.4, 4.8, 2.0, xy, yaws, sizes, mask) == np.flatnonzero(ref)[0]
    mask[: np.flatnonzero(ref)[0] + 1] = False
    assert first_overlap(0.3, -0.2, 0.4, 4.8, 2.0, xy, yaws, sizes, mask) == np.flatnonzero(ref & mask)[0]
    touching = np.array([[4.0, 0.0]])  # [-2, 2] x [-1, 1] against [2, 6] x [-1, 1]: they touch at x = 2
    size = np.array([[4.0, 2.0]])
    assert first_overlap(0.0, 0.0, 0.0, 4.0, 2.0, touching, np.zeros(1), size, YES) == 0
    assert first_overlap(0.0, 0.0, 0.0, 4.0, 2.0, touching + 1e-9, np.zeros(1), size, YES) == -1
    none = (np.zeros((0, 2)), np.zeros(0), np.zeros((0, 3)), np.zeros(0, bool))
    assert first_overlap(0.0, 0.0, 0.0, 4.0, 2.0, *none) == -1


@pytest.mark.parametrize("seed", range(4))
def test_nearest_features_match_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    xy = rng.uniform(-80, 80, (n, 2))
    yaws = rng.uniform(-3, 3, n)
    sizes = rng.uniform(1, 6, (n, 3))
    vel = rng.normal(0, 5, (n, 2))
    ok = rng.random(n) < 0.8
    ego, yaw = np.array([1.0, 2.0]), 0.3
    feats = np.zeros((8, 8), np.float32)
    mask = np.zeros(8, np.float32)
    k = nearest_features(ego[0], ego[1], yaw, xy, yaws, sizes, vel, ok, 60.0, feats, mask, 0)
    ref_f, ref_m = agent_features(xy[ok], yaws[ok], sizes[ok], vel[ok], ego, yaw, 8, 60.0)
    np.testing.assert_allclose(feats, ref_f, atol=1e-5)
    np.testing.assert_array_equal(mask, ref_m)
    assert k == int(ref_m.sum())
    pts = np.concatenate([rng.uniform(-80, 80, (300, 2)), rng.uniform(-3, 3, (300, 1))], 1)
    f = np.zeros((64, 4), np.float32)
    m = np.zeros(64, np.float32)
    nearest_points(ego[0], ego[1], yaw, pts, 50.0, f, m)
    ref_f, ref_m = map_features(pts, ego, yaw, 64, 50.0)
    np.testing.assert_allclose(f, ref_f, atol=1e-5)
    np.testing.assert_array_equal(m, ref_m)


class _Probe(VectorEnv):
    def __init__(self, n):
        self.num_envs = n


def test_merge_infos_is_gymnasiums_layout():
    obs = {"ego": np.ones(6, np.float32)}
    infos = [
        {"a": 1.5, "b": np.arange(3), "s": "x", "t": {"u": True}, "n": np.int64(4)},
        {"a": 2.5, "b": np.arange(3) + 1, "s": "y", "t": {"u": False}, "e": "err", "n": np.int64(5)},
        {"a": 0.5, "s": "z", "final_obs": obs, "final_info": {"a": 9.0}, "n": np.int64(6)},
    ]
    probe = _Probe(3)
    ref: dict = {}
    for i, info in enumerate(infos):
        ref = probe._add_info(ref, info, i)
    got = merge_infos(infos, 3)
    assert set(got) == set(ref)
    for k in ref:
        assert data_equivalence(got[k], ref[k], exact=True), k
