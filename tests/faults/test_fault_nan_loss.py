"""Fault 6: non-finite losses.

- Once: one iteration's fragment comes back with NaN rewards (what a broken simulator hands the
  learner). Every PPO step of that batch has a NaN loss: each is skipped and logged, the weights are
  left as they were, and training goes on with the next batch.
- For good: a learning rate of 1e30 blows the weights up at the first PPO step, and every loss after
  it is NaN. ``python -m learner.train`` stops after ``ppo.max_consecutive_skips`` in a row with exit
  code 4 and a message that says so; the last good checkpoint (the end of IL) is intact and no
  checkpoint of the blown-up weights is written.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner import checkpoint as ckpt_io
from learner.train import Trainer
from store import CheckpointStore
from tests.faults.harness import ENVS, Driver, T, check_every_version, config, drivers, metrics_rows, tiny_args

ITERATIONS = 4
POISONED = 2  # the iteration whose rewards are NaN
STEPS_PER_UPDATE = 2 * 2  # ppo.epochs x ppo.minibatches of the tiny runs


class PoisonTrainer(Trainer):
    def build(self) -> None:
        super().build()
        sample, calls = self.group.sample, [0]

        def poisoned(*a, **k):
            frags = sample(*a, **k)
            calls[0] += 1
            if calls[0] == POISONED:
                frags[0].rewards[:] = np.nan
            return frags

        self.group.sample = poisoned
        self.weights_seen: list[dict] = []
        learners = self.learner_group
        update = learners.update_rl

        def update_rl(*args, **kwargs):
            self.weights_seen.append(learners.weights())
            return update(*args, **kwargs)

        learners.update_rl = update_rl  # type: ignore[method-assign]


def _finite(weights) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in weights.values() if t.is_floating_point())


@pytest.mark.slow
def test_fault_nan_loss_once_is_skipped_and_training_goes_on(tmp_path, fault_suite, caplog):
    trainer = PoisonTrainer(config(tiny_args(tmp_path / "out", fault_suite, tmp_path / "store", iterations=ITERATIONS)))
    with caplog.at_level("WARNING", logger="learner.learner"):
        result = trainer.run()
    assert result.state.iteration == ITERATIONS and result.state.env_steps == ITERATIONS * T * ENVS
    skipped = [r for r in caplog.records if "non-finite loss: step skipped" in r.getMessage()]
    assert len(skipped) == STEPS_PER_UPDATE  # every step of the poisoned batch, and only those

    rows = [r for r in metrics_rows(result.folder) if "charts/iteration" in r]
    by_it = {int(r["charts/iteration"]): r["charts/skipped_steps"] for r in rows}
    assert by_it == {i: float(STEPS_PER_UPDATE * (i >= POISONED)) for i in range(1, ITERATIONS + 1)}
    # the poisoned update left the weights untouched; the next one trained again
    before, after, later = trainer.weights_seen[POISONED - 1 : POISONED + 2]
    assert all(torch.equal(before[k], after[k]) for k in before if k in after and "norm" not in k)
    assert any(not torch.equal(after[k], later[k]) for k in after)
    rs = CheckpointStore(tmp_path / "store").run("r")
    check_every_version(rs, last_iteration=ITERATIONS, env_steps=ITERATIONS * T * ENVS)
    final = ckpt_io.policy_weights(rs.load(rs.latest()).files)
    assert _finite(final)


@pytest.mark.slow
def test_fault_nan_loss_for_good_stops_with_exit_code_4(tmp_path, fault_suite):
    store = tmp_path / "store"
    args = tiny_args(
        tmp_path / "out", fault_suite, store, iterations=ITERATIONS, store__checkpoint_every=100,
        ppo__lr=1e30, ppo__max_consecutive_skips=3,
    )  # fmt: skip
    with drivers() as started:
        d = Driver(args, tmp_path / "driver.log")
        started.append(d)
        rc = d.finish()
    out = d.output()
    assert rc == 4, out[-4000:]
    assert "learner.train: 3 non-finite losses in a row" in out and "the last committed checkpoint is intact" in out
    assert "non-finite loss: step skipped (1 in a row" in out
    rs = CheckpointStore(store).run("r")
    assert rs.versions() == [1]  # the end of IL: nothing written after the weights blew up
    ck = rs.load(1)  # whole: sizes and sha256 against its manifest
    assert ck.meta["stage"] == "rl" and ck.meta["iteration"] == 0 and ck.meta["reason"] == "end of stage il"
    weights = ckpt_io.policy_weights(ck.files)
    assert _finite(weights) and max(float(t.abs().max()) for t in weights.values() if t.numel()) < 1e6
    assert not (store / "r" / "LOCK.json").exists()  # the lease was given back on the way out
    assert math.isfinite(ck.meta.get("metrics", {}).get("val/CR", 0.0))
