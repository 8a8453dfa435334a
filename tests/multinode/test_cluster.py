"""A local multi-node Ray cluster: learners rendezvous on their own node, rollout actors on another
node feed them, and two learners there take the same update as one in the driver.

The cluster runs in a fresh process (tests/multinode/cluster_job.py) with its own Ray temp folder,
so it never meets the session's Ray instance (tests/conftest.py) nor any other on this machine; the
test stops only what it started (the job's process group, and the job shuts its cluster down).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.multinode

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 600  # a failing cluster start ends the test instead of hanging it


@pytest.fixture(scope="module")
def cluster_results(tmp_path_factory):
    work = tmp_path_factory.mktemp("multinode")
    ray_tmp = tempfile.mkdtemp(prefix="sdmn-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    out = work / "results.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.multinode.cluster_job", str(out), str(work)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the cluster's processes go with it
    )
    try:
        log, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"the multi-node job ran past {JOB_TIMEOUT_S} s:\n{log[-4000:]}")
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert out.exists(), f"the multi-node job wrote no results (exit {proc.returncode}):\n{log[-4000:]}"
    results = json.loads(out.read_text())
    assert "error" not in results, results["error"] + "\n--- job output ---\n" + log[-4000:]
    assert proc.returncode == 0, log[-4000:]
    return results


def test_learner_group_forms_on_another_node_and_two_learners_equal_one(cluster_results):
    nodes, up = cluster_results["nodes"], cluster_results["update"]
    assert nodes["driver"] == nodes["head"] and len({nodes["head"], nodes["learner"], nodes["rollout"]}) == 3
    two = up["two"]
    assert two["backend"] == "gloo" and two["num_learners"] == 2 and not two["in_driver"]
    assert [r["node_id"] for r in two["ranks"]] == [nodes["learner"]] * 2  # placed by the custom resource
    # the rendezvous is rank 0's own address and store, not the driver's
    host, port = two["rendezvous"].rsplit(":", 1)
    assert host == two["ranks"][0]["ip"] and int(port) > 0
    assert up["one"]["in_driver"] and up["one"]["ranks"][0]["node_id"] == nodes["head"]
    # data parallel: the same update as one learner, to float rounding, and a real one
    assert up["worst_difference"] < 1e-5
    assert up["moved"] > 1e-4


def test_rollout_actors_on_one_node_feed_learners_on_another(cluster_results):
    nodes, tr = cluster_results["nodes"], cluster_results["train"]
    assert tr["stage"] == "done" and tr["iteration"] == 2
    assert tr["env_steps"] == 2 * 6 * 2 * 2  # iterations x fragment_length x envs_per_actor x actors
    assert tr["last_version"] is not None  # a checkpoint was committed
    actors = tr["render"]["rollout_actors"]
    assert len(actors) == 2 and all(a["node_id"] == nodes["rollout"] for a in actors)
    assert all(a["requested"] == "auto" and a["used"] in ("cpu", "gsplat") for a in actors)
    learners = tr["learners"]
    assert learners["backend"] == "gloo" and learners["resources"] == {"learner_node": 1.0}
    assert [r["node_id"] for r in learners["ranks"]] == [nodes["learner"]] * 2
    assert learners["rendezvous"].rsplit(":", 1)[0] == learners["ranks"][0]["ip"]
