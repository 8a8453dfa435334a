"""Read and write 3DGS scenes as the binary PLY files that 3DGS, gsplat and nerfstudio exchange.

Format (read by property *name*, in any order): one ``vertex`` element with float properties
``x y z [nx ny nz] f_dc_0..2 f_rest_0..M-1 opacity scale_0..2 rot_0..3``, where M = 3*((d+1)^2-1)
for SH degree d in 0..3 (M = 0, 9, 24, 45). The file stores values *before* activation:
``opacity`` is a logit (-> sigmoid), ``scale_*`` are log-scales in metres (-> exp), ``rot_*`` an
unnormalised wxyz quaternion (-> normalised). ``f_rest`` is channel-major (all R coefficients, then
all G, then all B). Normals and unknown properties (of any scalar type) are skipped. Other elements
are allowed only with zero entries (some exporters declare an empty ``face`` element).

:func:`load_ply` treats every file as untrusted and raises :class:`PlyError` (a ``ValueError``)
naming the file and the problem, before allocating anything from the header:

- the header is read from at most ``MAX_HEADER_BYTES`` (64 KiB) and ``MAX_HEADER_LINES`` lines;
  only ``format binary_little_endian 1.0`` is accepted (not ascii, not big-endian);
- the vertex count must be at most ``max_vertices`` and the file size must be exactly
  header + count * row size (truncated files and trailing bytes are both refused);
- every required property must be present, scalar and float (``float``/``double``); no list
  properties in the vertex element; the ``f_rest`` count must match an SH degree;
- after reading: no NaN/Inf in any value used, no activated scale above ``max_scale`` (metres, or
  overflowing float32), no zero quaternion.

:func:`save_ply` writes float32 ``binary_little_endian 1.0`` in the original 3DGS property order (with
``nx ny nz`` zeros), atomically (temporary file + ``os.replace``). It stores the logit, log-scale
and quaternion that make the loader's activation give back the cloud's values bit for bit, so
``load(save(c))`` equals a loaded ``c`` exactly and save -> load -> save repeats the same bytes.

Run ``python -m sim.ply [N]`` to time saving and loading N Gaussians of SH degree 3 (prints JSON).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sim.files import atomic_write
from sim.gaussians import GaussianCloud
from sim.sh import num_sh_bases

__all__ = ["MAX_HEADER_BYTES", "MAX_HEADER_LINES", "PlyError", "load_ply", "save_ply"]

MAX_HEADER_BYTES = 64 * 1024
MAX_HEADER_LINES = 4096
DEFAULT_MAX_VERTICES = 20_000_000
DEFAULT_MAX_SCALE = 1e4  # metres: no Gaussian in a driving scene is 10 km across

# PLY scalar type names (both spellings in use) -> little-endian numpy dtypes.
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "<i2", "int16": "<i2", "ushort": "<u2", "uint16": "<u2",
    "int": "<i4", "int32": "<i4", "uint": "<u4", "uint32": "<u4",
    "float": "<f4", "float32": "<f4", "double": "<f8", "float64": "<f8",
}  # fmt: skip
_FLOAT_DTYPES = (np.dtype("<f4"), np.dtype("<f8"))
_F_REST_DEGREE = {3 * (num_sh_bases(d) - 1): d for d in range(4)}  # {0: 0, 9: 1, 24: 2, 45: 3}
_READ_CHUNK_BYTES = 4 * 1024 * 1024  # scratch per read: bounded, and small enough to stay in cache
# A stored quaternion already this close to unit norm is kept verbatim, so normalising is idempotent
# bit for bit (re-dividing by a norm of 1 +- 1e-7 can flip last bits) and saved quats round-trip.
_UNIT_TOL = 1e-6
_LOGIT_CLIP = 110.0  # sigmoid(+-110) and exp(-110) are 1, 0 and 0 in float32: enough for 0 and 1


class PlyError(ValueError):
    """A PLY file that cannot be read (or a cloud that cannot be written) as a 3DGS scene."""


# -- activations, shared by load and save so the round trip is exact --------------------------------
# Each maps float32 stored values to float32 activated ones via float64, a fixed deterministic
# function; save searches for the stored value that this exact function maps back to the target.


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Stored logit -> opacity in [0, 1]; float32 in and out, no overflow for any finite input."""
    x = x.astype(np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32)


def _logit(p: np.ndarray) -> np.ndarray:
    p = p.astype(np.float64)
    with np.errstate(divide="ignore"):
        return np.clip(np.log(p) - np.log1p(-p), -_LOGIT_CLIP, _LOGIT_CLIP)


def _exp(x: np.ndarray) -> np.ndarray:
    """Stored log-scale -> scale; values beyond float32 become inf (and are refused by the loader)."""
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def _log(s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.clip(np.log(s.astype(np.float64)), -_LOGIT_CLIP, _LOGIT_CLIP)


def _normalise(q: np.ndarray) -> np.ndarray:
    """[N, 4] quaternions -> unit float32, leaving ones already unit (within _UNIT_TOL) untouched."""
    q64 = q.astype(np.float64)
    norm = np.sqrt(np.einsum("ij,ij->i", q64, q64))[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):  # zero norms are refused by the callers
        unit = (q64 / norm).astype(np.float32)
    return np.where(np.abs(norm - 1.0) <= _UNIT_TOL, q.astype(np.float32), unit)


def _invert(
    target: np.ndarray, act: Callable[[np.ndarray], np.ndarray], inv: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Float32 stored values x with ``act(x) == target`` bit for bit, chosen deterministically.

    ``act`` is monotone, so the float32 values mapping to a target form an interval around the exact
    ``inv(target)``: if it holds any, it holds one of the float32 neighbours of ``inv(target)``
    (checked up to 2 ulps to allow for rounding inside act). A target that act cannot produce
    (possible for values the loader never made, e.g. a scale of 0.05 exactly) is first moved to
    ``act(nearest guess)``, which it can, so the written value is also what a later save of the
    loaded cloud writes.
    """
    shape = np.shape(target)
    target = np.ascontiguousarray(target, dtype=np.float32).reshape(-1)
    out = inv(target).astype(np.float32)
    for _ in range(3):
        bad = np.flatnonzero(act(out) != target)
        if bad.size == 0:
            break
        t, up, down = target[bad], out[bad], out[bad]
        found = np.zeros(bad.size, dtype=bool)
        for _ in range(2):
            up = np.nextafter(up, np.float32(np.inf))
            down = np.nextafter(down, np.float32(-np.inf))
            for cand in (down, up):
                hit = ~found & (act(cand) == t)
                out[bad[hit]] = cand[hit]
                found |= hit
        if found.all():
            break
        # Unreachable targets: settle on what their first guess activates to, and search for that.
        target = target.copy()
        target[bad[~found]] = act(out[bad[~found]])
        out = inv(target).astype(np.float32)
    return out.reshape(shape)


# -- header -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Property:
    name: str
    dtype: np.dtype
    offset: int  # bytes from the start of a vertex row


@dataclass(frozen=True)
class _Header:
    size: int  # bytes, including the end_header line
    count: int  # vertices
    row_size: int  # bytes per vertex
    props: dict[str, _Property]


def _read_header(f, path: str) -> _Header:
    head = f.read(MAX_HEADER_BYTES)
    if not head:
        raise PlyError(f"{path}: empty file (0 bytes), expected a PLY header")
    if not re.match(rb"ply\r?\n", head):
        raise PlyError(f"{path}: not a PLY file (expected first line 'ply', found {head[:16]!r})")

    elements: list[tuple[str, int, list[tuple[str, np.dtype | None]]]] = []  # dtype None = list
    fmt = None
    pos = 0
    for lineno in range(1, MAX_HEADER_LINES + 1):
        nl = head.find(b"\n", pos)
        if nl < 0:
            raise PlyError(
                f"{path}: no 'end_header' line within the first {MAX_HEADER_BYTES} bytes "
                "(truncated or not a 3DGS PLY header)"
            )
        raw, pos = head[pos:nl].rstrip(b"\r"), nl + 1
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            raise PlyError(f"{path}: header line {lineno} is not ASCII text: {raw[:40]!r}") from None
        tok = line.split()
        where = f"{path}: header line {lineno} {line[:80]!r}"
        if lineno == 1 or not tok or tok[0] in ("comment", "obj_info"):
            continue
        if tok[0] == "end_header":
            break
        if tok[0] == "format":
            if len(tok) != 3:
                raise PlyError(f"{where}: expected 'format binary_little_endian 1.0'")
            if tok[1] != "binary_little_endian":
                raise PlyError(
                    f"{where}: format {tok[1]!r} is not supported; 3DGS PLY files are "
                    "binary_little_endian (convert ascii/big-endian files, e.g. with plyfile)"
                )
            if tok[2] != "1.0":
                raise PlyError(f"{where}: PLY version {tok[2]!r}, expected 1.0")
            fmt = tok[1]
        elif tok[0] == "element":
            if len(tok) != 3 or not tok[2].isdigit() or len(tok[2]) > 19:
                raise PlyError(f"{where}: expected 'element <name> <non-negative count>'")
            elements.append((tok[1], int(tok[2]), []))
        elif tok[0] == "property":
            if not elements:
                raise PlyError(f"{where}: property before any element")
            if len(tok) == 5 and tok[1] == "list":
                if tok[2] not in _PLY_TYPES or tok[3] not in _PLY_TYPES:
                    raise PlyError(f"{where}: unknown list types")
                elements[-1][2].append((tok[4], None))
            elif len(tok) == 3:
                if tok[1] not in _PLY_TYPES:
                    raise PlyError(f"{where}: unknown type {tok[1]!r}; expected one of {sorted(_PLY_TYPES)}")
                elements[-1][2].append((tok[2], np.dtype(_PLY_TYPES[tok[1]])))
            else:
                raise PlyError(f"{where}: expected 'property <type> <name>' or 'property list ...'")
        else:
            raise PlyError(f"{where}: unrecognised header keyword {tok[0]!r}")
    else:
        raise PlyError(f"{path}: no 'end_header' within the first {MAX_HEADER_LINES} header lines")

    if fmt is None:
        raise PlyError(f"{path}: header has no 'format' line")
    vertex = [e for e in elements if e[0] == "vertex"]
    if len(vertex) != 1:
        raise PlyError(f"{path}: expected exactly one 'vertex' element, found {len(vertex)}")
    for name, count, _ in elements:
        if name != "vertex" and count != 0:
            raise PlyError(
                f"{path}: element {name!r} has {count} entries; a 3DGS PLY holds only the 'vertex' "
                "element (other elements are accepted only when empty)"
            )
    _, count, vprops = vertex[0]
    props: dict[str, _Property] = {}
    offset = 0
    for name, dtype in vprops:
        if dtype is None:
            raise PlyError(f"{path}: vertex property {name!r} is a list; 3DGS vertex properties are scalars")
        if name in props:
            raise PlyError(f"{path}: vertex property {name!r} is declared twice")
        props[name] = _Property(name, dtype, offset)
        offset += dtype.itemsize
    return _Header(size=pos, count=count, row_size=offset, props=props)


# -- load ---------------------------------------------------------------------------------------------


def load_ply(
    path: str | os.PathLike,
    max_vertices: int = DEFAULT_MAX_VERTICES,
    max_scale: float = DEFAULT_MAX_SCALE,
) -> GaussianCloud:
    """Load a 3DGS PLY file (see module docstring) as an activated :class:`GaussianCloud` on CPU.

    Returns means [N, 3] m, quats [N, 4] wxyz unit, scales [N, 3] m, opacities [N], sh [N, K, 3]
    with K = (d+1)^2 from the number of ``f_rest`` properties. Raises :class:`PlyError` for any
    malformed or unsafe file, including more than ``max_vertices`` Gaussians or an activated scale
    above ``max_scale`` metres.
    """
    p = os.fspath(path)
    with open(p, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        hdr = _read_header(f, p)
        props = hdr.props

        # Check everything the header claims against limits and the real file before allocating.
        if hdr.count > max_vertices:
            raise PlyError(
                f"{p}: header declares {hdr.count} vertices, over the cap max_vertices={max_vertices} "
                "(raise max_vertices to load a larger scene)"
            )
        n_rest = sum(1 for name in props if name.startswith("f_rest_"))
        if n_rest not in _F_REST_DEGREE:
            raise PlyError(f"{p}: {n_rest} f_rest_* properties; expected 0, 9, 24 or 45 (SH degree 0..3)")
        degree = _F_REST_DEGREE[n_rest]
        k = num_sh_bases(degree)
        groups = {  # destination -> property names, in destination column order
            "means": ["x", "y", "z"],
            "sh": _sh_names(k),
            "opacity": ["opacity"],
            "scales": [f"scale_{i}" for i in range(3)],
            "quats": [f"rot_{i}" for i in range(4)],
        }
        for names in groups.values():
            for name in names:
                if name not in props:
                    raise PlyError(f"{p}: required vertex property {name!r} is missing")
                if props[name].dtype not in _FLOAT_DTYPES:
                    raise PlyError(f"{p}: vertex property {name!r} has type {props[name].dtype.name}, expected float")
        expected = hdr.size + hdr.count * hdr.row_size
        if file_size != expected:
            what = "truncated" if file_size < expected else f"{file_size - expected} trailing bytes"
            raise PlyError(
                f"{p}: file is {file_size} bytes but the header ({hdr.size} bytes) declares {hdr.count} "
                f"vertices of {hdr.row_size} bytes = {expected} bytes ({what})"
            )

        n = hdr.count
        means = np.empty((n, 3), np.float32)
        sh = np.empty((n, k, 3), np.float32)
        logit = np.empty((n, 1), np.float32)
        log_scales = np.empty((n, 3), np.float32)
        rot = np.empty((n, 4), np.float32)
        dests = {
            "means": means,
            "sh": sh.reshape(n, 3 * k),
            "opacity": logit,
            "scales": log_scales,
            "quats": rot,
        }
        f.seek(hdr.size)
        _read_rows(f, p, hdr, groups, dests)

    for key, names in groups.items():
        _check_finite(p, dests[key], names)
    opacities = _sigmoid(logit[:, 0])
    scales = _exp(log_scales)
    big = ~(scales <= max_scale)  # also catches inf from exp overflow
    if big.any():
        i, j = np.argwhere(big)[0]
        raise PlyError(
            f"{p}: vertex {i} has scale_{j} = exp({log_scales[i, j]}) = {scales[i, j]} m, over "
            f"max_scale={max_scale} m ({int(big.any(1).sum())} such vertices); not a sane 3DGS scene"
        )
    zero = ~rot.any(1)
    if zero.any():
        raise PlyError(
            f"{p}: vertex {int(np.flatnonzero(zero)[0])} has a zero quaternion (rot_0..3 all 0), "
            f"which has no orientation ({int(zero.sum())} such vertices)"
        )
    t = torch.from_numpy
    return GaussianCloud(t(means), t(_normalise(rot)), t(scales), t(opacities), t(sh))


def _sh_names(k: int) -> list[str]:
    """Property names for sh [N, K, 3] flattened to [N, 3K] (k-major, then channel).

    f_rest is channel-major in the file: all K-1 higher coefficients of R, then G, then B.
    """
    return [f"f_dc_{c}" if j == 0 else f"f_rest_{c * (k - 1) + j - 1}" for j in range(k) for c in range(3)]


def _read_rows(f, path: str, hdr: _Header, groups: dict[str, list[str]], dests: dict[str, np.ndarray]):
    """Read the vertex rows in bounded chunks, gathering each group's properties into its dest [N, C]."""
    n, row = hdr.count, hdr.row_size
    used = [hdr.props[name] for names in groups.values() for name in names]
    # Usual case: every used property is float32 at the same offset mod 4 (extras such as uchar
    # colours may sit before or after). The chunk is then a float32 matrix (unaligned if need be)
    # and one np.take per group gathers its columns. Otherwise (doubles, floats at mixed offsets)
    # copy column by column, several times slower.
    f4 = np.dtype("<f4")
    skew = used[0].offset % 4
    fast = all(q.dtype == f4 and q.offset % 4 == skew for q in used)
    cols = {key: np.array([(hdr.props[name].offset - skew) // 4 for name in names]) for key, names in groups.items()}
    rows_per_chunk = max(1, _READ_CHUNK_BYTES // row)
    buf = np.empty(min(n, rows_per_chunk) * row, np.uint8)
    view = buf.data  # a memoryview, so readinto fills buf in place
    for start in range(0, n, rows_per_chunk):
        rows = min(rows_per_chunk, n - start)
        want = rows * row
        got = 0
        while got < want:  # readinto may return short counts; 0 means the file shrank under us
            r = f.readinto(view[got:want])
            if not r:
                raise PlyError(f"{path}: truncated data: vertex {start + got // row} of {n} ends the file")
            got += r
        for key, names in groups.items():
            dest = dests[key][start : start + rows]
            if fast:
                mat = np.ndarray((rows, (row - skew) // 4), f4, buffer=buf, offset=skew, strides=(row, 4))
                np.take(mat, cols[key], axis=1, out=dest, mode="clip")  # 'clip': no bounds-check buffer
            else:
                for j, name in enumerate(names):
                    q = hdr.props[name]
                    dest[:, j] = np.ndarray((rows,), q.dtype, buffer=buf, offset=q.offset, strides=(row,))


def _all_finite(a: np.ndarray) -> bool:
    # A float64 sum of float32 values cannot overflow, so it is finite iff every value is: one fast pass.
    return bool(np.isfinite(a.sum(dtype=np.float64)))


def _check_finite(path: str, a: np.ndarray, names: list[str]):
    """Raise naming the first NaN/Inf in a [N, C] array whose columns are the properties ``names``."""
    if _all_finite(a):
        return
    bad = np.argwhere(~np.isfinite(a))
    i, j = bad[0]
    raise PlyError(
        f"{path}: vertex {i} has {names[j]} = {a[i, j]}; NaN/Inf are not allowed "
        f"({len(bad)} non-finite values in {names[0]}..{names[-1]})"
    )


# -- save ---------------------------------------------------------------------------------------------


def save_ply(cloud: GaussianCloud, path: str | os.PathLike) -> None:
    """Write ``cloud`` as a float32 binary-little-endian 3DGS PLY, atomically.

    Properties, in the original 3DGS order: x y z nx ny nz (zeros) f_dc_0..2 f_rest_0..M-1
    (channel-major) opacity (logit) scale_0..2 (log) rot_0..3 (wxyz). Raises :class:`PlyError` for
    a cloud the loader would refuse (non-finite values, negative scale, opacity outside [0, 1],
    zero quaternion); a crash while writing leaves any existing file at ``path`` untouched.
    """
    p = os.fspath(path)
    means, quats, scales, opac, sh = (t.detach().cpu().numpy() for t in cloud.tensors())
    n, k = sh.shape[0], sh.shape[1]
    for name, a in (("means", means), ("quats", quats), ("scales", scales), ("opacities", opac), ("sh", sh)):
        if not _all_finite(a):
            raise PlyError(f"{p}: cannot save: cloud.{name} has NaN/Inf values")
    if (scales < 0).any():
        raise PlyError(f"{p}: cannot save: cloud.scales has negative values")
    if ((opac < 0) | (opac > 1)).any():
        raise PlyError(f"{p}: cannot save: cloud.opacities has values outside [0, 1]")
    if not quats.any(1).all():
        raise PlyError(f"{p}: cannot save: cloud.quats has a zero quaternion")

    m = 3 * (k - 1)
    names = (
        ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        + [f"f_rest_{i}" for i in range(m)]
        + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    )
    rows = np.empty((n, len(names)), "<f4")  # [N, 17 + M]; row-major = the PLY vertex layout
    rows[:, 0:3] = means
    rows[:, 3:6] = 0.0
    # f_dc_0..2 then f_rest channel-major: the inverse of the loader's gather.
    sh_cols = np.array([names.index(name) - 6 for name in _sh_names(k)])
    file_order = np.argsort(sh_cols)
    rows[:, 6 : 9 + m] = np.take(sh.reshape(n, 3 * k), file_order, axis=1)
    rows[:, 9 + m] = _invert(opac, _sigmoid, _logit)
    rows[:, 10 + m : 13 + m] = _invert(scales, _exp, _log)
    rows[:, 13 + m : 17 + m] = _normalise(quats)
    header = "ply\nformat binary_little_endian 1.0\n"
    header += f"element vertex {n}\n" + "".join(f"property float {name}\n" for name in names)
    header += "end_header\n"
    atomic_write(p, [header.encode("ascii"), rows.data], fsync=True, mkdir=False)


def _bench(n: int) -> dict:
    import json
    import tempfile
    import time

    rng = np.random.default_rng(0)
    cloud = GaussianCloud.create(
        rng.normal(size=(n, 3)) * 50, rng.normal(size=(n, 4)), np.exp(rng.normal(-3, 1, (n, 3))),
        rng.uniform(0.01, 0.99, n), rng.normal(size=(n, 16, 3)) * 0.3,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "bench.ply"
        t0 = time.perf_counter()
        save_ply(cloud, f)
        t1 = time.perf_counter()
        load_ply(f)  # the file is in the page cache already; a second load shows the steady cost
        t2 = time.perf_counter()
        back = load_ply(f)
        t3 = time.perf_counter()
        size = f.stat().st_size
    assert torch.equal(back.sh, cloud.sh) and torch.equal(back.means, cloud.means)
    out = {
        "gaussians": n, "sh_degree": 3, "file_mb": round(size / 1e6, 1),
        "save_s": round(t1 - t0, 3), "load_first_s": round(t2 - t1, 3), "load_s": round(t3 - t2, 3),
    }  # fmt: skip
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    import sys

    _bench(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
