"""Fuzzing ``scenarios.load`` with scenario files: random mutations of a valid file (wrong types, NaN and
infinities, huge numbers, missing keys, extra keys, scene paths that escape the scenario's folder),
deeply nested and random text.

Every input either loads as a Scenario whose scene files lie inside its folder, or raises
``ScenarioError`` naming the file; never another exception, never a hang.
"""

from __future__ import annotations

import json
import math
import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenarios import save
from scenarios.io import ScenarioError, load
from tests.envs.handmade import straight_scenario
from tests.fuzz.counting import count

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(folder, valid document): a straight road with a lead car, its PLYs beside it, and a PLY
    outside the folder (so that an escaping path points at a file that exists)."""
    root = tmp_path_factory.mktemp("scn")
    folder = root / "suite"
    save(straight_scenario(folder, sid="s", horizon=8, lead_gap=8.0), folder / "s.json")
    (root / "outside.ply").write_bytes((folder / "car.ply").read_bytes())
    os.symlink(root / "outside.ply", folder / "link.ply")  # inside by name, outside in fact
    return folder, json.loads((folder / "s.json").read_text())


def _paths(doc, prefix=()):
    """Every (path, value) in the JSON tree (keys and list indices)."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):  # the first few items of long arrays are enough
            yield from _paths(v, (*prefix, i))


ESCAPES = ["../outside.ply", "/etc/passwd", "sub/../../outside.ply", "..", "link.ply", "C:\\x.ply",
           "\\\\server\\share\\x.ply", "./../suite/../outside.ply", "", ".", "missing.ply"]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 0.0, -0.0, 1, 0, -1]),
    st.text(max_size=20),
    st.sampled_from(ESCAPES),
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=8,
)


@st.composite
def mutated(draw, doc):
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p, _ in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["replace", "delete", "extra", "escape", "wrap"]))
        if op == "replace":
            parent[key] = draw(VALUES)
        elif op == "delete":
            del parent[key]
        elif op == "extra" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
        elif op == "escape":
            parent[key] = draw(st.sampled_from(ESCAPES))
        elif op == "wrap":
            parent[key] = [parent[key]]
    return doc


def check(path: Path, folder: Path) -> str:
    try:
        scenario = load(path)
    except ScenarioError as e:
        assert str(path) in str(e), e
        return "refused"
    root = folder.resolve()
    files = [scenario.scene.background, *scenario.scene.assets.values()]
    for f in files:
        assert Path(f).resolve().is_relative_to(root), f"{f} is outside {root}"
    assert math.isfinite(scenario.dt) and scenario.dt > 0 and scenario.horizon >= 1
    return "loaded"


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data())
def test_fuzz_scenario_json_mutations(base, data):
    folder, doc = base
    count("scenario")
    path = folder / "fuzz.json"
    path.write_text(json.dumps(data.draw(mutated(doc)), allow_nan=True))
    check(path, folder)


SEGMENTS = st.sampled_from(["..", ".", "sub", "/", "\\", "C:", "car.ply", "link.ply", "~"])


@pytest.mark.timeout(300)
@FUZZ
@given(path_text=st.one_of(st.sampled_from(ESCAPES), st.lists(SEGMENTS, min_size=1, max_size=5).map("/".join)))
def test_fuzz_scenario_scene_paths_stay_in_the_folder(base, path_text):
    folder, doc = base
    count("scenario")
    for field in ("background", "assets"):
        d = json.loads(json.dumps(doc))
        if field == "background":
            d["scene"]["background"] = path_text
        else:
            d["scene"]["assets"]["car"] = path_text
        path = folder / "paths.json"
        path.write_text(json.dumps(d))
        if check(path, folder) == "loaded":
            assert not path_text.startswith(("/", "\\")) and ".." not in path_text.split("/")


@pytest.mark.timeout(300)
@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
        st.integers(1, 20000).map(lambda n: "[" * n),
        st.integers(1, 20000).map(lambda n: '{"a":' * n),
    )
)
def test_fuzz_scenario_random_and_nested_text(base, text):
    folder, _ = base
    count("scenario")
    path = folder / "text.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    assert check(path, folder) == "refused"
