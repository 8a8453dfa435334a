"""Pinhole cameras mounted on the ego vehicle, and the built-in rigs.

A camera's extrinsics are ``ego_T_cam`` (its OpenCV frame in the ego frame, see ``sim.frames``);
for an ego pose ``world_T_ego`` the gsplat viewmat is ``cam_T_world = inv(world_T_ego @ ego_T_cam)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sim.frames import EGO_R_CV, invert_rigid


@dataclass(frozen=True)
class PinholeCamera:
    """One pinhole camera. Intrinsics in pixels for a ``width`` x ``height`` image."""

    name: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    ego_T_cam: np.ndarray  # [4, 4]

    @property
    def K(self) -> np.ndarray:
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @staticmethod
    def mounted(
        name: str,
        width: int,
        height: int,
        hfov_deg: float,
        yaw_deg: float = 0.0,
        pitch_deg: float = 0.0,
        position=(1.5, 0.0, 1.6),
    ) -> PinholeCamera:
        """A camera at ``position`` (ego frame, metres) turned ``yaw_deg`` left of forward and pitched
        ``pitch_deg`` down, with square pixels and the principal point at the image centre."""
        if width <= 0 or height <= 0:
            raise ValueError(f"camera {name}: resolution must be positive, got {width}x{height}")
        if not 1.0 <= hfov_deg < 179.0:
            raise ValueError(f"camera {name}: horizontal field of view must be in [1, 179) deg, got {hfov_deg}")
        f = 0.5 * width / math.tan(math.radians(hfov_deg) / 2.0)
        yaw, pitch = math.radians(yaw_deg), math.radians(pitch_deg)
        cy_, sy_ = math.cos(yaw), math.sin(yaw)
        Rz = np.array([[cy_, -sy_, 0.0], [sy_, cy_, 0.0], [0.0, 0.0, 1.0]])
        cp, sp = math.cos(pitch), math.sin(pitch)
        Ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])  # +pitch tips the x axis down
        T = np.eye(4)
        T[:3, :3] = Rz @ Ry @ EGO_R_CV
        T[:3, 3] = position
        return PinholeCamera(name, int(width), int(height), f, f, width / 2.0, height / 2.0, T)


@dataclass(frozen=True)
class CameraRig:
    """Cameras sharing one resolution, rendered together in one call."""

    name: str
    cameras: tuple[PinholeCamera, ...]

    def __post_init__(self):
        if not self.cameras:
            raise ValueError(f"rig {self.name}: no cameras")
        sizes = {(c.width, c.height) for c in self.cameras}
        if len(sizes) != 1:
            raise ValueError(f"rig {self.name}: cameras must share one resolution, got {sorted(sizes)}")

    def __len__(self) -> int:
        return len(self.cameras)

    @property
    def width(self) -> int:
        return self.cameras[0].width

    @property
    def height(self) -> int:
        return self.cameras[0].height

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    def Ks(self) -> torch.Tensor:
        """[C, 3, 3] float32 intrinsics."""
        return torch.as_tensor(np.stack([c.K for c in self.cameras]), dtype=torch.float32)

    def ego_T_cams(self) -> np.ndarray:
        return np.stack([c.ego_T_cam for c in self.cameras])  # [C, 4, 4]

    def viewmats(self, world_T_ego: np.ndarray) -> torch.Tensor:
        """Viewmats cam_T_world for ego poses world_T_ego [..., 4, 4] -> [..., C, 4, 4] float32."""
        world_T_ego = np.asarray(world_T_ego, dtype=np.float64)
        world_T_cam = world_T_ego[..., None, :, :] @ self.ego_T_cams()  # [..., C, 4, 4]
        return torch.as_tensor(invert_rigid(world_T_cam), dtype=torch.float32)


RIGS = ("front3", "front4", "surround6")


def make_rig(name: str, width: int = 128, height: int = 64) -> CameraRig:
    """Built-in rigs, at ``width`` x ``height`` per camera.

    - ``front3``: front (70 deg), front-left and front-right (70 deg, turned 55 deg): the forward
      field of RAD's setting, about 180 degrees in all.
    - ``front4``: ``front3`` and a narrow front camera (``front_narrow``, 30 deg, pitched 1 deg down) at the
      same resolution: 2.6x the front camera's pixels per degree ahead, so a car 30 m out is ~14 px wide
      at 128 px rather than ~5 (a telephoto camera, as driving rigs carry for what is far ahead).
    - ``surround6``: nuScenes-like ring: front, front-left, front-right, back-left, back-right
      (70 deg) and back (110 deg).
    """
    cam = PinholeCamera.mounted
    cams: tuple[PinholeCamera, ...]
    if name == "front3":
        cams = (
            cam("front", width, height, 70.0, 0.0, 2.0, (1.6, 0.0, 1.55)),
            cam("front_left", width, height, 70.0, 55.0, 2.0, (1.5, 0.45, 1.55)),
            cam("front_right", width, height, 70.0, -55.0, 2.0, (1.5, -0.45, 1.55)),
        )
    elif name == "front4":
        cams = (
            *make_rig("front3", width, height).cameras,
            cam("front_narrow", width, height, 30.0, 0.0, 1.0, (1.6, 0.0, 1.6)),
        )
    elif name == "surround6":
        cams = (
            *make_rig("front3", width, height).cameras,
            cam("back_left", width, height, 70.0, 110.0, 2.0, (0.9, 0.45, 1.55)),
            cam("back_right", width, height, 70.0, -110.0, 2.0, (0.9, -0.45, 1.55)),
            cam("back", width, height, 110.0, 180.0, 2.0, (-0.9, 0.0, 1.55)),
        )
    else:
        raise ValueError(f"unknown camera rig {name!r}; built-in rigs are {', '.join(RIGS)}")
    return CameraRig(name, cams)
