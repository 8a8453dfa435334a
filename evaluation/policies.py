"""The policies an evaluation drives: what a policy spec names, resolved and checked against the suite's env.

A spec is a built-in baseline (``evaluation.baselines``) or a trained policy source (``policy.sources``: a
store URI with a run and a version, a checkpoint folder, an exported package). :func:`resolve_policies`
turns specs into :class:`PolicyEntry` objects, refusing before any rollout a checkpoint that is missing or
corrupt, or a policy whose observation (parts, cameras, rig, resolution, dtypes) or action bins differ
from the suite's env. A :class:`PolicyEntry` is a ``rollout.episodes.Actor``: it travels to the rollout
workers as plain data and builds its act function there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import EnvConfig
from envs.observation import observation_space, policy_space
from envs.suite import ScenarioPool
from evaluation.baselines import PARTS, baseline_act, split_baseline
from policy.sources import resolve_policy_source
from sim.camera import make_rig

OBS_PARTS = ("cameras", "ego", "route", "limits", "agents", "map")


class PolicyError(ValueError):
    """A policy that cannot be evaluated on this suite (missing, corrupt, or built for another env)."""


@dataclass(frozen=True)
class PolicyEntry:
    """One policy to evaluate, as plain data (it travels to the rollout workers): a ``rollout.episodes.Actor``.

    label: its name in tables and file names; spec: what the user gave; kind: 'baseline' or 'source';
    env: the EnvConfig overrides it is evaluated with; source: for kind 'source', the resolved
    policy source (``policy.sources``), which each worker turns into an act function; for the
    ``reactive`` baseline, the suite's scenarios it reads ground truth from ({id: file, or the Scenario
    where there is no file}).
    """

    label: str
    spec: str
    kind: str
    env: dict
    source: Any = None

    def build(self, action_spec, threads: int | None = None) -> Callable:
        """``act(obs, infos) -> actions [B, 2]``: the baseline's, or the trained policy's deterministic action
        (``PolicySource.make_actor``: eager for checkpoints, onnxruntime for exported packages), built in
        whichever process drives."""
        if self.kind == "baseline":
            act = baseline_act(self.spec, action_spec)
            if self.source is not None and hasattr(act, "bind_scenarios"):
                act.bind_scenarios(self.source)
            return act
        actor = self.source.make_actor(threads=threads)
        return lambda obs, infos: np.asarray(actor(obs), dtype=np.int64)


def suite_observation(scenarios: Sequence, env_config: Mapping[str, Any]):
    """(observation space, (rig, width, height), EnvConfig) of the suite's env, without building an env."""
    cfg = EnvConfig.from_dict(dict(env_config))
    rig, w, h = ScenarioPool(list(scenarios), cfg).rig_spec()
    return observation_space(cfg, len(make_rig(rig, w, h)), w, h), (rig, w, h), cfg


def observation_mismatch(expected, actual, rig: tuple[str, int, int] | None = None) -> list[str]:
    """What differs between a policy's observation space (``expected``) and the env's (``actual``), both
    gymnasium Dicts, in words: missing or extra parts, other shapes (cameras spelled out as count and
    size), other dtypes. Empty when they match."""
    exp, act = dict(expected.spaces), dict(actual.spaces)
    out = []
    for k in sorted(set(exp) - set(act)):
        out.append(f"the policy needs observation part {k!r}, which the env has switched off (env.{_part(k)}=true)")
    for k in sorted(set(act) - set(exp)):
        out.append(f"the env gives observation part {k!r}, which the policy was not built with (env.{_part(k)}=false)")
    for k in sorted(set(exp) & set(act)):
        e, a = exp[k], act[k]
        es, as_ = tuple(getattr(e, "shape", ()) or ()), tuple(getattr(a, "shape", ()) or ())
        if es != as_:
            if k == "cameras" and len(es) == 4 and len(as_) == 4:
                where = f" (rig {rig[0]})" if rig else ""
                out.append(
                    f"cameras: the policy expects {es[0]} camera(s) of {es[2]}x{es[1]}, the env gives "
                    f"{as_[0]} of {as_[2]}x{as_[1]}{where}; set env.rig / env.resolution to the policy's"
                )
            else:
                out.append(f"{k}: the policy expects shape {list(es)}, the env gives {list(as_)}")
        elif getattr(e, "dtype", None) != getattr(a, "dtype", None):
            out.append(f"{k}: the policy expects dtype {e.dtype}, the env gives {a.dtype}")
    return out


def _part(key: str) -> str:
    return key.removesuffix("_mask")


def slug(label: str) -> str:
    """A label as a file name: runs of other characters than A-Z a-z 0-9 . _ @ - become one '_'."""
    s = re.sub(r"[^A-Za-z0-9._@-]+", "_", label).strip("_.")
    return s or "policy"


# EnvConfig keys that shape what a policy observes and how its actions decode: a trained policy's own
# settings of these (its training env config) are kept, under the evaluation's env overrides. Everything
# else -- termination thresholds, horizon, collision settings -- is the evaluation's, the same for all.
SOURCE_ENV_KEYS = (
    "observation", "navigation_points", "navigation_spacing",
    "cameras", "camera_history", "ego", "route", "limits", "agents", "map", "rig", "resolution", "max_agents",
    "agent_radius",
    "obstacles_as_agents", "map_points", "map_spacing", "map_radius", "route_points", "route_spacing",
    "n_lat", "lat_max", "n_long", "long_max",
)  # fmt: skip


def resolve_policies(specs: Sequence[str], scenarios: Sequence, env: Mapping[str, Any]) -> list[PolicyEntry]:
    """Every policy resolved and checked against the suite's env; raises PolicyError before any rollout.

    env: the evaluation's EnvConfig overrides. A baseline gets them with the observation parts it does
    not read switched off (cameras are most of a step's cost); a trained policy gets its own
    observation settings (``SOURCE_ENV_KEYS`` of its training env config) under them, and must then
    observe exactly what the suite's env gives: parts, camera count, rig resolution, dtypes, action bins.
    """
    if not specs:
        raise PolicyError("no policy: give --policy SOURCE or --compare A B ...")
    entries: list[PolicyEntry] = []
    seen: dict[str, str] = {}  # slug of a label -> the spec that has it
    for spec in specs:
        spec = str(spec)
        try:
            baseline = split_baseline(spec)
        except ValueError as e:
            raise PolicyError(f"{e}. Nothing was run.") from None
        if baseline is not None:
            name = baseline[0]
            # baselines read ground truth (the ego's speed, the lane map): the privileged observation
            parts = {p: (p in PARTS[name]) for p in OBS_PARTS}
            # the reactive driver reads each clip's ground truth: it carries the suite's scenario files
            refs = None
            if name == "reactive":
                refs = {str(s.id): (str(s.path) if getattr(s, "path", None) else s) for s in scenarios}
            entry = PolicyEntry(spec, spec, "baseline", {**env, **parts, "observation": "privileged"}, refs)
        else:
            source = _resolve_source(spec)
            own = {k: v for k, v in dict(source.env_config or {}).items() if k in SOURCE_ENV_KEYS}
            merged = {**own, **env}
            try:
                env_space, rig, env_cfg = suite_observation(scenarios, merged)
            except ValueError as e:
                raise PolicyError(f"policy {spec!r}: the suite's env cannot be set up for it: {e}") from None
            if env_cfg.observation != source.observation_mode:
                raise PolicyError(
                    f"policy {spec!r} was trained with observation={source.observation_mode!r}, the suite's env "
                    f"observes {env_cfg.observation!r} (env.observation); a policy drives only from the observation "
                    "mode it was trained with. Nothing was run."
                )
            problems = observation_mismatch(policy_space(source.obs_space), env_space, rig)  # no critic parts
            if env_cfg.action_spec != source.action_spec:
                problems.append(f"action bins: the policy has {source.action_spec}, the env {env_cfg.action_spec}")
            if problems:
                raise PolicyError(
                    f"policy {spec!r} does not fit the suite's env: " + "; ".join(problems) + ". Nothing was run."
                )
            entry = PolicyEntry(_source_label(source, spec), spec, "source", merged, source)
        if slug(entry.label) in seen:
            raise PolicyError(f"policies {seen[slug(entry.label)]!r} and {spec!r} have the same name {entry.label!r}")
        seen[slug(entry.label)] = spec
        entries.append(entry)
    return entries


def _resolve_source(spec: str):
    """``policy.sources.resolve_policy_source(spec)``, its errors turned into PolicyError."""
    try:
        return resolve_policy_source(spec)
    except Exception as e:  # missing, corrupt, unreadable: the source says which file and why
        raise PolicyError(f"policy {spec!r} cannot be loaded: {e}. Nothing was run.") from e


def _source_label(source, spec: str) -> str:
    """A short name: ``<run>@<version>`` for a checkpoint, the folder's name for an exported package."""
    prov = dict(getattr(source, "provenance", {}) or {})
    if source.kind == "checkpoint" and prov.get("run") and prov.get("version") is not None:
        return f"{prov['run']}@{prov['version']}"
    if source.path is not None:
        return Path(source.path).name or spec
    return spec


def provenance(entry: PolicyEntry) -> dict:
    """Where a policy came from, for metrics.json (a trained policy's run, version, manifest sha256...)."""
    if entry.kind == "baseline":
        return dict(kind="baseline", name=entry.spec)
    keep = ("kind", "spec", "store_uri", "run", "version", "manifest_sha256", "path", "policy_json_sha256", "source")
    prov = dict(getattr(entry.source, "provenance", {}) or {})
    return {k: prov[k] for k in keep if k in prov}
