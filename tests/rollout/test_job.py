"""rollout.job: a Ray job is recognised by what Ray gives its entrypoint (the job config variable) or
its working dir (a package under runtime_resources/working_dir_files), and paths whose contents would
vanish with the job are refused at start, naming the setting and what to give instead; outside a job
every path is fine. (tests/learner/test_tracking_job.py checks it against a real head.)"""

from __future__ import annotations

import json

import pytest

from rollout.job import JOB_CONFIG_VAR, RayJob, check_job_path, is_ephemeral, ray_job
from sim.configs import ConfigError

CONFIG = json.dumps(
    {"runtime_env": {"working_dir": "gcs://_ray_pkg_ab.zip"}, "metadata": {"job_submission_id": "raysubmit_X"}}
)


def test_a_plain_process_is_no_job(tmp_path, monkeypatch):
    assert ray_job({}, tmp_path) is None
    assert not is_ephemeral("runs", None)
    monkeypatch.delenv(JOB_CONFIG_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    check_job_path("runs", "out", "-")  # not in a job: a relative path is fine


def test_the_entrypoint_of_a_submitted_job(tmp_path):
    pkg = tmp_path / "session_1" / "runtime_resources" / "working_dir_files" / "_ray_pkg_ab"
    (pkg / "learner").mkdir(parents=True)
    assert ray_job({JOB_CONFIG_VAR: CONFIG}, pkg) == RayJob("raysubmit_X", pkg)
    assert ray_job({JOB_CONFIG_VAR: CONFIG}, pkg / "learner").package == pkg  # a folder below it
    assert ray_job({}, pkg) == RayJob("", pkg)  # an actor with a working dir: no job config, the folder says it
    assert ray_job({JOB_CONFIG_VAR: "{not json"}, tmp_path) == RayJob("", None)  # without --working-dir
    job = RayJob("raysubmit_X", pkg)
    assert is_ephemeral("runs", job) and is_ephemeral("./eval/x", job)
    assert is_ephemeral(str(pkg / "runs"), job)  # absolute, but inside the package
    assert not is_ephemeral(str(tmp_path / "shared" / "runs"), job)
    assert not is_ephemeral("s3://bucket/runs", job)
    assert is_ephemeral("runs", RayJob("", None)) and not is_ephemeral("/data/runs", RayJob("", None))


def test_a_relative_path_in_a_job_is_refused_naming_the_setting_and_the_way_out(tmp_path):
    job = RayJob("raysubmit_X", tmp_path / "_ray_pkg_ab")
    with pytest.raises(ConfigError) as e:
        check_job_path("eval/x", "--out", "Give --out s3://bucket/evaluations/x.", job=job)
    msg = str(e.value)
    assert msg.startswith("--out='eval/x': this process runs inside Ray job raysubmit_X")
    assert str(tmp_path / "_ray_pkg_ab") in msg and msg.endswith("Give --out s3://bucket/evaluations/x.")
    check_job_path(str(tmp_path / "shared"), "--out", "-", job=job)  # absolute, outside the package: fine
