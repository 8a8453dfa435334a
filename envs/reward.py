"""RAD's rewards: four failure events, each -1 and each ending the episode at once, plus a fifth.

| event              | trigger                                                     | part         |
|--------------------|-------------------------------------------------------------|--------------|
| dynamic_collision  | ego box overlaps an agent box                               | by location  |
| static_collision   | ego box holds >= N static Gaussians, or hits a static box   | lateral      |
| position_deviation | distance to the expert path > 2.0 m                         | lateral      |
| heading_deviation  | heading error to the matched expert pose > 40 deg           | lateral      |
| progress_deviation | behind the logged expert (same step, along its path) > X m  | longitudinal |

The first four are RAD's. RAD credits every dynamic collision to the longitudinal part (its code's
"collision" advantage steers only the brake). Here, by default (``EnvConfig.collision_credit="location"``),
the part follows where the ego box was hit (:func:`collision_part`): a contact on the front or the rear
(corners included) is the longitudinal part's (brake, or get out of the way), a contact on a side alone
the lateral part's (a car coming in from the side is avoided by steering as much as by braking; credited
to the longitudinal part alone, such a hit never reaches the lateral head's advantage). ``"rad"`` gives
RAD's crediting. RAD has no progress term, so a car that stops passes all four: the fifth,
``progress_deviation`` (not RAD's; ``EnvConfig.progress_event=False`` turns it off for RAD-exact
runs, ``EnvConfig.progress_threshold`` is X), fails an ego that falls too far behind the log.

The reward is the sum of the named terms (``info["reward_terms"]``, every event's term always
present, 0.0 when it did not happen); the PPO learner takes the two parts apart
(``info["reward_parts"]`` = [lateral, longitudinal]) for its per-part GAE. When events coincide in
one step each counts; ``info["event"]`` names the first in the order above (the metrics count a
clip's first failure only).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

RAD_EVENTS = ("dynamic_collision", "static_collision", "position_deviation", "heading_deviation")
EVENTS = (*RAD_EVENTS, "progress_deviation")
PARTS = ("lateral", "longitudinal")
EVENT_PART = {
    "dynamic_collision": "longitudinal",
    "static_collision": "lateral",
    "position_deviation": "lateral",
    "heading_deviation": "lateral",
    "progress_deviation": "longitudinal",
}
EVENT_REWARD = -1.0
_IS_LATERAL = {e: p == "lateral" for e, p in EVENT_PART.items()}


def detect_events(
    dynamic_collision: bool,
    static_collision: bool,
    path_distance: float,
    heading_error: float,
    position_threshold: float = 2.0,
    heading_threshold: float = np.deg2rad(40.0),
    progress_lag: float = 0.0,
    progress_threshold: float | None = None,
) -> dict[str, bool]:
    """Which events happened. path_distance: metres to the expert path; heading_error: radians
    (absolute value used) to the matched expert pose; progress_lag: metres behind the logged expert
    at this step, along its path (negative when ahead); progress_threshold None switches
    progress_deviation off (RAD's four events only). Thresholds are strict (> ends the episode)."""
    return {
        "dynamic_collision": bool(dynamic_collision),
        "static_collision": bool(static_collision),
        "position_deviation": bool(path_distance > position_threshold),
        "heading_deviation": bool(abs(heading_error) > heading_threshold),
        "progress_deviation": progress_threshold is not None and bool(progress_lag > progress_threshold),
    }


def reward_terms(events: Mapping[str, bool]) -> dict[str, float]:
    """Named reward terms: -1.0 for each event that happened, 0.0 otherwise."""
    return {e: (EVENT_REWARD if events.get(e, False) else 0.0) for e in EVENTS}


COLLISION_CREDITS = ("location", "rad")


def collision_part(location: str, credit: str) -> str:
    """The reward part a dynamic collision is credited to: 'longitudinal' or 'lateral'.

    location: where on the ego box the contact is (``envs.driving.location_name``: 'front', 'rear_left',
    'left', 'centre', ...; '' when unknown); credit: 'rad' (always longitudinal, as RAD) or 'location' (a
    side alone -- 'left' or 'right' -- is lateral; the front, the rear, their corners and the centre are
    longitudinal)."""
    if credit not in COLLISION_CREDITS:
        raise ValueError(f"collision_part: credit must be one of {COLLISION_CREDITS}, got {credit!r}")
    if credit == "location" and location in ("left", "right"):
        return "lateral"
    return "longitudinal"


def reward_parts(terms: Mapping[str, float], dynamic_part: str = "longitudinal") -> np.ndarray:
    """[2] float32 (lateral, longitudinal): the terms summed per part; a dynamic collision goes to
    ``dynamic_part`` (:func:`collision_part`), the other events to their ``EVENT_PART``."""
    lat = lon = 0.0
    for e, v in terms.items():
        lateral = dynamic_part == "lateral" if e == "dynamic_collision" else _IS_LATERAL[e]
        if lateral:
            lat += v
        else:
            lon += v
    return np.array([lat, lon], dtype=np.float32)


def first_event(events: Mapping[str, bool]) -> str:
    """The event that names the failure ('' when none), by the order of EVENTS."""
    for e in EVENTS:
        if events.get(e, False):
            return e
    return ""
