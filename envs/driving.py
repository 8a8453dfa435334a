"""``SplatDrive-v0``: closed-loop driving in a 3DGS digital twin, as RAD trains it.

One episode is one scenario (a logged clip): the ego starts on the expert's first pose and speed,
other traffic is log-replayed, and each step the agent picks an anchor (``scenarios.actions``): the ego
drives the arc to it (``sim.dynamics.anchor_to_controls``) for one step of the bicycle model
(``bicycle_step``) and re-plans. RAD's four failure events, and falling too far behind the logged
expert (``progress_deviation``, on unless ``progress_event=False``), end the episode with -1
(``envs.reward``); reaching the clip's end truncates it.

Observation: ``envs.observation``, in the mode ``config["observation"]`` (camera by default: images,
the ego's own status, navigation and speed limits from the map; "privileged": ground-truth state, the
teacher, with no elapsed time and nothing of the logged expert's drive).
``config["camera_ablation"]`` replaces the images for ablations: "blank" (flat grey) or "shuffle"
(another clip's frames: the rig's view on the expert's pose of another scenario of the pool, the one
half the pool away, at the same step; in a pool of one, the same clip half its horizon later).
Info at every reset and step:

- ``scenario`` (id), ``step`` (0..horizon), ``expert_action`` int64 [2]: the expert's IL label
  (lateral index, longitudinal index) for the observation returned with it, i.e. for the next
  action (the nearest feasible bins to ``scenarios.expert.expert_displacements`` at this step);
- ``path_distance`` (m to the expert path), ``lateral_offset`` (the same distance signed: > 0 when
  the ego is left of the path, seen along the matched expert heading), ``heading_error`` (rad, ego
  yaw minus the matched expert yaw, wrapped); ``ego_state`` float64 [4]: the ego's x, y (m, world),
  yaw (rad), speed (m/s);
- ``route_completion``: the ego's arclength along the expert path (its nearest point) divided by the
  arclength the expert covers over the whole horizon, clipped to [0, 1] (1.0 when the expert does not
  move); ``progress_lag``: metres the ego is behind the logged expert at this same step, both measured
  along the expert path (negative when ahead): what ``progress_deviation`` compares with
  ``progress_threshold``;
- at reset: ``action_mask`` bool [n_long, n_lat] (also ``env.action_mask``);
- at a step: ``reward_terms`` (dict of the named terms), ``reward_parts`` float32 [2] (lateral,
  longitudinal), ``event`` ('' or the first event's name), ``collision_location`` ('' or
  where on the ego box: front, rear, left, right, front_left, ..., see :func:`location_name`), ``collision_point``
  float32 [2] (ego box frame: x forward from the box centre, y left; zeros without a collision),
  ``collision_with`` ('' or an agent id, an obstacle id, or 'static_gaussians'),
  ``static_gaussians`` (count in the raised ego box), ``action_applied`` int64 [2] and
  ``action_projected`` (True when the lateral bin was moved to the nearest feasible one);
- ``error``: only when the scenario failed (an exception in reset or step); that episode is then
  truncated, and the scenario is charged (quarantined after ``quarantine_after`` failures).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from envs.bev import compose_frame
from envs.config import CRITIC_PREFIX, EnvConfig
from envs.kernels import (
    first_overlap,
    nearest_features,
    nearest_points,
    path_points,
    project_path,
    route_features,
    route_limits,
)
from envs.observation import LIMIT_RANGE, RoutePath, observation_space, route_command, route_path
from envs.reward import collision_part, detect_events, first_event, reward_parts, reward_terms
from envs.scenario_data import ScenarioData
from envs.suite import ScenarioPool, resolve_scenarios
from scenarios.actions import ActionSpec, nearest_bins, project_feasible
from scenarios.reactive import ReactiveSettings
from sim import rendering  # called as rendering.render: the one place envs.bench and tests count or patch
from sim.camera import make_rig
from sim.dynamics import ANCHOR_HORIZON, anchor_to_controls, bicycle_step
from sim.frames import pose_matrix
from sim.geometry import box_corners, world_to_local

log = logging.getLogger("envs")

STILL_EXPERT = 0.01  # m: an expert covering less than this over the horizon "does not move"
BLANK_GREY = 128  # camera_ablation="blank": every pixel of every camera
ROUTE_PARTS = frozenset({"navigation", "command", "route", "limits"})  # the parts read from the map's route


def expert_arclength(poses: np.ndarray, horizon: int) -> np.ndarray:
    """[horizon + 1] metres the logged expert has driven by each step 0..horizon, along its own path.

    poses: [T_e, >= 2] logged rear-axle poses (x, y first), T_e >= horizon + 1. The sum of the step
    lengths: the arclength of the expert path (``ScenarioData.path_s``) at the expert's step-t pose.
    """
    xy = np.asarray(poses, dtype=np.float64)[: horizon + 1, :2]
    out = np.zeros(len(xy))
    out[1:] = np.cumsum(np.hypot(*np.diff(xy, axis=0).T))
    return out


def check_action(action, spec: ActionSpec, where: str = "DrivingEnv.step") -> tuple[int, int]:
    """(lateral index, longitudinal index) from an action, or a ValueError saying what is wrong."""
    try:
        a = np.asarray(action)
    except (ValueError, TypeError) as e:  # ragged or odd objects: say so, not numpy's words alone
        raise ValueError(
            f"{where}: action must be 2 integers (lateral index, longitudinal index), got {action!r:.80} ({e})"
        ) from None
    if a.shape != (2,):
        raise ValueError(f"{where}: action must be 2 integers (lateral index, longitudinal index), got shape {a.shape}")
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{where}: action must be integers, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating) and not (np.isfinite(a).all() and (a == np.round(a)).all()):
        raise ValueError(f"{where}: action must be whole bin indices, got {a.tolist()}")
    lat, lon = int(a[0]), int(a[1])
    if not (0 <= lat < spec.n_lat and 0 <= lon < spec.n_long):
        raise ValueError(
            f"{where}: action {[lat, lon]} out of range: lateral index in [0, {spec.n_lat}), "
            f"longitudinal index in [0, {spec.n_long})"
        )
    return lat, lon


def advance(states: np.ndarray, lat_m: np.ndarray, long_m: np.ndarray, dts, wheelbases) -> tuple[np.ndarray, ...]:
    """One step of B egos toward their anchors: (new states [B, 4], accel [B], steer [B]).

    states: [B, 4] (x, y, yaw, v); lat_m, long_m: [B] anchors (m, ego frame); dts, wheelbases: [B].
    Egos sharing (dt, wheelbase) -- usually all -- go through one vectorised call.
    """
    B = len(states)
    new = np.empty((B, 4))
    accel = np.empty(B)
    steer = np.empty(B)
    keys = list(zip(np.asarray(dts, dtype=np.float64).tolist(), np.asarray(wheelbases, dtype=np.float64).tolist()))
    for dt, wb in sorted(set(keys)):
        idx = np.array([i for i, k in enumerate(keys) if k == (dt, wb)])
        a, s = anchor_to_controls(states[idx, 3], lat_m[idx], long_m[idx], ANCHOR_HORIZON, wb)
        new[idx] = bicycle_step(states[idx], a, s, dt, wb)
        accel[idx], steer[idx] = a, s
    return new, accel, steer


class DrivingEnv(gym.Env):
    """RAD's closed-loop driving env over a suite of scenarios (see the module docstring).

    config: a dict of overrides of :class:`envs.config.EnvConfig` (unknown keys are errors) or an
    EnvConfig; scenarios: a suite name, folder, scenario file, Scenario or list of them (default:
    ``config["suite"]``); skip_broken: overrides ``config["skip_broken"]``. Reset picks a scenario
    uniformly at random with the env's seeded generator, or ``options={"scenario": id_or_index}``.
    """

    # gymnasium's Env declares metadata an instance attribute, which a ClassVar may not override
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012 (see above)
    observation_space: spaces.Dict  # envs.observation.observation_space: a part name per key

    def __init__(
        self,
        config: dict[str, Any] | EnvConfig | None = None,
        render_mode: str | None = None,
        scenarios=None,
        *,
        skip_broken: bool | None = None,
        pool: ScenarioPool | None = None,
    ):
        cfg = EnvConfig.from_dict(config)
        if skip_broken is not None:
            cfg = dataclasses.replace(cfg, skip_broken=bool(skip_broken))
        if pool is None:
            source = scenarios if scenarios is not None else cfg.suite
            pool = ScenarioPool(resolve_scenarios(source, cfg.skip_broken), cfg)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.config = cfg
        self.pool = pool
        self.render_mode = render_mode
        self.action_spec = cfg.action_spec
        self.action_space = spaces.MultiDiscrete([self.action_spec.n_lat, self.action_spec.n_long])
        self.action_mask = self.action_spec.mask  # [n_long, n_lat] bool, read-only
        rig_name, width, height = pool.rig_spec()
        self.rig = make_rig(rig_name, width, height)
        self._Ks = self.rig.Ks()  # [C, 3, 3]
        self.observation_space = observation_space(cfg, len(self.rig), width, height)
        self._parts = frozenset(cfg.parts)
        self._grey: np.ndarray | None = None  # camera_ablation="blank": the flat grey images, made once
        # camera_history=k: the images of the last k steps, oldest first (the episode's first frame until then)
        self._history: collections.deque = collections.deque(maxlen=max(cfg.camera_history, 1))
        self._route: RoutePath | None = None  # the episode's route from the map's lanes, see episode_route
        self._nav_point = np.empty(2)  # camera mode: the navigation kernel's buffer
        # camera_ablation="shuffle": (ScenarioData, scene, step offset) of the clip whose frames are shown
        self._donor: tuple[Any, Any, int] | None = None
        self._heading_threshold = math.radians(cfg.heading_threshold_deg)
        self._progress_threshold = float(cfg.progress_threshold) if cfg.progress_event else None
        self._point = np.empty((1, 2))  # the matched path point (a reused buffer)
        self._seeded = False
        self._active = False  # an episode is running
        self._data: ScenarioData | None = None  # the current episode's tables (``_loaded`` after a reset)
        self._obs: dict[str, np.ndarray] | None = None

    @staticmethod
    def default_config() -> dict[str, Any]:
        return EnvConfig().to_dict()

    @property
    def quarantined(self) -> list[str]:
        """Scenario ids no longer sampled after repeated failures."""
        return self.pool.quarantined

    @property
    def scenario(self):
        """The current episode's Scenario (None before the first reset)."""
        return None if self._data is None else self._data.scenario

    @property
    def _loaded(self) -> ScenarioData:
        """The current episode's ScenarioData; the episode methods run only after a reset set it."""
        if self._data is None:
            raise RuntimeError("DrivingEnv: no scenario loaded; call reset() first")
        return self._data

    @property
    def _observation(self) -> dict[str, np.ndarray]:
        """The current observation (set with the scenario by every reset)."""
        if self._obs is None:
            raise RuntimeError("DrivingEnv: no observation yet; call reset() first")
        return self._obs

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None and not self._seeded and self.config.seed is not None:
            seed = self.config.seed
        super().reset(seed=seed)
        self._seeded = True
        info = self._reset_state(options)
        errors = []
        while True:  # a scene that fails to render is charged like one that fails to load
            try:
                request = self._camera_request()
                if request is not None:
                    self._set_cameras(self._render_one(*request))
                break
            except Exception as e:
                msg = self.pool.record_failure(self._k, e)
                if options and options.get("scenario") is not None:
                    raise RuntimeError(f"DrivingEnv.reset: {msg}") from e
                errors.append(msg)
                info = self._reset_state(None)
        if errors:
            info["error"] = " | ".join(errors + ([info["error"]] if "error" in info else []))
        return self._obs, info

    def step(self, action):
        if not self._active:
            raise RuntimeError("DrivingEnv.step: no episode is running; call reset() first")
        lat_i, long_i = check_action(action, self.action_spec)
        try:
            lat_p, projected = project_feasible(lat_i, long_i, self.action_spec)
            lat_m, long_m = float(self.action_spec.lateral[lat_p]), float(self.action_spec.longitudinal[long_i])
            d = self._loaded
            new, accel, steer = advance(self._state[None], np.array([lat_m]), np.array([long_m]), [d.dt], [d.wheelbase])
            reward, terminated, truncated, info = self._after_dynamics(
                new[0], float(accel[0]), float(steer[0]), lat_m, long_m, (int(lat_p), long_i), bool(projected)
            )
            request = self._camera_request()
            if request is not None:
                self._set_cameras(self._render_one(*request))
        except Exception as e:  # the scenario broke: end its episode, keep the process going
            return self._fail_step(e)
        return self._obs, reward, terminated, truncated, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._data is None:
            raise RuntimeError("DrivingEnv.render: call reset() first")
        cams = self._obs.get("cameras") if self._obs is not None else None
        if cams is None:
            request = self._camera_request(force=True)
            cams = self._render_one(*request)
        return compose_frame(self, cams[: len(self.rig)])  # now (camera_history stacks earlier images after)

    def close(self):
        self._active = False

    # -- episode state ---------------------------------------------------------------------------
    def _reset_state(self, options: dict | None) -> dict:
        """Pick a scenario and put the ego on its start; returns the reset info. A scenario that
        fails to start is charged and another is drawn (one asked for by name raises instead)."""
        options = dict(options or {})
        unknown = set(options) - {"scenario"}
        if unknown:
            raise ValueError(f"DrivingEnv.reset: unknown options {sorted(unknown)}; known: scenario")
        errors = []
        while True:
            asked = "scenario" in options and options["scenario"] is not None
            k = self.pool.index_of(options["scenario"]) if asked else self.pool.sample(self.np_random)
            try:
                self._start(k)
                break
            except Exception as e:
                msg = self.pool.record_failure(k, e)
                if asked:
                    raise RuntimeError(f"DrivingEnv.reset: {msg}") from e
                errors.append(msg)
        info = self._info_common()
        info["action_mask"] = self.action_mask.copy()
        if errors:
            info["error"] = " | ".join(errors)
        return info

    def _start(self, k: int) -> None:
        cfg = self.config
        self._active = False
        d = self.pool.data(k)
        self._k, self._data = k, d
        need_scene = "cameras" in self._parts or self.render_mode is not None
        self._scene = d.load_scene() if need_scene else None
        self._static = None
        if cfg.static_gaussians:
            self._static = d.static_index(cfg.static_opacity_threshold)
            L, W, H = d.ego_lwh
            lwh = np.array([[L, W, max(H - cfg.static_lift, 0.0)]])
            self._query = (np.zeros((1, 3)), np.eye(3)[None].copy(), lwh)
        self._t = 0
        self._expert_s = expert_arclength(d.expert_poses, d.horizon)  # [H + 1] m, the log's progress
        self._expert_total = float(self._expert_s[-1])
        self._state = d.start_state.copy()
        self._accel = self._steer = self._yaw_rate = 0.0
        self._last_event = ""
        self._last = (0.0, float(d.start_state[3]) * ANCHOR_HORIZON)  # the anchor that holds the speed
        self._route = None  # made on first use (episode_route)
        if cfg.camera_ablation == "shuffle":  # the clip half the pool away; alone, itself half its horizon on
            n = len(self.pool)
            other = self.pool.data((k + n // 2) % n) if n > 1 else d
            offset = 0 if n > 1 else (d.horizon + 1) // 2
            self._donor = (other, other.load_scene() if "cameras" in self._parts else None, offset)
        self._measure()
        self._history.clear()
        self._obs = self._observe()
        self._active = True

    def _measure(self) -> None:
        """Path distance and its side, arclength, heading error, ground height and progress at the
        current state (step ``self._t``)."""
        d = self._loaded
        x, y = float(self._state[0]), float(self._state[1])
        dist, s, yaw, z = d.project(self._state[:2])
        self._dist, self._s, self._z = dist, s, z
        self._heading_err = float((self._state[2] - yaw + math.pi) % (2 * math.pi) - math.pi)
        path_points(d.path_xy, d.path_s, np.array([s]), self._point)
        left = -math.sin(yaw) * (x - self._point[0, 0]) + math.cos(yaw) * (y - self._point[0, 1])
        self._lateral = float(math.copysign(dist, left)) if left != 0.0 else 0.0
        total = self._expert_total
        self._completion = 1.0 if total < STILL_EXPERT else float(min(max(s / total, 0.0), 1.0))
        self._lag = float(self._expert_s[min(self._t, len(self._expert_s) - 1)] - s)

    def _after_dynamics(self, new, accel, steer, lat_m, long_m, applied, projected):
        """Advance the episode to the new ego state; events, reward, observation (cameras apart)."""
        d, cfg = self._loaded, self.config
        old = self._state
        dyaw = (new[2] - old[2] + math.pi) % (2 * math.pi) - math.pi
        self._yaw_rate = float(dyaw / d.dt)
        self._accel = float((new[3] - old[3]) / d.dt)
        self._steer = float(steer)
        self._last = (lat_m, long_m)
        self._state = np.asarray(new, dtype=np.float64)
        self._t += 1
        self._measure()
        hit = self._collisions()
        events = detect_events(
            hit["dynamic"],
            hit["static"],
            self._dist,
            self._heading_err,
            cfg.position_threshold,
            self._heading_threshold,
            self._lag,
            self._progress_threshold,
        )
        terms = reward_terms(events)
        terminated = any(events.values())
        truncated = (not terminated) and self._t >= d.horizon
        self._active = not (terminated or truncated)
        self._last_event = first_event(events)
        self._obs = self._observe()
        info = self._info_common()
        info.update(
            reward_terms=terms,
            reward_parts=reward_parts(terms, collision_part(hit["location"], cfg.collision_credit)),
            event=self._last_event,
            collision_location=hit["location"],
            collision_point=hit["point"],
            collision_with=hit["with"],
            static_gaussians=hit["count"],
            action_applied=np.array(applied, dtype=np.int64),
            action_projected=projected,
        )
        return float(sum(terms.values())), terminated, truncated, info

    def _fail_step(self, e: Exception):
        msg = self.pool.record_failure(self._k, e)
        self._active = False
        obs = self._obs if self._obs is not None else self.observation_space.sample()
        info = {"scenario": self._data.id if self._data is not None else "", "error": msg}
        return obs, 0.0, False, True, info

    def _info_common(self) -> dict:
        d = self._loaded
        return {
            "scenario": d.id,
            "step": self._t,
            "expert_action": d.expert_action[min(self._t, d.horizon)].copy(),
            "path_distance": self._dist,
            "lateral_offset": self._lateral,
            "heading_error": self._heading_err,
            "route_completion": self._completion,
            "progress_lag": self._lag,
            "ego_state": self._state.copy(),  # float64 [4]: x, y (m, world), yaw (rad), speed (m/s)
        }

    # -- geometry --------------------------------------------------------------------------------
    def ego_box(self) -> tuple[np.ndarray, float, np.ndarray]:
        """(centre xy [2], yaw, size [3] length, width, height) of the ego box now (world)."""
        d = self._loaded
        yaw = float(self._state[2])
        c = self._state[:2] + d.center_offset * np.array([math.cos(yaw), math.sin(yaw)])
        return c, yaw, d.ego_size

    def _collisions(self) -> dict:
        """Ego box against the agents (dynamic), the obstacle boxes and the static Gaussians (static)."""
        d, cfg, t = self._loaded, self.config, self._t
        x, y, yaw = float(self._state[0]), float(self._state[1]), float(self._state[2])
        cy, sy = math.cos(yaw), math.sin(yaw)
        cx, cyy = x + d.center_offset * cy, y + d.center_offset * sy  # ego box centre
        L, W, _ = d.ego_lwh
        dynamic = static = False
        point, other, count = None, "", 0
        j = first_overlap(cx, cyy, yaw, L, W, d.agent_xy[t], d.agent_yaw[t], d.agent_size, d.agent_present[t])
        if j >= 0:
            dynamic, other = True, d.agent_ids[j]
            point = contact_point((cx, cyy), yaw, (L, W), d.agent_xy[t, j], d.agent_yaw[t, j], d.agent_size[j, :2])
        if cfg.static_obstacle_boxes and d.obstacle_present.size:
            o = d.obstacle_pose
            j = first_overlap(cx, cyy, yaw, L, W, o[:, :2], o[:, 3], d.obstacle_size, d.obstacle_present)
            if j >= 0:
                static = True
                if point is None:
                    point = contact_point((cx, cyy), yaw, (L, W), o[j, :2], o[j, 3], d.obstacle_size[j, :2])
                    other = d.obstacle_ids[j]
        if self._static is not None:
            q = self._query  # (bottom centre [1, 3], rotation [1, 3, 3], size [1, 3]), reused
            q[0][0] = (cx, cyy, self._z + cfg.static_lift)
            q[1][0, 0, 0], q[1][0, 0, 1], q[1][0, 1, 0], q[1][0, 1, 1] = cy, -sy, sy, cy
            # the index's kernel without hits_in_boxes' argument checks (these boxes are well formed)
            counts, sums = self._static._run(*q)
            count = int(counts[0])
            if count >= cfg.static_min_gaussians:
                if point is None:
                    point, other = (sums[0, :2] / count).astype(np.float32), "static_gaussians"
                static = True
        hit = {"dynamic": dynamic, "static": static, "with": other, "count": count}
        if point is None:
            hit.update(point=np.zeros(2, np.float32), location="")
        else:
            hit.update(point=point, location=location_name(point, 0.5 * L, 0.5 * W))
        return hit

    # -- observation -----------------------------------------------------------------------------
    def observe_as(self, mode: str, parts) -> dict[str, np.ndarray]:
        """The current state observed in another mode (``envs.observation``) with the given parts (no cameras):
        what a privileged teacher reads of the states a camera policy visits (``rollout.teachers``). The
        episode is not touched."""
        if mode not in ("camera", "privileged") or "cameras" in parts:
            raise ValueError(f"observe_as: mode camera or privileged and parts without cameras, got {mode!r}, {parts}")
        if self._obs is None:
            raise RuntimeError("DrivingEnv.observe_as: call reset() first")
        return self._observe(frozenset(parts), mode)

    def episode_route(self) -> RoutePath:
        """The episode's route from the map's lanes (what navigation, command, route and limits read, in the
        policy's view, the critic's and ``observe_as``'s alike), made once per episode on first use."""
        if self._route is None:
            self._route = route_path(self._loaded.scenario)
        return self._route

    def _observe(self, on=None, mode: str | None = None) -> dict[str, np.ndarray]:
        """The observation of the current state, in the config's mode (``envs.observation``); the cameras
        are the previous images until ``_set_cameras`` gets the new ones from the render call. ``on``, ``mode``:
        other parts and mode (``observe_as``, the asymmetric critic's view)."""
        d, cfg, t = self._loaded, self.config, self._t
        critic = cfg.critic if on is None else ()  # the asymmetric critic's parts: the config's own view only
        on = self._parts if on is None else on
        mode = cfg.observation if mode is None else mode
        ex, ey, yaw, v = self._state.tolist()
        obs: dict[str, np.ndarray] = {}
        if "cameras" in on:
            prev = self._obs.get("cameras") if self._obs is not None else None
            # the previous images, replaced by _set_cameras after the render call; the key keeps its place
            # (first, as in the observation space) even before an env's first render, when it holds None
            obs["cameras"] = prev  # type: ignore[assignment]  # None before the first render (see above)
        if "ego" in on and mode == "camera":  # what the car measures of itself
            obs["ego"] = np.array([v, self._yaw_rate, self._accel, self._steer], dtype=np.float32)
        elif "ego" in on:  # and the anchor it applied last; no elapsed time
            obs["ego"] = np.array(
                [v, self._yaw_rate, self._accel, self._steer, self._last[0], self._last[1]], dtype=np.float32
            )
        if on & ROUTE_PARTS:  # the map's route, from where the ego is on it (never the expert's drive)
            nav = self.episode_route()
            _, s0, _, _ = project_path(ex, ey, nav.xy, nav.s, nav.yaw, nav.dyaw, nav.z)
            if "navigation" in on:
                points = np.empty((cfg.navigation_points, 2), np.float32)
                route_features(ex, ey, yaw, nav.xy, nav.s, s0, cfg.navigation_spacing, points)
                obs["navigation"] = points
            if "command" in on:
                obs["command"] = route_command(nav, s0)
            if "route" in on:
                route = np.empty((cfg.route_points, 2), np.float32)
                route_features(ex, ey, yaw, nav.xy, nav.s, s0, cfg.route_spacing, route)
                obs["route"] = route
            if "limits" in on:
                limits = np.empty(3, np.float32)
                route_limits(nav.s, nav.limit, s0, LIMIT_RANGE, limits)
                obs["limits"] = limits
        if "agents" in on:
            feats = np.zeros((cfg.max_agents, 8), np.float32)
            mask = np.zeros(cfg.max_agents, np.float32)
            n = d.box_xy.shape[1] if cfg.obstacles_as_agents else d.num_agents
            nearest_features(
                ex, ey, yaw, d.box_xy[t, :n], d.box_yaw[t, :n], d.box_size[:n], d.box_vel[t, :n],
                d.box_present[t, :n], cfg.agent_radius, feats, mask, 0,
            )  # fmt: skip
            obs["agents"], obs["agents_mask"] = feats, mask
        if "map" in on:
            feats = np.zeros((cfg.map_points, 4), np.float32)
            mask = np.zeros(cfg.map_points, np.float32)
            nearest_points(ex, ey, yaw, d.lane_points, cfg.map_radius, feats, mask)
            obs["map"], obs["map_mask"] = feats, mask
        if critic:
            for key, value in self._observe(frozenset(critic), "privileged").items():
                obs[CRITIC_PREFIX + key] = value
        return obs

    def observe_state(
        self,
        scenario: int | str,
        step: int,
        state,
        *,
        yaw_rate: float = 0.0,
        accel: float = 0.0,
        steer: float = 0.0,
        last_anchor: tuple[float, float] | None = None,
        cameras: bool = True,
    ) -> dict[str, np.ndarray]:
        """Put the env on ``scenario`` (pool index or id) at ``step`` with the ego in ``state`` and return the
        observation of that state; an episode then runs from there (``step`` continues it).

        state: [4] (x, y, yaw, v) of the rear axle (world m, rad, m/s); yaw_rate (rad/s), accel (m/s^2) and
        steer (rad): the ego's motion on arriving there, as its ``ego`` part reports it; last_anchor: the
        (lateral, longitudinal) anchor in metres of the action that led there (privileged ``ego``; default: the
        anchor that holds the speed). cameras=False leaves ``obs["cameras"]`` None: render
        :meth:`camera_request` of several states in one call (:func:`render_requests`) and put the images in.
        What demonstrations need: the observation had the ego driven the expert's path up to ``step``.
        """
        k = self.pool.index_of(scenario) if isinstance(scenario, str) else int(scenario)
        if self._data is None or self._k != k:
            self._start(k)
        d = self._loaded
        if not 0 <= int(step) <= d.horizon:
            raise ValueError(f"DrivingEnv.observe_state: step must lie in [0, {d.horizon}], got {step}")
        st = np.asarray(state, dtype=np.float64)
        if st.shape != (4,) or not np.isfinite(st).all():
            raise ValueError(f"DrivingEnv.observe_state: state must be 4 finite numbers (x, y, yaw, v), got {state!r}")
        self._t = int(step)
        self._state = st.copy()
        self._yaw_rate, self._accel, self._steer = float(yaw_rate), float(accel), float(steer)
        if last_anchor is None:
            self._last = (0.0, float(st[3]) * ANCHOR_HORIZON)
        else:
            self._last = (float(last_anchor[0]), float(last_anchor[1]))
        self._last_event = ""
        self._measure()
        self._obs = None  # no previous images: the cameras part is None until rendered
        self._history.clear()
        self._obs = self._observe()
        self._active = self._t < d.horizon
        if cameras and "cameras" in self._parts:
            request = self._camera_request()
            assert request is not None  # the cameras part is on
            self._set_cameras(self._render_one(*request))
        return self._obs

    def reactive_label(self, settings: ReactiveSettings | None = None) -> np.ndarray:
        """The reactive expert's action for the current state: int64 [2] (lateral index, longitudinal index) on
        this env's bins, the nearest feasible pair to its target displacement over the next 0.5 s
        (``scenarios.reactive``: it reads only what is observable now). The label of any state a policy
        reaches (DAgger). ``settings``: the expert's (``scenarios.ReactiveSettings``; None: the defaults, the
        ``reactive`` baseline's)."""
        d = self._loaded
        scene = d.reactive if settings is None else d.reactive_with(settings)
        row = scene.actions(self._state[None], self._t)[0]  # [lateral m, longitudinal m, ...]
        return nearest_bins(row[0], row[1], self.action_spec)

    def camera_request(self):
        """(Composite, viewmats [C, 4, 4], far plane) of the current state, for :func:`render_requests`
        (None when the cameras part is off)."""
        return self._camera_request()

    def view_request(self, k: int, t: int, x: float, y: float, yaw: float):
        """(Composite, viewmats [C, 4, 4], far plane) of the rig on scenario k (pool index) at step t with
        the ego at (x, y, yaw) (world; the ground height of the expert path's nearest point): what the
        cameras see there, for ``sim.render``. The env's episode is not touched (perception frames)."""
        d = self.pool.data(k)
        z = d.project(np.array([x, y]))[3]
        comp = d.load_scene().compose(min(int(t), d.horizon))
        return comp, self.rig.viewmats(pose_matrix(x, y, z, yaw)), float(d.scenario.render_distance)

    def world_T_ego(self) -> np.ndarray:
        return pose_matrix(self._state[0], self._state[1], self._z, self._state[2])

    def _camera_request(self, force: bool = False):
        """(Composite, viewmats [C, 4, 4], far plane) to render for the current state, or None.

        camera_ablation="shuffle": the other clip's scene at this step, seen from its expert's pose."""
        if not ("cameras" in self._parts or force):
            return None
        if self._donor is not None:
            other, scene, offset = self._donor
            if scene is None:
                scene = other.load_scene()
                self._donor = (other, scene, offset)
            t = (self._t + offset) % (other.horizon + 1) if offset else min(self._t, other.horizon)
            x, y, z, yaw = (float(v) for v in other.expert_poses[t])
            viewmats = self.rig.viewmats(pose_matrix(x, y, z, yaw))
            return scene.compose(t), viewmats, float(other.scenario.render_distance)
        d = self._loaded
        if self._scene is None:
            self._scene = d.load_scene()
        comp = self._scene.compose(min(self._t, d.horizon))
        return comp, self.rig.viewmats(self.world_T_ego()), float(d.scenario.render_distance)

    def _render_one(self, comp, viewmats, far) -> np.ndarray:
        r, c = self.rig, self.config
        out = rendering.render(comp, viewmats, self._Ks, r.width, r.height, backend=c.render_backend, far_plane=far)
        return rgb_to_uint8(out.rgb)

    def _set_cameras(self, images: np.ndarray) -> None:
        if "cameras" not in self._parts:
            return
        if self.config.camera_ablation == "blank":  # the render call still runs: every caller renders alike
            if self._grey is None or self._grey.shape != images.shape:
                self._grey = np.full(images.shape, BLANK_GREY, np.uint8)
            images = self._grey
        k = self.config.camera_history
        if k:  # now, then k steps ago (the oldest kept while the episode is younger than k steps)
            past = self._history[0] if self._history else images
            self._history.append(images)
            images = np.concatenate([images, past])
        self._observation["cameras"] = images


def render_requests(requests, rig, Ks, backend: str) -> np.ndarray:
    """[S, C, H, W, 3] uint8 images of S camera requests (Composite, viewmats [C, 4, 4], far plane) in ONE
    ``sim.render`` call (every camera of every request; one batched gsplat call on a GPU). rig: the
    ``sim.camera`` rig (its width and height), Ks: [C, 3, 3]; the far plane is the largest asked for."""
    comps = [c for c, _, _ in requests]
    vms = torch.stack([torch.as_tensor(v) for _, v, _ in requests])
    far = max(f for _, _, f in requests)
    out = rendering.render(comps, vms, Ks, rig.width, rig.height, backend=backend, far_plane=far)
    return rgb_to_uint8(out.rgb)


def rgb_to_uint8(rgb) -> np.ndarray:
    """``RenderOutput.to_uint8`` in numpy, on the host: the same rounding, bit for bit, without torch's
    thread pool (which, next to numba's busy renderer threads on a small machine, took ~30 ms for a
    few hundred kilobytes)."""
    a = rgb.detach().cpu().numpy() if hasattr(rgb, "detach") else np.asarray(rgb)
    return (np.clip(a, 0.0, 1.0) * np.float32(255.0) + np.float32(0.5)).astype(np.uint8)


def contact_point(c, yaw, size, oc, oyaw, osize) -> np.ndarray:
    """Where box o overlaps the ego box, in the ego box frame (x forward, y left from its centre):
    the centroid of the overlap polygon (the other box clipped to the ego box); where the boxes only
    touch, the mean of the touching polygon's vertices. float32 [2]."""
    hl, hw = 0.5 * float(size[0]), 0.5 * float(size[1])
    poly = world_to_local(box_corners(oc, oyaw, osize), c, yaw)  # [4, 2], counter-clockwise
    # Sutherland-Hodgman against the ego box's four half-planes, n . p <= h
    for n, h in (((1.0, 0.0), hl), ((-1.0, 0.0), hl), ((0.0, 1.0), hw), ((0.0, -1.0), hw)):
        if len(poly) == 0:
            break
        d = poly @ np.array(n) - h  # <= 0 inside
        out = []
        for i in range(len(poly)):
            p, q, dp, dq = poly[i], poly[(i + 1) % len(poly)], d[i], d[(i + 1) % len(poly)]
            if dp <= 0:
                out.append(p)
            if (dp < 0 < dq) or (dq < 0 < dp):
                out.append(p + (q - p) * (dp / (dp - dq)))
        poly = np.array(out).reshape(-1, 2)
    if len(poly) == 0:  # no overlap after rounding: the other box's centre, clipped to the ego box
        m = world_to_local(np.asarray(oc, dtype=np.float64), c, yaw)
        return np.clip(m, [-hl, -hw], [hl, hw]).astype(np.float32)
    x, y = poly[:, 0], poly[:, 1]
    xn, yn = np.roll(x, -1), np.roll(y, -1)
    cross = x * yn - xn * y
    area = 0.5 * cross.sum()
    if abs(area) < 1e-12:
        return poly.mean(axis=0).astype(np.float32)
    centroid = np.array([((x + xn) * cross).sum(), ((y + yn) * cross).sum()]) / (6.0 * area)
    return centroid.astype(np.float32)


def location_name(point, half_length: float, half_width: float) -> str:
    """Where an ego-box-frame point [2] lies on the box: 'front' or 'rear' when it is in the outer
    three quarters of the half-length, then 'left' or 'right' likewise for the half-width, joined
    by '_' (e.g. 'front', 'front_left', 'rear_right', 'left'); 'centre' when neither."""
    x, y = float(point[0]), float(point[1])
    parts = []
    if abs(x) > 0.25 * half_length:
        parts.append("front" if x > 0 else "rear")
    if abs(y) > 0.25 * half_width:
        parts.append("left" if y > 0 else "right")
    return "_".join(parts) or "centre"
