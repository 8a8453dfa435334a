"""Retries of store operations, and the store riding out outages (AsyncCommitter, heartbeats)."""

from __future__ import annotations

import logging
import os
import time
import uuid

import pytest

from store import AsyncCommitter, CheckpointNotFound, CheckpointStore, LeaseLost, RetryPolicy, StoreUnavailable, retry
from tests.s3_servers import MotoServer
from tests.store.helpers import FAST, UNBOUNDED, payload, wait_until

# --------------------------------------------------------------------------------------------------
# Retries


def test_retry_retries_transient_errors_until_success():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("connection refused")
        return "ok"

    seen = []
    assert retry(flaky, FAST, what="flaky op", on_retry=lambda n, e: seen.append(n)) == "ok"
    assert len(calls) == 3 and seen == [1, 2]


@pytest.mark.parametrize("exc", [ValueError("bad input"), CheckpointNotFound("404"), KeyError("x")])
def test_retry_does_not_retry_logic_errors(exc):
    calls = []

    def fails():
        calls.append(1)
        raise exc

    with pytest.raises(type(exc)):
        retry(fails, FAST, what="op")
    assert len(calls) == 1


def test_retry_gives_up_after_max_attempts_or_total_timeout():
    calls = []

    def down():
        calls.append(1)
        raise TimeoutError("timed out")

    with pytest.raises(StoreUnavailable, match="listing s3://x: gave up after 4 attempts"):
        retry(down, FAST, what="listing s3://x")
    assert len(calls) == 4
    with pytest.raises(StoreUnavailable, match="total_timeout"):
        retry(down, RetryPolicy(max_attempts=None, base_delay=0.05, max_delay=0.05, total_timeout=0.2), what="op")


def test_backoff_grows_exponentially_with_jitter():
    policy = RetryPolicy(max_attempts=None, base_delay=0.1, max_delay=1.0, total_timeout=None)
    for n, cap in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)]:
        delays = [policy.delay(n) for _ in range(200)]
        assert all(cap / 2 <= d <= cap for d in delays)
        assert len(set(delays)) > 1


# --------------------------------------------------------------------------------------------------
# Store outages


def test_async_committer_waits_out_a_stopped_s3_server(tmp_path, caplog):
    server = MotoServer(tmp_path / "moto")
    server.start()
    committer = None
    try:
        rs = CheckpointStore(server.uri("outage"), retry=FAST).run("r")
        committed: list[tuple[int, int]] = []
        committer = AsyncCommitter(
            rs, max_pending=2, retry=UNBOUNDED, on_commit=lambda v, meta: committed.append((v, meta["iteration"]))
        )
        committer.submit(payload(0), {"iteration": 0})
        assert committer.flush(30) and committer.last_committed == 1

        other = CheckpointStore(server.uri("outage"), retry=FAST).run("other")
        lease = other.acquire("trainer")  # (moto forgets it on restart: a lease for this phase only)

        server.stop()
        with pytest.raises(StoreUnavailable, match="gave up"):
            rs.versions()  # a plain call gives up after its policy
        assert lease.heartbeat(timeout=0.2) is False  # the store is down: training goes on
        assert lease.heartbeat() is False and lease.held  # without waiting again, for heartbeat_backoff s
        with caplog.at_level(logging.WARNING, logger="store"):
            for i in range(1, 5):
                committer.submit(payload(i), {"iteration": i})
            # submit() came back while nothing can be committed: training did not wait for the store.
            assert committer.pending >= 1 and committer.last_committed == 1
            wait_until(lambda: committer.retries >= 3, what="retries against the stopped server")
        assert committer.dropped >= 1  # 4 submitted, at most 1 in flight + 2 waiting
        assert any("dropping an un-started checkpoint" in r.getMessage() for r in caplog.records)

        server.start()  # same port; moto keeps state in memory, so start() creates the bucket again
        assert committer.flush(60)
        assert committer.errors == []
        iterations = [it for _, it in committed]
        assert iterations[0] == 0 and iterations[-1] == 4
        assert len(iterations) - 1 + committer.dropped == 4
        latest = rs.load_latest()
        assert latest.meta == {"iteration": 4} and latest.files == payload(4)
        for version in rs.versions():  # everything visible is whole
            ckpt = rs.load(version)
            assert ckpt.files == payload(ckpt.meta["iteration"])
    finally:
        if committer is not None:
            committer.close(timeout=5)
        server.stop()


def test_cleanup_never_removes_a_folder_its_own_committer_is_writing(tmp_path):
    rs = CheckpointStore(tmp_path, retry=FAST).run("r")
    big = {f"part{i}.bin": os.urandom(100_000) for i in range(6)}
    with rs.acquire("trainer"), AsyncCommitter(rs, max_pending=100) as committer:
        for i in range(12):
            committer.submit(big, {"iteration": i})
        removed = []
        while committer.pending:
            removed += rs.cleanup()  # the trainer cleaning up while checkpoints are being written
        assert committer.flush(60)
    assert committer.errors == [] and removed == []
    assert rs.versions() == list(range(1, 13))
    assert all(rs.load(v).files == big for v in (1, 6, 12))


def test_async_committer_stops_after_lease_lost(tmp_path):
    store = CheckpointStore(tmp_path, retry=FAST)
    old = store.run("r")
    old.acquire("old")
    time.sleep(0.15)
    store.run("r").acquire("new", lease_timeout=0.1)
    with AsyncCommitter(old, retry=UNBOUNDED) as committer:
        committer.submit(payload(1), {"iteration": 1})
        assert committer.flush(10)
        assert isinstance(committer.errors[0], LeaseLost)
        with pytest.raises(LeaseLost):
            committer.submit(payload(2), {"iteration": 2})
    assert old.versions() == []


@pytest.mark.slow
def test_swift_outage_lease_and_checkpoints_survive_a_restart(swift_s3):
    rs = CheckpointStore(swift_s3.uri(f"t-{uuid.uuid4().hex[:12]}"), retry=FAST).run("r")
    with rs.acquire("trainer") as lease:
        assert rs.commit(payload(1), {"iteration": 1}) == 1
        with AsyncCommitter(rs, retry=UNBOUNDED) as committer:
            swift_s3.stop()
            try:
                committer.submit(payload(2), {"iteration": 2})
                assert lease.heartbeat(timeout=0.3) is False  # store down: training goes on
                assert lease.heartbeat() is False  # and does not even wait, for heartbeat_backoff s
                lease.heartbeat_backoff = 0.0
                wait_until(lambda: committer.retries >= 2, what="retries against the stopped Swift")
                assert committer.last_committed is None
            finally:
                swift_s3.start()
            assert committer.flush(60) and committer.errors == []
            assert committer.last_committed == 2
        assert lease.heartbeat() is True
        assert rs.versions() == [1, 2]
        assert [rs.load(v).files for v in (1, 2)] == [payload(1), payload(2)]
