"""Fault 1: a rollout actor SIGKILLed while it samples its fragment, in the middle of a training run.

The run uses two Ray rollout actors (the session's local Ray). In iteration 2 one actor's process
is killed with SIGKILL 50 ms after it was asked for its fragment, the fragment not done yet. The
group replaces it (new process, current weights) and asks it again; training goes on, and no sample
is lost or counted twice: env_steps = iterations x T x (actors x envs) exactly, in the result and in the checkpoints'
meta, and ``charts/actor_restarts`` logs the replacement in the iteration it happened.
"""

from __future__ import annotations

import pytest

from learner.train import Trainer
from store import CheckpointStore
from tests.faults.harness import ENVS, config, metrics_rows, tiny_args
from tests.killing import KillWhileSampling

ACTORS = 2
ITERATIONS = 4
KILL_AT = 2  # the iteration whose sampling is interrupted
FRAGMENT = 24


class KillingTrainer(Trainer):
    """The trainer, with actor 1 killed while it samples its fragment of iteration KILL_AT."""

    killed: list

    def build(self) -> None:
        super().build()
        group, sample = self.group, self.group.sample
        self.killed = []
        calls = [0]

        def sample_and_kill(*args, **kwargs):
            calls[0] += 1
            if calls[0] == KILL_AT:
                group.actors[1] = KillWhileSampling(group.actors[1], self.killed)
            return sample(*args, **kwargs)

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

    ((_pid, finished),) = trainer.killed
    assert not finished  # its fragment was still being sampled when the SIGKILL landed
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
