"""Fault 4: committed checkpoints damaged afterwards (one byte flipped in the newest, a file truncated in
the one before), then the run resumed through the training driver.

Both are caught by their manifests' sha256 / sizes and skipped with a warning naming the file; the
driver resumes from the newest intact checkpoint, exactly (the restored state encodes to its bytes),
and trains on from there with the counters of that checkpoint. Its retention never counts the damaged
versions among the kept ones: it moves them aside (CORRUPT.json instead of the manifest).
"""

from __future__ import annotations

import json

import pytest

from learner.train import train
from store import CheckpointNotFound, CheckpointStore, CorruptCheckpoint, version_dir
from tests.faults.harness import ENVS, T, assert_same_files, check_every_version, config, restore_only, tiny_args


@pytest.mark.slow
def test_fault_checkpoint_corrupted_after_commit_is_skipped_on_resume(tmp_path, fault_suite, caplog):
    store = tmp_path / "store"
    args = tiny_args(tmp_path / "out", fault_suite, store, iterations=2)
    first = train(config(args))
    rs = CheckpointStore(store).run("r")
    assert rs.versions() == [1, 2, 3] and first.last_version == 3  # end of IL, iteration 1, end of RL
    intact = rs.load(1)
    assert intact.meta["stage"] == "rl" and intact.meta["iteration"] == 0

    flipped = store / "r" / "ckpt-00000003" / "policy.safetensors"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one weight
    flipped.write_bytes(bytes(data))
    truncated = store / "r" / "ckpt-00000002" / "optimizer.safetensors"
    truncated.write_bytes(truncated.read_bytes()[:-100])
    with pytest.raises(CorruptCheckpoint, match=r"policy\.safetensors.*changed bytes"):
        rs.load(3)
    with pytest.raises(CorruptCheckpoint, match=r"optimizer\.safetensors.*truncated"):
        rs.load(2)

    # the driver's resume skips both with a warning and restores checkpoint 1 exactly
    with caplog.at_level("WARNING", logger="store"):
        version, _, files, logs = restore_only(config(args), tmp_path / "restore")
    assert version == 1, logs
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("skipping checkpoint version 3" in w and "policy.safetensors" in w for w in warnings), warnings
    assert any("skipping checkpoint version 2" in w and "optimizer.safetensors" in w for w in warnings), warnings
    assert_same_files(files, intact.files)

    # and training goes on from checkpoint 1: RL from iteration 0, IL not redone
    second = train(config(tiny_args(tmp_path / "out", fault_suite, store, iterations=3)))
    assert second.state.iteration == 3 and second.state.env_steps == 3 * T * ENVS
    assert second.state.il_iteration == 1
    assert [h["label"] for h in second.state.history] == ["il", "rl+il"]
    # retention moved the damaged versions aside (their numbers stay taken); every version listed is
    # whole and the newest is right
    versions = check_every_version(rs, last_iteration=3, env_steps=3 * T * ENVS)
    assert versions[0] == 1 and min(v for v in versions if v > 1) == 4
    for v in (2, 3):
        assert (store / "r" / version_dir(v) / "CORRUPT.json").is_file()
        with pytest.raises(CheckpointNotFound):
            rs.load(v)
    assert json.loads(rs.load(versions[-1]).files["trainer.json"])["state"]["il_iteration"] == 1
