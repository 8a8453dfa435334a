"""Reading, validating and writing scenario files (JSON, ``format_version`` 2, which also reads 1; see
scenarios/README.md).

Every file is treated as untrusted input. A problem raises :class:`ScenarioError` (a ``ValueError``)
whose message names the file, the field (a path such as ``agents[2].poses[17][3]``) and what is
wrong, e.g. ``/x/s.json: expert.t[12]: timestamps must increase (1.2 after 1.3)``.

A lane without ``speed_limit`` (every lane of a version-1 file) gets ``DEFAULT_SPEED_LIMIT``; the
file is named in one warning (logger ``scenarios.io``), however many lanes lack it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from scenarios.format import (
    AGENT_TYPES,
    DEFAULT_RENDER_DISTANCE,
    DEFAULT_SPEED_LIMIT,
    FORMAT_VERSION,
    MAX_SPEED_LIMIT,
    READ_VERSIONS,
    Agent,
    EgoSpec,
    Lane,
    MapData,
    RigSpec,
    Scenario,
    SceneFiles,
    StaticObstacle,
    Track,
)
from sim.camera import RIGS
from sim.files import atomic_write

log = logging.getLogger(__name__)

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
MAX_FILE_BYTES = 64 * 1024 * 1024  # a scenario file is kilobytes; refuse anything absurd
# the expert's timestamps must sit on the dt grid within this fraction of dt
TIME_GRID_TOLERANCE = 0.05


class ScenarioError(ValueError):
    """A scenario file (or suite) is invalid; the message says which file, which field and why."""


class _Checker:
    """Field-by-field validation of a parsed JSON document; every failure names file and field."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, field: str, why: str):
        raise ScenarioError(f"{self.file}: {field}: {why}")

    # -- scalars ---------------------------------------------------------------------------------
    def obj(self, v, field: str, required: Iterable[str], optional: Iterable[str] = ()) -> dict:
        if not isinstance(v, dict):
            self.fail(field, f"expected an object, got {_kind(v)}")
        required, optional = tuple(required), tuple(optional)
        for k in v:
            if k not in required and k not in optional:
                allowed = ", ".join(sorted(required + optional))
                self.fail(_join(field, k), f"unknown key (expected one of: {allowed})")
        for k in required:
            if k not in v:
                self.fail(_join(field, k), "missing required key")
        return v

    def string(self, v, field: str, pattern: re.Pattern | None = None) -> str:
        if not isinstance(v, str):
            self.fail(field, f"expected a string, got {_kind(v)}")
        if not v:
            self.fail(field, "must not be empty")
        if pattern is not None and not pattern.match(v):
            self.fail(field, f"{v!r} must match {pattern.pattern} (letters, digits, '_', '.', '-')")
        return v

    def number(self, v, field: str, lo: float | None = None, hi: float | None = None, lo_open=False) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(field, f"expected a number, got {_kind(v)}")
        v = float(v)
        if not math.isfinite(v):
            self.fail(field, f"must be finite, got {v}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            self.fail(field, f"must be {'>' if lo_open else '>='} {lo}, got {v}")
        if hi is not None and v > hi:
            self.fail(field, f"must be <= {hi}, got {v}")
        return v

    def integer(self, v, field: str, lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(field, f"expected an integer, got {_kind(v)}")
        if lo is not None and v < lo:
            self.fail(field, f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            self.fail(field, f"must be <= {hi}, got {v}")
        return v

    def list_(self, v, field: str, min_len: int = 0) -> list:
        if not isinstance(v, list):
            self.fail(field, f"expected an array, got {_kind(v)}")
        if len(v) < min_len:
            self.fail(field, f"expected at least {min_len} entries, got {len(v)}")
        return v

    # -- arrays ----------------------------------------------------------------------------------
    def floats(self, v, field: str, shape: tuple) -> np.ndarray:
        """A nested array of finite numbers of ``shape`` (ints, or None for any length) -> float64."""
        self._walk(v, field, shape, 0)
        if not v:
            return np.zeros((0, *(s or 0 for s in shape[1:])))
        return np.asarray(v, dtype=np.float64)

    def _walk(self, v, field: str, shape: tuple, depth: int):
        want = shape[depth]
        if not isinstance(v, list):
            self.fail(field, f"expected an array{_shape_str(shape[depth:])}, got {_kind(v)}")
        if want is not None and len(v) != want:
            self.fail(field, f"expected {want} entries{_shape_str(shape[depth:])}, got {len(v)}")
        if depth == len(shape) - 1:
            for i, x in enumerate(v):
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    self.fail(f"{field}[{i}]", f"expected a number, got {_kind(x)}")
                if not math.isfinite(x):
                    self.fail(f"{field}[{i}]", f"must be finite, got {x}")
        else:
            for i, x in enumerate(v):
                self._walk(x, f"{field}[{i}]", shape, depth + 1)

    def bools(self, v, field: str, n: int) -> np.ndarray:
        self.list_(v, field)
        if len(v) != n:
            self.fail(field, f"expected {n} entries, got {len(v)}")
        for i, x in enumerate(v):
            if not isinstance(x, bool):
                self.fail(f"{field}[{i}]", f"expected true or false, got {_kind(x)}")
        return np.asarray(v, dtype=bool)

    # -- paths -----------------------------------------------------------------------------------
    def ply_path(self, v, field: str, base: Path) -> Path:
        """A file path relative to the scenario's folder that stays inside it and exists."""
        rel = self.string(v, field)
        if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or PureWindowsPath(rel).drive:
            self.fail(field, f"{rel!r}: paths must be relative to the scenario file's folder, not absolute")
        if ".." in PurePosixPath(rel.replace("\\", "/")).parts:
            self.fail(field, f"{rel!r}: paths must stay inside the scenario file's folder (no '..')")
        root = base.resolve()
        p = (base / rel).resolve()
        if not p.is_relative_to(root):
            self.fail(field, f"{rel!r} resolves to {p}, outside the scenario's folder {root} (a symlink?)")
        if not p.is_file():
            self.fail(field, f"{rel!r}: file not found ({p})")
        return p


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, str):
        return f"a string ({v[:40]!r})"
    if isinstance(v, list):
        return f"an array of {len(v)}"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _shape_str(shape) -> str:
    return " of shape [" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def _no_duplicate_keys(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ScenarioError(f"duplicate key {k!r}")
        d[k] = v
    return d


# -- parse ---------------------------------------------------------------------------------------


def load(path: str | os.PathLike) -> Scenario:
    """Read and validate one scenario file -> :class:`Scenario` (scene paths resolved, absolute).

    Raises :class:`ScenarioError` naming the file and field for anything invalid: bad JSON, unknown
    or missing keys at any level, wrong types or shapes, NaN/Inf, non-increasing timestamps, a track
    shorter than horizon + 1, agent arrays not horizon + 1 long, unknown lane ids, a PLY that is
    missing or outside the scenario's folder, an unsupported ``format_version``, a speed limit that is
    negative, above ``MAX_SPEED_LIMIT`` or 0 on a lane of the route. Lanes without a speed limit get
    ``DEFAULT_SPEED_LIMIT`` with one warning naming the file.
    """
    path = Path(path)
    file = str(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ScenarioError(f"{file}: cannot read scenario file ({e.strerror or e})") from None
    if not path.is_file():
        raise ScenarioError(f"{file}: not a file")
    if size > MAX_FILE_BYTES:
        raise ScenarioError(f"{file}: {size} bytes is larger than the {MAX_FILE_BYTES} allowed for a scenario")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{file}: cannot read scenario file as UTF-8 text ({e})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{file}: not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except ScenarioError as e:
        raise ScenarioError(f"{file}: {e}") from None
    except RecursionError:
        raise ScenarioError(f"{file}: JSON nested too deeply") from None
    return from_dict(doc, base=path.parent, file=file, path=path)


def from_dict(doc, base: Path, file: str = "<scenario>", path: Path | None = None) -> Scenario:
    """Validate a parsed scenario document; relative scene paths resolve against ``base``."""
    c = _Checker(file)
    if not isinstance(doc, dict):
        c.fail("(top level)", f"expected an object, got {_kind(doc)}")
    readable = " or ".join(str(v) for v in READ_VERSIONS)
    if "format_version" not in doc:
        c.fail("format_version", f"missing required key (this splatdrive reads format_version {readable})")
    fv = doc["format_version"]
    if isinstance(fv, bool) or not isinstance(fv, int) or fv not in READ_VERSIONS:
        c.fail("format_version", f"unsupported version {fv!r} (this splatdrive reads {readable})")
    c.obj(
        doc,
        "",
        required=("format_version", "id", "dt", "horizon", "scene", "map", "expert", "route"),
        optional=("ego", "agents", "static_obstacles", "rig", "tags", "render_distance"),
    )
    sid = c.string(doc["id"], "id", ID_PATTERN)
    dt = c.number(doc["dt"], "dt", lo=0.0, hi=1.0, lo_open=True)
    horizon = c.integer(doc["horizon"], "horizon", lo=1, hi=100_000)
    render_distance = c.number(
        doc.get("render_distance", DEFAULT_RENDER_DISTANCE), "render_distance", lo=0.0, lo_open=True
    )

    # scene
    sc = c.obj(doc["scene"], "scene", required=("background",), optional=("assets",))
    background = c.ply_path(sc["background"], "scene.background", base)
    assets_doc = sc.get("assets", {})
    if not isinstance(assets_doc, dict):
        c.fail("scene.assets", f"expected an object (asset name -> PLY path), got {_kind(assets_doc)}")
    assets = {}
    for name, rel in assets_doc.items():
        c.string(name, "scene.assets", ID_PATTERN)
        assets[name] = c.ply_path(rel, f"scene.assets.{name}", base)
    scene = SceneFiles(background, assets)

    map_data = _parse_map(c, doc["map"])
    lane_ids = {ln.id for ln in map_data.lanes}

    # ego
    ego_doc = c.obj(doc.get("ego", {}), "ego", (), ("length", "width", "height", "center_offset", "wheelbase"))
    d = EgoSpec()
    ego = EgoSpec(
        length=c.number(ego_doc.get("length", d.length), "ego.length", lo=0.0, lo_open=True),
        width=c.number(ego_doc.get("width", d.width), "ego.width", lo=0.0, lo_open=True),
        height=c.number(ego_doc.get("height", d.height), "ego.height", lo=0.0, lo_open=True),
        center_offset=c.number(ego_doc.get("center_offset", d.center_offset), "ego.center_offset"),
        wheelbase=c.number(ego_doc.get("wheelbase", d.wheelbase), "ego.wheelbase", lo=0.0, lo_open=True),
    )

    expert = _parse_track(c, doc["expert"], "expert", dt, horizon)

    route_doc = c.list_(doc["route"], "route", min_len=1)
    route = tuple(c.string(r, f"route[{i}]") for i, r in enumerate(route_doc))
    for i, r in enumerate(route):
        if r not in lane_ids:
            c.fail(f"route[{i}]", f"unknown lane id {r!r} (map lanes: {_preview(sorted(lane_ids))})")
        if i:
            prev = map_data.lane(route[i - 1])
            if r not in prev.successors and r not in (prev.left, prev.right):
                c.fail(f"route[{i}]", f"lane {r!r} is neither a successor nor a neighbour of {prev.id!r}")
    for i, ln in enumerate(map_data.lanes):
        if ln.id in route and ln.speed_limit == 0.0:
            c.fail(
                f"map.lanes[{i}].speed_limit",
                f"0 m/s on lane {ln.id!r}, which the route drives (a closed lane cannot be on the route)",
            )

    agents = []
    seen: set[str] = set()
    for i, a in enumerate(c.list_(doc.get("agents", []), "agents")):
        f = f"agents[{i}]"
        a = c.obj(a, f, ("id", "type", "size", "poses", "present"), ("asset",))
        aid = c.string(a["id"], f"{f}.id", ID_PATTERN)
        if aid in seen:
            c.fail(f"{f}.id", f"duplicate agent id {aid!r}")
        seen.add(aid)
        atype = c.string(a["type"], f"{f}.type")
        if atype not in AGENT_TYPES:
            c.fail(f"{f}.type", f"unknown agent type {atype!r} (expected one of {', '.join(AGENT_TYPES)})")
        asset = a.get("asset")
        if asset is not None:
            c.string(asset, f"{f}.asset")
            if asset not in assets:
                c.fail(f"{f}.asset", f"unknown asset {asset!r} (scene.assets: {_preview(sorted(assets))})")
        size = c.floats(a["size"], f"{f}.size", (3,))
        if (size <= 0).any():
            c.fail(f"{f}.size", f"length, width, height must be > 0 m, got {size.tolist()}")
        n = horizon + 1
        if not isinstance(a["poses"], list) or len(a["poses"]) != n:
            got = f"{len(a['poses'])} entries" if isinstance(a["poses"], list) else _kind(a["poses"])
            c.fail(f"{f}.poses", f"expected one pose per step 0..horizon ({n} = horizon + 1), got {got}")
        poses = c.floats(a["poses"], f"{f}.poses", (n, 4))
        if not isinstance(a["present"], list) or len(a["present"]) != n:
            got = f"{len(a['present'])} entries" if isinstance(a["present"], list) else _kind(a["present"])
            c.fail(f"{f}.present", f"expected one flag per step 0..horizon ({n} = horizon + 1), got {got}")
        present = c.bools(a["present"], f"{f}.present", n)
        agents.append(Agent(aid, atype, asset, size, poses, present))

    obstacles = []
    seen = set()
    for i, o in enumerate(c.list_(doc.get("static_obstacles", []), "static_obstacles")):
        f = f"static_obstacles[{i}]"
        o = c.obj(o, f, ("id", "pose", "size"))
        oid = c.string(o["id"], f"{f}.id", ID_PATTERN)
        if oid in seen:
            c.fail(f"{f}.id", f"duplicate obstacle id {oid!r}")
        seen.add(oid)
        size = c.floats(o["size"], f"{f}.size", (3,))
        if (size <= 0).any():
            c.fail(f"{f}.size", f"length, width, height must be > 0 m, got {size.tolist()}")
        obstacles.append(StaticObstacle(oid, c.floats(o["pose"], f"{f}.pose", (4,)), size))

    rig_doc = c.obj(doc.get("rig", {}), "rig", (), ("name", "width", "height"))
    rd = RigSpec()
    rig_name = c.string(rig_doc.get("name", rd.name), "rig.name")
    if rig_name not in RIGS:
        c.fail("rig.name", f"unknown camera rig {rig_name!r} (built-in rigs: {', '.join(RIGS)})")
    rig = RigSpec(
        rig_name,
        c.integer(rig_doc.get("width", rd.width), "rig.width", lo=1, hi=16384),
        c.integer(rig_doc.get("height", rd.height), "rig.height", lo=1, hi=16384),
    )

    tags_doc = doc.get("tags", {})
    if not isinstance(tags_doc, dict):
        c.fail("tags", f"expected an object, got {_kind(tags_doc)}")
    tags = {}
    for k, v in tags_doc.items():
        if isinstance(v, float) and not math.isfinite(v):
            c.fail(f"tags.{k}", f"must be finite, got {v}")
        if not isinstance(v, (str, int, float, bool)):
            c.fail(f"tags.{k}", f"expected a string, number or boolean, got {_kind(v)}")
        tags[k] = v

    return Scenario(
        id=sid,
        dt=dt,
        horizon=horizon,
        scene=scene,
        map=map_data,
        ego=ego,
        expert=expert,
        route=route,
        agents=tuple(agents),
        static_obstacles=tuple(obstacles),
        rig=rig,
        tags=tags,
        path=path,
        render_distance=render_distance,
    )


def _parse_map(c: _Checker, doc) -> MapData:
    m = c.obj(doc, "map", ("lanes",), ("road_edges",))
    lanes_doc = c.list_(m["lanes"], "map.lanes", min_len=1)
    raw = []
    ids: list[str] = []
    no_limit = 0
    for i, ln in enumerate(lanes_doc):
        f = f"map.lanes[{i}]"
        ln = c.obj(ln, f, ("id", "centerline", "width"), ("left", "right", "successors", "speed_limit"))
        lid = c.string(ln["id"], f"{f}.id", ID_PATTERN)
        if lid in ids:
            c.fail(f"{f}.id", f"duplicate lane id {lid!r}")
        ids.append(lid)
        cl = c.floats(ln["centerline"], f"{f}.centerline", (None, 2))
        if len(cl) < 2:
            c.fail(f"{f}.centerline", f"expected at least 2 points, got {len(cl)}")
        seg = np.linalg.norm(np.diff(cl, axis=0), axis=1)
        if (seg <= 0).any():
            j = int(np.flatnonzero(seg <= 0)[0])
            c.fail(f"{f}.centerline[{j + 1}]", "repeats the previous point (segments must have length > 0)")
        width = c.number(ln["width"], f"{f}.width", lo=0.0, lo_open=True)
        if "speed_limit" in ln:
            limit = c.number(ln["speed_limit"], f"{f}.speed_limit", lo=0.0)
            if limit > MAX_SPEED_LIMIT:
                c.fail(
                    f"{f}.speed_limit",
                    f"must be <= {MAX_SPEED_LIMIT:g} m/s ({MAX_SPEED_LIMIT * 3.6:.0f} km/h), got {limit!r} "
                    "(speed limits are in m/s: km/h / 3.6)",
                )
        else:
            limit, no_limit = DEFAULT_SPEED_LIMIT, no_limit + 1
        succ = tuple(
            c.string(s, f"{f}.successors[{j}]")
            for j, s in enumerate(c.list_(ln.get("successors", []), f"{f}.successors"))
        )
        left = ln.get("left")
        right = ln.get("right")
        if left is not None:
            c.string(left, f"{f}.left")
        if right is not None:
            c.string(right, f"{f}.right")
        raw.append((f, Lane(lid, cl, width, left, right, succ, limit)))
    if no_limit:
        log.warning(
            "%s: %d of %d lanes have no speed_limit (a file from before speed limits?); they get the default "
            "%.2f m/s (%.0f km/h)", c.file, no_limit, len(lanes_doc), DEFAULT_SPEED_LIMIT, DEFAULT_SPEED_LIMIT * 3.6,
        )  # fmt: skip
    known = set(ids)
    for f, ln in raw:
        for key, ref in (("left", ln.left), ("right", ln.right)):
            if ref is not None and ref not in known:
                c.fail(f"{f}.{key}", f"unknown lane id {ref!r} (map lanes: {_preview(ids)})")
            if ref == ln.id:
                c.fail(f"{f}.{key}", f"lane {ln.id!r} cannot be its own neighbour")
        for j, s in enumerate(ln.successors):
            if s not in known:
                c.fail(f"{f}.successors[{j}]", f"unknown lane id {s!r} (map lanes: {_preview(ids)})")
    edges = []
    for i, e in enumerate(c.list_(m.get("road_edges", []), "map.road_edges")):
        pl = c.floats(e, f"map.road_edges[{i}]", (None, 2))
        if len(pl) < 2:
            c.fail(f"map.road_edges[{i}]", f"expected at least 2 points, got {len(pl)}")
        edges.append(pl)
    return MapData(tuple(ln for _, ln in raw), tuple(edges))


def _parse_track(c: _Checker, doc, f: str, dt: float, horizon: int) -> Track:
    tr = c.obj(doc, f, ("t", "poses", "speed"))
    t = c.floats(tr["t"], f"{f}.t", (None,))
    T = len(t)
    if T < horizon + 1:
        c.fail(f"{f}.t", f"the track has {T} timestamps; it must cover steps 0..horizon ({horizon + 1} or more)")
    for i in range(1, T):
        if not t[i] > t[i - 1]:
            c.fail(f"{f}.t[{i}]", f"timestamps must increase ({float(t[i])!r} after {float(t[i - 1])!r})")
    grid = t[0] + dt * np.arange(T)
    off = np.abs(t - grid)
    if (off > TIME_GRID_TOLERANCE * dt).any():
        i = int(np.argmax(off > TIME_GRID_TOLERANCE * dt))
        c.fail(
            f"{f}.t[{i}]",
            f"expected t[0] + {i} * dt = {grid[i]:.6g} s (one pose per step of dt = {dt} s), got {float(t[i])!r}",
        )
    if not isinstance(tr["poses"], list) or len(tr["poses"]) != T:
        got = f"{len(tr['poses'])} entries" if isinstance(tr["poses"], list) else _kind(tr["poses"])
        c.fail(f"{f}.poses", f"expected {T} poses (one per timestamp in {f}.t), got {got}")
    poses = c.floats(tr["poses"], f"{f}.poses", (T, 4))
    if not isinstance(tr["speed"], list) or len(tr["speed"]) != T:
        got = f"{len(tr['speed'])} entries" if isinstance(tr["speed"], list) else _kind(tr["speed"])
        c.fail(f"{f}.speed", f"expected {T} speeds (one per timestamp in {f}.t), got {got}")
    speed = c.floats(tr["speed"], f"{f}.speed", (T,))
    if (speed < 0).any():
        i = int(np.argmax(speed < 0))
        c.fail(f"{f}.speed[{i}]", f"must be >= 0 m/s, got {float(speed[i])!r}")
    return Track(t, poses, speed)


def _preview(names, n: int = 8) -> str:
    names = list(names)
    s = ", ".join(repr(x) for x in names[:n])
    return s + (f", ... ({len(names)} in all)" if len(names) > n else "")


# -- write ---------------------------------------------------------------------------------------


def to_dict(scenario: Scenario, base: Path) -> dict:
    """The JSON document of ``scenario`` with scene paths relative to ``base`` (the file's folder)."""
    base = Path(base).resolve()

    def rel(p: Path, field: str) -> str:
        p = Path(p).resolve()
        if not p.is_relative_to(base):
            raise ScenarioError(f"{field}: {p} is outside {base}; a scenario's PLYs must live in (or below) its folder")
        return p.relative_to(base).as_posix()

    s = scenario

    def fl(a) -> list:
        return np.asarray(a, dtype=np.float64).tolist()

    doc = {
        "format_version": FORMAT_VERSION,
        "id": s.id,
        "dt": float(s.dt),
        "horizon": int(s.horizon),
        "render_distance": float(s.render_distance),
        "tags": dict(s.tags),
        "rig": {"name": s.rig.name, "width": int(s.rig.width), "height": int(s.rig.height)},
        "ego": {
            "length": float(s.ego.length),
            "width": float(s.ego.width),
            "height": float(s.ego.height),
            "center_offset": float(s.ego.center_offset),
            "wheelbase": float(s.ego.wheelbase),
        },
        "scene": {
            "background": rel(s.scene.background, "scene.background"),
            "assets": {k: rel(v, f"scene.assets.{k}") for k, v in s.scene.assets.items()},
        },
        "route": list(s.route),
        "map": {
            "lanes": [
                {
                    "id": ln.id,
                    "width": float(ln.width),
                    "left": ln.left,
                    "right": ln.right,
                    "successors": list(ln.successors),
                    "speed_limit": float(ln.speed_limit),
                    "centerline": fl(ln.centerline),
                }
                for ln in s.map.lanes
            ],
            "road_edges": [fl(e) for e in s.map.road_edges],
        },
        "expert": {"t": fl(s.expert.t), "speed": fl(s.expert.speed), "poses": fl(s.expert.poses)},
        "agents": [
            {
                "id": a.id,
                "type": a.type,
                "asset": a.asset,
                "size": fl(a.size),
                "present": [bool(x) for x in np.asarray(a.present)],
                "poses": fl(a.poses),
            }
            for a in s.agents
        ],
        "static_obstacles": [{"id": o.id, "pose": fl(o.pose), "size": fl(o.size)} for o in s.static_obstacles],
    }
    return doc


def dumps(doc, indent: int = 2) -> str:
    """JSON text with objects indented and arrays of numbers (and of short number arrays) on one
    line each, so that files stay small and readable. Rejects NaN/Inf."""

    def scalar(v) -> str:
        return json.dumps(v, allow_nan=False)

    def flat(v) -> bool:
        return isinstance(v, list) and all(not isinstance(x, (list, dict)) for x in v)

    def enc(v, level: int) -> str:
        pad, pad1 = " " * (indent * level), " " * (indent * (level + 1))
        if isinstance(v, dict):
            if not v:
                return "{}"
            items = [f"{pad1}{json.dumps(k)}: {enc(x, level + 1)}" for k, x in v.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, list):
            if flat(v):
                return "[" + ", ".join(scalar(x) for x in v) + "]"
            if all(flat(x) for x in v):
                return "[\n" + ",\n".join(pad1 + enc(x, level + 1) for x in v) + "\n" + pad + "]"
            return "[\n" + ",\n".join(pad1 + enc(x, level + 1) for x in v) + "\n" + pad + "]"
        return scalar(v)

    return enc(doc, 0) + "\n"


def save(scenario: Scenario, path: str | os.PathLike) -> Path:
    """Write ``scenario`` to ``path`` (atomically: temporary file, then rename).

    Scene paths are written relative to the file's folder, so the PLYs must be inside it. The
    result is validated by loading it back before it replaces ``path``; returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = dumps(to_dict(scenario, path.parent))
    except ValueError as e:
        if isinstance(e, ScenarioError):
            raise ScenarioError(f"{path}: {e}") from None
        raise ScenarioError(f"{path}: cannot write scenario {scenario.id!r}: {e}") from None
    from_dict(json.loads(text), base=path.parent, file=str(path))  # never write what load would refuse
    atomic_write(path, text)
    return path


# -- suites --------------------------------------------------------------------------------------


def scenario_files(folder: str | os.PathLike) -> list[Path]:
    """The scenario files of a suite folder: its ``*.json`` files (not hidden ones), sorted by name, then
    those of its complete shard folders (``shard-NN/`` with their ``suite.yaml``: a built-in suite's
    layout, ``scenarios.builtin``), shard by shard."""
    folder = Path(folder)
    out = sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))
    for shard in sorted(folder.glob("shard-*")):
        if shard.is_dir() and (shard / "suite.yaml").is_file():
            out += sorted(p for p in shard.glob("*.json") if not p.name.startswith("."))
    return out


def load_folder(folder: str | os.PathLike, skip_broken: bool = False) -> list[Scenario]:
    """Every scenario of a suite folder (its ``*.json`` files, by name). ``scenarios.load_suite`` also
    takes a built-in suite's name.

    A broken file raises :class:`ScenarioError` listing every broken file and why; with
    ``skip_broken=True`` each is logged as a warning and left out instead.
    """
    p = Path(folder)
    if not p.is_dir():
        raise ScenarioError(f"{p}: not a folder of scenario files")
    files = scenario_files(p)
    if not files:
        raise ScenarioError(f"{p}: no scenario files (*.json) in this folder")
    return load_files(files, str(p), skip_broken)


def load_files(files: list[Path], where: str, skip_broken: bool = False) -> list[Scenario]:
    """The scenarios of ``files`` (a suite, named ``where`` in errors), in order; broken files and
    ``skip_broken`` as :func:`load_folder`; ids must be unique."""
    p = where
    out, broken = [], []
    for f in files:
        try:
            out.append(load(f))
        except ScenarioError as e:
            broken.append(str(e))
    if broken and not skip_broken:
        raise ScenarioError(
            f"{p}: {len(broken)} of {len(files)} scenario files are broken "
            f"(skip_broken=True, in load_suite or the env config, leaves them out):\n  " + "\n  ".join(broken)
        )
    for msg in broken:
        log.warning("skipping broken scenario: %s", msg)
    ids: dict[str, Path | None] = {}
    for s in out:
        if s.id in ids:
            raise ScenarioError(f"{s.path}: id: {s.id!r} is also the id of {ids[s.id]}; ids must be unique in a suite")
        ids[s.id] = s.path
    return out
