"""Scenario files: round trip, and an error naming file + field for every kind of bad input."""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import pytest

import scenarios
from scenarios.io import ScenarioError, from_dict, load, load_folder, save, to_dict
from scenarios.scene import clear_cache, load_scene
from sim.gaussians import GaussianCloud
from sim.ply import save_ply

H = 20  # a short horizon keeps the documents small


def _cloud(n: int, seed: int) -> GaussianCloud:
    rng = np.random.default_rng(seed)
    return GaussianCloud.from_rgb(
        rng.normal(size=(n, 3)), np.tile([1.0, 0, 0, 0], (n, 1)), np.full((n, 3), 0.1), np.full(n, 0.9),
        rng.uniform(size=(n, 3)),
    )  # fmt: skip


def make_doc(folder: Path) -> dict:
    """A small valid scenario document (and its PLYs) in ``folder``."""
    (folder / "assets").mkdir(parents=True, exist_ok=True)
    save_ply(_cloud(50, 0), folder / "bg.ply")
    save_ply(_cloud(20, 1), folder / "assets" / "car.ply")
    T = H + 6
    t = [round(0.1 * k, 10) for k in range(T)]
    return {
        "format_version": 2,
        "id": "tiny-0",
        "dt": 0.1,
        "horizon": H,
        "render_distance": 150.0,
        "scene": {"background": "bg.ply", "assets": {"car": "assets/car.ply"}},
        "map": {
            "lanes": [
                {
                    "id": "a",
                    "centerline": [[0.0, 0.0], [100.0, 0.0]],
                    "width": 3.5,
                    "left": "b",
                    "successors": ["c"],
                    "speed_limit": 13.9,
                },
                {"id": "b", "centerline": [[0.0, 3.5], [100.0, 3.5]], "width": 3.5, "right": "a", "speed_limit": 13.9},
                {"id": "c", "centerline": [[100.0, 0.0], [200.0, 0.0]], "width": 3.5, "speed_limit": 8.3},
            ],
            "road_edges": [[[0.0, -2.25], [200.0, -2.25]]],
        },
        "ego": {"length": 4.8, "width": 2.0, "height": 1.6, "center_offset": 1.4, "wheelbase": 2.765},
        "expert": {"t": t, "poses": [[10.0 + 1.0 * k, 0.0, 0.0, 0.0] for k in range(T)], "speed": [10.0] * T},
        "route": ["a", "c"],
        "agents": [
            {
                "id": "lead",
                "type": "vehicle",
                "asset": "car",
                "size": [4.5, 1.9, 1.5],
                "poses": [[40.0 + 0.8 * k, 0.0, 0.0, 0.0] for k in range(H + 1)],
                "present": [True] * (H + 1),
            }
        ],
        "static_obstacles": [{"id": "cone", "pose": [60.0, -1.8, 0.0, 0.3], "size": [0.4, 0.4, 0.7]}],
        "rig": {"name": "front3", "width": 64, "height": 32},
        "tags": {"kind": "lead_vehicle", "difficulty": "easy", "seed": 3, "suite": "test"},
    }


def write(folder: Path, doc, name: str = "s.json") -> Path:
    p = folder / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def test_load_valid(tmp_path):
    sc = load(write(tmp_path, make_doc(tmp_path)))
    assert sc.id == "tiny-0" and sc.horizon == H and sc.dt == 0.1 and sc.render_distance == 150.0
    assert sc.scene.background == (tmp_path / "bg.ply").resolve()
    assert sc.scene.assets["car"] == (tmp_path / "assets" / "car.ply").resolve()
    assert sc.expert.poses.shape == (H + 6, 4) and sc.agents[0].poses.shape == (H + 1, 4)
    assert sc.route == ("a", "c") and sc.map.lane("a").successors == ("c",)
    assert sc.tags["seed"] == 3 and sc.kind == "lead_vehicle"
    poses, sizes, present = sc.agent_arrays()
    assert poses.shape == (1, H + 1, 4) and sizes.shape == (1, 3) and present.all()
    assert sc.map.route_polyline(sc.route).shape == (3, 2)  # the shared vertex appears once


def test_round_trip(tmp_path):
    sc = load(write(tmp_path, make_doc(tmp_path)))
    p2 = save(sc, tmp_path / "copy.json")
    sc2 = load(p2)
    assert to_dict(sc, tmp_path) == to_dict(sc2, tmp_path)
    assert p2.read_text() == save(sc2, tmp_path / "copy2.json").read_text()  # save -> load -> save is stable
    # saving where the PLYs would be outside the scenario's folder is refused
    with pytest.raises(ScenarioError, match=r"scene\.background"):
        save(sc, tmp_path / "sub" / "x.json")


def test_speed_limits_load_and_default_with_one_warning(tmp_path, caplog):
    sc = load(write(tmp_path, make_doc(tmp_path)))
    assert [ln.speed_limit for ln in sc.map.lanes] == [13.9, 13.9, 8.3]
    # along the route a, c: a's limit up to its end, c's from the vertex they share on
    np.testing.assert_array_equal(sc.map.route_speed_limits(sc.route), [13.9, 8.3, 8.3])
    assert not caplog.records  # every lane has its limit: nothing to warn about
    # a closed lane (0 m/s) that the route does not drive is fine
    doc = make_doc(tmp_path)
    doc["map"]["lanes"][1]["speed_limit"] = 0
    assert load(write(tmp_path, doc, "closed.json")).map.lane("b").speed_limit == 0.0
    # a version-1 file (no limits): the default on every lane, and one warning that names the file
    doc = make_doc(tmp_path)
    doc["format_version"] = 1
    for ln in doc["map"]["lanes"]:
        del ln["speed_limit"]
    p = write(tmp_path, doc, "old.json")
    with caplog.at_level(logging.WARNING, logger="scenarios.io"):
        old = load(p)
    assert [ln.speed_limit for ln in old.map.lanes] == [scenarios.format.DEFAULT_SPEED_LIMIT] * 3
    assert abs(scenarios.format.DEFAULT_SPEED_LIMIT - 13.889) < 1e-3  # 50 km/h
    assert len(caplog.records) == 1 and str(p) in caplog.records[0].getMessage()
    assert "3 of 3 lanes have no speed_limit" in caplog.records[0].getMessage()
    # ... and saved again it is a version-2 file with the limits written out
    text = save(old, tmp_path / "new.json").read_text()
    assert json.loads(text)["format_version"] == 2 and text.count('"speed_limit": 13.88') == 3


def test_defaults_for_optional_blocks(tmp_path):
    doc = make_doc(tmp_path)
    for k in ("ego", "rig", "tags", "agents", "static_obstacles", "render_distance"):
        del doc[k]
    del doc["scene"]["assets"]
    sc = load(write(tmp_path, doc))
    assert sc.ego == scenarios.EgoSpec() and sc.rig == scenarios.RigSpec() and sc.agents == ()
    assert sc.render_distance == 200.0


def _set(path: str, value):
    """A mutation that sets doc[path] (dotted, with [i] indices)."""

    def f(doc, folder):
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value(folder) if callable(value) else value

    return f


def _del(path: str):
    def f(doc, folder):
        keys = path.split(".")
        d = doc
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return f


def _truncate_expert(doc, folder):
    for k in ("t", "poses", "speed"):
        doc["expert"][k] = doc["expert"][k][:H]


def _symlink_out(doc, folder):
    outside = folder.parent / f"outside-{folder.name}.ply"
    save_ply(_cloud(5, 2), outside)
    os.symlink(outside, folder / "link.ply")
    doc["scene"]["background"] = "link.ply"


def _time_backwards(doc, folder):
    doc["expert"]["t"][12] = doc["expert"]["t"][11] - 0.01


BAD = {
    "nan pose": (_set("expert.poses[3][1]", math.nan), "expert.poses[3][1]", "finite"),
    "inf size": (_set("agents[0].size[2]", math.inf), "agents[0].size[2]", "finite"),
    "nan dt": (_set("dt", math.nan), "dt", "finite"),
    "time backwards": (_time_backwards, "expert.t[12]", "timestamps must increase"),
    "time off grid": (_set("expert.t[5]", 0.53), "expert.t[5]", "one pose per step"),
    "short track": (_truncate_expert, "expert.t", "horizon"),
    "missing ply": (_set("scene.background", "nope.ply"), "scene.background", "not found"),
    "missing asset": (_set("scene.assets.car", "assets/gone.ply"), "scene.assets.car", "not found"),
    "dotdot": (_set("scene.background", "../bg.ply"), "scene.background", "'..'"),
    "absolute": (_set("scene.background", lambda f: str((f / "bg.ply").resolve())), "scene.background", "absolute"),
    "symlink escape": (_symlink_out, "scene.background", "outside the scenario's folder"),
    "unknown top key": (_set("colour", "red"), "colour", "unknown key"),
    "unknown lane key": (_set("map.lanes[1].colour", "grey"), "map.lanes[1].colour", "unknown key"),
    "negative limit": (_set("map.lanes[2].speed_limit", -5.0), "map.lanes[2].speed_limit", "must be >= 0.0"),
    "nan limit": (_set("map.lanes[1].speed_limit", math.nan), "map.lanes[1].speed_limit", "finite"),
    "inf limit": (_set("map.lanes[1].speed_limit", math.inf), "map.lanes[1].speed_limit", "finite"),
    "km/h limit": (_set("map.lanes[2].speed_limit", 50), "map.lanes[2].speed_limit", "must be <= 40 m/s"),
    "text limit": (_set("map.lanes[2].speed_limit", "50 km/h"), "map.lanes[2].speed_limit", "expected a number"),
    "closed route lane": (_set("map.lanes[2].speed_limit", 0), "map.lanes[2].speed_limit", "which the route drives"),
    "unknown agent key": (_set("agents[0].velocity", [1, 2]), "agents[0].velocity", "unknown key"),
    "unknown ego key": (_set("ego.mass", 1500), "ego.mass", "unknown key"),
    "missing key": (_del("route"), "route", "missing required key"),
    "dt as string": (_set("dt", "0.1"), "dt", "expected a number"),
    "horizon float": (_set("horizon", 20.0), "horizon", "expected an integer"),
    "bool as number": (_set("agents[0].size[0]", True), "agents[0].size[0]", "expected a number"),
    "pose width": (_set("agents[0].poses[5]", [1.0, 2.0, 3.0]), "agents[0].poses[5]", "expected 4 entries"),
    "expert poses not nested": (_set("expert.poses[2]", 5.0), "expert.poses[2]", "expected an array"),
    "present not bool": (_set("agents[0].present[0]", 1), "agents[0].present[0]", "true or false"),
    "agent poses length": (
        _set("agents[0].poses", [[0.0, 0.0, 0.0, 0.0]] * H),
        "agents[0].poses",
        "horizon + 1",
    ),
    "agent present length": (_set("agents[0].present", [True] * (H + 2)), "agents[0].present", "horizon + 1"),
    "route unknown lane": (_set("route", ["a", "zz"]), "route[1]", "unknown lane id 'zz'"),
    "route not connected": (_set("route", ["c", "a"]), "route[1]", "neither a successor nor a neighbour"),
    "neighbour unknown": (_set("map.lanes[0].left", "q"), "map.lanes[0].left", "unknown lane id 'q'"),
    "successor unknown": (_set("map.lanes[0].successors", ["q"]), "map.lanes[0].successors[0]", "unknown lane id"),
    "duplicate lane": (_set("map.lanes[2].id", "a"), "map.lanes[2].id", "duplicate lane id"),
    "short centerline": (_set("map.lanes[2].centerline", [[0.0, 0.0]]), "map.lanes[2].centerline", "at least 2"),
    "agent type": (_set("agents[0].type", "tank"), "agents[0].type", "unknown agent type"),
    "agent asset": (_set("agents[0].asset", "bus"), "agents[0].asset", "unknown asset 'bus'"),
    "negative size": (_set("static_obstacles[0].size[0]", -1.0), "static_obstacles[0].size", "> 0"),
    "negative speed": (_set("expert.speed[4]", -1.0), "expert.speed[4]", ">= 0"),
    "bad rig": (_set("rig.name", "fisheye9"), "rig.name", "unknown camera rig"),
    "bad id": (_set("id", "a b/c"), "id", "must match"),
    "format 3": (_set("format_version", 3), "format_version", "unsupported version 3 (this splatdrive reads 1 or 2)"),
    "format missing": (_del("format_version"), "format_version", "missing required key"),
    "tags nested": (_set("tags.kind", {"a": 1}), "tags.kind", "expected a string, number or boolean"),
    "map not object": (_set("map", []), "map", "expected an object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_field_names_file_and_field(tmp_path, case):
    mutate, field, why = BAD[case]
    doc = make_doc(tmp_path)
    mutate(doc, tmp_path)
    p = write(tmp_path, doc)
    with pytest.raises(ScenarioError) as e:
        load(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {field}"), msg
    assert why in msg, msg


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not valid JSON: line 1"),
        ('{"format_version": 1, "format_version": 1}', "duplicate key 'format_version'"),
        ("[1, 2]", "expected an object"),
        ("", "not valid JSON"),
    ],
)
def test_bad_json(tmp_path, text, why):
    p = write(tmp_path, text)
    with pytest.raises(ScenarioError, match=str(p)) as e:
        load(p)
    assert why in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load(tmp_path / "nope.json")


def test_load_suite_names_broken_files(tmp_path, caplog):
    doc = make_doc(tmp_path)
    write(tmp_path, doc, "a.json")
    doc2 = copy.deepcopy(doc)
    doc2["id"] = "tiny-1"
    write(tmp_path, doc2, "b.json")
    bad = copy.deepcopy(doc)
    bad["id"] = "tiny-2"
    bad["dt"] = -1
    write(tmp_path, bad, "c.json")
    with pytest.raises(ScenarioError) as e:
        load_folder(tmp_path)
    assert "1 of 3 scenario files are broken" in str(e.value)
    assert f"{tmp_path / 'c.json'}: dt: must be > 0.0" in str(e.value)
    with caplog.at_level(logging.WARNING):
        got = load_folder(tmp_path, skip_broken=True)
    assert [s.id for s in got] == ["tiny-0", "tiny-1"]
    assert "c.json" in caplog.text


def test_load_suite_errors(tmp_path):
    with pytest.raises(ScenarioError, match="no scenario files"):
        load_folder(tmp_path)
    with pytest.raises(ScenarioError, match="nope: not a folder of scenario files"):
        load_folder(tmp_path / "nope")
    doc = make_doc(tmp_path)
    write(tmp_path, doc, "a.json")
    write(tmp_path, doc, "b.json")
    with pytest.raises(ScenarioError, match="ids must be unique"):
        load_folder(tmp_path)


def test_from_dict_without_a_file(tmp_path):
    doc = make_doc(tmp_path)
    doc["horizon"] = 0
    with pytest.raises(ScenarioError, match="<scenario>: horizon: must be >= 1"):
        from_dict(doc, base=tmp_path)


def test_load_scene_shares_clouds(tmp_path):
    clear_cache()
    doc = make_doc(tmp_path)
    sc = load(write(tmp_path, doc))
    scene = load_scene(sc)
    assert len(scene.background) == 50 and set(scene.actors) == {"lead"} and scene.num_steps == H + 1
    assert len(scene.compose(0).instances) == 1
    doc["id"] = "tiny-1"
    sc2 = load(write(tmp_path, doc, "b.json"))
    scene2 = load_scene(sc2)
    assert scene2.background is scene.background and scene2.assets["car"] is scene.assets["car"]  # read once


def test_readme_example_is_valid(tmp_path):
    """The complete example in scenarios/README.md loads (with PLYs at its paths)."""
    readme = Path(scenarios.__file__).with_name("README.md").read_text()
    block = readme.split("```json\n", 1)[1].split("```", 1)[0]
    doc = json.loads(block)
    (tmp_path / "backgrounds").mkdir()
    (tmp_path / "assets").mkdir()
    save_ply(_cloud(10, 0), tmp_path / doc["scene"]["background"])
    save_ply(_cloud(10, 1), tmp_path / doc["scene"]["assets"]["sedan_red"])
    sc = load(write(tmp_path, block))
    assert sc.id == "example-lead_vehicle-0" and len(sc.agents) == 1 and len(sc.static_obstacles) == 1
    assert scenarios.expert_labels(sc).shape == (10, 2)
