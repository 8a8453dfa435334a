"""The fast CPU renderer: numba tile rasteriser, multi-threaded, same math as ``sim.raster_reference``.

Work done once per cloud (cached on the GaussianCloud): 3D covariances, band-0 colours, and a
spatial split into chunks of nearby Gaussians with their bounding boxes. Clouds rendered together
(every background and asset of every scene in the call) are packed into one *bank*, cached while
the same clouds keep coming, so a frame touches no per-Gaussian Python.

Per frame, in one numba call:
1. cull chunks against each camera's frustum (planes widened by a bound on the projected 3-sigma
   extent, so culling never drops a Gaussian the reference would draw) and the near/far planes;
2. project the Gaussians of the surviving chunks (EWA, as the reference), in parallel;
3. bin into 16x16 tiles, then radix-sort each tile's list by depth, tiles in parallel;
4. per tile, in parallel, composite front to back with per-pixel early stop.
A posed actor is projected through ``viewmat @ world_T_box``, with SH evaluated in its own frame.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict

import numba as nb
import numpy as np
import torch

from sim.gaussians import GaussianCloud, covariances
from sim.raster_reference import ALPHA_MAX, ALPHA_MIN, EXTENT_SIGMAS, LOW_PASS, T_MIN
from sim.scene import Composite
from sim.sh import C0, C1, C2, C3

TILE = 16
CHUNK = 256
# Pixels added to the frustum planes when culling chunks: the projected radius is at most
# 3 sigma_max ||J||_F + 3 sqrt(0.3 + 0.1) + 1 (low-pass, lambda floor, ceil), under 2.9 px + the 3D term.
CULL_MARGIN_PX = 4.0

_JIT = dict(cache=True, fastmath={"contract", "arcp", "nsz", "afn"}, error_model="numpy")

# exp(-sigma) is only ever needed for sigma in [0, ln(255)] (beyond, alpha < 1/255 and the pixel is
# skipped), so a table with linear interpolation replaces libm's exp in the innermost loop: absolute
# error under 3e-7, a quarter of the time.
_EXP_N = 4096
_EXP_MAX = math.log(255.0) * 1.001 + 1e-3
_EXP_TABLE = np.exp(-np.arange(_EXP_N + 1, dtype=np.float64) * (_EXP_MAX / (_EXP_N - 1))).astype(np.float32)
_EXP_INV_STEP = np.float32((_EXP_N - 1) / _EXP_MAX)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_ALPHA_MAX32 = np.float32(ALPHA_MAX)
_ALPHA_MIN32 = np.float32(ALPHA_MIN)
_T_MIN32 = np.float32(T_MIN)


def set_num_threads(n: int) -> None:
    """Threads the renderer uses (default: all cores numba sees, or NUMBA_NUM_THREADS)."""
    nb.set_num_threads(max(1, min(int(n), nb.config.NUMBA_NUM_THREADS)))


# --------------------------------------------------------------------------------------------------
# Per-cloud preparation (once per cloud) and banks (once per set of clouds rendered together)
# --------------------------------------------------------------------------------------------------


@nb.njit(cache=True)
def _morton3(q: np.ndarray) -> np.ndarray:
    out = np.zeros(q.shape[0], dtype=np.int64)
    for i in range(q.shape[0]):
        code = 0
        for b in range(10):
            code |= ((q[i, 0] >> b) & 1) << (3 * b)
            code |= ((q[i, 1] >> b) & 1) << (3 * b + 1)
            code |= ((q[i, 2] >> b) & 1) << (3 * b + 2)
        out[i] = code
    return out


def _prepare(cloud: GaussianCloud) -> dict:
    """Chunked, covariance-ready arrays for one cloud (in its own frame)."""
    c = cloud.to("cpu")
    n = len(c)
    means = c.means.numpy().astype(np.float32)
    if n:
        lo, hi = means.min(0), means.max(0)
        q = ((means - lo) / np.maximum(hi - lo, 1e-6) * 1023.0).astype(np.int64)
        order = np.argsort(_morton3(q), kind="stable")
    else:
        order = np.zeros(0, dtype=np.int64)
    cov = covariances(c.quats, c.scales).numpy()
    cov6 = np.stack([cov[:, 0, 0], cov[:, 0, 1], cov[:, 0, 2], cov[:, 1, 1], cov[:, 1, 2], cov[:, 2, 2]], 1)
    smax = c.scales.numpy().max(1) if n else np.zeros(0, np.float32)
    means = means[order]
    smax = smax[order]
    starts = np.arange(0, n, CHUNK, dtype=np.int64)
    ends = np.minimum(starts + CHUNK, n)
    aabb = np.zeros((len(starts), 6), np.float32)
    csmax = np.zeros(len(starts), np.float32)
    for i, (a, b) in enumerate(zip(starts, ends)):
        aabb[i, :3] = means[a:b].min(0)
        aabb[i, 3:] = means[a:b].max(0)
        csmax[i] = smax[a:b].max()
    return dict(
        means=np.ascontiguousarray(means),
        cov=np.ascontiguousarray(cov6[order].astype(np.float32)),
        opac=np.ascontiguousarray(c.opacities.numpy()[order].astype(np.float32)),
        sh=np.ascontiguousarray(c.sh.numpy()[order].astype(np.float32)),
        degree=c.sh_degree,
        chunk_start=starts,
        chunk_end=ends,
        chunk_aabb=aabb,
        chunk_smax=csmax,
    )


def prepared(cloud: GaussianCloud) -> dict:
    return cloud.cache("raster_cpu", lambda: _prepare(cloud))


class _Bank:
    """Prepared clouds packed end to end; cloud u owns Gaussians [g0[u], g1) and chunks [k0[u], k1)."""

    def __init__(self, clouds: list[GaussianCloud]):
        preps = [prepared(c) for c in clouds]
        self.degree = max([p["degree"] for p in preps] + [0])
        k = (self.degree + 1) ** 2
        self.clouds = clouds  # keeps them alive while the bank is cached under their ids
        sizes = [len(p["opac"]) for p in preps]
        self.g0 = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        nk = [len(p["chunk_start"]) for p in preps]
        self.k0 = np.concatenate([[0], np.cumsum(nk)]).astype(np.int64)
        self.means = np.concatenate([p["means"] for p in preps] + [np.zeros((0, 3), np.float32)])
        self.cov = np.concatenate([p["cov"] for p in preps] + [np.zeros((0, 6), np.float32)])
        self.opac = np.concatenate([p["opac"] for p in preps] + [np.zeros(0, np.float32)])
        # alpha >= 1/255 needs sigma <= ln(255 o): fixed per Gaussian, so computed once here
        self.lnop = np.log(np.maximum(self.opac, 1e-30) / ALPHA_MIN).astype(np.float32)
        sh = np.zeros((self.g0[-1], k, 3), np.float32)
        for p, a in zip(preps, self.g0[:-1]):
            sh[a : a + len(p["opac"]), : p["sh"].shape[1]] = p["sh"]
        if self.degree == 0:
            # Band 0 only: colour is view-independent, so evaluate it once here.
            self.rgb = np.maximum(sh[:, 0, :] * np.float32(C0) + np.float32(0.5), 0.0).astype(np.float32)
            self.sh = np.zeros((0, 1, 3), np.float32)
        else:
            self.rgb = np.zeros((0, 3), np.float32)
            self.sh = sh
        self.chunk_start = np.concatenate(
            [p["chunk_start"] + a for p, a in zip(preps, self.g0[:-1])] + [np.zeros(0, np.int64)]
        )
        self.chunk_end = np.concatenate(
            [p["chunk_end"] + a for p, a in zip(preps, self.g0[:-1])] + [np.zeros(0, np.int64)]
        )
        self.chunk_aabb = np.concatenate([p["chunk_aabb"] for p in preps] + [np.zeros((0, 6), np.float32)])
        self.chunk_smax = np.concatenate([p["chunk_smax"] for p in preps] + [np.zeros(0, np.float32)])


_BANKS: OrderedDict = OrderedDict()
_BANK_CACHE_SIZE = int(os.environ.get("SPLATDRIVE_CPU_BANKS", "2"))


def _bank_for(clouds: list[GaussianCloud]) -> _Bank:
    key = tuple(id(c) for c in clouds)
    bank = _BANKS.get(key)
    if bank is not None and all(a is b for a, b in zip(bank.clouds, clouds)):
        _BANKS.move_to_end(key)
        return bank
    bank = _Bank(clouds)
    _BANKS[key] = bank
    while len(_BANKS) > _BANK_CACHE_SIZE:
        _BANKS.popitem(last=False)
    return bank


# --------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------


@nb.njit(**_JIT)
def _cull(pair_view, pair_cloud, eff, Ks, k0, chunk_start, chunk_end, aabb, smax, W, H, near, far):
    """Visible (pair, chunk) work items, grouped by view. Returns (work_pair, work_chunk, work_off)."""
    P = pair_view.shape[0]
    cap = 0
    for p in range(P):
        cap += k0[pair_cloud[p] + 1] - k0[pair_cloud[p]]
    work_pair = np.empty(cap, np.int64)
    work_chunk = np.empty(cap, np.int64)
    n = 0
    corners = np.empty((8, 3), np.float64)
    for p in range(P):
        v = pair_view[p]
        fx, fy, cx, cy = Ks[v, 0, 0], Ks[v, 1, 1], Ks[v, 0, 2], Ks[v, 1, 2]
        limx = max((W - cx) / fx, cx / fx) + 0.3 * W / fx
        limy = max((H - cy) / fy, cy / fy) + 0.3 * H / fy
        jnorm = math.sqrt(fx * fx * (1.0 + limx * limx) + fy * fy * (1.0 + limy * limy))
        M = eff[p]
        u = pair_cloud[p]
        for k in range(k0[u], k0[u + 1]):
            A = EXTENT_SIGMAS * smax[k] * jnorm
            for i in range(8):
                px = aabb[k, 3] if (i & 1) else aabb[k, 0]
                py = aabb[k, 4] if (i & 2) else aabb[k, 1]
                pz = aabb[k, 5] if (i & 4) else aabb[k, 2]
                for r in range(3):
                    corners[i, r] = M[r, 0] * px + M[r, 1] * py + M[r, 2] * pz + M[r, 3]
            all_near = True
            all_far = True
            all_l = True
            all_r = True
            all_t = True
            all_b = True
            for i in range(8):
                x, y, z = corners[i, 0], corners[i, 1], corners[i, 2]
                all_near &= z <= near
                all_far &= z >= far
                all_l &= fx * x + (cx + CULL_MARGIN_PX) * z + A < 0.0
                all_r &= fx * x + (cx - CULL_MARGIN_PX - W) * z - A > 0.0
                all_t &= fy * y + (cy + CULL_MARGIN_PX) * z + A < 0.0
                all_b &= fy * y + (cy - CULL_MARGIN_PX - H) * z - A > 0.0
            if all_near or all_far or all_l or all_r or all_t or all_b:
                continue
            work_pair[n] = p
            work_chunk[n] = k
            n += 1
    work_off = np.empty(n + 1, np.int64)
    work_off[0] = 0
    for i in range(n):
        k = work_chunk[i]
        work_off[i + 1] = work_off[i] + chunk_end[k] - chunk_start[k]
    return work_pair[:n], work_chunk[:n], work_off


@nb.njit(**_JIT, inline="always")
def _sh_color(sh, g, dx, dy, dz, degree, out, o):
    inv = 1.0 / max(math.sqrt(dx * dx + dy * dy + dz * dz), 1e-12)
    x, y, z = dx * inv, dy * inv, dz * inv
    xx, yy, zz = x * x, y * y, z * z
    for ch in range(3):
        v = C0 * sh[g, 0, ch]
        if degree >= 1:
            v += -C1 * y * sh[g, 1, ch] + C1 * z * sh[g, 2, ch] - C1 * x * sh[g, 3, ch]
        if degree >= 2:
            v += (
                C2[0] * x * y * sh[g, 4, ch]
                + C2[1] * y * z * sh[g, 5, ch]
                + C2[2] * (2.0 * zz - xx - yy) * sh[g, 6, ch]
                + C2[3] * x * z * sh[g, 7, ch]
                + C2[4] * (xx - yy) * sh[g, 8, ch]
            )
        if degree >= 3:
            v += (
                C3[0] * y * (3.0 * xx - yy) * sh[g, 9, ch]
                + C3[1] * x * y * z * sh[g, 10, ch]
                + C3[2] * y * (4.0 * zz - xx - yy) * sh[g, 11, ch]
                + C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy) * sh[g, 12, ch]
                + C3[4] * x * (4.0 * zz - xx - yy) * sh[g, 13, ch]
                + C3[5] * z * (xx - yy) * sh[g, 14, ch]
                + C3[6] * x * (xx - 3.0 * yy) * sh[g, 15, ch]
            )
        out[o, ch] = max(v + 0.5, 0.0)


@nb.njit(**_JIT, parallel=True)
def _project(work_pair, work_chunk, work_off, pair_view, eff, campos, Ks, chunk_start, chunk_end,
             means, cov, opac, lnop, rgb, sh, degree, W, H, near, far,
             o_valid, o_xy, o_conic, o_op, o_lim, o_col, o_depth, o_rect):  # fmt: skip
    """Project every Gaussian of every work item into its slot; invalid slots get o_valid = 0."""
    for w in nb.prange(work_pair.shape[0]):
        p = work_pair[w]
        v = pair_view[p]
        M = eff[p]
        fx, fy, cx, cy = Ks[v, 0, 0], Ks[v, 1, 1], Ks[v, 0, 2], Ks[v, 1, 2]
        lim_xp = (W - cx) / fx + 0.3 * W / fx
        lim_xn = cx / fx + 0.3 * W / fx
        lim_yp = (H - cy) / fy + 0.3 * H / fy
        lim_yn = cy / fy + 0.3 * H / fy
        r00, r01, r02, t0 = M[0, 0], M[0, 1], M[0, 2], M[0, 3]
        r10, r11, r12, t1 = M[1, 0], M[1, 1], M[1, 2], M[1, 3]
        r20, r21, r22, t2 = M[2, 0], M[2, 1], M[2, 2], M[2, 3]
        k = work_chunk[w]
        s = work_off[w]
        for g in range(chunk_start[k], chunk_end[k]):
            o = s + g - chunk_start[k]
            o_valid[o] = 0
            mx, my, mz = means[g, 0], means[g, 1], means[g, 2]
            z = r20 * mx + r21 * my + r22 * mz + t2
            if z <= near or z >= far:
                continue
            x = r00 * mx + r01 * my + r02 * mz + t0
            y = r10 * mx + r11 * my + r12 * mz + t1
            # Σ_c = R Σ R^T, with Σ = [[a, b, c], [b, d, e], [c, e, f]]
            sa, sb, sc, sd, se, sf = cov[g, 0], cov[g, 1], cov[g, 2], cov[g, 3], cov[g, 4], cov[g, 5]
            m00 = r00 * sa + r01 * sb + r02 * sc
            m01 = r00 * sb + r01 * sd + r02 * se
            m02 = r00 * sc + r01 * se + r02 * sf
            m10 = r10 * sa + r11 * sb + r12 * sc
            m11 = r10 * sb + r11 * sd + r12 * se
            m12 = r10 * sc + r11 * se + r12 * sf
            m20 = r20 * sa + r21 * sb + r22 * sc
            m21 = r20 * sb + r21 * sd + r22 * se
            m22 = r20 * sc + r21 * se + r22 * sf
            cxx = m00 * r00 + m01 * r01 + m02 * r02
            cxy = m00 * r10 + m01 * r11 + m02 * r12
            cxz = m00 * r20 + m01 * r21 + m02 * r22
            cyy = m10 * r10 + m11 * r11 + m12 * r12
            cyz = m10 * r20 + m11 * r21 + m12 * r22
            czz = m20 * r20 + m21 * r21 + m22 * r22
            rz = 1.0 / z
            tx = z * min(lim_xp, max(-lim_xn, x * rz))
            ty = z * min(lim_yp, max(-lim_yn, y * rz))
            j00 = fx * rz
            j02 = -fx * tx * rz * rz
            j11 = fy * rz
            j12 = -fy * ty * rz * rz
            a = j00 * j00 * cxx + 2.0 * j00 * j02 * cxz + j02 * j02 * czz + LOW_PASS
            b = j00 * j11 * cxy + j00 * j12 * cxz + j02 * j11 * cyz + j02 * j12 * czz
            c = j11 * j11 * cyy + 2.0 * j11 * j12 * cyz + j12 * j12 * czz + LOW_PASS
            det = a * c - b * b
            if det <= 0.0:
                continue
            mid = 0.5 * (a + c)
            lam = mid + math.sqrt(max(mid * mid - det, 0.01))
            rad = math.ceil(EXTENT_SIGMAS * math.sqrt(lam))
            u = fx * x * rz + cx
            vv = fy * y * rz + cy
            if u + rad <= 0.0 or u - rad >= W or vv + rad <= 0.0 or vv - rad >= H:
                continue
            op = opac[g]
            if op < ALPHA_MIN:
                continue  # never reaches 1/255 anywhere
            # alpha >= 1/255 needs sigma <= L = ln(255 o); that ellipse reaches sqrt(2 L a) px along x and
            # sqrt(2 L c) along y. Pixels beyond are skipped by the reference too, so shrinking the
            # 3-sigma box to it changes nothing but the work (the margin covers rounding).
            lim_sigma = lnop[g] * (1.0 + 1e-5) + 1e-6
            hx = min(rad, math.sqrt(2.0 * lim_sigma * a) * 1.0001 + 1e-3)
            hy = min(rad, math.sqrt(2.0 * lim_sigma * c) * 1.0001 + 1e-3)
            # Pixel j's centre j + 0.5 lies in [u - h, u + h].
            x0 = max(0, math.ceil(u - hx - 0.5))
            x1 = min(W - 1, math.floor(u + hx - 0.5))
            y0 = max(0, math.ceil(vv - hy - 0.5))
            y1 = min(H - 1, math.floor(vv + hy - 0.5))
            if x0 > x1 or y0 > y1:
                continue
            idet = 1.0 / det
            o_valid[o] = 1
            o_xy[o, 0] = u
            o_xy[o, 1] = vv
            o_conic[o, 0] = c * idet
            o_conic[o, 1] = -b * idet
            o_conic[o, 2] = a * idet
            o_op[o] = op
            o_lim[o] = lim_sigma
            o_depth[o] = z
            o_rect[o, 0] = x0
            o_rect[o, 1] = x1
            o_rect[o, 2] = y0
            o_rect[o, 3] = y1
            if degree == 0:
                o_col[o, 0] = rgb[g, 0]
                o_col[o, 1] = rgb[g, 1]
                o_col[o, 2] = rgb[g, 2]
            else:
                _sh_color(sh, g, mx - campos[p, 0], my - campos[p, 1], mz - campos[p, 2], degree, o_col, o)


@nb.njit(**_JIT, parallel=True)
def _count_tiles(view_slot0, o_valid, o_rect, n_tx, n_ty, tile_count):
    """Gaussians per tile of every view (slots read in order: cache-friendly)."""
    V = view_slot0.shape[0] - 1
    for v in nb.prange(V):
        base = v * n_tx * n_ty
        for s in range(view_slot0[v], view_slot0[v + 1]):
            if o_valid[s]:
                for ty in range(o_rect[s, 2] // TILE, o_rect[s, 3] // TILE + 1):
                    for tx in range(o_rect[s, 0] // TILE, o_rect[s, 1] // TILE + 1):
                        tile_count[base + ty * n_tx + tx] += 1


@nb.njit(**_JIT, parallel=True)
def _fill_tiles(view_slot0, o_valid, o_rect, n_tx, n_ty, tile_off, tile_list):
    """Each tile's list of slots, in slot order (sorted by depth afterwards, tile by tile)."""
    V = view_slot0.shape[0] - 1
    for v in nb.prange(V):
        base = v * n_tx * n_ty
        cursor = tile_off[base : base + n_tx * n_ty].copy()
        for s in range(view_slot0[v], view_slot0[v + 1]):
            if o_valid[s]:
                for ty in range(o_rect[s, 2] // TILE, o_rect[s, 3] // TILE + 1):
                    for tx in range(o_rect[s, 0] // TILE, o_rect[s, 1] // TILE + 1):
                        t = ty * n_tx + tx
                        tile_list[cursor[t]] = s
                        cursor[t] += 1


@nb.njit(**_JIT, parallel=True)
def _sort_tiles(tile_off, tile_list, o_depth):
    """Sort every tile's list by depth (front to back): LSD radix sort of (depth bits, slot) pairs.

    Depths are > 0, so their float bits order as unsigned integers; a stable sort keeps equal
    depths in slot order.
    """
    keys_all = o_depth.view(np.uint32)
    for t in nb.prange(tile_off.shape[0] - 1):
        a, b = tile_off[t], tile_off[t + 1]
        n = b - a
        if n < 2:
            continue
        lst = tile_list[a:b]
        if n <= 32:  # insertion sort: short lists are common at the image edges
            for i in range(1, n):
                s = lst[i]
                k = keys_all[s]
                j = i - 1
                while j >= 0 and keys_all[lst[j]] > k:
                    lst[j + 1] = lst[j]
                    j -= 1
                lst[j + 1] = s
            continue
        pairs = np.empty(n, np.uint64)
        for i in range(n):
            pairs[i] = (np.uint64(keys_all[lst[i]]) << np.uint64(32)) | np.uint64(i)
        tmp = np.empty(n, np.uint64)
        for shift in (32, 43, 54):
            hist = np.zeros(2049, np.int64)
            for i in range(n):
                hist[((pairs[i] >> np.uint64(shift)) & np.uint64(2047)) + 1] += 1
            for i in range(2048):
                hist[i + 1] += hist[i]
            for i in range(n):
                d = (pairs[i] >> np.uint64(shift)) & np.uint64(2047)
                tmp[hist[d]] = pairs[i]
                hist[d] += 1
            pairs, tmp = tmp, pairs
        orig = lst.copy()
        for i in range(n):
            lst[i] = orig[pairs[i] & np.uint64(0xFFFFFFFF)]


@nb.njit(**_JIT, parallel=True)
def _rasterize(tile_off, tile_list, n_tx, n_ty, W, H, o_xy, o_conic, o_op, o_lim, o_col, o_depth, o_rect,
               exp_table, out_rgb, out_alpha, out_depth):  # fmt: skip
    n_tiles = n_tx * n_ty
    for job in nb.prange(tile_off.shape[0] - 1):
        v = job // n_tiles
        t = job - v * n_tiles
        ty, tx = t // n_tx, t - (t // n_tx) * n_tx
        px0, py0 = tx * TILE, ty * TILE
        px1, py1 = min(W, px0 + TILE) - 1, min(H, py0 + TILE) - 1
        tw = px1 - px0 + 1
        th = py1 - py0 + 1
        npx = tw * th
        T = np.ones(npx, np.float32)
        acc = np.zeros((npx, 4), np.float32)  # r, g, b, depth, weighted
        # bit (px - px0) of row_done[py - py0] is set once that pixel has stopped
        row_done = np.zeros(th, np.uint32)
        n_done = 0
        for i in range(tile_off[job], tile_off[job + 1]):
            s = tile_list[i]
            xa, xb = max(px0, o_rect[s, 0]), min(px1, o_rect[s, 1])
            ya, yb = max(py0, o_rect[s, 2]), min(py1, o_rect[s, 3])
            span = np.uint32(((1 << (xb - xa + 1)) - 1) << (xa - px0))
            gx, gy = o_xy[s, 0], o_xy[s, 1]
            ca, cbb, cc = o_conic[s, 0] * _HALF, o_conic[s, 1], o_conic[s, 2] * _HALF
            op, lim = o_op[s], o_lim[s]
            r, g, b, dz = o_col[s, 0], o_col[s, 1], o_col[s, 2], o_depth[s]
            for py in range(ya, yb + 1):
                rd = row_done[py - py0]
                if rd & span == span:
                    continue
                dy = np.float32(py) + _HALF - gy
                cdy = cc * dy * dy
                bdy = cbb * dy
                row = (py - py0) * tw - px0
                for px in range(xa, xb + 1):
                    bit = np.uint32(1 << (px - px0))
                    if rd & bit:
                        continue
                    dx = np.float32(px) + _HALF - gx
                    sigma = ca * dx * dx + cdy + bdy * dx
                    if sigma < _ZERO or sigma > lim:
                        continue
                    f = sigma * _EXP_INV_STEP
                    k = np.uint32(f)
                    e0 = exp_table[k]
                    alpha = min(_ALPHA_MAX32, op * (e0 + (f - np.float32(k)) * (exp_table[k + np.uint32(1)] - e0)))
                    if alpha < _ALPHA_MIN32:
                        continue
                    q = np.uint32(row + px)
                    Tq = T[q]
                    nt = Tq * (_ONE - alpha)
                    if nt <= _T_MIN32:
                        rd |= bit
                        n_done += 1
                        continue
                    w = alpha * Tq
                    acc[q, 0] += w * r
                    acc[q, 1] += w * g
                    acc[q, 2] += w * b
                    acc[q, 3] += w * dz
                    T[q] = nt
                row_done[py - py0] = rd
            if n_done == npx:
                break
        for py in range(py0, py1 + 1):
            for px in range(px0, px1 + 1):
                q = (py - py0) * tw + px - px0
                a = _ONE - T[q]
                out_rgb[v, py, px, 0] = acc[q, 0]
                out_rgb[v, py, px, 1] = acc[q, 1]
                out_rgb[v, py, px, 2] = acc[q, 2]
                out_alpha[v, py, px] = a
                out_depth[v, py, px] = acc[q, 3] / a if a > _ZERO else _ZERO


# --------------------------------------------------------------------------------------------------
# Entry
# --------------------------------------------------------------------------------------------------


def _parts(scene) -> list[tuple[GaussianCloud, np.ndarray]]:
    return scene.parts() if isinstance(scene, Composite) else [(scene, np.eye(4))]


def render_cpu(scenes, viewmats, Ks, width, height, near=0.01, far=1e10):
    """scenes: S GaussianClouds or Composites; viewmats [S, C, 4, 4]; Ks [S, C, 3, 3].

    Returns rgb [S, C, H, W, 3], alpha and depth [S, C, H, W, 1] as float32 torch tensors.
    """
    S, C = viewmats.shape[:2]
    V = S * C
    W, H = int(width), int(height)
    parts = [_parts(sc) for sc in scenes]
    uniq: dict[int, int] = {}
    clouds: list[GaussianCloud] = []
    for ps in parts:
        for cl, _ in ps:
            if id(cl) not in uniq:
                uniq[id(cl)] = len(clouds)
                clouds.append(cl)
    bank = _bank_for(clouds)

    vm = viewmats.detach().cpu().double().numpy().reshape(V, 4, 4)
    Kn = np.ascontiguousarray(Ks.detach().cpu().double().numpy().reshape(V, 3, 3))
    pair_view, pair_cloud, eff = [], [], []
    for s, ps in enumerate(parts):
        for cl, T in ps:
            for c in range(C):
                pair_view.append(s * C + c)
                pair_cloud.append(uniq[id(cl)])
                eff.append(vm[s * C + c] @ np.asarray(T, dtype=np.float64))
    pair_view = np.asarray(pair_view, np.int64)
    pair_cloud = np.asarray(pair_cloud, np.int64)
    order = np.argsort(pair_view, kind="stable")  # work grouped by view
    pair_view, pair_cloud = pair_view[order], pair_cloud[order]
    eff = np.ascontiguousarray(np.stack(eff)[order]) if len(order) else np.zeros((0, 4, 4))
    # camera centre in each part's frame: for SH directions
    campos = -np.einsum("pji,pj->pi", eff[:, :3, :3], eff[:, :3, 3]) if len(order) else np.zeros((0, 3))

    work_pair, work_chunk, work_off = _cull(
        pair_view, pair_cloud, eff, Kn, bank.k0, bank.chunk_start, bank.chunk_end,
        bank.chunk_aabb, bank.chunk_smax, float(W), float(H), float(near), float(far),
    )  # fmt: skip
    n_slots = int(work_off[-1])
    o_valid = np.empty(n_slots, np.uint8)
    o_xy = np.empty((n_slots, 2), np.float32)
    o_conic = np.empty((n_slots, 3), np.float32)
    o_op = np.empty(n_slots, np.float32)
    o_lim = np.empty(n_slots, np.float32)
    o_col = np.empty((n_slots, 3), np.float32)
    o_depth = np.zeros(n_slots, np.float32)
    o_rect = np.empty((n_slots, 4), np.int32)
    _project(
        work_pair, work_chunk, work_off, pair_view, eff, np.ascontiguousarray(campos), Kn,
        bank.chunk_start, bank.chunk_end, bank.means, bank.cov, bank.opac, bank.lnop, bank.rgb, bank.sh,
        bank.degree, float(W), float(H), float(near), float(far),
        o_valid, o_xy, o_conic, o_op, o_lim, o_col, o_depth, o_rect,
    )  # fmt: skip

    # slots of view v: [view_slot0[v], view_slot0[v + 1])
    item_view = pair_view[work_pair]
    view_slot0 = np.zeros(V + 1, np.int64)
    if len(item_view):
        first = np.searchsorted(item_view, np.arange(V + 1))
        view_slot0 = work_off[first].astype(np.int64)
    n_tx, n_ty = (W + TILE - 1) // TILE, (H + TILE - 1) // TILE
    tile_count = np.zeros(V * n_tx * n_ty, np.int64)
    _count_tiles(view_slot0, o_valid, o_rect, n_tx, n_ty, tile_count)
    tile_off = np.zeros(len(tile_count) + 1, np.int64)
    np.cumsum(tile_count, out=tile_off[1:])
    tile_list = np.empty(int(tile_off[-1]), np.int64)
    _fill_tiles(view_slot0, o_valid, o_rect, n_tx, n_ty, tile_off, tile_list)
    with nb.parallel_chunksize(1):
        _sort_tiles(tile_off, tile_list, o_depth)

    out_rgb = np.empty((V, H, W, 3), np.float32)
    out_alpha = np.empty((V, H, W), np.float32)
    out_depth = np.empty((V, H, W), np.float32)
    # tiles differ a lot in work (the horizon holds most Gaussians): hand them out one at a time
    with nb.parallel_chunksize(1):
        _rasterize(tile_off, tile_list, n_tx, n_ty, W, H, o_xy, o_conic, o_op, o_lim, o_col, o_depth, o_rect,
                   _EXP_TABLE, out_rgb, out_alpha, out_depth)  # fmt: skip
    rgb = torch.from_numpy(out_rgb).reshape(S, C, H, W, 3)
    alpha = torch.from_numpy(out_alpha).reshape(S, C, H, W, 1)
    depth = torch.from_numpy(out_depth).reshape(S, C, H, W, 1)
    return rgb, alpha, depth
