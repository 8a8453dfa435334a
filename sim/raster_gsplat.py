"""The GPU backend: ``gsplat.rasterization`` on CUDA, every camera of every scene in one call.

Scenes are stacked along gsplat's leading batch dimension; scenes with fewer Gaussians are padded
with zero-opacity ones (never drawn). Composites are materialised on the GPU (background plus each
posed asset, SH rotated), which is cheap there. gsplat's conventions are the contract of
``sim.render``: world-to-camera OpenCV viewmats, pinhole Ks, "classic" mode with the 0.3 px low-pass.
"""

from __future__ import annotations

import torch

from sim.gaussians import GaussianCloud
from sim.scene import Composite


def _stack(clouds: list[GaussianCloud], device) -> dict[str, torch.Tensor | int]:
    n = max([len(c) for c in clouds] + [1])
    deg = max(c.sh_degree for c in clouds)
    k = (deg + 1) ** 2
    S = len(clouds)
    means = torch.zeros(S, n, 3, device=device)
    quats = torch.zeros(S, n, 4, device=device)
    quats[..., 0] = 1.0
    scales = torch.full((S, n, 3), 1e-3, device=device)
    opac = torch.zeros(S, n, device=device)
    sh = torch.zeros(S, n, k, 3, device=device)
    for s, c in enumerate(clouds):
        c = c.to(device).with_sh_degree(deg)
        m = len(c)
        means[s, :m], quats[s, :m], scales[s, :m], opac[s, :m], sh[s, :m] = c.tensors()
    return dict(means=means, quats=quats, scales=scales, opacities=opac, colors=sh, sh_degree=deg)


def render_gsplat(scenes, viewmats, Ks, width, height, near=0.01, far=1e10):
    """scenes: S GaussianClouds or Composites; viewmats [S, C, 4, 4]; Ks [S, C, 3, 3] -> rgb, alpha, depth."""
    import gsplat

    device = torch.device("cuda")
    clouds = [sc.to_cloud() if isinstance(sc, Composite) else sc for sc in scenes]
    if all(len(c) == 0 for c in clouds):
        S, C = viewmats.shape[:2]
        z = torch.zeros(S, C, height, width, 1, device=device)
        return torch.zeros(S, C, height, width, 3, device=device), z, z.clone()
    g = _stack(clouds, device)
    colors, alphas, _ = gsplat.rasterization(
        g["means"],
        g["quats"],
        g["scales"],
        g["opacities"],
        g["colors"],
        viewmats.to(device),
        Ks.to(device),
        width,
        height,
        near_plane=near,
        far_plane=far,
        sh_degree=g["sh_degree"],
        render_mode="RGB+ED",
        rasterize_mode="classic",
        packed=False,
        eps2d=0.3,
    )
    rgb = colors[..., :3]
    depth = torch.where(alphas > 0, colors[..., 3:4], torch.zeros_like(alphas))
    return rgb, alphas, depth
