"""Plain files beside the checkpoints (store.folders): written whole, listed and read back through the
store's back ends, never taken for a version, never removed by cleanup or retention; a local folder
mirrored into the store; URIs joined and split with an S3 query kept at the end."""

from __future__ import annotations

import os

import pytest

from store import TRACKING, FolderMirror, OutputFolder, StoreFolder, join_uri, scratch_folder, split_uri
from store.folders import check_path
from tests.store.helpers import FAST, payload


def test_files_beside_the_versions_are_never_versions(backend):
    store = backend.store()
    rs = store.run("r")
    with rs.acquire("me"):
        v1 = rs.commit(payload(1), {"iteration": 1})
        folder = StoreFolder.of_run(backend.uri, "r", retry=FAST)
        folder.write("metrics.jsonl", b'{"step": 1}\n')
        folder.write("sub/events.out.tfevents.1.host.2.0", b"\x00" * 10)
        assert folder.list() == {"metrics.jsonl": 12, "sub/events.out.tfevents.1.host.2.0": 10}
        assert backend.raw.names(f"r/{TRACKING}") == ["metrics.jsonl", "sub/events.out.tfevents.1.host.2.0"]
        assert rs.versions() == [v1]
        assert rs.cleanup() == []  # a folder without a manifest is removed; the tracking folder is none
        v2 = rs.commit(payload(2), {"iteration": 2})
        v3 = rs.commit(payload(3), {"iteration": 3})
        assert rs.retain(keep_last=1, keep_best=0) == [v1, v2]
        assert rs.versions() == [v3]
    assert folder.read("metrics.jsonl") == b'{"step": 1}\n'  # still there, whole
    assert folder.list() == {"metrics.jsonl": 12, "sub/events.out.tfevents.1.host.2.0": 10}
    folder.write("metrics.jsonl", b'{"step": 1}\n{"step": 2}\n')  # replaced whole (S3 has no append)
    assert folder.read("metrics.jsonl") == b'{"step": 1}\n{"step": 2}\n'
    with pytest.raises(FileNotFoundError):
        folder.read("summary.json")


def test_paths_that_could_pass_for_a_version_or_a_lease_are_refused(tmp_path):
    folder = StoreFolder(tmp_path / "store", "r/tracking")
    for bad, why in [
        ("ckpt-00000001/x", "checkpoint version's"),
        ("a/ckpt-00000012", "checkpoint version's"),
        ("LOCK.json", "lease's"),
        ("../x", "not allowed"),
        ("/abs", "not allowed"),
        (".hidden", "not allowed"),
        ("a//b", "not allowed"),
    ]:
        with pytest.raises(ValueError, match=why):
            folder.write(bad, b"x")
    with pytest.raises(ValueError, match="checkpoint version's"):
        StoreFolder(tmp_path / "store", "r/ckpt-00000001")
    assert check_path("videos/tiny@3/clip-1.mp4") == "videos/tiny@3/clip-1.mp4"  # labels like run@version
    assert not (tmp_path / "store").exists()  # nothing was written


def test_a_local_writers_temporaries_are_not_listed(tmp_path):
    folder = StoreFolder(tmp_path / "store", "r/tracking")
    folder.write("run.json", b"{}")
    (tmp_path / "store" / "r" / "tracking" / ".run.json.tmp-1234").write_bytes(b"half")  # a crashed write
    assert folder.list() == {"run.json": 2}
    assert folder.local_path == tmp_path / "store" / "r" / "tracking"


def test_mirror_pushes_what_changed_and_pulls_it_back(backend, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    remote = StoreFolder(join_uri(backend.uri, "evaluations", "x"), retry=FAST)
    mirror = FolderMirror(local, remote)
    (local / "a.txt").write_text("one")
    (local / "videos").mkdir()
    (local / "videos" / "b.mp4").write_bytes(b"\x01\x02")
    (local / ".a.txt.123.tmp").write_text("temporary")  # never uploaded
    assert mirror.push() == ["a.txt", "videos/b.mp4"]
    assert mirror.push() == []  # nothing changed
    with open(local / "a.txt", "a") as f:
        f.write(" two")
    os.utime(local / "a.txt", ns=(1, 1))  # a change the size shows even with a clock that did not move
    assert mirror.push() == ["a.txt"]
    assert remote.list() == {"a.txt": 7, "videos/b.mp4": 2}
    back = FolderMirror(tmp_path / "back", remote)
    assert back.pull() == {"a.txt": 7, "videos/b.mp4": 2}
    assert (tmp_path / "back" / "a.txt").read_text() == "one two"
    assert back.push() == []  # what was pulled is what the store has


def test_uris_keep_their_query_at_the_end():
    q = "?endpoint_override=127.0.0.1:9000&scheme=http"
    assert join_uri("s3://b/p" + q, "run", "tracking") == "s3://b/p/run/tracking" + q
    assert join_uri("s3://b" + q, "run") == "s3://b/run" + q
    assert join_uri("/data/store/", "run") == "/data/store/run"
    assert join_uri("runs", "a") == "runs/a"
    assert split_uri("s3://b/p/run" + q) == ("s3://b/p" + q, "run")
    assert split_uri("/data/store/run/") == ("/data/store", "run")
    assert split_uri("file:///data/run") == ("file:///data", "run")
    for bad in ("run", "s3://b", "file:///"):
        with pytest.raises(ValueError, match="expected <store>/<name>"):
            split_uri(bad)


def test_output_folder_writes_a_store_uri_through_a_scratch_copy(backend, tmp_path):
    # a plain path is written in place (below); a URI, file:// included, through the scratch copy
    base = f"file://{backend.uri}" if backend.kind == "local" else backend.uri
    uri = join_uri(base, "evaluations", "e1")
    out = OutputFolder(uri)
    assert out.path == scratch_folder(uri) and out.path.is_dir()
    (out.path / "report.md").write_text("# report\n")
    assert out.sync() == ["report.md"]
    assert StoreFolder(uri).read("report.md") == b"# report\n"
    again = OutputFolder(uri, resume=True)  # a rerun reads its earlier results back
    assert (again.path / "report.md").read_text() == "# report\n" and again.sync() == []
    plain = OutputFolder(str(tmp_path / "plain"))
    assert plain.path == tmp_path / "plain" and plain.path.is_dir() and plain.sync() == []
