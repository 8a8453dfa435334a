"""Procedural digital twins: layouts, determinism, Gaussian budgets, geometry contracts, a real render."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from sim import procedural as P
from sim.camera import make_rig
from sim.collision import StaticIndex
from sim.frames import pose_matrix
from sim.gaussians import GaussianCloud, covariances
from sim.geometry import clean_polyline, nearest_on_polyline
from sim.ply import load_ply
from sim.procedural.__main__ import main
from sim.procedural.background import plan_background
from sim.procedural.demo import DEMO_STEPS
from sim.procedural.layout import LANE_WIDTH
from sim.procedural.streets import CURB_HEIGHT
from sim.rendering import render

LIFT = 0.3  # the env's static-collision box starts this high above the ground

PARKED = P.Prop("sedan", 30.0, -1.75, 0.1)
BARRIER = P.Prop("barrier", 42.0, -5.25, -0.4)
CONE = P.Prop("cone", 45.0, -5.25, 0.0)


def small_layout(props=()) -> P.StreetLayout:
    """The demo straight street, shortened to keep builds quick."""
    return dataclasses.replace(P.demo_layout("straight", 80.0), props=tuple(props))


@pytest.fixture(scope="module")
def small_parts():
    return P.background_parts(small_layout((PARKED, BARRIER, CONE)), seed=3, target_gaussians=20_000)


@pytest.fixture(scope="module")
def small_background(small_parts):
    return GaussianCloud.cat(list(small_parts.values()))


def assert_valid_cloud(cloud, what: str):
    assert len(cloud) > 0, what
    for name, t in zip(("means", "quats", "scales", "opacities", "sh"), cloud.tensors()):
        assert torch.isfinite(t).all(), f"{what}: non-finite {name}"
    assert (cloud.opacities > 0).all() and (cloud.opacities < 1).all(), what
    assert (cloud.scales > 0).all(), what
    assert torch.allclose(cloud.quats.norm(dim=1), torch.ones(len(cloud)), atol=1e-4), what
    rgb = cloud.rgb0()
    assert (rgb >= -1e-5).all() and (rgb <= 1 + 1e-5).all(), what


def z_extent(cloud) -> torch.Tensor:
    """Each Gaussian's standard deviation along world z, metres [N]."""
    return covariances(cloud.quats, cloud.scales)[:, 2, 2].sqrt()


# -- layouts ---------------------------------------------------------------------------------------


def test_layout_fields_are_validated():
    with pytest.raises(ValueError, match=r"RoadSurface\.centerline"):
        P.RoadSurface(np.zeros((1, 2)), 7.0)
    with pytest.raises(ValueError, match="width"):
        P.RoadSurface(np.array([[0.0, 0.0], [10.0, 0.0]]), -1.0)
    with pytest.raises(ValueError, match=r"Marking\.kind"):
        P.Marking(np.array([[0.0, 0.0], [10.0, 0.0]]), "zigzag")
    with pytest.raises(ValueError, match="outward"):
        P.RoadEdge(np.array([[0.0, 0.0], [10.0, 0.0]]), 0)
    with pytest.raises(ValueError, match=r"Prop\.kind"):
        P.Prop("tank", 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="at least one RoadSurface"):
        P.StreetLayout(roads=())
    with pytest.raises(ValueError, match="extent"):
        P.StreetLayout(roads=(P.RoadSurface(np.array([[0.0, 0.0], [10.0, 0.0]]), 7.0),), extent=(0, 0, -1, 1))
    with pytest.raises(ValueError, match="unknown kind"):
        P.demo_layout("roundabout")


@pytest.mark.parametrize("kind", P.LAYOUT_KINDS)
def test_demo_layouts_start_the_ego_in_the_middle_of_a_lane(kind):
    lay = P.demo_layout(kind)
    ego = np.array([[0.0, -1.75]])
    _, lat, _, interior = nearest_on_polyline(ego, clean_polyline(lay.roads[0].centerline))
    assert interior[0] and abs(lat[0] + 1.75) < 1e-6  # right lane, heading +x along the main road
    # the nearest paint is a lane line 1.75 m away on either side: the lane is 3.5 m wide
    gaps = [nearest_on_polyline(ego, clean_polyline(m.polyline))[0][0] for m in lay.markings]
    assert abs(min(gaps) - LANE_WIDTH / 2) < 0.05
    assert len(lay.edges) >= 2 and all(e.outward in (1, -1) for e in lay.edges)


# -- determinism and budget ------------------------------------------------------------------------


def test_same_seed_same_tensors_and_another_seed_another_scene(small_background):
    again = P.build_background(small_layout((PARKED, BARRIER, CONE)), seed=3, target_gaussians=20_000)
    for a, b in zip(small_background.tensors(), again.tensors()):
        assert torch.equal(a, b)
    other = P.build_background(small_layout((PARKED, BARRIER, CONE)), seed=4, target_gaussians=20_000)
    n = min(len(other), len(small_background))
    assert len(other) != len(small_background) or not torch.equal(other.means[:n], small_background.means[:n])
    v1, _ = P.build_vehicle("suv", None, 11)
    v2, _ = P.build_vehicle("suv", None, 11)
    assert all(torch.equal(a, b) for a, b in zip(v1.tensors(), v2.tensors()))


@pytest.mark.parametrize(
    ("kind", "target"),
    [("straight", 50_000), ("intersection", 100_000), pytest.param("straight", 300_000, marks=pytest.mark.slow)],
)
def test_gaussian_count_honours_the_target(kind, target):
    cloud = P.build_background(P.demo_layout(kind), seed=1, target_gaussians=target)
    assert abs(len(cloud) - target) <= 0.1 * target, len(cloud)
    assert_valid_cloud(cloud, f"{kind} {target}")
    assert cloud.sh_degree == 0  # the background renders on the fast (view-independent) path


def test_background_clouds_are_valid(small_parts):
    for name, cloud in small_parts.items():
        if len(cloud):
            assert_valid_cloud(cloud, name)
    for name in ("road", "markings", "curbs", "sidewalks", "grass", "buildings", "trees", "furniture", "sky"):
        assert len(small_parts[name]) > 0, name


# -- geometry contracts ----------------------------------------------------------------------------


def test_road_and_paint_lie_flat_on_the_road_surface(small_parts):
    lay = small_layout()
    road = clean_polyline(lay.roads[0].centerline)
    hw = lay.roads[0].width / 2
    for name in ("road", "markings"):
        c = small_parts[name]
        m = c.means.numpy().astype(np.float64)
        _, lat, _, interior = nearest_on_polyline(m[:, :2], road)
        assert interior.all() and (np.abs(lat) <= hw + 0.01).all(), name
        assert (np.abs(m[:, 2]) <= 0.01).all(), name
        assert (c.scales.min(1).values <= 0.02).all(), name  # flat: tiny scale along the normal
        assert (z_extent(c) <= 0.02).all(), name


def test_ground_stays_under_the_collision_floor(small_parts):
    for name in ("road", "markings", "apron", "curbs", "sidewalks", "grass"):
        c = small_parts[name]
        if not len(c):
            continue
        z = c.means[:, 2]
        assert (z <= CURB_HEIGHT + 0.01).all() and (z >= -0.01).all(), name  # curbs at most 0.15 m high
        assert (z + 3 * z_extent(c) < LIFT).all(), name


def test_the_ego_lane_is_clear_of_static_gaussians_except_the_props(small_background):
    index = StaticIndex.from_cloud(small_background)
    ego_size = np.array([4.8, 2.0, 1.8 - LIFT])
    xs = np.arange(-15.0, 55.0, 1.0)
    centers = np.stack([xs, np.full_like(xs, -1.75), np.full_like(xs, LIFT)], 1)
    counts = index.count_in_boxes(centers, np.broadcast_to(ego_size, centers.shape), np.zeros(len(xs)))
    hits = xs[counts > 0]
    # only the parked sedan at x = 30 is in this lane
    assert len(hits) and (np.abs(hits - PARKED.x) < (4.8 + 4.6) / 2 + 0.1).all(), hits


@pytest.mark.parametrize("prop", [PARKED, BARRIER, CONE], ids=lambda p: p.kind)
def test_baked_obstacles_fill_their_box_with_opaque_gaussians(small_background, prop):
    vehicle = prop.kind in P.VEHICLE_KINDS
    size = P.build_vehicle(prop.kind)[1] if vehicle else P.build_prop(prop.kind)[1]
    index = StaticIndex.from_cloud(small_background, opacity_threshold=0.5)
    L, W, H = size
    # cells of at most ~0.6 m through the part of the box a lifted collision box reaches; a vehicle's
    # box also holds air over its bonnet and boot, so its lower body (to 0.6 m) is what must be solid
    top = 0.6 if vehicle else H
    nx, ny, nz = (max(1, math.ceil(L / 0.6)), max(1, math.ceil(W / 0.6)), max(1, math.ceil((top - LIFT) / 0.6)))
    R = np.array([[math.cos(prop.yaw), -math.sin(prop.yaw)], [math.sin(prop.yaw), math.cos(prop.yaw)]])
    for i in range(nx):
        for j in range(ny):
            for k in range(nz):
                local = np.array([(i + 0.5) / nx * L - L / 2, (j + 0.5) / ny * W - W / 2])
                c = np.array([prop.x, prop.y]) + R @ local
                cell = [L / nx, W / ny, (top - LIFT) / nz]
                n = index.count_in_box([c[0], c[1], LIFT + k * cell[2]], cell, prop.yaw)
                assert n >= 1, f"{prop.kind}: empty cell {(i, j, k)}"
    assert index.count_in_box([prop.x, prop.y, LIFT], [L, W, H - LIFT], prop.yaw) >= 8


def test_tree_canopies_start_above_two_and_a_half_metres(small_parts):
    trees = small_parts["trees"]
    m = trees.means.numpy()
    plan = plan_background(small_layout((PARKED, BARRIER, CONE)), 3)
    trunk_xy = np.array([t.xy for t in plan.trees])
    near_trunk = np.min(np.linalg.norm(m[:, None, :2] - trunk_xy[None], axis=2), axis=1) < 0.25
    canopy = ~near_trunk
    assert canopy.any() and near_trunk.any()
    assert (m[canopy, 2] - 2 * trees.scales.numpy()[canopy].max(1) >= 2.5 - 1e-4).all()


@pytest.mark.parametrize("kind", P.VEHICLE_KINDS)
def test_vehicles_fit_their_box_and_look_their_size(kind):
    cloud, size = P.build_vehicle(kind, None, 5)
    assert_valid_cloud(cloud, kind)
    assert 3_000 <= len(cloud) <= 15_000, len(cloud)
    L, W, H = size
    m = cloud.means.numpy()
    lo, hi = np.array([-L / 2, -W / 2, 0.0]), np.array([L / 2, W / 2, H])
    assert (m >= lo - 1e-4).all() and (m <= hi + 1e-4).all()
    reach = covariances(cloud.quats, cloud.scales).diagonal(dim1=1, dim2=2).sqrt().numpy()  # sigma per axis
    assert (m - reach >= lo - 0.05).all() and (m + reach <= hi + 0.05).all()
    expected = {"sedan": (4.6, 1.85, 1.45), "bus": (12.0, 2.55, 3.2)}
    if kind in expected:
        assert np.allclose(size, expected[kind], atol=0.2)
    assert 3.5 < L < 13 and 1.6 < W < 2.7 and 1.3 < H < 3.6


def test_vehicle_paint_follows_the_colour_and_the_seed():
    red, _ = P.build_vehicle("sedan", (0.8, 0.05, 0.05), 0)
    rgb = red.rgb0().numpy()
    assert ((rgb[:, 0] > 0.6) & (rgb[:, 1] < 0.15)).mean() > 0.3  # most of the body is red
    dark = (rgb.max(1) < 0.12).mean()
    assert dark > 0.05  # glass, tyres, trim
    assert ((rgb[:, 0] > 0.95) & (rgb[:, 1] > 0.9)).any()  # headlights
    paints = set()
    for seed in range(8):
        c, _ = P.build_vehicle("hatchback", None, seed)
        paints.add(tuple(np.round(np.median(c.rgb0().numpy(), axis=0), 1)))
    assert len(paints) >= 3
    with pytest.raises(ValueError, match="unknown kind"):
        P.build_vehicle("tractor")


@pytest.mark.parametrize("kind", P.PROP_KINDS)
def test_props_fit_their_box(kind):
    cloud, size = P.build_prop(kind, 2)
    assert_valid_cloud(cloud, kind)
    L, W, H = size
    m = cloud.means.numpy()
    assert (np.abs(m[:, 0]) <= L / 2 + 1e-4).all() and (np.abs(m[:, 1]) <= W / 2 + 1e-4).all()
    assert (m[:, 2] >= -1e-4).all() and (m[:, 2] <= H + 1e-4).all()
    assert (cloud.opacities > 0.5).float().mean() > 0.9  # solid


# -- the demo scene, rendered -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def scene():
    return P.demo_scene(seed=0, target_gaussians=30_000, kind="straight")


def test_demo_scene_has_traffic_on_the_road(scene):
    assert len(scene.actors) >= 4 and scene.num_steps == DEMO_STEPS
    road = clean_polyline(P.demo_layout("straight").roads[0].centerline)
    kinds = {name.rsplit("_", 1)[0] for name in scene.assets}
    assert kinds <= set(P.VEHICLE_KINDS) and len(kinds) >= 3
    for aid, tr in scene.actors.items():
        p = tr.poses[tr.present]
        assert len(p), aid
        _, lat, _, interior = nearest_on_polyline(p[:, :2], road)
        assert interior.all() and (np.abs(lat) < 7.5).all(), aid
        assert np.allclose(p[:, 2], 0.0)


def test_render_from_the_ego_shows_sky_above_and_road_below(scene):
    rig = make_rig("front3", 128, 64)
    out = render(scene.compose(0), rig.viewmats(pose_matrix(0.0, -1.75, 0.0, 0.0)), rig.Ks(), 128, 64, backend="cpu")
    assert (out.alpha > 0.9).all(), float(out.alpha.min())  # the sky dome closes every view
    front = out.rgb[0].numpy()
    sky = front[:5, 40:88].reshape(-1, 3).mean(0)
    assert sky[2] > sky[0] + 0.1 and sky[2] > 0.6, sky  # bluish
    road = front[56:, 48:80].reshape(-1, 3)
    assert road.mean() < 0.45 and np.abs(road.mean(0) - road.mean()).max() < 0.05, road.mean(0)  # grey asphalt
    # the lane lines show at 128 x 64: bright paint somewhere in the lower half
    lower = front[36:].reshape(-1, 3)
    assert (lower.min(1) > 0.6).sum() >= 3


def test_cli_writes_a_standard_ply(tmp_path):
    args = ["--out", str(tmp_path), "--seed", "2", "--kind", "curve", "--gaussians", "20000", "--length", "80"]
    assert main(args) == 0
    cloud = load_ply(tmp_path / "background.ply")
    expected = P.build_background(P.demo_layout("curve", 80.0), 2, 20_000)
    assert len(cloud) == len(expected)
    assert torch.allclose(cloud.means, expected.means) and torch.allclose(cloud.rgb0(), expected.rgb0(), atol=1e-5)
