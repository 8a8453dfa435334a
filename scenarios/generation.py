"""Procedural digital-twin scenarios: plan, check, build and write them (``python -m scenarios.generate``
is the command line over :func:`generate_suite`).

For each scenario: draw the kind's road, traffic and ego start from the seed (``scenarios.kinds``),
plan and drive the expert through the env's kinematics (``scenarios.expert``), check it
(``scenarios.checks``: collision-free with margin, comfortable, labels that replay it, and the kind's
constant-speed collision), and redraw on failure; then build the procedural background (lane
markings, curbs, static obstacles baked in) and the vehicle assets, and write
``DIR/<id>.json``, ``DIR/backgrounds/<id>.ply`` and ``DIR/assets/<name>.ply`` (assets shared by name).

Seeds: scenario i of a run gets seed ``SUITE_SEED_BASE[suite] + S + i`` and kind ``kinds[i % K]``;
suites draw from disjoint ranges of ``SEEDS_PER_SUITE`` seeds each (train from 0, val from
1,000,000, test from 2,000,000; any other suite name from a range picked by a hash of the name),
so the same (suite, seed) always gives the same scenario, and no two suites share one.

Parallel generation runs its workers as fresh interpreters (``python -m scenarios.generate --worker``,
jobs in on stdin, one JSON line per finished scenario out on stdout), never as ``multiprocessing``
children: those re-run the caller's main script (spawn, forkserver), which in a script without an
``if __name__ == "__main__":`` guard would build the same suite again and wait forever on the lock the
parent holds; a subprocess runs no caller code, from a script, a notebook, a Ray worker or a daemonic
pool child alike.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from scenarios.checks import constant_speed_states, expert_problems, expert_report, first_constant_speed_collision
from scenarios.expert import Obstacles, drive, plan_speed
from scenarios.format import (
    DEFAULT_DT,
    DEFAULT_HORIZON,
    DEFAULT_RENDER_DISTANCE,
    KINDS,
    LABEL_STEPS,
    Agent,
    EgoSpec,
    MapData,
    RigSpec,
    Scenario,
    SceneFiles,
    StaticObstacle,
    Track,
)
from scenarios.io import save
from scenarios.kinds import DRAFTS, Draft, Garage
from sim import procedural
from sim.collision import StaticIndex
from sim.files import atomic_write
from sim.ply import save_ply

log = logging.getLogger("scenarios.generate")

SEEDS_PER_SUITE = 1_000_000
SUITE_SEED_BASE = {"train": 0, "val": 1_000_000, "test": 2_000_000}
MAX_ATTEMPTS = 40
DEFAULT_GAUSSIANS = 100_000


def suite_seed_base(suite: str) -> int:
    """First seed of a suite's range: train 0, val 1e6, test 2e6; other names 1e7 + 1e6 * (crc32 % 1000)."""
    if suite in SUITE_SEED_BASE:
        return SUITE_SEED_BASE[suite]
    return 10_000_000 + SEEDS_PER_SUITE * (zlib.crc32(suite.encode()) % 1000)


def scenario_id(suite: str, kind: str, seed: int) -> str:
    return f"{suite}-{kind}-{seed:08d}"


# -- planning --------------------------------------------------------------------------------------


@dataclass
class Planned:
    """A planned scenario: its Scenario (scene paths not yet written) and the draft it came from."""

    scenario: Scenario
    draft: Draft
    attempts: int


def assemble(draft: Draft, states: np.ndarray, sid: str, horizon: int, dt: float, tags: dict) -> Scenario:
    """The Scenario of a draft and its expert drive states [horizon + 1 + LABEL_STEPS, 4]; the scene
    files are placeholders until :func:`write_scenario` builds them."""
    ego = EgoSpec()
    T = len(states)
    poses = np.stack([states[:, 0], states[:, 1], np.zeros(T), states[:, 2]], axis=1)
    expert = Track(np.arange(T) * dt, poses, states[:, 3].copy())
    agents = tuple(
        Agent(a.id, a.type, a.asset, np.asarray(a.size, float), np.asarray(a.poses, float), np.asarray(a.present, bool))
        for a in draft.agents
    )
    obstacles = tuple(
        StaticObstacle(o.id, np.asarray(o.pose, float), np.asarray(o.size, float)) for o in draft.obstacles
    )
    assets = {a.asset: Path(f"assets/{a.asset}.ply") for a in draft.agents if a.asset}
    return Scenario(
        id=sid,
        dt=dt,
        horizon=horizon,
        scene=SceneFiles(Path(f"backgrounds/{sid}.ply"), assets),
        map=MapData(tuple(draft.net.lanes), tuple(np.asarray(c.polyline, float) for c in draft.net.edges)),
        ego=ego,
        expert=expert,
        route=tuple(draft.route),
        agents=agents,
        static_obstacles=obstacles,
        rig=RigSpec(),
        tags=tags,
        render_distance=DEFAULT_RENDER_DISTANCE,
    )


def difficulty(scenario: Scenario, report: dict, draft: Draft) -> str:
    """easy / medium / hard: from how hard the expert brakes, how soon the constant-speed driver
    would collide, and (lane keeping) how tight the curve is."""
    _, step = first_constant_speed_collision(scenario, along_route=draft.must_collide == "route")
    ttc = np.inf if step is None or draft.must_collide is None else step * scenario.dt
    radius = draft.params.get("radius", np.inf)
    # braking over 0.5 s windows: single steps carry the bins' +-1 m/s^2 quantisation
    v = scenario.expert.speed[: scenario.horizon + 1]
    decel = float(max(np.max(v[:-5] - v[5:]) / 0.5, 0.0))
    if decel >= 1.75 or ttc < 4.0 or radius < 60.0:
        return "hard"
    if decel >= 0.9 or ttc < 6.0 or radius < 100.0:
        return "medium"
    return "easy"


def plan_scenario(
    kind: str,
    seed: int,
    suite: str,
    garage: Garage,
    horizon: int = DEFAULT_HORIZON,
    dt: float = DEFAULT_DT,
    first_attempt: int = 0,
) -> Planned:
    """Draw, plan, drive and check one scenario of ``kind`` from ``seed``; redraw (attempt 1, 2, ...)
    until every check of ``scenarios.checks.expert_problems`` passes. Deterministic in (kind, seed)."""
    if kind not in DRAFTS:
        raise ValueError(f"unknown scenario kind {kind!r}; kinds are {', '.join(KINDS)}")
    kind_index = KINDS.index(kind)
    sid = scenario_id(suite, kind, seed)
    problems: list[str] = []
    for attempt in range(first_attempt, first_attempt + MAX_ATTEMPTS):
        rng = np.random.default_rng([seed, kind_index, attempt])
        draft = DRAFTS[kind](rng, garage, horizon, dt)
        obstacles = Obstacles(
            np.stack([a.poses for a in draft.agents]) if draft.agents else np.zeros((0, horizon + 1, 4)),
            np.stack([a.size for a in draft.agents]) if draft.agents else np.zeros((0, 3)),
            np.stack([a.present for a in draft.agents]) if draft.agents else np.zeros((0, horizon + 1), bool),
            np.stack([o.pose for o in draft.obstacles]) if draft.obstacles else np.zeros((0, 4)),
            np.stack([o.size for o in draft.obstacles]) if draft.obstacles else np.zeros((0, 3)),
        )
        steps = horizon + LABEL_STEPS  # the drive has horizon + 1 + LABEL_STEPS states
        n_plan = steps + 1 + LABEL_STEPS
        plan = plan_speed(draft.path, draft.v0, draft.v_cruise, EgoSpec(), obstacles, dt, n_plan, rng)
        if plan.collisions:
            problems = [f"no collision-free speed plan ({plan.collisions} steps in collision)"]
            log.debug("%s attempt %d: %s", sid, attempt, problems[0])
            continue
        d = drive(draft.path, plan.s, draft.v0, EgoSpec(), dt, steps)
        tags: dict[str, str | int | float | bool] = {"kind": kind, "suite": suite, "seed": int(seed)}
        scenario = assemble(draft, d.states, sid, horizon, dt, tags)
        problems = expert_problems(scenario, draft.must_collide or None)
        if problems:
            log.debug("%s attempt %d: %s", sid, attempt, "; ".join(problems))
            continue
        report = expert_report(scenario)
        tags["difficulty"] = difficulty(scenario, report, draft)
        tags["attempt"] = attempt
        for k, v in draft.params.items():
            tags[k] = round(float(v), 3) if isinstance(v, (float, np.floating)) else v
        return Planned(replace(scenario, tags=tags), draft, attempt + 1)
    raise RuntimeError(f"{sid}: no valid scenario in {MAX_ATTEMPTS} draws; last problems: {'; '.join(problems)}")


# -- assets and backgrounds -----------------------------------------------------------------------

# vehicle kinds of moving traffic, with how often they appear
TRAFFIC_MIX = {"sedan": 0.32, "hatchback": 0.2, "suv": 0.25, "van": 0.12, "truck": 0.07, "bus": 0.04}
PARKED_KINDS = ("sedan", "hatchback", "suv", "van")
# body colours (linear RGB) by name; an asset is "<kind>_<colour>", shared by every scenario of a folder
PAINTS = {
    "white": (0.82, 0.82, 0.80),
    "black": (0.03, 0.03, 0.035),
    "silver": (0.52, 0.53, 0.55),
    "grey": (0.22, 0.23, 0.24),
    "red": (0.55, 0.04, 0.03),
    "blue": (0.05, 0.14, 0.45),
    "green": (0.06, 0.25, 0.10),
    "yellow": (0.80, 0.60, 0.08),
}


class ProceduralGarage:
    """Vehicles and props from ``sim.procedural``: sizes for planning, clouds for writing assets."""

    def __init__(self):
        self._sizes: dict[str, np.ndarray] = {}

    def size(self, kind: str) -> np.ndarray:
        """[3] (length, width, height) m of a vehicle kind or a prop kind."""
        if kind not in self._sizes:
            if kind in procedural.VEHICLE_KINDS:
                self._sizes[kind] = np.asarray(procedural.build_vehicle(kind, None, 0)[1], dtype=np.float64)
            else:
                self._sizes[kind] = np.asarray(procedural.build_prop(kind, 0)[1], dtype=np.float64)
        return self._sizes[kind]

    def pick_vehicle(self, rng: np.random.Generator) -> tuple[str, np.ndarray]:
        kinds = list(TRAFFIC_MIX)
        p = np.array([TRAFFIC_MIX[k] for k in kinds])
        kind = kinds[int(rng.choice(len(kinds), p=p / p.sum()))]
        colour = list(PAINTS)[int(rng.integers(len(PAINTS)))]
        return f"{kind}_{colour}", self.size(kind)

    def parked(self, rng: np.random.Generator, barrier: bool) -> tuple[str, np.ndarray]:
        kind = "barrier" if barrier else PARKED_KINDS[int(rng.integers(len(PARKED_KINDS)))]
        return kind, self.size(kind)

    def asset_cloud(self, name: str):
        """The GaussianCloud of asset ``<kind>_<colour>`` (deterministic in the name)."""
        kind, _, colour = name.partition("_")
        if kind not in procedural.VEHICLE_KINDS or colour not in PAINTS:
            raise ValueError(f"unknown asset {name!r}: expected <vehicle kind>_<colour>")
        return procedural.build_vehicle(kind, PAINTS[colour], zlib.crc32(name.encode()))[0]

    def garage(self) -> Garage:
        return Garage(self.pick_vehicle, self.parked)


_MARKING_KIND = {
    ("solid", "white"): "solid_white",
    ("dashed", "white"): "dashed_white",
    ("solid", "yellow"): "solid_yellow",
    ("double", "yellow"): "double_yellow",
    ("stop_line", "white"): "stop_line",
}


def simplify_polyline(p: np.ndarray, tol: float = 0.02) -> np.ndarray:
    """Douglas-Peucker: the vertices of polyline p [M, 2] needed to stay within ``tol`` metres of it
    (a straight road keeps its two ends). The map keeps 1 m vertices; the background builder's cost
    grows with the vertex count, not with the shape."""
    p = np.asarray(p, dtype=np.float64)
    keep = np.zeros(len(p), dtype=bool)
    keep[[0, -1]] = True
    stack = [(0, len(p) - 1)]
    while stack:
        i, j = stack.pop()
        if j <= i + 1:
            continue
        a, b = p[i], p[j]
        ab = b - a
        L = np.hypot(*ab)
        q = p[i + 1 : j] - a
        d = np.abs(ab[0] * q[:, 1] - ab[1] * q[:, 0]) / L if L > 0 else np.hypot(q[:, 0], q[:, 1])
        k = int(np.argmax(d))
        if d[k] > tol:
            m = i + 1 + k
            keep[m] = True
            stack += [(i, m), (m, j)]
    return p[keep]


def street_layout(draft: Draft):
    """The ``sim.procedural.StreetLayout`` of a draft: road strips, lane markings from the lane
    boundaries, curbs as road edges, and the static obstacles as props (baked into the background)."""
    net = draft.net
    simple = simplify_polyline
    marks = [
        procedural.Marking(simple(st.polyline), _MARKING_KIND[(st.style, st.color)])
        for st in net.stripes
        if len(st.polyline) >= 2 and np.linalg.norm(st.polyline[-1] - st.polyline[0]) > 0.5
    ]
    return procedural.StreetLayout(
        roads=tuple(procedural.RoadSurface(simple(st.centerline), st.width) for st in net.strips),
        markings=tuple(marks),
        edges=tuple(procedural.RoadEdge(simple(c.polyline), c.outward) for c in net.edges),
        props=tuple(
            procedural.Prop(o.prop, float(o.pose[0]), float(o.pose[1]), float(o.pose[3])) for o in draft.obstacles
        ),
    )


STATIC_LIFT = 0.3  # m: the env's static query box starts this high (curbs, paint stay below)
STATIC_MIN_GAUSSIANS = 8  # the env's default count for a static collision


def static_problems(scenario: Scenario, background, draft: Draft) -> list[str]:
    """Static-Gaussian checks, as the env queries them: the expert's (lifted) box finds none along its
    drive; each static obstacle's box holds its baked Gaussians; a parked obstacle is hit by the
    constant-speed driver through the Gaussians too."""
    index = StaticIndex.from_cloud(background)
    ego = scenario.ego
    size = np.array([ego.length, ego.width, ego.height - STATIC_LIFT])

    def counts(states):
        yaw = states[:, 2]
        c = states[:, :2] + ego.center_offset * np.stack([np.cos(yaw), np.sin(yaw)], 1)
        centers = np.concatenate([c, np.full((len(c), 1), STATIC_LIFT)], 1)
        return index.count_in_boxes(centers, size, yaw)

    out = []
    n = counts(scenario.expert.states())
    if (n >= STATIC_MIN_GAUSSIANS).any():
        k = int(np.argmax(n >= STATIC_MIN_GAUSSIANS))
        out.append(f"the expert's box meets {int(n[k])} static Gaussians at step {k}")
    for o in scenario.static_obstacles:
        sz = np.asarray(o.size, float) - [0.0, 0.0, STATIC_LIFT]
        m = index.count_in_box([o.pose[0], o.pose[1], STATIC_LIFT], sz, float(o.pose[3]))
        if m < STATIC_MIN_GAUSSIANS:
            out.append(f"static obstacle {o.id!r}: only {m} Gaussians in its box")
    if draft.must_collide == "static":
        if not (counts(constant_speed_states(scenario)) >= STATIC_MIN_GAUSSIANS).any():
            out.append("the constant-speed driver meets no static Gaussians")
    return out


# -- writing ---------------------------------------------------------------------------------------


def write_scenario(planned: Planned, out: Path, shop: ProceduralGarage, gaussians: int) -> tuple[Scenario, list[str]]:
    """Build and write the background PLY, missing asset PLYs and the scenario JSON into ``out``.

    Returns (the scenario as written, static problems); with problems nothing but the PLYs is written.
    """
    sc, draft = planned.scenario, planned.draft
    bg = procedural.build_background(street_layout(draft), zlib.crc32(sc.id.encode()), int(gaussians))
    problems = static_problems(sc, bg, draft)
    if problems:
        return sc, problems
    bg_path = out / "backgrounds" / f"{sc.id}.ply"
    bg_path.parent.mkdir(parents=True, exist_ok=True)
    save_ply(bg, bg_path)
    assets = {}
    for name in sorted({a.asset for a in sc.agents if a.asset}):
        p = out / "assets" / f"{name}.ply"
        if not p.is_file():  # shared by name; a concurrent writer's atomic rename wins, same bytes
            p.parent.mkdir(parents=True, exist_ok=True)
            save_ply(shop.asset_cloud(name), p)
        assets[name] = p
    sc = replace(sc, scene=SceneFiles(bg_path, assets))
    save(sc, out / f"{sc.id}.json")
    return sc, []


def generate_one(
    kind: str, seed: int, suite: str, out: Path, gaussians: int, horizon: int = DEFAULT_HORIZON, shop=None
) -> Scenario:
    """Plan, check, build and write one scenario (see the module docstring). Deterministic."""
    shop = shop or ProceduralGarage()
    first = 0
    for _ in range(4):
        planned = plan_scenario(kind, seed, suite, shop.garage(), horizon, first_attempt=first)
        sc, problems = write_scenario(planned, Path(out), shop, gaussians)
        if not problems:
            return sc
        log.info("%s: redrawing after static checks: %s", sc.id, "; ".join(problems))
        first = int(sc.tags["attempt"]) + 1
    raise RuntimeError(f"{scenario_id(suite, kind, seed)}: static checks keep failing: {'; '.join(problems)}")


# -- a suite ---------------------------------------------------------------------------------------

Job = tuple[str, int, str, str, int, int]  # (kind, seed, suite, out folder, gaussians, horizon)


def run_job(job: Job, shop: ProceduralGarage | None = None) -> tuple[str, str, float]:
    """Generate one scenario of a suite: (scenario id, difficulty, seconds)."""
    kind, seed, suite, out, gaussians, horizon = job
    t0 = time.perf_counter()
    sc = generate_one(kind, int(seed), suite, Path(out), int(gaussians), int(horizon), shop)
    return sc.id, str(sc.tags.get("difficulty", "")), time.perf_counter() - t0


def generate_suite(
    out: str | os.PathLike,
    suite: str = "train",
    count: int = 14,
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    gaussians: int = DEFAULT_GAUSSIANS,
    horizon: int = DEFAULT_HORIZON,
    workers: int = 1,
    progress: bool = True,
    on_scenario: Callable[[int, int], None] | None = None,
) -> list[Path]:
    """Generate ``count`` scenarios into ``out``: scenario i has kind ``kinds[i % len(kinds)]`` and
    seed ``suite_seed_base(suite) + seed + i``. ``workers`` processes share the work (0: one per CPU,
    at most 4; more than one: ``python -m scenarios.generate --worker`` subprocesses, see the module
    docstring); the result does not depend on it. ``on_scenario(done, count)`` is called as each
    scenario is written. Writes ``out/suite.yaml`` (what was generated, how) last. Returns the
    scenario files, in scenario order."""
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"unknown scenario kinds {bad}; kinds are {', '.join(KINDS)}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if not 0 <= seed or seed + count > SEEDS_PER_SUITE:
        raise ValueError(
            f"seed + count must stay within [0, {SEEDS_PER_SUITE}] (a suite's seed range), got {seed}+{count}"
        )
    if gaussians < 1000:
        raise ValueError(f"gaussians must be >= 1000 per background, got {gaussians}")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = suite_seed_base(suite)
    jobs: list[Job] = [
        (kinds[i % len(kinds)], base + seed + i, suite, str(out), int(gaussians), int(horizon)) for i in range(count)
    ]
    if workers <= 0:
        workers = min(os.cpu_count() or 1, 4)
    workers = min(workers, count)
    t0 = time.perf_counter()
    results: dict[int, tuple[str, str, float]] = {}
    bar = _progress(count, progress)
    if workers > 1:
        finished = _in_subprocesses(jobs, workers)
    else:
        shop = ProceduralGarage()
        finished = ((i, run_job(j, shop)) for i, j in enumerate(jobs))
    for i, r in finished:
        results[i] = r
        bar(r)
        if on_scenario is not None:
            on_scenario(len(results), count)
    bar(None)
    ordered = [results[i] for i in range(count)]
    elapsed = time.perf_counter() - t0
    manifest = {
        "format_version": 1,
        "suite": suite,
        "seed_range": [base + seed, base + seed + count - 1],
        "kinds": list(kinds),
        "gaussians": int(gaussians),
        "horizon": int(horizon),
        "generated_in_s": round(elapsed, 1),
        "scenarios": [{"id": i, "difficulty": d, "seconds": round(s, 2)} for i, d, s in ordered],
    }
    atomic_write(out / "suite.yaml", yaml.safe_dump(manifest, sort_keys=False))
    log.info("%d scenarios in %.1f s -> %s", count, elapsed, out)
    return [out / f"{i}.json" for i, _, _ in ordered]


# -- workers: fresh interpreters, never multiprocessing children ----------------------------------------

WORKER_COMMAND = ("-m", "scenarios.generate", "--worker")
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding the scenarios package


def _in_subprocesses(jobs: list[Job], workers: int):
    """Yield (job index, run_job's result) as ``workers`` subprocesses finish them (jobs dealt round-robin).

    A worker that fails stops the others and raises a RuntimeError with the tail of its stderr."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done: queue.Queue = queue.Queue()
    procs = []
    try:
        for w in range(workers):
            mine = [(i, j) for i, j in enumerate(jobs) if i % workers == w]
            err = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                [sys.executable, *WORKER_COMMAND],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=_PACKAGE_ROOT,  # so that no folder of the caller's shadows the packages
                env=env,
                text=True,
            )
            procs.append((proc, err))
            assert proc.stdin is not None  # stdin=PIPE
            proc.stdin.write(json.dumps({"parent": os.getpid(), "jobs": mine}))
            proc.stdin.close()
            threading.Thread(target=_read_worker, args=(w, proc, done), daemon=True).start()
        running = workers
        while running:
            kind, w, payload = done.get()
            if kind == "result":
                yield payload["index"], (payload["id"], payload["difficulty"], payload["seconds"])
                continue
            running -= 1
            proc, err = procs[w]
            if payload != 0:
                err.seek(0)
                tail = err.read().decode("utf-8", "replace")[-3000:]
                raise RuntimeError(
                    f"scenario generation worker {w} (pid {proc.pid}, {sys.executable} "
                    f"{' '.join(WORKER_COMMAND)}) exited with code {payload}; its stderr ends with:\n{tail}"
                )
    finally:
        for proc, err in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.close()


def _read_worker(w: int, proc: subprocess.Popen, done: queue.Queue) -> None:
    assert proc.stdout is not None  # stdout=PIPE
    for line in proc.stdout:
        if line.strip():
            done.put(("result", w, json.loads(line)))
    done.put(("exit", w, proc.wait()))


def serve_jobs(stdin=None, stdout=None) -> int:
    """The worker side (``python -m scenarios.generate --worker``): read ``{"parent": pid, "jobs":
    [[index, job], ...]}`` from stdin, generate each, write one JSON line per finished scenario.
    Stops early if the parent that started it has gone."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    spec = json.load(stdin)
    shop = ProceduralGarage()
    for index, job in spec["jobs"]:
        if os.getppid() != spec["parent"]:
            log.warning("scenario generation: parent process %s is gone; stopping", spec["parent"])
            return 1
        sid, diff, seconds = run_job(tuple(job), shop)
        stdout.write(json.dumps({"index": index, "id": sid, "difficulty": diff, "seconds": seconds}) + "\n")
        stdout.flush()
    return 0


def _progress(total: int, enabled: bool):
    """A callback that advances a tqdm bar (stderr) per finished scenario; None closes it."""
    if not enabled:
        return lambda r: None
    bar = tqdm(total=total, unit="scenario", desc="generating", file=sys.stderr, dynamic_ncols=True)

    def step(r):
        if r is None:
            bar.close()
            return
        bar.set_postfix_str(f"{r[0]} ({r[2]:.1f} s)")
        bar.update(1)

    return step
