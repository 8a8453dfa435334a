"""Fuzzing ``sim.load_ply`` with untrusted files: mutated headers and bodies of a valid 3DGS PLY,
random bytes, and headers that claim huge vertex counts.

Every input either loads as a sane cloud (finite values, unit quaternions, opacities in [0, 1],
scales within the cap) or raises ``sim.PlyError`` naming the file; never another exception, never a
hang (hypothesis deadline, pytest timeout), never an allocation the file cannot back (tracemalloc).
"""

from __future__ import annotations

import tracemalloc
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.gaussians import GaussianCloud
from sim.ply import DEFAULT_MAX_SCALE, PlyError, load_ply, save_ply
from tests.fuzz.counting import count

N = 12
FUZZ = settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


def _valid_ply(tmp: Path, degree: int = 1) -> bytes:
    rng = np.random.default_rng(0)
    k = (degree + 1) ** 2
    cloud = GaussianCloud(
        torch.from_numpy(rng.normal(size=(N, 3)).astype(np.float32)),
        torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(N, 4)).astype(np.float32)), dim=1),
        torch.from_numpy(rng.uniform(0.01, 1.0, (N, 3)).astype(np.float32)),
        torch.from_numpy(rng.uniform(0.05, 0.95, N).astype(np.float32)),
        torch.from_numpy(rng.normal(size=(N, k, 3)).astype(np.float32)),
    )
    path = tmp / "valid.ply"
    save_ply(cloud, path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> bytes:
    return _valid_ply(tmp_path_factory.mktemp("ply"))


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    end = data.index(b"end_header\n") + len(b"end_header\n")
    return data[:end].split(b"\n")[:-1], data[end:]


def check(path: Path) -> str:
    """Load; a cloud must be sane, an error must be a PlyError naming the file. Returns the outcome."""
    try:
        cloud = load_ply(path)
    except PlyError as e:
        assert str(path) in str(e), e
        return "refused"
    for t in (cloud.means, cloud.quats, cloud.scales, cloud.opacities, cloud.sh):
        assert torch.isfinite(t).all()
    assert ((cloud.opacities >= 0) & (cloud.opacities <= 1)).all()
    assert (cloud.scales <= DEFAULT_MAX_SCALE).all() and (cloud.scales >= 0).all()
    assert torch.allclose(cloud.quats.norm(dim=1), torch.ones(len(cloud.quats)), atol=1e-4)
    return "loaded"


HEADER_TOKENS = st.sampled_from(
    [b"ply", b"format", b"binary_little_endian", b"binary_big_endian", b"ascii", b"1.0", b"2.0", b"element",
     b"vertex", b"face", b"property", b"float", b"double", b"uchar", b"int", b"list", b"x", b"y", b"z",
     b"f_dc_0", b"f_rest_0", b"opacity", b"scale_0", b"rot_0", b"end_header", b"comment", b"-1", b"0",
     b"12", b"99999999999999999999", b"\xff\xfe", b"\x00", b"nan"]
)  # fmt: skip


@st.composite
def header_mutation(draw, valid_lines):
    lines = list(valid_lines)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "replace", "count"]))
        if op == "drop" and len(lines) > 1:
            lines.pop(i)
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "replace":
            lines[i] = b" ".join(draw(st.lists(HEADER_TOKENS, min_size=0, max_size=5)))
        else:
            count_ = draw(st.one_of(st.integers(-5, 40), st.integers(0, 10**15)))
            lines = [b"element vertex %d" % count_ if ln.startswith(b"element vertex") else ln for ln in lines]
    return b"\n".join(lines) + b"\n"


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data())
def test_fuzz_ply_mutated_header(tmp_path, valid, data):
    count("ply")
    lines, body = _split(valid)
    path = tmp_path / "h.ply"
    path.write_bytes(data.draw(header_mutation(lines)) + body)
    check(path)


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data())
def test_fuzz_ply_mutated_body(tmp_path, valid, data):
    count("ply")
    lines, body = _split(valid)
    body = bytearray(body)
    op = data.draw(st.sampled_from(["flip", "float", "truncate", "append"]))
    if op == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "float":  # NaN, Inf, huge or tiny values written over whole floats
        value = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e38, -1e38, 3e4, 1e-45, 0.0]))
        slot = data.draw(st.integers(0, len(body) // 4 - 1))
        body[4 * slot : 4 * slot + 4] = np.float32(value).tobytes()
    elif op == "truncate":
        body = body[: data.draw(st.integers(0, len(body) - 1))]
    else:
        body += data.draw(st.binary(min_size=1, max_size=64))
    path = tmp_path / "b.ply"
    path.write_bytes(b"\n".join(lines) + b"\n" + bytes(body))
    check(path)


@pytest.mark.timeout(300)
@FUZZ
@given(
    prefix=st.sampled_from([b"", b"ply\n", b"ply\nformat binary_little_endian 1.0\n"]), junk=st.binary(max_size=2048)
)
def test_fuzz_ply_random_bytes(tmp_path, prefix, junk):
    count("ply")
    path = tmp_path / "r.ply"
    path.write_bytes(prefix + junk)
    assert check(path) == "refused"


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.one_of(st.integers(10**6, 20_000_000), st.integers(20_000_001, 10**12)), body=st.integers(0, 4096))
def test_fuzz_ply_huge_vertex_count_refused_before_allocating(tmp_path, valid, n, body):
    """A header that claims up to a trillion vertices over a small body is refused, and loading it
    allocates a few kB, not N rows (62 bytes each: 1M vertices would be ~60 MB)."""
    count("ply")
    lines, data = _split(valid)
    lines = [b"element vertex %d" % n if ln.startswith(b"element vertex") else ln for ln in lines]
    path = tmp_path / "huge.ply"
    path.write_bytes(b"\n".join(lines) + b"\n" + data[:body])
    tracemalloc.start()
    try:
        with pytest.raises(PlyError, match="vertices"):
            load_ply(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"loading a lying header allocated {peak} bytes"


def test_tracemalloc_sees_the_loaders_allocations(tmp_path):
    """The meter of the test above works: a real 100k-vertex file shows its arrays in the peak."""
    rng = np.random.default_rng(1)
    n = 100_000
    cloud = GaussianCloud.from_rgb(rng.normal(size=(n, 3)), np.tile([1.0, 0, 0, 0], (n, 1)),
                                   np.full((n, 3), 0.1), np.full(n, 0.5), rng.uniform(0, 1, (n, 3)))  # fmt: skip
    save_ply(cloud, tmp_path / "big.ply")
    tracemalloc.start()
    try:
        load_ply(tmp_path / "big.ply")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak > n * 14 * 4  # at least the float32 arrays of 14 values per vertex
