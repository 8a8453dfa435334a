"""sim.ply: 3DGS PLY files read by name, written back exactly, and untrusted input refused.

Reference files are written by an independent writer (plyfile) with the property names that the
original 3DGS code, gsplat and nerfstudio use; malformed files are built byte by byte.
"""

from __future__ import annotations

import contextlib
import math
import os
import tracemalloc

import numpy as np
import pytest
import torch
from plyfile import PlyData, PlyElement

import sim.ply
from sim.gaussians import SH_C0, GaussianCloud
from sim.ply import MAX_HEADER_BYTES, PlyError, load_ply, save_ply


def names_3dgs(degree: int, normals: bool = True) -> list[str]:
    """Vertex property names in the original 3DGS order."""
    m = 3 * ((degree + 1) ** 2 - 1)
    return (
        ["x", "y", "z"]
        + (["nx", "ny", "nz"] if normals else [])
        + [f"f_dc_{c}" for c in range(3)]
        + [f"f_rest_{i}" for i in range(m)]
        + ["opacity"]
        + [f"scale_{i}" for i in range(3)]
        + [f"rot_{i}" for i in range(4)]
    )


def random_vertices(n: int, degree: int, rng, normals=True, shuffle=False, extras=()) -> np.ndarray:
    """A structured [n] array of stored (pre-activation) values, as a 3DGS trainer would write."""
    names = names_3dgs(degree, normals)
    if shuffle:
        names = [names[i] for i in rng.permutation(len(names))]
    fields = [(name, "<f4") for name in names] + list(extras)
    if shuffle:
        fields = [fields[i] for i in rng.permutation(len(fields))]
    v = np.zeros(n, dtype=fields)
    for name in names:
        v[name] = rng.normal(size=n)
    v["opacity"] = rng.normal(0, 3, n)
    for i in range(3):
        v[f"scale_{i}"] = rng.normal(-4, 1.5, n)
    for name, dtype in extras:
        v[name] = rng.integers(0, 100, n).astype(dtype)
    return v


def write_plyfile(path, vertices: np.ndarray, extra_elements=()) -> None:
    PlyData([PlyElement.describe(vertices, "vertex"), *extra_elements], byte_order="<").write(str(path))


def raw_ply(path, header_lines: list[str], data: bytes = b"") -> None:
    path.write_bytes(("\n".join(header_lines) + "\n").encode() + data)


def header_3dgs(n: int, degree: int = 0, fmt="binary_little_endian 1.0", types=None) -> list[str]:
    types = types or {}
    props = [f"property {types.get(name, 'float')} {name}" for name in names_3dgs(degree)]
    return ["ply", f"format {fmt}", f"element vertex {n}", *props, "end_header"]


def rows_3dgs(n: int, degree: int = 0, **values) -> bytes:
    """n float32 rows of valid stored values, with named properties overridden."""
    names = names_3dgs(degree)
    rows = np.zeros((n, len(names)), "<f4")
    rows[:, names.index("rot_0")] = 1.0
    for name, value in values.items():
        rows[:, names.index(name)] = value
    return rows.tobytes()


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


@contextlib.contextmanager
def raises(path, match: str):
    """Expect a PlyError whose message matches ``match`` and names the file."""
    with pytest.raises(PlyError, match=match) as info:
        yield info
    assert str(path) in str(info.value), f"message does not name the file: {info.value}"


def assert_clouds_equal(a: GaussianCloud, b: GaussianCloud):
    for name in ("means", "quats", "scales", "opacities", "sh"):
        ta, tb = getattr(a, name), getattr(b, name)
        assert ta.shape == tb.shape and torch.equal(ta, tb), name


# -- values ------------------------------------------------------------------------------------------


def test_values_by_hand(tmp_path):
    v = np.zeros(2, dtype=[(name, "<f4") for name in names_3dgs(0)])
    v["x"], v["y"], v["z"] = [1, -1], [2, -2], [3, -3]
    v["opacity"] = [0.0, math.log(3.0)]  # sigmoid(0) = 0.5, sigmoid(log 3) = 3/4
    v["scale_0"], v["scale_1"], v["scale_2"] = [math.log(2.0)] * 2, [math.log(0.5)] * 2, [0.0] * 2
    v["rot_0"], v["rot_1"], v["rot_2"], v["rot_3"] = [2, 0], [0, 3], [0, 4], [0, 0]
    v["f_dc_0"], v["f_dc_1"], v["f_dc_2"] = [0, 1], [1, 2], [-1, 3]
    write_plyfile(tmp_path / "a.ply", v)
    c = load_ply(tmp_path / "a.ply")
    assert len(c) == 2 and c.sh_degree == 0
    assert c.means.tolist() == [[1, 2, 3], [-1, -2, -3]]
    assert c.opacities.tolist() == [0.5, 0.75]
    assert c.scales.tolist() == [[2.0, 0.5, 1.0]] * 2
    assert c.quats.tolist() == [[1, 0, 0, 0], [0, np.float32(0.6), np.float32(0.8), 0]]
    assert c.sh[:, 0, :].tolist() == [[0, 1, -1], [1, 2, 3]]
    rgb = 0.5 + SH_C0 * np.array([[0, 1, -1], [1, 2, 3]], np.float32)
    np.testing.assert_allclose(c.rgb0().numpy(), np.maximum(rgb, 0), rtol=1e-6)
    for t in c.tensors():
        assert t.dtype == torch.float32 and t.is_contiguous()


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_f_rest_is_channel_major(tmp_path, degree):
    k = (degree + 1) ** 2
    v = random_vertices(3, degree, np.random.default_rng(0))
    for c in range(3):
        v[f"f_dc_{c}"] = c
    for i in range(3 * (k - 1)):
        v[f"f_rest_{i}"] = 100 + i  # distinct per coefficient and channel
    write_plyfile(tmp_path / "a.ply", v)
    sh = load_ply(tmp_path / "a.ply").sh.numpy()
    assert sh.shape == (3, k, 3)
    for c in range(3):
        assert (sh[:, 0, c] == c).all()
        for j in range(1, k):
            assert (sh[:, j, c] == 100 + c * (k - 1) + (j - 1)).all(), (j, c)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
@pytest.mark.parametrize(
    ("normals", "shuffle", "extras"),
    [
        (True, False, ()),
        (False, False, ()),
        (True, True, ()),  # aligned float32 rows: the gather fast path
        (False, True, (("red", "u1"), ("green", "u1"), ("blue", "u1"), ("label", "<i2"))),  # unaligned
        (True, False, (("confidence", "<f8"),)),
    ],
)
def test_reads_plyfile_output(tmp_path, degree, normals, shuffle, extras):
    rng = np.random.default_rng(degree)
    v = random_vertices(50, degree, rng, normals=normals, shuffle=shuffle, extras=extras)
    write_plyfile(tmp_path / "a.ply", v)
    c = load_ply(tmp_path / "a.ply")
    k = (degree + 1) ** 2
    assert c.sh_degree == degree and len(c) == 50
    assert (c.means.numpy() == np.stack([v["x"], v["y"], v["z"]], 1)).all()
    assert (c.sh[:, 0].numpy() == np.stack([v[f"f_dc_{i}"] for i in range(3)], 1)).all()
    if degree > 0:
        rest = np.stack([v[f"f_rest_{i}"] for i in range(3 * (k - 1))], 1).reshape(50, 3, k - 1)
        assert (c.sh[:, 1:].numpy() == rest.transpose(0, 2, 1)).all()
    np.testing.assert_allclose(c.opacities.numpy(), sigmoid(v["opacity"]), rtol=1e-6)
    log_s = np.stack([v[f"scale_{i}"] for i in range(3)], 1).astype(np.float64)
    np.testing.assert_allclose(c.scales.numpy(), np.exp(log_s), rtol=1e-6)
    q = np.stack([v[f"rot_{i}"] for i in range(4)], 1).astype(np.float64)
    np.testing.assert_allclose(c.quats.numpy(), q / np.linalg.norm(q, axis=1, keepdims=True), atol=1e-6)


def test_row_layouts_agree(tmp_path):
    # The same values in layouts that take each read path: aligned float32 rows, floats behind
    # uchar colours (an unaligned float32 matrix), floats at mixed offsets and doubles (per column).
    rng = np.random.default_rng(1)
    plain = random_vertices(3000, 2, rng)
    names = list(plain.dtype.names)
    rgb = [("red", "u1"), ("green", "u1"), ("blue", "u1")]
    layouts = {
        "rgb_first": rgb + [(name, "<f4") for name in names],
        "rgb_last": [(name, "<f4") for name in names] + rgb,
        "mixed": [(name, "<f4") for name in names[:20]] + [("flag", "u1")] + [(name, "<f4") for name in names[20:]],
        "double": [(name, "<f8") for name in names],
    }
    write_plyfile(tmp_path / "plain.ply", plain)
    ref = load_ply(tmp_path / "plain.ply")
    for layout, fields in layouts.items():
        v = np.zeros(len(plain), dtype=fields)
        for name in names:
            v[name] = plain[name]
        write_plyfile(tmp_path / f"{layout}.ply", v)
        assert_clouds_equal(ref, load_ply(tmp_path / f"{layout}.ply"))


def test_reads_in_chunks(tmp_path, monkeypatch):
    v = random_vertices(1001, 1, np.random.default_rng(2), extras=(("red", "u1"),))
    write_plyfile(tmp_path / "a.ply", v)
    whole = load_ply(tmp_path / "a.ply")
    monkeypatch.setattr(sim.ply, "_READ_CHUNK_BYTES", 100 * v.dtype.itemsize + 7)  # 100 rows a read
    assert_clouds_equal(whole, load_ply(tmp_path / "a.ply"))


# -- round trip ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_round_trip_is_exact(tmp_path, degree):
    rng = np.random.default_rng(10 + degree)
    v = random_vertices(500, degree, rng, normals=degree % 2 == 0, shuffle=True)
    v["opacity"][:6] = [-200, -30, 0, 15, 17.5, 200]  # saturated logits: opacity 0 and 1 exactly
    v["scale_0"][:3] = [-120, -103, 9.2]  # exp underflows to 0 and a float32 denormal
    write_plyfile(tmp_path / "src.ply", v)
    first = load_ply(tmp_path / "src.ply")
    assert first.opacities[0] == 0 and first.opacities[5] == 1 and first.scales[0, 0] == 0
    save_ply(first, tmp_path / "a.ply")
    second = load_ply(tmp_path / "a.ply")
    assert_clouds_equal(first, second)
    save_ply(second, tmp_path / "b.ply")
    assert (tmp_path / "a.ply").read_bytes() == (tmp_path / "b.ply").read_bytes()


def test_saving_any_cloud_is_byte_stable(tmp_path):
    # Values the loader never produced (a scale of exactly 0.05 has no exact float32 log-scale):
    # after one save they settle, so later saves and loads repeat exactly.
    rng = np.random.default_rng(3)
    n = 2000
    opac = np.concatenate([[0, 1, 1e-30, 1e-45, 0.5, 1 - 2**-24], rng.uniform(0, 1, n - 6)])
    scales = np.exp(rng.uniform(-20, 8, (n, 3)))
    scales[:4, 0] = [0, 1e-40, 0.05, 1e3]
    cloud = GaussianCloud.create(
        rng.normal(size=(n, 3)) * 100, rng.normal(size=(n, 4)), scales, opac, rng.normal(size=(n, 16, 3))
    )
    save_ply(cloud, tmp_path / "a.ply")
    back = load_ply(tmp_path / "a.ply")
    np.testing.assert_allclose(back.opacities.numpy(), cloud.opacities.numpy(), rtol=1e-5, atol=1e-45)
    np.testing.assert_allclose(back.scales.numpy(), cloud.scales.numpy(), rtol=1e-5, atol=1e-45)
    assert torch.equal(back.means, cloud.means) and torch.equal(back.sh, cloud.sh)
    assert torch.equal(back.quats, cloud.quats)  # unit quats are stored verbatim
    save_ply(back, tmp_path / "b.ply")
    assert (tmp_path / "a.ply").read_bytes() == (tmp_path / "b.ply").read_bytes()
    assert_clouds_equal(back, load_ply(tmp_path / "b.ply"))


def test_plyfile_reads_our_files(tmp_path):
    rng = np.random.default_rng(4)
    v = random_vertices(40, 3, rng)
    write_plyfile(tmp_path / "src.ply", v)
    cloud = load_ply(tmp_path / "src.ply")
    save_ply(cloud, tmp_path / "ours.ply")
    ply = PlyData.read(str(tmp_path / "ours.ply"))
    assert ply.byte_order == "<" and not ply.text
    assert [e.name for e in ply.elements] == ["vertex"]
    out = ply["vertex"].data
    assert list(out.dtype.names) == names_3dgs(3)
    assert all(out.dtype[name] == np.dtype("<f4") for name in out.dtype.names)
    for name in ("nx", "ny", "nz"):
        assert (out[name] == 0).all()
    # Unactivated values: the plain-numpy activation of what plyfile reads gives the cloud back.
    for name in ["x", "y", "z", *(f"f_dc_{c}" for c in range(3)), *(f"f_rest_{i}" for i in range(45))]:
        assert (out[name] == v[name]).all(), name
    np.testing.assert_allclose(sigmoid(out["opacity"]), cloud.opacities.numpy(), rtol=1e-6)
    log_s = np.stack([out[f"scale_{i}"] for i in range(3)], 1).astype(np.float64)
    np.testing.assert_allclose(np.exp(log_s), cloud.scales.numpy(), rtol=1e-6)
    q = np.stack([out[f"rot_{i}"] for i in range(4)], 1)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(q, cloud.quats.numpy(), atol=1e-7)


def test_empty_cloud_round_trips(tmp_path):
    save_ply(GaussianCloud.empty(sh_degree=2), tmp_path / "e.ply")
    c = load_ply(tmp_path / "e.ply")
    assert len(c) == 0 and c.sh_degree == 2
    assert len(PlyData.read(str(tmp_path / "e.ply"))["vertex"].data) == 0


def test_zero_count_elements_are_tolerated(tmp_path):
    v = random_vertices(5, 0, np.random.default_rng(5))
    face = PlyElement.describe(
        np.empty(0, dtype=[("vertex_indices", "O")]), "face", len_types={"vertex_indices": "u1"},
        val_types={"vertex_indices": "i4"},
    )  # fmt: skip
    write_plyfile(tmp_path / "a.ply", v, [face])
    assert len(load_ply(tmp_path / "a.ply")) == 5
    hdr = header_3dgs(2)
    raw_ply(tmp_path / "b.ply", [hdr[0], hdr[1], "element camera 0", "property float fx", *hdr[2:]], rows_3dgs(2))
    assert len(load_ply(tmp_path / "b.ply")) == 2


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "scene.ply"
    v = random_vertices(10, 1, np.random.default_rng(6))
    write_plyfile(path, v)
    before = path.read_bytes()
    cloud = load_ply(path).subset(np.arange(5))

    def crash(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        save_ply(cloud, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.ply"]  # no temp file left behind


def test_save_refuses_clouds_the_loader_would_refuse(tmp_path):
    c = GaussianCloud.create(np.zeros((2, 3)), [[1, 0, 0, 0]] * 2, np.ones((2, 3)), [0.5, 0.5], np.zeros((2, 3)))
    bad = GaussianCloud(c.means.clone(), c.quats, c.scales, c.opacities, c.sh)
    bad.means[1, 2] = float("nan")
    with raises(tmp_path / "a.ply", "means has NaN/Inf"):
        save_ply(bad, tmp_path / "a.ply")
    zero_q = GaussianCloud(c.means, torch.zeros(2, 4), c.scales, c.opacities, c.sh)
    with raises(tmp_path / "a.ply", "zero quaternion"):
        save_ply(zero_q, tmp_path / "a.ply")
    assert not (tmp_path / "a.ply").exists()


# -- untrusted files -----------------------------------------------------------------------------------


def test_empty_file(tmp_path):
    (tmp_path / "a.ply").write_bytes(b"")
    with raises(tmp_path / "a.ply", "empty file"):
        load_ply(tmp_path / "a.ply")


def test_not_a_ply(tmp_path):
    (tmp_path / "a.ply").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with raises(tmp_path / "a.ply", "not a PLY file"):
        load_ply(tmp_path / "a.ply")


@pytest.mark.parametrize("fmt", ["ascii 1.0", "binary_big_endian 1.0"])
def test_other_formats_are_refused(tmp_path, fmt):
    raw_ply(tmp_path / "a.ply", header_3dgs(1, fmt=fmt), rows_3dgs(1))
    with raises(tmp_path / "a.ply", f"format '{fmt.split()[0]}' is not supported"):
        load_ply(tmp_path / "a.ply")


def test_plyfile_ascii_and_big_endian_are_refused(tmp_path):
    v = random_vertices(3, 0, np.random.default_rng(7))
    PlyData([PlyElement.describe(v, "vertex")], text=True).write(str(tmp_path / "t.ply"))
    PlyData([PlyElement.describe(v, "vertex")], byte_order=">").write(str(tmp_path / "b.ply"))
    with raises(tmp_path / "t.ply", "ascii"):
        load_ply(tmp_path / "t.ply")
    with raises(tmp_path / "b.ply", "big_endian"):
        load_ply(tmp_path / "b.ply")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda h: [*h[:3], "hello world", *h[3:]], "unrecognised header keyword 'hello'"),
        (lambda h: [*h[:3], "property float", *h[3:]], "expected 'property <type> <name>'"),
        (lambda h: [*h[:3], "property float128 w", *h[3:]], "unknown type 'float128'"),
        (lambda h: [*h[:3], "property list uchar int idx", *h[3:]], "'idx' is a list"),
        (lambda h: [*h[:3], "property float x", *h[3:]], "'x' is declared twice"),
        (lambda h: [h[0], h[1], "property float x", *h[2:]], "property before any element"),
        (lambda h: [h[0], h[1], "element vertex -5", *h[3:]], "non-negative count"),
        (lambda h: [h[0], h[1], "element vertex 1e9", *h[3:]], "non-negative count"),
        (lambda h: [h[0], h[1], "element vertex", *h[3:]], "non-negative count"),
        (lambda h: [h[0], "format binary_little_endian 2.0", *h[2:]], "version '2.0'"),
        (lambda h: [h[0], *h[2:]], "no 'format' line"),
        (lambda h: [*h[:-1], "element face 3", "property list uchar int vertex_indices", h[-1]], "'face' has 3"),
        (lambda h: [h[0], h[1], "element points 1", *h[3:]], "exactly one 'vertex' element, found 0"),
        (lambda h: [*h[:-1], *h[2:-1], h[-1]], "exactly one 'vertex' element, found 2"),
    ],
)
def test_bad_header_lines(tmp_path, edit, match):
    raw_ply(tmp_path / "a.ply", edit(header_3dgs(1)), rows_3dgs(1))
    with raises(tmp_path / "a.ply", match):
        load_ply(tmp_path / "a.ply")


def test_non_ascii_header(tmp_path):
    (tmp_path / "a.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\ncomment \xff\xfe\nend_header\n")
    with raises(tmp_path / "a.ply", "not ASCII"):
        load_ply(tmp_path / "a.ply")


def test_header_is_bounded(tmp_path):
    # No end_header in the first 64 KiB (e.g. a huge file of newlines-free junk after 'ply').
    (tmp_path / "a.ply").write_bytes(b"ply\n" + b"comment " + b"z" * (2 * MAX_HEADER_BYTES))
    with raises(tmp_path / "a.ply", "no 'end_header' line within the first 65536 bytes"):
        load_ply(tmp_path / "a.ply")
    # Many short lines: capped by count too.
    raw_ply(tmp_path / "b.ply", ["ply", *["comment"] * 8000, *header_3dgs(1)[1:]], rows_3dgs(1))
    with raises(tmp_path / "b.ply", "header lines"):
        load_ply(tmp_path / "b.ply")


@pytest.mark.parametrize("name", ["x", "f_dc_1", "opacity", "scale_2", "rot_3"])
def test_missing_required_property(tmp_path, name):
    hdr = [line for line in header_3dgs(1) if line != f"property float {name}"]
    raw_ply(tmp_path / "a.ply", hdr, bytes(4 * (len(names_3dgs(0)) - 1)))
    with raises(tmp_path / "a.ply", f"required vertex property '{name}' is missing"):
        load_ply(tmp_path / "a.ply")


def test_f_rest_count_must_match_a_degree(tmp_path):
    hdr = header_3dgs(1, degree=1)
    hdr.insert(hdr.index("property float opacity"), "property float f_rest_9")
    raw_ply(tmp_path / "a.ply", hdr, bytes(4 * (len(names_3dgs(1)) + 1)))
    with raises(tmp_path / "a.ply", "10 f_rest_"):
        load_ply(tmp_path / "a.ply")
    gap = [line.replace("f_rest_8", "f_rest_11") for line in header_3dgs(1, degree=1)]
    raw_ply(tmp_path / "b.ply", gap, bytes(4 * len(names_3dgs(1))))
    with raises(tmp_path / "b.ply", "'f_rest_8' is missing"):
        load_ply(tmp_path / "b.ply")


@pytest.mark.parametrize(("name", "ply_type", "size"), [("opacity", "uchar", 1), ("x", "int", 4)])
def test_required_property_must_be_float(tmp_path, name, ply_type, size):
    raw_ply(tmp_path / "a.ply", header_3dgs(1, types={name: ply_type}), bytes(4 * (len(names_3dgs(0)) - 1) + size))
    with raises(tmp_path / "a.ply", f"'{name}' has type .*expected float"):
        load_ply(tmp_path / "a.ply")


def test_truncated_and_trailing_data(tmp_path):
    data = rows_3dgs(4)
    raw_ply(tmp_path / "t.ply", header_3dgs(4), data[:-5])
    with raises(tmp_path / "t.ply", "truncated"):
        load_ply(tmp_path / "t.ply")
    raw_ply(tmp_path / "n.ply", header_3dgs(5), data)  # header count one too many
    with raises(tmp_path / "n.ply", "declares 5 vertices .*truncated"):
        load_ply(tmp_path / "n.ply")
    raw_ply(tmp_path / "x.ply", header_3dgs(4), data + b"\0\0\0")
    with raises(tmp_path / "x.ply", "3 trailing bytes"):
        load_ply(tmp_path / "x.ply")
    raw_ply(tmp_path / "h.ply", header_3dgs(4)[:-1])  # no end_header, no data
    with raises(tmp_path / "h.ply", "end_header"):
        load_ply(tmp_path / "h.ply")


@pytest.mark.parametrize(
    ("name", "value"),
    [("x", np.nan), ("f_dc_2", np.inf), ("f_rest_7", -np.inf), ("opacity", np.nan), ("scale_1", np.nan),
     ("rot_2", np.inf)],
)  # fmt: skip
def test_non_finite_values_are_refused(tmp_path, name, value):
    data = np.frombuffer(rows_3dgs(3, degree=1), "<f4").reshape(3, -1).copy()
    data[2, names_3dgs(1).index(name)] = value
    raw_ply(tmp_path / "a.ply", header_3dgs(3, degree=1), data.tobytes())
    with raises(tmp_path / "a.ply", f"vertex 2 has {name} = .*NaN/Inf"):
        load_ply(tmp_path / "a.ply")


def test_non_finite_unused_values_are_ignored(tmp_path):
    v = random_vertices(4, 0, np.random.default_rng(8), extras=(("extra", "<f4"),))
    v["nx"][1] = np.nan
    v["extra"][2] = np.inf
    write_plyfile(tmp_path / "a.ply", v)
    assert len(load_ply(tmp_path / "a.ply")) == 4


@pytest.mark.parametrize(("log_scale", "max_scale"), [(20.0, 1e4), (100.0, 1e4), (1e30, 1e4), (math.log(2), 1.5)])
def test_absurd_scales_are_refused(tmp_path, log_scale, max_scale):
    raw_ply(tmp_path / "a.ply", header_3dgs(2), rows_3dgs(1) + rows_3dgs(1, scale_1=log_scale))
    with raises(tmp_path / "a.ply", f"vertex 1 has scale_1 = .*max_scale={max_scale}"):
        load_ply(tmp_path / "a.ply", max_scale=max_scale)


def test_zero_quaternion_is_refused(tmp_path):
    raw_ply(tmp_path / "a.ply", header_3dgs(3), rows_3dgs(2) + rows_3dgs(1, rot_0=0.0))
    with raises(tmp_path / "a.ply", "vertex 2 has a zero quaternion"):
        load_ply(tmp_path / "a.ply")


def test_vertex_cap(tmp_path):
    raw_ply(tmp_path / "a.ply", header_3dgs(11), rows_3dgs(11))
    with raises(tmp_path / "a.ply", "11 vertices, over the cap max_vertices=10"):
        load_ply(tmp_path / "a.ply", max_vertices=10)
    assert len(load_ply(tmp_path / "a.ply", max_vertices=11)) == 11


def test_billions_of_vertices_refused_without_allocating(tmp_path):
    raw_ply(tmp_path / "a.ply", header_3dgs(3_000_000_000, degree=3), rows_3dgs(2, degree=3))
    tracemalloc.start()
    try:
        with raises(tmp_path / "a.ply", "3000000000 vertices, over the cap max_vertices=20000000"):
            load_ply(tmp_path / "a.ply")
        # Even with the cap lifted, the size check refuses it before any array is made.
        with raises(tmp_path / "a.ply", "declares 3000000000 vertices of 248 bytes .*truncated"):
            load_ply(tmp_path / "a.ply", max_vertices=10**12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_HEADER_BYTES, peak
