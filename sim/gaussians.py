"""A cloud of 3D Gaussians in activated form: what every renderer and query takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sim.frames import is_rigid
from sim.sh import num_sh_bases, rotate_sh, sh_degree_from_bases


def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """[..., 4] wxyz quaternions (normalised here) -> [..., 3, 3] rotation matrices."""
    q = torch.nn.functional.normalize(quats, dim=-1)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, dim=-1).reshape(*q.shape[:-1], 3, 3)


def rotmat_to_quat(R: np.ndarray) -> np.ndarray:
    """[3, 3] rotation matrix -> [4] unit wxyz quaternion with w >= 0 (Shepperd's method)."""
    R = np.asarray(R, dtype=np.float64)
    tr = np.trace(R)
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = [(R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s]
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = [(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = [(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s]
    quat = np.asarray(q)
    quat /= np.linalg.norm(quat)
    return quat if quat[0] >= 0 else -quat


def quat_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b of wxyz quaternions [..., 4] (rotation b first, then a)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def covariances(quats: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """World covariances R S S^T R^T. quats [N, 4] wxyz, scales [N, 3] metres -> [N, 3, 3] m^2."""
    M = quat_to_rotmat(quats) * scales.unsqueeze(-2)  # R @ diag(s)
    return M @ M.transpose(-1, -2)


@dataclass(frozen=True, eq=False)
class GaussianCloud:
    """N Gaussians, activated (the PLY stores logits and log-scales; see ``sim.ply``).

    means: [N, 3] metres; quats: [N, 4] wxyz, unit; scales: [N, 3] metres, > 0;
    opacities: [N] in (0, 1); sh: [N, K, 3] SH coefficients, K = (degree+1)^2, degree 0..3, band 0
    first (colour = max(0.5 + SH(dir), 0), as gsplat). All float32, on one device.

    Immutable by convention: renderers cache per-cloud work (covariances, spatial index) keyed on
    the object, so build a new cloud rather than writing into one's tensors.
    """

    means: torch.Tensor
    quats: torch.Tensor
    scales: torch.Tensor
    opacities: torch.Tensor
    sh: torch.Tensor
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # not an input: derived data

    def __post_init__(self):
        n = self.means.shape[0]
        shapes = {
            "means": (self.means, (n, 3)),
            "quats": (self.quats, (n, 4)),
            "scales": (self.scales, (n, 3)),
            "opacities": (self.opacities, (n,)),
        }
        for name, (t, shape) in shapes.items():
            if tuple(t.shape) != shape:
                raise ValueError(f"GaussianCloud.{name}: expected shape {shape}, got {tuple(t.shape)}")
        if self.sh.ndim != 3 or self.sh.shape[0] != n or self.sh.shape[2] != 3:
            raise ValueError(f"GaussianCloud.sh: expected [N={n}, K, 3], got {tuple(self.sh.shape)}")
        try:
            sh_degree_from_bases(self.sh.shape[1])
        except ValueError as e:
            raise ValueError(f"GaussianCloud.sh: {e}") from None
        for name in ("means", "quats", "scales", "opacities", "sh"):
            t = getattr(self, name)
            if t.dtype != torch.float32:
                raise ValueError(f"GaussianCloud.{name}: expected float32, got {t.dtype}")
            if t.device != self.means.device:
                raise ValueError(f"GaussianCloud.{name} is on {t.device}, means on {self.means.device}")

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def create(means, quats, scales, opacities, sh, device=None) -> GaussianCloud:
        """Build from array-likes (numpy or torch), casting to float32 and normalising quats.

        ``sh`` may be [N, 3] (degree 0 coefficients) or [N, K, 3].
        """

        def f32(a):
            return torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a, dtype=torch.float32).to(
                device or "cpu"
            )

        sh_t = f32(sh)
        if sh_t.ndim == 2:
            sh_t = sh_t.unsqueeze(1)
        q = torch.nn.functional.normalize(f32(quats).reshape(-1, 4), dim=-1)
        return GaussianCloud(
            f32(means).reshape(-1, 3).contiguous(),
            q.contiguous(),
            f32(scales).reshape(-1, 3).contiguous(),
            f32(opacities).reshape(-1).contiguous(),
            sh_t.contiguous(),
        )

    @staticmethod
    def empty(sh_degree: int = 0, device: str | torch.device = "cpu") -> GaussianCloud:
        k = num_sh_bases(sh_degree)
        z = torch.zeros
        return GaussianCloud(
            z(0, 3, device=device), z(0, 4, device=device), z(0, 3, device=device), z(0, device=device),
            z(0, k, 3, device=device),
        )  # fmt: skip

    @staticmethod
    def from_rgb(means, quats, scales, opacities, rgb, sh_degree: int = 0, device=None) -> GaussianCloud:
        """A view-independent cloud from linear colours rgb [N, 3] in [0, 1]."""
        rgb = np.asarray(rgb, dtype=np.float32)
        sh = np.zeros((rgb.shape[0], num_sh_bases(sh_degree), 3), dtype=np.float32)
        sh[:, 0, :] = rgb_to_sh0(rgb)
        return GaussianCloud.create(means, quats, scales, opacities, sh, device=device)

    # -- properties ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.means.shape[0])

    @property
    def sh_degree(self) -> int:
        return sh_degree_from_bases(self.sh.shape[1])

    @property
    def device(self) -> torch.device:
        return self.means.device

    @property
    def nbytes(self) -> int:
        return sum(t.element_size() * t.numel() for t in self.tensors())

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.means, self.quats, self.scales, self.opacities, self.sh)

    def cache(self, key: str, build):
        """Per-cloud memo for derived data (``build()`` runs once per key); see class docstring."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # -- operations ---------------------------------------------------------------------------
    def to(self, device) -> GaussianCloud:
        if torch.device(device) == self.device:
            return self
        return GaussianCloud(*(t.to(device) for t in self.tensors()))

    def subset(self, index) -> GaussianCloud:
        """Gaussians selected by a bool mask [N] or an index array."""
        idx = torch.as_tensor(np.asarray(index) if not torch.is_tensor(index) else index, device=self.device)
        return GaussianCloud(*(t[idx].contiguous() for t in self.tensors()))

    def with_sh_degree(self, degree: int) -> GaussianCloud:
        """Same cloud with SH truncated or zero-padded to ``degree``."""
        k = num_sh_bases(degree)
        if k == self.sh.shape[1]:
            return self
        sh = torch.zeros(len(self), k, 3, device=self.device)
        m = min(k, self.sh.shape[1])
        sh[:, :m] = self.sh[:, :m]
        return GaussianCloud(self.means, self.quats, self.scales, self.opacities, sh)

    @staticmethod
    def cat(clouds: Sequence[GaussianCloud]) -> GaussianCloud:
        """Concatenate clouds; SH is padded with zeros to the highest degree among them."""
        clouds = list(clouds)
        if not clouds:
            return GaussianCloud.empty()
        deg = max(c.sh_degree for c in clouds)
        clouds = [c.with_sh_degree(deg) for c in clouds]
        return GaussianCloud(*(torch.cat(ts, 0).contiguous() for ts in zip(*(c.tensors() for c in clouds))))

    def transform(self, a_T_b: np.ndarray) -> GaussianCloud:
        """Move a cloud given in frame b into frame a by the rigid a_T_b [4, 4].

        Means, orientations and the SH coefficients all turn, so view-dependent colour is right
        from every viewpoint after the move.
        """
        T = np.asarray(a_T_b, dtype=np.float64)
        if T.shape != (4, 4) or not is_rigid(T):
            raise ValueError("transform: expected a rigid 4x4 transform (orthonormal rotation, no scale)")
        R = torch.as_tensor(T[:3, :3], dtype=torch.float32, device=self.device)
        t = torch.as_tensor(T[:3, 3], dtype=torch.float32, device=self.device)
        q = torch.as_tensor(rotmat_to_quat(T[:3, :3]), dtype=torch.float32, device=self.device)
        sh = rotate_sh(self.sh, T[:3, :3]) if self.sh_degree > 0 else self.sh
        return GaussianCloud(
            (self.means @ R.T + t).contiguous(),
            torch.nn.functional.normalize(quat_multiply(q.expand_as(self.quats), self.quats), dim=-1),
            self.scales,
            self.opacities,
            sh.contiguous(),
        )

    def rgb0(self) -> torch.Tensor:
        """View-independent (band 0) colour [N, 3], as a preview or for degree-0 clouds."""
        return sh0_to_rgb(self.sh[:, 0, :]).clamp_min(0.0)


SH_C0 = 0.28209479177387814


def rgb_to_sh0(rgb):
    """Linear colour in [0, 1] -> band-0 coefficient (so that 0.5 + C0 * f = rgb)."""
    return (rgb - 0.5) / SH_C0


def sh0_to_rgb(f):
    return 0.5 + SH_C0 * f
