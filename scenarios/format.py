"""The scenario data model (format_version 1). The JSON layout is documented in scenarios/README.md.

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

FORMAT_VERSION = 1
AGENT_TYPES = ("vehicle", "pedestrian", "cyclist")
KINDS = ("lane_keep_straight", "lane_keep_curve", "lead_vehicle", "cut_in", "parked_obstacle", "crossing", "merge")


@dataclass(frozen=True)
class Lane:
    """A lane: centre line [M, 2] (world xy, in driving direction), width (m), topology by lane id."""

    id: str
    centerline: np.ndarray
    width: float
    left: str | None = None  # neighbour lane to the left with the same direction
    right: str | None = None
    successors: tuple[str, ...] = ()


@dataclass(frozen=True)
class MapData:
    lanes: tuple[Lane, ...]
    road_edges: tuple[np.ndarray, ...] = ()  # polylines [M, 2] of the drivable area's boundary

    def lane(self, lane_id: str) -> Lane:
        for ln in self.lanes:
            if ln.id == lane_id:
                return ln
        raise KeyError(lane_id)


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
    """A logged drive: times t [T] (s, increasing), poses [T, 4] (x, y, z, yaw), speed [T] (m/s)."""

    t: np.ndarray
    poses: np.ndarray
    speed: np.ndarray


@dataclass(frozen=True)
class Agent:
    """A log-replayed road user. poses [T, 4] per scenario step (box bottom centre), present [T] bool."""

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
    tags: dict[str, str] = field(default_factory=dict)
    path: Path | None = None  # the file it was loaded from
