"""What generated places and traffic look like in Gaussians: vehicle assets by name
(``<kind>_<colour>``, shared by every scenario of a folder), parked props, and a place's street
layout for ``sim.procedural.build_background``."""

from __future__ import annotations

import zlib

import numpy as np

from scenarios.kinds import Garage
from scenarios.roads import RoadNet, simplify_polyline
from sim import procedural

# vehicle kinds of moving traffic, with how often they appear
TRAFFIC_MIX = {"sedan": 0.32, "hatchback": 0.2, "suv": 0.25, "van": 0.12, "truck": 0.07, "bus": 0.04}
PARKED_KINDS = ("sedan", "hatchback", "suv", "van")
# body colours (linear RGB) by name; an asset is "<kind>_<colour>", shared by every scenario of a folder
PAINTS = {
    "white": (0.82, 0.82, 0.80),
    "black": (0.03, 0.03, 0.035),
    "silver": (0.52, 0.53, 0.55),
    "grey": (0.22, 0.23, 0.24),
    "red": (0.55, 0.04, 0.03),
    "blue": (0.05, 0.14, 0.45),
    "green": (0.06, 0.25, 0.10),
    "yellow": (0.80, 0.60, 0.08),
}


class ProceduralGarage:
    """Vehicles and props from ``sim.procedural``: sizes for planning, clouds for writing assets."""

    def __init__(self):
        self._sizes: dict[str, np.ndarray] = {}

    def size(self, kind: str) -> np.ndarray:
        """[3] (length, width, height) m of a vehicle kind or a prop kind."""
        if kind not in self._sizes:
            if kind in procedural.VEHICLE_KINDS:
                self._sizes[kind] = np.asarray(procedural.build_vehicle(kind, None, 0)[1], dtype=np.float64)
            else:
                self._sizes[kind] = np.asarray(procedural.build_prop(kind, 0)[1], dtype=np.float64)
        return self._sizes[kind]

    def pick_vehicle(self, rng: np.random.Generator) -> tuple[str, np.ndarray]:
        kinds = list(TRAFFIC_MIX)
        p = np.array([TRAFFIC_MIX[k] for k in kinds])
        kind = kinds[int(rng.choice(len(kinds), p=p / p.sum()))]
        colour = list(PAINTS)[int(rng.integers(len(PAINTS)))]
        return f"{kind}_{colour}", self.size(kind)

    def parked(self, rng: np.random.Generator, barrier: bool) -> tuple[str, np.ndarray]:
        kind = "barrier" if barrier else PARKED_KINDS[int(rng.integers(len(PARKED_KINDS)))]
        return kind, self.size(kind)

    def asset_cloud(self, name: str):
        """The GaussianCloud of asset ``<kind>_<colour>`` (deterministic in the name)."""
        kind, _, colour = name.partition("_")
        if kind not in procedural.VEHICLE_KINDS or colour not in PAINTS:
            raise ValueError(f"unknown asset {name!r}: expected <vehicle kind>_<colour>")
        return procedural.build_vehicle(kind, PAINTS[colour], zlib.crc32(name.encode()))[0]

    def garage(self) -> Garage:
        return Garage(self.pick_vehicle, self.parked)


_MARKING_KIND = {
    ("solid", "white"): "solid_white",
    ("dashed", "white"): "dashed_white",
    ("solid", "yellow"): "solid_yellow",
    ("double", "yellow"): "double_yellow",
    ("stop_line", "white"): "stop_line",
}


def street_layout(net: RoadNet, obstacles) -> procedural.StreetLayout:
    """The ``sim.procedural.StreetLayout`` of a place: road strips, lane markings from the lane
    boundaries, curbs as road edges, and the static obstacles (``ObstacleDraft``) as props (baked in)."""
    simple = simplify_polyline
    marks = [
        procedural.Marking(simple(st.polyline), _MARKING_KIND[(st.style, st.color)])
        for st in net.stripes
        if len(st.polyline) >= 2 and np.linalg.norm(st.polyline[-1] - st.polyline[0]) > 0.5
    ]
    return procedural.StreetLayout(
        roads=tuple(procedural.RoadSurface(simple(st.centerline), st.width) for st in net.strips),
        markings=tuple(marks),
        edges=tuple(procedural.RoadEdge(simple(c.polyline), c.outward) for c in net.edges),
        props=tuple(procedural.Prop(o.prop, float(o.pose[0]), float(o.pose[1]), float(o.pose[3])) for o in obstacles),
    )
