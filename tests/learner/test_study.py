"""learner.study end to end on a tiny budget: two seeds, IL vs IL -> RL+IL, paired on the same clips."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import uuid

import numpy as np
import pytest

from learner.study import STAGES, StudyConfig, aggregate, paired, run, verdict
from scenarios import save
from sim.configs import from_dict
from store import CheckpointStore, StoreFolder, scratch_folder
from tests.envs.handmade import straight_scenario


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("study_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=0.0), d / "lead.json")
    return d


def tiny_study(tmp, suite) -> StudyConfig:
    train = {
        "suite": str(suite),
        "env": {"resolution": [32, 16], "render_backend": "cpu"},
        "policy": {"embed_dim": 32, "hidden_dim": 64},
        "rollout": {"num_actors": 0, "envs_per_actor": 2, "fragment_length": 6},
        "ppo": {"epochs": 1, "minibatches": 2},
        "il": {"pretrain_iterations": 2, "steps_per_iteration": 2, "batch_size": 16, "rl_rounds": 2, "il_rounds": 1},
        "eval": {"suite": str(suite), "every": 1, "num_envs": 2},
        "iterations": 2,
        "store": {"uri": str(tmp / "store"), "checkpoint_every": 1},
        "tracking": {"tensorboard": False},
    }
    return from_dict(
        StudyConfig,
        {"name": "tiny", "out": str(tmp / "study"), "seeds": 2, "eval_suite": str(suite), "eval_num_actors": 0,
         "eval_num_envs": 2, "teacher": False, "train": train},
    )  # fmt: skip


@pytest.mark.slow
def test_study_trains_evaluates_and_reports(tmp_path, suite):
    cfg = tiny_study(tmp_path, suite)
    study = run(cfg)
    out = tmp_path / "study"
    for name in ("study.json", "study.md", "stages.png", "curves.png", "eval-s0/report.md", "eval-s1/metrics.json"):
        assert (out / name).is_file(), name
    saved = json.loads((out / "study.json").read_text())
    assert [s["seed"] for s in saved["seeds"]] == [0, 1]
    for s in saved["seeds"]:
        assert s["train"]["env_steps"] == 2 * 6 * 2  # iterations x fragment x envs
        for stage in STAGES:
            assert sorted(s["eval"]["stages"][stage]["clips"]) == ["lead", "plain"]
        assert s["eval"]["stages"]["il"]["policy"].endswith(f"tiny-s{s['seed']}-il@latest")
        assert s["eval"]["report"] == f"eval-s{s['seed']}/report.md"  # relative to the study's folder
        # the learning curve: the IL evaluation, one after each RL iteration but the last, the final one
        assert [h["label"] for h in s["train"]["val_history"]] == ["il", "rl@1", "rl+il"]
    # the across-seed mean is the mean of the per-seed values; the paired difference the mean over pairs
    cr = [s["eval"]["stages"]["rl+il"]["metrics"]["CR"] for s in saved["seeds"]]
    assert saved["aggregate"]["rl+il"]["CR"]["mean"] == pytest.approx(np.mean(cr))
    diffs = [
        s["eval"]["stages"]["rl+il"]["clips"][c]["RC"] - s["eval"]["stages"]["il"]["clips"][c]["RC"]
        for s in saved["seeds"]
        for c in ("lead", "plain")
    ]
    assert saved["paired"]["RC"]["diff"] == pytest.approx(np.mean(diffs)) and saved["paired"]["RC"]["n"] == 4
    md = (out / "study.md").read_text()
    assert "| IL (expert states) |" in md and "| IL -> RL+IL |" in md and "McNemar" in md and "## Target" in md
    assert study["verdict"] == saved["verdict"]

    # rerunning the same study resumes: nothing is trained again, the numbers are the same
    again = run(cfg)
    assert [s["train"]["env_steps"] for s in again["seeds"]] == [24, 24]
    assert again["aggregate"] == study["aggregate"]


@pytest.mark.slow
def test_study_to_a_store_uri_keeps_its_report_and_runs_in_the_store(tmp_path, suite, moto_s3, caplog):
    """out=s3://... (as a Ray job must give it): the report folder is uploaded, each seed run's tracking
    files stay with the run in the store, and a rerun reads its evaluations back from there."""
    out = moto_s3.uri(f"study-{uuid.uuid4().hex[:12]}/studies/tiny")
    store = moto_s3.uri(f"study-{uuid.uuid4().hex[:12]}/runs")
    base = tiny_study(tmp_path, suite)
    train = dataclasses.replace(base.train, store=dataclasses.replace(base.train.store, uri=store))
    cfg = dataclasses.replace(base, out=out, seeds=1, train=train)
    study = run(cfg)
    files = StoreFolder(out).list()
    for name in ("study.json", "study.md", "stages.png", "curves.png", "eval-s0/report.md", "eval-s0/study-eval.json"):
        assert name in files, sorted(files)
    assert not any(f.startswith("runs/") for f in files)  # the seed run's tracking is with the run
    saved = json.loads(StoreFolder(out).read("study.json"))
    assert saved["aggregate"] == study["aggregate"]
    assert saved["config"]["out"] == out.replace("access_key=testing", "access_key=***").replace(
        "secret_key=testing", "secret_key=***"
    )  # the credentials in the URI stay out of study.json
    assert "testing" not in json.dumps(saved["config"])
    rows = StoreFolder.of_run(store, "tiny-s0").read("metrics.jsonl").decode().splitlines()
    assert any("charts/episodic_return" in r for r in rows)
    assert study["seeds"][0]["train"]["returns"]  # read from the run's tracking files
    shutil.rmtree(scratch_folder(out))  # another machine: only the store has the earlier evaluation
    with caplog.at_level(logging.INFO, logger="learner.study"):
        again = run(cfg)
    assert again["aggregate"] == study["aggregate"]
    assert "is done already (same checkpoints and settings): read back" in caplog.text


def _seed(il_clips, rl_clips, il_m, rl_m):
    def stage(clips, m):
        return {"clips": clips, "metrics": m}

    return {"eval": {"stages": {"il": stage(il_clips, il_m), "rl+il": stage(rl_clips, rl_m)}}}


def test_verdict_and_pairs_by_hand():
    def clip(coll, rc):
        return {"collision": coll, "RC": rc, "DS": rc * (0.6 if coll else 1.0), "failure": coll}

    il = {"a": clip(1.0, 0.5), "b": clip(1.0, 0.4), "c": clip(0.0, 1.0)}
    rl = {"a": clip(0.0, 1.0), "b": clip(0.0, 1.0), "c": clip(0.0, 1.0)}
    m = {"CR": 2 / 3, "DR": 0.0, "RC": 0.633, "DS": 0.5, "success_rate": 1 / 3}
    m2 = {"CR": 0.0, "DR": 0.0, "RC": 1.0, "DS": 1.0, "success_rate": 1.0}
    seeds = [_seed(il, rl, m, m2), _seed(il, rl, m, m2)]
    pair = paired(seeds)
    assert pair["collision"]["diff"] == pytest.approx(-2 / 3) and pair["collision"]["n"] == 6
    assert pair["collision"]["mcnemar"]["only_a"] == 4 and pair["collision"]["mcnemar"]["only_b"] == 0
    assert pair["RC"]["diff"] == pytest.approx((0.5 + 0.6 + 0.0) / 3)
    agg = aggregate(seeds)
    assert agg["il"]["CR"]["mean"] == pytest.approx(2 / 3) and agg["il"]["CR"]["lo"] == pytest.approx(2 / 3)
    v = verdict(agg, pair)
    assert v == {
        "met": True, "best": "rl+il", "cr_lower_significant": True, "cr_at_most_40pct": True,
        "rc_at_least_95pct": True, "dr_no_worse": True,
    }  # fmt: skip
    # RC falling below 95 % of IL's fails the target even with fewer collisions
    m3 = dict(m2, RC=0.5)
    v = verdict(aggregate([_seed(il, rl, m, m3)] * 2), pair)
    assert not v["met"] and not v["rc_at_least_95pct"]
    assert math.isfinite(pair["DS"]["diff"])


def test_verdict_with_dagger_and_the_reactive_baseline_by_hand():
    """DAgger -> RL+IL against DAgger by the paired driving score; the best learned policy (by mean driving
    score) against reactive: success >= 0.85 and CR within 0.05."""
    from learner.study import MORE_PAIRS

    def clip(coll, ds):
        return {"collision": coll, "RC": 1.0, "DS": ds, "failure": coll}

    def stage(ds, cr, success):
        clips = {c: clip(0.0, d) for c, d in zip("abc", ds)}
        return {"clips": clips, "metrics": {"CR": cr, "DR": 0.0, "RC": 1.0, "DS": sum(ds) / 3, "success_rate": success}}

    stages = {
        "il": stage([0.6, 0.6, 0.6], 0.3, 0.5),
        "rl+il": stage([0.9, 0.9, 0.9], 0.15, 0.9),
        "dagger": stage([1.0, 1.0, 1.0], 0.02, 0.95),
        "dagger+rl+il": stage([0.7, 0.7, 0.7], 0.04, 0.9),  # every clip's driving score lower than DAgger's
        "reactive": stage([1.0, 1.0, 1.0], 0.0, 1.0),
    }
    seeds = [{"eval": {"stages": stages}}] * 2
    agg = aggregate(seeds)
    more = {f"{b} - {a}": paired(seeds, b, a) for b, a in MORE_PAIRS if b in agg and a in agg}
    assert more["dagger+rl+il - dagger"]["DS"]["diff"] == pytest.approx(-0.3)
    v = verdict(agg, paired(seeds), more)
    assert v["best"] == "dagger" and v["best_success_85pct"] and v["best_cr_within_005_of_reactive"]
    assert not v["dagger_rl_no_worse"] and not v["met"]  # RL+IL made DAgger's policy worse on every clip
    assert v["cr_at_most_40pct"] is False  # 0.15 > 0.4 x 0.3


def test_study_refuses_a_stage_it_cannot_pair():
    with pytest.raises(Exception, match="il\\+rl"):
        from_dict(StudyConfig, {"train": {"stage": "il"}})


@pytest.mark.parametrize("name", ["study-pixels", "study-teacher"])
def test_the_studies_the_readme_runs_read_as_configs(name):
    """docs/<study>/study.yaml is what a user runs (python -m learner.study --config ...): it parses, and its
    seeds' runs are what the README describes."""
    from pathlib import Path

    from learner.study import dagger_run, seed_run
    from sim.configs import resolve

    path = Path(__file__).resolve().parents[2] / "docs" / name / "study.yaml"
    cfg = resolve(StudyConfig, str(path), [])
    assert cfg.eval_suite == "test" and cfg.seeds == 3
    tcfg = seed_run(cfg, 1)
    assert tcfg.run == f"{cfg.name}-s1" and tcfg.seed == 1
    if cfg.dagger:
        arm = dagger_run(cfg, 1)
        assert arm.run == f"{cfg.name}-s1-dagger"
        assert arm.il.dagger_rounds == cfg.dagger_rounds
    if name == "study-pixels":  # from cameras: one perception run shared by the seeds, the student distilled
        assert tcfg.env.observation == "camera" and tcfg.perception.run == "pixels-perception"
        assert dagger_run(cfg, 0).stage == "perception+distill+rl" and cfg.dagger_rounds == 12


def test_a_given_teacher_is_driven_on_its_own_observation_and_is_the_students_yardstick(tmp_path, suite, caplog):
    """dagger_teacher=<a privileged policy SOURCE>: each seed drives it beside the camera policies on its own
    (privileged, camera-less) observation, with the very figures python -m evaluation gives for it alone; the
    student's 0.9x target is then held against its driving score; a rerun reads the evaluation back while
    @latest is the same checkpoint and drives it again once a newer one is committed."""
    from evaluation.evaluate import EvaluateConfig
    from evaluation.evaluate import run as run_evaluation
    from evaluation.metrics import rad_metrics
    from learner.study import DISTILL_TEACHER, camera_targets, images_seed, seed_run, source_pin
    from learner.train import train
    from tests.learner.test_train import tiny

    priv = {"cameras": False, "observation": "privileged", "resolution": [32, 16], "render_backend": "cpu"}
    train(tiny(tmp_path, suite, run="given", stage="il", env=priv))
    spec = f"{tmp_path / 'store'}/given@latest"
    cfg = dataclasses.replace(tiny_study(tmp_path, suite), ablations=False, dagger=True, dagger_teacher=spec)
    got = images_seed(cfg, seed_run(cfg, 0), 0)
    assert list(got) == [DISTILL_TEACHER]
    ev = got[DISTILL_TEACHER]
    alone = run_evaluation(
        EvaluateConfig(policy=spec, suite=str(suite), out=str(tmp_path / "alone"), seed=0, num_actors=0, num_envs=2)
    )
    recs = alone.records[alone.summary["order"][0]]
    assert ev["metrics"] == rad_metrics(recs) and set(ev["clips"]) == {"plain", "lead"}
    run = CheckpointStore(tmp_path / "store").run("given")
    v = run.versions()[-1]
    assert source_pin(spec)[0] == f"given@{v}"

    # the target's yardstick: this teacher's driving score (reactive's only when reactive labelled)
    imgs = {DISTILL_TEACHER: {"metrics": {"DS": {"mean": 0.8}}}}
    assert camera_targets(cfg, {"reactive": {"DS": {"mean": 0.99}}}, imgs)["teacher_ds"] == 0.8
    reactive = dataclasses.replace(cfg, dagger_teacher="reactive")
    assert camera_targets(reactive, {"reactive": {"DS": {"mean": 0.99}}}, {})["teacher_ds"] == 0.99

    # read back while the checkpoint is the same; a newer one is driven again
    def read_back() -> bool:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="learner.study"):
            assert images_seed(cfg, seed_run(cfg, 0), 0)[DISTILL_TEACHER]["metrics"] == ev["metrics"]
        return "done already" in caplog.text

    assert read_back()
    latest = run.load(v)
    run.commit(dict(latest.files), dict(latest.meta))  # a newer version (the same weights): @latest moves on
    assert source_pin(spec)[0] == f"given@{v + 1}"
    assert not read_back()
    assert read_back()
