"""``python -m learner.study``: does RL+IL beat IL? Seeds x stages, evaluated on held-out clips.

    python -m learner.study                                  # the default budget (see StudyConfig.train)
    python -m learner.study seeds=5 out=runs/study5 train.iterations=800
    python -m learner.study --config study.yaml

For each seed s it trains one run ``<name>-s<s>`` with ``stage=il+rl`` (``learner.train``): stage il
(imitation) ends in a snapshot ``<name>-s<s>-il``, from which stage rl (PPO + IL) goes on. Both final
policies -- IL only and IL -> RL+IL, the same IL policy before and after RL -- drive every clip of
``eval_suite`` (``test`` by default, never used for any choice) with ``evaluation.evaluate``, so the two
are paired clip by clip. Rerunning the same study resumes: finished runs are not trained again and
finished evaluations are read back.

Written to ``out``: ``study.json`` (config, per-seed metrics, the across-seed means with Student-t
intervals, the paired RL+IL - IL differences with bootstrap intervals and McNemar's test, the verdict
against the target, learning curves, wall times), ``study.md`` (the same as tables), ``stages.png``
(metrics per stage with intervals), ``curves.png`` (val CR, RC and episodic return against env-steps),
and ``eval-s<s>/`` (each seed's full evaluation report). ``out`` may be a store URI
(``out=s3://bucket/prefix/studies/<name>``): the report is then written into a local copy, refilled from
the store first (a rerun reads its evaluations back) and uploaded after each seed, and the runs keep
their tracking files with them in the store. As a Ray job, a relative ``out`` or store is refused at
start: the job's working dir is a temporary copy.

The target (issue 10): RL+IL lowers the test CR against IL with the paired interval excluding zero,
at route completion >= 0.95 x IL's and a deviation rate no worse.

Do the images matter (issue 11)? Each seed trains ``stage=perception+il+rl`` in camera mode (the
default: images, the ego's own motion, navigation from the map). With ``ablations`` (on by default)
its final camera policy also drives ``eval_suite`` with its cameras blanked (flat grey) and with
another clip's frames (``env.camera_ablation=blank|shuffle``), paired clip by clip with its own
images; with ``teacher`` (on by default) a privileged teacher (``env.observation=privileged``, cameras
off, stage il+rl, the same budget) is trained beside it, run ``<name>-s<s>-teacher``. study.md's "Images" section
has them all with intervals, and stage perception's metrics on val (``perception.md`` per run).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.evaluate import EvaluateConfig
from evaluation.evaluate import run as run_evaluation
from evaluation.metrics import clip_values, rad_metrics
from evaluation.stats import mcnemar, paired_difference, seed_interval
from learner.config import EvalConfig, ILConfig, PerceptionConfig, StoreConfig, TrainConfig
from learner.train import il_snapshot_name, train
from rollout.job import check_job_path
from sim.configs import ConfigError, field, non_defaults, parse_cli, to_dict
from sim.files import atomic_write
from store import CheckpointStore, OutputFolder, is_uri, join_uri, json_safe, split_uri

log = logging.getLogger("learner.study")

STAGES = ("il", "rl+il")
# (key in rad_metrics, label, higher is better)
SUMMARY = (
    ("CR", "CR", False),
    ("DR", "DR", False),
    ("RC", "RC", True),
    ("DS", "driving score", True),
    ("success_rate", "success", True),
)
PAIRED = (("collision", "CR"), ("RC", "RC"), ("DS", "driving score"))

# The study's budget, sized so that the whole study (3 seeds x three stages in camera mode, the teacher,
# the ablations, every evaluation) runs in about an hour on 2 CPU cores (the README has the measured wall
# time): stage perception on 2,016 training frames (perception.frames: 2 from each of train's 1,008 clips;
# the frame cache is rendered once for every seed), 30 epochs; 60 IL iterations; 100 RL iterations x
# (2 actors x 4 envs x 32 steps) = 25,600 env-steps of RL per seed, with an evaluation on val every 50 RL
# iterations for the learning curve. A longer RL stage is one setting
# (``train.iterations=400``: 102,400 env-steps, about 4x the RL time).
STUDY_TRAIN = TrainConfig(  # only what differs from TrainConfig's own defaults (stage perception+il+rl, ...)
    perception=PerceptionConfig(epochs=30),
    iterations=100,
    store=StoreConfig(checkpoint_every=50),
    il=ILConfig(pretrain_iterations=60),
    eval=EvalConfig(every=50),
)


@dataclass(frozen=True)
class StudyConfig:
    name: str = field("study", help="run-name prefix: runs <name>-s<seed> and <name>-s<seed>-il in the store")
    out: str = field(
        "runs/study",
        help="report folder: study.json, study.md, stages.png, curves.png, eval-s*/; a path, or a store URI "
        "(s3://bucket/prefix/studies/<name>) written through a local copy, uploaded after each seed",
    )
    seeds: int = field(3, help="training seeds S (seeds first_seed .. first_seed + S - 1)")
    first_seed: int = field(0, help="the first seed")
    eval_suite: str = field("test", help="held-out scenarios every final policy is scored on")
    eval_num_actors: int = field(2, help="Ray actors of each evaluation (0: in this process)")
    eval_num_envs: int = field(4, help="environments each evaluation actor steps together")
    videos: int = field(0, help="clips filmed per policy in each seed's evaluation")
    train: TrainConfig = field(STUDY_TRAIN, help="the training run of every seed (run, seed and stage are set)")
    ablations: bool = field(
        True,
        help="also drive each seed's camera policy (RL+IL) with its cameras blanked (flat grey) and with another "
        "clip's frames (env.camera_ablation=blank, shuffle): do the images matter?",
    )
    teacher: bool = field(
        True,
        help="also train and evaluate a privileged teacher per seed (env.observation=privileged, env.cameras=false, "
        "stage il+rl, the same budget): the upper bound",
    )

    def __post_init__(self):
        if self.seeds < 1 or self.first_seed < 0:
            raise ValueError(f"seeds >= 1 and first_seed >= 0 are required, got {self.seeds}, {self.first_seed}")
        if self.train.stage not in ("il+rl", "perception+il+rl"):
            raise ValueError(
                f"train.stage: the study trains IL, then RL+IL from it (il+rl or perception+il+rl), got "
                f"{self.train.stage!r}"
            )


def seed_run(cfg: StudyConfig, seed: int) -> TrainConfig:
    """The training config of one seed: its tracking files in ``<out>/runs/``, or with the run in the
    store when ``out`` is a store URI."""
    tracking = dataclasses.replace(cfg.train.tracking, out="" if is_uri(cfg.out) else str(Path(cfg.out) / "runs"))
    return dataclasses.replace(cfg.train, run=f"{cfg.name}-s{seed}", seed=seed, tracking=tracking)


def teacher_run(cfg: StudyConfig, seed: int) -> TrainConfig:
    """The privileged teacher of one seed: ground truth instead of images (no cameras, no perception)."""
    tcfg = seed_run(cfg, seed)
    env = dataclasses.replace(tcfg.env, observation="privileged", cameras=False, camera_ablation="none")
    return dataclasses.replace(tcfg, run=f"{cfg.name}-s{seed}-teacher", stage="il+rl", env=env)


def policy_specs(tcfg: TrainConfig) -> dict[str, str]:
    """Store URIs of a seed's two final policies, by stage."""
    store = tcfg.store.uri
    return {
        "il": join_uri(store, f"{il_snapshot_name(tcfg.run)}@latest"),
        "rl+il": join_uri(store, f"{tcfg.run}@latest"),
    }


# -- one seed --------------------------------------------------------------------------------------


def train_seed(tcfg: TrainConfig) -> dict:
    """Train (or resume, or find finished) one seed; its val history and return curve."""
    t0 = time.perf_counter()
    result = train(tcfg)
    history = [dict(r) for r in result.state.history]
    returns = []
    jsonl = result.folder / "metrics.jsonl"
    if jsonl.is_file():
        for line in jsonl.read_text().splitlines():
            row = json.loads(line)
            if "charts/episodic_return" in row:
                returns.append((int(row["step"]), float(row["charts/episodic_return"])))
    perception = result.perception or {}
    return {
        "run": result.run,
        "env_steps": int(result.state.env_steps),
        "train_seconds": time.perf_counter() - t0,
        "val_history": history,
        "returns": returns,
        "perception": (perception.get("metrics") or {}).get("all"),
    }


CACHE_FILE = "study-eval.json"  # in each evaluation folder: what the study took from it, and of which checkpoints


def _pinned(tcfg: TrainConfig, specs: Sequence[str]) -> list[str]:
    """Each ``<store>/<run>@latest`` spec with the committed version it means now: a cache key that a
    newer checkpoint (a run trained further) invalidates."""
    store = CheckpointStore(tcfg.store.uri)
    out = []
    for spec in specs:
        ref = split_uri(spec)[1]  # <store>/<run>@latest, an S3 query at the very end
        rs, version = store.resolve(ref)
        out.append(f"{rs.name}@{version}")
    return out


def _cached_evaluation(out: Path, key: dict, compute: Callable[[], dict]) -> dict:
    """``compute()`` unless ``out`` holds its result for the same ``key`` (a rerun of a study reads back
    the evaluations it finished); the result is written there, atomically, for the next rerun."""
    path = out / CACHE_FILE
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.get("key") == key:
                log.info("study: evaluation in %s is done already (same checkpoints and settings): read back", out)
                return saved["result"]
        except (ValueError, KeyError):
            log.warning("study: %s is unreadable; evaluating again", path)
    result = compute()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"key": key, "result": json_safe(result)}) + "\n")
    return result


def evaluate_seed(cfg: StudyConfig, tcfg: TrainConfig, seed: int) -> dict:
    """Both final policies of a seed on ``eval_suite``: metrics and per-clip values, paired by clip."""
    specs = policy_specs(tcfg)
    out = Path(cfg.out) / f"eval-s{seed}"
    ecfg = EvaluateConfig(
        compare=tuple(specs[s] for s in STAGES),
        suite=cfg.eval_suite,
        out=str(out),
        env=non_defaults(tcfg.env),  # the training's own env settings, over the evaluation's defaults
        seed=seed,
        num_actors=cfg.eval_num_actors,
        num_envs=cfg.eval_num_envs,
        videos=cfg.videos,
        ray_address=tcfg.ray_address,
    )

    def compute() -> dict:
        t0 = time.perf_counter()
        res = run_evaluation(ecfg)
        labels = dict(zip(STAGES, res.summary["order"]))
        stages = {}
        for stage in STAGES:
            recs = res.records[labels[stage]]
            stages[stage] = {
                "policy": specs[stage],
                "metrics": rad_metrics(recs),
                "clips": {r["scenario"]: clip_values(r) for r in recs},
            }
        return {"eval_seconds": time.perf_counter() - t0, "report": str(out / "report.md"), "stages": stages}

    key = {"config": to_dict(ecfg), "checkpoints": _pinned(tcfg, [specs[s] for s in STAGES])}
    return _cached_evaluation(out, key, compute)


# what the camera policy is held against: (label, camera_ablation) -- and the teacher, when trained
ABLATIONS = (("cameras blanked", "blank"), ("another clip's frames", "shuffle"))
CAMERA_POLICY = "camera policy"
TEACHER = "privileged teacher"


def evaluate_policy(cfg: StudyConfig, spec: str, env: dict, out: Path, seed: int, ray_address: str) -> dict:
    """One policy on ``eval_suite`` with the env settings ``env``: its metrics and per-clip values."""
    ecfg = EvaluateConfig(
        policy=spec,
        suite=cfg.eval_suite,
        out=str(out),
        env=env,
        seed=seed,
        num_actors=cfg.eval_num_actors,
        num_envs=cfg.eval_num_envs,
        videos=cfg.videos,
        ray_address=ray_address,
    )

    def compute() -> dict:
        t0 = time.perf_counter()
        res = run_evaluation(ecfg)
        recs = res.records[res.summary["order"][0]]
        return {
            "policy": spec,
            "env": env,
            "eval_seconds": time.perf_counter() - t0,
            "report": str(out / "report.md"),
            "metrics": rad_metrics(recs),
            "clips": {r["scenario"]: clip_values(r) for r in recs},
        }

    return _cached_evaluation(out, {"config": to_dict(ecfg), "checkpoints": _pinned(cfg.train, [spec])}, compute)


def images_seed(cfg: StudyConfig, tcfg: TrainConfig, seed: int) -> dict:
    """The seed's camera policy with other images (ABLATIONS), and the privileged teacher (trained here,
    or found trained) when ``cfg.teacher``: {label: evaluate_policy(...)}."""
    out: dict[str, dict] = {}
    spec = policy_specs(tcfg)["rl+il"]
    if cfg.ablations and tcfg.env.observation == "camera" and tcfg.env.cameras:
        for label, ablation in ABLATIONS:
            env = {**non_defaults(tcfg.env), "camera_ablation": ablation}
            folder = Path(cfg.out) / f"eval-s{seed}-{ablation}"
            out[label] = evaluate_policy(cfg, spec, env, folder, seed, tcfg.ray_address)
    if cfg.teacher:
        teacher = dataclasses.replace(teacher_run(cfg, seed), tracking=tcfg.tracking)  # tracked as its seed is
        trained = train_seed(teacher)
        folder = Path(cfg.out) / f"eval-s{seed}-teacher"
        ev = evaluate_policy(cfg, policy_specs(teacher)["rl+il"], non_defaults(teacher.env), folder, seed, "")
        out[TEACHER] = {**ev, "train": trained}
    return out


def images(seeds: list[dict]) -> dict:
    """The camera policy and its variants across seeds: per variant and metric the mean with a t interval;
    per variant the paired difference to the camera policy on the same clips (pooled over seeds x clips,
    bootstrap interval) in collisions, RC and driving score."""
    labels = [CAMERA_POLICY, *dict.fromkeys(k for s in seeds for k in s.get("images", {}))]
    rows: dict[str, dict] = {}
    for label in labels:
        runs = [r for r in (_variant(s, label) for s in seeds) if r is not None]
        if not runs:
            continue
        row: dict = {"seeds": len(runs)}
        row["metrics"] = {key: seed_interval([r["metrics"][key] for r in runs]) for key, _, _ in SUMMARY}
        if label != CAMERA_POLICY:
            row["paired"] = {}
            for key, name in PAIRED:
                a_all, b_all = [], []
                for s in seeds:
                    base, other = _variant(s, CAMERA_POLICY), _variant(s, label)
                    if base is None or other is None:
                        continue
                    ids = sorted(set(base["clips"]) & set(other["clips"]))
                    a_all += [float(base["clips"][i][key]) for i in ids]
                    b_all += [float(other["clips"][i][key]) for i in ids]
                row["paired"][key] = dict(paired_difference(a_all, b_all, seed=0), label=name)
        rows[label] = row
    return rows


def _num(v) -> float:
    return math.nan if v is None else float(v)


def _variant(seed: dict, label: str) -> dict | None:
    if label == CAMERA_POLICY:
        return seed["eval"]["stages"]["rl+il"]
    return seed.get("images", {}).get(label)


# -- across seeds ----------------------------------------------------------------------------------


def paired(seeds: list[dict]) -> dict:
    """RL+IL - IL on the same clips: pooled over seeds x clips, and per seed (t interval across seeds)."""
    out = {}
    for key, label in PAIRED:
        a_all, b_all, per_seed = [], [], []
        for s in seeds:
            a, b = s["eval"]["stages"]["il"]["clips"], s["eval"]["stages"]["rl+il"]["clips"]
            ids = sorted(set(a) & set(b))
            xa = [float(a[i][key]) for i in ids]
            xb = [float(b[i][key]) for i in ids]
            a_all += xa
            b_all += xb
            per_seed.append(float(np.mean(np.subtract(xb, xa))) if ids else math.nan)
        d: dict = dict(paired_difference(a_all, b_all, seed=0))
        d["label"] = label
        d["across_seeds"] = seed_interval(per_seed)
        if key == "collision":
            d["mcnemar"] = mcnemar(np.asarray(a_all) > 0.5, np.asarray(b_all) > 0.5)
        out[key] = d
    return out


def aggregate(seeds: list[dict]) -> dict:
    """Per stage and metric: the mean across seeds with its Student-t 95 % interval."""
    return {
        stage: {
            key: seed_interval([s["eval"]["stages"][stage]["metrics"][key] for s in seeds]) for key, _, _ in SUMMARY
        }
        for stage in STAGES
    }


def verdict(agg: dict, pair: dict) -> dict:
    """The issue's target, checked: CR down with the paired interval excluding 0, RC >= 0.95 IL's, DR no worse."""
    il, rl = agg["il"], agg["rl+il"]
    cr = pair["collision"]
    checks = {
        "cr_lower_significant": bool(cr["hi"] < 0.0),
        "rc_at_least_95pct": bool(rl["RC"]["mean"] >= 0.95 * il["RC"]["mean"]),
        "dr_no_worse": bool(rl["DR"]["mean"] <= il["DR"]["mean"] + 1e-12),
    }
    return {"met": all(checks.values()), **checks}


# -- report ----------------------------------------------------------------------------------------


def _ci(d: dict, digits: int = 3) -> str:
    if not d or d.get("n", 0) == 0 or not math.isfinite(d["mean" if "mean" in d else "diff"]):
        return "n/a"
    m = d["mean"] if "mean" in d else d["diff"]
    if "mean" in d and d.get("n") == 1:  # an interval across seeds needs two seeds at least
        return f"{m:.{digits}f} (1 seed)"
    return f"{m:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}]"


def report_md(study: dict) -> str:
    cfg, agg, pair, v = study["config"], study["aggregate"], study["paired"], study["verdict"]
    n_clips = len(next(iter(study["seeds"]))["eval"]["stages"]["il"]["clips"]) if study["seeds"] else 0
    steps = [s["train"]["env_steps"] for s in study["seeds"]]
    lo, hi = min(steps, default=0), max(steps, default=0)
    budget = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    lines = [
        f"# Study `{cfg['name']}`: IL vs IL -> RL+IL on `{cfg['eval_suite']}`",
        "",
        f"{len(study['seeds'])} seeds x {n_clips} held-out clips; RL budget {budget} env-steps "
        f"per seed; wall time {study['wall_seconds'] / 60:.1f} min.",
        "Means across seeds with Student-t 95 % intervals (over the seeds). Lower CR and DR, higher RC, "
        "driving score and success are better.",
        "",
        "| stage | " + " | ".join(label for _, label, _ in SUMMARY) + " |",
        "|---|" + "---|" * len(SUMMARY),
    ]
    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(_ci(agg[stage][k]) for k, _, _ in SUMMARY) + " |")
    lines += [
        "",
        "## Paired: RL+IL - IL on the same clips",
        "",
        "Pooled over seeds x clips with a bootstrap 95 % interval over the pairs; per seed, the mean "
        "difference with a t interval across seeds.",
        "",
        "| metric | pooled | across seeds |",
        "|---|---|---|",
    ]
    for d in pair.values():
        lines.append(f"| {d['label']} | {_ci(d)} | {_ci(d['across_seeds'])} |")
    mc = pair["collision"]["mcnemar"]
    lines += [
        "",
        f"McNemar on collisions: RL+IL fixed {mc['only_a']} clips that IL collided in and broke {mc['only_b']} "
        f"that IL drove (exact p = {mc['p_value']:.3g}).",
        "",
        "## Target",
        "",
        f"CR lower with the paired interval excluding 0: **{v['cr_lower_significant']}**; RC >= 0.95 x IL's: "
        f"**{v['rc_at_least_95pct']}**; DR no worse: **{v['dr_no_worse']}**. Target met: **{v['met']}**.",
        "",
        "![stages](stages.png)",
        "",
        "![curves](curves.png)",
        "",
        "## Seeds",
        "",
        "| seed | run | env-steps | train min | IL CR | RL+IL CR | IL RC | RL+IL RC | report |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in study["seeds"]:
        il, rl = s["eval"]["stages"]["il"]["metrics"], s["eval"]["stages"]["rl+il"]["metrics"]
        folder = Path(s["eval"]["report"]).parent.name
        lines.append(
            f"| {s['seed']} | {s['train']['run']} | {s['train']['env_steps']:,} | "
            f"{s['train']['train_seconds'] / 60:.1f} | {il['CR']:.3f} | {rl['CR']:.3f} | {il['RC']:.3f} | "
            f"{rl['RC']:.3f} | [{folder}]({folder}/report.md) |"
        )
    lines += images_md(study)
    return "\n".join(lines) + "\n"


def images_md(study: dict) -> list[str]:
    """study.md's "Images" section: the camera policy beside its ablations and the teacher; perception."""
    rows = study.get("images") or {}
    lines: list[str] = []
    if len(rows) > 1:
        lines += [
            "",
            "## Images: does the camera policy use its cameras?",
            "",
            f"The final camera policy (RL+IL) on `{study['config']['eval_suite']}` with its own images, with its "
            "cameras blanked (flat grey), with another clip's frames (the rig's view on another clip's expert "
            "drive), and the privileged teacher (ground truth, no cameras) when trained. Means across seeds "
            "with t intervals; then each against the camera policy on the same clips (pooled over seeds x "
            "clips, bootstrap 95 % interval).",
            "",
            "| policy | seeds | " + " | ".join(label for _, label, _ in SUMMARY) + " |",
            "|---|---|" + "---|" * len(SUMMARY),
        ]
        for label, row in rows.items():
            cells = " | ".join(_ci(row["metrics"][k]) for k, _, _ in SUMMARY)
            lines.append(f"| {label} | {row['seeds']} | {cells} |")
        lines += ["", "| policy - camera policy | " + " | ".join(n for _, n in PAIRED) + " |", "|---|---|---|---|"]
        for label, row in rows.items():
            if "paired" in row:
                lines.append(f"| {label} | " + " | ".join(_ci(row["paired"][k]) for k, _ in PAIRED) + " |")
    percs = [s["train"].get("perception") for s in study["seeds"] if s["train"].get("perception")]
    if percs:
        keys: tuple[str, ...] = ("occupancy_iou", "prior_occupancy_iou", "velocity_error", "drivable_iou")
        keys += ("prior_drivable_iou", "lane_iou", "prior_lane_iou")
        lines += [
            "",
            "## Stage perception on val (the frozen encoder's view)",
            "",
            "Mean across seeds with t intervals; prior_*: the train frames' per-cell prior, which ignores the "
            "images. Per kind: each run's perception.md.",
            "",
            "| " + " | ".join(keys) + " |",
            "|" + "---|" * len(keys),
            "| " + " | ".join(_ci(seed_interval([_num(p.get(k)) for p in percs])) for k in keys) + " |",
        ]
    return lines


def plot(study: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    agg = study["aggregate"]
    fig, axes = plt.subplots(1, len(SUMMARY), figsize=(3 * len(SUMMARY), 3))
    for ax, (key, label, _) in zip(axes, SUMMARY):
        means = [agg[s][key]["mean"] for s in STAGES]
        err = [
            [m - agg[s][key]["lo"] for s, m in zip(STAGES, means)],
            [agg[s][key]["hi"] - m for s, m in zip(STAGES, means)],
        ]
        ax.bar(STAGES, means, yerr=err, capsize=4, color=["#8da0cb", "#fc8d62"])
        for s in study["seeds"]:
            ax.plot(STAGES, [s["eval"]["stages"][st]["metrics"][key] for st in STAGES], "k.-", alpha=0.4, lw=0.8)
        ax.set_title(label)
    fig.suptitle(f"{study['config']['eval_suite']}: mean and 95 % interval across seeds (dots: seeds)")
    fig.tight_layout()
    files.append(out / "stages.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for s in study["seeds"]:
        hist = [h for h in s["train"]["val_history"] if h.get("stage") != "il" or h.get("label") == "il"]
        xs = [h["env_steps"] for h in hist]
        axes[0].plot(xs, [h.get("CR", math.nan) for h in hist], ".-", label=f"seed {s['seed']}")
        axes[1].plot(xs, [h.get("RC", math.nan) for h in hist], ".-")
        if s["train"]["returns"]:
            x, y = zip(*s["train"]["returns"])
            axes[2].plot(x, y, lw=0.8)
    for ax, t in zip(axes, ("val CR", "val route completion", "episodic return (rollouts)")):
        ax.set_title(t)
        ax.set_xlabel("RL env-steps")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    files.append(out / "curves.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files


# -- the whole study -------------------------------------------------------------------------------


def run(cfg: StudyConfig) -> dict:
    # inside a Ray job a relative path lands in the job's temporary package: refused before any work
    check_job_path(cfg.out, "out", "Give out=s3://bucket/prefix/studies/<name> (or an absolute shared path).")
    check_job_path(
        cfg.train.store.uri, "train.store", "Give train.store=s3://bucket/prefix (or an absolute shared path)."
    )
    folder = OutputFolder(cfg.out, resume=True)  # a store URI: a local copy of it, earlier evaluations included
    local = dataclasses.replace(cfg, out=str(folder.path))  # where the evaluations write (seed runs: seed_run(cfg))
    out = folder.path
    t0 = time.perf_counter()
    seeds = []
    for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
        tcfg = seed_run(cfg, seed)
        log.info("study %s: seed %d (run %s)", cfg.name, seed, tcfg.run)
        trained = train_seed(tcfg)
        ev = evaluate_seed(local, tcfg, seed)
        seeds.append({"seed": seed, "train": trained, "eval": ev, "images": images_seed(local, tcfg, seed)})
        folder.sync()
        il, rl = ev["stages"]["il"]["metrics"], ev["stages"]["rl+il"]["metrics"]
        print(
            f"study {cfg.name}: seed {seed} on {cfg.eval_suite}: CR IL {il['CR']:.3f} -> RL+IL {rl['CR']:.3f}, "
            f"RC {il['RC']:.3f} -> {rl['RC']:.3f}, DR {il['DR']:.3f} -> {rl['DR']:.3f}",
            flush=True,
        )
    agg = aggregate(seeds)
    pair = paired(seeds)
    study = {
        "config": to_dict(cfg),
        "seeds": seeds,
        "aggregate": agg,
        "paired": pair,
        "verdict": verdict(agg, pair),
        "images": images(seeds),
        "wall_seconds": time.perf_counter() - t0,
    }
    study = json_safe(study)  # a dict in, a dict out
    atomic_write(out / "study.json", json.dumps(study, indent=2) + "\n")
    plot(study, out)
    atomic_write(out / "study.md", report_md(study))
    folder.sync()
    return study


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_cli(StudyConfig, argv, "python -m learner.study", __doc__.split("\n\n")[0])
    try:
        study = run(cfg)
    except ConfigError as e:  # a path that would vanish with a Ray job, a resume with another network
        print(f"learner.study: {e}", file=sys.stderr)
        return 2
    print(report_md(study))
    where = OutputFolder.describe(cfg.out)
    print(f"wrote study.json, study.md, stages.png, curves.png and eval-s*/ to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
