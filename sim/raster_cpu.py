"""The fast CPU renderer: numba tile rasteriser, multi-threaded, same math as ``sim.raster_reference``.

Work done once per cloud, when it is first rendered: 3D covariances, band-0 colours, Morton order
and a split into chunks of nearby Gaussians with their bounding boxes, packed into one arena that
every later frame reads (so a frame touches no per-Gaussian Python, and a change in which clouds a
frame shows copies nothing).

Per frame, one render call for every camera of every scene:
1. cull chunks against each camera's frustum (planes widened by a bound on the projected 3-sigma
   extent, so culling never drops a Gaussian the reference would draw) and the near/far planes;
2. project the surviving chunks in jobs of about JOB_SLOTS Gaussians, in parallel: EWA in float32
   as the reference, branch-free so that LLVM vectorises it, then one 64-byte record per drawing
   Gaussian, counted per tile of its view by its job;
3. lay every tile's list out from those counts (slot order), jobs in parallel;
4. per tile, in parallel: radix-sort the list by depth, then composite front to back with per-pixel
   early stop.
The kernels of steps 1-4 and the layouts they share with the arena are ``sim.raster_cpu_kernels``.
A posed actor is projected through ``viewmat @ world_T_box``, with SH evaluated in its own frame.
Every parallel stage hands its jobs out one at a time: on 2 cores shared with other work, a thread
the OS has descheduled then holds up one job, not half of the frame.
"""

from __future__ import annotations

import functools
import threading
import weakref

import numba as nb
import numpy as np
import torch

from sim.gaussians import GaussianCloud, covariances
from sim.raster_cpu_kernels import (
    CHUNK,
    EXP_TABLE,
    P_COV,
    P_LNOP,
    P_MX,
    P_OP,
    REC,
    SOA_ROWS,
    TILE,
    cull,
    fill_tiles,
    project,
    rasterize,
    tile_offsets,
)
from sim.raster_reference import ALPHA_MIN
from sim.scene import Composite
from sim.sh import C0

__all__ = ["CHUNK", "TILE", "render_cpu", "set_num_threads"]


def set_num_threads(n: int) -> None:
    """Threads the renderer uses (default: all cores numba sees, or NUMBA_NUM_THREADS)."""
    most = int(nb.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # numba.config sets it at import
    nb.set_num_threads(max(1, min(int(n), most)))


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
    """One cloud's Gaussians (in its own frame) in Morton order, split into chunks of CHUNK.

    Returns soa [n_chunks, SOA_ROWS, CHUNK] (chunk-blocked SoA: the projection reads each field
    contiguously, and every row sits a compile-time stride from the next, which is what lets LLVM
    vectorise it: one alias check for the block instead of one per row), rgb [n_chunks * CHUNK, 3]
    (band 0), sh [n_chunks * CHUNK, 16, 3] (all bands, only when degree > 0), and per chunk its
    size, box of means and largest scale."""
    c = cloud.to("cpu")
    n = len(c)
    means = c.means.numpy().astype(np.float32)
    if n:
        lo, hi = means.min(0), means.max(0)
        q = ((means - lo) / np.maximum(hi - lo, 1e-6) * 1023.0).astype(np.int64)
        order = np.argsort(_morton3(q), kind="stable")
    else:
        order = np.zeros(0, dtype=np.int64)
    nk = (n + CHUNK - 1) // CHUNK
    cov = covariances(c.quats, c.scales).numpy()
    cov6 = np.stack([cov[:, 0, 0], cov[:, 0, 1], cov[:, 0, 2], cov[:, 1, 1], cov[:, 1, 2], cov[:, 2, 2]], 1)
    opac = c.opacities.numpy()[order].astype(np.float32)
    cols = np.zeros((nk * CHUNK, SOA_ROWS), np.float32)
    cols[:n, P_MX : P_MX + 3] = means[order]
    cols[:n, P_COV : P_COV + 6] = cov6[order]
    cols[:n, P_OP] = opac
    # alpha >= 1/255 needs sigma <= ln(255 o): fixed per Gaussian, so computed once here
    cols[:n, P_LNOP] = np.log(np.maximum(opac, 1e-30) / ALPHA_MIN)
    soa = np.ascontiguousarray(cols.reshape(nk, CHUNK, SOA_ROWS).transpose(0, 2, 1))
    sh = c.sh.numpy()[order].astype(np.float32)
    rgb = np.zeros((nk * CHUNK, 3), np.float32)
    rgb[:n] = np.maximum(sh[:, 0, :] * np.float32(C0) + np.float32(0.5), 0.0)
    sh_all = None
    if c.sh_degree > 0:
        sh_all = np.zeros((nk * CHUNK, 16, 3), np.float32)
        sh_all[:n, : sh.shape[1]] = sh
    counts = np.minimum(CHUNK, n - np.arange(nk) * CHUNK)
    aabb = np.zeros((nk, 6), np.float32)
    smax = np.zeros(nk, np.float32)
    scales = c.scales.numpy()[order].max(1) if n else np.zeros(0, np.float32)
    m = cols[:, :3].reshape(nk, CHUNK, 3)
    for i in range(nk):
        aabb[i, :3] = m[i, : counts[i]].min(0)
        aabb[i, 3:] = m[i, : counts[i]].max(0)
        smax[i] = scales[i * CHUNK : i * CHUNK + counts[i]].max()
    return dict(soa=soa, rgb=rgb, sh=sh_all, degree=c.sh_degree, chunk_n=counts, chunk_aabb=aabb, chunk_smax=smax)


class _Arena:
    """Every cloud rendered so far, prepared once and packed chunk after chunk, so that a frame touches
    no per-Gaussian Python, and a change in which clouds a frame shows (an actor leaving, an env
    resetting to another scene) copies nothing. Gaussian i of chunk k is entry k * CHUNK + i of rgb;
    chunk k's SH (degree chunk_deg[k] > 0) are entries chunk_sh[k] * CHUNK + i of sh.

    The space of clouds that have been garbage-collected is reclaimed (by compaction) once it
    outgrows the live part."""

    _GROW = 1.5

    def __init__(self):
        self.lock = threading.Lock()
        self.where: dict[int, tuple[weakref.ref, int, int]] = {}  # id(cloud) -> (ref, k0, k1)
        self.n = 0  # chunks in use (live or dead)
        self.n_sh = 0  # SH chunks in use
        self.dead = 0  # chunks of collected clouds
        self._alloc(0, 0)

    def _alloc(self, cap: int, cap_sh: int) -> None:
        self.soa = np.zeros((cap, SOA_ROWS, CHUNK), np.float32)
        self.rgb = np.zeros((cap * CHUNK, 3), np.float32)
        self.sh = np.zeros((cap_sh * CHUNK, 16, 3), np.float32)
        self.chunk_n = np.zeros(cap, np.int64)
        self.chunk_aabb = np.zeros((cap, 6), np.float32)
        self.chunk_smax = np.zeros(cap, np.float32)
        self.chunk_deg = np.zeros(cap, np.int64)
        self.chunk_sh = np.full(cap, -1, np.int64)

    def _reserve(self, extra: int, extra_sh: int) -> None:
        """Room for extra chunks (extra_sh of them with SH), compacting away dead clouds first when
        they outnumber the live ones."""
        cap, cap_sh = len(self.chunk_n), self.sh.shape[0] // CHUNK
        if self.n + extra <= cap and self.n_sh + extra_sh <= cap_sh:
            return
        old: dict[str, np.ndarray] = dict(
            soa=self.soa, rgb=self.rgb, sh=self.sh, chunk_n=self.chunk_n, chunk_aabb=self.chunk_aabb,
            chunk_smax=self.chunk_smax, chunk_deg=self.chunk_deg, chunk_sh=self.chunk_sh,
        )  # fmt: skip
        keep = [(key, ref, k0, k1) for key, (ref, k0, k1) in self.where.items() if ref() is not None]
        live = sum(k1 - k0 for _, _, k0, k1 in keep)
        live_sh = sum(int((self.chunk_sh[k0:k1] >= 0).sum()) for _, _, k0, k1 in keep)
        compact = self.n - live > live
        need, need_sh = (live if compact else self.n) + extra, (live_sh if compact else self.n_sh) + extra_sh
        self._alloc(max(need, int(self._GROW * cap)), max(need_sh, int(self._GROW * cap_sh)))
        if not compact:
            self._copy(old, 0, self.n, 0, 0)
            return
        self.n, self.n_sh, self.dead = 0, 0, 0
        self.where = {}  # entries of clouds collected but not yet reported go too
        for key, ref, k0, k1 in sorted(keep, key=lambda e: e[2]):
            self.where[key] = (ref, self.n, self.n + k1 - k0)
            self._copy(old, k0, k1, self.n, self.n_sh)
            self.n_sh += int((old["chunk_sh"][k0:k1] >= 0).sum())
            self.n += k1 - k0

    def _copy(self, old: dict, k0: int, k1: int, to: int, to_sh: int) -> None:
        m = k1 - k0
        self.soa[to : to + m] = old["soa"][k0:k1]
        self.rgb[to * CHUNK : (to + m) * CHUNK] = old["rgb"][k0 * CHUNK : k1 * CHUNK]
        for name in ("chunk_n", "chunk_aabb", "chunk_smax", "chunk_deg"):
            getattr(self, name)[to : to + m] = old[name][k0:k1]
        src = old["chunk_sh"][k0:k1]
        j = to_sh
        for i in range(m):
            if src[i] >= 0:
                self.sh[j * CHUNK : (j + 1) * CHUNK] = old["sh"][src[i] * CHUNK : (src[i] + 1) * CHUNK]
                self.chunk_sh[to + i] = j
                j += 1

    def _dead(self, key: int, ref: weakref.ref) -> None:
        """``ref``'s cloud was collected: its chunks are dead space (entries move on compaction, so
        the ref, not a position, identifies it)."""
        entry = self.where.get(key)
        if entry is not None and entry[0] is ref:
            del self.where[key]
            self.dead += entry[2] - entry[1]

    def chunks(self, cloud: GaussianCloud) -> tuple[int, int]:
        """[k0, k1): the arena chunks of ``cloud``, added now if it is new (call under ``lock``). Adding
        a cloud may compact the arena, which moves the others: look their chunks up afterwards."""
        entry = self.where.get(id(cloud))
        if entry is not None and entry[0]() is cloud:
            return entry[1], entry[2]
        p = _prepare(cloud)
        m = len(p["chunk_n"])
        self._reserve(m, m if p["sh"] is not None else 0)
        k0 = self.n
        self.soa[k0 : k0 + m] = p["soa"]
        self.rgb[k0 * CHUNK : (k0 + m) * CHUNK] = p["rgb"]
        self.chunk_n[k0 : k0 + m] = p["chunk_n"]
        self.chunk_aabb[k0 : k0 + m] = p["chunk_aabb"]
        self.chunk_smax[k0 : k0 + m] = p["chunk_smax"]
        self.chunk_deg[k0 : k0 + m] = p["degree"]
        if p["sh"] is not None:
            self.sh[self.n_sh * CHUNK : (self.n_sh + m) * CHUNK] = p["sh"]
            self.chunk_sh[k0 : k0 + m] = np.arange(self.n_sh, self.n_sh + m)
            self.n_sh += m
        self.n += m
        key = id(cloud)
        ref = weakref.ref(cloud, functools.partial(self._dead, key))
        self.where[key] = (ref, k0, k0 + m)
        return k0, k0 + m


_ARENA = _Arena()


# --------------------------------------------------------------------------------------------------
# Entry
# --------------------------------------------------------------------------------------------------


class _Workspace(threading.local):
    """Per-frame buffers kept between frames (per thread): a fresh 10 MB array each frame costs its
    page faults again, a millisecond a frame."""

    def __init__(self):
        self.bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype, align: int = 64) -> np.ndarray:
        """A 1-D array of n items (contents undefined), its start aligned to ``align`` bytes."""
        isz = np.dtype(dtype).itemsize
        buf = self.bufs.get(name)
        if buf is None or buf.dtype != dtype or buf.shape[0] < n + align // isz:
            buf = np.empty(int(1.25 * n) + align // isz + 16, dtype)
            self.bufs[name] = buf
        skip = (-buf.ctypes.data % align) // isz
        return buf[skip : skip + n]


_WS = _Workspace()


def _parts(scene) -> list[tuple[GaussianCloud, np.ndarray]]:
    return scene.parts() if isinstance(scene, Composite) else [(scene, np.eye(4))]


def render_cpu(scenes, viewmats, Ks, width, height, near=0.01, far=1e10):
    """scenes: S GaussianClouds or Composites; viewmats [S, C, 4, 4]; Ks [S, C, 3, 3].

    Returns rgb [S, C, H, W, 3] (clamped to [0, 1]), alpha and depth [S, C, H, W, 1] as float32 torch
    tensors.
    """
    S, C = viewmats.shape[:2]
    V = S * C
    W, H = int(width), int(height)
    parts = [_parts(sc) for sc in scenes]
    with _ARENA.lock:
        clouds = list({id(cl): cl for ps in parts for cl, _ in ps}.values())
        for cl in clouds:  # add the new ones first: an addition may compact, moving the others
            _ARENA.chunks(cl)
        ranges = {id(cl): _ARENA.chunks(cl) for cl in clouds}
        arena = _ARENA
        # this frame's view of the arena (a later compaction replaces the arrays, not their contents)
        soa, rgb, sh = arena.soa.reshape(-1), arena.rgb, arena.sh
        chunk_n, chunk_aabb, chunk_smax = arena.chunk_n, arena.chunk_aabb, arena.chunk_smax
        chunk_deg, chunk_sh = arena.chunk_deg, arena.chunk_sh

    vm = viewmats.detach().cpu().double().numpy().reshape(V, 4, 4)
    Kn = np.ascontiguousarray(Ks.detach().cpu().double().numpy().reshape(V, 3, 3))
    pair_view, pair_k, eff = [], [], []
    for s, ps in enumerate(parts):
        for cl, T in ps:
            for c in range(C):
                pair_view.append(s * C + c)
                pair_k.append(ranges[id(cl)])
                eff.append(vm[s * C + c] @ np.asarray(T, dtype=np.float64))
    pair_view = np.asarray(pair_view, np.int64)
    pair_k = np.asarray(pair_k, np.int64).reshape(-1, 2)
    order = np.argsort(pair_view, kind="stable")  # work grouped by view
    pair_view, pair_k = pair_view[order], pair_k[order]
    eff = np.ascontiguousarray(np.stack(eff)[order]) if len(order) else np.zeros((0, 4, 4))
    # camera centre in each part's frame: for SH directions
    campos = -np.einsum("pji,pj->pi", eff[:, :3, :3], eff[:, :3, 3]) if len(order) else np.zeros((0, 3))

    work_pair, work_chunk, work_off, job_w0 = cull(
        pair_view, np.ascontiguousarray(pair_k[:, 0]), np.ascontiguousarray(pair_k[:, 1]), eff, Kn, chunk_n,
        chunk_aabb, chunk_smax, float(W), float(H), float(near), float(far),
    )  # fmt: skip
    n_slots = int(work_off[-1])
    n_jobs = len(job_w0) - 1
    n_tx, n_ty = (W + TILE - 1) // TILE, (H + TILE - 1) // TILE
    rec = _WS.get("rec", n_slots * REC, np.float32).reshape(n_slots, REC)
    job_count = np.empty((n_jobs, n_tx * n_ty), np.int64)
    # Every parallel stage hands out its jobs one at a
    # time: with a static split, a thread the OS has descheduled (2 cores shared with other work)
    # holds up its whole half of the frame; handed out singly, the other thread takes the rest.
    with nb.parallel_chunksize(1):
        project(
            job_w0, work_pair, work_chunk, work_off, pair_view, eff, np.ascontiguousarray(campos),
            Kn.astype(np.float32), chunk_n, chunk_deg, chunk_sh, soa, rgb, sh,
            W, H, float(near), float(far), n_tx, rec, job_count,
        )  # fmt: skip
    job_view = pair_view[work_pair[job_w0[:-1]]]
    tile_off = np.empty(V * n_tx * n_ty + 1, np.int64)
    job_cursor = np.empty_like(job_count)
    tile_offsets(job_view, job_count, tile_off, job_cursor)
    tile_list = _WS.get("tiles", int(tile_off[-1]), np.int32)
    with nb.parallel_chunksize(1):
        fill_tiles(job_w0, work_off, rec, n_tx, job_cursor, tile_list)

    out_rgb = np.empty((V, H, W, 3), np.float32)
    out_alpha = np.empty((V, H, W), np.float32)
    out_depth = np.empty((V, H, W), np.float32)
    # tiles differ a lot in work, too (the horizon holds most Gaussians)
    with nb.parallel_chunksize(1):
        rasterize(tile_off, tile_list, n_tx, n_ty, W, H, rec, rec.view(np.uint32), EXP_TABLE,
                   out_rgb, out_alpha, out_depth)  # fmt: skip
    rgb = torch.from_numpy(out_rgb).reshape(S, C, H, W, 3)
    alpha = torch.from_numpy(out_alpha).reshape(S, C, H, W, 1)
    depth = torch.from_numpy(out_depth).reshape(S, C, H, W, 1)
    return rgb, alpha, depth
