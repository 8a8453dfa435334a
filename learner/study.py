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
from learner.config import EvalConfig, ILConfig, StoreConfig, TrainConfig
from learner.study_report import PAIRED, SUMMARY, plot, report_md
from learner.train import il_snapshot_name, train
from policy.sources import redact_tree, resolve_policy_source
from rollout.job import check_job_path
from sim.configs import ConfigError, field, non_defaults, parse_cli, to_dict
from sim.files import atomic_write
from store import CheckpointStore, OutputFolder, is_uri, join_uri, json_safe, split_uri

log = logging.getLogger("learner.study")

STAGES = ("il", "rl+il")  # every seed's two runs' policies; with dagger=true also "dagger", "dagger+rl+il"
LEARNED = ("il", "rl+il", "dagger", "dagger+rl+il")
# paired comparisons beside RL+IL - IL, when both were driven: (b, a) for b - a
MORE_PAIRS = (
    ("dagger+rl+il", "dagger"), ("dagger", "il"), ("dagger+rl+il", "rl+il"), ("rl+il", "reactive"),
    ("dagger+rl+il", "il"), ("rl+il", "lane-follow"), ("dagger", "lane-follow"), ("dagger+rl+il", "lane-follow"),
)  # fmt: skip

# The study's budget, sized so that the whole study (3 seeds x three stages in camera mode, the teacher,
# the ablations, every evaluation) runs in about an hour on 2 CPU cores (the README has the measured wall
# time): stage perception on 2,016 training frames (perception.frames: 2 from each of train's 1,008 clips;
# the frame cache is rendered once for every seed), 30 epochs; 60 IL iterations; 100 RL iterations x
# (2 actors x 4 envs x 32 steps) = 25,600 env-steps of RL per seed, with an evaluation on val every 50 RL
# iterations for the learning curve. A longer RL stage is one setting
# (``train.iterations=400``: 102,400 env-steps, about 4x the RL time).
STUDY_TRAIN = TrainConfig(  # only what differs from TrainConfig's own defaults (stage perception+il+rl, ...)
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
    dagger: bool = field(
        False,
        help="also train a DAgger arm per seed (run <name>-s<seed>-dagger: the same IL, then train.il.dagger_rounds "
        "-- dagger_rounds when that is 0 -- of DAgger with the reactive expert, then the same RL+IL) and evaluate "
        "DAgger and DAgger -> RL+IL beside IL and IL -> RL+IL",
    )
    dagger_rounds: int = field(10, help="DAgger rounds of the DAgger arm when train.il.dagger_rounds is 0")
    dagger_teacher: str = field(
        "reactive",
        help="who labels the DAgger arm's states: 'reactive' (the reactive expert), 'teacher' (the seed's privileged "
        "teacher, trained first; needs teacher=true) or a privileged policy SOURCE (trained beforehand, e.g. by "
        "docs/study-teacher; driven beside each seed on its own privileged observation, and the student's 0.9x "
        "target held against it). In camera mode the arm is stage distill: the camera student drives, the teacher "
        "labels (its action distribution, for a policy teacher)",
    )
    share_perception: bool = field(
        True,
        help="stage perception trained once (by the first seed's run, store run <name>-perception) and loaded by "
        "every seed and arm: the seeds then vary the planner, not the encoder (20k frames x epochs is most of an "
        "hour on 2 cores)",
    )
    baselines: tuple[str, ...] = field(
        (), help="baselines driven beside each seed's policies, paired clip by clip (e.g. reactive, lane-follow)"
    )

    def __post_init__(self):
        if self.seeds < 1 or self.first_seed < 0:
            raise ValueError(f"seeds >= 1 and first_seed >= 0 are required, got {self.seeds}, {self.first_seed}")
        if self.dagger_teacher == "teacher" and not self.teacher:
            raise ValueError("dagger_teacher=teacher: the seed's privileged teacher labels the arm, but teacher=false")
        if self.train.stage not in ("il+rl", "perception+il+rl"):
            raise ValueError(
                f"train.stage: the study trains IL, then RL+IL from it (il+rl or perception+il+rl), got "
                f"{self.train.stage!r}"
            )


def seed_run(cfg: StudyConfig, seed: int) -> TrainConfig:
    """The training config of one seed: its tracking files in ``<out>/runs/``, or with the run in the
    store when ``out`` is a store URI."""
    tracking = dataclasses.replace(cfg.train.tracking, out="" if is_uri(cfg.out) else str(Path(cfg.out) / "runs"))
    perception = cfg.train.perception
    if cfg.share_perception and not perception.run:
        perception = dataclasses.replace(perception, run=f"{cfg.name}-perception")
    run = f"{cfg.name}-s{seed}"
    return dataclasses.replace(cfg.train, run=run, seed=seed, tracking=tracking, perception=perception)


def teacher_run(cfg: StudyConfig, seed: int) -> TrainConfig:
    """The privileged teacher of one seed: ground truth instead of images (no cameras, no perception)."""
    tcfg = seed_run(cfg, seed)
    env = dataclasses.replace(tcfg.env, observation="privileged", cameras=False, camera_ablation="none")
    return dataclasses.replace(tcfg, run=f"{cfg.name}-s{seed}-teacher", stage="il+rl", env=env)


def dagger_run(cfg: StudyConfig, seed: int) -> TrainConfig:
    """The seed's DAgger arm: its run, with DAgger rounds at the end of stage il, labelled by
    ``cfg.dagger_teacher``; in camera mode that is stage distill (a camera student, a privileged teacher)."""
    tcfg = seed_run(cfg, seed)
    il = tcfg.il if tcfg.il.dagger_rounds else dataclasses.replace(tcfg.il, dagger_rounds=cfg.dagger_rounds)
    teacher = cfg.dagger_teacher
    if teacher == "teacher":
        teacher = policy_specs(teacher_run(cfg, seed))["rl+il"]
    il = dataclasses.replace(il, teacher=teacher)
    stage = tcfg.stage
    if tcfg.env.observation == "camera":
        stage = stage.replace("il", "distill")
    return dataclasses.replace(tcfg, run=f"{tcfg.run}-dagger", il=il, stage=stage)


def policy_specs(tcfg: TrainConfig, il: str = "il", rl: str = "rl+il") -> dict[str, str]:
    """Store URIs of a run's two final policies: {il: the end of its stage il, rl: its final policy}."""
    store = tcfg.store.uri
    return {il: join_uri(store, f"{il_snapshot_name(tcfg.run)}@latest"), rl: join_uri(store, f"{tcfg.run}@latest")}


def seed_specs(cfg: StudyConfig, seed: int) -> dict[str, str]:
    """Every policy a seed's evaluation drives, by label: IL, IL -> RL+IL, (DAgger, DAgger -> RL+IL), baselines."""
    specs = policy_specs(seed_run(cfg, seed))
    if cfg.dagger:
        specs.update(policy_specs(dagger_run(cfg, seed), "dagger", "dagger+rl+il"))
    specs.update({b: b for b in cfg.baselines})
    return specs


# -- one seed --------------------------------------------------------------------------------------


def train_seed(tcfg: TrainConfig) -> dict:
    """Train (or resume, or find finished) one seed; its val history and return curve."""
    t0 = time.perf_counter()
    result = train(tcfg)
    history = [dict(r) for r in result.state.history]
    returns, failures = [], []  # the training rollouts' curves: return, collision rate (last 200 episodes)
    jsonl = result.folder / "metrics.jsonl"
    if jsonl.is_file():
        for line in jsonl.read_text().splitlines():
            row = json.loads(line)
            if "charts/episodic_return" in row:
                returns.append((int(row["step"]), float(row["charts/episodic_return"])))
            if "charts/collision_rate" in row:
                failures.append((int(row["step"]), float(row["charts/collision_rate"])))
    perception = result.perception or {}
    return {
        "run": result.run,
        "env_steps": int(result.state.env_steps),
        "train_seconds": time.perf_counter() - t0,
        "val_history": history,
        "returns": returns,
        "train_failures": failures,
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
    """Every policy of a seed (``seed_specs``) on ``eval_suite`` in one comparison: metrics and per-clip
    values, paired by clip."""
    specs = seed_specs(cfg, seed)
    stages = list(specs)
    out = Path(cfg.out) / f"eval-s{seed}"
    ecfg = EvaluateConfig(
        compare=tuple(specs[s] for s in stages),
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
        labels = dict(zip(stages, res.summary["order"]))
        out_stages = {}
        for stage in stages:
            recs = res.records[labels[stage]]
            out_stages[stage] = {
                "policy": specs[stage],
                "metrics": rad_metrics(recs),
                "clips": {r["scenario"]: clip_values(r) for r in recs},
            }
        # the report relative to the study's folder (a local scratch path means nothing once out is a store URI)
        report = f"{out.name}/report.md"
        return {"eval_seconds": time.perf_counter() - t0, "report": report, "stages": out_stages}

    key = {"config": to_dict(ecfg), "checkpoints": _pinned(tcfg, [specs[s] for s in stages if s in LEARNED])}
    return _cached_evaluation(out, key, compute)


# what the camera policy is held against: (label, camera_ablation) -- and the teacher, when trained
ABLATIONS = (("cameras blanked", "blank"), ("another clip's frames", "shuffle"))
CAMERA_POLICY = "camera policy"
TEACHER = "privileged teacher"
DISTILL_TEACHER = "distill teacher (dagger_teacher)"


def given_teacher(cfg: StudyConfig) -> str | None:
    """The DAgger arm's labeller when it is a policy SOURCE the user gave (``dagger_teacher``), else None."""
    return cfg.dagger_teacher if cfg.dagger and cfg.dagger_teacher not in ("reactive", "teacher") else None


def source_pin(spec: str) -> list[str]:
    """A cache key for any policy SOURCE, whichever store or folder it is in: a checkpoint's run, version and
    manifest digest, or an exported package's folder and policy.json digest."""
    prov = resolve_policy_source(spec).provenance
    if prov.get("kind") == "checkpoint":
        return [f"{prov.get('run')}@{prov.get('version')}", str(prov.get("manifest_sha256"))]
    return [str(prov.get("path")), str(prov.get("policy_json_sha256"))]


def evaluate_policy(
    cfg: StudyConfig, spec: str, env: dict, out: Path, seed: int, ray_address: str, pins: list[str] | None = None
) -> dict:
    """One policy on ``eval_suite`` with the env settings ``env``: its metrics and per-clip values. pins: what
    identifies the policy's weights in the cache key (default: ``spec`` resolved in the study's store)."""
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
            "report": f"{out.name}/report.md",  # relative to the study's folder (out is one of its children)
            "metrics": rad_metrics(recs),
            "clips": {r["scenario"]: clip_values(r) for r in recs},
        }

    pinned = _pinned(cfg.train, [spec]) if pins is None else pins
    return _cached_evaluation(out, {"config": to_dict(ecfg), "checkpoints": pinned}, compute)


def images_seed(cfg: StudyConfig, tcfg: TrainConfig, seed: int) -> dict:
    """The seed's camera policy with other images (ABLATIONS), the privileged teacher (trained here, or found
    trained) when ``cfg.teacher``, and the DAgger arm's labeller when it is a SOURCE the user gave
    (``given_teacher``, on its own observation: its training env settings): {label: evaluate_policy(...)}."""
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
    given = given_teacher(cfg)
    if given is not None:
        folder = Path(cfg.out) / f"eval-s{seed}-distill-teacher"
        out[DISTILL_TEACHER] = evaluate_policy(cfg, given, {}, folder, seed, "", pins=source_pin(given))
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


def paired(seeds: list[dict], b_stage: str = "rl+il", a_stage: str = "il") -> dict:
    """``b_stage`` - ``a_stage`` (RL+IL - IL by default) on the same clips: pooled over seeds x clips, and per
    seed (t interval across seeds)."""
    out = {}
    for key, label in PAIRED:
        a_all, b_all, per_seed = [], [], []
        for s in seeds:
            a, b = s["eval"]["stages"][a_stage]["clips"], s["eval"]["stages"][b_stage]["clips"]
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
    """Per stage (every policy the seeds drove) and metric: the mean across seeds with its Student-t interval."""
    stages = list(seeds[0]["eval"]["stages"]) if seeds else list(STAGES)
    return {
        stage: {
            key: seed_interval([s["eval"]["stages"][stage]["metrics"][key] for s in seeds]) for key, _, _ in SUMMARY
        }
        for stage in stages
    }


def verdict(agg: dict, pair: dict, more: dict | None = None, camera: dict | None = None) -> dict:
    """The targets, checked. RL+IL against IL: CR down with the paired interval excluding 0 and to <= 0.4x
    (RAD's stage 2), RC >= 0.95 IL's, DR no worse. With DAgger: DAgger -> RL+IL no worse than DAgger (the
    paired driving-score interval does not lie below 0). With ``reactive`` driven: the best learned policy (by
    mean driving score) has success >= 0.85 and a CR within 0.05 of reactive's. With ``camera`` (a camera
    study): :func:`camera_checks`."""
    il, rl = agg["il"], agg["rl+il"]
    cr = pair["collision"]
    checks: dict = {
        "cr_lower_significant": bool(cr["hi"] < 0.0),
        "cr_at_most_40pct": bool(rl["CR"]["mean"] <= 0.4 * il["CR"]["mean"]),
        "rc_at_least_95pct": bool(rl["RC"]["mean"] >= 0.95 * il["RC"]["mean"]),
        "dr_no_worse": bool(rl["DR"]["mean"] <= il["DR"]["mean"] + 1e-12),
    }
    if more and "dagger+rl+il - dagger" in more:
        checks["dagger_rl_no_worse"] = bool(more["dagger+rl+il - dagger"]["DS"]["hi"] >= 0.0)
    learned = [s for s in LEARNED if s in agg]
    best = max(learned, key=lambda s: agg[s]["DS"]["mean"])
    if "reactive" in agg:
        checks["best_success_85pct"] = bool(agg[best]["success_rate"]["mean"] >= 0.85)
        checks["best_cr_within_005_of_reactive"] = bool(agg[best]["CR"]["mean"] <= agg["reactive"]["CR"]["mean"] + 0.05)
    if camera is not None:
        checks.update(camera_checks(agg, more or {}, camera, best))
    return {"met": all(checks.values()), "best": best, **checks}


def camera_checks(agg: dict, more: dict, camera: dict, best: str) -> dict:
    """The camera study's targets (issue 24): the distilled student's driving score >= 0.9 x its teacher's
    (``camera['teacher_ds']``); an RL stage cutting CR to <= 0.5 x camera IL's with the paired interval excluding
    0; the best learned policy above lane-follow on driving score, interval excluding 0; blanked cameras raising
    the CR, interval excluding 0 (``camera['images']``: the images section)."""
    out: dict = {}
    if "dagger" in agg and camera.get("teacher_ds") is not None:
        out["student_ds_90pct_of_teacher"] = bool(agg["dagger"]["DS"]["mean"] >= 0.9 * camera["teacher_ds"])
    cuts = []
    for rl, base in (("dagger+rl+il", "il"), ("rl+il", "il")):
        key = f"{rl} - {base}"
        if rl in agg and key in more:
            cuts.append(agg[rl]["CR"]["mean"] <= 0.5 * agg["il"]["CR"]["mean"] and more[key]["collision"]["hi"] < 0)
    if cuts:
        out["rl_cr_at_most_half_of_camera_il"] = bool(any(cuts))
    lane = more.get(f"{best} - lane-follow")
    if lane is not None:
        out["beats_lane_follow"] = bool(lane["DS"]["lo"] > 0)
    blank = (camera.get("images") or {}).get("cameras blanked", {}).get("paired", {}).get("collision")
    if blank is not None:
        out["blank_raises_cr"] = bool(blank["lo"] > 0)
    return out


def camera_targets(cfg: StudyConfig, agg: dict, imgs: dict) -> dict | None:
    """What :func:`camera_checks` needs, for a camera study (None otherwise): the distill teacher's driving score
    (reactive's when it labelled and was driven, the study's privileged teacher's when it labelled, the given
    SOURCE's when one labelled) and the images section."""
    if cfg.train.env.observation != "camera" or not cfg.train.env.cameras:
        return None
    teacher_ds = None
    if cfg.dagger_teacher == "reactive" and "reactive" in agg:
        teacher_ds = agg["reactive"]["DS"]["mean"]
    elif cfg.dagger_teacher == "teacher" and TEACHER in imgs:
        teacher_ds = imgs[TEACHER]["metrics"]["DS"]["mean"]
    elif DISTILL_TEACHER in imgs:
        teacher_ds = imgs[DISTILL_TEACHER]["metrics"]["DS"]["mean"]
    return {"teacher_ds": teacher_ds, "images": imgs}


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
        if cfg.dagger and cfg.dagger_teacher == "teacher":  # the arm's teacher first (images_seed finds it trained)
            train_seed(dataclasses.replace(teacher_run(cfg, seed), tracking=tcfg.tracking))
        trained = train_seed(tcfg)
        dagger_trained = train_seed(dagger_run(cfg, seed)) if cfg.dagger else None
        ev = evaluate_seed(local, tcfg, seed)
        seeds.append({"seed": seed, "train": trained, "eval": ev, "images": images_seed(local, tcfg, seed)})
        if dagger_trained is not None:
            seeds[-1]["dagger_train"] = dagger_trained
        folder.sync()
        il, rl = ev["stages"]["il"]["metrics"], ev["stages"]["rl+il"]["metrics"]
        print(
            f"study {cfg.name}: seed {seed} on {cfg.eval_suite}: CR IL {il['CR']:.3f} -> RL+IL {rl['CR']:.3f}, "
            f"RC {il['RC']:.3f} -> {rl['RC']:.3f}, DR {il['DR']:.3f} -> {rl['DR']:.3f}",
            flush=True,
        )
    agg = aggregate(seeds)
    pair = paired(seeds)
    more = {f"{b} - {a}": paired(seeds, b, a) for b, a in MORE_PAIRS if b in agg and a in agg}
    imgs = images(seeds)
    study = {
        "config": redact_tree(to_dict(cfg)),  # a store URI's credentials as ***
        "seeds": seeds,
        "aggregate": agg,
        "paired": pair,
        "paired_more": more,
        "verdict": verdict(agg, pair, more, camera_targets(cfg, agg, imgs)),
        "images": imgs,
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
