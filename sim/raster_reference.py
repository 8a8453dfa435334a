"""The reference renderer: plain torch, short and obviously correct. The oracle the fast ones must match.

It follows gsplat's math ("classic" mode) step by step:

1. EWA projection. Camera-frame mean t = R m + T; Gaussians with z <= near or z >= far are dropped.
   Covariance Σ_c = R Σ R^T; Jacobian of the pinhole at the mean (x/z, y/z clamped to 1.3x the
   half field of view, as gsplat does), Σ_2d = J Σ_c J^T + 0.3 I (the low-pass filter). A Gaussian
   whose Σ_2d has det <= 0 is dropped.
2. Extent: radius r = ceil(3 sqrt(λ_max(Σ_2d))) pixels (λ_max as gsplat computes it). A Gaussian
   touches pixel centre p only when |p - μ_2d| <= r on both axes; one whose box misses the image is
   dropped.
3. Colour from SH along the direction camera centre -> mean, clamped at 0 after +0.5.
4. Compositing front to back in depth order: α = min(0.99, o exp(-½ d^T Σ_2d^-1 d)); α < 1/255 (or a
   negative exponent) is skipped; a pixel stops before the Gaussian that would take its
   transmittance to 1e-4 or below. rgb = Σ α_i T_i c_i over black, alpha = 1 - T,
   depth = Σ α_i T_i z_i / alpha (expected depth; 0 where nothing is drawn).
"""

from __future__ import annotations

import torch

from sim.gaussians import GaussianCloud, covariances
from sim.sh import eval_sh

ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0
T_MIN = 1e-4
LOW_PASS = 0.3
EXTENT_SIGMAS = 3.0
FOV_CLAMP = 1.3


def project(
    cloud: GaussianCloud, viewmat: torch.Tensor, K: torch.Tensor, width: int, height: int, near: float, far: float
):
    """Project one cloud into one camera.

    viewmat: [4, 4] cam_T_world; K: [3, 3]. Returns a dict of per-Gaussian tensors over the N
    Gaussians: ``valid`` [N] bool, ``mean2d`` [N, 2] px, ``conic`` [N, 3] (a, b, c of Σ_2d^-1 =
    [[a, b], [b, c]]), ``radius`` [N] px, ``depth`` [N] m, ``color`` [N, 3], ``opacity`` [N].
    """
    R, T = viewmat[:3, :3], viewmat[:3, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    p = cloud.means @ R.T + T  # [N, 3] camera frame
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    valid = (z > near) & (z < far)
    zs = torch.where(valid, z, torch.ones_like(z))  # keep culled entries finite

    cov_c = R @ covariances(cloud.quats, cloud.scales) @ R.T  # [N, 3, 3]
    lim_xp = (width - cx) / fx + 0.3 * width / fx
    lim_xn = cx / fx + 0.3 * width / fx
    lim_yp = (height - cy) / fy + 0.3 * height / fy
    lim_yn = cy / fy + 0.3 * height / fy
    tx = zs * torch.clamp(x / zs, -lim_xn, lim_xp)
    ty = zs * torch.clamp(y / zs, -lim_yn, lim_yp)
    J = torch.zeros(len(cloud), 2, 3, dtype=p.dtype)
    J[:, 0, 0] = fx / zs
    J[:, 0, 2] = -fx * tx / (zs * zs)
    J[:, 1, 1] = fy / zs
    J[:, 1, 2] = -fy * ty / (zs * zs)
    cov2d = J @ cov_c @ J.transpose(1, 2)
    a = cov2d[:, 0, 0] + LOW_PASS
    b = cov2d[:, 0, 1]
    c = cov2d[:, 1, 1] + LOW_PASS
    det = a * c - b * b
    valid &= det > 0
    det = torch.where(valid, det, torch.ones_like(det))
    conic = torch.stack([c / det, -b / det, a / det], dim=-1)
    mid = 0.5 * (a + c)
    lam = mid + torch.sqrt(torch.clamp_min(mid * mid - det, 0.01))
    radius = torch.ceil(EXTENT_SIGMAS * torch.sqrt(lam))
    mean2d = torch.stack([fx * x / zs + cx, fy * y / zs + cy], dim=-1)
    valid &= (mean2d[:, 0] + radius > 0) & (mean2d[:, 0] - radius < width)
    valid &= (mean2d[:, 1] + radius > 0) & (mean2d[:, 1] - radius < height)

    campos = -R.T @ T
    color = eval_sh(cloud.sh, cloud.means - campos)
    return dict(valid=valid, mean2d=mean2d, conic=conic, radius=radius, depth=z, color=color, opacity=cloud.opacities)


def rasterize(proj: dict, width: int, height: int, rows_per_block: int = 4, chunk: int = 1024):
    """Composite projected Gaussians front to back. Returns rgb [H, W, 3], alpha [H, W, 1], depth [H, W, 1].

    Pixels are processed in blocks of rows; each block sees only the Gaussians whose box reaches it,
    in depth order, a chunk at a time, with transmittance carried between chunks.
    """
    keep = torch.nonzero(proj["valid"]).squeeze(1)
    order = keep[torch.sort(proj["depth"][keep], stable=True).indices]
    m2 = proj["mean2d"][order]
    con = proj["conic"][order]
    rad = proj["radius"][order]
    col = proj["color"][order]
    dep = proj["depth"][order]
    opa = proj["opacity"][order]

    rgb = torch.zeros(height, width, 3)
    acc_depth = torch.zeros(height, width)
    trans = torch.ones(height, width)
    xs = torch.arange(width, dtype=torch.float32) + 0.5
    for y0 in range(0, height, rows_per_block):
        y1 = min(height, y0 + rows_per_block)
        ys = torch.arange(y0, y1, dtype=torch.float32) + 0.5
        py, px = torch.meshgrid(ys, xs, indexing="ij")
        px, py = px.reshape(-1), py.reshape(-1)  # [P]
        # Gaussians whose box reaches these rows, still in depth order.
        hit = torch.nonzero((m2[:, 1] + rad >= y0 + 0.5) & (m2[:, 1] - rad <= y1 - 0.5)).squeeze(1)
        T = torch.ones(px.shape[0])
        done = torch.zeros(px.shape[0], dtype=torch.bool)
        out_rgb = torch.zeros(px.shape[0], 3)
        out_d = torch.zeros(px.shape[0])
        for s in range(0, hit.shape[0], chunk):
            g = hit[s : s + chunk]
            dx = px[:, None] - m2[g, 0][None, :]  # [P, G]
            dy = py[:, None] - m2[g, 1][None, :]
            inside = (dx.abs() <= rad[g][None, :]) & (dy.abs() <= rad[g][None, :])
            sigma = 0.5 * (con[g, 0] * dx * dx + con[g, 2] * dy * dy) + con[g, 1] * dx * dy
            alpha = torch.clamp_max(opa[g] * torch.exp(-sigma), ALPHA_MAX)
            alpha = torch.where(inside & (sigma >= 0) & (alpha >= ALPHA_MIN) & ~done[:, None], alpha, 0.0)
            after = T[:, None] * torch.cumprod(1.0 - alpha, dim=1)  # transmittance after each Gaussian
            before = torch.cat([T[:, None], after[:, :-1]], dim=1)
            # The first Gaussian that would end at or under T_MIN stops the pixel, itself excluded.
            stop = (after <= T_MIN) & (alpha > 0)
            stopped = torch.cumsum(stop.int(), dim=1) > 0
            w = torch.where(stopped, 0.0, alpha * before)
            out_rgb += w @ col[g]
            out_d += w @ dep[g]
            last_ok = torch.where(stopped, torch.ones_like(after), after).amin(dim=1)
            T = torch.minimum(T, last_ok)
            done |= stopped.any(dim=1)
        rgb[y0:y1] = out_rgb.reshape(y1 - y0, width, 3)
        acc_depth[y0:y1] = out_d.reshape(y1 - y0, width)
        trans[y0:y1] = T.reshape(y1 - y0, width)
    alpha = 1.0 - trans
    depth = torch.where(alpha > 0, acc_depth / alpha.clamp_min(1e-10), torch.zeros_like(alpha))
    return rgb, alpha[..., None], depth[..., None]


def render_reference(clouds, viewmats, Ks, width, height, near=0.01, far=1e10):
    """clouds: S GaussianClouds; viewmats [S, C, 4, 4]; Ks [S, C, 3, 3]. Returns rgb, alpha, depth [S, C, H, W, *]."""
    S, C = viewmats.shape[:2]
    rgb = torch.zeros(S, C, height, width, 3)
    alpha = torch.zeros(S, C, height, width, 1)
    depth = torch.zeros(S, C, height, width, 1)
    for s in range(S):
        cloud = clouds[s].to("cpu")
        for c in range(C):
            if len(cloud) == 0:
                continue
            proj = project(cloud, viewmats[s, c].float().cpu(), Ks[s, c].float().cpu(), width, height, near, far)
            rgb[s, c], alpha[s, c], depth[s, c] = rasterize(proj, width, height)
    return rgb, alpha, depth
