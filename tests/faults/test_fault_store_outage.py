"""Fault 5: the S3 store gone for a while in the middle of a training run.

The checkpoint store is an S3 endpoint on loopback started by the tests: moto's server (quick) and
OpenStack Swift (slow, a real object store that keeps its data across a restart). Once the run is two
iterations in, the server is killed by its PID; training goes on while the background
committer retries with backoff; the server comes back on the same port, and the checkpoints
submitted meanwhile are committed. Nothing is lost: every submitted checkpoint is committed or
(only when newer ones wait) dropped by design, every committed one loads, and the last one holds
the run's final counters.

moto keeps its state in memory, so a restart empties it: the moto test puts back what the store held
when it went down (the bucket and its objects, as a real store keeps them) before the trainer can
reach it again; a proxy between the trainer and moto refuses connections from the moment the server
goes down until then. Swift needs no such help.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from learner.train import Trainer
from store import CheckpointStore
from tests.faults.harness import (
    ENVS,
    T,
    TcpProxy,
    check_every_version,
    config,
    metrics_rows,
    proxied_uri,
    tiny_args,
)
from tests.s3_servers import MotoServer

ITERATIONS = 10


class Outage:
    """Takes the store down once the run is two RL iterations in, waits until the committer has retried
    and training has gone on for two more iterations, then brings the store back."""

    def __init__(self, trainer: Trainer, take_down, bring_up):
        self.trainer, self.take_down, self.bring_up = trainer, take_down, bring_up
        self.error: BaseException | None = None
        self.iteration_down = self.iteration_up = -1
        self.retries_during = 0
        self.time_up = float("inf")
        # when each version was committed, as the committer reports it: a manifest's wall_time is stamped once,
        # before its publish is retried, so a commit the outage caught at its manifest is stamped before time_up
        # (recorded from the outage on: earlier versions count as committed before it)
        self.committed_at: dict[int, float] = {}
        self.thread = threading.Thread(target=self._run, name="outage", daemon=True)

    def iteration(self) -> int:
        rows = [r for r in metrics_rows(self.trainer.folder) if "charts/iteration" in r]
        return int(rows[-1]["charts/iteration"]) if rows else 0

    @staticmethod
    def _wait(cond, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _record_commits(self) -> None:
        committer = self.trainer.committer
        assert committer is not None, "the run has no committer"
        reported = committer.on_commit

        def record(version: int, meta: dict) -> None:
            self.committed_at[version] = time.time()
            if reported is not None:
                reported(version, meta)

        committer.on_commit = record

    def _run(self) -> None:
        try:
            assert self._wait(lambda: self.iteration() >= 2, 300), "the run never reached iteration 2"
            self.iteration_down = self.iteration()
            self._record_commits()
            self.take_down()
            c = self.trainer.committer
            self._wait(lambda: c.retries >= 2 and self.iteration() >= self.iteration_down + 2, 120)
            self.retries_during = c.retries
            self.iteration_up = self.iteration()
        except BaseException as e:
            self.error = e
        finally:
            self.bring_up()
            self.time_up = time.time()


def _run_through(trainer: Trainer, outage: Outage):
    outage.thread.start()
    result = trainer.run()
    outage.thread.join(60)
    if outage.error is not None:
        raise outage.error
    return result


def _check(trainer: Trainer, outage: Outage, result, rs, caplog) -> None:
    # training went on during the outage, and the committer retried with backoff meanwhile
    assert outage.iteration_up >= outage.iteration_down + 2
    assert outage.retries_during >= 2 and trainer.committer.errors == []
    assert any("failed (attempt" in r.getMessage() for r in caplog.records if r.name.startswith("store."))
    assert result.state.iteration == ITERATIONS and result.state.env_steps == ITERATIONS * T * ENVS
    # every checkpoint submitted was committed, or dropped because newer ones were waiting
    submitted = 1 + ITERATIONS  # end of IL, one per RL iteration (the last one at the end of stage rl)
    versions = check_every_version(rs, last_iteration=ITERATIONS, env_steps=ITERATIONS * T * ENVS)
    assert len(versions) == submitted - trainer.committer.dropped
    # a checkpoint taken before the store came back was committed once it was back
    late = [rs.load(v) for v in versions if outage.committed_at.get(v, 0.0) > outage.time_up]
    assert any(ck.meta["iteration"] <= outage.iteration_up for ck in late), [ck.meta for ck in late]


@pytest.mark.slow
def test_fault_store_outage_moto_killed_and_restarted(tmp_path, fault_suite, caplog):
    server = MotoServer(tmp_path / "moto")
    server.start()
    proxy = TcpProxy(server.port)
    prefix = f"outage-{uuid.uuid4().hex[:10]}"
    uri = proxied_uri(server, proxy, prefix)
    trainer = Trainer(config(tiny_args(tmp_path / "out", fault_suite, uri, iterations=ITERATIONS)))
    held: dict[str, bytes] = {}

    def take_down():
        proxy.block()  # from now on the trainer cannot reach the store
        client = server.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix + "/"):
            for obj in page.get("Contents", []):
                held[obj["Key"]] = client.get_object(Bucket=server.bucket, Key=obj["Key"])["Body"].read()
        server.stop()  # SIGKILL by PID

    def bring_up():
        if server.proc is None:
            server.start()  # same port, empty: the bucket is made again
            for key, body in held.items():
                server.client().put_object(Bucket=server.bucket, Key=key, Body=body)
        proxy.unblock()

    outage = Outage(trainer, take_down, bring_up)
    try:
        with caplog.at_level("WARNING", logger="store"):
            result = _run_through(trainer, outage)
        _check(trainer, outage, result, CheckpointStore(uri).run("r"), caplog)
    finally:
        proxy.close()
        server.stop()


@pytest.mark.slow
def test_fault_store_outage_swift_stopped_and_restarted(tmp_path, fault_suite, swift_s3, caplog):
    prefix = f"outage-{uuid.uuid4().hex[:10]}"
    uri = swift_s3.uri(prefix)
    trainer = Trainer(config(tiny_args(tmp_path / "out", fault_suite, uri, iterations=ITERATIONS)))
    outage = Outage(trainer, swift_s3.stop, swift_s3.start)
    with caplog.at_level("WARNING", logger="store"):
        result = _run_through(trainer, outage)
    _check(trainer, outage, result, CheckpointStore(uri).run("r"), caplog)
