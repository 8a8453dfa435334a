"""The env's action space: RAD's anchor bins and feasibility mask (defined once, in ``scenarios.actions``,
because the expert's IL labels belong to a scenario; re-exported here as the env's API)."""

from scenarios.actions import (
    RAD_HALF_WIDTHS,
    ActionSpec,
    decode,
    feasibility,
    half_widths,
    is_feasible,
    nearest_bins,
    project_feasible,
)

__all__ = [
    "RAD_HALF_WIDTHS",
    "ActionSpec",
    "decode",
    "feasibility",
    "half_widths",
    "is_feasible",
    "nearest_bins",
    "project_feasible",
]
