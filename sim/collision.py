"""Static-collision query: how many static-background Gaussians lie inside an oriented 3D box.

RAD ends an episode when the ego box overlaps static scene Gaussians whose density is above a
threshold. On a real reconstruction there are no annotations, so the signal is the number of
background Gaussians (opacity above ``opacity_threshold``) whose *means* lie inside the ego box.

A :class:`StaticIndex` is built once per scene: the kept means are bucketed in a uniform 2D (xy)
grid stored as CSR (points sorted by cell, plus ``offsets`` so that cell c holds the points
``offsets[c]:offsets[c + 1]``; cell c = iy * nx + ix, so each grid row is one contiguous slice).
A query visits only the cells under the box's xy footprint, in one numba call for all boxes.

Box convention (``sim.frames``, "box" frame): ``bottom_center`` [3] world metres is the centre of
the box's bottom face; box x runs along the length, y along the width, z up along the height.
A point p (world) is inside when, with ``q = world_R_box^T (p - bottom_center)``,

    |q_x| <= length / 2,  |q_y| <= width / 2,  0 <= q_z <= height,

each bound widened by ``BOUNDARY_EPS`` (1e-9 m): points on the boundary count as inside, and the
rounding of the frame change (~1e-13 m at street scale) cannot move them out.

Gaussians whose xy lies outside the grid's extent are kept in the border cells (indices are
clamped), so every query is exact whatever the extent; the extent only affects speed.

``python -m sim.collision --bench`` prints build and query times on a 1M-Gaussian street-like
cloud as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import NamedTuple

import numpy as np
from numba import njit

BOUNDARY_EPS = 1e-9  # metres; points this close outside a face still count as inside
_AABB_MARGIN = 1e-6  # metres added to the footprint's bounding box so no cell is missed by rounding
_MAX_CELLS = 1 << 22  # 4M cells (32 MB of offsets) at most; beyond, the extent shrinks / cells grow


# -- box geometry ------------------------------------------------------------------------------


def yaw_rotation(yaw: float) -> np.ndarray:
    """world_R_box [3, 3] for a box turned by ``yaw`` radians about world +z."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@njit(cache=True)
def _yaw_rotations(yaws):
    """[B] radians -> [B, 3, 3] world_R_box (yaw about +z)."""
    out = np.zeros((yaws.shape[0], 3, 3))
    for b in range(yaws.shape[0]):
        c, s = np.cos(yaws[b]), np.sin(yaws[b])
        out[b, 0, 0], out[b, 0, 1], out[b, 1, 0], out[b, 1, 1], out[b, 2, 2] = c, -s, s, c, 1.0
    return out


def _box_rotation(yaw, world_R_box, where: str) -> np.ndarray:
    """Validated world_R_box [3, 3] float64 from a yaw or an explicit rotation (not both)."""
    if world_R_box is None:
        yaw = float(yaw)
        if not math.isfinite(yaw):
            raise ValueError(f"{where}: yaw must be finite, got {yaw}")
        return yaw_rotation(yaw)
    if yaw != 0.0:
        raise ValueError(f"{where}: give either yaw or world_R_box, not both (yaw={yaw})")
    R = np.asarray(world_R_box, dtype=np.float64)
    if R.shape != (3, 3):
        raise ValueError(f"{where}: world_R_box must be [3, 3], got {R.shape}")
    if not (np.allclose(R @ R.T, np.eye(3), atol=1e-6) and abs(np.linalg.det(R) - 1.0) < 1e-6):
        raise ValueError(f"{where}: world_R_box must be a rotation (orthonormal, det +1)")
    return R


def _check_box(bottom_center, size, where: str) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(bottom_center, dtype=np.float64)
    s = np.asarray(size, dtype=np.float64)
    if c.shape != (3,) or s.shape != (3,):
        raise ValueError(f"{where}: bottom_center and size must be [3], got {c.shape} and {s.shape}")
    # plain floats: for 3-vectors this is several times faster than numpy reductions
    values = c.tolist() + s.tolist()
    if not all(map(math.isfinite, values)):
        raise ValueError(f"{where}: bottom_center and size must be finite, got {c} and {s}")
    if min(values[3:]) < 0:
        raise ValueError(f"{where}: size (length, width, height) must be >= 0, got {s}")
    return c, s


# -- reference ---------------------------------------------------------------------------------


def in_box_mask_bruteforce(points, bottom_center, size, yaw: float = 0.0, world_R_box=None) -> np.ndarray:
    """Plain numpy reference: which of points [N, 3] (world, m) lie inside the box -> [N] bool.

    Box as in the module docstring; boundary inclusive (within ``BOUNDARY_EPS``).
    """
    c, s = _check_box(bottom_center, size, "in_box_mask_bruteforce")
    R = _box_rotation(yaw, world_R_box, "in_box_mask_bruteforce")
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    q = (p - c) @ R  # rows are R^T (p - c): the points in the box frame
    e = BOUNDARY_EPS
    return (
        (np.abs(q[:, 0]) <= 0.5 * s[0] + e)
        & (np.abs(q[:, 1]) <= 0.5 * s[1] + e)
        & (q[:, 2] >= -e)
        & (q[:, 2] <= s[2] + e)
    )


def count_in_box_bruteforce(
    means, opacities, opacity_threshold: float, bottom_center, size, yaw: float = 0.0, world_R_box=None
) -> int:
    """Plain numpy reference for :meth:`StaticIndex.count_in_box`: O(N) over every Gaussian.

    means: [N, 3] world metres; opacities: [N] in [0, 1]; a Gaussian counts when its opacity is
    strictly above ``opacity_threshold`` and its mean is inside the box.
    """
    means = np.asarray(means, dtype=np.float64).reshape(-1, 3)
    keep = np.asarray(opacities, dtype=np.float64).reshape(-1) > opacity_threshold
    return int(in_box_mask_bruteforce(means[keep], bottom_center, size, yaw, world_R_box).sum())


# -- kernel ------------------------------------------------------------------------------------


@njit(cache=True)
def _clamped_cell(v, origin, inv_cell, n):
    f = (v - origin) * inv_cell
    if f <= 0.0:
        return 0
    if f >= n - 1:
        return n - 1
    return int(np.floor(f))


@njit(cache=True)
def _counting_sort(cell_id, n_cells):
    """CSR bucketing in O(N): (order [N], stable by cell; offsets [n_cells + 1])."""
    offsets = np.zeros(n_cells + 1, dtype=np.int64)
    for c in cell_id:
        offsets[c + 1] += 1
    for c in range(n_cells):
        offsets[c + 1] += offsets[c]
    fill = offsets[:-1].copy()
    order = np.empty(cell_id.shape[0], dtype=np.int64)
    for i in range(cell_id.shape[0]):
        c = cell_id[i]
        order[fill[c]] = i
        fill[c] += 1
    return order, offsets


@njit(cache=True)
def _query_kernel(xs, ys, zs, offsets, x0, y0, inv_cell, nx, ny, centers, rots, sizes, eps, counts, sums):
    """For each box b: counts[b] = points inside, sums[b] = sum of their box-frame positions."""
    for b in range(centers.shape[0]):
        cx, cy, cz = centers[b, 0], centers[b, 1], centers[b, 2]
        r00, r01, r02 = rots[b, 0, 0], rots[b, 0, 1], rots[b, 0, 2]
        r10, r11, r12 = rots[b, 1, 0], rots[b, 1, 1], rots[b, 1, 2]
        r20, r21, r22 = rots[b, 2, 0], rots[b, 2, 1], rots[b, 2, 2]
        hl, hw, h = 0.5 * sizes[b, 0], 0.5 * sizes[b, 1], sizes[b, 2]
        # xy bounding box of the footprint: the volume's centre +- the half extents projected on x, y
        mx, my = cx + r02 * 0.5 * h, cy + r12 * 0.5 * h
        ex = abs(r00) * hl + abs(r01) * hw + abs(r02) * 0.5 * h + _AABB_MARGIN
        ey = abs(r10) * hl + abs(r11) * hw + abs(r12) * 0.5 * h + _AABB_MARGIN
        ix_lo = _clamped_cell(mx - ex, x0, inv_cell, nx)
        ix_hi = _clamped_cell(mx + ex, x0, inv_cell, nx)
        iy_lo = _clamped_cell(my - ey, y0, inv_cell, ny)
        iy_hi = _clamped_cell(my + ey, y0, inv_cell, ny)
        lx_max, ly_max, lz_min, lz_max = hl + eps, hw + eps, -eps, h + eps
        n = 0
        sx = sy = sz = 0.0
        for iy in range(iy_lo, iy_hi + 1):
            row = iy * nx
            for j in range(offsets[row + ix_lo], offsets[row + ix_hi + 1]):
                dx, dy, dz = xs[j] - cx, ys[j] - cy, zs[j] - cz
                # height first: the footprint's cells hold everything up to the rooftops
                lz = r02 * dx + r12 * dy + r22 * dz
                if lz < lz_min or lz > lz_max:
                    continue
                lx = r00 * dx + r10 * dy + r20 * dz
                if abs(lx) > lx_max:
                    continue
                ly = r01 * dx + r11 * dy + r21 * dz
                if abs(ly) > ly_max:
                    continue
                n += 1
                sx += lx
                sy += ly
                sz += lz
        counts[b] = n
        sums[b, 0], sums[b, 1], sums[b, 2] = sx, sy, sz


# -- index -------------------------------------------------------------------------------------


class BoxHits(NamedTuple):
    """Result of :meth:`StaticIndex.hits_in_box`.

    count: Gaussians inside the box; mean_box: [3] the mean of their positions in the box frame
    (x forward along the length, y left, z up from the bottom face), NaN when count is 0. Its
    sign tells an env where the hit is: front/rear (x), left/right (y).
    """

    count: int  # type: ignore[assignment]  # shadows tuple.count, on purpose: the public name of the field
    mean_box: np.ndarray


def _grid_extent(xy: np.ndarray, cell_size: float) -> tuple[np.ndarray, float, int, int]:
    """Grid origin [2], cell size, nx, ny for the kept xy [M, 2].

    The bounding box when it fits in ``_MAX_CELLS``. Otherwise (far floaters or a background
    sphere, common in real reconstructions) Tukey-style fences, quartiles -+ 2 IQR, clipped to the
    bounding box; and larger cells if even that does not fit. Points outside the extent land in
    the border cells, so this choice only affects speed, never the counts.
    """
    if len(xy) == 0:
        return np.zeros(2), cell_size, 1, 1
    lo, hi = xy.min(axis=0), xy.max(axis=0)

    def shape(lo, hi, cell):
        n = np.floor((hi - lo) / cell).astype(np.int64) + 1
        return int(n[0]), int(n[1])

    nx, ny = shape(lo, hi, cell_size)
    if nx * ny > _MAX_CELLS:
        q1, q3 = np.quantile(xy, [0.25, 0.75], axis=0)
        lo, hi = np.maximum(lo, q1 - 2.0 * (q3 - q1)), np.minimum(hi, q3 + 2.0 * (q3 - q1))
        nx, ny = shape(lo, hi, cell_size)
        if nx * ny > _MAX_CELLS:
            cell_size = float(np.sqrt((hi - lo + cell_size).prod() / _MAX_CELLS)) * 1.01
            nx, ny = shape(lo, hi, cell_size)
    return lo, cell_size, nx, ny


class StaticIndex:
    """Static-background Gaussians above an opacity threshold, bucketed for box queries.

    Build once per scene (``StaticIndex.from_cloud(cloud)`` memoises on the cloud), then query
    every step. means: [N, 3] world metres; opacities: [N] activated, in [0, 1]. A Gaussian is
    kept when ``opacity > opacity_threshold`` (strictly). ``cell_size`` (metres) is the grid
    pitch in x and y; about half a car width is a good value (fewer points scanned per query).
    """

    def __init__(self, means, opacities, opacity_threshold: float = 0.5, cell_size: float = 1.0):
        means = np.asarray(means, dtype=np.float64)
        opacities = np.asarray(opacities, dtype=np.float64)
        if means.ndim != 2 or means.shape[1] != 3:
            raise ValueError(f"StaticIndex: means must be [N, 3], got {means.shape}")
        if opacities.shape != (means.shape[0],):
            raise ValueError(f"StaticIndex: opacities must be [N={means.shape[0]}], got {opacities.shape}")
        if not (np.isfinite(cell_size) and cell_size > 0):
            raise ValueError(f"StaticIndex: cell_size must be a positive number of metres, got {cell_size}")
        if not np.isfinite(opacity_threshold):
            raise ValueError(f"StaticIndex: opacity_threshold must be finite, got {opacity_threshold}")
        kept = means[opacities > opacity_threshold]
        if not np.isfinite(kept).all():
            bad = int((~np.isfinite(kept).all(axis=1)).sum())
            raise ValueError(f"StaticIndex: {bad} kept Gaussians have non-finite means; drop them first")
        origin, cell, nx, ny = _grid_extent(kept[:, :2], float(cell_size))
        inv_cell = 1.0 / cell
        # the same clamped floor as _clamped_cell, so points and queries agree on cells
        fx = np.clip(np.floor((kept[:, 0] - origin[0]) * inv_cell), 0, nx - 1).astype(np.int64)
        fy = np.clip(np.floor((kept[:, 1] - origin[1]) * inv_cell), 0, ny - 1).astype(np.int64)
        order, offsets = _counting_sort(fy * nx + fx, nx * ny)
        pts = kept[order]
        self._xs = np.ascontiguousarray(pts[:, 0])
        self._ys = np.ascontiguousarray(pts[:, 1])
        self._zs = np.ascontiguousarray(pts[:, 2])
        self._offsets = offsets
        self._origin = (float(origin[0]), float(origin[1]))
        self._inv_cell = inv_cell
        self.cell_size = cell
        self.grid_shape = (nx, ny)
        self.opacity_threshold = float(opacity_threshold)

    @staticmethod
    def from_cloud(cloud, opacity_threshold: float = 0.5, cell_size: float = 1.0) -> StaticIndex:
        """Index of a GaussianCloud's means/opacities (world frame), memoised on the cloud."""

        def build():
            return StaticIndex(
                cloud.means.detach().cpu().numpy(),
                cloud.opacities.detach().cpu().numpy(),
                opacity_threshold=opacity_threshold,
                cell_size=cell_size,
            )

        return cloud.cache(f"static_index:{float(opacity_threshold)!r}:{float(cell_size)!r}", build)

    def __len__(self) -> int:
        """Number of kept Gaussians (opacity above the threshold)."""
        return len(self._xs)

    # -- queries -------------------------------------------------------------------------------
    def _run(self, centers: np.ndarray, rots: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        B = centers.shape[0]
        counts = np.zeros(B, dtype=np.int64)
        sums = np.zeros((B, 3))
        _query_kernel(
            self._xs, self._ys, self._zs, self._offsets, self._origin[0], self._origin[1],
            self._inv_cell, self.grid_shape[0], self.grid_shape[1], centers, rots, sizes,
            BOUNDARY_EPS, counts, sums,
        )  # fmt: skip
        return counts, sums

    def count_in_box(self, bottom_center, size, yaw: float = 0.0, world_R_box=None) -> int:
        """Kept Gaussians whose means lie inside one box (boundary inclusive).

        bottom_center: [3] world metres, centre of the box's bottom face; size: [3] metres
        (length along box x, width along y, height along z), >= 0; yaw: radians about world +z.
        Or world_R_box: [3, 3] a general rotation (box -> world) instead of yaw (then yaw must be 0).
        """
        return self.hits_in_box(bottom_center, size, yaw, world_R_box).count

    def hits_in_box(self, bottom_center, size, yaw: float = 0.0, world_R_box=None) -> BoxHits:
        """As :meth:`count_in_box`, plus the mean box-frame position of the hits (see BoxHits)."""
        c, s = _check_box(bottom_center, size, "StaticIndex.hits_in_box")
        R = _box_rotation(yaw, world_R_box, "StaticIndex.hits_in_box")
        counts, sums = self._run(c[None], R[None], s[None])
        n = int(counts[0])
        return BoxHits(n, sums[0] / n if n else np.full(3, np.nan))

    def count_in_boxes(self, bottom_centers, sizes, yaws=None, world_R_boxes=None) -> np.ndarray:
        """Vectorised :meth:`count_in_box` over B boxes (e.g. one per env), one numba call.

        bottom_centers: [B, 3] world metres; sizes: [B, 3] or [3] (length, width, height) metres;
        yaws: [B] radians (default 0) or world_R_boxes: [B, 3, 3]. Returns [B] int64.
        """
        return self._run(*self._check_boxes(bottom_centers, sizes, yaws, world_R_boxes))[0]

    def hits_in_boxes(self, bottom_centers, sizes, yaws=None, world_R_boxes=None) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`hits_in_box`: (counts [B] int64, mean_box [B, 3], NaN where count is 0)."""
        counts, sums = self._run(*self._check_boxes(bottom_centers, sizes, yaws, world_R_boxes))
        means = np.full_like(sums, np.nan)
        np.divide(sums, counts[:, None], out=means, where=counts[:, None] > 0)
        return counts, means

    @staticmethod
    def _check_boxes(bottom_centers, sizes, yaws, world_R_boxes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validated (centers [B, 3], rots [B, 3, 3], sizes [B, 3]), float64, C-contiguous."""
        where = "StaticIndex.count_in_boxes"
        centers = np.ascontiguousarray(bottom_centers, dtype=np.float64)
        if centers.ndim != 2 or centers.shape[1] != 3:
            raise ValueError(f"{where}: bottom_centers must be [B, 3], got {centers.shape}")
        B = centers.shape[0]
        sz = np.asarray(sizes, dtype=np.float64)
        if sz.shape not in ((3,), (B, 3)):
            raise ValueError(f"{where}: sizes must be [3] or [B={B}, 3], got {sz.shape}")
        sz = np.ascontiguousarray(np.broadcast_to(sz, (B, 3)))
        if not (np.isfinite(centers).all() and np.isfinite(sz).all()):
            raise ValueError(f"{where}: bottom_centers and sizes must be finite")
        if (sz < 0).any():
            raise ValueError(f"{where}: sizes (length, width, height) must be >= 0")
        if world_R_boxes is not None:
            if yaws is not None:
                raise ValueError(f"{where}: give either yaws or world_R_boxes, not both")
            rots = np.ascontiguousarray(world_R_boxes, dtype=np.float64)
            if rots.shape != (B, 3, 3):
                raise ValueError(f"{where}: world_R_boxes must be [B={B}, 3, 3], got {rots.shape}")
            eye = np.broadcast_to(np.eye(3), rots.shape)
            ortho = np.allclose(rots @ rots.transpose(0, 2, 1), eye, atol=1e-6)
            if not (ortho and np.allclose(np.linalg.det(rots), 1.0, atol=1e-6)):
                raise ValueError(f"{where}: world_R_boxes must be rotations (orthonormal, det +1)")
        else:
            y = np.zeros(B) if yaws is None else np.ascontiguousarray(yaws, dtype=np.float64)
            if y.shape != (B,):
                raise ValueError(f"{where}: yaws must be [B={B}], got {y.shape}")
            if not np.isfinite(y).all():
                raise ValueError(f"{where}: yaws must be finite")
            rots = _yaw_rotations(y)
        return centers, rots, sz


# -- benchmark ---------------------------------------------------------------------------------


def street_cloud(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random street-like cloud: means [n, 3] over 400 m x 60 m, z in 0..10 m; opacities [n] U(0, 1)."""
    rng = np.random.default_rng(seed)
    means = np.stack(
        [rng.uniform(0.0, 400.0, n), rng.uniform(-30.0, 30.0, n), rng.uniform(0.0, 10.0, n)], axis=1
    ).astype(np.float32)
    return means, rng.uniform(0.0, 1.0, n).astype(np.float32)


def bench(n: int = 1_000_000, queries: int = 2000, batch: int = 8, cell_size: float = 1.0) -> dict:
    """Build and query times on a street-like cloud, numba warm. Returns a JSON-able dict."""
    means, opac = street_cloud(n)
    warm = StaticIndex(means[:1000], opac[:1000], cell_size=cell_size)  # compile / load numba first
    warm.count_in_box([0, 0, 0], [1, 1, 1])
    warm.count_in_boxes(np.zeros((batch, 3)), [1, 1, 1], np.zeros(batch))
    t0 = time.perf_counter()
    index = StaticIndex(means, opac, cell_size=cell_size)
    build_s = time.perf_counter() - t0

    rng = np.random.default_rng(1)
    size = np.array([4.8, 2.0, 1.6])
    centers = np.stack([rng.uniform(0, 400, queries), rng.uniform(-30, 30, queries), np.zeros(queries)], axis=1)
    yaws = rng.uniform(-np.pi, np.pi, queries)
    hits = 0
    t0 = time.perf_counter()
    for i in range(queries):
        hits += index.count_in_box(centers[i], size, yaws[i])
    single_s = (time.perf_counter() - t0) / queries

    nb = queries // batch
    cb, yb = centers[: nb * batch].reshape(nb, batch, 3), yaws[: nb * batch].reshape(nb, batch)
    t0 = time.perf_counter()
    for i in range(nb):
        index.count_in_boxes(cb[i], size, yb[i])
    batch_s = (time.perf_counter() - t0) / nb

    # the kernel alone, without the Python-side checks: what a tight env loop would approach
    rots = np.broadcast_to(yaw_rotation(0.3), (batch, 3, 3)).copy()
    sizes = np.broadcast_to(size, (batch, 3)).copy()
    t0 = time.perf_counter()
    for i in range(nb):
        index._run(cb[i], rots, sizes)
    kernel_s = (time.perf_counter() - t0) / nb

    return {
        "gaussians": n,
        "kept": len(index),
        "opacity_threshold": index.opacity_threshold,
        "cell_size_m": index.cell_size,
        "grid_shape": list(index.grid_shape),
        "box_lwh_m": size.tolist(),
        "build_ms": round(build_s * 1e3, 2),
        "count_in_box_us": round(single_s * 1e6, 2),
        f"count_in_boxes_B{batch}_us": round(batch_s * 1e6, 2),
        f"count_in_boxes_B{batch}_per_box_us": round(batch_s / batch * 1e6, 2),
        f"kernel_only_B{batch}_us": round(kernel_s * 1e6, 2),
        "mean_hits_per_box": round(hits / queries, 2),
        "queries": queries,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sim.collision", description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="time build and queries; print JSON")
    parser.add_argument("--n", type=int, default=1_000_000, help="Gaussians in the benchmark cloud")
    parser.add_argument("--cell-size", type=float, default=1.0, help="grid pitch in metres")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.print_help()
        return
    print(json.dumps(bench(n=args.n, cell_size=args.cell_size), indent=2))


if __name__ == "__main__":
    main()
