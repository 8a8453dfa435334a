"""``sim.render``: one call renders every camera of every scene, on the backend asked for.

Backends: ``gsplat`` (CUDA), ``cpu`` (this project's numba tile renderer), ``reference`` (plain
torch, the oracle). ``auto`` picks gsplat when CUDA and gsplat are there, else cpu.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sim.gaussians import GaussianCloud
from sim.scene import Composite

BACKENDS = ("auto", "gsplat", "cpu", "reference")


@dataclass(frozen=True)
class RenderOutput:
    """Images for C cameras (with a leading scene axis S when several scenes were rendered).

    rgb: [(S,) C, H, W, 3] float32 in [0, 1], composited over black; alpha: [(S,) C, H, W, 1];
    depth: [(S,) C, H, W, 1] expected camera-frame z in metres (0 where alpha is 0).
    """

    rgb: torch.Tensor
    alpha: torch.Tensor
    depth: torch.Tensor

    def to_uint8(self) -> torch.Tensor:
        """rgb as uint8 [..., H, W, 3] (rounded), what environments observe."""
        return (self.rgb.clamp(0.0, 1.0) * 255.0 + 0.5).to(torch.uint8)


@functools.lru_cache(maxsize=1)
def gsplat_available() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import gsplat  # noqa: F401
    except Exception:
        return False
    return True


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"render: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "gsplat" if gsplat_available() else "cpu"
    if backend == "gsplat" and not gsplat_available():
        raise RuntimeError(
            "render: backend 'gsplat' needs CUDA and the gsplat package (pip install -e '.[gpu]'); "
            "use backend='cpu' on machines without a GPU"
        )
    return backend


Renderable = GaussianCloud | Composite


def render(
    cloud: Renderable | Sequence[Renderable],
    viewmats,
    Ks,
    width: int,
    height: int,
    backend: str = "auto",
    near_plane: float = 0.01,
    far_plane: float = 1e10,
) -> RenderOutput:
    """Render C cameras of one scene, or C cameras of each of S scenes, in one call.

    cloud: a GaussianCloud or a Composite (background + posed actors), or a sequence of S of them.
    viewmats: world-to-camera (OpenCV) [C, 4, 4], or [S, C, 4, 4] for S scenes.
    Ks: intrinsics [C, 3, 3] (shared by all scenes) or [S, C, 3, 3].
    Gaussians with camera-frame z outside (near_plane, far_plane) metres are not drawn.
    Returns a RenderOutput with [C, H, W, *] images, or [S, C, H, W, *] for a sequence of scenes.
    """
    batched = not isinstance(cloud, GaussianCloud | Composite)
    scenes = list(cloud) if batched else [cloud]
    for i, sc in enumerate(scenes):
        if not isinstance(sc, GaussianCloud | Composite):
            raise TypeError(f"render: scene {i} is a {type(sc).__name__}, expected a GaussianCloud or Composite")
    viewmats = torch.as_tensor(viewmats, dtype=torch.float32)
    Ks = torch.as_tensor(Ks, dtype=torch.float32)
    S = len(scenes)
    if not batched:
        viewmats = viewmats.unsqueeze(0)
    if viewmats.ndim != 4 or viewmats.shape[0] != S or viewmats.shape[-2:] != (4, 4):
        want = "[S, C, 4, 4] with S = number of scenes" if batched else "[C, 4, 4]"
        raise ValueError(f"render: viewmats must be {want}, got {tuple(viewmats.shape)} for {S} scene(s)")
    C = viewmats.shape[1]
    if Ks.ndim == 3:
        Ks = Ks.unsqueeze(0).expand(S, -1, -1, -1)
    elif not batched and Ks.ndim == 4:
        raise ValueError(f"render: Ks must be [C, 3, 3] for one scene, got {tuple(Ks.shape)}")
    if Ks.shape != (S, C, 3, 3):
        raise ValueError(f"render: Ks must be [C={C}, 3, 3] or [S={S}, C={C}, 3, 3], got {tuple(Ks.shape)}")
    if int(width) <= 0 or int(height) <= 0:
        raise ValueError(f"render: width and height must be positive, got {width}x{height}")
    if not 0.0 < near_plane < far_plane:
        raise ValueError(f"render: need 0 < near_plane < far_plane, got {near_plane}, {far_plane}")
    if not (torch.isfinite(viewmats).all() and torch.isfinite(Ks).all()):
        raise ValueError("render: viewmats and Ks must be finite")

    name = resolve_backend(backend)
    width, height = int(width), int(height)
    if name == "reference":
        from sim.raster_reference import render_reference

        clouds = [sc.to_cloud() if isinstance(sc, Composite) else sc for sc in scenes]
        rgb, alpha, depth = render_reference(clouds, viewmats, Ks, width, height, near_plane, far_plane)
    elif name == "cpu":
        from sim.raster_cpu import render_cpu

        rgb, alpha, depth = render_cpu(scenes, viewmats, Ks, width, height, near_plane, far_plane)
    else:
        from sim.raster_gsplat import render_gsplat

        rgb, alpha, depth = render_gsplat(scenes, viewmats, Ks, width, height, near_plane, far_plane)
    rgb = rgb.clamp_(0.0, 1.0)  # SH colours may exceed 1; the contract is [0, 1]
    if not batched:
        rgb, alpha, depth = rgb[0], alpha[0], depth[0]
    return RenderOutput(rgb, alpha, depth)
