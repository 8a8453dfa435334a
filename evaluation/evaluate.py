"""``python -m evaluation``: closed-loop evaluation of driving policies with RAD's metrics.

    python -m evaluation --policy runs/my-run@latest --suite val --out eval/my-run
    python -m evaluation --policy exported/my-policy --suite path/to/suite --out eval/x videos=5
    python -m evaluation --compare expert reactive lane-follow constant-velocity stop --suite val --out eval/baselines

A policy (SOURCE) is a store URI with a run and a version (``<store>/<run>@<version>`` or
``@latest``), a training checkpoint folder, an exported policy folder (``python -m policy.export``),
or a built-in baseline: ``expert`` (log replay), ``reactive`` (the reactive expert, closed loop;
``reactive:sensing_range=36,...`` with other settings, as DAgger's ``il.labeller``), ``stop``,
``constant-velocity``, ``lane-follow`` (``evaluation.baselines``). Each policy drives every scenario of the
suite once, deterministically, closed loop, through the one closed-loop runner
(``rollout.group.RolloutGroup.run_episodes``: chunks of clips handed to Ray actors as they free up, a crashed
actor replaced and its chunk driven again; ``num_actors=0``: in this process). ``python -m evaluation.evaluate``
runs the same. ``--compare A B ...`` evaluates several policies on the same scenarios with the same env settings
and seed.

Written to ``--out``: ``metrics.json`` (RAD's CR, DCR, SCR, DR, PDR, HDR, ADD, longitudinal and
lateral jerk; the progress deviation rate PGR, route completion RC, driving score DS, time-matched ADE,
speed ratio, survival and success rate, each with a 95 % interval; counts; per policy, overall and per
kind; with ``--compare``, ``paired``: every policy against the first on the same clips),
``scenarios.csv`` (one row per policy and scenario), ``report.md`` (RAD Table 1's layout),
``metrics.png`` (grouped bars), ``videos/<policy>/<scenario>.mp4`` (cameras and bird's-eye view of
the worst clips, the event named on its frame and held ~1 s), ``config.yaml`` (the resolved settings).

Before any rollout: the suite is loaded, every policy is resolved, and a checkpoint that is missing
or corrupt, or a policy whose observation spec (parts, cameras, rig, resolution) does not match the
suite's env, is refused with an error naming what differs.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from envs.config import EnvConfig
from envs.suite import resolve_scenarios
from evaluation.metrics import by_kind, rad_metrics
from evaluation.policies import PolicyEntry, PolicyError, provenance, resolve_policies, slug
from evaluation.report import (
    clip_row,
    interval_table,
    kind_table,
    outcome_table,
    paired_comparison,
    paired_table,
    plot_metrics,
    rad_table,
    worst_first,
    write_csv,
    write_video,
)
from policy.sources import redact_tree
from rollout.cluster import connect
from rollout.group import ActorResources, RolloutGroup, check_resources
from rollout.job import check_job_path
from rollout.worker import RolloutWorker, WorkerSpec
from sim.configs import ConfigError, build_parser, field, overrides_dict, resolve, to_dict
from sim.files import atomic_write
from store import OutputFolder, json_safe

log = logging.getLogger("evaluation")


@dataclass(frozen=True)
class EvaluateConfig:
    policy: str = field(
        "",
        help="the policy: a store URI <store>/<run>@<version|latest>, a checkpoint folder, an exported policy "
        "folder, or a baseline (expert, reactive, stop, constant-velocity, lane-follow; reactive:name=value,... is "
        "the reactive expert with those scenarios.ReactiveSettings, e.g. reactive:sensing_range=36)",
    )
    compare: tuple[str, ...] = field((), help="several policies side by side (--compare A B ...); --policy joins them")
    suite: str = field("val", help="scenarios: a built-in suite (train, val, test), a suite folder or a scenario file")
    out: str = field("eval", help="output folder (metrics.json, scenarios.csv, report.md, metrics.png, videos/)")
    # Overrides, not a whole EnvConfig: a trained policy keeps its own observation settings (its
    # checkpoint's env: parts, rig, bins; SOURCE_ENV_KEYS) unless a key here is given, which a tree of
    # defaults could not tell apart from a key left unset. Each key is checked as an EnvConfig field.
    env: dict = field(
        {},
        help="environment settings over each policy's own (envs.EnvConfig keys), e.g. env.render_backend=cpu",
        overrides=EnvConfig,
    )
    seed: int = field(0, help="the env's seed (the same for every policy)")
    num_actors: int = field(2, help="Ray actors sharing the scenarios; 0 evaluates in this process")
    num_envs: int = field(4, help="environments each actor (or this process) steps together")
    cpus_per_actor: float = field(1.0, help="Ray CPUs per actor")
    gpus_per_actor: float = field(0.0, help="fraction of a GPU per actor (gsplat renders there)")
    resources: dict = field({}, help="Ray custom resources each actor asks for, e.g. resources.rollout_node=1")
    threads: int = field(1, help="torch and renderer threads per actor (and in this process)")
    ray_address: str = field("", help="Ray cluster to join ('': RAY_ADDRESS, else a local instance)")
    videos: int = field(2, help="clips filmed per policy (0: none)")
    video_scenarios: tuple[str, ...] = field((), help="film these scenario ids instead of the worst ones")
    freeze_s: float = field(1.0, help="seconds the last (event) frame of a video is held")
    plot: bool = field(True, help="write metrics.png")
    progress: bool = field(True, help="show a progress bar over clips")

    def __post_init__(self):
        if self.num_actors < 0 or self.num_envs < 1 or self.threads < 1 or self.videos < 0:
            raise ValueError("num_actors >= 0, num_envs >= 1, threads >= 1 and videos >= 0 are required")
        if not (self.freeze_s >= 0 and math.isfinite(self.freeze_s)):
            raise ValueError(f"freeze_s: expected seconds >= 0, got {self.freeze_s}")
        check_resources("resources", self.resources)

    @property
    def policies(self) -> tuple[str, ...]:
        return ((self.policy,) if self.policy else ()) + tuple(self.compare)


# -- the rollouts ----------------------------------------------------------------------------------


def rollouts(entries: Sequence[PolicyEntry], scenarios: Sequence, cfg: EvaluateConfig) -> dict[str, list[dict]]:
    """Per policy label, one record per scenario (in the suite's order): the rollout group's Ray actors
    (``num_actors``, each stepping ``num_envs`` envs), or this process."""
    started = cfg.num_actors > 0 and connect(cfg.ray_address, log_to_driver=False)
    bar = tqdm(total=len(entries) * len(scenarios), unit="clip", desc="evaluating", disable=not cfg.progress,
               file=sys.stderr)  # fmt: skip
    spec = WorkerSpec(num_envs=cfg.num_envs, seed=cfg.seed, threads=cfg.threads)
    resources = ActorResources(cfg.cpus_per_actor, cfg.gpus_per_actor, resources=cfg.resources)
    group = RolloutGroup(spec, cfg.num_actors, resources)
    try:
        return group.run_episodes(entries, scenarios, cfg.num_envs, progress=bar.update)
    finally:
        bar.close()
        group.shutdown()
        if started:
            import ray  # connected above: Ray is there

            ray.shutdown()


# -- videos ----------------------------------------------------------------------------------------


def write_videos(entries, records, scenarios, cfg: EvaluateConfig, out: Path) -> dict[str, list[dict]]:
    """Film each policy's chosen clips: ``video_scenarios`` if given, else its ``videos`` worst."""
    if cfg.videos == 0 and not cfg.video_scenarios:
        return {}
    by_id = {str(s.id): s for s in scenarios}
    unknown = [s for s in cfg.video_scenarios if s not in by_id]
    if unknown:
        raise ConfigError(f"video_scenarios: unknown scenario id(s) {unknown}; the suite has {sorted(by_id)[:5]}...")
    made: dict[str, list[dict]] = {}
    # filmed in this process by the same runner that evaluated, one clip at a time: the frames end in the
    # very state in which the episode ended
    worker = RolloutWorker(WorkerSpec(num_envs=1, seed=cfg.seed, threads=cfg.threads))
    for e in entries:
        chosen = list(cfg.video_scenarios) or worst_first(records[e.label])[: cfg.videos]
        evaluated = {str(r["scenario"]): r for r in records[e.label]}
        filmed = worker.episodes(e, [by_id[sid] for sid in chosen], chosen, 1, frames=True) if chosen else []
        for sid, rec in zip(chosen, filmed):
            frames = rec.pop("frames")
            ev = evaluated[sid]
            if (rec["event"], rec["steps"]) != (ev.get("event", ""), ev.get("steps")):
                log.warning(
                    "%s on %s: the filmed drive ended with %r at step %d, the evaluated one with %r at step %d",
                    e.label, sid, rec["event"], rec["steps"], ev.get("event", ""), ev.get("steps"),
                )  # fmt: skip
            path = out / "videos" / slug(e.label) / f"{slug(sid)}.mp4"
            path, n = write_video(path, frames, rec, label=e.label, freeze_s=cfg.freeze_s)
            made.setdefault(e.label, []).append(
                dict(scenario=sid, path=str(path.relative_to(out)), frames=n, event=rec["event"], step=rec["steps"])
            )
    return made


# -- outputs ---------------------------------------------------------------------------------------


def summarise(entries, records, scenarios, cfg: EvaluateConfig, suite_path: str, seconds: float) -> dict:
    """metrics.json's content (see the module docstring)."""
    policies = {}
    for e in entries:
        recs = records[e.label]
        policies[e.label] = dict(
            spec=e.spec,
            kind=e.kind,
            provenance=provenance(e),
            env=EnvConfig.from_dict(e.env).to_dict(),  # every setting it ran with, resolved
            overall=rad_metrics(recs),
            by_kind=by_kind(recs),
            errors=[f"{r['scenario']}: {r['error']}" for r in recs if r.get("error")],
        )
    return dict(
        suite=cfg.suite,
        suite_path=suite_path,
        scenarios=[str(s.id) for s in scenarios],
        kinds={str(s.id): str(s.tags.get("kind", "")) for s in scenarios},
        seed=cfg.seed,
        env=dict(cfg.env),
        rollout_seconds=seconds,
        num_actors=cfg.num_actors,
        order=[e.label for e in entries],
        policies=policies,
        paired=paired_comparison({e.label: records[e.label] for e in entries}),
    )


def write_outputs(summary: dict, records, videos, cfg: EvaluateConfig, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    summary = dict(summary, videos=videos)
    files["metrics"] = atomic_write(out / "metrics.json", json.dumps(json_safe(summary), indent=2) + "\n")
    rows = [clip_row(label, r) for label in summary["order"] for r in records[label]]
    files["csv"] = write_csv(out / "scenarios.csv", rows)
    overall = {label: summary["policies"][label]["overall"] for label in summary["order"]}
    if cfg.plot:
        files["plot"] = plot_metrics(out / "metrics.png", overall, f"{cfg.suite}: {len(summary['scenarios'])} clips")
    lines = [
        f"# Closed-loop evaluation on `{cfg.suite}`",
        "",
        f"{len(summary['scenarios'])} scenarios ({summary['suite_path']}), deterministic policies, env seed "
        f"{cfg.seed}. RAD's metrics (REFERENCE.md): rates over all clips, first failure only; ADD in m, "
        "jerks in m/s^3 and rad/s^3 over the steps before any failure. Lower is better.",
        "",
        rad_table(overall),
        "",
        "## What a stopped car cannot game, with 95 % intervals",
        "",
        "Rates with Wilson intervals, means over clips with bootstrap intervals (evaluation.metrics): PGR = "
        "progress deviation (fell more than the env's progress_threshold behind the logged expert); RC = route "
        "completion; driving score = RC x infraction penalty (CARLA's factors); ADE = time-matched distance to "
        "the logged expert; speed / expert = mean speed over the expert's; survival = steps driven / horizon.",
        "",
        interval_table(overall),
        "",
    ]
    if summary.get("paired"):
        lines += [
            f"## Paired: each policy against `{summary['order'][0]}` on the same clips",
            "",
            "Mean difference B - A over clips with a paired bootstrap 95 % interval (* : the interval excludes 0); "
            "McNemar's exact test on the clips only one of the two fails.",
            "",
            paired_table(summary["paired"]),
            "",
        ]
    if cfg.plot:
        lines += ["![metrics](metrics.png)", ""]
    lines += ["## Per kind", "", kind_table({k: summary["policies"][k]["by_kind"] for k in summary["order"]}), ""]
    lines += ["## Per scenario", "", outcome_table({k: records[k] for k in summary["order"]}), ""]
    if videos:
        lines += ["## Videos", ""]
        for label, vids in videos.items():
            for v in vids:
                what = f"{v['event']} at step {v['step']}" if v["event"] else f"no event ({v['step']} steps)"
                lines.append(f"- {label}, {v['scenario']}: [{v['path']}]({v['path']}) ({what})")
        lines.append("")
    errors = [(k, e) for k in summary["order"] for e in summary["policies"][k]["errors"]]
    if errors:
        lines += ["## Errors", ""] + [f"- {k}: {e}" for k, e in errors] + [""]
    lines += ["## Policies", ""] + [
        f"- {k}: `{summary['policies'][k]['spec']}` ({summary['policies'][k]['kind']})" for k in summary["order"]
    ]
    files["report"] = atomic_write(out / "report.md", "\n".join(lines) + "\n")
    files["config"] = atomic_write(out / "config.yaml", yaml.safe_dump(redact_tree(to_dict(cfg)), sort_keys=False))
    return files


# -- the whole run ---------------------------------------------------------------------------------


@dataclass
class EvaluationResult:
    out: Path
    summary: dict  # metrics.json's content
    records: dict[str, list[dict]]  # per policy label, per scenario
    videos: dict[str, list[dict]]
    files: dict[str, Path]


def load_scenarios(suite: str, env: Mapping[str, Any]) -> tuple[list, str]:
    """The suite's scenarios and where they live. Built-in names are generated on first use."""
    skip = bool(env.get("skip_broken", False))
    scen = resolve_scenarios(suite, skip)
    if not scen:
        raise ConfigError(f"suite {suite!r} has no scenarios")
    first = getattr(scen[0], "path", None)
    return scen, str(Path(first).parent) if first else str(suite)


def run(cfg: EvaluateConfig) -> EvaluationResult:
    """Check everything, roll out every policy on every scenario, write the outputs."""
    # checked again for a config built directly, not parsed: unknown keys are errors before anything loads
    env = {"seed": cfg.seed, **overrides_dict(EnvConfig, cfg.env, "env.")}
    # as a Ray job, a relative --out lands in the job's temporary package: refused before any work
    check_job_path(cfg.out, "--out", "Give --out s3://bucket/prefix/evaluations/<name> (or an absolute shared path).")
    scenarios, suite_path = load_scenarios(cfg.suite, env)
    entries = resolve_policies(cfg.policies, scenarios, env)
    folder = OutputFolder(cfg.out)  # a path, or a store URI written through a local copy (uploaded at the end)
    out = folder.path
    log.info("evaluating %s on %d scenarios of %s", ", ".join(e.label for e in entries), len(scenarios), suite_path)
    t0 = time.perf_counter()
    records = rollouts(entries, scenarios, cfg)
    summary = summarise(entries, records, scenarios, cfg, suite_path, time.perf_counter() - t0)
    videos = write_videos(entries, records, scenarios, cfg, out)
    files = write_outputs(summary, records, videos, cfg, out)
    folder.sync()
    return EvaluationResult(out, dict(summary, videos=videos), records, videos, files)


# -- CLI -------------------------------------------------------------------------------------------

_OVERRIDE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*=")


def parse_args(argv: Sequence[str] | None = None) -> EvaluateConfig:
    """``[--config FILE] [--policy S] [--compare A B ...] [--suite NAME|DIR] [--out DIR] key=value...``."""
    desc = __doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n", 2)[1]
    p = build_parser(EvaluateConfig, "python -m evaluation", desc)
    p.add_argument("--policy", help="the policy to evaluate (see SOURCE above)")
    p.add_argument("--compare", nargs="+", metavar="SOURCE", help="several policies side by side")
    p.add_argument("--suite", help="built-in suite name (train, val, test) or a suite folder")
    p.add_argument("--out", help="output folder")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    overrides = list(args.overrides)
    compare: list[str] = []
    for item in args.compare or ():
        (overrides if _OVERRIDE.match(item) else compare).append(item)
    extra: dict[str, Any] = {}
    for key in ("policy", "suite", "out"):
        if getattr(args, key) is not None:
            extra[key] = getattr(args, key)
    if args.compare:
        extra["compare"] = compare
    try:
        cfg = resolve(EvaluateConfig, args.config, overrides, extra)
    except ConfigError as e:
        p.error(str(e))
    if not cfg.policies:
        p.error("no policy: give --policy SOURCE or --compare A B ...")
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    try:
        result = run(cfg)
    except (PolicyError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a broken suite or env setting: the message names the file and field
        print(f"error: {e}", file=sys.stderr)
        return 2
    overall = {k: result.summary["policies"][k]["overall"] for k in result.summary["order"]}
    print(rad_table(overall))
    where = OutputFolder.describe(cfg.out).rstrip("/")  # a store URI: the files are there (result.out: a copy)
    print(f"\nwrote {', '.join(f'{where}/{p.relative_to(result.out).as_posix()}' for p in result.files.values())}")
    for vids in result.videos.values():
        for v in vids:
            print(f"video: {where}/{v['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
