"""The digital twin: Gaussian clouds, PLY I/O, scenes, cameras, renderers, dynamics, geometry queries.

Knows nothing of RL. Frames and conventions: ``sim.frames``.
"""

from sim.camera import RIGS, CameraRig, PinholeCamera, make_rig
from sim.gaussians import GaussianCloud
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
    "RenderOutput",
    "Scene",
    "make_rig",
    "render",
]
