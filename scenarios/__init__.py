"""Scenarios: the scenario format and its validation, the reactive expert, procedural digital-twin
generation, built-in suites.

A scenario (``scenarios.format``, JSON documented in scenarios/README.md) is one driving clip as a
digital twin: Gaussian PLYs, the map (lanes with speed limits), the expert's logged drive, log-replayed
agents, static obstacles.

Modules, bottom up (each imports only ones before it): ``format``; ``actions`` (the action grid);
``scene`` (a scenario's ``sim.Scene``), ``io`` (files and folders), ``expert`` (IL labels, kinematics),
``roads``, ``reactive`` (the reactive expert: a pure function of observable state, callable at any
state) and ``reactive_reference`` (its numpy reference), ``drive`` (its closed-loop drive), ``places``
(roads and obstacles of a background), ``kinds`` (traffic), ``checks``, ``garage`` (assets and street
layouts); ``generation`` (procedural suites); ``builtin`` (the cached built-in suites and ``load_suite``,
which takes their names and prefixes). ``generate`` is ``generation``'s command line; it is not imported
here.
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
from scenarios.reactive import ReactiveRoute, ReactiveScene, ReactiveSettings, reactive_action, reactive_actions
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
    "ReactiveRoute",
    "ReactiveScene",
    "ReactiveSettings",
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
    "reactive_action",
    "reactive_actions",
    "save",
]
