"""Per-scenario tables the env reads every step, built once per scenario and cached.

Everything a step needs besides the ego's own state is a lookup in these arrays: the expert path
(for deviation, progress and the IL labels), the agents' boxes and velocities per step,
the static obstacle boxes and the lane-centre points. The scene's PLYs are not held here: they go
through ``scenarios.scene``'s bounded per-process cache, and the static-collision indices through a
bounded cache of their own (:meth:`ScenarioData.static_index`), so both are built once per scene.
Frames and units as ``sim.frames``: world metres, yaw from +x towards +y.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from envs.kernels import path_points, project_path
from scenarios.actions import ActionSpec, nearest_bins
from scenarios.expert import expert_displacements
from scenarios.reactive import DEFAULT_SETTINGS, ReactiveRoute, ReactiveScene, ReactiveSettings, agent_velocities
from scenarios.scene import cloud_key, load_cloud, load_scene
from sim.collision import StaticIndex
from sim.frames import wrap_angle
from sim.geometry import interpolate_polyline, polyline_arclength


class ScenarioData:
    """Tables of one scenario for an env with ``horizon`` steps.

    Expert path: ``path_xy`` [M, 2] (the logged rear-axle positions with repeats removed, so every
    segment has a length), ``path_s`` [M] arclength, ``path_yaw`` [M] the logged yaw there,
    ``path_z`` [M] ground height. Agents (A of them, steps 0..horizon): ``agent_xy`` [T+1, A, 2],
    ``agent_yaw`` [T+1, A], ``agent_vel`` [T+1, A, 2] world m/s, ``agent_present`` [T+1, A] bool,
    ``agent_size`` [A, 3]. Obstacles: ``obstacle_pose`` [O, 4], ``obstacle_size`` [O, 3]; ``box_*``
    the agents followed by the obstacles (stopped, always present), what the agents observation
    picks from. Lanes:
    ``lane_points`` [L, 3] (x, y, heading). Labels: ``expert_action`` [T+1, 2] (lateral index,
    longitudinal index), the nearest feasible bins to the expert's displacement one anchor horizon ahead at each step
    (the last step repeats the one before).
    """

    def __init__(self, scenario, horizon: int | None, spec: ActionSpec, map_spacing: float = 2.0):
        sc = scenario
        self.scenario = sc
        self.id = str(sc.id)
        self.dt = float(sc.dt)
        H = int(sc.horizon if horizon is None else min(horizon, sc.horizon))
        self.horizon = H
        ego = sc.ego
        self.ego_size = np.array([ego.length, ego.width, ego.height], dtype=np.float64)
        self.ego_lwh = (float(ego.length), float(ego.width), float(ego.height))
        self.center_offset = float(ego.center_offset)
        self.wheelbase = float(ego.wheelbase)

        poses = np.asarray(sc.expert.poses, dtype=np.float64)
        speed = np.asarray(sc.expert.speed, dtype=np.float64)
        self.start_state = np.array([poses[0, 0], poses[0, 1], poses[0, 3], speed[0]])  # x, y, yaw, v
        self.start_z = float(poses[0, 2])
        self.expert_poses = poses  # [T_e, 4], T_e >= H + 1

        # expert path with repeated points (a stopped expert) dropped: every segment has a direction
        keep = np.ones(len(poses), dtype=bool)
        last = poses[0, :2]
        for i in range(1, len(poses)):
            if np.hypot(*(poses[i, :2] - last)) > 1e-6:
                last = poses[i, :2]
            else:
                keep[i] = False
        xy, yaw, z = poses[keep, :2], poses[keep, 3], poses[keep, 2]
        if len(xy) < 2:  # the expert never moves: a short stub along its heading
            xy = np.concatenate([xy, xy + 1e-3 * np.array([[np.cos(yaw[0]), np.sin(yaw[0])]])])
            yaw, z = np.repeat(yaw, 2), np.repeat(z, 2)
        self.path_xy = np.ascontiguousarray(xy, dtype=np.float64)
        self.path_s = polyline_arclength(xy)
        self.path_yaw = np.ascontiguousarray(yaw, dtype=np.float64)
        self.path_dyaw = wrap_angle(np.diff(self.path_yaw))  # [M-1] yaw change along each segment
        self.path_z = np.ascontiguousarray(z, dtype=np.float64)

        # agents, steps 0..H
        a_poses, a_size, a_present = sc.agent_arrays()  # [A, T+1, 4], [A, 3], [A, T+1]
        a_poses = a_poses[:, : H + 1].transpose(1, 0, 2)  # [H+1, A, 4]
        a_present = a_present[:, : H + 1].T.copy()  # [H+1, A]
        self.agent_ids = tuple(a.id for a in sc.agents)
        self.agent_xy = np.ascontiguousarray(a_poses[..., :2])
        self.agent_yaw = np.ascontiguousarray(a_poses[..., 3])
        self.agent_present = np.ascontiguousarray(a_present, dtype=bool)
        self.agent_size = np.asarray(a_size, dtype=np.float64).reshape(-1, 3)
        self.agent_vel = agent_velocities(self.agent_xy, self.agent_present, self.dt)

        o_pose, o_size = sc.obstacle_arrays()
        self.obstacle_ids = tuple(o.id for o in sc.static_obstacles)
        self.obstacle_pose = np.asarray(o_pose, dtype=np.float64).reshape(-1, 4)
        self.obstacle_size = np.asarray(o_size, dtype=np.float64).reshape(-1, 3)
        # agents then obstacles (stopped, always present): what the agents observation chooses from
        A, O = len(self.agent_ids), len(self.obstacle_ids)
        self.box_xy = np.ascontiguousarray(
            np.concatenate([self.agent_xy, np.broadcast_to(self.obstacle_pose[:, :2], (H + 1, O, 2))], axis=1)
        )
        self.box_yaw = np.ascontiguousarray(
            np.concatenate([self.agent_yaw, np.broadcast_to(self.obstacle_pose[:, 3], (H + 1, O))], axis=1)
        )
        self.box_vel = np.ascontiguousarray(np.concatenate([self.agent_vel, np.zeros((H + 1, O, 2))], axis=1))
        self.box_present = np.ascontiguousarray(np.concatenate([self.agent_present, np.ones((H + 1, O), bool)], axis=1))
        self.box_size = np.ascontiguousarray(np.concatenate([self.agent_size, self.obstacle_size]))
        self.num_agents = A
        self.obstacle_present = np.ones(O, dtype=bool)

        self.lane_points = _lane_points(sc.map, map_spacing)  # [L, 3]
        self.lane_polylines = tuple(np.asarray(ln.centerline, dtype=np.float64) for ln in sc.map.lanes)
        self.road_edges = tuple(np.asarray(e, dtype=np.float64) for e in sc.map.road_edges)

        disp = np.asarray(expert_displacements(sc), dtype=np.float64)  # [T, 2] (lateral, longitudinal) m
        labels = nearest_bins(disp[:, 0], disp[:, 1], spec)  # [T, 2]
        if len(labels) < H + 1:
            labels = np.concatenate([labels, np.repeat(labels[-1:], H + 1 - len(labels), axis=0)])
        self.expert_action = np.ascontiguousarray(labels[: H + 1])
        self.expert_displacement = disp
        self._reactive: dict[ReactiveSettings, ReactiveScene] = {}

    # -- the reactive expert: labels any state (DAgger), built on first use -------------------------
    @property
    def reactive(self) -> ReactiveScene:
        """The scenario as the reactive expert reads it (``scenarios.reactive``): the route with its speed
        limits (``.route.s``, ``.route.limit`` m/s along ``.route.xy``) and these tables' agents (their
        velocities are ``agent_vel``) and obstacles. ``d.reactive.action(state, t)`` is its decision for
        the ego at state [4] (x, y, yaw, v) at step t."""
        return self.reactive_with(DEFAULT_SETTINGS)

    def reactive_with(self, settings: ReactiveSettings) -> ReactiveScene:
        """:attr:`reactive` with other settings (DAgger's labeller, ``il.labeller``), built once per settings."""
        scene = self._reactive.get(settings)
        if scene is None:
            scene = self._reactive[settings] = ReactiveScene(
                ReactiveRoute.of(self.scenario, settings), self.agent_xy, self.agent_yaw,
                np.ascontiguousarray(self.agent_size[:, :2]), self.agent_vel, self.agent_present,
                np.ascontiguousarray(self.obstacle_pose[:, :2]), np.ascontiguousarray(self.obstacle_pose[:, 3]),
                np.ascontiguousarray(self.obstacle_size[:, :2]), self.scenario.ego, self.dt, settings,
            )  # fmt: skip
        return scene

    # -- the scene: loaded per episode (``scenarios.scene`` keeps the PLYs in a bounded cache) -----
    def load_scene(self):
        """The ``sim.Scene``, PLYs read through scenarios' per-process cache."""
        return load_scene(self.scenario)

    def static_index(self, opacity_threshold: float) -> StaticIndex:
        """The background's ``sim.StaticIndex`` (static collisions), kept per background file in a bounded LRU
        of its own (:data:`STATIC_CACHE_SIZE`): an index is a few MB where its cloud is tens, so a run over many
        places keeps every index while the clouds come and go (cameras off, a cloud is read only to index it)."""
        key = (cloud_key(self.scenario.scene.background), float(opacity_threshold))
        with _static_lock:
            if key in _static_indices:
                _static_indices.move_to_end(key)
                return _static_indices[key]
        cloud = load_cloud(self.scenario.scene.background, "background")
        index = StaticIndex.from_cloud(cloud, opacity_threshold=opacity_threshold)
        with _static_lock:
            _static_indices[key] = index
            while len(_static_indices) > STATIC_CACHE_SIZE:
                _static_indices.popitem(last=False)
        return index

    # -- per-step queries (numba kernels; ``sim.geometry`` is their reference) -------------------
    def project(self, xy) -> tuple[float, float, float, float]:
        """Nearest point of the expert path to world xy [2]: (distance m, arclength s m, matched
        expert yaw rad, ground z m), yaw and z interpolated along the matched segment."""
        return project_path(
            float(xy[0]), float(xy[1]), self.path_xy, self.path_s, self.path_yaw, self.path_dyaw, self.path_z
        )

    def path_points(self, s: np.ndarray) -> np.ndarray:
        """World xy [P, 2] at arclengths s [P] along the expert path, straight on past its ends."""
        out = np.empty((len(s), 2))
        path_points(self.path_xy, self.path_s, np.asarray(s, dtype=np.float64), out)
        return out


STATIC_CACHE_SIZE = 256  # backgrounds whose static index a process keeps (train has 126 places)
_static_lock = threading.Lock()
_static_indices: OrderedDict[tuple, StaticIndex] = OrderedDict()


def _lane_points(map_data, spacing: float) -> np.ndarray:
    """Lane centre lines resampled every ``spacing`` m: [L, 3] (x, y, heading)."""
    out = []
    for ln in map_data.lanes:
        c = np.asarray(ln.centerline, dtype=np.float64)
        if len(c) < 2:
            continue
        total = polyline_arclength(c)[-1]
        if total <= 0:
            continue
        s = np.arange(0.0, total + 1e-9, spacing)
        xy, h = interpolate_polyline(c, s)
        out.append(np.concatenate([xy, h[:, None]], axis=1))
    return np.concatenate(out, axis=0) if out else np.zeros((0, 3))


class ScenarioCache:
    """Least-recently-used cache of :class:`ScenarioData` by scenario key, shared by sub-envs."""

    def __init__(self, build: Callable[[object], ScenarioData], size: int = 64):
        self._build = build
        self._size = int(size)
        self._items: OrderedDict[object, ScenarioData] = OrderedDict()

    def get(self, key, scenario) -> ScenarioData:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        data = self._build(scenario)
        self._items[key] = data
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return data

    def drop(self, key) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
