"""Procedural digital twins: deterministic street scenes made of 3D Gaussians.

The embedded default world. Users swap in real reconstructions (PLY files); out of the box every
scenario's scene comes from here: a :class:`StreetLayout` (roads, markings, curbs, props) is turned
into a background :class:`~sim.gaussians.GaussianCloud` with sidewalks, grass, buildings with
window grids, trees, street lights and a sky dome, and :func:`build_vehicle` makes actor assets.

Frames and units (``sim.frames``): world z up, metres, road surface at z = 0; an asset is built in
its box frame (origin at the centre of the box's bottom face, x forward, y left, z up).

Modules, each one concern (lower ones first; each imports only those above it in this list):
``parts`` (the Gaussian accumulator, seeded generators, shapes), ``vehicles``, ``props``,
``markings`` (paint as stripes), ``layout`` (the public description and the demo layouts),
``streets`` (roads, curbs, sidewalks and the street queries), ``buildings``, ``vegetation`` (trees,
grass), ``sky``, ``background`` (planning and the Gaussian budget), ``demo`` (the demo scene with
traffic). ``python -m sim.procedural`` writes a background PLY.
"""

from sim.procedural.background import background_parts, build_background
from sim.procedural.demo import demo_scene
from sim.procedural.layout import LAYOUT_KINDS, Marking, Prop, RoadEdge, RoadSurface, StreetLayout, demo_layout
from sim.procedural.props import PROP_KINDS, build_prop
from sim.procedural.vehicles import VEHICLE_KINDS, build_vehicle

__all__ = [
    "LAYOUT_KINDS",
    "PROP_KINDS",
    "VEHICLE_KINDS",
    "Marking",
    "Prop",
    "RoadEdge",
    "RoadSurface",
    "StreetLayout",
    "background_parts",
    "build_background",
    "build_prop",
    "build_vehicle",
    "demo_layout",
    "demo_scene",
]
