"""Commit, layout, load, clean-up and retention of a run, and store URIs, names and meta, on every back end."""

from __future__ import annotations

import hashlib
import json
import logging
import time

import pytest

from store import (
    MANIFEST,
    CheckpointNotFound,
    CheckpointStore,
    CorruptCheckpoint,
    RetryPolicy,
    Reuse,
    StoreUnavailable,
)
from tests.s3_servers import free_port
from tests.store.helpers import payload

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


def test_a_listing_that_lags_never_makes_a_commit_write_into_an_existing_version(backend, monkeypatch):
    """A listing may miss a committed version (Swift's container listings do after a restart): a
    commit chose the number from the listing alone and wrote its files over the committed version's."""
    store = backend.store()
    rs = store.run("r")
    assert rs.commit(payload(1), {"i": 1}) == 1
    backend.raw.write("r/ckpt-00000002/CORRUPT.json", b"{}")  # a quarantined version: its number is taken too
    kept = {name: backend.raw.read(f"r/{name}") for name in backend.raw.names("r")}
    hide_all = lambda run: {}  # noqa: E731  (the listing of a run whose versions it has not caught up with)

    # The object that committed version 1 knows it without a listing.
    monkeypatch.setattr(store._backend, "list_run", hide_all)
    assert rs.commit(payload(2), {"i": 2}) == 3
    # Another writer (a resumed job) knows nothing: the back end must refuse the taken numbers.
    other = backend.store()
    monkeypatch.setattr(other._backend, "list_run", hide_all)
    assert other.run("r").commit(payload(3), {"i": 3}) == 4
    monkeypatch.undo()

    assert {name: backend.raw.read(f"r/{name}") for name in kept} == kept
    assert rs.versions() == [1, 3, 4]
    assert [rs.load(v).files for v in (1, 3, 4)] == [payload(1), payload(2), payload(3)]


def test_a_reused_file_is_taken_from_the_version_that_holds_it_never_serialised_again(backend, caplog):
    big = bytes(range(256)) * 400
    made = []

    def make(data: bytes):
        return lambda: made.append(len(data)) or data

    store = backend.store()
    rs = store.run("r")
    assert rs.commit({"big": big, "small": b"1"}, {"i": 1}) == 1
    with caplog.at_level(logging.INFO, logger="store"):
        assert rs.commit({"big": Reuse.of(big, make(big)), "small": b"2"}, {"i": 2}) == 2
    assert made == []  # taken from version 1 (a hard link; a server-side copy on S3), not made again
    assert f"committed version 2 (2 files, {len(big) + 1} bytes, {len(big)} of them taken from earlier" in caplog.text
    manifests = [json.loads(backend.raw.read(f"r/ckpt-0000000{v}/{MANIFEST}")) for v in (1, 2)]
    assert (
        manifests[1]["files"]["big"]
        == manifests[0]["files"]["big"]
        == {
            "size": len(big),
            "sha256": hashlib.sha256(big).hexdigest(),
        }
    )
    if backend.kind == "local":  # one file on disk, two names
        paths = [backend.raw.root / f"r/ckpt-0000000{v}/big" for v in (1, 2)]
        assert paths[0].stat().st_ino == paths[1].stat().st_ino
    assert backend.raw.names("r/ckpt-00000002") == ["MANIFEST.json", "big", "small"]  # no temporary left
    with rs.acquire("trainer"):
        assert rs.retain(keep_last=1, keep_best=0) == [1]
    assert rs.load(2).files == {"big": big, "small": b"2"}  # whole after its source version went

    # Under another name, from the newest version that has it; new bytes are made once.
    other = bytes(1000)
    assert rs.commit({"copy": Reuse.of(big, make(big)), "new": Reuse.of(other, make(other))}, {}) == 3
    assert made == [len(other)]
    assert rs.load(3).files == {"copy": big, "new": other}

    # A RunStore that has not read a version takes nothing from it: it makes the bytes.
    fresh = backend.store().run("r")
    assert fresh.commit({"big": Reuse.of(big, make(big))}, {}) == 4
    assert made == [len(other), len(big)]
    fresh.load(4)
    assert fresh.commit({"big": Reuse.of(big, make(big))}, {}) == 5 and len(made) == 2

    # A file gone from the version that listed it (removed around the store): an older one, else make().
    backend.raw.delete("r/ckpt-00000005/big")
    assert fresh.commit({"big": Reuse.of(big, make(big))}, {}) == 6 and len(made) == 2  # from version 4
    backend.raw.delete("r/ckpt-00000004/big")
    backend.raw.delete("r/ckpt-00000006/big")
    assert fresh.commit({"big": Reuse.of(big, make(big))}, {}) == 7 and len(made) == 3
    assert fresh.load(7).files == {"big": big}

    # make() must give the bytes it was described by; nothing is committed otherwise.
    with pytest.raises(ValueError, match="do not match"):
        rs.commit({"x": Reuse(10, hashlib.sha256(b"a" * 10).hexdigest(), lambda: b"b" * 10)}, {})
    with pytest.raises(ValueError, match="needs a size, a sha256"):
        rs.commit({"x": Reuse(10, "not-a-digest", lambda: b"")}, {})
    assert rs.versions() == [2, 3, 4, 5, 6, 7]


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
    with caplog.at_level(logging.WARNING, logger="store"):
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
    with caplog.at_level(logging.WARNING, logger="store"):
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


def flip_a_byte(backend, rel: str) -> None:
    data = backend.raw.read(rel)
    backend.raw.write(rel, data[:100] + bytes([data[100] ^ 0x01]) + data[101:])


def test_retain_counts_only_intact_versions_and_quarantines_a_corrupt_one(backend, caplog):
    """A flipped byte in version 6: resuming falls back to 5, and retention (last 3) then keeps 5, 4
    and 3, never 6, which it moves aside (its number stays taken) and deletes once it is older than
    every version kept."""
    rs = backend.store().run("r")
    for i in range(1, 7):
        rs.commit(payload(i), {"iteration": i})
    flip_a_byte(backend, "r/ckpt-00000006/policy.safetensors")
    flip_a_byte(backend, "r/ckpt-00000001/policy.safetensors")  # outside the window: deleted, not quarantined
    resumed = backend.store().run("r")  # a new process knows nothing of the versions
    with caplog.at_level(logging.WARNING, logger="store"):
        assert resumed.load_latest().version == 5
        caplog.clear()
        with resumed.acquire("trainer"):
            assert resumed.retain(keep_last=3) == [1, 2]
            assert resumed.versions() == [3, 4, 5]
            assert [resumed.load(v).files for v in (3, 4, 5)] == [payload(3), payload(4), payload(5)]
            [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert "version 6" in warning and "'policy.safetensors' has sha256" in warning and "CORRUPT.json" in warning
            assert backend.raw.names("r/ckpt-00000006") == ["CORRUPT.json", "counters.json", "policy.safetensors"]
            record = json.loads(backend.raw.read("r/ckpt-00000006/CORRUPT.json"))
            assert (record["version"], record["file"]) == (6, "policy.safetensors")
            assert "(changed bytes)" in record["problem"]
            assert json.loads(record["manifest"])["meta"] == {"iteration": 6}
            assert resumed.cleanup() == []  # a quarantined version is no half-written one
            assert backend.raw.exists("r/ckpt-00000006/CORRUPT.json")
            with pytest.raises(CheckpointNotFound, match="no committed version 6"):
                resumed.load(6)
            assert resumed.commit(payload(7), {"iteration": 7}) == 7  # the number 6 is never given again
            assert resumed.commit(payload(8), {"iteration": 8}) == 8
            assert resumed.retain(keep_last=3) == [3, 4]  # kept: 5, 7, 8; version 6 is newer than 5
            assert backend.raw.exists("r/ckpt-00000006/CORRUPT.json")
            assert resumed.commit(payload(9), {"iteration": 9}) == 9
            assert resumed.retain(keep_last=3) == [5, 6]
        assert resumed.versions() == [7, 8, 9]
        assert [n for n in backend.raw.names("r") if n.startswith("ckpt-00000006")] == []
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [warning]


def test_retain_takes_the_best_intact_version_when_the_best_is_corrupt(backend):
    rs = backend.store().run("r")
    for i, cr in enumerate([0.3, 0.1, 0.2, 0.5, 0.6], start=1):  # best by "min": 2, then 3
        rs.commit(payload(i), {"iteration": i, "metrics": {"eval/cr": cr}})
    flip_a_byte(backend, "r/ckpt-00000002/policy.safetensors")
    rs = backend.store().run("r")
    with rs.acquire("trainer"):
        assert rs.retain(keep_last=2, keep_best=1, metric="eval/cr", mode="min") == [1]
    assert rs.versions() == [3, 4, 5]
    assert backend.raw.names("r/ckpt-00000002") == ["CORRUPT.json", "counters.json", "policy.safetensors"]


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


def test_missing_checkpoint_is_not_retried_but_an_unreachable_store_is(tmp_path):
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.01)
    retried: list[int] = []
    rs = CheckpointStore(tmp_path, retry=policy, on_retry=lambda attempt, exc: retried.append(attempt)).run("r")
    with pytest.raises(CheckpointNotFound):
        rs.load(1)
    assert retried == []  # "not there" is an answer, not an outage
    nobody = f"127.0.0.1:{free_port()}"  # a port nothing listens on: connection refused
    uri = f"s3://bucket/x?endpoint_override={nobody}&scheme=http&access_key=k&secret_key=s&connect_timeout=1"
    down = CheckpointStore(uri, retry=policy, on_retry=lambda attempt, exc: retried.append(attempt)).run("r")
    with pytest.raises(StoreUnavailable, match="gave up after 3 attempts"):
        down.load(1)
    assert retried == [1, 2]


# --------------------------------------------------------------------------------------------------
# References: run, run@latest, run@<version>


def test_refs_resolve_to_committed_versions_without_falling_back(tmp_path):
    store = CheckpointStore(tmp_path)
    rs = store.run("r")
    for i in range(3):
        rs.commit(payload(i), {"iteration": i})
    (tmp_path / "r" / "ckpt-00000004").mkdir()  # a half-written version is never meant
    assert [rs.resolve(), rs.resolve(2)] == [3, 2]
    assert store.resolve("r")[1] == store.resolve("r@latest")[1] == 3
    ckpt = store.load("r@2")
    assert (ckpt.run, ckpt.version, ckpt.files, ckpt.meta) == ("r", 2, payload(1), {"iteration": 1})
    manifest = (tmp_path / "r" / "ckpt-00000002" / MANIFEST).read_bytes()
    assert ckpt.manifest_sha256 == hashlib.sha256(manifest).hexdigest()
    with pytest.raises(CheckpointNotFound, match=r"no committed version 4: .* \(committed versions: 1, 2, 3\)"):
        store.load("r@4")
    with pytest.raises(CheckpointNotFound, match="run 'empty' has no committed checkpoint in"):
        store.load("empty@latest")
    with pytest.raises(ValueError, match=r"checkpoint 'r@x': version 'x' is neither .* \(expected <run>"):
        store.load("r@x")
    with pytest.raises(ValueError, match="run name"):
        store.load("../r@1")
    # @latest means the newest committed version: corrupt, it is refused, not swapped for an older one
    (tmp_path / "r" / "ckpt-00000003" / "policy.safetensors").write_bytes(b"changed")
    with pytest.raises(CorruptCheckpoint, match="version 3"):
        store.load("r@latest")
    assert rs.load_latest().version == 2  # resuming is what falls back


def test_store_logs_come_from_store_loggers(tmp_path, caplog):
    rs = CheckpointStore(tmp_path).run("r")
    with caplog.at_level(logging.INFO, logger="store"):
        rs.commit(payload(1), {"iteration": 1})
        with rs.acquire("trainer"):
            rs.retain(keep_last=1)
    assert caplog.records and all(r.name.startswith("store.") for r in caplog.records)
    assert any("committed version 1" in r.getMessage() for r in caplog.records)
