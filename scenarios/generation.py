"""Procedural digital-twin scenarios: places, traffic, the reactive expert's drive, checks, files
(``python -m scenarios.generate`` is the command line over :func:`generate_suite`).

A **place** (``scenarios.places``: roads with speed limits, curbs, paint, static obstacles) is drawn
from a place seed and built once into a background PLY; on it, ``variants`` **traffic variants**
(``scenarios.kinds``: the ego's route, start and speed, the log-replayed agents) are drawn from
traffic seeds. Each variant's expert is the reactive expert (``scenarios.reactive``) driving the clip
in closed loop through the env's kinematics; the variant is kept only when that drive passes every
check (``scenarios.checks``: no agent or obstacle within a margin, labels whose replay is event-free
and close to it, on its route, braking within bounds, moving, the kind's constant-speed collision; and
no static Gaussians in its box or its replay's), else its traffic is redrawn (at most
``MAX_TRAFFIC_ATTEMPTS`` times; a place whose traffic cannot be drawn, or whose obstacle the background
misses, is redrawn, at most ``MAX_PLACE_ATTEMPTS`` times). Every rejection is counted by reason in
the suite's manifest.

Files: ``DIR/<scenario id>.json``, ``DIR/backgrounds/<place id>.ply`` (one per place, shared by its
variants), ``DIR/assets/<name>.ply`` (shared by name) and ``DIR/suite.yaml`` (the manifest), last.

Seeds: place j of a run has kind ``kinds[j % K]`` and place seed ``SUITE_SEED_BASE[suite] + S + j``;
suites draw from disjoint ranges of ``SEEDS_PER_SUITE`` seeds each (train from 0, val from
1,000,000, test from 2,000,000; any other name from a range picked by a hash of the name), so no two
suites share a place (a background), and the same (suite, seed, variant) always gives the same
scenario. Scenario i of a run is variant ``i // P`` of place ``i % P`` (P places): a prefix of the run
has every kind and place once before any second variant.

Parallel generation runs its workers as fresh interpreters (``python -m scenarios.generate --worker``,
places in on stdin, one JSON line per finished place out on stdout), never as ``multiprocessing``
children: those re-run the caller's main script (spawn, forkserver), which in a script without an
``if __name__ == "__main__":`` guard would build the same suite again and wait forever on the lock the
parent holds; a subprocess runs no caller code, from a script, a notebook, a Ray worker or a daemonic
pool child alike.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import numpy as np
import yaml
from tqdm import tqdm

from scenarios.checks import (
    MUST_COLLIDE,
    constant_speed_states,
    expert_checks,
    expert_replay,
    window_accelerations,
)
from scenarios.drive import ReactiveDrive, reactive_drive
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
from scenarios.garage import ProceduralGarage, street_layout
from scenarios.io import save
from scenarios.kinds import TRAFFIC, Draft, Garage
from scenarios.places import PLACES, Place
from scenarios.reactive import DEFAULT_SETTINGS, JOIN, STATIC, YIELD, ReactiveScene
from sim import procedural
from sim.collision import StaticIndex
from sim.files import atomic_write
from sim.geometry import project_to_polyline
from sim.ply import save_ply

log = logging.getLogger("scenarios.generate")

SEEDS_PER_SUITE = 1_000_000
SUITE_SEED_BASE = {"train": 0, "val": 1_000_000, "test": 2_000_000}
MAX_TRAFFIC_ATTEMPTS = 30  # traffic draws per variant before its place is redrawn
MAX_PLACE_ATTEMPTS = 4  # place draws per place seed before generation gives up
DEFAULT_GAUSSIANS = 100_000
MANIFEST_VERSION = 2


def suite_seed_base(suite: str) -> int:
    """First seed of a suite's range: train 0, val 1e6, test 2e6; other names 1e7 + 1e6 * (crc32 % 1000)."""
    if suite in SUITE_SEED_BASE:
        return SUITE_SEED_BASE[suite]
    return 10_000_000 + SEEDS_PER_SUITE * (zlib.crc32(suite.encode()) % 1000)


def place_id(suite: str, kind: str, seed: int) -> str:
    """The id of a place (and the name of its background PLY): ``<suite>-<kind>-<seed:08d>``."""
    return f"{suite}-{kind}-{seed:08d}"


def scenario_id(suite: str, kind: str, seed: int, variant: int = 0) -> str:
    """The id of traffic variant ``variant`` on a place: ``<place id>-<variant:02d>``."""
    return f"{place_id(suite, kind, seed)}-{variant:02d}"


def suite_plan(count: int, seed: int, kinds: tuple[str, ...], variants: int) -> list[tuple[str, int, int]]:
    """The scenarios of a run, in order: (kind, place index within the run, variant). Scenario i is
    variant i // P of place i % P, P = ceil(count / variants) places; place j has kind kinds[j % K]."""
    places = math.ceil(count / variants)
    return [(kinds[(i % places) % len(kinds)], i % places, i // places) for i in range(count)]


# -- one scenario ------------------------------------------------------------------------------------


@dataclass
class Planned:
    """A planned variant: its Scenario (scene paths placeholders until written), draft and drive."""

    scenario: Scenario
    draft: Draft
    drive: ReactiveDrive
    attempts: int


class TrafficExhausted(RuntimeError):
    """No traffic draw of a variant passed the checks in MAX_TRAFFIC_ATTEMPTS."""


def assemble(draft: Draft, states: np.ndarray, sid: str, horizon: int, dt: float, tags: dict) -> Scenario:
    """The Scenario of a draft and its expert drive states [horizon + 1 + LABEL_STEPS, 4]; the scene
    files are placeholders until :func:`write_place` builds them."""
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
        id=sid, dt=dt, horizon=horizon, scene=SceneFiles(Path("backgrounds/pending.ply"), assets),
        map=MapData(tuple(draft.net.lanes), tuple(np.asarray(c.polyline, float) for c in draft.net.edges)),
        ego=EgoSpec(), expert=expert, route=tuple(draft.route), agents=agents, static_obstacles=obstacles,
        rig=RigSpec(), tags=tags, render_distance=DEFAULT_RENDER_DISTANCE,
    )  # fmt: skip


HARD_DECEL, MEDIUM_DECEL = 3.0, 1.5  # m/s^2 of the expert's braking over 0.5 s
HARD_TTC, MEDIUM_TTC = 1.5, 3.0  # s: the expert's least time to collision with a moving car ahead
HARD_RADIUS, MEDIUM_RADIUS = 60.0, 100.0  # m: curves
MEDIUM_NUDGE = 1.0  # m: sideways around an obstacle


def difficulty(scenario: Scenario, drive: ReactiveDrive, radius: float = np.inf) -> str:
    """easy / medium / hard, from what the reactive expert had to do. Hard: it braked at >= 3 m/s^2
    (over 0.5 s), or came within 1.5 s of collision with a moving car ahead (its time to collision at the
    closing speed), or the curve is tighter than 60 m. Medium: braking >= 1.5 m/s^2, within 3 s, a
    yield (to a crossing, merging or cutting-in car, or an obstacle it could not pass) that set its speed,
    a nudge of >= 1 m around an obstacle, or a curve under 100 m. Easy: none of these."""
    H = scenario.horizon
    states = drive.states[: H + 1]
    decel = float(max(-window_accelerations(states[:, 3], scenario.dt).min(initial=0.0), 0.0))
    ttc = float(drive.ttc[:H].min(initial=np.inf))
    yielded = bool(np.isin(drive.mode[:H], (YIELD, JOIN, STATIC)).any())
    _, lat, _ = project_to_polyline(states[:, :2], scenario.map.route_polyline(scenario.route))
    nudged = scenario.static_obstacles and float(np.abs(lat).max()) >= MEDIUM_NUDGE
    if decel >= HARD_DECEL or ttc < HARD_TTC or radius < HARD_RADIUS:
        return "hard"
    if decel >= MEDIUM_DECEL or ttc < MEDIUM_TTC or yielded or nudged or radius < MEDIUM_RADIUS:
        return "medium"
    return "easy"


STATIC_LIFT = 0.3  # m: the env's static query box starts this high (curbs, paint stay below)
STATIC_MIN_GAUSSIANS = 8  # the env's default count for a static collision


def _box_counts(index: StaticIndex, scenario: Scenario, states: np.ndarray) -> np.ndarray:
    """Static Gaussians in the env's lifted ego box at each of states [S, 4]."""
    ego = scenario.ego
    yaw = states[:, 2]
    c = states[:, :2] + ego.center_offset * np.stack([np.cos(yaw), np.sin(yaw)], 1)
    centers = np.concatenate([c, np.full((len(c), 1), STATIC_LIFT)], 1)
    return index.count_in_boxes(centers, np.array([ego.length, ego.width, ego.height - STATIC_LIFT]), yaw)


def static_problems(scenario: Scenario, index: StaticIndex, must_collide: str | None) -> list[str]:
    """Static-Gaussian checks of a variant, as the env queries them: neither the expert's (lifted) box
    nor its labels' replay meets any; a parked obstacle is hit by the constant-speed driver through its
    Gaussians too."""
    out = []
    H = scenario.horizon
    for what, states in (("expert", scenario.expert.states()[: H + 1]), ("replay", expert_replay(scenario))):
        n = _box_counts(index, scenario, states)
        if (n >= STATIC_MIN_GAUSSIANS).any():
            k = int(np.argmax(n >= STATIC_MIN_GAUSSIANS))
            out.append(f"the {what}'s box meets {int(n[k])} static Gaussians at step {k}")
    if must_collide == "static":
        if not (_box_counts(index, scenario, constant_speed_states(scenario)) >= STATIC_MIN_GAUSSIANS).any():
            out.append("the constant-speed driver meets no static Gaussians")
    return out


def plan_traffic(
    place: Place, seed: int, variant: int, suite: str, garage: Garage, horizon: int = DEFAULT_HORIZON,
    dt: float = DEFAULT_DT, place_attempt: int = 0, index: StaticIndex | None = None,
    rejections: Counter | None = None,
) -> Planned:  # fmt: skip
    """Draw traffic variant ``variant`` on ``place``, drive it with the reactive expert and check it;
    redraw (attempt 1, 2, ...) until every check passes (with ``index``, the static-Gaussian ones too).
    Each failed draw adds 1 to ``rejections[reason]`` per reason. Deterministic in (place seed,
    place attempt, variant)."""
    kind = place.kind
    k = KINDS.index(kind)
    sid = scenario_id(suite, kind, seed, variant)
    must = MUST_COLLIDE.get(kind, "route" if kind == "merge" else None)
    nudge = DEFAULT_SETTINGS.max_nudge if place.obstacles else 0.0
    problems: dict[str, str] = {}
    for attempt in range(MAX_TRAFFIC_ATTEMPTS):
        rng = np.random.default_rng([seed, k, place_attempt, 1000 + variant, attempt])
        draft = TRAFFIC[kind](place, rng, garage, horizon, dt)
        x0 = draft.start_state()
        tags: dict[str, str | int | float | bool] = {"kind": kind, "suite": suite, "seed": int(seed)}
        scene = ReactiveScene.of(assemble(draft, np.tile(x0, (horizon + 1, 1)), sid, horizon, dt, tags))
        d = reactive_drive(scene, x0, horizon + LABEL_STEPS)
        scenario = assemble(draft, d.states, sid, horizon, dt, tags)
        problems = expert_checks(scenario, must, nudge)
        if not problems and index is not None:
            found = static_problems(scenario, index, must)
            problems = {"static_gaussians": "; ".join(found)} if found else {}
        if problems:
            log.debug("%s attempt %d: %s", sid, attempt, "; ".join(problems.values()))
            if rejections is not None:
                rejections.update(problems.keys())
            continue
        tags.update(place=place_id(suite, kind, seed), variant=int(variant), attempt=attempt)
        tags["difficulty"] = difficulty(scenario, d, float(place.params.get("radius", np.inf)))
        for key, v in {**place.params, **draft.params}.items():
            tags[key] = round(float(v), 3) if isinstance(v, (float, np.floating)) else v
        return Planned(replace(scenario, tags=tags), draft, d, attempt + 1)
    last = "; ".join(problems.values())
    raise TrafficExhausted(f"{sid}: no traffic passed in {MAX_TRAFFIC_ATTEMPTS} draws; last: {last}")


# -- one place and its variants ------------------------------------------------------------------------


def obstacle_problems(place: Place, index: StaticIndex) -> list[str]:
    """Each static obstacle's box holds its baked Gaussians (where the env's query finds them)."""
    out = []
    for o in place.obstacles:
        sz = np.asarray(o.size, float) - [0.0, 0.0, STATIC_LIFT]
        m = index.count_in_box([o.pose[0], o.pose[1], STATIC_LIFT], sz, float(o.pose[3]))
        if m < STATIC_MIN_GAUSSIANS:
            out.append(f"static obstacle {o.id!r}: only {m} Gaussians in its box")
    return out


def generate_place(
    kind: str, seed: int, variants, suite: str, out: Path, gaussians: int, horizon: int = DEFAULT_HORIZON,
    shop: ProceduralGarage | None = None,
) -> dict:  # fmt: skip
    """Draw and build one place, plan its traffic ``variants`` (variant numbers), write its background,
    assets and scenario files into ``out``. Returns {"place": id, "attempts": n, "rejections": {reason:
    n}, "scenarios": [{"id", "variant", "difficulty", "attempts"}]}. Deterministic."""
    shop = shop or ProceduralGarage()
    if kind not in PLACES:
        raise ValueError(f"unknown scenario kind {kind!r}; kinds are {', '.join(KINDS)}")
    pid = place_id(suite, kind, seed)
    rejections: Counter = Counter()
    why = ""
    for place_attempt in range(MAX_PLACE_ATTEMPTS):
        place = PLACES[kind](np.random.default_rng([seed, KINDS.index(kind), place_attempt]), shop.garage())
        bg = procedural.build_background(street_layout(place.net, place.obstacles), zlib.crc32(pid.encode()), gaussians)
        index = StaticIndex.from_cloud(bg)
        problems = obstacle_problems(place, index)
        if problems:
            rejections["place_obstacle_gaussians"] += 1
            why = "; ".join(problems)
            continue
        try:
            garage = shop.garage()
            planned = [
                plan_traffic(place, seed, v, suite, garage, horizon, DEFAULT_DT, place_attempt, index, rejections)
                for v in variants
            ]
        except TrafficExhausted as e:
            rejections["place_traffic"] += 1
            why = str(e)
            continue
        write_place(planned, bg, pid, Path(out), shop)
        return {
            "place": pid,
            "attempts": place_attempt + 1,
            "rejections": dict(rejections),
            "scenarios": [
                {"id": p.scenario.id, "variant": int(p.scenario.tags["variant"]),
                 "difficulty": str(p.scenario.tags["difficulty"]), "attempts": p.attempts}
                for p in planned
            ],
        }  # fmt: skip
    raise RuntimeError(f"{pid}: no valid place in {MAX_PLACE_ATTEMPTS} draws; last: {why}")


def write_place(planned: list[Planned], background, pid: str, out: Path, shop: ProceduralGarage) -> None:
    """Write the place's background PLY, missing asset PLYs and each variant's scenario JSON into ``out``."""
    bg_path = out / "backgrounds" / f"{pid}.ply"
    bg_path.parent.mkdir(parents=True, exist_ok=True)
    save_ply(background, bg_path)
    for p in planned:
        sc = p.scenario
        assets = {}
        for name in sorted({a.asset for a in sc.agents if a.asset}):
            path = out / "assets" / f"{name}.ply"
            if not path.is_file():  # shared by name; a concurrent writer's atomic rename wins, same bytes
                path.parent.mkdir(parents=True, exist_ok=True)
                save_ply(shop.asset_cloud(name), path)
            assets[name] = path
        save(replace(sc, scene=SceneFiles(bg_path, assets)), out / f"{sc.id}.json")


# -- a suite -----------------------------------------------------------------------------------------

Job = tuple[str, int, list[int], str, str, int, int]  # (kind, place seed, variants, suite, out, gaussians, horizon)


def run_job(job: Job, shop: ProceduralGarage | None = None) -> dict:
    """Generate one place of a suite: :func:`generate_place`'s result and its seconds."""
    kind, seed, variants, suite, out, gaussians, horizon = job
    t0 = time.perf_counter()
    r = generate_place(kind, int(seed), list(variants), suite, Path(out), int(gaussians), int(horizon), shop)
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


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
    variants: int = 1,
) -> list[Path]:
    """Generate ``count`` scenarios into ``out``: ``ceil(count / variants)`` places, place j of kind
    ``kinds[j % len(kinds)]`` with seed ``suite_seed_base(suite) + seed + j``, and up to ``variants``
    traffic variants on each (order: :func:`suite_plan`). ``workers`` processes share the places (0: one
    per CPU, at most 4; more than one: ``python -m scenarios.generate --worker`` subprocesses, see the
    module docstring); the result does not depend on it. ``on_scenario(done, count)`` is called as
    scenarios are written. Writes ``out/suite.yaml`` (what was generated, how, and every rejected draw by
    reason) last. Returns the scenario files, in scenario order."""
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"unknown scenario kinds {bad}; kinds are {', '.join(KINDS)}")
    if count < 1 or variants < 1:
        raise ValueError(f"count and variants must be >= 1, got {count}, {variants}")
    n_places = math.ceil(count / variants)
    if not 0 <= seed or seed + n_places > SEEDS_PER_SUITE:
        raise ValueError(
            f"seed + places must stay within [0, {SEEDS_PER_SUITE}] (a suite's seed range), got {seed}+{n_places}"
        )
    if gaussians < 1000:
        raise ValueError(f"gaussians must be >= 1000 per background, got {gaussians}")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = suite_seed_base(suite)
    plan = suite_plan(count, seed, kinds, variants)
    jobs: list[Job] = [
        (kinds[j % len(kinds)], base + seed + j, sorted(v for _, p, v in plan if p == j), suite, str(out),
         int(gaussians), int(horizon))
        for j in range(n_places)
    ]  # fmt: skip
    if workers <= 0:
        workers = min(os.cpu_count() or 1, 4)
    workers = min(workers, len(jobs))
    t0 = time.perf_counter()
    results: dict[int, dict] = {}
    bar = _progress(count, progress)
    if workers > 1:
        finished = _in_subprocesses(jobs, workers)
    else:
        shop = ProceduralGarage()
        finished = ((i, run_job(j, shop)) for i, j in enumerate(jobs))
    done = 0
    for i, r in finished:
        results[i] = r
        done += len(r["scenarios"])
        bar(r)
        if on_scenario is not None:
            on_scenario(done, count)
    bar(None)
    elapsed = time.perf_counter() - t0
    by_id = {s["id"]: (s, results[j]) for j in results for s in results[j]["scenarios"]}
    ids = [scenario_id(suite, kinds[p % len(kinds)], base + seed + p, v) for _, p, v in plan]
    rejections: Counter = Counter()
    by_kind: dict[str, Counter] = {}
    for j, r in sorted(results.items()):
        rejections.update(r["rejections"])
        by_kind.setdefault(jobs[j][0], Counter()).update(r["rejections"])
    manifest = {
        "format_version": MANIFEST_VERSION,
        "suite": suite,
        "seed_range": [base + seed, base + seed + n_places - 1],
        "kinds": list(kinds),
        "variants": int(variants),
        "gaussians": int(gaussians),
        "horizon": int(horizon),
        "generated_in_s": round(elapsed, 1),
        "rejections": {"total": int(sum(rejections.values())), "by_reason": dict(sorted(rejections.items())),
                       "by_kind": {k: dict(sorted(c.items())) for k, c in sorted(by_kind.items())}},
        "places": [{"id": r["place"], "kind": jobs[j][0], "seed": jobs[j][1], "attempts": r["attempts"],
                    "seconds": r["seconds"]} for j, r in sorted(results.items())],
        "scenarios": [{"id": i, "place": by_id[i][1]["place"], "variant": by_id[i][0]["variant"],
                       "difficulty": by_id[i][0]["difficulty"], "attempts": by_id[i][0]["attempts"]} for i in ids],
    }  # fmt: skip
    atomic_write(out / "suite.yaml", yaml.safe_dump(manifest, sort_keys=False))
    log.info("%d scenarios on %d places in %.1f s -> %s", count, n_places, elapsed, out)
    return [out / f"{i}.json" for i in ids]


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
                yield payload["index"], payload["result"]
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
    [[index, job], ...]}`` from stdin, generate each place, write one JSON line per finished place.
    Stops early if the parent that started it has gone."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    spec = json.load(stdin)
    shop = ProceduralGarage()
    for index, job in spec["jobs"]:
        if os.getppid() != spec["parent"]:
            log.warning("scenario generation: parent process %s is gone; stopping", spec["parent"])
            return 1
        stdout.write(json.dumps({"index": index, "result": run_job(tuple(job), shop)}) + "\n")
        stdout.flush()
    return 0


def _progress(total: int, enabled: bool, stream: TextIO | None = None):
    """A callback that reports a finished place's scenarios on ``stream`` (stderr); None ends it. On a
    terminal, a tqdm bar; elsewhere (a Ray worker's log, a file, CI) about ten plain lines a build, since a
    bar redrawn with carriage returns becomes a line per redraw there."""
    if not enabled:
        return lambda r: None
    stream = stream if stream is not None else sys.stderr
    if not stream.isatty():
        return _line_progress(total, stream)
    bar = tqdm(total=total, unit="scenario", desc="generating", file=stream, dynamic_ncols=True)

    def step(r):
        if r is None:
            bar.close()
            return
        bar.set_postfix_str(f"{r['place']} ({r['seconds']:.1f} s)")
        bar.update(len(r["scenarios"]))

    return step


def _line_progress(total: int, stream: TextIO):
    """``_progress`` for a stream that is not a terminal: a line each time the count passes a tenth of
    ``total`` (and at the end), with the rate since the start."""
    t0, done, shown = time.perf_counter(), 0, 0
    every = max(1, -(-total // 10))

    def step(r):
        nonlocal done, shown
        if r is None:
            return
        done += len(r["scenarios"])
        if done // every > shown // every or done >= total > shown:
            shown = done
            dt = time.perf_counter() - t0
            stream.write(
                f"generating: {done}/{total} scenarios ({done / max(dt, 1e-9):.1f}/s, {dt:.0f} s; last "
                f"{r['place']} in {r['seconds']:.1f} s)\n"
            )
            stream.flush()

    return step
