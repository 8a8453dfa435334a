"""Coordinate frames, written down once and used everywhere.

- **world**: right-handed, metres, z up; the ground is roughly z = 0. Yaw is the angle from +x
  towards +y (counter-clockwise seen from above).
- **ego**: the ego vehicle's frame; origin at the centre of the rear axle on the ground, x forward,
  y left, z up. The kinematic bicycle model moves this point. The ego box's bottom-face centre
  sits ``center_offset`` metres ahead of it along x.
- **box / asset**: an actor's frame (and the frame its Gaussian asset is stored in); origin at the
  centre of the bottom face of its 3D box, x forward (length), y left (width), z up (height).
- **camera**: OpenCV, as gsplat: x right, y down, z forward (the optical axis), pixels with (0, 0)
  the top-left corner of the top-left pixel, so that pixel (i, j)'s centre is (j + 0.5, i + 0.5).

Transforms are 4x4 homogeneous matrices named ``a_T_b``: they take coordinates in frame b to
frame a (``p_a = a_T_b @ p_b``). A gsplat viewmat is ``cam_T_world``. A planar pose is
(x, y, z, yaw): translation (x, y, z), rotation yaw about +z.
"""

from __future__ import annotations

import numpy as np

# ego axes (x forward, y left, z up) -> OpenCV camera axes (x right, y down, z forward), for a camera
# looking straight ahead: columns are the camera axes written in the ego frame.
EGO_R_CV = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def pose_matrix(x, y, z, yaw) -> np.ndarray:
    """world_T_body for planar poses. Each argument is a scalar or an array of one shape S.

    Returns [*S, 4, 4] float64.
    """
    x, y, z, yaw = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (x, y, z, yaw)))
    c, s = np.cos(yaw), np.sin(yaw)
    T = np.zeros((*x.shape, 4, 4))
    T[..., 0, 0], T[..., 0, 1] = c, -s
    T[..., 1, 0], T[..., 1, 1] = s, c
    T[..., 2, 2] = 1.0
    T[..., 0, 3], T[..., 1, 3], T[..., 2, 3] = x, y, z
    T[..., 3, 3] = 1.0
    return T


def poses_to_matrices(poses: np.ndarray) -> np.ndarray:
    """[..., 4] planar poses (x, y, z, yaw) -> [..., 4, 4] world_T_body."""
    poses = np.asarray(poses, dtype=np.float64)
    return pose_matrix(poses[..., 0], poses[..., 1], poses[..., 2], poses[..., 3])


def invert_rigid(T: np.ndarray) -> np.ndarray:
    """Inverse of rigid transforms [..., 4, 4] (R^T, -R^T t), exact for rotations."""
    T = np.asarray(T, dtype=np.float64)
    R, t = T[..., :3, :3], T[..., :3, 3]
    out = np.zeros_like(T)
    Rt = np.swapaxes(R, -1, -2)
    out[..., :3, :3] = Rt
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", Rt, t)
    out[..., 3, 3] = 1.0
    return out


def is_rigid(T: np.ndarray, atol: float = 1e-5) -> bool:
    """True when every [4, 4] in T is a proper rigid transform (orthonormal, det +1, last row 0 0 0 1)."""
    T = np.asarray(T, dtype=np.float64)
    R = T[..., :3, :3]
    eye = np.broadcast_to(np.eye(3), R.shape)
    return bool(
        np.allclose(R @ np.swapaxes(R, -1, -2), eye, atol=atol)
        and np.allclose(np.linalg.det(R), 1.0, atol=atol)
        and np.allclose(T[..., 3, :], [0.0, 0.0, 0.0, 1.0], atol=atol)
    )


def wrap_angle(a):
    """Angles to [-pi, pi)."""
    return (np.asarray(a) + np.pi) % (2.0 * np.pi) - np.pi


def transform_points(T: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Apply a_T_b [4, 4] to points [..., 3] in frame b."""
    T = np.asarray(T)
    return np.asarray(p) @ T[:3, :3].T + T[:3, 3]
