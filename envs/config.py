"""The environment's configuration: one frozen dataclass of defaults; unknown keys are errors.

HighwayEnv style: ``DrivingEnv(config={"cameras": False})`` overrides some defaults and keeps the
rest; ``EnvConfig.from_dict`` rejects keys it does not know and says which ones it does.
``default_config()`` is the dict of defaults (what ``DrivingEnv.default_config()`` returns).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scenarios.actions import ActionSpec

PARTS = ("cameras", "ego", "route", "agents", "map")


@dataclass(frozen=True)
class EnvConfig:
    """Settings of ``SplatDrive-v0``. Distances in metres, angles in degrees, times in steps."""

    # -- scenarios -------------------------------------------------------------------------------
    suite: str = "train"
    """Scenarios when none are passed: a built-in suite name (train, val, test: generated on first
    use), a suite directory or a scenario file."""
    skip_broken: bool = False
    """Skip scenario files that fail to load (each is logged) instead of raising."""
    quarantine_after: int = 2
    """Failures (exceptions in reset/step) after which a scenario is no longer sampled."""
    cache_size: int = 64
    """Scenarios whose scene, static index and tables are kept in memory (least recently used out)."""
    seed: int | None = None
    """Default seed of the scenario sampler when reset() gets none."""
    horizon: int | None = None
    """Episode length in steps; None: each scenario's own (its clip's length)."""

    # -- observation parts -----------------------------------------------------------------------
    cameras: bool = True
    ego: bool = True
    route: bool = True
    agents: bool = True
    map: bool = True
    rig: str | None = None
    """Camera rig name (``sim.RIGS``); None: the scenarios' own."""
    resolution: tuple[int, int] | None = None
    """(width, height) per camera; None: the scenarios' own."""
    render_backend: str = "auto"
    """``sim.render`` backend: auto, gsplat, cpu or reference."""
    max_agents: int = 8
    """K: agents observed (nearest first)."""
    agent_radius: float = 60.0
    """Agents farther than this from the ego are not observed."""
    obstacles_as_agents: bool = True
    """Observe static obstacle boxes as (stopped) agents too."""
    map_points: int = 64
    """M: nearest lane-centre points observed."""
    map_spacing: float = 2.0
    """Spacing of the lane-centre points."""
    map_radius: float = 50.0
    route_points: int = 10
    """P: waypoints along the expert path ahead."""
    route_spacing: float = 5.0

    # -- actions ---------------------------------------------------------------------------------
    n_lat: int = 61
    lat_max: float = 0.75
    n_long: int = 61
    long_max: float = 15.0

    # -- termination (RAD) -----------------------------------------------------------------------
    position_threshold: float = 2.0
    """Position deviation: distance to the expert path above this ends the episode."""
    heading_threshold_deg: float = 40.0
    """Heading deviation: heading error to the matched expert pose above this ends the episode."""
    static_opacity_threshold: float = 0.5
    """Static Gaussians with opacity above this count for static collisions."""
    static_min_gaussians: int = 8
    """Static collision when at least this many such Gaussians lie in the (raised) ego box."""
    static_lift: float = 0.3
    """The ego box for the Gaussian query starts this high above the ground (kerbs, road paint)."""
    static_obstacle_boxes: bool = True
    """Also count overlap with the scenario's static obstacle boxes as a static collision."""
    static_gaussians: bool = True
    """Query the background Gaussians for static collisions (StaticIndex)."""
    progress_event: bool = True
    """Progress deviation (not one of RAD's events; false for RAD-exact runs): falling more than
    ``progress_threshold`` behind the logged expert ends the episode."""
    progress_threshold: float = 10.0
    """Progress deviation: metres behind the logged expert at the same step, along its path, above
    which the episode ends (why this default: scenarios/README.md, "Progress")."""

    # -- render_mode="rgb_array" -----------------------------------------------------------------
    bev_pixels: int = 256
    """Side of the bird's-eye view, pixels."""
    bev_range: float = 30.0
    """Half side of the bird's-eye view, metres (heading up)."""

    def __post_init__(self):
        def bad(field: str, want: str):
            raise ValueError(f"EnvConfig.{field}: expected {want}, got {getattr(self, field)!r}")

        _check_types(self, bad)
        for f in ("max_agents", "map_points", "route_points", "quarantine_after", "cache_size", "bev_pixels"):
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
        """The observation parts switched on."""
        return tuple(p for p in PARTS if getattr(self, p))

    @staticmethod
    def from_dict(d: Mapping[str, Any] | EnvConfig | None = None, **overrides) -> EnvConfig:
        """Defaults updated by ``d`` and ``overrides``; unknown keys raise ValueError."""
        if isinstance(d, EnvConfig):
            d = dataclasses.asdict(d)
        if d is not None and not isinstance(d, Mapping):
            raise ValueError(f"EnvConfig: expected a mapping of settings, got {type(d).__name__}")
        d = {**(d or {}), **overrides}
        known = {f.name for f in dataclasses.fields(EnvConfig)}
        unknown = sorted(set(d) - known, key=str)  # (keys of any type: a YAML mapping may hold ints)
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(str(k), known, n=1)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(f"EnvConfig: unknown key(s) {', '.join(hints)}; known keys: {', '.join(sorted(known))}")
        if isinstance(d.get("resolution"), list | tuple):
            d["resolution"] = tuple(d["resolution"])
        return EnvConfig(**d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_types(cfg: EnvConfig, bad) -> None:
    """Every field holds its declared type (numpy scalars allowed, made plain; numbers finite), so a
    wrong value is refused here, naming the key, and not met deep inside an episode."""
    for f in dataclasses.fields(cfg):
        v, want = getattr(cfg, f.name), _HINTS.get(f.name, "")
        if v is None and "None" in want:
            continue
        if want.startswith("bool"):
            if not isinstance(v, bool | np.bool_):
                bad(f.name, "true or false")
            object.__setattr__(cfg, f.name, bool(v))
        elif want.startswith("int"):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool | np.bool_):
                bad(f.name, "an integer" + (" or None" if "None" in want else ""))
            object.__setattr__(cfg, f.name, int(v))
        elif want.startswith("float"):
            if not isinstance(v, numbers.Real) or isinstance(v, bool | np.bool_) or not math.isfinite(v):
                bad(f.name, "a finite number")
        elif want.startswith("str") and not isinstance(v, str):
            bad(f.name, "a string" + (" or None" if "None" in want else ""))
        elif want.startswith("tuple") and not isinstance(v, tuple):
            bad(f.name, "None or (width, height) positive ints")


_HINTS = {k: str(v) for k, v in EnvConfig.__annotations__.items()}  # "int", "int | None", "tuple[int, int] | None"...


def default_config() -> dict[str, Any]:
    """The defaults as a plain dict (HighwayEnv's ``default_config``)."""
    return EnvConfig().to_dict()
