"""Hand-built scenarios for env tests: a straight road along +x whose numbers are easy to reason about.

The expert drives the lane centre (y = 0) at a constant ``speed`` (default 10 m/s: 5 m per 0.5 s,
exactly longitudinal bin 20 and lateral bin 30), so its labels replay exactly. Optional: a lead car
(an agent with an asset) ``lead_gap`` m ahead of the ego box, braking to a stop; a parked car at
(``parked_x``, ``parked_y``) whose Gaussians are part of the static background (and, unless
``obstacle_box=False``, also a static obstacle box).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from scenarios.format import (
    Agent,
    EgoSpec,
    Lane,
    MapData,
    RigSpec,
    Scenario,
    SceneFiles,
    StaticObstacle,
    Track,
)
from sim.gaussians import GaussianCloud
from sim.ply import save_ply


def box_cloud(center, size, n: int, rgb, rng, opacity: float = 0.9) -> dict:
    """n Gaussians filling a box (bottom-face centre ``center`` [3], size [3]) of one colour."""
    lo = np.array([-size[0] / 2, -size[1] / 2, 0.0])
    hi = np.array([size[0] / 2, size[1] / 2, size[2]])
    means = np.asarray(center) + rng.uniform(lo, hi, (n, 3))
    return {
        "means": means,
        "rgb": np.tile(np.asarray(rgb, dtype=np.float64), (n, 1)) + rng.normal(0, 0.03, (n, 3)),
        "opac": np.full(n, opacity),
        "scales": np.full((n, 3), 0.15),
    }


def write_cloud(parts: list[dict], path: Path) -> Path:
    means = np.concatenate([p["means"] for p in parts])
    rgb = np.clip(np.concatenate([p["rgb"] for p in parts]), 0, 1)
    opac = np.concatenate([p["opac"] for p in parts])
    scales = np.concatenate([p["scales"] for p in parts])
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (len(means), 1))
    save_ply(GaussianCloud.from_rgb(means, quats, scales, opac, rgb), path)
    return path


def straight_scenario(
    folder: Path,
    sid: str = "straight",
    horizon: int = 30,
    speed: float = 10.0,
    lead_gap: float | None = None,
    lead_speed: float = 0.0,
    parked_x: float | None = None,
    parked_y: float = 0.0,
    obstacle_box: bool = True,
    n_ground: int = 1500,
    seed: int = 0,
    corrupt_background: bool = False,
) -> Scenario:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    dt = 0.1
    T = horizon + 1 + 5
    t = np.arange(T) * dt
    x = speed * t
    poses = np.stack([x, np.zeros(T), np.zeros(T), np.zeros(T)], axis=1)
    expert = Track(t=t, poses=poses, speed=np.full(T, speed))
    length = speed * T * dt + 80.0

    # background: low, faint ground Gaussians (under the lifted ego box) and kerb walls at y = +-8
    parts = [
        {
            "means": np.stack(
                [rng.uniform(-20, length, n_ground), rng.uniform(-9, 9, n_ground), np.zeros(n_ground)], 1
            ),
            "rgb": np.tile([0.35, 0.35, 0.38], (n_ground, 1)),
            "opac": np.full(n_ground, 0.8),
            "scales": np.tile([0.5, 0.5, 0.02], (n_ground, 1)),
        }
    ]
    for side in (-8.5, 8.5):
        parts.append(box_cloud([length / 2 - 10, side, 0.0], [length + 20, 1.0, 3.0], 800, [0.6, 0.55, 0.5], rng))
    obstacles = ()
    if parked_x is not None:
        parts.append(box_cloud([parked_x, parked_y, 0.0], [4.5, 1.9, 1.5], 600, [0.8, 0.1, 0.1], rng))
        if obstacle_box:
            obstacles = (StaticObstacle("parked", np.array([parked_x, parked_y, 0.0, 0.0]), np.array([4.5, 1.9, 1.5])),)
    bg = folder / f"{sid}_background.ply"
    if corrupt_background:
        bg.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 1000\nend_header\n" + b"\0" * 17)
    else:
        write_cloud(parts, bg)
    car = folder / "car.ply"
    if not car.exists():
        write_cloud([box_cloud([0, 0, 0], [4.5, 1.9, 1.5], 400, [0.1, 0.2, 0.8], rng)], car)

    agents = ()
    if lead_gap is not None:
        ego = EgoSpec()
        # ego box front at start: center_offset + length / 2; lead box rear lead_gap ahead of that
        x0 = ego.center_offset + ego.length / 2 + lead_gap + 4.5 / 2
        ax = np.empty(horizon + 1)
        v, p = lead_speed, x0
        for k in range(horizon + 1):
            ax[k] = p
            p += v * dt
        ap = np.stack([ax, np.zeros(horizon + 1), np.zeros(horizon + 1), np.zeros(horizon + 1)], 1)
        agents = (Agent("lead", "vehicle", "car", np.array([4.5, 1.9, 1.5]), ap, np.ones(horizon + 1, bool)),)

    centre = np.stack([np.linspace(-20, length, 50), np.zeros(50)], 1)
    lanes = (
        Lane("ego_lane", centre, 3.5, left="left_lane"),
        Lane("left_lane", centre + np.array([0.0, 3.5]), 3.5, right="ego_lane"),
    )
    edges = (centre + np.array([0.0, -1.75]), centre + np.array([0.0, 5.25]))
    return Scenario(
        id=sid,
        dt=dt,
        horizon=horizon,
        scene=SceneFiles(background=bg, assets={"car": car}),
        map=MapData(lanes=lanes, road_edges=edges),
        ego=EgoSpec(),
        expert=expert,
        route=("ego_lane",),
        agents=agents,
        static_obstacles=obstacles,
        rig=RigSpec("front3", 32, 16),
        tags={"kind": "lane_keep_straight"},
    )


def limits_scenario(folder: Path, sid: str = "limits") -> Scenario:
    """``straight_scenario``'s road (expert at 10 m/s along y = 0 from x = 0) with the route cut in three
    lanes along +x: ``slow_a`` (x -100..30) and ``slow_b`` (x 30..60) at 10 m/s, then ``fast`` (x 60..400)
    at 15 m/s; the left lane (y = 3.5, on no route) at 20 m/s. Along the route s = x + 100: the limit
    changes from 10 to 15 m/s at s = 160 (x = 60) and nowhere else."""
    sc = straight_scenario(folder, sid=sid)

    def line(*xs: float) -> np.ndarray:  # a centre line along y = 0 through these x
        return np.array([[x, 0.0] for x in xs])

    lanes = (
        Lane("slow_a", line(-100.0, -40.0, 30.0), 3.5, left="left_lane", successors=("slow_b",), speed_limit=10.0),
        Lane("slow_b", line(30.0, 60.0), 3.5, successors=("fast",), speed_limit=10.0),
        Lane("fast", line(60.0, 100.0, 400.0), 3.5, speed_limit=15.0),
        Lane("left_lane", line(-100.0, 400.0) + np.array([0.0, 3.5]), 3.5, right="slow_a", speed_limit=20.0),
    )
    return replace(sc, map=MapData(lanes=lanes, road_edges=sc.map.road_edges), route=("slow_a", "slow_b", "fast"))
