"""The numba kernels of one frame of the CPU renderer (``sim.raster_cpu``'s steps 1-4: cull, project,
lay tiles out, sort and composite) and the data layouts they share with the arena.

One file on purpose: numba's on-disk cache (``cache=True``) is invalidated only when a kernel's own
source file changes, and these kernels compile the layouts below (TILE, CHUNK, the rows of a chunk and
of a record) and each other in as constants. Split across files, a change to one would leave the
others' cached machine code stale.
"""

from __future__ import annotations

import math
from typing import Any

import numba as nb
import numpy as np

from sim.raster_reference import ALPHA_MAX, ALPHA_MIN, EXTENT_SIGMAS, LOW_PASS, T_MIN
from sim.sh import C0, C1, C2, C3

TILE = 16
CHUNK = 256
# rows of a chunk's SoA block: mean x, y, z; covariance a b c d e f of [[a, b, c], [b, d, e], [c, e, f]];
# opacity; ln(255 opacity)
P_MX, P_COV, P_OP, P_LNOP = 0, 3, 9, 10
SOA_ROWS = 11
# Pixels added to the frustum planes when culling chunks: the projected radius is at most
# 3 sigma_max ||J||_F + 3 sqrt(0.3 + 0.1) + 1 (low-pass, lambda floor, ceil), under 2.9 px + the 3D term.
CULL_MARGIN_PX = 4.0

_JIT: dict[str, Any] = dict(cache=True, fastmath={"contract", "arcp", "nsz", "afn"}, error_model="numpy")

# exp(-sigma) is only ever needed for sigma in [0, ln(255)] (beyond, alpha < 1/255 and the pixel is
# skipped), so a table with linear interpolation replaces libm's exp in the innermost loop: absolute
# error under 3e-7, a quarter of the time.
_EXP_N = 4096
_EXP_MAX = math.log(255.0) * 1.001 + 1e-3
EXP_TABLE = np.exp(-np.arange(_EXP_N + 1, dtype=np.float64) * (_EXP_MAX / (_EXP_N - 1))).astype(np.float32)
_EXP_INV_STEP = np.float32((_EXP_N - 1) / _EXP_MAX)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_ALPHA_MAX32 = np.float32(ALPHA_MAX)
_ALPHA_MIN32 = np.float32(ALPHA_MIN)
_T_MIN32 = np.float32(T_MIN)


# A projected Gaussian is one 64-byte record, one cache line: the rasteriser visits a tile's
# Gaussians in depth order, which is random in memory, and so loads one line per Gaussian instead
# of one per field (the old layout's seven arrays cost seven misses).
REC = 16
R_X, R_Y, R_CA, R_CB, R_CC, R_OP, R_LIM, R_R, R_G, R_B, R_Z, R_X0, R_X1, R_Y0, R_Y1, R_OK = range(REC)
# Slots per projection job (a run of work items of one view): several jobs per view keep every
# thread busy even with one camera, and each job counts its own Gaussians per tile, race-free.
JOB_SLOTS = 4096

_F2 = np.float32(2.0)
_F3 = np.float32(EXTENT_SIGMAS)
_F03 = np.float32(0.3)
_F001 = np.float32(0.01)
_LOW_PASS32 = np.float32(LOW_PASS)
_LIM_REL = np.float32(1.0 + 1e-5)
_LIM_ABS = np.float32(1e-6)
_EXT_REL = np.float32(1.0001)
_EXT_ABS = np.float32(1e-3)


@nb.njit(**_JIT)
def cull(pair_view, pair_k0, pair_k1, eff, Ks, chunk_n, aabb, smax, W, H, near, far):
    """Visible (pair, chunk) work items grouped by view, and the projection jobs over them.

    Returns (work_pair, work_chunk, work_off, job_w0): item i's Gaussians go to slots
    [work_off[i], work_off[i + 1]); job j projects items [job_w0[j], job_w0[j + 1]), all of one view.
    """
    P = pair_view.shape[0]
    cap = 0
    for p in range(P):
        cap += pair_k1[p] - pair_k0[p]
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
        for k in range(pair_k0[p], pair_k1[p]):
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
        work_off[i + 1] = work_off[i] + chunk_n[k]
    job_w0 = np.empty(n + 1, np.int64)
    nj = 0
    job_w0[0] = 0
    for i in range(1, n):
        new_view = pair_view[work_pair[i]] != pair_view[work_pair[i - 1]]
        if new_view or work_off[i] - work_off[job_w0[nj]] >= JOB_SLOTS:
            nj += 1
            job_w0[nj] = i
    if n > 0:
        nj += 1
        job_w0[nj] = n
    return work_pair[:n], work_chunk[:n], work_off, job_w0[: nj + 1]


@nb.njit(**_JIT, inline="always")
def _sh_color(sh, g, dx, dy, dz, degree, out, o, c0):
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
        out[o, c0 + ch] = max(v + 0.5, 0.0)


# rows of the projection scratch (one chunk): pixel centre, conic halves, sigma limit, pixel box, depth, ok
Q_U, Q_V, Q_CA, Q_CB, Q_CC, Q_LIM, Q_X0, Q_X1, Q_Y0, Q_Y1, Q_Z, Q_OK = range(12)
Q_ROWS = 12


@nb.njit(**_JIT)
def _project_chunk(soa, k, n, M, fx, fy, cx, cy, lim_xp, lim_xn, lim_yp, lim_yn, Wf, Hf, near, far, q):
    """EWA-project chunk k's first n Gaussians into the rows of q (the reference's math).

    Branch-free, so that LLVM vectorises it: every Gaussian is carried through, and q[Q_OK] says
    which ones draw (in front, inside (near, far), det > 0, box on screen, opacity >= 1/255).
    The camera-frame position is computed in float64 from M [4, 4] (float64) and rounded once, the
    rest in float32: depths then round as the reference's do, and near-equal depths keep its order
    (in float32 throughout, a procedural street lost 27 dB of rgb parity to swapped pairs)."""
    d00, d01, d02, e0 = M[0, 0], M[0, 1], M[0, 2], M[0, 3]
    d10, d11, d12, e1 = M[1, 0], M[1, 1], M[1, 2], M[1, 3]
    d20, d21, d22, e2 = M[2, 0], M[2, 1], M[2, 2], M[2, 3]
    r00, r01, r02 = np.float32(d00), np.float32(d01), np.float32(d02)
    r10, r11, r12 = np.float32(d10), np.float32(d11), np.float32(d12)
    r20, r21, r22 = np.float32(d20), np.float32(d21), np.float32(d22)
    w1, h1 = Wf - _ONE, Hf - _ONE
    base = k * (SOA_ROWS * CHUNK)
    for i in range(n):
        g = base + i
        mx = np.float64(soa[g + P_MX * CHUNK])
        my = np.float64(soa[g + (P_MX + 1) * CHUNK])
        mz = np.float64(soa[g + (P_MX + 2) * CHUNK])
        z = np.float32(d20 * mx + d21 * my + d22 * mz + e2)
        x = np.float32(d00 * mx + d01 * my + d02 * mz + e0)
        y = np.float32(d10 * mx + d11 * my + d12 * mz + e1)
        rz = _ONE / z
        tx = z * min(lim_xp, max(-lim_xn, x * rz))
        ty = z * min(lim_yp, max(-lim_yn, y * rz))
        # Σ_2d = J R Σ R^T J^T with J = [[j00, 0, j02], [0, j11, j12]]: A = J R first (2 x 3)
        j00 = fx * rz
        j02 = -fx * tx * rz * rz
        j11 = fy * rz
        j12 = -fy * ty * rz * rz
        a0, a1, a2 = j00 * r00 + j02 * r20, j00 * r01 + j02 * r21, j00 * r02 + j02 * r22
        b0, b1, b2 = j11 * r10 + j12 * r20, j11 * r11 + j12 * r21, j11 * r12 + j12 * r22
        sa, sb, sc = soa[g + P_COV * CHUNK], soa[g + (P_COV + 1) * CHUNK], soa[g + (P_COV + 2) * CHUNK]
        sd, se, sf = soa[g + (P_COV + 3) * CHUNK], soa[g + (P_COV + 4) * CHUNK], soa[g + (P_COV + 5) * CHUNK]
        u0 = a0 * sa + a1 * sb + a2 * sc
        u1 = a0 * sb + a1 * sd + a2 * se
        u2 = a0 * sc + a1 * se + a2 * sf
        a = u0 * a0 + u1 * a1 + u2 * a2 + _LOW_PASS32
        b = u0 * b0 + u1 * b1 + u2 * b2
        v0 = b0 * sa + b1 * sb + b2 * sc
        v1 = b0 * sb + b1 * sd + b2 * se
        v2 = b0 * sc + b1 * se + b2 * sf
        c = v0 * b0 + v1 * b1 + v2 * b2 + _LOW_PASS32
        det = a * c - b * b
        mid = _HALF * (a + c)
        lam = mid + np.sqrt(max(mid * mid - det, _F001))
        rad = np.ceil(_F3 * np.sqrt(lam))
        u = fx * x * rz + cx
        vv = fy * y * rz + cy
        # alpha >= 1/255 needs sigma <= L = ln(255 o); that ellipse reaches sqrt(2 L a) px along x and
        # sqrt(2 L c) along y. Pixels beyond are skipped by the reference too, so shrinking the 3-sigma
        # box to it changes nothing but the work (the margin covers rounding).
        lim_sigma = soa[g + P_LNOP * CHUNK] * _LIM_REL + _LIM_ABS
        hx = min(rad, np.sqrt(_F2 * lim_sigma * a) * _EXT_REL + _EXT_ABS)
        hy = min(rad, np.sqrt(_F2 * lim_sigma * c) * _EXT_REL + _EXT_ABS)
        # Pixel j's centre j + 0.5 lies in [u - h, u + h].
        x0 = max(_ZERO, np.ceil(u - hx - _HALF))
        x1 = min(w1, np.floor(u + hx - _HALF))
        y0 = max(_ZERO, np.ceil(vv - hy - _HALF))
        y1 = min(h1, np.floor(vv + hy - _HALF))
        ok = (z > near) & (z < far) & (det > _ZERO) & (soa[g + P_OP * CHUNK] >= _ALPHA_MIN32)
        ok &= (u + rad > _ZERO) & (u - rad < Wf) & (vv + rad > _ZERO) & (vv - rad < Hf)
        ok &= (x0 <= x1) & (y0 <= y1)
        idet = _ONE / det
        q[i + Q_U * CHUNK] = u
        q[i + Q_V * CHUNK] = vv
        q[i + Q_CA * CHUNK] = _HALF * c * idet
        q[i + Q_CB * CHUNK] = -b * idet
        q[i + Q_CC * CHUNK] = _HALF * a * idet
        q[i + Q_LIM * CHUNK] = lim_sigma
        q[i + Q_X0 * CHUNK] = x0
        q[i + Q_X1 * CHUNK] = x1
        q[i + Q_Y0 * CHUNK] = y0
        q[i + Q_Y1 * CHUNK] = y1
        q[i + Q_Z * CHUNK] = z
        q[i + Q_OK * CHUNK] = _ONE if ok else _ZERO


@nb.njit(**_JIT, parallel=True)
def project(job_w0, work_pair, work_chunk, work_off, pair_view, eff, campos, Ks, chunk_n, chunk_deg, chunk_sh,
             soa, rgb, sh, W, H, near, far, n_tx, rec, job_count):  # fmt: skip
    """Project every Gaussian of every work item into its record; a record that draws nothing gets
    R_OK = 0. job_count[j, t]: job j's Gaussians touching tile t of its view."""
    Wf, Hf = np.float32(W), np.float32(H)
    near32, far32 = np.float32(near), np.float32(far)
    for j in nb.prange(job_w0.shape[0] - 1):
        cnt = job_count[j]
        cnt[:] = 0
        q = np.empty(Q_ROWS * CHUNK, np.float32)
        for w in range(job_w0[j], job_w0[j + 1]):
            p = work_pair[w]
            v = pair_view[p]
            fx, fy, cx, cy = Ks[v, 0, 0], Ks[v, 1, 1], Ks[v, 0, 2], Ks[v, 1, 2]
            lim_xp = (Wf - cx) / fx + _F03 * Wf / fx
            lim_xn = cx / fx + _F03 * Wf / fx
            lim_yp = (Hf - cy) / fy + _F03 * Hf / fy
            lim_yn = cy / fy + _F03 * Hf / fy
            k = work_chunk[w]
            n = chunk_n[k]
            degree = chunk_deg[k]
            g0 = k * CHUNK
            h0 = chunk_sh[k] * CHUNK
            _project_chunk(soa, k, n, eff[p], fx, fy, cx, cy, lim_xp, lim_xn, lim_yp, lim_yn, Wf, Hf, near32, far32, q)
            o0 = work_off[w]
            base = k * (SOA_ROWS * CHUNK)
            for i in range(n):
                o = o0 + i
                if q[i + Q_OK * CHUNK] == _ZERO:
                    rec[o, R_OK] = _ZERO
                    continue
                rec[o, R_X] = q[i + Q_U * CHUNK]
                rec[o, R_Y] = q[i + Q_V * CHUNK]
                rec[o, R_CA] = q[i + Q_CA * CHUNK]
                rec[o, R_CB] = q[i + Q_CB * CHUNK]
                rec[o, R_CC] = q[i + Q_CC * CHUNK]
                rec[o, R_OP] = soa[base + P_OP * CHUNK + i]
                rec[o, R_LIM] = q[i + Q_LIM * CHUNK]
                rec[o, R_Z] = q[i + Q_Z * CHUNK]
                rec[o, R_X0] = q[i + Q_X0 * CHUNK]
                rec[o, R_X1] = q[i + Q_X1 * CHUNK]
                rec[o, R_Y0] = q[i + Q_Y0 * CHUNK]
                rec[o, R_Y1] = q[i + Q_Y1 * CHUNK]
                rec[o, R_OK] = _ONE
                g = g0 + i
                if degree == 0:
                    rec[o, R_R] = rgb[g, 0]
                    rec[o, R_G] = rgb[g, 1]
                    rec[o, R_B] = rgb[g, 2]
                else:
                    dx = soa[base + P_MX * CHUNK + i] - campos[p, 0]
                    dy = soa[base + (P_MX + 1) * CHUNK + i] - campos[p, 1]
                    dz = soa[base + (P_MX + 2) * CHUNK + i] - campos[p, 2]
                    _sh_color(sh, h0 + i, dx, dy, dz, degree, rec, o, R_R)
                x0, x1 = int(q[i + Q_X0 * CHUNK]) // TILE, int(q[i + Q_X1 * CHUNK]) // TILE
                for ty in range(int(q[i + Q_Y0 * CHUNK]) // TILE, int(q[i + Q_Y1 * CHUNK]) // TILE + 1):
                    for tx in range(x0, x1 + 1):
                        cnt[ty * n_tx + tx] += 1


@nb.njit(**_JIT)
def tile_offsets(job_view, job_count, tile_off, job_cursor):
    """tile_off over (view, tile); job_cursor[j, t]: where job j writes its first entry of tile t.
    Jobs are in slot order, so every tile's list comes out in slot order."""
    tpv = job_count.shape[1]
    tile_off[:] = 0
    for j in range(job_count.shape[0]):
        base = job_view[j] * tpv
        for t in range(tpv):
            tile_off[base + t + 1] += job_count[j, t]
    for i in range(tile_off.shape[0] - 1):
        tile_off[i + 1] += tile_off[i]
    run = tile_off[:-1].copy()
    for j in range(job_count.shape[0]):
        base = job_view[j] * tpv
        for t in range(tpv):
            job_cursor[j, t] = run[base + t]
            run[base + t] += job_count[j, t]


@nb.njit(**_JIT, parallel=True)
def fill_tiles(job_w0, work_off, rec, n_tx, job_cursor, tile_list):
    """Each tile's list of slots (sorted by depth later, tile by tile), jobs in parallel."""
    for j in nb.prange(job_w0.shape[0] - 1):
        cur = job_cursor[j]
        for o in range(work_off[job_w0[j]], work_off[job_w0[j + 1]]):
            if rec[o, R_OK] != _ZERO:
                x0, x1 = int(rec[o, R_X0]) // TILE, int(rec[o, R_X1]) // TILE
                for ty in range(int(rec[o, R_Y0]) // TILE, int(rec[o, R_Y1]) // TILE + 1):
                    for tx in range(x0, x1 + 1):
                        t = ty * n_tx + tx
                        tile_list[cur[t]] = o
                        cur[t] += 1


_U8 = np.uint64(8)
_U255 = np.uint64(255)
_U32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)


@nb.njit(**_JIT)
def _depth_sort(lst, keys):
    """Sort the slots ``lst`` in place by keys[s, R_Z] (a positive float's bits, so they order as
    unsigned integers), front to back and stable: equal depths stay in slot order."""
    n = lst.shape[0]
    if n <= 32:  # insertion sort: short lists are common at the image edges
        for i in range(1, n):
            s = lst[i]
            k = keys[s, R_Z]
            j = i - 1
            while j >= 0 and keys[lst[j], R_Z] > k:
                lst[j + 1] = lst[j]
                j -= 1
            lst[j + 1] = s
        return
    # LSD radix sort of (key, slot) pairs, 8-bit digits: all four histograms in one pass, and a
    # digit that every key shares (common in the exponent byte) costs no pass at all
    pairs = np.empty(n, np.uint64)
    hist = np.zeros((4, 256), np.int64)
    for i in range(n):
        k = keys[lst[i], R_Z]
        pairs[i] = (np.uint64(k) << _U32) | np.uint64(lst[i])
        hist[0, k & 255] += 1
        hist[1, (k >> 8) & 255] += 1
        hist[2, (k >> 16) & 255] += 1
        hist[3, k >> 24] += 1
    tmp = np.empty(n, np.uint64)
    for d in range(4):
        shift = _U32 + _U8 * np.uint64(d)
        h = hist[d]
        if h[(pairs[0] >> shift) & _U255] == n:
            continue
        run = 0
        for b in range(256):
            c = h[b]
            h[b] = run
            run += c
        for i in range(n):
            b = (pairs[i] >> shift) & _U255
            tmp[h[b]] = pairs[i]
            h[b] += 1
        pairs, tmp = tmp, pairs
    for i in range(n):
        lst[i] = pairs[i] & _LOW32


@nb.njit(**_JIT, parallel=True)
def rasterize(tile_off, tile_list, n_tx, n_ty, W, H, rec, keys, exp_table, out_rgb, out_alpha, out_depth):
    """Per tile, in parallel: sort its list by depth, then composite front to back."""
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
        lst = tile_list[tile_off[job] : tile_off[job + 1]]
        _depth_sort(lst, keys)
        T = np.ones(npx, np.float32)
        acc = np.zeros((npx, 4), np.float32)  # r, g, b, depth, weighted
        # bit (px - px0) of row_done[py - py0] is set once that pixel has stopped
        row_done = np.zeros(th, np.uint32)
        n_done = 0
        for i in range(lst.shape[0]):
            s = lst[i]
            xa, xb = max(px0, int(rec[s, R_X0])), min(px1, int(rec[s, R_X1]))
            ya, yb = max(py0, int(rec[s, R_Y0])), min(py1, int(rec[s, R_Y1]))
            span = np.uint32(((1 << (xb - xa + 1)) - 1) << (xa - px0))
            gx, gy = rec[s, R_X], rec[s, R_Y]
            ca, cbb, cc = rec[s, R_CA], rec[s, R_CB], rec[s, R_CC]
            op, lim = rec[s, R_OP], rec[s, R_LIM]
            r, g, b, dz = rec[s, R_R], rec[s, R_G], rec[s, R_B], rec[s, R_Z]
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
                # clamped here (colours are >= 0, so this is clamp(0, 1)): SH colours may exceed 1
                out_rgb[v, py, px, 0] = min(acc[q, 0], _ONE)
                out_rgb[v, py, px, 1] = min(acc[q, 1], _ONE)
                out_rgb[v, py, px, 2] = min(acc[q, 2], _ONE)
                out_alpha[v, py, px] = a
                out_depth[v, py, px] = acc[q, 3] / a if a > _ZERO else _ZERO
