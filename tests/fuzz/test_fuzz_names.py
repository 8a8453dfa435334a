"""Fuzzing run and checkpoint file names: none can leave its folder.

A run name (``--run``, ``CheckpointStore.run``) and the file names of a checkpoint (what a trainer
commits, and what a manifest read back from the store lists) are either one plain path segment
inside the store, or refused with a ValueError / ConfigError / CorruptCheckpoint naming them. A
manifest that lists ``../../x`` is corrupt: the store never reads, writes or deletes outside.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learner.config import TrainConfig
from sim.configs import ConfigError, resolve
from store import MANIFEST, CheckpointStore, CorruptCheckpoint, check_name
from tests.fuzz.counting import count

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
TRICKS = ["..", ".", "../x", "../../etc/passwd", "/etc/passwd", "a/b", "a\\b", "~", "~root", "x/..", "..x", "x..",
          ".hidden", "-rf", "MANIFEST.json", "LOCK.json", "ckpt-00000001", "a\x00b", "C:\\x", "file:///x", "s3://b/x",
          "%2e%2e", "a" * 129, "", " ", "ok-name_1.2"]  # fmt: skip
NAMES = st.one_of(
    st.sampled_from(TRICKS),
    st.text(max_size=20),
    st.lists(st.sampled_from(["..", ".", "/", "\\", "a", "b-1", "_", "~", "\x00"]), min_size=1, max_size=6).map(
        "".join
    ),
)


def _inside(root: Path, name: str) -> bool:
    p = Path(os.path.normpath(root / name))
    return p.parent == root and p.name == name


@pytest.mark.timeout(300)
@FUZZ
@given(name=NAMES)
def test_fuzz_run_names(tmp_path_factory, name):
    count("name")
    root = tmp_path_factory.getbasetemp() / "names-store"
    try:
        check_name("run", name)
    except ValueError as e:
        assert "not allowed" in str(e) or "must be a str" in str(e)
        with pytest.raises(ValueError):
            CheckpointStore(root).run(name)
        if name != "":  # (an empty --run means a new timestamped name)
            with pytest.raises(ConfigError, match="run"):
                resolve(TrainConfig, None, [f"run={json.dumps(name)}"])
        return
    assert _inside(root, name) and name not in (".", "..") and "/" not in name and "\\" not in name
    rs = CheckpointStore(root).run(name)
    assert Path(rs.uri).parent == root
    assert resolve(TrainConfig, None, [f"run={json.dumps(name)}"]).run == name


@pytest.mark.timeout(300)
@FUZZ
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_fuzz_checkpoint_file_names(tmp_path_factory, names):
    count("name")
    root = tmp_path_factory.mktemp("files")
    rs = CheckpointStore(root).run("r")
    files = {n: n.encode("utf-8", "surrogatepass") for n in names}
    try:
        version = rs.commit(files, {"iteration": 0})
    except ValueError as e:
        assert any(repr(n) in str(e) or n in str(e) for n in names), e
        assert not (root / "r").exists() or not any((root / "r").iterdir())  # nothing written
        return
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert written == sorted([f"r/ckpt-{version:08d}/{n}" for n in names] + [f"r/ckpt-{version:08d}/{MANIFEST}"])
    assert rs.load(version).files == files


@pytest.mark.timeout(300)
@FUZZ
@given(name=NAMES)
def test_fuzz_manifest_file_names_read_back(tmp_path_factory, name):
    """A manifest edited in the store to list any name: a bad one makes the checkpoint corrupt (and
    skipped), it is never opened; a good one that is not there is missing."""
    count("name")
    root = tmp_path_factory.mktemp("manifest")
    rs = CheckpointStore(root).run("r")
    v = rs.commit({"w.bin": b"weights"}, {"iteration": 1})
    secret = root / "secret.bin"  # what an escaping name would reach from r/ckpt-00000001/
    secret.write_bytes(b"not yours")
    mpath = root / "r" / f"ckpt-{v:08d}" / MANIFEST
    manifest = json.loads(mpath.read_text())
    manifest["files"] = {name: {"size": 9, "sha256": hashlib.sha256(b"not yours").hexdigest()}}
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(CorruptCheckpoint) as info:
        rs.load(v)
    assert "invalid file name" in str(info.value) or "missing" in str(info.value)
    assert rs.load_latest() is None  # skipped, with nothing older to fall back on
    assert secret.read_bytes() == b"not yours"
