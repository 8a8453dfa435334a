"""What ``python -m learner.study`` writes: ``study.md`` (tables with intervals, the paired comparisons, the
target checked) and the figures ``stages.png`` and ``curves.png``. Pure functions of the study's dict
(``study.json``); the policies are whatever each seed's evaluation drove (``seed["eval"]["stages"]``: IL,
RL+IL, and with DAgger and baselines, those too), in the evaluation's order."""

from __future__ import annotations

import math
from pathlib import Path

from evaluation.stats import seed_interval

# (key in rad_metrics, label, higher is better)
SUMMARY = (
    ("CR", "CR", False),
    ("DR", "DR", False),
    ("RC", "RC", True),
    ("DS", "driving score", True),
    ("success_rate", "success", True),
)
PAIRED = (("collision", "CR"), ("RC", "RC"), ("DS", "driving score"))
NAMES = {
    "il": "IL (expert states)",
    "rl+il": "IL -> RL+IL",
    "dagger": "DAgger / distill",
    "dagger+rl+il": "DAgger / distill -> RL+IL",
}


def stages_of(study: dict) -> list[str]:
    """The policies the seeds' evaluations drove, in order (the first seed's; every seed drives the same)."""
    return list(study["seeds"][0]["eval"]["stages"]) if study["seeds"] else []


def _num(v) -> float:
    return math.nan if v is None else float(v)


def _ci(d: dict, digits: int = 3) -> str:
    if not d or d.get("n", 0) == 0 or not math.isfinite(d["mean" if "mean" in d else "diff"]):
        return "n/a"
    m = d["mean"] if "mean" in d else d["diff"]
    if "mean" in d and d.get("n") == 1:  # an interval across seeds needs two seeds at least
        return f"{m:.{digits}f} (1 seed)"
    return f"{m:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}]"


def _pair_lines(title: str, pair: dict, b: str, a: str) -> list[str]:
    lines = [
        "",
        f"## Paired: {NAMES.get(b, b)} - {NAMES.get(a, a)} on the same clips",
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
        f"McNemar on collisions: {title} fixed {mc['only_a']} clips that the other collided in and broke "
        f"{mc['only_b']} that it drove (exact p = {mc['p_value']:.3g}).",
    ]
    return lines


def _target_lines(v: dict) -> list[str]:
    words = {
        "cr_lower_significant": "RL+IL's CR lower than IL's with the paired interval excluding 0",
        "cr_at_most_40pct": "RL+IL's CR <= 0.4 x IL's (RAD's stage 2 against imitation)",
        "rc_at_least_95pct": "RL+IL's RC >= 0.95 x IL's",
        "dr_no_worse": "RL+IL's DR no worse than IL's",
        "best_success_85pct": "the best learned policy's success >= 0.85",
        "best_cr_within_005_of_reactive": "the best learned policy's CR within 0.05 of reactive's",
        "dagger_rl_no_worse": "DAgger -> RL+IL no worse than DAgger (paired driving score not lower, significantly)",
        "student_ds_90pct_of_teacher": "the camera student's (distill) driving score >= 0.9 x its teacher's",
        "rl_cr_at_most_half_of_camera_il": "distill -> RL+IL or IL -> RL+IL cuts CR to <= 0.5 x camera IL's, the "
        "paired interval excluding 0",
        "beats_lane_follow": "the best learned policy beats lane-follow on driving score, the paired interval "
        "excluding 0",
        "blank_raises_cr": "blanked cameras raise the CR, the paired interval excluding 0",
    }
    lines = ["", "## Target", ""]
    for k, text in words.items():
        if k in v:
            lines.append(f"- {text}: **{v[k]}**")
    if v.get("best"):
        lines.append(f"- the best learned policy by mean driving score: {NAMES.get(v['best'], v['best'])}")
    lines.append(f"- met: **{v['met']}**")
    return lines


def report_md(study: dict) -> str:
    cfg, agg, v = study["config"], study["aggregate"], study["verdict"]
    stages = stages_of(study)
    n_clips = len(study["seeds"][0]["eval"]["stages"]["il"]["clips"]) if study["seeds"] else 0
    steps = [s["train"]["env_steps"] for s in study["seeds"]]
    lo, hi = min(steps, default=0), max(steps, default=0)
    budget = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    lines = [
        f"# Study `{cfg['name']}` on `{cfg['eval_suite']}`",
        "",
        f"{len(study['seeds'])} seeds x {n_clips} held-out clips; RL budget {budget} env-steps per RL run; "
        f"wall time {study['wall_seconds'] / 60:.1f} min.",
        "Means across seeds with Student-t 95 % intervals (over the seeds). Lower CR and DR, higher RC, "
        "driving score and success are better. Baselines are deterministic: the same on every seed.",
        "",
        "| policy | " + " | ".join(label for _, label, _ in SUMMARY) + " |",
        "|---|" + "---|" * len(SUMMARY),
    ]
    for stage in stages:
        lines.append(f"| {NAMES.get(stage, stage)} | " + " | ".join(_ci(agg[stage][k]) for k, _, _ in SUMMARY) + " |")
    lines += _pair_lines("RL+IL", study["paired"], "rl+il", "il")
    for name, pair in (study.get("paired_more") or {}).items():
        b, a = name.split(" - ")
        lines += _pair_lines(NAMES.get(b, b), pair, b, a)
    lines += _target_lines(v)
    lines += ["", "![stages](stages.png)", "", "![curves](curves.png)", "", "## Seeds", ""]
    lines += ["| seed | run | RL env-steps | train min | " + " | ".join(f"{s} CR" for s in stages) + " | report |"]
    lines += ["|---|---|---|---|" + "---|" * len(stages) + "---|"]
    for s in study["seeds"]:
        folder = Path(s["eval"]["report"]).parent.name
        crs = " | ".join(f"{s['eval']['stages'][st]['metrics']['CR']:.3f}" for st in stages)
        lines.append(
            f"| {s['seed']} | {s['train']['run']} | {s['train']['env_steps']:,} | "
            f"{s['train']['train_seconds'] / 60:.1f} | {crs} | [{folder}]({folder}/report.md) |"
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
            "drive), the privileged teacher (ground truth, no cameras) when trained, and the distilled student's "
            "teacher when a policy given as dagger_teacher labelled it (on its own privileged observation). Means "
            "across seeds "
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
        keys += ("prior_drivable_iou", "lane_iou", "prior_lane_iou", "occupancy_iou_cal", "prior_occupancy_iou_cal")
        lines += [
            "",
            "## Stage perception on val (the frozen encoder's view)",
            "",
            "Mean across seeds with t intervals; prior_*: the train frames' per-cell prior, which ignores the "
            "images; *_cal: at the threshold with the best IoU on training frames (not val). Per kind: each "
            "run's perception.md.",
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
    stages = stages_of(study)
    names = [NAMES.get(s, s).replace(" -> ", "\n-> ") for s in stages]
    fig, axes = plt.subplots(1, len(SUMMARY), figsize=(3.2 * len(SUMMARY) + 0.4 * len(stages), 3.4))
    for ax, (key, label, _) in zip(axes, SUMMARY):
        means = [agg[s][key]["mean"] for s in stages]
        err = [
            [m - agg[s][key]["lo"] for s, m in zip(stages, means)],
            [agg[s][key]["hi"] - m for s, m in zip(stages, means)],
        ]
        ax.bar(range(len(stages)), means, yerr=err, capsize=3, color=[f"C{i}" for i in range(len(stages))])
        for s in study["seeds"]:
            ax.plot(range(len(stages)), [s["eval"]["stages"][st]["metrics"][key] for st in stages], "k.", alpha=0.5)
        ax.set_xticks(range(len(stages)), names, fontsize=6, rotation=60)
        ax.set_title(label)
    fig.suptitle(f"{study['config']['eval_suite']}: mean and 95 % interval across seeds (dots: seeds)")
    fig.tight_layout()
    files.append(out / "stages.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.2))
    for s in study["seeds"]:
        for i, train in enumerate([s["train"], *([s["dagger_train"]] if s.get("dagger_train") else [])]):
            style = "-" if i == 0 else "--"
            hist = [h for h in train["val_history"] if h.get("stage") != "il" or h.get("label") == "il"]
            xs = [h["env_steps"] for h in hist]
            lab = f"seed {s['seed']}{' DAgger' if i else ''}"
            axes[0].plot(xs, [h.get("CR", math.nan) for h in hist], "." + style, label=lab)
            axes[1].plot(xs, [h.get("RC", math.nan) for h in hist], "." + style)
            if train["returns"]:
                x, y = zip(*train["returns"])
                axes[2].plot(x, y, style, lw=0.8)
            if train.get("train_failures"):
                x, y = zip(*train["train_failures"])
                axes[3].plot(x, y, style, lw=0.8)
    titles = ("val CR", "val route completion", "train: episodic return", "train: rollouts' collision rate")
    for ax, t in zip(axes, titles):
        ax.set_title(t)
        ax.set_xlabel("RL env-steps")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    files.append(out / "curves.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files
