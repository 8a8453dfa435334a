"""What ``python -m evaluation`` writes: per-clip rows, RAD-style tables, the metrics plot, videos.

Pure functions of the evaluation's per-clip records (``evaluation.rollouts``) and of
``evaluation.metrics.rad_metrics`` results, plus the writers that put them on disk:

- :func:`clip_row` / :func:`write_csv`: one CSV row per (policy, scenario);
- :func:`rad_table`: RAD Table 1's layout (policy | CR | DCR | SCR | DR | PDR | HDR | ADD | Long J | Lat J)
  as markdown; :func:`kind_table`: the same per scenario kind;
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

from evaluation.metrics import rad_metrics
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
EXTRA_COLUMNS = (("Success", "success_rate"), ("Progress", "progress"), ("N", "n"))

CSV_FIELDS = (
    "policy",
    "scenario",
    "kind",
    "event",
    "step",
    "steps",
    "horizon",
    "success",
    "progress",
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
        "progress": m["progress"],
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
        (("CR", "DCR", "SCR", "DR", "PDR", "HDR", "success_rate"), "rate (fraction of clips)"),
        (("ADD",), "m"),
        (("long_jerk",), "m/s^3"),
        (("lat_jerk",), "rad/s^3"),
    ]
    names = {"long_jerk": "Long J", "lat_jerk": "Lat J", "success_rate": "Success"}
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8), gridspec_kw={"width_ratios": [7, 1.4, 1.4, 1.4]})
    width = 0.8 / max(len(labels), 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (keys, unit) in zip(axes, panels):
        x = np.arange(len(keys))
        for i, label in enumerate(labels):
            vals = [float(metrics[label].get(k, float("nan"))) for k in keys]
            vals = [0.0 if not math.isfinite(v) else v for v in vals]
            ax.bar(x - 0.4 + width * (i + 0.5), vals, width, label=label, color=colors[i % len(colors)])
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
