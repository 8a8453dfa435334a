"""Fault 7: two training drivers (real ``python -m learner.train`` processes, started together) writing
the same run name to the same S3 store (moto on loopback).

Exactly one gets the run's lease; the other is refused with exit code 3 and a message naming the
holder (its owner, host and PID) before it writes anything, not even its run folder. (The holder is
paused with SIGSTOP until the other has given up, so the race is won the same way on any machine.) The winner
trains to the end, and every checkpoint in the store is whole and from one unbroken run.
"""

from __future__ import annotations

import json
import os
import signal
import uuid

import pytest

from store import CheckpointStore
from tests.faults.harness import ENVS, Driver, T, check_every_version, drivers, tiny_args

ITERATIONS = 6


def _lease_pid(server, prefix: str) -> int | None:
    """The PID in the run's LOCK.json, read straight from the server; None while there is none."""
    try:
        body = server.client().get_object(Bucket=server.bucket, Key=f"{prefix}/shared/LOCK.json")["Body"].read()
    except Exception:  # not written yet
        return None
    return json.loads(body)["pid"]


@pytest.mark.slow
def test_fault_two_drivers_same_run_second_refused(tmp_path, fault_suite, moto_s3):
    prefix = f"two-{uuid.uuid4().hex[:10]}"
    uri = moto_s3.uri(prefix)
    with drivers() as started:
        for name in ("a", "b"):
            args = tiny_args(tmp_path / f"out-{name}", fault_suite, uri, run="shared", iterations=ITERATIONS)
            started.append(Driver(args, tmp_path / f"{name}.log"))
        # Whichever takes the lease first is paused (SIGSTOP) until the other has given up, so that the
        # other always arrives while the first holds the run, however unequal the two start-ups are.
        holder = started[0].wait_for(lambda: _lease_pid(moto_s3, prefix), what="the run lease taken")
        first = next(d for d in started if d.pid == holder)
        second = next(d for d in started if d is not first)
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second_code = second.finish(timeout=300)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        codes = [first.finish(), second_code] if started[0] is first else [second_code, first.finish()]
    assert sorted(codes) == [0, 3], [d.output()[-3000:] for d in started]
    winner, loser = started if codes[0] == 0 else started[::-1]
    refusal = loser.output()
    assert "learner.train: run 'shared' is locked" in refusal, refusal[-3000:]
    assert f"pid {winner.pid}" in refusal and "Another writer is training this run" in refusal
    assert "Traceback" not in refusal
    loser_out = tmp_path / ("out-a" if loser is started[0] else "out-b")
    assert not loser_out.exists()  # refused before it wrote anything

    rs = CheckpointStore(uri).run("shared")
    versions = check_every_version(rs, last_iteration=ITERATIONS, env_steps=ITERATIONS * T * ENVS)
    assert versions == list(range(1, len(versions) + 1))  # one writer's unbroken sequence
    iterations = [rs.load(v).meta["iteration"] for v in versions]
    assert iterations[0] == 0 and iterations == sorted(set(iterations))
    # end of IL + one per iteration: each committed, or dropped by design when newer ones waited
    dropped = winner.output().count("dropping an un-started checkpoint")
    assert len(versions) + dropped == ITERATIONS + 1
