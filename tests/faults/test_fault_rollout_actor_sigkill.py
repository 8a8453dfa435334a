"""Fault 1: a rollout actor SIGKILLed while it samples its fragment, in the middle of a training run.

The run uses two Ray rollout actors (the session's local Ray). In iteration 2 one actor's process is
killed with SIGKILL a moment after both were asked for their fragments. The group replaces it (new
process, current weights) and asks it again; training goes on, and no sample is lost or counted
twice: env_steps = iterations x T x (actors x envs) exactly, in the result and in the checkpoints'
meta, and ``charts/actor_restarts`` logs the replacement in the iteration it happened.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from learner.store import CheckpointStore
from learner.train import Trainer
from tests.faults.harness import ENVS, config, metrics_rows, tiny_args

ACTORS = 2
ITERATIONS = 4
KILL_AT = 2  # the iteration whose sampling is interrupted
FRAGMENT = 24  # long enough that sampling is still under way when the kill lands


class KillingTrainer(Trainer):
    """The trainer, with a hook that SIGKILLs actor 1 shortly after iteration KILL_AT asks for fragments."""

    killed: list[int]

    def build(self) -> None:
        super().build()
        group, sample = self.group, self.group.sample
        self.killed = []
        calls = [0]

        def sample_and_kill(T, deterministic=False, timeout_s=None):
            calls[0] += 1
            if calls[0] == KILL_AT:
                pid = group.actor_pids()[1]
                self.killed.append(pid)
                threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
            return sample(T, deterministic, timeout_s)

        group.sample = sample_and_kill


@pytest.mark.slow
def test_fault_rollout_actor_sigkill_mid_iteration(tmp_path, fault_suite, ray_session, caplog):
    args = tiny_args(
        tmp_path / "out",
        fault_suite,
        tmp_path / "store",
        iterations=ITERATIONS,
        rollout__num_actors=ACTORS,
        rollout__cpus_per_actor=0.5,
        rollout__fragment_length=FRAGMENT,
    )
    cfg = config(args)
    trainer = KillingTrainer(cfg)
    with caplog.at_level("WARNING", logger="rollout.group"):
        result = trainer.run()

    assert len(trainer.killed) == 1
    assert any("rollout actor 1 died" in r.getMessage() for r in caplog.records)
    steps = ITERATIONS * FRAGMENT * ACTORS * ENVS
    assert result.state.iteration == ITERATIONS and result.state.env_steps == steps

    rows = [r for r in metrics_rows(result.folder) if "charts/actor_restarts" in r]
    restarts = {int(r["charts/iteration"]): r["charts/actor_restarts"] for r in rows}
    # replaced inside the interrupted iteration (not at the next weight push), and only once
    assert restarts == {i: float(i >= KILL_AT) for i in range(1, ITERATIONS + 1)}
    # every iteration's rows count one full round of fragments
    env_steps = sorted(r["step"] for r in rows)
    assert env_steps == [i * FRAGMENT * ACTORS * ENVS for i in range(1, ITERATIONS + 1)]

    rs = CheckpointStore(tmp_path / "store").run("r")
    for v in rs.versions():
        meta = rs.load(v).meta
        assert meta["env_steps"] == meta["iteration"] * FRAGMENT * ACTORS * ENVS
    last = rs.load(rs.latest()).meta
    assert last["stage"] == "done" and last["iteration"] == ITERATIONS and last["env_steps"] == steps
