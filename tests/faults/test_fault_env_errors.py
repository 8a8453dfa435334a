"""Fault 2: environments that raise in ``reset`` (a scenario whose background PLY is corrupt) or in
``step`` (a scenario whose data breaks mid-episode), during training.

The failing episode ends truncated and marked with the error; the worker and the actor go on; a
scenario that keeps failing is quarantined (no longer sampled) and named in the driver's log, in
metrics.jsonl (``charts/quarantined_scenarios``, ``charts/scenario_failures``) and in summary.json.
No training step is lost: env_steps = iterations x T x envs.
"""

from __future__ import annotations

import json

import pytest

from envs.driving import DrivingEnv
from learner.train import Trainer
from scenarios import save
from tests.envs.handmade import straight_scenario
from tests.faults.harness import ENVS, config, metrics_rows, tiny_args

ITERATIONS = 4
FRAGMENT = 16
BREAKS_AT = 3  # the step at which the brittle scenario's data breaks


@pytest.fixture(scope="module")
def broken_suite(tmp_path_factory):
    """plain (fine), corrupt (its background PLY declares 1000 vertices and holds 17 bytes), brittle
    (fine until its data breaks mid-episode, see ``breaks_mid_episode``)."""
    d = tmp_path_factory.mktemp("broken_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="corrupt", horizon=10, corrupt_background=True), d / "corrupt.json")
    save(straight_scenario(d, sid="brittle", horizon=10, seed=1), d / "brittle.json")
    clean = tmp_path_factory.mktemp("clean_suite")
    save(straight_scenario(clean, sid="plain", horizon=10), clean / "plain.json")
    return d, clean


@pytest.fixture
def breaks_mid_episode(monkeypatch):
    """The brittle scenario's geometry query raises from step BREAKS_AT on (as a scene whose data is
    damaged in memory would); the env's own error path does the rest."""
    real = DrivingEnv._collisions

    def collisions(self):
        if self._data.id == "brittle" and self._t >= BREAKS_AT:
            raise ValueError(f"brittle: agent table damaged at step {self._t}")
        return real(self)

    monkeypatch.setattr(DrivingEnv, "_collisions", collisions)


class SpyTrainer(Trainer):
    """The trainer, keeping every fragment it trained on."""

    def build(self) -> None:
        super().build()
        self.frags, self.worker = [], self.group.local
        sample = self.group.sample

        def keep(*a, **k):
            frags = sample(*a, **k)
            self.frags.append(frags)
            return frags

        self.group.sample = keep


@pytest.mark.slow
def test_fault_env_raises_in_reset_and_step_quarantined_and_reported(
    tmp_path, broken_suite, breaks_mid_episode, caplog
):
    suite, clean = broken_suite
    args = tiny_args(
        tmp_path / "out",
        suite,
        tmp_path / "store",
        iterations=ITERATIONS,
        rollout__fragment_length=FRAGMENT,
        env__quarantine_after=2,
    )
    args = [a if not a.startswith("eval.suite=") else f"eval.suite={clean}" for a in args]
    trainer = SpyTrainer(config(args))
    with caplog.at_level("WARNING"):
        result = trainer.run()

    # training went on to the end, every step counted, with the same worker all along
    assert result.state.iteration == ITERATIONS and result.state.env_steps == ITERATIONS * FRAGMENT * ENVS
    assert trainer.group.local is trainer.worker and trainer.group.restarts == 0

    # each failure of brittle ended its episode, truncated (not terminated) and marked with the error
    episodes = [e for frags in trainer.frags for f in frags for e in f.episodes]
    failed = [e for e in episodes if e["error"]]
    assert failed and all(e["scenario"] == "brittle" and not e["terminated"] for e in failed)
    assert all("agent table damaged" in e["error"] and e["length"] == BREAKS_AT for e in failed)
    assert all(e["scenario"] == "plain" for e in trainer.frags[-1][0].episodes)  # the broken are no longer drawn

    # quarantined, and named: the driver's log, summary.json, metrics.jsonl
    assert set(trainer.quarantined) == {"corrupt", "brittle"}
    assert "PlyError" in trainer.quarantined["corrupt"] and "agent table damaged" in trainer.quarantined["brittle"]
    log = caplog.text
    for sid in ("corrupt", "brittle"):
        assert f"scenario '{sid}' quarantined after repeated failures" in log
    assert "demonstrations: leaving out scenario corrupt" in log
    summary = json.loads((result.folder / "summary.json").read_text())
    assert set(summary["quarantined"]) == {"corrupt", "brittle"}
    assert set(summary["demonstrations_skipped"]) == {"corrupt"}
    rows = [r for r in metrics_rows(result.folder) if "charts/quarantined_scenarios" in r]
    assert rows[-1]["charts/quarantined_scenarios"] == 2.0
    # failure reports: each brittle episode, and the reset that charged corrupt twice in a row
    assert sum(r["charts/scenario_failures"] for r in rows) == summary["scenario_failures"] >= 3
