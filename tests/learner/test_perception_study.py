"""learner.study's images section, by hand: the camera policy beside its blanked / shuffled-camera runs and
the privileged teacher, means across seeds and paired differences on the same clips; the teacher's config."""

from __future__ import annotations

import numpy as np
import pytest

from learner.study import CAMERA_POLICY, TEACHER, StudyConfig, images, teacher_run
from learner.study_report import images_md


def _m(cr: float, rc: float) -> dict:
    return {"CR": cr, "DR": 0.0, "RC": rc, "DS": rc * (1 - cr), "success_rate": 1 - cr}


def _clips(collided: list[int], rc: list[float]) -> dict:
    return {f"c{i}": {"collision": float(c), "RC": r, "DS": r * (1 - c)} for i, (c, r) in enumerate(zip(collided, rc))}


def _seed(cam, blank) -> dict:
    return {
        "eval": {"stages": {"rl+il": {"metrics": _m(*cam[0]), "clips": _clips(*cam[1])}}},
        "images": {"cameras blanked": {"metrics": _m(*blank[0]), "clips": _clips(*blank[1])}},
        "train": {"perception": {"occupancy_iou": 0.25, "drivable_iou": 0.0, "velocity_error": 2.0}},
    }


def test_images_by_hand():
    seeds = [
        _seed(((0.0, 1.0), ([0, 0], [1.0, 1.0])), ((0.5, 0.5), ([1, 0], [0.5, 0.5]))),
        _seed(((0.5, 0.8), ([1, 0], [0.6, 1.0])), ((1.0, 0.4), ([1, 1], [0.4, 0.4]))),
    ]
    rows = images(seeds)
    assert list(rows) == [CAMERA_POLICY, "cameras blanked"]
    assert rows[CAMERA_POLICY]["metrics"]["CR"]["mean"] == pytest.approx(0.25)
    assert rows["cameras blanked"]["metrics"]["CR"]["mean"] == pytest.approx(0.75)
    assert rows["cameras blanked"]["metrics"]["RC"]["mean"] == pytest.approx(0.45)
    paired = rows["cameras blanked"]["paired"]
    # pairs (camera, blanked): collisions (0,1) (0,0) (1,1) (0,1): mean difference 0.5 over 4 clip pairs
    assert paired["collision"]["diff"] == pytest.approx(0.5) and paired["collision"]["n"] == 4
    # RC: (1,.5) (1,.5) (.6,.4) (1,.4): differences -.5 -.5 -.2 -.6
    assert paired["RC"]["diff"] == pytest.approx(np.mean([-0.5, -0.5, -0.2, -0.6]))
    assert "paired" not in rows[CAMERA_POLICY]
    md = "\n".join(images_md({"config": {"eval_suite": "test"}, "images": rows, "seeds": seeds}))
    assert "| cameras blanked | 2 | 0.750 [" in md and "## Stage perception on val" in md
    # a perception metric of 0.0 is a value, not a missing one
    assert "| 0.250 [0.250, 0.250] | n/a | 2.000 [2.000, 2.000] | 0.000 [0.000, 0.000] |" in md


def test_the_teacher_is_privileged_without_cameras():
    cfg = StudyConfig(teacher=True)
    t = teacher_run(cfg, 2)
    assert t.run == "study-s2-teacher" and t.seed == 2 and t.stage == "il+rl"
    assert t.env.observation == "privileged" and not t.env.cameras
    assert t.iterations == cfg.train.iterations and t.il == cfg.train.il  # the same budget
    assert TEACHER == "privileged teacher"
