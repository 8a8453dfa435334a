"""Where ``python -m evaluation`` writes: ``--out`` as a store URI (S3 on loopback) puts the whole report
in the store, videos included, and the closing lines name the store without credentials; inside a Ray
job a relative ``--out`` is refused before anything is loaded or written."""

from __future__ import annotations

import json
import uuid

import pytest

from evaluation.evaluate import main
from learner.tracking import main as tracking_main
from rollout.job import JOB_CONFIG_VAR
from scenarios import save
from store import StoreFolder
from tests.envs.handmade import straight_scenario


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("out_suite")
    save(straight_scenario(d, sid="plain", horizon=8), d / "plain.json")
    return d


def test_out_as_a_store_uri_writes_the_report_into_the_store(suite, moto_s3, tmp_path, capsys):
    uri = moto_s3.uri(f"ev-{uuid.uuid4().hex[:12]}/evaluations/e1")
    args = ["--policy", "expert", "--suite", str(suite), "--out", uri, "num_actors=0", "videos=1", "progress=false",
            "env.resolution=[32,16]"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    files = StoreFolder(uri).list()
    for name in ("metrics.json", "scenarios.csv", "report.md", "metrics.png", "config.yaml", "videos/expert/plain.mp4"):
        assert name in files, sorted(files)
    where = StoreFolder(uri).uri  # s3://bucket/key, no query
    assert f"{where}/metrics.json" in out and f"video: {where}/videos/expert/plain.mp4" in out
    assert "secret_key" not in out and "endpoint_override" not in out  # the URI shown without its query
    metrics = json.loads(StoreFolder(uri).read("metrics.json"))
    assert metrics["order"] == ["expert"] and metrics["scenarios"] == ["plain"]
    # and it comes back with the same command as a run's tracking files
    assert tracking_main(["pull", uri, str(tmp_path / "e1")]) == 0
    assert json.loads((tmp_path / "e1" / "metrics.json").read_text()) == metrics


def test_a_relative_out_in_a_ray_job_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_ef"
    pkg.mkdir(parents=True)
    monkeypatch.chdir(pkg)
    monkeypatch.setenv(JOB_CONFIG_VAR, json.dumps({"metadata": {"job_submission_id": "raysubmit_Y"}}))
    missing = tmp_path / "no-such-suite"  # checked after --out: the refusal comes first
    assert main(["--policy", "expert", "--suite", str(missing), "--out", "eval/x", "num_actors=0"]) == 2
    err = capsys.readouterr().err
    assert "--out='eval/x': this process runs inside Ray job raysubmit_Y" in err
    assert "Give --out s3://bucket/prefix/evaluations/<name>" in err and str(missing) not in err
    assert not (pkg / "eval").exists()
