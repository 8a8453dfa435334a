"""The scenario data model (format_version 2). The JSON layout is documented in scenarios/README.md.

A scenario is one logged driving clip turned into a digital twin: the scene (Gaussian PLYs), the map,
the ego's box and expert (logged human) track, the route, the log-replayed agents, optional static
obstacle boxes, the camera rig and tags. Frames and units follow ``sim.frames``: world z-up metres,
yaw counter-clockwise from +x; the ego track gives the rear-axle centre (the ego frame origin); agent
and obstacle poses give the centre of the box's bottom face.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.dynamics import ANCHOR_HORIZON

FORMAT_VERSION = 2  # what this splatdrive writes; 2 added lanes' speed_limit
READ_VERSIONS = (1, 2)  # what it reads: a version-1 file's lanes get DEFAULT_SPEED_LIMIT (and a warning)
AGENT_TYPES = ("vehicle", "pedestrian", "cyclist")
DEFAULT_DT = 0.1  # s, RAD's 10 Hz
DEFAULT_HORIZON = 80  # steps: RAD's 8 s clips
DEFAULT_RENDER_DISTANCE = 200.0  # metres
LABEL_STEPS = round(ANCHOR_HORIZON / DEFAULT_DT)  # 5: the expert's IL label at step k looks at step k + 5
DEFAULT_SPEED_LIMIT = 50.0 / 3.6  # m/s (50 km/h, the common urban limit): a lane whose file gives none
MAX_SPEED_LIMIT = 40.0  # m/s (144 km/h): a larger limit is refused as absurd (a unit mix-up, km/h for m/s)
KINDS = ("lane_keep_straight", "lane_keep_curve", "lead_vehicle", "cut_in", "parked_obstacle", "crossing", "merge")


@dataclass(frozen=True)
class Lane:
    """A lane: centre line [M, 2] (world xy, in driving direction), width (m), topology by lane id,
    and its speed limit (m/s, in (0, MAX_SPEED_LIMIT]; 0 only on a lane no route uses: closed)."""

    id: str
    centerline: np.ndarray
    width: float
    left: str | None = None  # neighbour lane to the left with the same direction
    right: str | None = None
    successors: tuple[str, ...] = ()
    speed_limit: float = DEFAULT_SPEED_LIMIT


@dataclass(frozen=True)
class MapData:
    lanes: tuple[Lane, ...]
    road_edges: tuple[np.ndarray, ...] = ()  # polylines [M, 2] of the drivable area's boundary

    def lane(self, lane_id: str) -> Lane:
        for ln in self.lanes:
            if ln.id == lane_id:
                return ln
        raise KeyError(lane_id)

    def route_polyline(self, route) -> np.ndarray:
        """The centre lines of ``route`` (lane ids in order) joined into one polyline [M, 2]
        (a vertex shared by consecutive lanes appears once)."""
        parts: list[np.ndarray] = []
        for i, lane_id in enumerate(route):
            c = np.asarray(self.lane(lane_id).centerline, dtype=np.float64)
            if i and np.allclose(c[0], parts[-1][-1]):
                c = c[1:]
            parts.append(c)
        return np.concatenate(parts, axis=0)

    def route_speed_limits(self, route) -> np.ndarray:
        """[M] m/s: the speed limit at each vertex of :meth:`route_polyline` (of the lane it comes from;
        a vertex shared by two lanes takes the later lane's limit, which holds from there on)."""
        out: list[np.ndarray] = []
        last = None
        for i, lane_id in enumerate(route):
            ln = self.lane(lane_id)
            c = np.asarray(ln.centerline, dtype=np.float64)
            n = len(c)
            if i and last is not None and np.allclose(c[0], last):
                out[-1][-1] = ln.speed_limit
                n -= 1
            out.append(np.full(n, float(ln.speed_limit)))
            last = c[-1]
        return np.concatenate(out)


@dataclass(frozen=True)
class EgoSpec:
    """The ego box (length, width, height) in metres; its bottom-face centre is ``center_offset`` m
    ahead of the rear axle; ``wheelbase`` for the bicycle model."""

    length: float = 4.8
    width: float = 2.0
    height: float = 1.6
    center_offset: float = 1.4
    wheelbase: float = 2.765


@dataclass(frozen=True)
class Track:
    """A logged drive: times t [T] (s, increasing, on the dt grid), poses [T, 4] (x, y, z, yaw of the
    rear-axle centre), speed [T] (m/s, >= 0)."""

    t: np.ndarray
    poses: np.ndarray
    speed: np.ndarray

    def __len__(self) -> int:
        return len(self.t)

    @property
    def xy(self) -> np.ndarray:
        """[T, 2] world xy of the rear-axle centre."""
        return np.asarray(self.poses)[:, :2]

    @property
    def yaw(self) -> np.ndarray:
        """[T] radians."""
        return np.asarray(self.poses)[:, 3]

    def states(self) -> np.ndarray:
        """[T, 4] (x, y, yaw, v): the ``sim.dynamics`` state of the ego at each logged time."""
        p = np.asarray(self.poses, dtype=np.float64)
        return np.stack([p[:, 0], p[:, 1], p[:, 3], np.asarray(self.speed, dtype=np.float64)], axis=1)


@dataclass(frozen=True)
class Agent:
    """A log-replayed road user: poses [horizon + 1, 4] (x, y, z, yaw of the box bottom centre) and
    present [horizon + 1] bool, one per step 0..horizon. Absent steps neither render nor collide."""

    id: str
    type: str
    asset: str | None  # key into SceneFiles.assets (None: not rendered, e.g. a pedestrian without an asset)
    size: np.ndarray  # [3] length, width, height (m)
    poses: np.ndarray
    present: np.ndarray


@dataclass(frozen=True)
class StaticObstacle:
    """A static box (x, y, z bottom centre, yaw, size [3]) that counts as a static collision."""

    id: str
    pose: np.ndarray  # [4]
    size: np.ndarray  # [3]


@dataclass(frozen=True)
class SceneFiles:
    """Absolute paths (resolved at load) of the background PLY and the asset PLYs by name."""

    background: Path
    assets: dict[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class RigSpec:
    name: str = "front3"
    width: int = 128
    height: int = 64


@dataclass(frozen=True)
class Scenario:
    """One scenario. Time step k (0..horizon) is time ``expert.t[0] + k * dt``; the env starts at
    step 0 on the expert's pose and runs at most ``horizon`` steps. Agents have one pose per step
    0..horizon (``horizon + 1``); the expert track has at least ``horizon + 1`` poses (generated
    ones have ``horizon + 1 + LABEL_STEPS`` so that a 0.5 s label exists at every step)."""

    id: str
    dt: float
    horizon: int  # steps; the expert track has at least horizon + 1 poses
    scene: SceneFiles
    map: MapData
    ego: EgoSpec
    expert: Track
    route: tuple[str, ...]  # lane ids in order
    agents: tuple[Agent, ...] = ()
    static_obstacles: tuple[StaticObstacle, ...] = ()
    rig: RigSpec = field(default_factory=RigSpec)
    tags: dict[str, str | int | float | bool] = field(default_factory=dict)  # kind, difficulty, seed, suite
    path: Path | None = None  # the file it was loaded from
    render_distance: float = DEFAULT_RENDER_DISTANCE  # metres: the renderer's far plane

    @property
    def kind(self) -> str | None:
        k = self.tags.get("kind")
        return None if k is None else str(k)

    def agent_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All agents stacked: (poses [N, horizon + 1, 4], sizes [N, 3], present [N, horizon + 1] bool)."""
        n, T = len(self.agents), self.horizon + 1
        if n == 0:
            return np.zeros((0, T, 4)), np.zeros((0, 3)), np.zeros((0, T), dtype=bool)
        return (
            np.stack([a.poses for a in self.agents]).astype(np.float64),
            np.stack([a.size for a in self.agents]).astype(np.float64),
            np.stack([a.present for a in self.agents]).astype(bool),
        )

    def obstacle_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Static obstacles stacked: (poses [K, 4], sizes [K, 3])."""
        if not self.static_obstacles:
            return np.zeros((0, 4)), np.zeros((0, 3))
        return (
            np.stack([o.pose for o in self.static_obstacles]).astype(np.float64),
            np.stack([o.size for o in self.static_obstacles]).astype(np.float64),
        )
