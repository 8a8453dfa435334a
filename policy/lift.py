"""The lift encoder: image features lifted into the bird's-eye grid through the rig's known geometry.

In the manner of Simple-BEV (Harley et al. 2023): no depth is predicted; every BEV cell is looked up in
every camera that sees it, at a few heights, and the cameras' features there are averaged. The grid and
the rig are fixed, so where each (cell, height) lands in each image is computed once (a buffer), and a
forward pass is a small CNN per image, one ``grid_sample`` and a small CNN on the grid. Shapes
(B batch, F frames (1, or 2 with ``EnvConfig.camera_history``), C cameras, Z heights, G grid cells a side,
Cl = ``lift_channels``, Cb = ``bev_channels``, E = ``embed_dim``):

    images uint8 [B, F*C, H, W, 3]                      (now, then k steps ago, each the rig's C cameras)
      -> normalise -> backbone (``lift_backbone``)                    -> [B*F*C, Cl, h, w]
           small: conv 5x5 /4, conv 3x3 /2, conv 1x1                   (h, w = H/8, W/8)
           deep:  conv 3x3 /2 (8), conv 3x3 /2, conv 3x3 (16) = f4;    (h, w = H/4, W/4)
                  conv 3x3 /2, conv 3x3 (32) = f8;
                  conv 1x1 over [f4, f8 upsampled x2]
      -> grid_sample at each camera's projections of the grid points  -> [B, F, C, Cl, Z, G, G]
           (the earlier frame's at the points' projections 0.3 s ago with ``lift_align_s``)
      -> mean over the cameras that see the point (others masked out) -> [B, F*Cl*Z, G, G]
      (+ the ego's speed / 10 and yaw rate, constant over the grid)   -> [B, F*Cl*Z + 2, G, G]
      -> bev: conv 1x1, conv 3x3, conv 3x3 (ReLU; dilated by ``lift_bev_dilation``) -> [B, Cb, G, G] (``bev``)
      -> reduce: conv 3x3 /2, conv 3x3 /2, flatten, linear (ReLU)     -> [B, E]          (``forward``)

Stage perception trains the backbone and ``bev`` with heads on the grid (``learner.perception``); the
policy reads ``reduce``'s vector, and ``freeze_cameras`` keeps what perception trained (``perceptual``)
while stages il and rl train ``reduce`` with the planner. Grid rows run along x (forward, from
``bev_behind_m`` behind the rear axle), columns along y (left), as ``learner.perception.labels.BEVGrid``.
The grid points are cell centres at heights ``lift_heights`` above the ground (the ego frame's z = 0).

The ego's own motion (speed and yaw rate: the first two features of the ego part in either mode) joins the
grid: with two frames the network sees how things moved against the ego, and velocities over the ground
(the labels, and what a planner needs) are that plus the ego's own. Without it (``ego`` None) it is zero.

With ``lift_align_s`` (the frames' gap, 0.3 s in training) the earlier frame is not looked up at the grid's
points but where they were then (``earlier_points``: the ego's arc over the gap from its speed and yaw rate,
undone), projected per sample (``project``, the torch twin of ``projections``: [B, N, 3] -> [B, C, N, 2]):
still things then fall in the same cells in both frames, so what differs between them is what moved, and a
cell's velocity is a local difference rather than one the grid CNN must first subtract the ego's motion from.
The first steps of an episode, whose earlier frame is a copy of the first one, are aligned all the same.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sim.camera import CameraRig, make_rig


class LiftSettings(Protocol):
    """What the lift reads of ``policy.network.PolicyConfig`` (named here so the network imports the lift,
    not the other way round)."""

    @property
    def lift_rig(self) -> str: ...

    @property
    def bev_cells(self) -> int: ...

    @property
    def bev_range_m(self) -> float: ...

    @property
    def bev_behind_m(self) -> float: ...

    @property
    def lift_heights(self) -> tuple[float, ...]: ...

    @property
    def lift_backbone(self) -> str: ...

    @property
    def lift_align_s(self) -> float: ...

    @property
    def lift_channels(self) -> int: ...

    @property
    def bev_channels(self) -> int: ...

    @property
    def lift_bev_dilation(self) -> tuple[int, int]: ...

    @property
    def embed_dim(self) -> int: ...

    @property
    def image_mean(self) -> tuple[float, float, float]: ...

    @property
    def image_std(self) -> tuple[float, float, float]: ...


MIN_DEPTH_M = 0.3  # points closer to a camera than this (or behind it) are not looked up in it
EGO_SCALE = (0.1, 1.0)  # the ego's speed (m/s) and yaw rate (rad/s) as grid channels: about unit scale


def grid_points(cells: int, range_m: float, behind_m: float, heights) -> np.ndarray:
    """[Z, G, G, 3] ego-frame points: cell centres (x along rows, y along columns) at each height."""
    c = (np.arange(cells) + 0.5) * (range_m / cells)
    x, y = c - behind_m, c - 0.5 * range_m
    X, Y = np.meshgrid(x, y, indexing="ij")
    return np.stack([np.stack([X, Y, np.full_like(X, float(z))], -1) for z in heights])


def projections(rig: CameraRig, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where ego-frame points [..., 3] land in each camera: (grid [C, N, 2] in ``grid_sample``'s
    normalised coordinates, align_corners=False; valid [C, N] bool: in front of the camera by
    ``MIN_DEPTH_M`` and inside the image), N = the points flattened."""
    p = np.concatenate([points.reshape(-1, 3), np.ones((points.size // 3, 1))], axis=1)  # [N, 4]
    grids, valid = [], []
    for cam in rig.cameras:
        q = (np.linalg.inv(cam.ego_T_cam) @ p.T).T  # camera frame (OpenCV: x right, y down, z forward)
        z = q[:, 2]
        zs = np.where(z > MIN_DEPTH_M, z, 1.0)
        u = cam.fx * q[:, 0] / zs + cam.cx  # pixels, the image's left edge at 0
        v = cam.fy * q[:, 1] / zs + cam.cy
        gx, gy = 2.0 * u / cam.width - 1.0, 2.0 * v / cam.height - 1.0
        ok = (z > MIN_DEPTH_M) & (np.abs(gx) <= 1.0) & (np.abs(gy) <= 1.0)
        grids.append(np.where(ok[:, None], np.stack([gx, gy], 1), -2.0))  # outside: zeros padding
        valid.append(ok)
    return np.stack(grids).astype(np.float32), np.stack(valid)


def earlier_points(points: torch.Tensor, motion: torch.Tensor, seconds: float) -> torch.Tensor:
    """Ego-frame points now [N, 3] -> the same (still) points in the ego frame ``seconds`` earlier, [B, N, 3],
    from the ego's speed (m/s) and yaw rate (rad/s) now, ``motion`` [B, 2], held over them: the ego drove an arc
    of length d = v t turning dθ = ω t, so it now stands at the chord d sinc(dθ/2) at angle dθ/2 of the earlier
    frame, turned by dθ; a point p now was at R(dθ) p + chord then."""
    v, w = motion[:, 0:1], motion[:, 1:2]  # [B, 1]
    turn = w * seconds
    half = 0.5 * turn
    small = half.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(half), half)
    sinc = torch.where(small, 1.0 - half * half / 6.0, torch.sin(safe) / safe)
    chord = v * seconds * sinc
    c, s = torch.cos(turn), torch.sin(turn)
    x, y, z = points[None, :, 0], points[None, :, 1], points[None, :, 2]  # [1, N]
    px = c * x - s * y + chord * torch.cos(half)
    py = s * x + c * y + chord * torch.sin(half)
    return torch.stack([px, py, z.expand_as(px)], -1)


def rig_tensors(rig: CameraRig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rig as float32 tensors for ``project``: cam_T_ego [C, 4, 4], (fx, fy, cx, cy) [C, 4], (W, H) [C, 2]."""
    cam_T_ego = np.stack([np.linalg.inv(cam.ego_T_cam) for cam in rig.cameras])
    intr = np.array([[cam.fx, cam.fy, cam.cx, cam.cy] for cam in rig.cameras])
    size = np.array([[cam.width, cam.height] for cam in rig.cameras])
    return tuple(torch.from_numpy(a.astype(np.float32)) for a in (cam_T_ego, intr, size))  # type: ignore[return-value]


def project(
    points: torch.Tensor, cam_T_ego: torch.Tensor, intr: torch.Tensor, size: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``projections`` in torch, per sample: ego-frame points [B, N, 3] -> (grid [B, C, N, 2] in grid_sample's
    coordinates, -2 where not seen; valid [B, C, N] bool)."""
    R, t = cam_T_ego[:, :3, :3], cam_T_ego[:, :3, 3]  # [C, 3, 3], [C, 3]
    q = torch.matmul(points[:, None], R.transpose(1, 2)[None]) + t[None, :, None]  # [B, C, N, 3] camera frame
    z = q[..., 2]
    zs = torch.where(z > MIN_DEPTH_M, z, torch.ones_like(z))
    fx, fy, cx, cy = (intr[None, :, i, None] for i in range(4))
    u = fx * q[..., 0] / zs + cx
    v = fy * q[..., 1] / zs + cy
    gx = 2.0 * u / size[None, :, 0, None] - 1.0
    gy = 2.0 * v / size[None, :, 1, None] - 1.0
    ok = (z > MIN_DEPTH_M) & (gx.abs() <= 1.0) & (gy.abs() <= 1.0)
    grid = torch.where(ok[..., None], torch.stack([gx, gy], -1), torch.full_like(q[..., :2], -2.0))
    return grid, ok


def _conv(c_in: int, c_out: int, k: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=dilation * (k // 2), dilation=dilation)
    nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
    nn.init.zeros_(conv.bias)  # type: ignore[arg-type]  # Conv2d(bias=True) has one
    return nn.Sequential(conv, nn.ReLU())


class DeepBackbone(nn.Module):
    """images [N, 3, H, W] -> [N, Cl, H/4, W/4]: five 3x3 convolutions down to 1/8 of the image (receptive
    field ~39 px against ~13 of ``small``), and the 1/4 features beside the 1/8 ones upsampled, so a car a
    few pixels wide still has its own feature cell (the lift samples them bilinearly, at any resolution)."""

    def __init__(self, channels: int):
        super().__init__()
        self.down4 = nn.Sequential(_conv(3, 8, 3, 2), _conv(8, 16, 3, 2), _conv(16, 16, 3))
        self.down8 = nn.Sequential(_conv(16, 32, 3, 2), _conv(32, 32, 3))
        self.out = _conv(16 + 32, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f4 = self.down4(x)
        f8 = F.interpolate(self.down8(f4), size=f4.shape[-2:], mode="nearest")
        return self.out(torch.cat([f4, f8], 1))


LIFT_BACKBONES = ("small", "deep")


def make_backbone(kind: str, channels: int) -> nn.Module:
    """The per-image CNN of the lift encoder (``policy.lift_backbone``)."""
    if kind == "small":
        return nn.Sequential(_conv(3, 16, 5, 4), _conv(16, 32, 3, 2), _conv(32, channels, 1))
    if kind == "deep":
        return DeepBackbone(channels)
    raise ValueError(f"policy.lift_backbone: expected one of {', '.join(LIFT_BACKBONES)}, got {kind!r}")


class LiftEncoder(nn.Module):
    """cameras uint8 [B, F*C, H, W, 3] -> BEV features [B, Cb, G, G] (``bev``) -> [B, E] (``forward``)."""

    img_mean: torch.Tensor
    img_std: torch.Tensor
    sample_grid: torch.Tensor
    weight: torch.Tensor
    points: torch.Tensor  # lift_align_s > 0: the grid's points [N, 3] and the rig (rig_tensors)
    cam_T_ego: torch.Tensor
    intrinsics: torch.Tensor
    image_size: torch.Tensor

    def __init__(self, n_images: int, height: int, width: int, cfg: LiftSettings):
        super().__init__()
        rig = make_rig(cfg.lift_rig, width, height)
        C = len(rig)
        if n_images not in (C, 2 * C):
            raise ValueError(
                f"policy.camera_encoder=lift: the observation has {n_images} images, but policy.lift_rig="
                f"{cfg.lift_rig!r} has {C} cameras (C now, or 2C with env.camera_history > 0): set policy.lift_rig "
                "to the env's rig"
            )
        self.cameras, self.frames = C, n_images // C
        self.cells, Z = cfg.bev_cells, len(cfg.lift_heights)
        self.register_buffer("img_mean", torch.tensor(cfg.image_mean).view(1, 3, 1, 1))
        self.register_buffer("img_std", torch.tensor(cfg.image_std).view(1, 3, 1, 1))
        Cl, Cb = cfg.lift_channels, cfg.bev_channels
        self.backbone = make_backbone(cfg.lift_backbone, Cl)
        grid, valid = projections(rig, grid_points(self.cells, cfg.bev_range_m, cfg.bev_behind_m, cfg.lift_heights))
        # derived from the rig and the grid, so not saved (a checkpoint loads only into the same rig and grid)
        self.register_buffer("sample_grid", torch.from_numpy(grid)[:, None], persistent=False)  # [C, 1, N, 2]
        w = valid.astype(np.float32)
        w = w / np.maximum(w.sum(0, keepdims=True), 1.0)  # the mean over the cameras that see a point
        self.register_buffer("weight", torch.from_numpy(w).view(C, 1, Z, self.cells, self.cells), persistent=False)
        # lift_align_s > 0: the earlier frame is looked up where the grid's points were then (the ego's motion
        # over the gap undone), so still things line up in both frames and what moved is what differs
        self.align_s = float(cfg.lift_align_s) if self.frames == 2 else 0.0
        if self.align_s:
            pts = grid_points(self.cells, cfg.bev_range_m, cfg.bev_behind_m, cfg.lift_heights).reshape(-1, 3)
            self.register_buffer("points", torch.from_numpy(pts.astype(np.float32)), persistent=False)
            for name, t in zip(("cam_T_ego", "intrinsics", "image_size"), rig_tensors(rig)):
                self.register_buffer(name, t, persistent=False)
        d1, d2 = cfg.lift_bev_dilation
        self.bev_net = nn.Sequential(
            _conv(self.frames * Cl * Z + len(EGO_SCALE), Cb, 1), _conv(Cb, Cb, 3, dilation=d1),
            _conv(Cb, Cb, 3, dilation=d2),
        )  # fmt: skip
        G4 = -(-self.cells // 4)
        self.reduce = nn.Sequential(
            _conv(Cb, 2 * Cb, 3, 2), _conv(2 * Cb, 2 * Cb, 3, 2), nn.Flatten(),
            nn.Linear(2 * Cb * G4 * G4, cfg.embed_dim), nn.ReLU(),
        )  # fmt: skip
        self.bev_channels = Cb

    def perceptual(self) -> list[nn.Parameter]:
        """The parameters stage perception trains (the backbone and the grid's CNN; not ``reduce``)."""
        return [*self.backbone.parameters(), *self.bev_net.parameters()]

    def bev(self, images: torch.Tensor, ego: torch.Tensor | None = None) -> torch.Tensor:
        """[B, F*C, H, W, 3] uint8 (and the ego part [B, >= 2]: speed, yaw rate first) -> [B, Cb, G, G]."""
        if images.dtype != torch.uint8:
            raise TypeError(f"LiftEncoder: obs['cameras'] must be uint8 [B, F*C, H, W, 3], got dtype {images.dtype}")
        B, FC, H, W, _ = images.shape
        x = images.reshape(B * FC, H, W, 3).permute(0, 3, 1, 2).float()
        x = x.mul_(1.0 / (255.0 * self.img_std)).sub_(self.img_mean / self.img_std)
        f = self.backbone(x)  # [B*F*C, Cl, h, w]
        G = self.cells
        motion = torch.zeros(B, len(EGO_SCALE), dtype=f.dtype, device=f.device)
        if ego is not None:
            motion = ego[:, : len(EGO_SCALE)].to(f.dtype)  # speed m/s, yaw rate rad/s
        s = self._lift_aligned(f, motion) if self.align_s else self._lift(f)  # [B, F*Cl*Z, G, G]
        scaled = motion * torch.tensor(EGO_SCALE, dtype=f.dtype, device=f.device)
        return self.bev_net(torch.cat([s, scaled[:, :, None, None].expand(B, -1, G, G)], 1))

    def _sample(self, f: torch.Tensor, grid: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Features f [M, C, Cl, h, w] looked up at grid [M or 1, C, N, 2] (grid_sample's coordinates) and
        averaged over the cameras with weight [M or 1, C, N] -> [M, Cl, N]."""
        M, C, Cl, h, w = f.shape
        N = grid.shape[2]
        s = F.grid_sample(
            f.reshape(M * C, Cl, h, w), grid.expand(M, -1, -1, -1).reshape(M * C, 1, N, 2), mode="bilinear",
            padding_mode="zeros", align_corners=False,
        ).view(M, C, Cl, N)  # fmt: skip
        return (s * weight[:, :, None]).sum(1)

    def _fixed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The rig's projections of the grid's points [1, C, N, 2] and the cameras' weights there [1, C, N]."""
        C = self.cameras
        return self.sample_grid.view(1, C, -1, 2), self.weight.view(1, C, -1)

    def _lift(self, f: torch.Tensor) -> torch.Tensor:
        """Every frame's features [B*F*C, Cl, h, w] lifted at the grid's points -> [B, F*Cl*Z, G, G]."""
        BFC, Cl, h, w = f.shape
        s = self._sample(f.view(BFC // self.cameras, self.cameras, Cl, h, w), *self._fixed())  # [B*F, Cl, N]
        return s.reshape(BFC // (self.frames * self.cameras), -1, self.cells, self.cells)

    def _lift_aligned(self, f: torch.Tensor, motion: torch.Tensor) -> torch.Tensor:
        """Both frames' features [B*2*C, Cl, h, w] lifted, the earlier one at the grid's points as they were
        ``align_s`` earlier (earlier_points, projected per sample) -> [B, 2*Cl*Z, G, G]."""
        BFC, Cl, h, w = f.shape
        f = f.view(BFC // (2 * self.cameras), 2, self.cameras, Cl, h, w)
        now = self._sample(f[:, 0], *self._fixed())  # [B, Cl, N]
        grid, ok = project(earlier_points(self.points, motion, self.align_s), self.cam_T_ego, self.intrinsics,
                           self.image_size)  # fmt: skip
        seen = ok.to(f.dtype)
        seen = seen / seen.sum(1, keepdim=True).clamp(min=1.0)  # the mean over the cameras that see the point
        then = self._sample(f[:, 1], grid, seen)  # [B, Cl, N]
        return torch.stack([now, then], 1).reshape(f.shape[0], -1, self.cells, self.cells)

    def forward(self, images: torch.Tensor, ego: torch.Tensor | None = None) -> torch.Tensor:
        return self.reduce(self.bev(images, ego))
