"""The tracker: what a run adds to run.json lands there whole and in TensorBoard as text; with the run in
the store (a directory, or S3 on loopback), rows reach the store during the run, a crash loses at most
the last interval, a resume appends, and ``python -m learner.tracking pull`` brings the files back for
TensorBoard; the driver's closing lines are commands that work from the submitting machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learner.tracking import Tracker, closing_lines, pull, run_folder
from learner.tracking import main as tracking_main
from rollout.job import JOB_CONFIG_VAR
from sim.configs import ConfigError
from store import RetryPolicy, StoreFolder, join_uri

REPO = Path(__file__).resolve().parents[2]
JOB_CONFIG = json.dumps({"metadata": {"job_submission_id": "raysubmit_X"}})  # what Ray gives a job's entrypoint
QUICK = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, total_timeout=5.0)


def test_provenance_goes_to_run_json_and_tensorboard_text(tmp_path):
    t = Tracker(tmp_path / "run", {"seed": 3}, seed=3, tensorboard=True)
    render = {"requested": "auto", "driver": {"used": "cpu", "reason": "no GPU here", "fallback": False}}
    t.provenance("render", render)
    t.provenance("learners", {"num_learners": 2, "backend": "gloo"})
    t.close()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["render"] == render and info["learners"]["backend"] == "gloo"
    assert info["seed"] == 3 and "git_commit" in info and "versions" in info  # what was there is kept
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if "tmp" in p.name) == []  # no temporary left
    ea = EventAccumulator(str(tmp_path / "run"))
    ea.Reload()
    tags = ea.Tags()["tensors"]
    assert "provenance/render/text_summary" in tags
    text = ea.Tensors("provenance/render/text_summary")[0].tensor_proto.string_val[0].decode()
    assert '"used": "cpu"' in text and "no GPU here" in text


# -- tracking files with the run in the store ------------------------------------------------------


@pytest.fixture(params=["local", "moto"])
def store_uri(request, tmp_path):
    """A store on a directory, or on moto's S3 server on loopback (each test under its own prefix)."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue("moto_s3").uri(f"trk-{uuid.uuid4().hex[:12]}")


def rows_in_store(uri: str, run: str) -> list[dict]:
    try:
        text = StoreFolder.of_run(uri, run, retry=QUICK).read("metrics.jsonl").decode()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    ea = EventAccumulator(str(folder))
    ea.Reload()
    return [(e.step, round(e.value, 6)) for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []


def test_credentials_in_a_store_uri_stay_out_of_the_run_files(tmp_path, monkeypatch):
    uri = "s3://b/runs?endpoint_override=10.0.0.5:9000&access_key=AKIAXYZ&secret_key=s3cr3t"
    monkeypatch.setattr(sys, "argv", ["learner.train", f"store.uri={uri}"])
    t = Tracker(
        tmp_path / "run", {"run": "r", "store": {"uri": uri, "keep": 3}, "tags": [uri]}, seed=0, tensorboard=False
    )
    t.close()
    shown = "s3://b/runs?endpoint_override=10.0.0.5:9000&access_key=***&secret_key=***"
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config == {"run": "r", "store": {"uri": shown, "keep": 3}, "tags": [shown]}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["argv"] == ["learner.train", f"store.uri={shown}"]
    for f in (tmp_path / "run").iterdir():
        assert b"s3cr3t" not in f.read_bytes() and b"AKIAXYZ" not in f.read_bytes(), f.name


def test_rows_logged_during_a_run_are_in_the_store_before_close(store_uri):
    live = StoreFolder.of_run(store_uri, "live")
    t = Tracker(None, {"run": "live"}, seed=0, tensorboard=False, store=live, sync_s=0.1)
    try:
        assert sorted(live.list()) == ["config.yaml", "metrics.jsonl", "run.json"]  # from the start
        for i in range(3):
            t.log(i, {"losses/x": i / 2})
        wait_for(lambda: len(rows_in_store(store_uri, "live")) == 3, "the first three rows in the store")
        t.log(3, {"losses/x": 1.5})
        wait_for(lambda: len(rows_in_store(store_uri, "live")) == 4, "the fourth row in the store")
        t.write("summary.json", '{"final": 1}')
    finally:
        t.close()
    rows = rows_in_store(store_uri, "live")
    assert [(r["step"], r["losses/x"]) for r in rows] == [(0, 0.0), (1, 0.5), (2, 1.0), (3, 1.5)]
    assert StoreFolder.of_run(store_uri, "live").read("summary.json") == b'{"final": 1}'


CRASHING_DRIVER = """
import os, sys
from learner.tracking import Tracker
from store import StoreFolder
t = Tracker(None, {"run": "crash"}, seed=0, store=StoreFolder.of_run(sys.argv[1], "crash"), sync_s=3600)
for i in range(5):
    t.log(i, {"losses/x": float(i)})
t.sync()
for i in range(5, 8):
    t.log(i, {"losses/x": float(i)})
os._exit(3)  # killed: no close(), no final upload
"""


def test_a_crash_after_a_sync_loses_only_the_last_interval_and_a_resume_appends(store_uri, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_DRIVER, store_uri], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert [r["step"] for r in rows_in_store(store_uri, "crash")] == [0, 1, 2, 3, 4]  # rows 5-7: the lost interval
    assert pull(join_uri(store_uri, "crash"), tmp_path / "crashed")
    assert scalars(tmp_path / "crashed", "losses/x") == [(i, float(i)) for i in range(5)]
    # the same run again (a resume): its earlier rows come back from the store and the new ones follow
    t = Tracker(None, {"run": "crash"}, seed=0, store=StoreFolder.of_run(store_uri, "crash"))
    t.log(8, {"losses/x": 8.0})
    t.close()
    assert [r["step"] for r in rows_in_store(store_uri, "crash")] == [0, 1, 2, 3, 4, 8]
    pull(join_uri(store_uri, "crash"), tmp_path / "resumed")
    assert sorted(scalars(tmp_path / "resumed", "losses/x")) == [*((i, float(i)) for i in range(5)), (8, 8.0)]


def test_pull_brings_metrics_provenance_and_events_back_for_tensorboard(store_uri, tmp_path, capsys):
    t = Tracker(None, {"run": "done", "seed": 7}, seed=7, store=StoreFolder.of_run(store_uri, "done"))
    for i in range(4):
        t.log(10 * i, {"charts/episodic_return": -1.0 + i / 4, "losses/il_loss": 2.0 - i / 2})
    t.provenance("learners", {"num_learners": 1})
    t.close()
    dest = tmp_path / "pulled"
    assert tracking_main(["pull", join_uri(store_uri, "done"), str(dest)]) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in dest.iterdir())
    events = [n for n in names if n.startswith("events.out.tfevents.")]
    assert len(events) == 1 and names == sorted(["config.yaml", "metrics.jsonl", "run.json", *events])
    assert f"tensorboard --logdir {dest}" in out and "copied" in out and "metrics.jsonl" in out
    assert json.loads((dest / "run.json").read_text())["learners"] == {"num_learners": 1}
    assert [json.loads(x)["step"] for x in (dest / "metrics.jsonl").read_text().splitlines()] == [0, 10, 20, 30]
    assert scalars(dest, "charts/episodic_return") == [(0, -1.0), (10, -0.75), (20, -0.5), (30, -0.25)]
    assert scalars(dest, "losses/il_loss") == [(0, 2.0), (10, 1.5), (20, 1.0), (30, 0.5)]
    # a run without tracking files is named, with what to check
    assert tracking_main(["pull", join_uri(store_uri, "nope"), str(tmp_path / "x")]) == 2
    assert "holds no tracking files" in capsys.readouterr().err
    # a report folder given as a store URI (python -m evaluation --out s3://...) comes back the same way
    report = StoreFolder(join_uri(store_uri, "evaluations", "e1"))
    report.write("report.md", b"# report\n")
    report.write("videos/p@1/clip.mp4", b"\x00\x01")
    assert tracking_main(["pull", join_uri(store_uri, "evaluations", "e1"), str(tmp_path / "e1")]) == 0
    assert (tmp_path / "e1" / "report.md").read_text() == "# report\n"
    assert (tmp_path / "e1" / "videos" / "p@1" / "clip.mp4").read_bytes() == b"\x00\x01"


def test_closing_lines_work_from_the_submitting_machine(tmp_path):
    uri = "s3://bucket/runs?endpoint_override=10.0.0.5:9000&scheme=http&access_key=AK&secret_key=SK"
    t = Tracker(tmp_path / "w", {"run": "r1"}, seed=0, tensorboard=False)
    t.store = StoreFolder.of_run(uri, "r1")  # as if kept in that store (no S3 behind this URI: no upload)
    lines = closing_lines(t, uri, "r1", "s3://bucket/runs/r1", ("r1-il", "val"))
    t.close()
    redacted = "s3://bucket/runs/{}?endpoint_override=10.0.0.5:9000&scheme=http&access_key=***&secret_key=***"
    assert (
        lines[0].startswith("done. checkpoints: s3://bucket/runs/r1; tracking files")
        and "s3://bucket/runs/r1/tracking" in lines[0]
    )
    assert lines[1] == (
        f"on your machine: python -m learner.tracking pull '{redacted.format('r1')}' tb/r1 && "
        "tensorboard --logdir tb/r1"
    )
    assert lines[2] == (
        f"compare IL and RL+IL: python -m evaluation --compare '{redacted.format('r1-il')}' '{redacted.format('r1')}' "
        "--suite val --out eval/r1-compare"
    )
    assert "SK" not in " ".join(lines) and "_ray_pkg_" not in " ".join(lines)
    local = Tracker(tmp_path / "out" / "r2", {"run": "r2"}, seed=0, tensorboard=False)
    lines = closing_lines(local, str(tmp_path / "store"), "r2", str(tmp_path / "store" / "r2"))
    local.close()
    assert lines == [
        f"done. TensorBoard: tensorboard --logdir {tmp_path / 'out' / 'r2'}; metrics: "
        f"{tmp_path / 'out' / 'r2' / 'metrics.jsonl'}; checkpoints: {tmp_path / 'store' / 'r2'}"
    ]


def test_training_in_a_job_refuses_a_relative_store_or_tracking_folder(tmp_path, monkeypatch):
    pkg = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_cd"
    pkg.mkdir(parents=True)
    monkeypatch.chdir(pkg)
    monkeypatch.setenv(JOB_CONFIG_VAR, JOB_CONFIG)
    with pytest.raises(ConfigError, match=r"store.uri='runs': .*Give --store an absolute path"):
        run_folder("", "runs", "r1")
    with pytest.raises(ConfigError, match=r"tracking.out='out': .*Leave tracking.out empty"):
        run_folder("out", str(tmp_path / "store"), "r1")
    folder, store = run_folder("", str(tmp_path / "store"), "r1")  # the default: with the run in the store
    assert store is not None and store.uri == str(tmp_path / "store" / "r1" / "tracking")
    assert not str(folder).startswith(str(pkg))
    assert run_folder(str(tmp_path / "logs"), "s3://bucket/runs", "r1") == (tmp_path / "logs" / "r1", None)
