"""The run lease: one live writer per run, stale leases taken over, losers told so, on every back end."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from store import LOCK, LeaseLost, RunLocked
from tests.s3_servers import REPO
from tests.store.helpers import payload


def test_second_acquire_is_refused_naming_the_holder(backend):
    store = backend.store()
    lease = store.run("r").acquire("trainer-a")
    record = json.loads(backend.raw.read(f"r/{LOCK}"))
    assert record["owner"] == "trainer-a" and record["pid"] == os.getpid()
    assert abs(record["heartbeat"] - time.time()) < 60 and record["host"]
    with pytest.raises(RunLocked, match="trainer-a") as info:
        backend.store().run("r").acquire("trainer-b")
    assert info.value.holder["owner"] == "trainer-a"
    time.sleep(0.01)
    assert lease.heartbeat() is True
    assert json.loads(backend.raw.read(f"r/{LOCK}"))["heartbeat"] > record["heartbeat"]
    lease.release()
    assert not backend.raw.exists(f"r/{LOCK}")
    with backend.store().run("r").acquire("trainer-b") as lease_b:
        assert lease_b.held
    assert not lease_b.held and not backend.raw.exists(f"r/{LOCK}")


def test_stale_lease_taken_over_by_timeout_and_the_old_holder_sees_lease_lost(backend, caplog):
    old = backend.store().run("r")
    old_lease = old.acquire("slow-trainer")
    old.commit(payload(1), {"iteration": 1})
    time.sleep(0.3)  # the old holder misses its heartbeats
    new = backend.store().run("r")
    with caplog.at_level(logging.WARNING, logger="store"):
        new_lease = new.acquire("new-trainer", lease_timeout=0.2)
    assert any("took over" in r.getMessage() and "slow-trainer" in r.getMessage() for r in caplog.records)
    assert json.loads(backend.raw.read(f"r/{LOCK}"))["owner"] == "new-trainer"
    with pytest.raises(LeaseLost, match="new-trainer"):
        old.commit(payload(2), {"iteration": 2})
    with pytest.raises(LeaseLost):
        old_lease.heartbeat()
    assert old.versions() == [1]  # the loser published nothing
    old_lease.release()  # must not delete the new holder's lease
    assert json.loads(backend.raw.read(f"r/{LOCK}"))["owner"] == "new-trainer"
    assert new.commit(payload(2), {"iteration": 2}) == 2
    assert new_lease.heartbeat() is True
    new_lease.release()


HOLDER = """
import sys, time
from store import CheckpointStore
CheckpointStore(sys.argv[1]).run(sys.argv[2]).acquire("holder-process")
print("acquired", flush=True)
time.sleep(120)
"""


def test_lease_of_a_sigkilled_holder_is_taken_over(backend, caplog):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, backend.uri, "r"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline() == b"acquired\n", proc.stderr.read().decode()
        rs = backend.store().run("r")
        with pytest.raises(RunLocked, match=f"holder-process.*pid {proc.pid}"):
            rs.acquire("successor")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with caplog.at_level(logging.WARNING, logger="store"):
        lease = rs.acquire("successor")  # default lease_timeout: the dead pid alone makes it stale
    assert any(f"pid {proc.pid}" in r.getMessage() and "is gone" in r.getMessage() for r in caplog.records)
    assert rs.commit(payload(1), {"iteration": 1}) == 1
    lease.release()


def test_two_writers_on_one_run_one_is_refused_and_the_data_is_intact(backend):
    barrier = threading.Barrier(2)
    attempted = threading.Barrier(2, timeout=30)  # the winner holds the run until both have tried
    outcome: dict[str, object] = {}

    def writer(name: str) -> None:
        rs = backend.store().run("shared")
        barrier.wait()
        try:
            lease = rs.acquire(name)
        except RunLocked as exc:
            outcome[name] = exc
            attempted.wait()
            return
        attempted.wait()
        with lease:
            try:
                outcome[name] = [rs.commit(payload(i), {"iteration": i, "writer": name}) for i in range(3)]
            except LeaseLost as exc:  # would mean both were let in: fail below, not in the thread
                outcome[name] = exc

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    refused = [n for n, o in outcome.items() if isinstance(o, RunLocked)]
    winners = [n for n, o in outcome.items() if isinstance(o, list)]
    assert len(refused) == 1 and len(winners) == 1, outcome
    assert outcome[winners[0]] == [1, 2, 3]
    rs = backend.store().run("shared")
    assert rs.versions() == [1, 2, 3]
    for v in (1, 2, 3):
        ckpt = rs.load(v)
        assert ckpt.files == payload(v - 1) and ckpt.meta["writer"] == winners[0]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_concurrent_takeovers_of_a_stale_lease_have_one_winner(backend):
    for round_ in range(20 if backend.kind == "local" else 2):
        run = f"r{round_}"
        # A lease left by a process of this host that is gone: stale at once, whatever the timeout.
        stale = {"owner": "dead-holder", "host": socket.gethostname(), "pid": dead_pid(), "heartbeat": time.time()}
        backend.raw.write(f"{run}/{LOCK}", json.dumps({**stale, "token": uuid.uuid4().hex}).encode())
        barrier = threading.Barrier(3)
        results: dict[str, object] = {}

        def taker(name: str, run: str = run, barrier: threading.Barrier = barrier, results: dict = results) -> None:
            rs = backend.store().run(run)
            barrier.wait()
            try:
                results[name] = rs.acquire(name)
            except RunLocked as exc:
                results[name] = exc

        threads = [threading.Thread(target=taker, args=(f"taker{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [n for n, r in results.items() if not isinstance(r, RunLocked)]
        assert len(winners) == 1, results
        assert json.loads(backend.raw.read(f"{run}/{LOCK}"))["owner"] == winners[0]
        for name, r in results.items():
            if name not in winners:
                assert winners[0] in str(r)  # the losers name the winner
        results[winners[0]].check()
        results[winners[0]].release()
