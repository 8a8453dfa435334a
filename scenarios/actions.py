"""RAD's decoupled discrete action space: bins, the feasibility mask, decoding, IL targets.

The one definition of the action grid, and the env's action space (``envs`` re-exports the names a
user needs). It lives in ``scenarios`` because the expert's IL labels (the nearest feasible bins to
its displacement one anchor horizon ahead) are part of a scenario. One mask orientation everywhere:
``[n_long, n_lat]``, indexed ``mask[longitudinal, lateral]``.
An action is an *anchor*: the ego's displacement after ``sim.dynamics.ANCHOR_HORIZON`` = 0.5 s in its
current frame (``sim.frames``: x forward, y left), chosen as a pair of bins (lateral index,
longitudinal index). With the default :class:`ActionSpec`, lateral bins are
``linspace(-0.75, 0.75, 61)`` m (0.025 m apart) and longitudinal bins ``linspace(0, 15, 61)`` m
(0.25 m apart, up to 30 m/s).

**Feasibility.** RAD masks pairs a car cannot drive: at 0 and 0.25 m forward only zero lateral
is allowed, and the lateral band widens with forward distance; its table of allowed half-widths
(in lateral bins either side of the centre) for forward index 0..7 is 0, 0, 2, 4, 8, 13, 20, 29,
full from index 8 on. The rule behind that table is a curvature limit: the anchor is reached along
the arc that leaves the ego tangent to its heading (``sim.dynamics.anchor_to_controls``), of
curvature ``k = 2|y| / (x^2 + y^2)``, and a pair is feasible when the lower branch of that arc
bends no more than ``max_curvature``:

    |y| <= (1 - sqrt(1 - (k_max x)^2)) / k_max     (any |y| once k_max x >= 1).

Every ``k_max`` in [0.4041, 0.4138) 1/m reproduces RAD's table exactly; the default 0.41 1/m is a
front-wheel angle of atan(2.765 * 0.41) = 48.6 deg, inside RAD's +-49 deg. Because the rule is
in metres, other bin counts or ranges keep the same drivable region, sampled at their own bins
(the proportional scaling of the table). The lateral bin nearest to zero is always allowed, so
every longitudinal bin has at least one feasible pair (even with an even number of lateral bins).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

RAD_HALF_WIDTHS = (0, 0, 2, 4, 8, 13, 20, 29)  # RAD's table for the default bins; full from index 8


@dataclass(frozen=True)
class ActionSpec:
    """Bins of the (lateral, longitudinal) anchor. Lateral in [-lat_max, lat_max] m (left positive),
    longitudinal in [0, long_max] m forward, both evenly spaced, endpoints included."""

    n_lat: int = 61
    lat_max: float = 0.75
    n_long: int = 61
    long_max: float = 15.0
    max_curvature: float = 0.41  # 1/m, see the module docstring

    def __post_init__(self):
        if int(self.n_lat) < 1 or int(self.n_long) < 2:
            raise ValueError(f"ActionSpec: need n_lat >= 1 and n_long >= 2, got {self.n_lat}, {self.n_long}")
        if not (self.lat_max >= 0 and self.long_max > 0 and np.isfinite(self.lat_max) and np.isfinite(self.long_max)):
            raise ValueError(f"ActionSpec: need lat_max >= 0 and long_max > 0 m, got {self.lat_max}, {self.long_max}")
        if not (self.max_curvature > 0 and np.isfinite(self.max_curvature)):
            raise ValueError(f"ActionSpec: max_curvature must be > 0 (1/m), got {self.max_curvature}")

    @cached_property
    def lateral(self) -> np.ndarray:
        """[n_lat] lateral bin values, metres (left positive)."""
        return np.linspace(-self.lat_max, self.lat_max, self.n_lat)

    @cached_property
    def longitudinal(self) -> np.ndarray:
        """[n_long] longitudinal bin values, metres forward."""
        return np.linspace(0.0, self.long_max, self.n_long)

    @cached_property
    def mask(self) -> np.ndarray:
        """[n_long, n_lat] bool feasibility table (read-only), see :func:`feasibility`."""
        m = _feasibility(self)
        m.flags.writeable = False
        return m

    @property
    def lateral_values(self) -> np.ndarray:
        return self.lateral

    @property
    def longitudinal_values(self) -> np.ndarray:
        return self.longitudinal

    @property
    def center(self) -> int:
        """Index of the lateral bin nearest to zero (the centre bin for odd n_lat)."""
        return int(np.argmin(np.abs(self.lateral)))

    def feasibility(self) -> np.ndarray:
        """[n_long, n_lat] bool feasibility table (a copy)."""
        return self.mask.copy()

    def half_widths(self) -> np.ndarray:
        """[n_long] int: allowed lateral bins either side of the centre (RAD's table)."""
        lo, hi = self.band
        return (hi - lo) // 2

    @cached_property
    def band(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo [n_long], hi [n_long]) int: the feasible lateral indices of each longitudinal bin are
        lo..hi inclusive (the feasible set of a row is one contiguous band)."""
        m = self.mask
        idx = np.arange(self.n_lat)
        lo = np.where(m, idx, self.n_lat).min(axis=1)
        hi = np.where(m, idx, -1).max(axis=1)
        return lo, hi


def feasibility(spec: ActionSpec | None = None) -> np.ndarray:
    """[n_long, n_lat] bool: True where (longitudinal i, lateral j) is a drivable anchor."""
    return (spec or ActionSpec()).mask.copy()


def _feasibility(spec: ActionSpec) -> np.ndarray:
    x = spec.longitudinal[:, None]  # [n_long, 1]
    y = np.abs(spec.lateral)[None, :]  # [1, n_lat]
    k = spec.max_curvature
    kx = np.minimum(k * x, 1.0)
    y_max = np.where(k * x >= 1.0, np.inf, (1.0 - np.sqrt(1.0 - kx * kx)) / k)  # [n_long, 1]
    mask = y <= y_max + 1e-9
    mask[:, np.abs(spec.lateral) == np.abs(spec.lateral).min()] = True  # the centre (nearest to 0) always
    return mask


def half_widths(spec: ActionSpec | None = None) -> np.ndarray:
    """[n_long] int: allowed lateral bins either side of the centre (RAD's table), for odd n_lat."""
    return (spec or ActionSpec()).half_widths()


def is_feasible(lat_idx, long_idx, spec: ActionSpec | None = None) -> np.ndarray:
    """bool, the shape of the (in-range) indices: whether each pair is feasible."""
    return (spec or ActionSpec()).mask[np.asarray(long_idx), np.asarray(lat_idx)]


def decode(lat_idx, long_idx, spec: ActionSpec | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bin indices (scalars or arrays of one shape) -> (lateral m, longitudinal m), float64."""
    spec = spec or ActionSpec()
    return spec.lateral[np.asarray(lat_idx)], spec.longitudinal[np.asarray(long_idx)]


def project_feasible(lat_idx, long_idx, spec: ActionSpec | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nearest feasible lateral bin for each (lateral, longitudinal) index pair (in range).

    Returns (lateral index, projected) with the shape of the inputs; ``projected`` is True where
    the lateral index changed. The longitudinal index is kept: the agent's speed choice stands.
    """
    spec = spec or ActionSpec()
    lat_idx, long_idx = np.asarray(lat_idx), np.asarray(long_idx)
    lo, hi = spec.band
    new = np.clip(lat_idx, lo[long_idx], hi[long_idx])
    return new, new != lat_idx


def nearest_bins(lat_m, long_m, spec: ActionSpec | None = None) -> np.ndarray:
    """The nearest *feasible* (lateral, longitudinal) bin pair to displacements in metres.

    lat_m, long_m: scalars or arrays of one shape S (ego frame, one anchor horizon ahead). Nearest in the
    Euclidean sense in metres, over feasible pairs only (the IL target). Ties go to the lower
    longitudinal bin. Returns int64 [*S, 2] as (lateral index, longitudinal index).
    """
    spec = spec or ActionSpec()
    lat_m, long_m = np.broadcast_arrays(np.asarray(lat_m, dtype=np.float64), np.asarray(long_m, dtype=np.float64))
    if not (np.isfinite(lat_m).all() and np.isfinite(long_m).all()):
        raise ValueError("nearest_bins: displacements must be finite")
    shape = lat_m.shape
    lat, lon = lat_m.reshape(-1, 1), long_m.reshape(-1, 1)  # [B, 1]
    lo, hi = spec.band  # [n_long]
    step = spec.lateral[1] - spec.lateral[0] if spec.n_lat > 1 else 1.0
    # per longitudinal bin, the nearest lateral bin inside that row's band, then the best row
    j = np.rint((lat + spec.lat_max) / step).astype(np.int64) if spec.n_lat > 1 else np.zeros_like(lat, np.int64)
    j = np.clip(j, lo[None, :], hi[None, :])  # [B, n_long]
    d2 = (spec.lateral[j] - lat) ** 2 + (spec.longitudinal[None, :] - lon) ** 2
    i = np.argmin(d2, axis=1)  # [B]
    out = np.stack([j[np.arange(len(i)), i], i], axis=1)
    return out.reshape(*shape, 2)


# -- the default grid, as the expert planner uses it ---------------------------------------------
DEFAULT = ActionSpec()
NUM_LATERAL = DEFAULT.n_lat
NUM_LONGITUDINAL = DEFAULT.n_long
LATERAL_BINS = DEFAULT.lateral  # metres, left positive
LONGITUDINAL_BINS = DEFAULT.longitudinal  # metres forward
LATERAL_STEP = float(LATERAL_BINS[1] - LATERAL_BINS[0])
LONGITUDINAL_STEP = float(LONGITUDINAL_BINS[1] - LONGITUDINAL_BINS[0])
LATERAL_CENTER = DEFAULT.center
LATERAL_HALF_WIDTH = RAD_HALF_WIDTHS


def bins_to_displacement(idx) -> np.ndarray:
    """Bin pairs [..., 2] int (lateral index, longitudinal index) -> displacements [..., 2] (m) on the default grid."""
    idx = np.asarray(idx)
    lat, lon = decode(idx[..., 0], idx[..., 1], DEFAULT)
    return np.stack([lat, lon], axis=-1)


def nearest_feasible_bins(displacement) -> np.ndarray:
    """Displacements [..., 2] (lateral m, longitudinal m) -> nearest feasible bins [..., 2] on the default grid."""
    d = np.asarray(displacement, dtype=np.float64)
    if d.shape[-1:] != (2,):
        raise ValueError(f"nearest_feasible_bins: displacement must be [..., 2], got shape {d.shape}")
    return nearest_bins(d[..., 0], d[..., 1], DEFAULT)


def nearest_feasible_bins_reference(displacement) -> np.ndarray:
    """Brute force over all feasible pairs of the default grid for one displacement [2] -> [2]; the test oracle."""
    lat, lon = (float(v) for v in displacement)
    m = feasibility(DEFAULT)  # [n_long, n_lat]
    err = (LONGITUDINAL_BINS[:, None] - lon) ** 2 + (LATERAL_BINS[None, :] - lat) ** 2
    err = np.where(m, err, np.inf)
    # ties: the smaller longitudinal index first (row-major argmin), as the fast path
    i, j = divmod(int(np.argmin(err)), NUM_LATERAL)
    return np.array([j, i])
