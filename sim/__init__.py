"""The digital twin: Gaussian clouds, PLY I/O, scenes, cameras, renderers, dynamics, geometry queries.

Knows nothing of RL. Frames and conventions: ``sim.frames``.
"""

from sim.camera import RIGS, CameraRig, PinholeCamera, make_rig
from sim.gaussians import GaussianCloud

__all__ = ["RIGS", "CameraRig", "GaussianCloud", "PinholeCamera", "make_rig"]
