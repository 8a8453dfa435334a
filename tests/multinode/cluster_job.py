"""A three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), driven like a real one.

Run by tests/multinode/test_cluster.py in a fresh process (``python -m tests.multinode.cluster_job
OUT.json WORKDIR``) so that it never meets the session's own Ray instance, with ``RAY_TMPDIR``
pointing at a private folder (the cluster writes its address file there, not in /tmp/ray where a
plain ``ray.init()`` elsewhere would find it). Nodes: the head (the driver's, no custom
resources), a learner node ``{"learner_node": 2}`` and a rollout node ``{"rollout_node": 2}``.

1. ``update``: one learner in the driver and two learner actors on the learner node (custom
   resource ``learner_node``) take the same PPO update on the same batch.
2. ``train``: a short real training run, rollout actors on the rollout node feeding two learners
   on the learner node; what ran where is read back from the run's provenance (run.json).
Writes one JSON of results; shuts the cluster down whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def update_part(results: dict) -> None:
    import torch

    from learner.group import LearnerGroup
    from tests.learner.test_learner import SETTINGS, fixed_batch, make_policy, same_update

    batch = fixed_batch(T=8, B=4, seed=5)
    torch.manual_seed(0)
    one = LearnerGroup(make_policy, SETTINGS, num_learners=1)  # in the driver, on the head node
    init = one.weights()
    two = LearnerGroup(make_policy, SETTINGS, num_learners=2, resources={"learner_node": 1})
    try:
        two.load_state({"policy": init})
        one.update_rl(batch)
        two.update_rl(batch)
        w1, w2 = one.weights(), two.weights()
        results["update"] = dict(
            worst_difference=same_update(init, w1, w2),  # beyond float rounding as Adam scales it
            moved=max(float((w1[k].float() - init[k].float()).abs().max()) for k in w1),
            one=one.describe(),
            two=two.describe(),
        )
    finally:
        two.shutdown()


def train_part(results: dict, work: Path) -> None:
    from learner.config import TrainConfig
    from learner.train import train
    from scenarios import save
    from sim.configs import from_dict
    from tests.envs.handmade import straight_scenario

    suite = work / "suite"
    suite.mkdir(parents=True, exist_ok=True)
    save(straight_scenario(suite, sid="plain", horizon=10), suite / "plain.json")
    cfg = from_dict(
        TrainConfig,
        {
            "run": "cluster",
            "store": {"uri": str(work / "store"), "checkpoint_every": 2},
            "tracking": {"out": str(work / "out"), "tensorboard": False},
            "suite": str(suite),
            "env": {"resolution": [32, 16]},  # render_backend auto: cpu here, recorded with its reason
            "policy": {"embed_dim": 32, "hidden_dim": 64},
            "rollout": {
                "num_actors": 2,
                "envs_per_actor": 2,
                "fragment_length": 6,
                "cpus_per_actor": 1,
                "resources": {"rollout_node": 1},
            },
            "num_learners": 2,
            "learner_resources": {"learner_node": 1},
            "ppo": {"epochs": 1, "minibatches": 2},
            "il": {"pretrain_iterations": 1, "steps_per_iteration": 1, "batch_size": 8, "il_rounds": 0},
            "eval": {"suite": str(suite), "every": 0, "num_envs": 1},
            "iterations": 2,
        },
    )
    r = train(cfg)
    prov = json.loads((r.folder / "run.json").read_text())
    results["train"] = dict(
        stage=r.state.stage,
        iteration=r.state.iteration,
        env_steps=r.state.env_steps,
        last_version=r.last_version,
        render=prov["render"],
        learners=prov["learners"],
    )


REPO = Path(__file__).resolve().parents[2]


def main(out: str, work: str) -> int:
    # compiled renderer kernels cached as the test session caches them (every actor would JIT otherwise)
    os.environ.setdefault("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba"))
    import ray
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    results: dict = {}
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    try:
        learner_node = cluster.add_node(num_cpus=2, resources={"learner_node": 2})
        rollout_node = cluster.add_node(num_cpus=2, resources={"rollout_node": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=True, configure_logging=False)
        results["nodes"] = dict(
            head=cluster.head_node.node_id,
            learner=learner_node.node_id,
            rollout=rollout_node.node_id,
            driver=ray.get_runtime_context().get_node_id(),
        )
        results["cluster_seconds"] = time.monotonic() - t0
        update_part(results)
        results["update_seconds"] = time.monotonic() - t0
        train_part(results, Path(work))
        results["train_seconds"] = time.monotonic() - t0
    except BaseException:
        results["error"] = traceback.format_exc()
    finally:
        try:
            ray.shutdown()
        finally:
            cluster.shutdown()
        Path(out).write_text(json.dumps(results, indent=2, default=str))
    return 1 if "error" in results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
