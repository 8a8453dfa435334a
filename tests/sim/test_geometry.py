"""sim.geometry: oriented boxes (SAT against a corner/edge reference) and polyline queries, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sim.geometry import (
    box_corners,
    boxes_overlap,
    boxes_overlap_reference,
    check_polyline,
    clean_polyline,
    ego_box_pose,
    interpolate_polyline,
    local_to_world,
    nearest_on_polyline,
    offset_polyline,
    point_polyline_distance,
    polyline_arclength,
    polyline_frames,
    polyline_heading,
    polyline_stations,
    polyline_vertex_normals,
    project_to_polyline,
    resample_polyline,
    world_to_local,
)


def test_box_corners_by_hand():
    c = box_corners([1.0, 2.0], np.pi / 2, [4.0, 2.0])  # length along +y after the turn
    np.testing.assert_allclose(c, [[0.0, 4.0], [0.0, 0.0], [2.0, 0.0], [2.0, 4.0]], atol=1e-12)


@pytest.mark.parametrize(
    "b_center, b_yaw, expect",
    [
        ([4.9, 0.0], 0.0, True),  # overlap by 0.1 m along x
        ([5.1, 0.0], 0.0, False),
        ([5.0, 0.0], 0.0, True),  # touching counts
        ([0.0, 2.1], 0.0, False),
        ([3.2, 2.2], np.pi / 4, True),  # a corner pokes in
        ([4.5, 2.9], np.pi / 4, False),  # separated only along a diagonal axis of b
    ],
)
def test_boxes_overlap_cases(b_center, b_yaw, expect):
    a = ([0.0, 0.0], 0.0, [6.0, 2.0])
    b = (b_center, b_yaw, [4.0, 2.0])
    assert bool(boxes_overlap(*a, *b)) is expect
    assert boxes_overlap_reference(*a, *b) is expect


def test_boxes_overlap_matches_reference_on_random_boxes():
    rng = np.random.default_rng(0)
    n = 2000
    ca, cb = rng.uniform(-4, 4, (n, 2)), rng.uniform(-4, 4, (n, 2))
    ya, yb = rng.uniform(-np.pi, np.pi, n), rng.uniform(-np.pi, np.pi, n)
    sa, sb = rng.uniform(0.2, 5, (n, 2)), rng.uniform(0.2, 5, (n, 2))
    fast = boxes_overlap(ca, ya, sa, cb, yb, sb)  # vectorised over the batch
    ref = np.array([boxes_overlap_reference(ca[i], ya[i], sa[i], cb[i], yb[i], sb[i]) for i in range(n)])
    assert fast.shape == (n,)
    assert (fast == ref).all()
    assert 0.2 < ref.mean() < 0.8  # both outcomes exercised


def test_boxes_overlap_broadcasts():
    c = np.zeros((3, 5, 2))
    out = boxes_overlap(c, np.zeros((3, 5)), [1.0, 1.0], [0.0, 0.0], 0.0, [1.0, 1.0])
    assert out.shape == (3, 5) and out.all()


def test_frames_round_trip_and_ego_box():
    rng = np.random.default_rng(1)
    p = rng.normal(size=(10, 2))
    o, yaw = np.array([3.0, -1.0]), 0.7
    np.testing.assert_allclose(local_to_world(world_to_local(p, o, yaw), o, yaw), p, atol=1e-12)
    np.testing.assert_allclose(world_to_local([[4.0, -1.0]], o, np.pi / 2), [[0.0, -1.0]], atol=1e-12)
    np.testing.assert_allclose(ego_box_pose([0.0, 0.0], np.pi / 2, 1.4), [0.0, 1.4], atol=1e-12)


L_SHAPE = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])


def test_arclength_heading_interpolate():
    np.testing.assert_allclose(polyline_arclength(L_SHAPE), [0.0, 10.0, 20.0])
    np.testing.assert_allclose(polyline_heading(L_SHAPE), [0.0, np.pi / 2, np.pi / 2])
    xy, h = interpolate_polyline(L_SHAPE, [5.0, 15.0, 25.0, -2.0])
    np.testing.assert_allclose(xy, [[5, 0], [10, 5], [10, 15], [-2, 0]], atol=1e-12)  # straight on past the ends
    np.testing.assert_allclose(h, [0, np.pi / 2, np.pi / 2, 0])


def test_project_to_polyline_by_hand():
    s, lat, h = project_to_polyline(np.array([[5.0, 1.0], [11.0, 5.0], [5.0, -2.0], [12.0, 12.0]]), L_SHAPE)
    np.testing.assert_allclose(s, [5.0, 15.0, 5.0, 20.0])
    np.testing.assert_allclose(lat, [1.0, -1.0, -2.0, -np.hypot(2, 2)])  # left of the direction positive
    np.testing.assert_allclose(h, [0.0, np.pi / 2, 0.0, np.pi / 2])
    np.testing.assert_allclose(point_polyline_distance([[5.0, 1.0]], L_SHAPE), [1.0])
    # a scalar point gives scalars
    s1, lat1, _ = project_to_polyline(np.array([2.0, 0.5]), L_SHAPE)
    assert np.shape(s1) == () and float(s1) == 2.0 and float(lat1) == 0.5


def test_resample_and_offset():
    r = resample_polyline(L_SHAPE, 1.0)
    assert len(r) == 21
    np.testing.assert_allclose(np.diff(polyline_arclength(r)), 1.0, atol=1e-12)
    straight = np.array([[0.0, 0.0], [5.0, 0.0], [10.0, 0.0]])
    np.testing.assert_allclose(offset_polyline(straight, 2.0), straight + np.array([0.0, 2.0]))
    # an arc of radius 20 offset 2 m inwards (left) is an arc of radius 18
    a = np.linspace(-np.pi / 2, 0.0, 50)
    arc = np.stack([20 * np.cos(a), 20 + 20 * np.sin(a)], 1)
    inner = offset_polyline(arc, 2.0)
    np.testing.assert_allclose(np.linalg.norm(inner - [0.0, 20.0], axis=1), 18.0, atol=1e-3)


def test_bad_polylines_raise():
    with pytest.raises(ValueError, match="polyline must be"):
        project_to_polyline([[0.0, 0.0]], np.zeros((1, 2)))
    with pytest.raises(ValueError, match="finite"):
        polyline_arclength([[0.0, 0.0], [np.nan, 1.0]])


# -- smooth polylines (the street generator's) -----------------------------------------------------


def test_clean_polyline_drops_repeats_and_splits_long_segments():
    raw = [[0.0, 0.0], [0.0, 0.0], [10.0, 0.0], [10.0, 1e-12], [10.0, 10.0]]
    np.testing.assert_array_equal(clean_polyline(raw), L_SHAPE)
    third = 10.0 / 3.0
    want = [[0, 0], [third, 0], [2 * third, 0], [10, 0], [10, third], [10, 2 * third], [10, 10]]
    np.testing.assert_allclose(clean_polyline(L_SHAPE, max_step=4.0), want, atol=1e-12)
    with pytest.raises(ValueError, match="zero length"):
        clean_polyline([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="clean_polyline first"):
        polyline_frames([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]], [0.5])
    with pytest.raises(ValueError, match="zero length"):
        check_polyline([[2.0, 3.0], [2.0, 3.0]], "here", positive_length=True)


def test_vertex_normals_frames_and_miter_free_offset_by_hand():
    np.testing.assert_allclose(polyline_stations(L_SHAPE), [0.0, 10.0, 20.0])
    r = 1 / np.sqrt(2)
    np.testing.assert_allclose(polyline_vertex_normals(L_SHAPE), [[0, 1], [-r, r], [-1, 0]], atol=1e-12)
    xy, tan, nrm = polyline_frames(L_SHAPE, [5.0, 15.0, -3.0, 25.0])
    np.testing.assert_allclose(xy, [[5, 0], [10, 5], [0, 0], [10, 10]], atol=1e-12)  # clamped at the ends
    # half-way along a segment the normal has turned half of the way to the corner's (22.5 deg)
    c, s = np.cos(np.pi / 8), np.sin(np.pi / 8)
    np.testing.assert_allclose(nrm, [[-s, c], [-c, s], [0, 1], [-1, 0]], atol=1e-12)
    np.testing.assert_allclose(tan, [[c, s], [s, c], [1, 0], [0, 1]], atol=1e-12)
    # without a miter the corner is cut: it moves 1 m along its (unit) normal, not to (9, 1)
    np.testing.assert_allclose(offset_polyline(L_SHAPE, 1.0, miter=False), [[0, 1], [10 - r, r], [9, 10]], atol=1e-12)
    np.testing.assert_allclose(offset_polyline(L_SHAPE, 1.0)[1], [9.0, 1.0], atol=1e-12)


def test_nearest_on_polyline_by_hand():
    pts = np.array([[5.0, 1.0], [12.0, 5.0], [-3.0, 0.0], [10.0, 13.0]])
    dist, lat, s, interior = nearest_on_polyline(pts, L_SHAPE)
    np.testing.assert_allclose(dist, [1.0, 2.0, 3.0, 3.0])
    np.testing.assert_allclose(lat, [1.0, -2.0, 0.0, 0.0])  # left of the direction is +; beyond an end: 0
    np.testing.assert_allclose(s, [5.0, 15.0, 0.0, 20.0])
    assert interior.tolist() == [True, True, False, False]
    dist, _, _, interior = nearest_on_polyline(pts, L_SHAPE, max_dist=2.5)
    assert dist.tolist() == [1.0, 2.0, np.inf, np.inf] and interior.tolist() == [True, True, False, False]


def test_nearest_on_polyline_matches_project_to_polyline():
    rng = np.random.default_rng(3)
    a = np.linspace(0.0, 3 * np.pi, 40)
    wiggle = np.stack([a * 12.0, 15.0 * np.sin(a)], 1)  # 39 segments: points are grouped by cell
    pts = rng.uniform([-20.0, -40.0], [130.0, 40.0], (3000, 2))
    dist, _, s, _ = nearest_on_polyline(pts, wiggle)
    s_ref, lat_ref, _ = project_to_polyline(pts, wiggle)
    np.testing.assert_allclose(dist, np.abs(lat_ref), atol=1e-9)
    np.testing.assert_allclose(s, s_ref, atol=1e-6)
    near, _, _, _ = nearest_on_polyline(pts, wiggle, max_dist=5.0)
    close = np.abs(lat_ref) <= 5.0 - 1e-9
    assert close.any() and (~close).any()
    np.testing.assert_allclose(near[close], np.abs(lat_ref[close]), atol=1e-9)
    assert np.isinf(near[np.abs(lat_ref) > 5.0 + 1e-9]).all()
