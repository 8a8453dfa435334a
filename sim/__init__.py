"""The digital twin: Gaussian clouds, PLY I/O, scenes, cameras, renderers, dynamics, geometry queries.

Knows nothing of RL. Frames and conventions: ``sim.frames``.
"""

from sim.camera import RIGS, CameraRig, PinholeCamera, make_rig
from sim.collision import StaticIndex
from sim.dynamics import anchor_to_controls, bicycle_step
from sim.gaussians import GaussianCloud
from sim.ply import PlyError, load_ply, save_ply
from sim.rendering import BACKENDS, RenderOutput, render
from sim.scene import ActorTrack, Composite, Instance, Scene

__all__ = [
    "BACKENDS",
    "RIGS",
    "ActorTrack",
    "CameraRig",
    "Composite",
    "GaussianCloud",
    "Instance",
    "PinholeCamera",
    "PlyError",
    "RenderOutput",
    "Scene",
    "StaticIndex",
    "anchor_to_controls",
    "bicycle_step",
    "load_ply",
    "make_rig",
    "render",
    "save_ply",
]
