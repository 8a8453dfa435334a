"""The environment's configuration: one frozen dataclass of defaults; unknown keys are errors.

HighwayEnv style: ``DrivingEnv(config={"cameras": False})`` overrides some defaults and keeps the
rest; ``EnvConfig.from_dict`` is ``sim.configs.from_dict``, the loader of every config: it rejects keys
it does not know (suggesting the nearest) and converts values to the field types. Each field's help is
what ``python -m learner.train --help`` lists under ``env.*``. ``default_config()`` is the dict of
defaults (what ``DrivingEnv.default_config()`` returns).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envs.reward import COLLISION_CREDITS
from scenarios.actions import ActionSpec
from sim.configs import ConfigError, coerce_fields, field, to_dict
from sim.configs import from_dict as load_config

PARTS = ("cameras", "ego", "route", "limits", "agents", "map")  # the part switches
OBSERVATION_MODES = ("camera", "privileged")
# the parts each mode observes (envs.observation); navigation and command are camera mode's route
MODE_PARTS = {"camera": ("cameras", "ego", "navigation", "command", "limits"), "privileged": PARTS}
PART_SWITCH = {"navigation": "route", "command": "route"}  # the switch of a part not named as one
CAMERA_ABLATIONS = ("none", "blank", "shuffle")
CRITIC_PARTS = ("ego", "route", "limits", "agents", "map")  # privileged parts an asymmetric critic may read
CRITIC_PREFIX = "critic_"  # their observation keys: critic_agents, critic_agents_mask, ... (envs.observation)


@dataclass(frozen=True)
class EnvConfig:
    """Settings of ``SplatDrive-v0``. Distances in metres, angles in degrees, times in steps."""

    # -- scenarios -------------------------------------------------------------------------------
    suite: str = field(
        "train",
        help="Scenarios when none are passed: a built-in suite name (train, val, test: generated on first "
        "use) or a prefix of one (train:256, its first 256 clips: only the shards holding them are built), a "
        "suite directory or a scenario file.",
    )
    skip_broken: bool = field(False, help="Skip scenario files that fail to load (each is logged) instead of raising.")
    quarantine_after: int = field(
        2,
        help="Failures (exceptions in reset/step) after which a scenario is no longer sampled.",
    )
    cache_size: int = field(
        64,
        help="Scenarios whose scene, static index and tables are kept in memory (least recently used out).",
    )
    seed: int | None = field(None, help="Default seed of the scenario sampler when reset() gets none.")
    horizon: int | None = field(None, help="Episode length in steps; None: each scenario's own (its clip's length).")

    # -- observation -----------------------------------------------------------------------------
    observation: str = field(
        "camera",
        help="What the policy observes (``envs.observation``): \"camera\", a car's view -- the rig's images, the"
        " ego's own status (speed, yaw rate, acceleration, steering), navigation from the map's route "
        "lanes (coarse route points and a route command) and the speed limits along the route (now, next, "
        'metres to the change); or "privileged", ground truth, the teacher / upper bound -- the images, the '
        "ego with its last action, points along the route lanes' centre line ahead, the speed limits, the "
        "agents and the lane map (no elapsed time, nothing of the logged expert's drive). The mode picks the "
        "part set; the switches below only switch parts of it off (``route`` switches navigation and command"
        " off in camera mode; ``agents`` and ``map`` are not in it).",
    )
    cameras: bool = field(True, help="observe the rig's images (part cameras)")
    ego: bool = field(True, help="observe the ego's own state (part ego)")
    route: bool = field(
        True,
        help="observe the route ahead: points along the route lanes' centre line (route) in privileged mode, "
        "navigation and command in camera mode",
    )
    limits: bool = field(
        True,
        help="observe the speed limits along the route (part limits, both modes): the limit now, the next "
        "different one ahead and the metres to it (``envs.observation.LIMIT_RANGE`` at most)",
    )
    agents: bool = field(True, help="observe the nearest agents (part agents; privileged mode)")
    map: bool = field(True, help="observe the nearest lane-centre points (part map; privileged mode)")
    camera_ablation: str = field(
        "none",
        help='Images for ablations (evaluation): "none"; "blank", flat grey (128); "shuffle", another clip\'s '
        "frames (what the rig sees on the expert's pose of another scenario of the pool at the same "
        "step; in a pool of one clip, the same clip half its horizon later).",
    )
    critic: tuple[str, ...] = field(
        (),
        help="Privileged parts for an asymmetric critic (any of ego, route, limits, agents, map): the state's "
        "ground truth in privileged mode's shapes, emitted beside the observation under 'critic_<key>' "
        "(critic_agents, critic_agents_mask, ...). Only the value function reads them (``policy.critic=separate``"
        "), while training: the policy's actions never depend on them, and evaluation and exports drop them.",
    )
    camera_history: int = field(
        0,
        help="Camera mode: 0, the images of now; k > 0, the rig's images of k steps earlier stacked after them "
        "(cameras [2C, H, W, 3]: now, then k steps ago; the first frame of an episode until it is k steps old), "
        "so an encoder can see motion (``policy.camera_encoder=lift`` lifts both into the bird's-eye grid). "
        "One render per step all the same: the earlier images are kept, not rendered again.",
    )
    navigation_points: int = field(
        5,
        help="Camera mode: route points ahead along the route's lane centres (``navigation``).",
    )
    navigation_spacing: float = field(10.0, help="Camera mode: metres between the navigation points.")
    rig: str | None = field(None, help="Camera rig name (``sim.RIGS``); None: the scenarios' own.")
    resolution: tuple[int, int] | None = field(None, help="(width, height) per camera; None: the scenarios' own.")
    render_backend: str = field("auto", help="``sim.render`` backend: auto, gsplat, cpu or reference.")
    max_agents: int = field(8, help="K: agents observed (nearest first).")
    agent_radius: float = field(60.0, help="Agents farther than this from the ego are not observed.")
    obstacles_as_agents: bool = field(True, help="Observe static obstacle boxes as (stopped) agents too.")
    map_points: int = field(64, help="M: nearest lane-centre points observed.")
    map_spacing: float = field(2.0, help="Spacing of the lane-centre points.")
    map_radius: float = field(50.0, help="lane-centre points farther than this from the ego are not observed")
    route_points: int = field(10, help="Privileged mode: P, points ahead along the route lanes' centre line (route).")
    route_spacing: float = field(5.0, help="Privileged mode: metres between the route points.")

    # -- actions ---------------------------------------------------------------------------------
    n_lat: int = field(61, help="lateral action bins, evenly spaced over [-lat_max, lat_max]")
    lat_max: float = field(0.75, help="largest lateral anchor offset, metres (left positive)")
    n_long: int = field(61, help="longitudinal action bins, evenly spaced over [0, long_max]")
    long_max: float = field(15.0, help="largest longitudinal anchor distance, metres forward")

    # -- termination (RAD) -----------------------------------------------------------------------
    position_threshold: float = field(
        2.0,
        help="Position deviation: distance to the expert path above this ends the episode.",
    )
    heading_threshold_deg: float = field(
        40.0,
        help="Heading deviation: heading error to the matched expert pose above this ends the episode.",
    )
    static_opacity_threshold: float = field(
        0.5,
        help="Static Gaussians with opacity above this count for static collisions.",
    )
    static_min_gaussians: int = field(
        8,
        help="Static collision when at least this many such Gaussians lie in the (raised) ego box.",
    )
    static_lift: float = field(
        0.3,
        help="The ego box for the Gaussian query starts this high above the ground (kerbs, road paint).",
    )
    static_obstacle_boxes: bool = field(
        True,
        help="Also count overlap with the scenario's static obstacle boxes as a static collision.",
    )
    static_gaussians: bool = field(True, help="Query the background Gaussians for static collisions (StaticIndex).")
    progress_event: bool = field(
        True,
        help="Progress deviation (not one of RAD's events; false for RAD-exact runs): falling more than "
        "``progress_threshold`` behind the logged expert ends the episode.",
    )
    collision_credit: str = field(
        "location",
        help="Reward part a dynamic collision is credited to: 'location' (a hit on a side alone is the lateral "
        "part's, the front, rear and corners the longitudinal part's) or 'rad' (always longitudinal, as RAD).",
    )
    progress_threshold: float = field(
        10.0,
        help="Progress deviation: metres behind the logged expert at the same step, along its path, above "
        'which the episode ends (why this default: scenarios/README.md, "Progress").',
    )

    # -- render_mode="rgb_array" -----------------------------------------------------------------
    bev_pixels: int = field(256, help="Side of the bird's-eye view, pixels.")
    bev_range: float = field(30.0, help="Half side of the bird's-eye view, metres (heading up).")

    def __post_init__(self):
        def bad(field: str, want: str):
            raise ValueError(f"EnvConfig.{field}: expected {want}, got {getattr(self, field)!r}")

        coerce_fields(self)  # every field its declared type (numpy scalars made plain), or an error naming it
        if self.observation not in OBSERVATION_MODES:
            bad("observation", " or ".join(repr(m) for m in OBSERVATION_MODES))
        if self.camera_ablation not in CAMERA_ABLATIONS:
            bad("camera_ablation", " or ".join(repr(m) for m in CAMERA_ABLATIONS))
        if self.collision_credit not in COLLISION_CREDITS:
            bad("collision_credit", " or ".join(repr(m) for m in COLLISION_CREDITS))
        for f in (
            "max_agents",
            "map_points",
            "route_points",
            "navigation_points",
            "quarantine_after",
            "cache_size",
            "bev_pixels",
        ):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(f, "an int >= 1")
        if not isinstance(self.static_min_gaussians, int) or self.static_min_gaussians < 1:
            bad("static_min_gaussians", "an int >= 1")
        for f in (
            "agent_radius",
            "map_spacing",
            "map_radius",
            "route_spacing",
            "navigation_spacing",
            "position_threshold",
            "heading_threshold_deg",
            "progress_threshold",
            "bev_range",
        ):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                bad(f, "a positive number")
        if not (isinstance(self.static_lift, int | float) and 0 <= self.static_lift):
            bad("static_lift", "a number >= 0 (metres)")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 1):
            bad("horizon", "None or an int >= 1 (steps)")
        unknown = [p for p in self.critic if p not in CRITIC_PARTS]
        if unknown or len(set(self.critic)) != len(self.critic):
            bad("critic", f"distinct parts among {', '.join(CRITIC_PARTS)}")
        object.__setattr__(self, "critic", tuple(p for p in CRITIC_PARTS if p in self.critic))  # one order
        if not (isinstance(self.camera_history, int) and 0 <= self.camera_history <= 50):
            bad("camera_history", "an int in [0, 50] (steps)")
        if self.resolution is not None:
            r = self.resolution
            if not (len(r) == 2 and all(isinstance(v, int) and v > 0 for v in r)):
                bad("resolution", "None or (width, height) positive ints")
            object.__setattr__(self, "resolution", (int(r[0]), int(r[1])))
        if self.render_backend not in ("auto", "gsplat", "cpu", "reference"):
            bad("render_backend", "one of auto, gsplat, cpu, reference")
        if self.seed is not None and not isinstance(self.seed, int):
            bad("seed", "None or an int")
        self.action_spec  # validates the bins  # noqa: B018

    @property
    def action_spec(self) -> ActionSpec:
        return ActionSpec(self.n_lat, self.lat_max, self.n_long, self.long_max)

    @property
    def parts(self) -> tuple[str, ...]:
        """The observation parts switched on: the mode's part set (``MODE_PARTS``) less the parts whose
        switch is off (camera mode's navigation and command follow ``route``)."""
        return tuple(p for p in MODE_PARTS[self.observation] if getattr(self, PART_SWITCH.get(p, p)))

    @staticmethod
    def from_dict(d: Mapping[str, Any] | EnvConfig | None = None, **overrides) -> EnvConfig:
        """Defaults updated by ``d`` and ``overrides``: ``sim.configs.from_dict``, the one loader of every
        config (unknown keys are errors with the nearest valid one, values converted to the field types);
        errors are ``sim.configs.ConfigError`` (a ValueError) starting with ``EnvConfig``."""
        if isinstance(d, EnvConfig):
            if not overrides:
                return d
            d = d.to_dict()
        if d is not None and not isinstance(d, Mapping):
            raise ConfigError(f"EnvConfig: expected a mapping of settings, got {type(d).__name__}")
        try:
            return load_config(EnvConfig, {**(d or {}), **overrides})
        except ConfigError as e:
            raise ConfigError(str(e) if str(e).startswith("EnvConfig") else f"EnvConfig: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (tuples as lists): what is saved with a run and read back by ``from_dict``."""
        return to_dict(self)


def default_config() -> dict[str, Any]:
    """The defaults as a plain dict (HighwayEnv's ``default_config``)."""
    return EnvConfig().to_dict()
