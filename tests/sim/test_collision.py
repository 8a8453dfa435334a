"""StaticIndex against the brute-force reference, plus hand-computed boxes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim.collision import (
    BOUNDARY_EPS,
    StaticIndex,
    count_in_box_bruteforce,
    in_box_mask_bruteforce,
    main,
    street_cloud,
    yaw_rotation,
)
from sim.gaussians import GaussianCloud


def random_rotation(rng) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def random_cloud(rng, n, lo=(-20, -10, -1), hi=(20, 10, 5)):
    means = rng.uniform(lo, hi, size=(n, 3))
    return means, rng.uniform(0, 1, n)


# -- hand-computed ------------------------------------------------------------------------------


def test_corner_and_faces_count_as_inside():
    # box 4 x 2 x 1.5 at the origin, yaw 0: x in [-2, 2], y in [-1, 1], z in [0, 1.5]
    pts = np.array(
        [
            [2.0, 1.0, 1.5],  # top front-left corner
            [-2.0, -1.0, 0.0],  # bottom rear-right corner
            [0.0, 0.0, 0.0],  # centre of the bottom face
            [2.0 + 1e-6, 0.0, 0.5],  # just outside the front face
            [0.0, 0.0, -1e-6],  # just below the ground
            [0.0, 0.0, 1.5 + 1e-6],  # just above the roof
        ]
    )
    index = StaticIndex(pts, np.ones(6), cell_size=1.0)
    assert index.count_in_box([0, 0, 0], [4, 2, 1.5], 0.0) == 3
    assert in_box_mask_bruteforce(pts, [0, 0, 0], [4, 2, 1.5]).tolist() == [1, 1, 1, 0, 0, 0]
    # a point exactly at a corner, alone, with the box placed so the corner is at a cell boundary
    index = StaticIndex(np.array([[3.0, 1.0, 0.0]]), np.ones(1), cell_size=1.0)
    assert index.count_in_box([1.0, 0.0, 0.0], [4, 2, 1], 0.0) == 1
    assert index.count_in_box([1.0, 0.0, 0.0], [3.999, 2, 1], 0.0) == 0


def test_rotated_box_differs_from_axis_aligned():
    # a 4 x 1 x 1 box turned 45 degrees. (1.2, 1.2) lies on its long axis, 1.70 m from the centre:
    # inside; axis-aligned it would be out (|y| = 1.2 > 0.5). (1.5, 0.2) is inside the axis-aligned
    # box but 0.92 m off the rotated box's long axis: out.
    pts = np.array([[1.2, 1.2, 0.5], [1.5, 0.2, 0.5]])
    index = StaticIndex(pts, np.ones(2))
    size = [4.0, 1.0, 1.0]
    assert index.count_in_box([0, 0, 0], size, 0.0) == 1  # axis-aligned: only (1.5, 0.2)
    assert index.count_in_box([0, 0, 0], size, np.pi / 4) == 1  # rotated: only (1.2, 1.2)
    hits = index.hits_in_box([0, 0, 0], size, np.pi / 4)
    np.testing.assert_allclose(hits.mean_box, [1.2 * np.sqrt(2), 0.0, 0.5], atol=1e-12)
    hits = index.hits_in_box([0, 0, 0], size, 0.0)
    np.testing.assert_allclose(hits.mean_box, [1.5, 0.2, 0.5])


def test_box_height_is_measured_from_the_bottom_face():
    pts = np.array([[0.0, 0.0, 10.2], [0.0, 0.0, 9.9]])
    index = StaticIndex(pts, np.ones(2))
    assert index.count_in_box([0, 0, 10.0], [1, 1, 0.5], 0.0) == 1  # z in [10, 10.5]


def test_pitched_box_with_world_rotation():
    # box pitched nose-down by 90 degrees about y: box x -> world -z, box z -> world +x
    R = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    pts = np.array([[0.5, 0.0, -1.9], [0.5, 0.0, 0.3], [1.5, 0.0, 0.0]])
    index = StaticIndex(pts, np.ones(3))
    # length 4 along world z (-2..2), width 1, height 1 along world +x (0..1)
    assert index.count_in_box([0, 0, 0], [4, 1, 1], world_R_box=R) == 2
    assert count_in_box_bruteforce(pts, np.ones(3), 0.5, [0, 0, 0], [4, 1, 1], world_R_box=R) == 2


def test_opacity_threshold_is_strict():
    pts = np.tile([0.0, 0.0, 0.5], (3, 1))
    index = StaticIndex(pts, np.array([0.5, 0.50001, 0.9]), opacity_threshold=0.5)
    assert len(index) == 2
    assert index.count_in_box([0, 0, 0], [1, 1, 1], 0.0) == 2


def test_empty_cloud_and_all_below_threshold():
    index = StaticIndex(np.zeros((0, 3)), np.zeros(0))
    assert len(index) == 0
    assert index.count_in_box([0, 0, 0], [5, 5, 5], 0.3) == 0
    assert index.count_in_boxes(np.zeros((4, 3)), [5, 5, 5], np.zeros(4)).tolist() == [0] * 4
    hits = index.hits_in_box([0, 0, 0], [5, 5, 5])
    assert hits.count == 0 and np.isnan(hits.mean_box).all()
    rng = np.random.default_rng(0)
    means = rng.uniform(-5, 5, (100, 3))
    index = StaticIndex(means, np.full(100, 0.3), opacity_threshold=0.5)
    assert index.count_in_box([0, 0, -10], [100, 100, 100], 0.0) == 0


def test_box_covering_everything():
    rng = np.random.default_rng(1)
    means, opac = random_cloud(rng, 5000)
    index = StaticIndex(means, opac, cell_size=0.7)
    expected = int((opac > 0.5).sum())
    assert index.count_in_box([0, 0, -2], [100, 100, 10], 0.0) == expected
    assert index.count_in_box([0, 0, -2], [100, 100, 10], 1.0) == expected


# -- parity with the reference ------------------------------------------------------------------


@pytest.mark.parametrize("cell_size", [0.37, 1.0, 2.0, 50.0])
def test_random_boxes_match_bruteforce(cell_size):
    rng = np.random.default_rng(int(cell_size * 100))
    means, opac = random_cloud(rng, 20000)
    index = StaticIndex(means, opac, opacity_threshold=0.4, cell_size=cell_size)
    B = 200
    centers = rng.uniform([-25, -14, -2], [25, 14, 4], (B, 3))  # some partly or wholly off the grid
    sizes = rng.uniform([0.5, 0.5, 0.2], [10, 5, 4], (B, 3))
    yaws = rng.uniform(-np.pi, np.pi, B)
    got = index.count_in_boxes(centers, sizes, yaws)
    counts, mean_box = index.hits_in_boxes(centers, sizes, yaws)
    kept = means[opac > 0.4]
    for b in range(B):
        mask = in_box_mask_bruteforce(kept, centers[b], sizes[b], yaws[b])
        want = count_in_box_bruteforce(means, opac, 0.4, centers[b], sizes[b], yaws[b])
        assert want == mask.sum()
        assert got[b] == want == counts[b] == index.count_in_box(centers[b], sizes[b], yaws[b])
        if want:
            q = (kept[mask] - centers[b]) @ yaw_rotation(yaws[b])
            np.testing.assert_allclose(mean_box[b], q.mean(axis=0), atol=1e-9)
        else:
            assert np.isnan(mean_box[b]).all()
    assert (got > 0).sum() > B // 3  # the test exercises real hits, not only empty boxes


def test_general_rotations_match_bruteforce():
    rng = np.random.default_rng(7)
    means, opac = random_cloud(rng, 10000)
    index = StaticIndex(means, opac, cell_size=1.3)
    B = 100
    rots = np.stack([random_rotation(rng) for _ in range(B)])
    centers = rng.uniform([-20, -10, -1], [20, 10, 3], (B, 3))
    sizes = rng.uniform(0.5, 6.0, (B, 3))
    got = index.count_in_boxes(centers, sizes, world_R_boxes=rots)
    for b in range(B):
        want = count_in_box_bruteforce(means, opac, 0.5, centers[b], sizes[b], world_R_box=rots[b])
        assert got[b] == want == index.count_in_box(centers[b], sizes[b], world_R_box=rots[b])
    assert (got > 0).sum() > 10


def test_boxes_on_cell_boundaries_and_points_on_grid_lines():
    # points on a lattice that coincides with the cell boundaries; boxes whose faces lie on them too
    g = np.arange(-5.0, 5.5, 0.5)
    X, Y, Z = np.meshgrid(g, g, [0.0, 0.5, 1.0], indexing="ij")
    pts = np.stack([X.ravel(), Y.ravel(), Z.ravel()], axis=1)
    index = StaticIndex(pts, np.ones(len(pts)), cell_size=1.0)
    centers = np.array([[0, 0, 0], [1, 1, 0], [-4, 3, 0], [5, 5, 0.5], [-5, -5, 0]], dtype=float)
    sizes = np.array([[2, 2, 1], [4, 2, 0.5], [1, 1, 1], [2, 2, 0.5], [3, 1, 0.0]], dtype=float)
    got = index.count_in_boxes(centers, sizes, np.zeros(len(centers)))
    want = [count_in_box_bruteforce(pts, np.ones(len(pts)), 0.5, c, s) for c, s in zip(centers, sizes)]
    assert got.tolist() == want
    # by hand: 2 x 2 x 1 box at the origin holds a 5 x 5 x 3 block of lattice points
    assert want[0] == 75
    # a zero-height box at z = 0 still holds the points on its bottom face (boundary inclusive)
    # (x in [-6.5, -3.5]: 4 lattice values; y in [-5.5, -4.5]: 2; z = 0: 1)
    assert want[4] == 4 * 2 * 1


def test_far_floaters_land_in_border_cells():
    # a real reconstruction's sky/floater Gaussians kilometres away must not blow the grid up
    rng = np.random.default_rng(3)
    means, opac = random_cloud(rng, 20000)
    # 10 % of the kept Gaussians on a 20 km background sphere
    d = rng.normal(size=(1000, 3))
    floaters = 2e4 * d / np.linalg.norm(d, axis=1, keepdims=True)
    means = np.concatenate([means, floaters])
    opac = np.concatenate([opac, np.ones(len(floaters))])
    index = StaticIndex(means, opac, cell_size=0.5)
    nx, ny = index.grid_shape
    assert nx * ny <= 1 << 22 and index.cell_size == 0.5
    for b in range(50):  # boxes around each floater, and ordinary ones
        c = floaters[b] - [0, 0, 1]
        assert index.count_in_box(c, [3, 3, 3], 0.2) == count_in_box_bruteforce(means, opac, 0.5, c, [3, 3, 3], 0.2)
    c = rng.uniform(-20, 20, (50, 3))
    got = index.count_in_boxes(c, [6, 3, 3], rng.uniform(-3, 3, 50))
    assert got.sum() > 0


def test_from_cloud_is_memoised_and_matches_arrays():
    rng = np.random.default_rng(4)
    means, opac = random_cloud(rng, 3000)
    n = len(means)
    cloud = GaussianCloud.from_rgb(
        means, np.tile([1.0, 0, 0, 0], (n, 1)), np.full((n, 3), 0.1), opac, np.full((n, 3), 0.5)
    )
    index = StaticIndex.from_cloud(cloud)
    assert StaticIndex.from_cloud(cloud) is index
    assert StaticIndex.from_cloud(cloud, opacity_threshold=0.8) is not index
    m32 = cloud.means.numpy()
    o32 = cloud.opacities.numpy()
    for yaw in (0.0, 0.7, -2.0):
        want = count_in_box_bruteforce(m32, o32, 0.5, [1, 2, 0], [6, 3, 2], yaw)
        assert index.count_in_box([1, 2, 0], [6, 3, 2], yaw) == want
    assert isinstance(cloud.means, torch.Tensor)


# -- errors -------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    index = StaticIndex(np.zeros((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match=r"size .* >= 0"):
        index.count_in_box([0, 0, 0], [1, -1, 1], 0.0)
    with pytest.raises(ValueError, match=r"must be \[3\]"):
        index.count_in_box([0, 0], [1, 1, 1], 0.0)
    with pytest.raises(ValueError, match="finite"):
        index.count_in_box([0, np.nan, 0], [1, 1, 1], 0.0)
    with pytest.raises(ValueError, match="not both"):
        index.count_in_box([0, 0, 0], [1, 1, 1], 0.5, world_R_box=np.eye(3))
    with pytest.raises(ValueError, match="rotation"):
        index.count_in_box([0, 0, 0], [1, 1, 1], world_R_box=np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(ValueError, match=r"\[B, 3\]"):
        index.count_in_boxes(np.zeros(3), [1, 1, 1], np.zeros(1))
    with pytest.raises(ValueError, match=r"yaws must be \[B=2\]"):
        index.count_in_boxes(np.zeros((2, 3)), [1, 1, 1], np.zeros(3))
    with pytest.raises(ValueError, match="sizes"):
        index.count_in_boxes(np.zeros((2, 3)), np.ones((3, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="means must be"):
        StaticIndex(np.zeros((2, 2)), np.ones(2))
    with pytest.raises(ValueError, match="opacities must be"):
        StaticIndex(np.zeros((2, 3)), np.ones(3))
    with pytest.raises(ValueError, match="cell_size"):
        StaticIndex(np.zeros((2, 3)), np.ones(2), cell_size=0.0)
    with pytest.raises(ValueError, match="non-finite"):
        StaticIndex(np.array([[0.0, np.inf, 0.0]]), np.ones(1))
    # a non-finite mean below the threshold is simply dropped
    assert len(StaticIndex(np.array([[0.0, np.inf, 0.0]]), np.zeros(1))) == 0


def test_boundary_tolerance_is_tiny():
    assert BOUNDARY_EPS <= 1e-6


def test_bench_runs_small(capsys):
    main(["--bench", "--n", "20000"])
    out = capsys.readouterr().out
    assert '"build_ms"' in out and '"count_in_box_us"' in out
    means, opac = street_cloud(100)
    assert means.shape == (100, 3) and means.dtype == np.float32 and opac.shape == (100,)
