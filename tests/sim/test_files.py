"""sim.files: a write is all or nothing, leaves no temporary file, and never touches the target on failure;
a file's sha256 against hashlib's of its bytes; where a cache lives."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from sim import files
from sim.files import atomic_path, atomic_write, cache_dir, sha256_file, temporary_path


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_text_bytes_and_parts_are_written_whole(tmp_path):
    atomic_write(tmp_path / "a.txt", "grüße\n")
    assert (tmp_path / "a.txt").read_bytes() == "grüße\n".encode()
    atomic_write(tmp_path / "b.bin", b"\x00\x01")
    rows = np.arange(6, dtype="<f4").reshape(2, 3)
    atomic_write(tmp_path / "c.bin", [b"head\n", memoryview(rows)], fsync=True)
    assert (tmp_path / "c.bin").read_bytes() == b"head\n" + rows.tobytes()
    assert _names(tmp_path) == ["a.txt", "b.bin", "c.bin"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    atomic_write(target, "old\n")

    def parts():
        yield b"new, half of it"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, parts())
    assert target.read_text() == "old\n" and _names(tmp_path) == ["report.md"]


def test_atomic_path_replaces_on_success_and_removes_on_error(tmp_path):
    target = tmp_path / "sub" / "x.npz"  # the folder is made
    with atomic_path(target, suffix=".npz") as tmp:
        assert tmp.parent == target.parent and tmp.name.endswith(".npz") and tmp.name.startswith(".")
        np.savez(tmp, a=np.arange(3))  # savez keeps a name that ends in .npz as it is
    assert np.load(target)["a"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        with atomic_path(target, suffix=".npz") as tmp:
            np.savez(tmp, a=np.arange(5))
            raise ValueError("caller failed after writing")
    assert np.load(target)["a"].tolist() == [0, 1, 2] and _names(target.parent) == ["x.npz"]


def test_writing_nothing_is_an_error_not_an_empty_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with atomic_path(tmp_path / "y.png"):
            pass
    assert _names(tmp_path) == []


def test_no_folder_is_made_when_asked_not_to(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "missing" / "z.ply", b"ply\n", mkdir=False)
    assert _names(tmp_path) == []


def test_temporary_names_are_unique_per_call(tmp_path):
    names = {temporary_path(tmp_path / "v.mp4", ".mp4").name for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(".v.mp4.") and n.endswith(".tmp.mp4") for n in names)


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17])
def test_sha256_file_is_the_digest_of_the_whole_file_across_chunk_edges(tmp_path, size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(tmp_path / "f"), chunk_bytes=7) == hashlib.sha256(data).hexdigest()


def test_cache_dir_is_the_variable_else_the_checkout_else_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path / "c"))
    assert cache_dir("demos") == tmp_path / "c" / "demos"
    monkeypatch.setenv("SPLATDRIVE_CACHE", "~/x")
    assert cache_dir("demos") == Path.home() / "x" / "demos"
    monkeypatch.delenv("SPLATDRIVE_CACHE")
    repo = Path(__file__).resolve().parents[2]
    assert cache_dir("scenarios") == repo / ".cache" / "scenarios"  # the tests run from a checkout
    monkeypatch.setattr(files, "REPO", tmp_path)  # a package installed elsewhere: no pyproject.toml beside it
    assert cache_dir("scenarios") == Path.home() / ".cache" / "splatdrive" / "scenarios"
    assert not (tmp_path / ".cache").exists()  # named, not created
