"""``sim.render``: one call renders every camera of every scene, on the backend asked for.

Backends: ``gsplat`` (CUDA), ``cpu`` (this project's numba tile renderer), ``reference`` (plain
torch, the oracle). ``auto`` picks gsplat when CUDA and gsplat are there, else cpu.

Nothing falls back in silence: ``backend="gsplat"`` raises ``BackendUnavailable`` saying why
(no CUDA, gsplat not installed, or gsplat's own import error); ``auto`` on a machine that has an
NVIDIA GPU but cannot use gsplat warns once per process (``warnings.warn`` and the log) before it
renders on the CPU. ``auto`` on a machine without a GPU, or in a process deliberately given none
(``CUDA_VISIBLE_DEVICES`` empty, as Ray does for actors that ask for no GPU), is the CPU by
design, not a fallback, and only logs it. ``backend_report(backend)`` says what a request
resolves to in this process and why, for a run's provenance.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sim.gaussians import GaussianCloud
from sim.raster_cpu import render_cpu
from sim.raster_gsplat import render_gsplat
from sim.raster_reference import render_reference
from sim.scene import Composite

log = logging.getLogger(__name__)

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


class BackendUnavailable(RuntimeError):
    """The backend asked for cannot run in this process; the message says why and what to do."""


@dataclass(frozen=True)
class GsplatStatus:
    """Whether gsplat can render in this process, and if not why (for errors, warnings, provenance).

    gpu_expected: this process was meant to have a GPU (an NVIDIA driver is on the machine and
    ``CUDA_VISIBLE_DEVICES`` does not hide every device), so rendering on the CPU is a fallback.
    """

    usable: bool
    reason: str
    gpu_expected: bool


def _nvidia_driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def _import_gsplat() -> None:
    import gsplat  # noqa: F401  (heavy optional dependency: only CUDA machines install it)


def gsplat_status_of(
    cuda_available: bool,
    torch_cuda_build: str | None,
    driver_present: bool,
    visible_devices: str | None,
    import_gsplat,
) -> GsplatStatus:
    """The decision, from the facts: whether CUDA is visible to torch, torch's CUDA version (None for
    a CPU build), whether an NVIDIA driver is installed, ``CUDA_VISIBLE_DEVICES`` (None if unset), and
    a callable that imports gsplat (raising what the import raises)."""
    hidden = visible_devices is not None and visible_devices.strip() in ("", "-1", "none", "NoDevFiles")
    if not cuda_available:
        if torch_cuda_build is None:
            why = f"torch {torch.__version__} is a CPU build (no CUDA)"
        elif hidden:
            why = f"no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES={visible_devices!r})"
        else:
            why = f"torch (CUDA {torch_cuda_build}) finds no usable CUDA device"
        if not driver_present:
            why += "; this machine has no NVIDIA driver"
        return GsplatStatus(False, why, gpu_expected=driver_present and not hidden)
    try:
        import_gsplat()
    except ModuleNotFoundError as e:
        why = (
            f"the gsplat package is not installed ({e}); install it with SPLATDRIVE_GPU=1 ./dev setup "
            "or pip install -e '.[gpu]'"
        )
        return GsplatStatus(False, why, gpu_expected=True)
    except Exception as e:  # a broken build (CUDA or ABI mismatch) says so when imported
        return GsplatStatus(False, f"importing gsplat failed: {type(e).__name__}: {e}", gpu_expected=True)
    return GsplatStatus(True, "", gpu_expected=True)


@functools.lru_cache(maxsize=1)
def gsplat_status() -> GsplatStatus:
    """This process's ``GsplatStatus`` (cached: CUDA visibility does not change within a process)."""
    return gsplat_status_of(
        torch.cuda.is_available(),
        torch.version.cuda,
        _nvidia_driver_present(),
        os.environ.get("CUDA_VISIBLE_DEVICES"),
        _import_gsplat,
    )


def gsplat_available() -> bool:
    return gsplat_status().usable


_fallback_announced = False  # auto's fallback is announced once per process


def _announce_fallback(status: GsplatStatus) -> None:
    global _fallback_announced
    if _fallback_announced:
        return
    _fallback_announced = True
    if status.gpu_expected:
        msg = (
            f"render backend 'auto' FALLS BACK TO THE CPU: {status.reason}. Rendering on the CPU is "
            "about 100x slower than gsplat on a GPU; fix the install, or say render_backend='cpu' to "
            "mean it (render_backend='gsplat' makes this an error)"
        )
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        log.warning(msg)
    else:
        log.info("render backend 'auto' renders on the CPU: %s", status.reason)


def resolve_backend(backend: str) -> str:
    """The backend a request renders with in this process: raises for an unknown name or for
    'gsplat' where it cannot run; 'auto' -> 'gsplat' or 'cpu' (a fallback from a GPU is warned)."""
    if backend not in BACKENDS:
        raise ValueError(f"render: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        status = gsplat_status()
        if status.usable:
            return "gsplat"
        _announce_fallback(status)
        return "cpu"
    if backend == "gsplat":
        status = gsplat_status()
        if not status.usable:
            raise BackendUnavailable(
                f"render: backend 'gsplat' cannot run here: {status.reason}. It never falls back: use "
                "render_backend='cpu' (or 'auto', which picks gsplat where it can) on this machine"
            )
    return backend


def backend_report(backend: str) -> dict[str, object]:
    """What ``backend`` resolves to in this process, for provenance: requested, used, and for 'auto'
    on the CPU the reason and whether it was a fallback from an expected GPU. Raises like
    ``resolve_backend`` ('gsplat' where it cannot run)."""
    used = resolve_backend(backend)
    out: dict[str, object] = dict(requested=backend, used=used)
    if backend == "auto" and used == "cpu":
        status = gsplat_status()
        out.update(reason=status.reason, fallback=status.gpu_expected)
    return out


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
    if isinstance(cloud, GaussianCloud | Composite):
        batched, scenes = False, [cloud]
    else:
        batched, scenes = True, list(cloud)
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
        clouds = [sc.to_cloud() if isinstance(sc, Composite) else sc for sc in scenes]
        rgb, alpha, depth = render_reference(clouds, viewmats, Ks, width, height, near_plane, far_plane)
    elif name == "cpu":
        rgb, alpha, depth = render_cpu(scenes, viewmats, Ks, width, height, near_plane, far_plane)
    else:
        rgb, alpha, depth = render_gsplat(scenes, viewmats, Ks, width, height, near_plane, far_plane)
    rgb = rgb.clamp_(0.0, 1.0)  # SH colours may exceed 1; the contract is [0, 1]
    if not batched:
        rgb, alpha, depth = rgb[0], alpha[0], depth[0]
    return RenderOutput(rgb, alpha, depth)
