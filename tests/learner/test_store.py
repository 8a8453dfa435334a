"""The checkpoint store against real back ends: a local directory, moto's S3 server and (slow) Swift.

Corruption, half-written folders and stale leases are made by hand, around the store, with plain
file operations or boto3; the store itself is never mocked.
"""

from __future__ import annotations

import hashlib
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
from pathlib import Path

import numpy as np
import pytest
import torch

from learner.store import (
    LOCK,
    MANIFEST,
    AsyncCommitter,
    CheckpointNotFound,
    CheckpointStore,
    CorruptCheckpoint,
    LeaseLost,
    RetryPolicy,
    RunLocked,
    StoreUnavailable,
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    payload_to_state,
    retry,
    state_to_payload,
    tensors_to_bytes,
)
from tests.s3_servers import *  # noqa: F403  (the fixtures moto_s3 and swift_s3)
from tests.s3_servers import REPO, MotoServer, S3Server

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, total_timeout=5.0)
UNBOUNDED = RetryPolicy(max_attempts=None, base_delay=0.02, max_delay=0.2, total_timeout=None)


def payload(i: int) -> dict[str, bytes]:
    return {"policy.safetensors": bytes([i % 256]) * (1000 + i), "counters.json": json_bytes({"iteration": i})}


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# --------------------------------------------------------------------------------------------------
# Back ends: the same tests run on a directory, on moto, and (slow) on Swift.


class Raw:
    """The store's objects, reached around the store (a directory, or boto3 on the bucket)."""

    def __init__(self, root: Path | None = None, server: S3Server | None = None, prefix: str = ""):
        self.root, self.server, self.prefix = root, server, prefix
        self.client = server.client() if server else None

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def read(self, rel: str) -> bytes:
        if self.root is not None:
            return (self.root / rel).read_bytes()
        return self.client.get_object(Bucket=self.server.bucket, Key=self._key(rel))["Body"].read()

    def write(self, rel: str, data: bytes) -> None:
        if self.root is not None:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_bytes(data)
        else:
            self.client.put_object(Bucket=self.server.bucket, Key=self._key(rel), Body=data)

    def names(self, rel: str) -> list[str]:
        """Every file below ``rel``, relative to it."""
        if self.root is not None:
            base = self.root / rel
            return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.exists() else []
        resp = self.client.list_objects_v2(Bucket=self.server.bucket, Prefix=self._key(rel) + "/")
        return sorted(
            o["Key"][len(self._key(rel)) + 1 :] for o in resp.get("Contents", []) if not o["Key"].endswith("/")
        )

    def exists(self, rel: str) -> bool:
        parent, _, name = rel.rpartition("/")
        return name in self.names(parent)


class Backend:
    def __init__(self, kind: str, uri: str, raw: Raw):
        self.kind, self.uri, self.raw = kind, uri, raw

    def store(self, retry: RetryPolicy = FAST) -> CheckpointStore:
        return CheckpointStore(self.uri, retry=retry)


@pytest.fixture(params=["local", "moto", pytest.param("swift", marks=pytest.mark.slow)])
def backend(request, tmp_path) -> Backend:
    if request.param == "local":
        root = tmp_path / "store"
        return Backend("local", str(root), Raw(root=root))
    server = request.getfixturevalue(f"{request.param}_s3")
    prefix = f"t-{uuid.uuid4().hex[:12]}"  # one session-wide bucket: each test under its own prefix
    return Backend(request.param, server.uri(prefix), Raw(server=server, prefix=prefix))


# --------------------------------------------------------------------------------------------------
# Commit, layout, load


def test_commit_writes_files_then_a_manifest_that_lists_them(backend):
    rs = backend.store().run("run-a")
    files = {"policy.safetensors": b"\x00\x01weights", "config.json": b'{"lr": 0.001}'}
    meta = {"iteration": 7, "env_steps": 5600, "metrics": {"eval/cr": 0.25}}
    before = time.time()
    assert rs.commit(files, meta) == 1
    assert backend.raw.names("run-a") == [
        "ckpt-00000001/MANIFEST.json",
        "ckpt-00000001/config.json",
        "ckpt-00000001/policy.safetensors",
    ]  # no temporary files left behind
    manifest = json.loads(backend.raw.read(f"run-a/ckpt-00000001/{MANIFEST}"))
    assert manifest["format_version"] == 1
    assert (manifest["run"], manifest["version"]) == ("run-a", 1)
    assert before <= manifest["wall_time"] <= time.time()
    assert manifest["meta"] == meta
    assert manifest["files"] == {
        "policy.safetensors": {"size": 9, "sha256": hashlib.sha256(b"\x00\x01weights").hexdigest()},
        "config.json": {"size": 13, "sha256": hashlib.sha256(b'{"lr": 0.001}').hexdigest()},
    }
    assert rs.commit(files, meta) == 2
    assert rs.versions() == [1, 2]
    assert rs.latest() == 2


def test_load_returns_exact_bytes_and_meta(backend):
    rs = backend.store().run("r")
    for i in range(3):
        rs.commit(payload(i), {"iteration": i})
    ckpt = rs.load(2)
    assert (ckpt.run, ckpt.version) == ("r", 2)
    assert ckpt.files == payload(1)
    assert ckpt.meta == {"iteration": 1}
    assert rs.load_latest().files == payload(2)
    with pytest.raises(CheckpointNotFound, match="no committed version 9"):
        rs.load(9)


def test_empty_run_has_no_versions(backend):
    rs = backend.store().run("nothing-here")
    assert rs.versions() == []
    assert rs.latest() is None
    assert rs.load_latest() is None


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda b: b[:100] + bytes([b[100] ^ 0x01]) + b[101:], "sha256"),
        (lambda b: b[:-1], "has 1000 bytes, the manifest says 1001"),
    ],
    ids=["flipped-byte", "truncated"],
)
def test_damaged_file_is_caught_by_the_manifest(backend, damage, problem):
    rs = backend.store().run("r")
    rs.commit(payload(1), {"iteration": 1})
    rel = "r/ckpt-00000001/policy.safetensors"
    backend.raw.write(rel, damage(backend.raw.read(rel)))
    with pytest.raises(CorruptCheckpoint, match=problem) as info:
        rs.load(1)
    assert info.value.file == "policy.safetensors"
    assert "run 'r' version 1" in str(info.value)


def test_load_latest_skips_a_corrupt_checkpoint_with_a_warning(backend, caplog):
    rs = backend.store().run("r")
    for i in range(3):
        rs.commit(payload(i), {"iteration": i})
    rel = "r/ckpt-00000003/counters.json"
    backend.raw.write(rel, b"X" + backend.raw.read(rel)[1:])
    with caplog.at_level(logging.WARNING, logger="learner.store"):
        ckpt = rs.load_latest()
    assert ckpt.version == 2 and ckpt.meta == {"iteration": 1}
    assert any("version 3" in r.getMessage() and "counters.json" in r.getMessage() for r in caplog.records)


def test_half_written_folders_are_invisible_skipped_and_cleaned_up(backend, caplog):
    rs = backend.store().run("r")
    rs.commit(payload(1), {"iteration": 1})
    rs.commit(payload(2), {"iteration": 2})
    # A writer that died after its files and before its manifest.
    backend.raw.write("r/ckpt-00000003/policy.safetensors", b"partial")
    assert rs.versions() == [1, 2]
    assert rs.latest() == 2
    assert rs.load_latest().version == 2
    with pytest.raises(CheckpointNotFound):
        rs.load(3)
    assert rs.commit(payload(4), {"iteration": 4}) == 4  # numbering skips past the debris
    # A manifest that does not parse is not a valid commit either.
    backend.raw.write("r/ckpt-00000005/policy.safetensors", b"x")
    backend.raw.write(f"r/ckpt-00000005/{MANIFEST}", b"{not json")
    with caplog.at_level(logging.WARNING, logger="learner.store"):
        assert rs.load_latest().version == 4
    with pytest.raises(RuntimeError, match="hold the run lease"):
        rs.cleanup()
    with rs.acquire("cleaner"):
        assert rs.cleanup() == [3, 5]
    assert rs.versions() == [1, 2, 4]
    assert [n.split("/")[0] for n in backend.raw.names("r") if n.startswith("ckpt-")] == ["ckpt-00000001"] * 3 + [
        "ckpt-00000002"
    ] * 3 + ["ckpt-00000004"] * 3
    assert [rs.load(v).meta["iteration"] for v in rs.versions()] == [1, 2, 4]


def test_retain_keeps_the_last_n_and_the_best_by_metric(backend):
    rs = backend.store().run("r")
    scores = [0.5, 0.1, 0.4, 0.3, 0.6, 0.7]  # version 2 is the best by "min"
    for i, cr in enumerate(scores, start=1):
        rs.commit(payload(i), {"iteration": i, "metrics": {"eval/cr": cr}})
    rs.commit(payload(7), {"iteration": 7})  # no metrics: never "best"
    with pytest.raises(RuntimeError, match="hold the run lease"):
        rs.retain(keep_last=2)
    with rs.acquire("trainer"):
        assert rs.retain(keep_last=2, keep_best=1, metric="eval/cr", mode="min") == [1, 3, 4, 5]
        assert rs.versions() == [2, 6, 7]
        assert not any(n.startswith(("ckpt-00000001", "ckpt-00000003")) for n in backend.raw.names("r"))
        assert rs.retain(keep_last=1, keep_best=1, metric="eval/cr", mode="max") == [2]
        assert rs.versions() == [6, 7]
        assert rs.retain(keep_last=1, keep_best=0) == [6]
    assert rs.load_latest().meta == {"iteration": 7}


# --------------------------------------------------------------------------------------------------
# The run lease


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
    with caplog.at_level(logging.WARNING, logger="learner.store"):
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
from learner.store import CheckpointStore
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
    with caplog.at_level(logging.WARNING, logger="learner.store"):
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


# --------------------------------------------------------------------------------------------------
# Names, URIs, meta


@pytest.mark.parametrize("name", ["../x", "/abs", "a/b", "", "x" * 129, "..", "a..b", ".hidden", "-x", "a b", "ü", 5])
def test_bad_run_and_file_names_are_rejected(tmp_path, name):
    store = CheckpointStore(tmp_path)
    with pytest.raises(ValueError, match="name"):
        store.run(name)
    with pytest.raises(ValueError, match="name"):
        store.run("ok").commit({name: b"x"}, {})


def test_good_names_and_the_reserved_manifest_name(tmp_path):
    rs = CheckpointStore(tmp_path).run("A.b_c-1")
    assert rs.commit({"x" * 128: b"1", "policy.safetensors": b"2"}, {}) == 1
    with pytest.raises(ValueError, match="reserved"):
        rs.commit({MANIFEST: b"{}"}, {})
    assert rs.versions() == [1]


@pytest.mark.parametrize(
    "uri, message",
    [
        ("", "empty"),
        ("gs://bucket/x", "unsupported scheme"),
        ("s3://bucket/x?bogus=1", "unknown query keys"),
        ("s3://Bad_Bucket/x", "not a valid S3 bucket"),
        ("file://otherhost/x", "must be local"),
    ],
)
def test_bad_uris_are_rejected(uri, message):
    with pytest.raises(ValueError, match=message):
        CheckpointStore(uri)


def test_file_uri_and_plain_path_are_the_same_store(tmp_path):
    CheckpointStore(f"file://{tmp_path}").run("r").commit(payload(1), {"iteration": 1})
    assert CheckpointStore(tmp_path).run("r").load(1).files == payload(1)


def test_meta_must_be_json_and_counters_valid(tmp_path):
    rs = CheckpointStore(tmp_path).run("r")
    with pytest.raises(ValueError, match="JSON"):
        rs.commit(payload(1), {"x": object()})
    with pytest.raises(ValueError, match="iteration"):
        rs.commit(payload(1), {"iteration": -1})
    with pytest.raises(ValueError, match="bytes"):
        rs.commit({"a": "not bytes"}, {})
    assert rs.versions() == []


def test_missing_checkpoint_is_not_retried(tmp_path):
    rs = CheckpointStore(tmp_path, retry=RetryPolicy(max_attempts=3, base_delay=30, max_delay=30)).run("r")
    start = time.monotonic()
    with pytest.raises(CheckpointNotFound):
        rs.load(1)
    assert time.monotonic() - start < 10  # a retry would have slept 15-30 s


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
        with caplog.at_level(logging.WARNING, logger="learner.store"):
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


# --------------------------------------------------------------------------------------------------
# S3 specifics


def test_moto_honours_conditional_puts(moto_s3):
    """The lease relies on If-None-Match: * (create-only) and If-Match (takeover); moto does both."""
    from botocore.exceptions import ClientError

    client, key = moto_s3.client(), f"probe-{uuid.uuid4().hex}"
    first = client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    second = client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=moto_s3.bucket, Key=key, Body=b"4", IfMatch=first["ETag"])
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=moto_s3.bucket, Key=key)["ETag"] == second["ETag"]


@pytest.mark.slow
def test_swift_refuses_if_match_puts_so_the_lease_falls_back(swift_s3):
    """Swift's s3api: If-None-Match: * is honoured, If-Match on PUT answers 501, on DELETE it works."""
    from botocore.exceptions import ClientError

    client, key = swift_s3.client(), f"probe-{uuid.uuid4().hex}"
    first = client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=swift_s3.bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
    with pytest.raises(ClientError) as info:
        client.delete_object(Bucket=swift_s3.bucket, Key=key, IfMatch='"0123"')
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_s3_settings_from_the_standard_environment(moto_s3, monkeypatch):
    for name, value in moto_s3.env().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{moto_s3.bucket}/t-{uuid.uuid4().hex[:12]}"  # endpoint and credentials from the environment
    rs = CheckpointStore(uri, retry=FAST).run("r")
    assert rs.commit(payload(1), {"iteration": 1}) == 1
    assert rs.load(1).files == payload(1)
    assert CheckpointStore(moto_s3.uri(uri.rsplit("/", 1)[1], credentials=False)).run("r").versions() == [1]


# --------------------------------------------------------------------------------------------------
# Payloads without pickle


def test_tensors_round_trip_through_safetensors():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensors = {
        "w": torch.randn(5, 3),
        "half": torch.randn(4).to(torch.bfloat16),
        "ids": torch.tensor([1, 2, 3], dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "scalar": torch.tensor(3.0),
        "empty": torch.zeros(0, 2),
        "transposed": base.t(),  # not contiguous
        "tied_a": base,
        "tied_b": base,  # shares memory with tied_a
    }
    back = bytes_to_tensors(tensors_to_bytes(tensors))
    assert back.keys() == tensors.keys()
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape and torch.equal(back[k], t), k
    with pytest.raises(ValueError, match="safetensors"):
        bytes_to_tensors(b"definitely not safetensors")


def test_json_payload_round_trip():
    obj = {"lr": 3e-4, "schedule": [1, 2, 3], "name": "rad", "nan": float("nan"), "none": None}
    back = from_json_bytes(json_bytes(obj))
    assert back.pop("nan") != back.get("nan", 0)  # NaN survives as NaN
    obj.pop("nan")
    assert back == obj
    with pytest.raises(ValueError, match="JSON"):
        from_json_bytes(b"\xff{")


def test_nested_state_round_trip_without_pickle():
    import random

    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}, 1: {}},
        "betas": (0.9, 0.999),
        "nested": [{"a": None, "b": True}, (1, "two", 3.5)],
        "__tuple__": "a key that looks like a marker",
        (1, 2): "tuple key",
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "np_scalar": np.float64(0.5),
        "python_rng": random.Random(7).getstate(),
        "torch_rng": torch.get_rng_state(),
    }
    tensors, tree = state_to_payload(state)
    assert set(tensors) >= {"state/0/step", "state/0/exp_avg", "array", "torch_rng"}
    back = payload_to_state(bytes_to_tensors(tensors_to_bytes(tensors)), from_json_bytes(json_bytes(tree)))
    assert back["betas"] == (0.9, 0.999) and isinstance(back["betas"], tuple)
    assert back["state"][1] == {} and torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert back["nested"] == [{"a": None, "b": True}, (1, "two", 3.5)]
    assert back["__tuple__"] == state["__tuple__"] and back[(1, 2)] == "tuple key"
    assert back["array"].dtype == np.int32 and np.array_equal(back["array"], state["array"])
    assert back["np_scalar"] == 0.5
    rng = random.Random()
    rng.setstate(back["python_rng"])
    assert rng.random() == random.Random(7).random()
    assert torch.equal(back["torch_rng"], state["torch_rng"])
    with pytest.raises(TypeError, match=r"at 'a/b'.*without pickle"):
        state_to_payload({"a": {"b": object()}})


def _make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_adam_state_round_trip_resumes_bit_identically(tmp_path):
    x, y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.randn(16, 2)

    def step(model, opt):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    model = _make_model(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.99), weight_decay=1e-3)
    for _ in range(3):
        step(model, opt)
    opt_tensors, opt_tree = optimizer_state_to_payload(opt.state_dict())
    rs = CheckpointStore(tmp_path).run("adam")
    version = rs.commit(
        {
            "policy.safetensors": tensors_to_bytes(model.state_dict()),
            "optimizer.safetensors": tensors_to_bytes(opt_tensors),
            "optimizer.json": json_bytes(opt_tree),
        },
        {"iteration": 3},
    )

    ckpt = rs.load(version)
    resumed = _make_model(123)  # different initial weights: everything must come from the checkpoint
    resumed.load_state_dict(bytes_to_tensors(ckpt.files["policy.safetensors"]))
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=0.5)  # wrong hyperparameters, on purpose
    resumed_opt.load_state_dict(
        optimizer_state_from_payload(
            bytes_to_tensors(ckpt.files["optimizer.safetensors"]), from_json_bytes(ckpt.files["optimizer.json"])
        )
    )
    group = resumed_opt.param_groups[0]
    assert group["lr"] == 1e-2 and group["betas"] == (0.8, 0.99) and isinstance(group["betas"], tuple)
    assert group["weight_decay"] == 1e-3
    for p, q in zip(model.parameters(), resumed.parameters()):
        a, b = opt.state[p], resumed_opt.state[q]
        assert torch.equal(a["step"], b["step"]) and b["step"].item() == 3
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    for _ in range(2):
        step(model, opt)
        step(resumed, resumed_opt)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(TypeError, match="optimizer"):
        optimizer_state_to_payload({"not": "an optimizer state"})
