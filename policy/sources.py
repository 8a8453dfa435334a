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
``learner.checkpoint.encode`` when the trainer passes the env's space; the JSON codec is
:mod:`policy.spaces`) or, for checkpoints without one, is rebuilt from ``config.json``'s ``env`` with the
env's own code (:mod:`policy.rebuild`); the camera rig and resolution, when the env config leaves them
to the scenarios, come from the first scenario of the run's training suite. Either way the weights must
fit the network built from it. A SOURCE is parsed by :mod:`policy.source_spec`; this module resolves it.

This module is training-side code (torch, gymnasium, envs); a consumer that only runs an exported
policy needs :mod:`policy.exported` alone. Checkpoints are read through the store's public API
(``CheckpointStore``, ``RunStore.resolve`` and ``load``; ``store.parse_ref`` for ``<run>@<version>``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.config import OBSERVATION_MODES, EnvConfig
from envs.observation import observation_mode, policy_space
from policy.errors import PolicySourceError
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
from policy.network import ActorCritic, ExportPolicy, PolicyConfig, upgrade_policy_config
from policy.rebuild import guess_rig, rebuild_obs_space
from policy.source_spec import SYNTAX, SourceSpec, parse_source, redact_tree, redact_uri
from policy.spaces import (
    ACTION_KEYS,
    OBS_DOCS,
    SPACES_FILE,
    SPACES_FORMAT,
    action_spec_from_json,
    space_from_json,
    space_to_json,
    spaces_json,
)
from scenarios.actions import ActionSpec
from sim.configs import ConfigError, from_dict
from sim.files import sha256_file
from store import MANIFEST, CheckpointStore, StoreError, bytes_to_tensors

CHECKPOINT_REQUIRED = ("policy.safetensors", "config.json")


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
        """The observation spec: [{name, shape, dtype, ...}] in the network's input order: the policy's parts
        (an asymmetric critic's privileged parts, ``critic_*``, are the network's but no input of the policy)."""
        return space_to_json(policy_space(self.obs_space))

    def build_policy(self) -> ActorCritic:
        """A fresh ActorCritic in eval mode with these weights."""
        where = self.provenance.get("spec", "")
        net = _build_network(self.obs_space, self.action_spec, self.policy_config, where, self.weights)
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
        from_dict(PolicyConfig, upgrade_policy_config(pol_over))
    except ConfigError as e:
        raise PolicySourceError(f"{where}: config.json field 'policy': {e}") from None

    if sp is not None and obs_space is not None:
        action_spec = action_spec_from_json(sp.get("action"), f"{where}: {SPACES_FILE} 'action'", env_cfg.action_spec)
        rig = sp.get("rig") or guess_rig(obs_space, env_cfg, config)
    else:
        obs_space, rig = rebuild_obs_space(env_cfg, config, where)
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


def _build_network(obs_space, action_spec, policy_config: Mapping[str, Any], where: str, weights=None):
    """The ActorCritic of a policy config; a config from before ``critic`` existed gets the critic its
    weights hold (a separate one has ``critic_*`` parameters, else the head sat on the shared trunk)."""
    policy_config = upgrade_policy_config(dict(policy_config))
    if "critic" not in policy_config and weights is not None:
        policy_config["critic"] = "separate" if any(k.startswith("critic_") for k in weights) else "shared"
    try:
        cfg = from_dict(PolicyConfig, policy_config)
        return ActorCritic(obs_space, action_spec, cfg)
    except (ConfigError, ValueError, TypeError) as e:
        raise PolicySourceError(f"{where}: cannot build the network: {e}") from None


def _check_weights_fit(weights, obs_space, action_spec, policy_config, where: str) -> None:
    net = _build_network(obs_space, action_spec, policy_config, where, weights)
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
    if spec.get("critic_inputs"):  # an asymmetric critic's privileged parts: the network's, not the policy's
        critic = space_from_json(spec["critic_inputs"], f"{where}: {POLICY_JSON} 'critic_inputs'")
        obs_space = gym.spaces.Dict({**obs_space.spaces, **critic.spaces})
    env_over = dict(spec.get("env_config") or {})
    mode = env_over.get("observation") or spec.get("observation_mode") or observation_mode(obs_space)
    if mode not in OBSERVATION_MODES:
        raise PolicySourceError(f"{where}: observation mode {mode!r}, expected one of {', '.join(OBSERVATION_MODES)}")
    env_over["observation"] = mode
    try:
        default = EnvConfig.from_dict(env_over).action_spec
    except ValueError as e:
        raise PolicySourceError(f"{where}: {POLICY_JSON} 'env_config': {e}") from None
    action_spec = action_spec_from_json(spec.get("action"), f"{where}: {POLICY_JSON} 'action'", default)
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
        policy_json_sha256=sha256_file(folder / POLICY_JSON),
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


__all__ = [
    "ACTION_KEYS",
    "CHECKPOINT_REQUIRED",
    "OBS_DOCS",
    "SPACES_FILE",
    "SPACES_FORMAT",
    "SYNTAX",
    "EagerActor",
    "PolicySource",
    "PolicySourceError",
    "SourceSpec",
    "parse_source",
    "redact_tree",
    "redact_uri",
    "resolve_policy_source",
    "space_from_json",
    "space_to_json",
    "spaces_json",
]
