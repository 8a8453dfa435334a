"""The digital twin: Gaussian clouds, PLY I/O, scenes, cameras, renderers, dynamics, geometry queries.

Knows nothing of RL. Frames and conventions: ``sim.frames``.

``sim.render`` is the render function (``sim.rendering.render``); ``python -m sim.render`` is the
picture program (``sim.render_cli``) through the entry module ``sim/render.py``. Python binds an
imported submodule as an attribute of its package, so ``import sim.render`` would put that module
over the function; this package's module type keeps the function there instead.
"""

import sys
import types

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


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name == "render" and isinstance(value, types.ModuleType):
            return  # the submodule sim/render.py (an entry point) never hides the render function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
