"""Scenarios: the scenario format and its validation, procedural digital-twin generation, built-in suites.

A scenario (``scenarios.format``, JSON documented in scenarios/README.md) is one driving clip as a
digital twin: Gaussian PLYs, the map, the expert's logged drive, log-replayed agents, static obstacles.
"""

from scenarios.builtin import BUILTIN_SUITES, builtin_suite
from scenarios.expert import expert_displacements, expert_labels
from scenarios.format import (
    AGENT_TYPES,
    FORMAT_VERSION,
    KINDS,
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
from scenarios.io import ScenarioError, load, load_suite, save

__all__ = [
    "AGENT_TYPES",
    "BUILTIN_SUITES",
    "FORMAT_VERSION",
    "KINDS",
    "Agent",
    "EgoSpec",
    "Lane",
    "MapData",
    "RigSpec",
    "Scenario",
    "ScenarioError",
    "SceneFiles",
    "StaticObstacle",
    "Track",
    "builtin_suite",
    "expert_displacements",
    "expert_labels",
    "load",
    "load_suite",
    "save",
]
