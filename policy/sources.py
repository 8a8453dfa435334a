"""Where a policy comes from: a checkpoint in a store, a checkpoint folder, or an exported package.

One resolver, :func:`resolve_policy_source`, for every tool that takes a policy (``python -m
policy.export``, ``python -m evaluation``). A SOURCE is one of:

====================================== ===========================================================
``<store>/<run>[@<version>|@latest]``  a run in a checkpoint store (``store``): ``<store>``
                                       is a path, ``file:///abs/path`` or ``s3://bucket/prefix``;
                                       ``<run>`` the run's name; ``@3`` its committed version 3,
                                       ``@latest`` (or no ``@``) its newest committed version. An
                                       S3 query (endpoint, credentials) goes at the very end:
                                       ``s3://bucket/prefix/myrun@3?endpoint_override=host:9000``.
``<dir>/<run>/ckpt-00000003``          one committed checkpoint folder (it holds MANIFEST.json),
                                       read through the store's loader (``<dir>`` is the store).
``<dir>`` holding ``policy.json``      an exported policy package (``python -m policy.export``).
====================================== ===========================================================

An existing local folder is taken for what it holds (policy.json, then a ``ckpt-*`` name or a
MANIFEST.json, else a run folder whose newest version is meant); anything else is parsed as a store
spec. ``@latest`` is the newest *committed* version: if that one is corrupt the source is refused
(name an older version explicitly) -- an export or an evaluation never silently falls back.

Nothing is unpickled: checkpoints are checked file by file against their manifest's sha256 (by
the ``store`` package), an exported package against the sha256s listed in its policy.json; tensors are
safetensors, everything else JSON. A missing or corrupt source raises :class:`PolicySourceError`
naming the source and the file, before anything else happens.

The observation space of a checkpoint comes from its ``obs_space.json`` (written by
``learner.checkpoint.encode`` when the trainer passes the env's space) or, for checkpoints without
one, is rebuilt from ``config.json``'s ``env`` with the env's own code (``envs.observation``); the
camera rig and resolution, when the env config leaves them to the scenarios, come from the first
scenario of the run's training suite. Either way the weights must fit the network built from it.

This module is training-side code (torch, gymnasium, envs); a consumer that only runs an exported
policy needs :mod:`policy.exported` alone. Checkpoints are read through the store's public API
(``CheckpointStore``, ``RunStore.resolve`` and ``load``; ``store.parse_ref`` for ``<run>@<version>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import gymnasium as gym
import numpy as np
import torch

from envs.config import OBSERVATION_MODES, EnvConfig
from envs.observation import (
    AGENT_FEATURES,
    CAMERA_EGO_FEATURES,
    COMMANDS,
    EGO_FEATURES,
    MAP_FEATURES,
    observation_mode,
    observation_space,
)
from policy.exported import (
    FORMAT as EXPORT_FORMAT,
)
from policy.exported import (
    FORMAT_VERSION as EXPORT_FORMAT_VERSION,
)
from policy.exported import (
    POLICY_JSON,
    ExportError,
    check_observations,
    load_exported,
    read_policy_json,
    verify_files,
)
from policy.network import ActorCritic, ExportPolicy, PolicyConfig
from scenarios.actions import ActionSpec
from scenarios.builtin import BUILTIN_SUITES, BUILTIN_VERSION, builtin_suite, cache_root
from scenarios.io import ScenarioError, scenario_files
from scenarios.io import load as load_scenario
from sim.camera import make_rig
from sim.configs import ConfigError, from_dict
from store import MANIFEST, CheckpointStore, StoreError, bytes_to_tensors, parse_ref, parse_version_dir

log = logging.getLogger(__name__)

SPACES_FILE = "obs_space.json"  # in a training checkpoint, next to config.json (learner.checkpoint)
SPACES_FORMAT = 1
CHECKPOINT_REQUIRED = ("policy.safetensors", "config.json")
ACTION_KEYS = ("n_lat", "lat_max", "n_long", "long_max", "max_curvature")
SYNTAX = "<store>/<run>[@<version>|@latest]"


class PolicySourceError(ValueError):
    """A policy source that cannot be used: missing, corrupt, or not what it claims to be."""


# --------------------------------------------------------------------------------------------------
# The observation spec as JSON (checkpoint obs_space.json, and the inputs of policy.json)

# What each observation part means; envs/observation.py's table, written out for people outside.
OBS_DOCS: dict[str, dict[str, str]] = {
    "cameras": dict(
        meaning="the rig's RGB images of the scene at the ego's pose, cameras in rig order (see 'rig')",
        units="uint8 0..255 per channel (RGB); the model scales to [0, 1] and normalises inside",
        frame="image rows top to bottom, columns left to right; layout [C, H, W, 3] (channels last)",
    ),
    "ego": dict(
        meaning="the ego's state: speed, yaw rate, acceleration, front-wheel steering angle; in privileged "
        "mode also the anchor applied at the last step (lateral, longitudinal) and the fraction of the "
        "episode elapsed (see 'features')",
        units="m/s, rad/s, m/s^2, rad (privileged mode: then m, m, 1), in the order of 'features'",
        frame="ego frame: x forward, y left (rear axle, z up); yaw rate positive to the left",
    ),
    "navigation": dict(
        meaning="camera mode: points evenly spaced ahead along the centre lines of the route's lanes (from "
        "the map, not the expert's drive), from the ego's place on the route",
        units="m",
        frame="ego frame: x forward, y left",
    ),
    "command": dict(
        meaning="camera mode: the route command, one-hot (see 'features'): the route's heading change over "
        "the next 40 m beyond +-15 degrees is a turn",
        units="1",
        frame="-",
    ),
    "route": dict(
        meaning="waypoints along the expert (route) path ahead of the ego, evenly spaced along the path",
        units="m",
        frame="ego frame: x forward, y left",
    ),
    "agents": dict(
        meaning="nearest agents (other vehicles, and static obstacles as stopped agents), nearest first; "
        "padding rows are zero, see agents_mask",
        units="m, m, 1, 1, m, m, m/s, m/s (in the order of 'features')",
        frame="ego frame: x forward, y left; yaw and velocity turned into the ego frame",
    ),
    "agents_mask": dict(meaning="1 where the agents row is a real agent, 0 for padding", units="1", frame="-"),
    "map": dict(
        meaning="nearest lane-centre points, nearest first; padding rows are zero, see map_mask",
        units="m, m, 1, 1 (in the order of 'features')",
        frame="ego frame: x forward, y left; heading as (cos, sin) relative to the ego's",
    ),
    "map_mask": dict(meaning="1 where the map row is a real lane point, 0 for padding", units="1", frame="-"),
}


def _features(space: gym.spaces.Dict | None = None) -> dict[str, list[str]]:
    ego: tuple[str, ...] = EGO_FEATURES
    if space is not None and "ego" in space.spaces and tuple(space["ego"].shape or ()) == (len(CAMERA_EGO_FEATURES),):
        ego = CAMERA_EGO_FEATURES
    return {
        "ego": list(ego),
        "navigation": ["x", "y"],
        "command": list(COMMANDS),
        "route": ["x", "y"],
        "agents": list(AGENT_FEATURES),
        "map": list(MAP_FEATURES),
    }


def _bound(a: np.ndarray) -> float | list | None:
    """A Box bound as JSON: one number when uniform, else a nested list; non-finite -> None."""
    a = np.asarray(a, dtype=np.float64)
    if a.size and np.all(a == a.flat[0]):
        v = float(a.flat[0])
        return v if np.isfinite(v) else None
    return [None if not np.isfinite(v) else float(v) for v in a.ravel()] if a.ndim == 1 else a.tolist()


def space_to_json(space: gym.spaces.Dict, describe: bool = False) -> list[dict]:
    """[{name, shape (no batch), dtype, low, high}] per part of a Dict of Boxes, in the space's key order.

    describe: add meaning, units, frame and features (the inputs of policy.json).
    """
    if not isinstance(space, gym.spaces.Dict):
        raise TypeError(f"space_to_json: expected gymnasium.spaces.Dict, got {type(space).__name__}")
    feats = _features(space) if describe else {}
    out = []
    for name, s in space.spaces.items():
        if not isinstance(s, gym.spaces.Box):
            raise TypeError(f"space_to_json: observation part {name!r} is {type(s).__name__}, expected Box")
        entry: dict[str, Any] = dict(
            name=name, shape=[int(d) for d in s.shape], dtype=np.dtype(s.dtype).name, low=_bound(s.low)
        )
        entry["high"] = _bound(s.high)
        if describe:
            entry.update(OBS_DOCS.get(name, {}))
            if name in feats:
                entry["features"] = feats[name]
        out.append(entry)
    return out


def space_from_json(entries: Any, where: str) -> gym.spaces.Dict:
    """Inverse of :func:`space_to_json`; ``where`` names the file/field in errors."""
    if not isinstance(entries, list) or not entries:
        raise PolicySourceError(f"{where}: expected a non-empty list of observation inputs")
    parts: dict[str, gym.spaces.Space] = {}
    for i, e in enumerate(entries):
        w = f"{where}[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            raise PolicySourceError(f"{w}: expected an object with a 'name'")
        shape, dtype = e.get("shape"), e.get("dtype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise PolicySourceError(f"{w} ({e['name']}): 'shape' must be a list of ints >= 0, got {shape!r}")
        if dtype not in ("uint8", "float32"):
            raise PolicySourceError(f"{w} ({e['name']}): 'dtype' must be 'uint8' or 'float32', got {dtype!r}")

        def bound(v, inf, e=e, w=w, shape=shape):
            if v is None:
                return np.full(shape, inf)
            a = np.asarray([inf if x is None else x for x in v] if isinstance(v, list) and np.ndim(v) == 1 else v)
            try:
                return np.broadcast_to(a.astype(np.float64), shape)
            except ValueError:
                raise PolicySourceError(f"{w} ({e['name']}): bound of shape {a.shape} does not fit {shape}") from None

        low, high = bound(e.get("low"), -np.inf), bound(e.get("high"), np.inf)
        parts[e["name"]] = gym.spaces.Box(low.astype(dtype), high.astype(dtype), tuple(shape), np.dtype(dtype))
    return gym.spaces.Dict(parts)


def spaces_json(observation_space: gym.spaces.Dict, action_spec=None, rig=None, mode: str | None = None) -> dict:
    """The content of a checkpoint's ``obs_space.json``: observation parts, action bins, camera rig, and
    the observation mode (``EnvConfig.observation``; read from the parts when not given).

    rig: (name, width, height), or an object with ``name``, ``width``, ``height`` (``sim.CameraRig``).
    """
    out: dict[str, Any] = dict(format=SPACES_FORMAT, observation=space_to_json(observation_space))
    out["observation_mode"] = mode or observation_mode(observation_space)
    if action_spec is not None:
        out["action"] = {k: getattr(action_spec, k) for k in ACTION_KEYS}
    if rig is not None:
        name, w, h = (rig.name, rig.width, rig.height) if hasattr(rig, "name") else tuple(rig)
        out["rig"] = dict(name=str(name), width=int(w), height=int(h))
    return out


# --------------------------------------------------------------------------------------------------
# Parsing a SOURCE


@dataclass(frozen=True)
class SourceSpec:
    """A parsed SOURCE. kind: 'store' (store, run, version; None = latest), 'checkpoint_dir' (path,
    store, run, version) or 'exported' (path)."""

    kind: str
    text: str
    store: str | None = None
    run: str | None = None
    version: int | None = None
    path: Path | None = None

    @property
    def shown(self) -> str:
        """The text with credentials in a query (access_key, secret_key, session_token) blanked."""
        return redact_uri(self.text)


_SECRET_KEYS = ("access_key", "secret_key", "session_token")


def redact_uri(uri: str) -> str:
    """A store URI or SOURCE fit for logs and policy.json: credential values in its query become '***'."""
    if "?" not in uri:
        return uri
    head, _, query = uri.partition("?")
    items = [(k, "***" if k in _SECRET_KEYS else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return head + "?" + urlencode(items, safe="*:/")


def _split_run_version(last: str, text: str) -> tuple[str, int | None]:
    """``<run>[@<version>|@latest]`` (the store's syntax, ``store.parse_ref``); errors name the SOURCE."""
    try:
        return parse_ref(last)
    except ValueError as e:
        raise PolicySourceError(f"policy source {redact_uri(text)!r}: {e} (expected {SYNTAX})") from None


def parse_source(spec: str | os.PathLike) -> SourceSpec:
    """Parse a SOURCE string (see the module docstring). Does not read any checkpoint."""
    text = os.fspath(spec)
    if not isinstance(text, str) or not text.strip():
        raise PolicySourceError("policy source is empty; expected <store>/<run>[@<version>|@latest] or a folder")
    text = text.strip()
    local = Path(text[len("file://") :] if text.startswith("file://") else text)
    if "://" not in text or text.startswith("file://"):
        if local.is_dir():
            if (local / POLICY_JSON).is_file():
                return SourceSpec("exported", text, path=local)
            version = parse_version_dir(local.name)
            if version is not None or (local / MANIFEST).is_file():
                if version is None:
                    raise PolicySourceError(
                        f"policy source {redact_uri(text)!r}: {local} holds {MANIFEST} but is not named "
                        "ckpt-<8 digits>, so its version is unknown (checkpoints sit in <store>/<run>/ckpt-XXXXXXXX)"
                    )
                run_dir = local.resolve().parent
                store, run = str(run_dir.parent), run_dir.name
                return SourceSpec("checkpoint_dir", text, store=store, run=run, version=version, path=local)
            if "@" not in local.name:  # a run folder: its newest version
                if not any(parse_version_dir(p.name) is not None for p in local.iterdir()):
                    raise PolicySourceError(
                        f"policy source {redact_uri(text)!r}: {local} is not an exported package (no {POLICY_JSON}), "
                        f"not a checkpoint folder (no {MANIFEST}) and not a run folder (no ckpt-XXXXXXXX in it)"
                    )
                return SourceSpec("store", text, store=str(local.resolve().parent), run=local.name, version=None)
        if local.is_file():
            raise PolicySourceError(
                f"policy source {redact_uri(text)!r} is a file; give a folder (a ckpt-XXXXXXXX folder, an exported "
                f"policy folder) or {SYNTAX}"
            )
        if parse_version_dir(local.name) is not None:
            raise PolicySourceError(f"policy source {redact_uri(text)!r}: checkpoint folder {local} does not exist")
        parent, _, last = text.rstrip("/").rpartition("/")
        if not parent:
            raise PolicySourceError(
                f"policy source {redact_uri(text)!r}: not a folder here, and not <store>/<run>[@<version>|@latest] "
                "(the store part is missing)"
            )
        run, version = _split_run_version(last, text)
        if "@" not in last and not Path(parent).is_dir():
            raise PolicySourceError(f"policy source {redact_uri(text)!r}: no such folder, and no store at {parent}")
        return SourceSpec("store", text, store=parent, run=run, version=version)
    # s3:// (or another scheme the store knows): the query belongs to the store URI
    parts = urlsplit(text)
    path = parts.path.rstrip("/")
    parent, _, last = path.rpartition("/")
    if not last or not (parts.netloc + parent).strip("/"):
        raise PolicySourceError(
            f"policy source {redact_uri(text)!r}: expected <scheme>://<bucket>/<prefix>/<run>[@<version>]"
        )
    run, version = _split_run_version(last, text)
    store = urlunsplit((parts.scheme, parts.netloc, parent, parts.query, ""))
    return SourceSpec("store", text, store=store, run=run, version=version)


# --------------------------------------------------------------------------------------------------
# The resolved source


@dataclass(frozen=True, eq=False)
class PolicySource:
    """A policy ready to build, run or export.

    kind: 'checkpoint' (a training checkpoint) or 'exported' (an exported package).
    weights: the ActorCritic's state_dict (parameters and observation-normalisation buffers).
    env_config: the EnvConfig overrides it was trained with (config.json's ``env``): build the env
        with them (plus any scenario or render_backend choice) to get the observations it expects.
        Its ``observation`` (the mode) is always there: recorded, else read from the observation
        space (checkpoints and packages from before the modes: privileged).
    policy_config: the PolicyConfig overrides (config.json's ``policy``; for packages the full resolved config).
    obs_space: the observation space (a gymnasium Dict) the network was built for.
    action_spec: the env's ``envs.actions.ActionSpec`` (bins, feasibility mask).
    provenance: JSON-able: kind, spec, store_uri, run, version, manifest_sha256 (sha256 of the
        checkpoint's MANIFEST.json bytes), files, meta, wall_time; for exported packages also path
        and policy_json_sha256.
    train_config: the run's resolved TrainConfig (checkpoints), else the one recorded at export.
    policy_json: the parsed policy.json (exported packages), else None.
    path: the exported package or checkpoint folder, when local.
    rig: {name, width, height} of the camera rig when known, else None.
    """

    kind: str
    weights: dict[str, torch.Tensor]
    env_config: dict
    policy_config: dict
    obs_space: gym.spaces.Dict
    action_spec: ActionSpec
    provenance: dict
    train_config: dict | None = None
    policy_json: dict | None = None
    path: Path | None = None
    rig: dict | None = None

    @property
    def observation_mode(self) -> str:
        """ "camera" or "privileged": what the policy was trained to observe (``EnvConfig.observation``)."""
        return str(self.env_config.get("observation", observation_mode(self.obs_space)))

    def check_observation_mode(self, mode: str, what: str = "the env") -> None:
        """Raise PolicySourceError unless ``mode`` (an env's ``EnvConfig.observation``) is this policy's."""
        if mode != self.observation_mode:
            raise PolicySourceError(
                f"policy {self.provenance.get('spec')!r} was trained with observation={self.observation_mode!r}, "
                f"{what} observes {mode!r}: set env.observation={self.observation_mode} (a policy drives only from "
                "the observation mode it was trained with)"
            )

    @property
    def inputs(self) -> list[dict]:
        """The observation spec: [{name, shape, dtype, ...}] in the network's input order."""
        return space_to_json(self.obs_space)

    def build_policy(self) -> ActorCritic:
        """A fresh ActorCritic in eval mode with these weights."""
        net = _build_network(self.obs_space, self.action_spec, self.policy_config, self.provenance.get("spec", ""))
        net.load_state_dict(self.weights)
        return net.eval()

    def check_observation_space(self, space: gym.spaces.Dict, what: str = "the env") -> None:
        """Raise PolicySourceError unless ``space`` has exactly this policy's parts, shapes and dtypes."""
        want = {e["name"]: (tuple(e["shape"]), e["dtype"]) for e in self.inputs}
        got = {e["name"]: (tuple(e["shape"]), e["dtype"]) for e in space_to_json(space)}
        if want != got:
            diffs = [
                f"{k}: policy {want.get(k, 'absent')}, {what} {got.get(k, 'absent')}"
                for k in sorted(set(want) | set(got))
                if want.get(k) != got.get(k)
            ]
            raise PolicySourceError(
                f"policy {self.provenance.get('spec')!r} expects other observations than {what} gives: "
                + "; ".join(diffs)
                + " (build the env with the policy's env_config)"
            )

    def make_actor(self, backend: str = "auto", threads: int | None = None):
        """A callable obs -> actions: ``actor(obs)`` -> int64 [B, 2] (lateral, longitudinal) bin indices.

        obs: dict of numpy arrays [B, ...] as the env gives them (uint8 cameras, float32 the rest).
        The action is deterministic (argmax longitudinal, then argmax lateral within its feasible row),
        the same rule for every backend, so a checkpoint and its export drive alike.
        ``actor.run(obs)`` gives every output (action, logits_long, logits_lat_all, values).

        backend: 'eager' (this process's torch network), 'onnxruntime' or 'torch' (torch.export;
        exported packages only); 'auto': eager for checkpoints, onnxruntime for exported packages.
        """
        if backend == "auto":
            backend = "onnxruntime" if self.kind == "exported" else "eager"
        if backend == "eager":
            return EagerActor(self.build_policy(), self.inputs)
        if backend in ("onnxruntime", "torch"):
            if self.kind != "exported" or self.path is None:
                raise PolicySourceError(
                    f"backend {backend!r} runs an exported package; {self.provenance.get('spec')!r} is a {self.kind} "
                    "(export it with python -m policy.export, or use backend='eager')"
                )
            return load_exported(self.path, backend=backend, threads=threads)
        raise PolicySourceError(f"make_actor: backend must be auto, eager, onnxruntime or torch, got {backend!r}")


class EagerActor:
    """An ActorCritic behind the same interface as ``policy.exported.ExportedPolicy`` (numpy in and out)."""

    backend = "eager"

    def __init__(self, net: ActorCritic, inputs: list[dict]):
        self.net = net.eval()
        self.module = ExportPolicy(self.net).eval()
        self.inputs = inputs

    def run(self, obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output as numpy: action [B, 2] int64, logits_long [B, n_long], logits_lat_all
        [B, n_long, n_lat] (masked with -1e9), values [B, 2]."""
        arrays, _ = check_observations(self.inputs, obs, "eager policy")
        with torch.no_grad():
            outs = self.module({k: torch.from_numpy(v) for k, v in arrays.items()})
        return {k: v.numpy() for k, v in zip(("action", "logits_long", "logits_lat_all", "values"), outs)}

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.run(obs)["action"]

    __call__ = act


# --------------------------------------------------------------------------------------------------
# Resolution


def resolve_policy_source(spec: str | os.PathLike | SourceSpec) -> PolicySource:
    """Resolve a SOURCE (module docstring) into a :class:`PolicySource`, verifying it completely first.

    Raises PolicySourceError naming the source and what is wrong (no such run or version, a file
    missing, truncated or changed against the manifest / policy.json, weights that do not fit).
    """
    s = spec if isinstance(spec, SourceSpec) else parse_source(spec)
    if s.kind == "exported":
        return _resolve_exported(s)
    return _resolve_checkpoint(s)


def _load_checkpoint(s: SourceSpec):
    """(Checkpoint, store uri) through the store's loader (every file's sha256 checked)."""
    assert s.store is not None and s.run is not None
    try:
        store = CheckpointStore(s.store)
        rs = store.run(s.run)
        if s.kind == "checkpoint_dir" and not (Path(s.path) / MANIFEST).is_file():  # type: ignore[arg-type]
            raise PolicySourceError(
                f"policy source {s.shown!r}: {Path(s.path) / MANIFEST} is missing: not a committed checkpoint "  # type: ignore[arg-type]
                "(a write that never finished, or not a checkpoint folder)"
            )
        # None (@latest): the newest committed version, without falling back if it is corrupt.
        ck = rs.load(rs.resolve(s.version))
    except PolicySourceError:
        raise
    except (StoreError, ValueError, OSError) as e:
        raise PolicySourceError(f"policy source {s.shown!r}: {e}") from None
    missing = [f for f in CHECKPOINT_REQUIRED if f not in ck.files]
    if missing:
        raise PolicySourceError(
            f"policy source {s.shown!r}: checkpoint run '{s.run}' version {ck.version} has no {', '.join(missing)} "
            "(not a training checkpoint of learner.train?)"
        )
    return ck, store.uri


def _json_file(files: Mapping[str, bytes], name: str, where: str) -> Any:
    try:
        return json.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise PolicySourceError(f"{where}: {name} is not valid JSON ({e})") from None


def _resolve_checkpoint(s: SourceSpec) -> PolicySource:
    ck, store_uri = _load_checkpoint(s)
    where = f"checkpoint run '{ck.run}' version {ck.version} ({store_uri})"
    config = _json_file(ck.files, "config.json", where)
    if not isinstance(config, dict):
        raise PolicySourceError(f"{where}: config.json is not an object")
    env_over, pol_over = config.get("env", {}), config.get("policy", {})
    for key, v in (("env", env_over), ("policy", pol_over)):
        if not isinstance(v, dict):
            raise PolicySourceError(f"{where}: config.json field '{key}' must be an object, got {type(v).__name__}")
    sp = _json_file(ck.files, SPACES_FILE, where) if SPACES_FILE in ck.files else None
    if sp is not None and (not isinstance(sp, dict) or sp.get("format") != SPACES_FORMAT):
        got = sp.get("format") if isinstance(sp, dict) else type(sp).__name__
        raise PolicySourceError(f"{where}: {SPACES_FILE} has format {got!r}, expected {SPACES_FORMAT}")
    obs_space = space_from_json(sp.get("observation"), f"{where}: {SPACES_FILE} 'observation'") if sp else None
    # the observation mode: recorded in the env config, else in obs_space.json, else read from the parts;
    # a checkpoint with neither is from before the modes, when every policy was privileged
    mode = env_over.get("observation") or (sp or {}).get("observation_mode")
    mode = mode or (observation_mode(obs_space) if obs_space is not None else "privileged")
    if mode not in OBSERVATION_MODES:
        raise PolicySourceError(f"{where}: observation mode {mode!r}, expected one of {', '.join(OBSERVATION_MODES)}")
    env_over = {**env_over, "observation": mode}
    try:
        env_cfg = EnvConfig.from_dict(env_over)
    except ValueError as e:
        raise PolicySourceError(f"{where}: config.json field 'env': {e}") from None
    try:
        from_dict(PolicyConfig, dict(pol_over))
    except ConfigError as e:
        raise PolicySourceError(f"{where}: config.json field 'policy': {e}") from None

    if sp is not None and obs_space is not None:
        action_spec = _action_spec(sp.get("action"), f"{where}: {SPACES_FILE} 'action'", env_cfg.action_spec)
        rig = sp.get("rig") or _guess_rig(obs_space, env_cfg, config)
    else:
        obs_space, rig = _rebuild_obs_space(env_cfg, config, where)
        action_spec = env_cfg.action_spec
    try:
        weights = bytes_to_tensors(ck.files["policy.safetensors"])
    except ValueError as e:
        raise PolicySourceError(f"{where}: policy.safetensors: {e}") from None
    _check_weights_fit(weights, obs_space, action_spec, pol_over, f"{where}: policy.safetensors")
    trainer = _json_file(ck.files, "trainer.json", where) if "trainer.json" in ck.files else {}
    state = trainer.get("state", {}) if isinstance(trainer, dict) else {}
    provenance = dict(
        kind="checkpoint",
        spec=s.shown,
        store_uri=store_uri,
        run=ck.run,
        version=ck.version,
        manifest_sha256=ck.manifest_sha256,
        wall_time=ck.wall_time,
        meta=ck.meta,
        files={n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in sorted(ck.files.items())},
        train_state={k: state.get(k) for k in ("stage", "iteration", "il_iteration", "version", "env_steps")},
    )
    return PolicySource(
        kind="checkpoint",
        weights=weights,
        env_config=dict(env_over),
        policy_config=dict(pol_over),
        obs_space=obs_space,
        action_spec=action_spec,
        provenance=provenance,
        train_config=_redacted(config),
        path=s.path,
        rig=rig,
    )


def _redacted(config: dict) -> dict:
    """A checkpoint's config.json with the store URI's credentials, if any, left out: ``store`` is the
    StoreConfig section ``{uri, ...}`` (older checkpoints: the URI itself)."""
    store = config.get("store")
    if isinstance(store, dict) and "uri" in store:
        return {**config, "store": {**store, "uri": redact_uri(str(store["uri"]))}}
    if store is not None:
        return {**config, "store": redact_uri(str(store))}
    return config


def _action_spec(d: Any, where: str, default: ActionSpec) -> ActionSpec:
    if d is None:
        return default
    if not isinstance(d, dict) or any(k not in d for k in ACTION_KEYS):
        raise PolicySourceError(f"{where}: expected an object with {', '.join(ACTION_KEYS)}")
    try:
        return ActionSpec(
            int(d["n_lat"]), float(d["lat_max"]), int(d["n_long"]), float(d["long_max"]), float(d["max_curvature"])
        )
    except (TypeError, ValueError) as e:
        raise PolicySourceError(f"{where}: {e}") from None


def _rebuild_obs_space(env_cfg, config: dict, where: str) -> tuple[gym.spaces.Dict, dict | None]:
    """The observation space from the env config (envs.observation), without building an env.

    Cameras need the rig and resolution: the env config's when both are set, else the first
    scenario of the run's training suite (TrainConfig.suite, else EnvConfig.suite).
    """
    if not env_cfg.cameras:
        return observation_space(env_cfg, 0, 0, 0), None
    name, res = env_cfg.rig, env_cfg.resolution
    if name is None or res is None:
        suite = config.get("suite") or env_cfg.suite
        rs = _first_scenario_rig(str(suite), where)
        name = name or rs.name
        res = res or (rs.width, rs.height)
    try:
        rig = make_rig(name, int(res[0]), int(res[1]))
    except ValueError as e:
        raise PolicySourceError(f"{where}: camera rig: {e}") from None
    space = observation_space(env_cfg, len(rig), rig.width, rig.height)
    return space, dict(name=rig.name, width=rig.width, height=rig.height)


def _guess_rig(obs_space: gym.spaces.Dict, env_cfg, config: dict) -> dict | None:
    """The rig of an obs_space.json without one: the env config's, else the suite's if it is here (never
    generated for this); the resolution is the cameras input's. None when unknown (only for description)."""
    if "cameras" not in obs_space.spaces:
        return None
    shape = obs_space["cameras"].shape  # [C, H, W, 3]
    assert shape is not None  # a Box: space_from_json makes nothing else
    _, H, W, _ = shape
    name = env_cfg.rig
    if name is None:
        suite = str(config.get("suite") or env_cfg.suite)
        try:
            cached = cache_root() / f"builtin-{suite}-v{BUILTIN_VERSION}"
            if suite in BUILTIN_SUITES and not (cached / "suite.yaml").is_file():
                return None
            name = _first_scenario_rig(suite, "").name
        except PolicySourceError:
            return None
    return dict(name=name, width=int(W), height=int(H))


def _first_scenario_rig(suite: str, where: str):
    """The RigSpec of the first scenario (by file name) of a suite folder, scenario file or built-in suite."""
    p = Path(suite)
    try:
        if p.is_file():
            return load_scenario(p).rig
        if not p.is_dir():
            if suite not in BUILTIN_SUITES:
                raise ScenarioError(f"{suite}: no such folder or file, nor a built-in suite")
            log.info("reading the camera rig of built-in suite %r (generated first if not cached)", suite)
            p = builtin_suite(suite)
        files = scenario_files(p)
        if not files:
            raise ScenarioError(f"{p}: no scenario files")
        return load_scenario(files[0]).rig
    except ScenarioError as e:
        raise PolicySourceError(
            f"{where}: the checkpoint has no {SPACES_FILE} and config.json leaves env.rig/env.resolution to the "
            f"scenarios, but the training suite cannot be read: {e}"
        ) from None


def _build_network(obs_space, action_spec, policy_config: Mapping[str, Any], where: str):
    try:
        cfg = from_dict(PolicyConfig, dict(policy_config))
        return ActorCritic(obs_space, action_spec, cfg)
    except (ConfigError, ValueError, TypeError) as e:
        raise PolicySourceError(f"{where}: cannot build the network: {e}") from None


def _check_weights_fit(weights, obs_space, action_spec, policy_config, where: str) -> None:
    net = _build_network(obs_space, action_spec, policy_config, where)
    want = net.state_dict()
    missing = sorted(set(want) - set(weights))
    extra = sorted(set(weights) - set(want))
    shape = sorted(k for k in set(want) & set(weights) if tuple(want[k].shape) != tuple(weights[k].shape))
    if missing or extra or shape:
        msg = []
        if missing:
            msg.append(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if extra:
            msg.append(f"unexpected {extra[:5]}{' ...' if len(extra) > 5 else ''}")
        for k in shape[:5]:
            msg.append(f"{k}: {tuple(weights[k].shape)} here, {tuple(want[k].shape)} in the network")
        raise PolicySourceError(
            f"{where}: the weights do not fit the network built from the policy config and observation space "
            f"{ {e['name']: e['shape'] for e in space_to_json(obs_space)} }: " + "; ".join(msg)
        )


def _resolve_exported(s: SourceSpec) -> PolicySource:
    folder = Path(s.path)  # type: ignore[arg-type]
    try:
        spec = read_policy_json(folder)
        verify_files(folder, spec)
    except ExportError as e:
        raise PolicySourceError(f"policy source {s.shown!r}: {e}") from None
    where = f"exported policy {folder}"
    if spec.get("format") != EXPORT_FORMAT or spec.get("format_version") != EXPORT_FORMAT_VERSION:
        raise PolicySourceError(f"{where}: {POLICY_JSON} is not a {EXPORT_FORMAT} v{EXPORT_FORMAT_VERSION} package")
    obs_space = space_from_json(spec.get("inputs"), f"{where}: {POLICY_JSON} 'inputs'")
    env_over = dict(spec.get("env_config") or {})
    mode = env_over.get("observation") or spec.get("observation_mode") or observation_mode(obs_space)
    if mode not in OBSERVATION_MODES:
        raise PolicySourceError(f"{where}: observation mode {mode!r}, expected one of {', '.join(OBSERVATION_MODES)}")
    env_over["observation"] = mode
    try:
        default = EnvConfig.from_dict(env_over).action_spec
    except ValueError as e:
        raise PolicySourceError(f"{where}: {POLICY_JSON} 'env_config': {e}") from None
    action_spec = _action_spec(spec.get("action"), f"{where}: {POLICY_JSON} 'action'", default)
    wfile = spec.get("weights", {}).get("file", "weights.safetensors")
    try:
        weights = bytes_to_tensors((folder / wfile).read_bytes())
    except (OSError, ValueError) as e:
        raise PolicySourceError(f"{where}: {wfile}: {e}") from None
    pol_over = spec.get("policy_config") or {}
    _check_weights_fit(weights, obs_space, action_spec, pol_over, f"{where}: {wfile}")
    src = dict(spec.get("source") or {})
    provenance = dict(
        src,
        kind="exported",
        spec=s.shown,
        path=str(folder.resolve()),
        policy_json_sha256=hashlib.sha256((folder / POLICY_JSON).read_bytes()).hexdigest(),
        exported_at=spec.get("exported_at"),
        source=src,
    )
    return PolicySource(
        kind="exported",
        weights=weights,
        env_config=dict(env_over),
        policy_config=dict(pol_over),
        obs_space=obs_space,
        action_spec=action_spec,
        provenance=provenance,
        train_config=spec.get("train_config"),
        policy_json=spec,
        path=folder,
        rig=(spec.get("rig") or None),
    )
