"""Fault 3: the training driver (``python -m learner.train``, a real subprocess) SIGKILLed between two
checkpoints, and in the middle of writing one.

Rerunning the same command resumes from the latest committed checkpoint: the restored weights,
optimizer state, RNG streams and counters encode to exactly the bytes of that checkpoint (checked
with the driver's own resume path, ``restore_only``), the rerun says which checkpoint it resumed
from, and its counters carry on (env_steps = iterations x T x envs, IL not redone). A version the
killed driver was writing has no manifest: it is never loaded, and the next driver removes it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from store import CheckpointStore
from tests.faults.harness import (
    ENVS,
    MANIFEST,
    Driver,
    T,
    TcpProxy,
    assert_same_files,
    check_every_version,
    config,
    drivers,
    local_versions,
    partial_versions,
    proxied_uri,
    restore_only,
    s3_versions,
    tiny_args,
)

ITERATIONS = 8


def _committed_iterations(root, run) -> dict[int, int]:
    """{version: iteration} of the committed versions, from their manifests (a cheap look from outside)."""
    out = {}
    for v, names in local_versions(root, run).items():
        if MANIFEST in names:
            manifest = json.loads((root / run / f"ckpt-{v:08d}" / MANIFEST).read_text())
            out[v] = manifest["meta"]["iteration"]
    return out


@pytest.mark.slow
def test_fault_driver_sigkill_between_checkpoints(tmp_path, fault_suite):
    store = tmp_path / "store"
    args = tiny_args(tmp_path / "out", fault_suite, store, run="r", iterations=ITERATIONS, store__checkpoint_every=2)
    rs = CheckpointStore(store).run("r")
    with drivers() as started:
        first = Driver(args, tmp_path / "first.log")
        started.append(first)
        # iteration 3 is logged: the checkpoint of iteration 2 was submitted before it began, the next
        # one comes after iteration 4. Once iteration 2's is committed, the driver is between the two.
        first.wait_for(f"it 3/{ITERATIONS}", what="iteration 3")
        first.wait_for(lambda: 2 in _committed_iterations(store, "r").values(), what="the checkpoint of iteration 2")
        first.sigkill()

        listing = local_versions(store, "r")
        assert partial_versions(listing) == [], f"killed while writing a checkpoint, not between two: {listing}"
        latest = rs.latest()
        ck = rs.load(latest)
        assert ck.meta["stage"] == "rl" and ck.meta["iteration"] >= 2
        assert (store / "r" / "LOCK.json").exists()  # the dead driver's lease is left behind

        # The rerun's resume, stopped right after restoring: it takes the dead driver's lease over,
        # resumes from the latest committed checkpoint, and holds exactly what that checkpoint holds.
        version, state, files, logs = restore_only(config(args), tmp_path / "restore")
        assert version == latest, logs
        assert any("took over the lease" in m and "is gone" in m for m in logs), logs
        assert_same_files(files, ck.files)
        assert (state.iteration, state.env_steps) == (ck.meta["iteration"], ck.meta["env_steps"])

        # Rerunning the same command trains on from there to the end.
        second = Driver(args, tmp_path / "second.log")
        started.append(second)
        assert second.finish() == 0, second.output()[-4000:]
    out = second.output()
    it = ck.meta["iteration"]
    assert (
        f"resumed from checkpoint {latest}: stage rl, iteration {it}, IL iteration 1, {it * T * ENVS:,} env steps"
        in out
    )
    assert f"it {it + 1}/{ITERATIONS}" in out and f"it {it}/{ITERATIONS}" not in out  # nothing redone
    assert "IL 1/1" not in out  # the IL stage is not redone either
    versions = check_every_version(rs, last_iteration=ITERATIONS, env_steps=ITERATIONS * T * ENVS)
    assert versions[-1] > latest
    final = rs.load(versions[-1])
    history = json.loads(final.files["metrics.json"])
    assert [h["label"] for h in history] == ["il", "rl+il"]


@pytest.mark.slow
def test_fault_driver_sigkill_while_writing_a_checkpoint(tmp_path, fault_suite, moto_s3):
    """The store is moto's S3 server behind a slow link (a proxy that holds every chunk 0.1 s), so a
    checkpoint takes seconds to upload; the driver is SIGKILLed once a version has some files and no
    manifest."""
    prefix = f"kill-{uuid.uuid4().hex[:10]}"
    proxy = TcpProxy(moto_s3.port)
    try:
        uri = proxied_uri(moto_s3, proxy, prefix)
        args = tiny_args(tmp_path / "out", fault_suite, uri, run="r", iterations=ITERATIONS, store__checkpoint_every=2)
        rs = CheckpointStore(uri).run("r")
        with drivers() as started:
            proxy.delay = 0.1
            first = Driver(args, tmp_path / "first.log")
            started.append(first)

            def caught_mid_write():
                listing = s3_versions(moto_s3, prefix, "r")
                partial = [v for v in partial_versions(listing) if listing[v]]  # files there, no manifest
                committed = [v for v, names in listing.items() if MANIFEST in names]
                return partial and committed and partial[-1] > max(committed)

            first.wait_for(caught_mid_write, what="a checkpoint half-written", timeout=600)
            first.sigkill()
            proxy.delay = 0.0

            listing = s3_versions(moto_s3, prefix, "r")
            half = partial_versions(listing)
            assert half, listing
            assert rs.versions() == sorted(v for v in listing if v not in half)  # invisible to readers
            latest = rs.latest()
            ck = rs.load(latest)
            assert ck.meta["iteration"] < ITERATIONS

            # The rerun removes the half-written version and resumes from the last committed one, exactly.
            version, _, files, logs = restore_only(config(args), tmp_path / "restore")
            assert version == latest, logs
            for v in half:
                assert any(f"ckpt-{v:08d}" in m and "no MANIFEST.json" in m for m in logs), logs
            assert not partial_versions(s3_versions(moto_s3, prefix, "r"))
            assert_same_files(files, ck.files)

            second = Driver(args, tmp_path / "second.log")
            started.append(second)
            assert second.finish() == 0, second.output()[-4000:]
        it = ck.meta["iteration"]
        assert f"resumed from checkpoint {latest}: stage {ck.meta['stage']}, iteration {it}," in second.output()
        assert not partial_versions(s3_versions(moto_s3, prefix, "r"))
        check_every_version(rs, last_iteration=ITERATIONS, env_steps=ITERATIONS * T * ENVS)
    finally:
        proxy.close()
