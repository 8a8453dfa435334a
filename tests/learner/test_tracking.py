"""Tracker.provenance: what a run adds to run.json lands there whole and in TensorBoard as text."""

from __future__ import annotations

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learner.tracking import Tracker


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
