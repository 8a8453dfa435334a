"""What ``python -m evaluation`` writes: per-clip rows, RAD-style tables, the metrics plot, videos.

Pure functions of the evaluation's per-clip records (``rollout.episodes``) and of
``evaluation.metrics.rad_metrics`` results, plus the writers that put them on disk:

- :func:`clip_row` / :func:`write_csv`: one CSV row per (policy, scenario);
- :func:`rad_table`: RAD Table 1's layout (policy | CR | DCR | SCR | DR | PDR | HDR | ADD | Long J | Lat J)
  as markdown; :func:`kind_table`: the same per scenario kind;
- :func:`interval_table`: the rates and clip means that a stopped car cannot game (CR, DR, PGR, RC, driving
  score, ADE, speed ratio, survival, success), each with its 95 % interval;
- :func:`paired_comparison` / :func:`paired_table`: every policy against the first on the same clips
  (differences in CR, RC and driving score with paired bootstrap intervals, McNemar on failures);
- :func:`plot_metrics`: grouped bars, one group per metric, one bar per policy (matplotlib Agg);
- :func:`worst_first`: the clips to film (failures first, then by ADD);
- :func:`banner` / :func:`write_video`: an MP4 of a clip's frames (cameras + bird's-eye view) with the
  event named on the frame where it happened, that frame held for about a second at the end.

Nothing here steps an env; ``evaluation.evaluate`` produces the frames.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from evaluation.metrics import clip_values, rad_metrics
from evaluation.stats import mcnemar, paired_difference
from sim.viz import Mp4Writer

# RAD Table 1's columns: (header, rad_metrics key)
RAD_COLUMNS = (
    ("CR", "CR"),
    ("DCR", "DCR"),
    ("SCR", "SCR"),
    ("DR", "DR"),
    ("PDR", "PDR"),
    ("HDR", "HDR"),
    ("ADD", "ADD"),
    ("Long J", "long_jerk"),
    ("Lat J", "lat_jerk"),
)
EXTRA_COLUMNS = (("RC", "RC"), ("DS", "DS"), ("Success", "success_rate"), ("N", "n"))
# (header, rad_metrics key) of the interval table: each with ``<key>_ci``
INTERVAL_COLUMNS = (
    ("CR", "CR"),
    ("DR", "DR"),
    ("PGR", "PGR"),
    ("RC", "RC"),
    ("driving score", "DS"),
    ("ADE (m)", "ADE"),
    ("speed / expert", "speed_ratio"),
    ("survival", "survival"),
    ("success", "success_rate"),
)
# (clip_values key, label) of the paired comparison
PAIRED_VALUES = (("collision", "CR"), ("failure", "failure rate"), ("RC", "RC"), ("DS", "driving score"))

CSV_FIELDS = (
    "policy",
    "scenario",
    "kind",
    "event",
    "step",
    "steps",
    "horizon",
    "success",
    "survival",
    "RC",
    "DS",
    "ADE",
    "speed_ratio",
    "ADD",
    "max_path_distance",
    "long_jerk",
    "lat_jerk",
    "return",
    "collision_location",
    "error",
)


def fmt(v, digits: int = 3) -> str:
    """A table cell: ints as they are, floats to ``digits`` places, NaN as '-'."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int | np.integer):
        return str(int(v))
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return "-" if not math.isfinite(f) else f"{f:.{digits}f}"


def clip_row(policy: str, record: Mapping) -> dict:
    """One CSV row: the clip's outcome and its own RAD metrics (ADD and jerks over its steps before a failure).

    ``step`` is the step at which the first failure happened (empty without one).
    """
    m = rad_metrics([record])
    c = clip_values(record)
    d = np.asarray(record.get("path_distance", ()), dtype=np.float64)
    event = str(record.get("event", "") or "")
    steps = int(record.get("steps", 0))
    return {
        "policy": policy,
        "scenario": str(record["scenario"]),
        "kind": str(record.get("kind", "")),
        "event": event,
        "step": steps if event else "",
        "steps": steps,
        "horizon": int(record.get("horizon", 0)),
        "success": int(not event and not record.get("error")),
        "survival": c["survival"],
        "RC": c["RC"],
        "DS": c["DS"],
        "ADE": c["ADE"],
        "speed_ratio": c["speed_ratio"],
        "ADD": m["ADD"],
        "max_path_distance": float(np.nanmax(d)) if d.size else float("nan"),
        "long_jerk": m["long_jerk"],
        "lat_jerk": m["lat_jerk"],
        "return": float(record.get("ret", 0.0)),
        "collision_location": str(record.get("collision_location", "") or ""),
        "error": str(record.get("error", "") or ""),
    }


def write_csv(path: str | Path, rows: Sequence[Mapping]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_FIELDS))
        w.writeheader()
        for r in rows:
            w.writerow({k: (fmt(v, 6) if isinstance(v, float) else v) for k, v in r.items()})
    return p


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def rad_table(metrics: Mapping[str, Mapping], extra: bool = True) -> str:
    """RAD Table 1 as markdown: one row per policy (in the mapping's order), lower is better in every
    RAD column. metrics: policy label -> ``rad_metrics`` result. ``extra`` adds success rate, route
    progress and the clip count."""
    cols = RAD_COLUMNS + (EXTRA_COLUMNS if extra else ())
    header = ["policy", *(h for h, _ in cols)]
    rows = [[label, *(fmt(m.get(k, float("nan"))) for _, k in cols)] for label, m in metrics.items()]
    return _md_table(header, rows)


def with_interval(m: Mapping, key: str, digits: int = 3) -> str:
    """``value [lo, hi]`` of a metric with its ``<key>_ci``, or just the value when it has none."""
    v, ci = m.get(key, float("nan")), m.get(f"{key}_ci")
    if not ci or not all(isinstance(x, int | float) and math.isfinite(x) for x in ci):
        return fmt(v, digits)
    return f"{fmt(v, digits)} [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def interval_table(metrics: Mapping[str, Mapping]) -> str:
    """The metrics a stopped car cannot game, each with its 95 % interval (Wilson for rates, bootstrap
    over clips for means). metrics: policy label -> ``rad_metrics`` result."""
    header = ["policy", *(h for h, _ in INTERVAL_COLUMNS), "N"]
    rows = [
        [label, *(with_interval(m, k) for _, k in INTERVAL_COLUMNS), fmt(m.get("n", 0))] for label, m in metrics.items()
    ]
    return _md_table(header, rows)


def paired_comparison(records: Mapping[str, Sequence[Mapping]]) -> dict[str, dict]:
    """Every policy against the first one on the clips both drove: ``"<B> - <A>"`` -> per value of
    ``PAIRED_VALUES`` the mean difference B - A with its paired bootstrap 95 % interval, and McNemar's
    exact test on failures (clips failed by A only / by B only). records: label -> records."""
    labels = list(records)
    if len(labels) < 2:
        return {}
    base = labels[0]
    a_by = {str(r["scenario"]): clip_values(r) for r in records[base]}
    out = {}
    for label in labels[1:]:
        b_by = {str(r["scenario"]): clip_values(r) for r in records[label]}
        ids = [sid for sid in a_by if sid in b_by]
        row: dict = {"a": base, "b": label, "n": len(ids)}
        for key, _ in PAIRED_VALUES:
            row[key] = paired_difference([a_by[i][key] for i in ids], [b_by[i][key] for i in ids])
        row["mcnemar"] = mcnemar([a_by[i]["failure"] > 0 for i in ids], [b_by[i]["failure"] > 0 for i in ids])
        out[f"{label} - {base}"] = row
    return out


def paired_table(paired: Mapping[str, Mapping]) -> str:
    """Markdown of :func:`paired_comparison`: one row per policy pair."""

    def cell(d: Mapping) -> str:
        if not d.get("n"):
            return "-"
        sig = " *" if d["lo"] > 0 or d["hi"] < 0 else ""
        return f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]{sig}"

    header = ["B - A", "clips", *(label for _, label in PAIRED_VALUES), "failed by A only / B only (McNemar p)"]
    rows = []
    for name, row in paired.items():
        mc = row["mcnemar"]
        rows.append(
            [
                name,
                str(row["n"]),
                *(cell(row[k]) for k, _ in PAIRED_VALUES),
                f"{mc['only_a']} / {mc['only_b']} ({mc['p_value']:.3g})",
            ]
        )
    return _md_table(header, rows)


def kind_table(by_kind: Mapping[str, Mapping[str, Mapping]]) -> str:
    """Per scenario kind: rows (kind, policy), RAD's columns plus success and N.
    by_kind: policy label -> kind -> ``rad_metrics`` result."""
    cols = RAD_COLUMNS + EXTRA_COLUMNS
    header = ["kind", "policy", *(h for h, _ in cols)]
    kinds = sorted({k for per in by_kind.values() for k in per})
    rows = []
    for kind in kinds:
        for label, per in by_kind.items():
            if kind in per:
                rows.append([kind, label, *(fmt(per[kind].get(k, float("nan"))) for _, k in cols)])
    return _md_table(header, rows)


def outcome_table(records: Mapping[str, Sequence[Mapping]]) -> str:
    """Each clip's outcome per policy: rows scenarios, columns policies, cells 'ok' or 'event @ step'.
    records: policy label -> that policy's records (the same scenarios for all)."""
    labels = list(records)
    first = records[labels[0]] if labels else []
    by = {label: {str(r["scenario"]): r for r in recs} for label, recs in records.items()}
    rows = []
    for r0 in first:
        sid = str(r0["scenario"])
        cells = []
        for label in labels:
            r = by[label].get(sid)
            if r is None:
                cells.append("")
            elif r.get("error"):
                cells.append("error")
            elif r.get("event"):
                cells.append(f"{r['event']} @ {r['steps']}")
            else:
                cells.append("ok")
        rows.append([sid, str(r0.get("kind", "")), *cells])
    return _md_table(["scenario", "kind", *labels], rows)


def worst_first(records: Sequence[Mapping]) -> list[str]:
    """Scenario ids, worst first: clips with a failure (or an error) before clean ones; within each,
    larger ADD (the clip's mean distance to the expert path before any failure) first; then by id."""

    def key(r):
        failed = bool(r.get("event")) or bool(r.get("error"))
        add = rad_metrics([r])["ADD"]
        return (not failed, -(add if math.isfinite(add) else 0.0), str(r["scenario"]))

    return [str(r["scenario"]) for r in sorted(records, key=key)]


def plot_metrics(path: str | Path, metrics: Mapping[str, Mapping], title: str = "") -> Path:
    """Grouped bars, one bar per policy: the rates (CR, DCR, SCR, DR, PDR, HDR, success) on one axis,
    ADD and the two jerks each on their own (their units differ). A PNG via matplotlib's Agg backend."""
    import matplotlib  # here, not at the top: optional (the viz extra), and only a plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(metrics)
    panels = [
        (("CR", "DCR", "SCR", "DR", "PDR", "HDR", "PGR", "success_rate", "RC", "DS"), "fraction"),
        (("ADD",), "m"),
        (("long_jerk",), "m/s^3"),
        (("lat_jerk",), "rad/s^3"),
    ]
    names = {"long_jerk": "Long J", "lat_jerk": "Lat J", "success_rate": "Success", "DS": "Score"}
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8), gridspec_kw={"width_ratios": [7, 1.4, 1.4, 1.4]})
    width = 0.8 / max(len(labels), 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (keys, unit) in zip(axes, panels):
        x = np.arange(len(keys))
        for i, label in enumerate(labels):
            vals = [float(metrics[label].get(k, float("nan"))) for k in keys]
            vals = [0.0 if not math.isfinite(v) else v for v in vals]
            cis = [metrics[label].get(f"{k}_ci") or (v, v) for k, v in zip(keys, vals)]
            err = np.array(
                [[max(v - (c[0] if c[0] is not None and math.isfinite(c[0]) else v), 0.0) for v, c in zip(vals, cis)],
                 [max((c[1] if c[1] is not None and math.isfinite(c[1]) else v) - v, 0.0) for v, c in zip(vals, cis)]]
            )  # fmt: skip
            ax.bar(
                x - 0.4 + width * (i + 0.5),
                vals,
                width,
                yerr=err,
                capsize=2,
                label=label,
                color=colors[i % len(colors)],
            )
        ax.set_xticks(x, [names.get(k, k) for k in keys])
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


# -- videos ----------------------------------------------------------------------------------------

BANNER_BG = (200, 30, 30)
BANNER_OK = (30, 130, 60)


def banner(frame: np.ndarray, text: str, color=BANNER_BG, where: str = "bottom") -> np.ndarray:
    """A copy of frame [H, W, 3] uint8 with ``text`` in a coloured band across it (bottom or top)."""
    img = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    H, W = frame.shape[:2]
    band = 18
    y0 = H - band if where == "bottom" else 0
    draw.rectangle([0, y0, W, y0 + band], fill=color)
    draw.text((6, y0 + 3), text, fill=(255, 255, 255))
    return np.asarray(img, dtype=np.uint8)


def caption(frame: np.ndarray, text: str) -> np.ndarray:
    """A copy of frame with a small dark caption (policy, scenario, step) in its top-left corner."""
    img = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    w = 6 * len(text) + 8
    draw.rectangle([0, 0, w, 14], fill=(0, 0, 0))
    draw.text((4, 2), text, fill=(255, 255, 255))
    return np.asarray(img, dtype=np.uint8)


def event_text(record: Mapping) -> tuple[str, tuple[int, int, int]]:
    """The end-of-clip banner: the event and its step (with where on the ego it hit), or how far it got."""
    event, steps = str(record.get("event", "") or ""), int(record.get("steps", 0))
    if record.get("error"):
        return f"error at step {steps}: {str(record['error'])[:80]}", BANNER_BG
    if event:
        where = str(record.get("collision_location", "") or "")
        return f"{event} at step {steps}" + (f" ({where})" if where else ""), BANNER_BG
    return f"no event: {steps}/{int(record.get('horizon', steps))} steps", BANNER_OK


def write_video(
    path: str | Path,
    frames: Sequence[np.ndarray],
    record: Mapping,
    label: str = "",
    fps: float = 10.0,
    freeze_s: float = 1.0,
) -> tuple[Path, int]:
    """An MP4 of a clip: frames[k] is the state after step k (frames[0] the start), each captioned
    ``label | scenario | step k``; the last frame (the one where the event happened, or the clip's
    end) carries the event banner and is held for ``round(freeze_s * fps)`` extra frames.
    Returns (path, frames written) = (path, len(frames) + round(freeze_s * fps))."""
    sid = str(record.get("scenario", ""))
    text, color = event_text(record)
    hold = max(round(freeze_s * fps), 0)
    with Mp4Writer(path, fps=fps) as w:
        for k, f in enumerate(frames):
            img = caption(f, f"{label} | {sid} | step {k}" if label else f"{sid} | step {k}")
            if k == len(frames) - 1:
                img = banner(img, text, color)
            w.add(img)
        for _ in range(hold if len(frames) else 0):
            w.add(img)
        n = w.frames
    return Path(path), n
