"""Reading a vector env's infos: one env's info dict, and the corrective direction of an episode's event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

# Directional auxiliary flags (RAD): front collision -> brake, rear collision -> speed up,
# drifted left -> steer right, drifted right -> steer left; and (not RAD's) fell behind the logged
# expert (progress_deviation) -> speed up. Set on the steps of an episode that led to its event.
AUX_FLAGS = ("collision_front", "collision_rear", "deviation_left", "deviation_right", "progress_behind")


def env_info(infos: Mapping[str, Any], i: int) -> dict:
    """Env i's info from gymnasium's vector info dict (arrays with ``_key`` presence masks, nested dicts
    recursively; ``final_obs`` an object array)."""
    out = {}
    for k, v in infos.items():
        if k.startswith("_"):
            continue
        present = infos.get("_" + k)
        if present is not None and not present[i]:
            continue
        out[k] = env_info(v, i) if isinstance(v, Mapping) else v[i]
    return out


def aux_flags(info: Mapping[str, Any]) -> np.ndarray:
    """The corrective direction of the event that ended an episode, from its last step's info: bool
    [5] in ``AUX_FLAGS`` order (collision_front, collision_rear, deviation_left, deviation_right,
    progress_behind); all False when no event (or one without a direction) ended it.

    dynamic_collision: the contact's place on the ego box, front (brake) or rear (speed up); a
    contact on a side alone has neither. position_deviation: the side of the expert path the ego is
    on (``lateral_offset``, > 0 left: steer right); heading_deviation: the side it turned to
    (``heading_error``, > 0 left: steer right). progress_deviation: behind the expert (speed up).
    """
    out = np.zeros(len(AUX_FLAGS), dtype=bool)
    event = str(info.get("event", "") or "")
    loc = str(info.get("collision_location", "") or "")
    if event == "dynamic_collision":
        out[0] = loc.startswith("front")
        out[1] = loc.startswith("rear")
    elif event in ("position_deviation", "heading_deviation"):
        key = "lateral_offset" if event == "position_deviation" else "heading_error"
        side = float(info.get(key, 0.0) or 0.0)
        out[2] = side > 0.0  # ego left of (or turned left of) the expert path: steer right
        out[3] = side < 0.0
    elif event == "progress_deviation":
        out[4] = True
    return out
