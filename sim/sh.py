"""Real spherical harmonics as 3DGS and gsplat use them (degrees 0..3), and their rotation.

Colour of a Gaussian seen along unit direction ``d`` (from the camera centre to the Gaussian, in the
frame its coefficients live in) is ``max(0.5 + sum_k sh[k] * Y_k(d), 0)``, per channel.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
C3 = (
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
)

MAX_SH_DEGREE = 3


def num_sh_bases(degree: int) -> int:
    """Number of coefficients K = (degree + 1)^2 for an SH degree in 0..3."""
    if not 0 <= degree <= MAX_SH_DEGREE:
        raise ValueError(f"SH degree must be in 0..{MAX_SH_DEGREE}, got {degree}")
    return (degree + 1) ** 2


def sh_degree_from_bases(k: int) -> int:
    """Inverse of :func:`num_sh_bases`; raises for a K that is not a square in 1, 4, 9, 16."""
    for d in range(MAX_SH_DEGREE + 1):
        if (d + 1) ** 2 == k:
            return d
    raise ValueError(f"{k} SH coefficients is not (d+1)^2 for a degree d in 0..{MAX_SH_DEGREE}")


def sh_basis(dirs: torch.Tensor, degree: int) -> torch.Tensor:
    """SH basis values.

    dirs: [..., 3] unit directions. Returns [..., (degree+1)^2] in 3DGS coefficient order.
    """
    x, y, z = dirs[..., 0], dirs[..., 1], dirs[..., 2]
    out = [torch.full_like(x, C0)]
    if degree >= 1:
        out += [-C1 * y, C1 * z, -C1 * x]
    if degree >= 2:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        out += [
            C2[0] * xy,
            C2[1] * yz,
            C2[2] * (2.0 * zz - xx - yy),
            C2[3] * xz,
            C2[4] * (xx - yy),
        ]
    if degree >= 3:
        out += [
            C3[0] * y * (3.0 * xx - yy),
            C3[1] * xy * z,
            C3[2] * y * (4.0 * zz - xx - yy),
            C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
            C3[4] * x * (4.0 * zz - xx - yy),
            C3[5] * z * (xx - yy),
            C3[6] * x * (xx - 3.0 * yy),
        ]
    return torch.stack(out, dim=-1)


def eval_sh(sh: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
    """Colour from SH coefficients, as gsplat's ``rasterization`` does it.

    sh: [..., K, 3]; dirs: [..., 3] (need not be unit; zero stays zero). Returns [..., 3] >= 0.
    """
    degree = sh_degree_from_bases(sh.shape[-2])
    d = torch.nn.functional.normalize(dirs, dim=-1)
    basis = sh_basis(d, degree)  # [..., K]
    return torch.clamp_min((basis.unsqueeze(-1) * sh).sum(-2) + 0.5, 0.0)


@functools.lru_cache(maxsize=1)
def _sample_dirs() -> np.ndarray:
    # Fixed, well-spread directions: enough samples that each band's least-squares fit is exact.
    rng = np.random.default_rng(0)
    d = rng.normal(size=(64, 3))
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def sh_rotation_matrices(rot: np.ndarray, degree: int) -> list[np.ndarray]:
    """Per-band matrices X_l with ``c_B[band l] = X_l @ c_A[band l]``, for bands l = 1..degree.

    rot: [3, 3] B_R_A, taking directions in frame A to frame B. Real SH bands are closed under
    rotation: Y_l(R^T v) = D_l Y_l(v) for a (2l+1)-square D_l. A colour f_A(u) = c_A . Y(u) seen
    along v = R u in B is c_A . D_l Y_l(v), so c_B = D_l^T c_A. D_l^T is fitted exactly by least
    squares from sample directions: rows Y_l(v)^T X = Y_l(R^T v)^T.
    """
    v = torch.from_numpy(_sample_dirs())  # [M, 3] directions in B
    v_a = v @ torch.from_numpy(np.asarray(rot, dtype=np.float64))  # rows R^T v: the same directions in A
    yb = sh_basis(v, degree).numpy()  # [M, K]
    ya = sh_basis(v_a, degree).numpy()
    mats = []
    for l in range(1, degree + 1):
        s = slice(l * l, (l + 1) * (l + 1))
        x, *_ = np.linalg.lstsq(yb[:, s], ya[:, s], rcond=None)  # X = D_l^T
        mats.append(x)
    return mats


def rotate_sh(sh: torch.Tensor, rot: np.ndarray) -> torch.Tensor:
    """Express SH coefficients given in frame A in frame B.

    sh: [N, K, 3] coefficients for directions in frame A; rot: [3, 3] B_R_A.
    Returns [N, K, 3] with ``eval_sh(out, R @ d) == eval_sh(sh, d)``. Band 0 is unchanged.
    """
    degree = sh_degree_from_bases(sh.shape[-2])
    out = sh.clone()
    for l, x in enumerate(sh_rotation_matrices(rot, degree), start=1):
        s = slice(l * l, (l + 1) * (l + 1))
        out[:, s, :] = torch.einsum("jk,nkc->njc", torch.as_tensor(x, dtype=sh.dtype), sh[:, s, :])
    return out
