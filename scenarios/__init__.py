"""Scenarios: the scenario format and its validation, procedural digital-twin generation, built-in suites.

A scenario (``scenarios.format``, JSON documented in scenarios/README.md) is one driving clip as a
digital twin: Gaussian PLYs, the map, the expert's logged drive, log-replayed agents, static obstacles.

Modules, bottom up (each imports only ones before it): ``format``; ``actions`` (the action grid);
``scene`` (a scenario's ``sim.Scene``), ``io`` (files and folders), ``roads``, ``kinds``, ``expert``,
``checks``; ``generation`` (procedural suites); ``builtin`` (the cached built-in suites and
``load_suite``, which takes their names). ``generate`` is ``generation``'s command line, and
``evaluate`` only an alias of ``python -m evaluation``; neither is imported here.
"""

from scenarios.builtin import BUILTIN_SUITES, builtin_suite, load_suite
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
from scenarios.io import ScenarioError, load, save
from scenarios.scene import load_scene

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
    "load_scene",
    "load_suite",
    "save",
]
