"""Export a trained policy as a self-contained package: ONNX, torch.export, safetensors, policy.json.

    python -m policy.export --policy SOURCE --out DIR [--config FILE.yaml] [key=value ...]

SOURCE (see ``policy.sources``): ``<store>/<run>[@<version>|@latest]`` (``runs/myrun@3``,
``s3://bucket/prefix/myrun@latest``), a checkpoint folder ``<store>/<run>/ckpt-XXXXXXXX``, or an
exported package (re-export: the files are checked and copied unchanged). The source is verified
completely (every file's sha256 against the checkpoint's manifest) before anything is written.

DIR receives (written beside it in a temporary folder, then renamed into place):

    policy.onnx          ONNX graph, inputs by observation name (uint8 cameras, float32 the rest),
                         dynamic batch; outputs action, logits_long, logits_lat_all, values
    policy.pt2           the same program through torch.export.save, dynamic batch
    weights.safetensors  the network's state_dict
    policy.json          observation mode ("camera" or "privileged") and spec, action bins, mask
                         rule and table, normalisation, versions, configs, provenance, export time,
                         parity figures, file sha256s

Before the package is published, the ONNX model (onnxruntime) and the torch.export program are
run on random observations and held to the eager network: logits within ``tolerance`` and the
same actions, or the export is refused. Run it with ``policy.exported.load_exported(DIR)``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.config import EnvConfig
from envs.observation import critic_space, is_critic_key, policy_space
from policy.exported import FORMAT, FORMAT_VERSION, OUTPUTS, POLICY_JSON, ExportError, load_exported
from policy.network import ExportPolicy, RunningNorm, random_obs
from policy.sources import PolicySource, PolicySourceError, resolve_policy_source, space_to_json
from sim.camera import make_rig
from sim.configs import field, parse_cli, to_dict
from sim.dynamics import ANCHOR_HORIZON
from sim.files import sha256_file
from sim.seeding import derive_seed

log = logging.getLogger(__name__)

ONNX_FILE, PT2_FILE, WEIGHTS_FILE = "policy.onnx", "policy.pt2", "weights.safetensors"
DEFAULT_OPSET = 17


@dataclass(frozen=True)
class ExportConfig:
    policy: str = field("", help="SOURCE: <store>/<run>[@<version>|@latest], a ckpt-XXXXXXXX folder or a package")
    out: str = field("", help="the package folder to write (refused if it exists and is not empty, unless overwrite)")
    opset: int = field(DEFAULT_OPSET, help="ONNX opset of policy.onnx")
    check_samples: int = field(32, help="random observations the exported models are checked on against the eager one")
    tolerance: float = field(1e-4, help="largest |logit or value difference| allowed between exported and eager")
    overwrite: bool = field(False, help="replace an existing non-empty output folder")
    seed: int = field(0, help="seed of the random check observations")
    threads: int = field(0, help="torch threads (0: torch's default)")

    def __post_init__(self):
        if self.opset < 13:
            raise ValueError(f"opset: expected >= 13, got {self.opset}")
        if self.check_samples < 1 or not self.tolerance > 0:
            raise ValueError("check_samples >= 1 and tolerance > 0 are required")


@dataclass(frozen=True)
class ExportResult:
    path: Path
    policy_json: dict
    seconds: float


# --------------------------------------------------------------------------------------------------
# The model wrappers


class _Positional(torch.nn.Module):
    """ExportPolicy with one positional tensor per observation input (ONNX inputs get their names)."""

    def __init__(self, module: torch.nn.Module, names: list[str]):
        super().__init__()
        self.module, self.names = module, list(names)

    def forward(self, *xs):
        return self.module(dict(zip(self.names, xs)))


def _example_obs(space, batch: int, seed: int) -> dict[str, torch.Tensor]:
    return random_obs(space, batch, generator=torch.Generator().manual_seed(seed))


def _export_onnx(wrapper: torch.nn.Module, names: list[str], example: dict, path: Path, opset: int) -> str:
    """Write policy.onnx; returns the exporter's name.

    The TorchScript-based exporter: it needs nothing beyond torch (the torch.export-based one needs
    onnxscript, not a dependency of this project) and gives the same graph for this network.
    """
    axes = {n: {0: "batch"} for n in [*names, *OUTPUTS]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Positional(wrapper, names),
            tuple(example[n] for n in names),
            str(path),
            dynamo=False,
            input_names=names,
            output_names=list(OUTPUTS),
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
        )
    import onnx

    onnx.checker.check_model(str(path))
    return "torch.onnx.export (TorchScript-based)"


def _export_pt2(wrapper: torch.nn.Module, names: list[str], example: dict, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs = {n: example[n] for n in names}
        ep = torch.export.export(wrapper, (obs,), dynamic_shapes=({n: {0: batch} for n in names},))
    ep._example_inputs = None  # stored pickled otherwise; policy.exported refuses pickled payloads
    torch.export.save(ep, str(path))


# --------------------------------------------------------------------------------------------------
# policy.json


def _versions(opset: int) -> dict:
    import onnx
    import onnxruntime
    import safetensors

    try:
        from importlib.metadata import version

        sd = version("splatdrive")
    except Exception:
        sd = "unknown"
    commit = None
    try:
        repo = Path(__file__).resolve().parents[1]
        if (repo / ".git").exists():
            commit = (
                subprocess.run(
                    ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
                ).stdout.strip()
                or None
            )
    except Exception:
        pass
    return dict(
        splatdrive=sd,
        splatdrive_commit=commit,
        torch=torch.__version__,
        onnx=onnx.__version__,
        onnx_opset=opset,
        onnxruntime=onnxruntime.__version__,
        safetensors=safetensors.__version__,
        numpy=np.__version__,
        python=platform.python_version(),
    )


def _action_json(spec) -> dict:
    return dict(
        order=["lateral", "longitudinal"],
        gymnasium="MultiDiscrete([n_lat, n_long]): action[..., 0] lateral bin, action[..., 1] longitudinal bin",
        meaning="an anchor: the ego's displacement 0.5 s ahead in its frame at decision time; the env drives "
        "the first 0.1 s along the arc to it and decides again (10 Hz)",
        frame="ego frame at decision time: x forward, y left (metres)",
        horizon_s=ANCHOR_HORIZON,
        n_lat=int(spec.n_lat),
        lat_max=float(spec.lat_max),
        n_long=int(spec.n_long),
        long_max=float(spec.long_max),
        max_curvature=float(spec.max_curvature),
        lateral_m=[float(v) for v in spec.lateral],
        longitudinal_m=[float(v) for v in spec.longitudinal],
        decision="deterministic: i = argmax logits_long[b]; j = argmax logits_lat_all[b, i]; action = (j, i). "
        "Stochastic (as in training): i ~ softmax(logits_long[b]), j ~ softmax(logits_lat_all[b, i])",
    )


def _mask_json(spec) -> dict:
    m = spec.mask
    lo, hi = spec.band
    return dict(
        rule="a (lateral y, longitudinal x) anchor is feasible when |y| <= (1 - sqrt(1 - (k x)^2)) / k, any |y| "
        "once k x >= 1, with k = max_curvature (1/m): the arc that leaves the ego tangent to its heading bends "
        "at most k; the lateral bin nearest to 0 is always feasible. With the default bins this is RAD's table "
        "(half-widths 0, 0, 2, 4, 8, 13, 20, 29 lateral bins for longitudinal bins 0..7, full from 8 on)",
        max_curvature=float(spec.max_curvature),
        masked_value=-1e9,
        applied="logits_lat_all[b, i, j] = -1e9 wherever (longitudinal i, lateral j) is infeasible, already in "
        "the model's output; logits_long is not masked (every longitudinal bin has a feasible lateral)",
        band_lo=[int(v) for v in lo],
        band_hi=[int(v) for v in hi],
        band="the feasible lateral bins of longitudinal bin i are band_lo[i] .. band_hi[i] inclusive",
        half_widths=[int(v) for v in spec.half_widths()],
        table=["".join("1" if x else "0" for x in row) for row in m],
        table_layout="n_long strings of n_lat characters: table[i][j] == '1' where (longitudinal i, lateral j) "
        "is feasible",
        rebuild="scenarios.actions.ActionSpec(n_lat, lat_max, n_long, long_max, max_curvature).feasibility()",
    )


def _normalisation_json(net) -> dict:
    out: dict[str, Any] = dict(
        inside_model=True,
        note="baked into policy.onnx and policy.pt2: feed the raw observations (uint8 images, float32 vectors "
        "as the env gives them); do not normalise them yourself",
    )
    cam = net.encoders["cameras"] if "cameras" in net.encoders else None
    if cam is not None:
        out["images"] = dict(
            input="cameras",
            formula="x = uint8 / 255, then (x - mean) / std per RGB channel",
            mean=[float(v) for v in cam.img_mean.flatten()],
            std=[float(v) for v in cam.img_std.flatten()],
        )
    vec = {}
    for key, norm in net.norms.items():
        assert isinstance(norm, RunningNorm)
        if is_critic_key(key):  # the value function's alone: no input of the package
            continue
        std = torch.sqrt(norm.var + norm.eps)
        vec[key] = dict(
            formula="clip((x - mean) / sqrt(var + eps), -clip, clip), statistics per feature"
            + (" shared by all tokens (rows)" if key in ("agents", "map") else ""),
            stats_shape=list(norm.shape),
            mean=norm.mean.tolist(),
            std=std.tolist(),
            eps=float(norm.eps),
            clip=float(norm.clip),
            count=float(norm.count),
        )
    out["vectors"] = vec
    out["masks"] = "agents_mask / map_mask are used as given (1 present, 0 padding), not normalised"
    return out


def _rig_json(rig: dict | None, obs_space) -> dict | None:
    """The camera rig: name, resolution, and each camera's intrinsics and mounting (sim.camera)."""
    if not rig or "cameras" not in obs_space.spaces:
        return None
    C, H, W, _ = obs_space["cameras"].shape
    try:
        r = make_rig(rig["name"], int(rig["width"]), int(rig["height"]))
    except (KeyError, ValueError):
        return dict(rig)
    if (len(r), r.height, r.width) != (C, H, W):
        log.warning("rig %s does not match the cameras input %s; not described", r.name, (C, H, W))
        return None
    return dict(
        name=r.name,
        width=r.width,
        height=r.height,
        convention="cameras[:, c] is camera c below; K in pixels; ego_T_cam: the camera's OpenCV frame "
        "(x right, y down, z forward) in the ego frame (x forward, y left, z up, rear axle), metres",
        cameras=[dict(name=c.name, K=c.K.tolist(), ego_T_cam=np.asarray(c.ego_T_cam).tolist()) for c in r.cameras],
    )


def _outputs_json(spec, asymmetric: bool = False) -> list[dict]:
    nl, nt = int(spec.n_lat), int(spec.n_long)
    values = "value estimates: lateral part, longitudinal part"
    if asymmetric:
        values = (
            "NaN: the value function read privileged state while training (an asymmetric critic, "
            "critic_inputs), which a car does not have; the policy's outputs need only 'inputs'"
        )
    return [
        dict(name="action", shape=[2], dtype="int64", meaning="deterministic (lateral, longitudinal) bin indices"),
        dict(name="logits_long", shape=[nt], dtype="float32", meaning="longitudinal logits (unmasked)"),
        dict(
            name="logits_lat_all",
            shape=[nt, nl],
            dtype="float32",
            meaning="lateral logits given each longitudinal bin (row i: given bin i), infeasible pairs at -1e9",
        ),
        dict(name="values", shape=[2], dtype="float32", meaning=values),
    ]


def _file_entry(path: Path) -> dict:
    return dict(size=path.stat().st_size, sha256=sha256_file(path))


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Parity


def _random_check_obs(src: PolicySource, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Random observation batches from the policy's space: one of n, and a batch of 1 (seeded
    ``derive_seed(seed, 0)`` and ``derive_seed(seed, 1)``)."""
    space = policy_space(src.obs_space)
    batches = [_example_obs(space, b, derive_seed(seed, i)) for i, b in enumerate((n, 1))]
    return [{k: v.numpy() for k, v in obs.items()} for obs in batches]


def _compare(eager, other, batches: list[dict[str, np.ndarray]]) -> dict:
    """Max |difference| of logits (feasible entries) and values, and whether the actions agree."""
    diff_long = diff_lat = diff_val = 0.0
    agree, total = 0, 0
    for obs in batches:
        a, b = eager.run(obs), other.run(obs)
        diff_long = max(diff_long, float(np.abs(a["logits_long"] - b["logits_long"]).max()))
        feas = a["logits_lat_all"] > -1e8
        if not np.array_equal(feas, b["logits_lat_all"] > -1e8):
            raise ExportError(f"{other!r}: the lateral mask differs from the eager network's")
        diff_lat = max(diff_lat, float(np.abs(a["logits_lat_all"] - b["logits_lat_all"])[feas].max()))
        d_val = np.abs(a["values"] - b["values"])
        d_val[np.isnan(a["values"]) & np.isnan(b["values"])] = 0.0  # an asymmetric critic's NaN values agree
        diff_val = max(diff_val, float(d_val.max()))
        agree += int((a["action"] == b["action"]).all(axis=1).sum())
        total += len(a["action"])
    return dict(
        max_abs_diff_logits_long=diff_long,
        max_abs_diff_logits_lat=diff_lat,
        max_abs_diff_values=diff_val,
        max_abs_diff=max(diff_long, diff_lat, diff_val),
        actions_equal=agree,
        samples=total,
    )


def check_package(folder: Path, src: PolicySource, samples: int, tolerance: float, seed: int) -> dict:
    """Hold both exported models to the eager network on random observations; raise ExportError if off."""
    eager = src.make_actor("eager")
    batches = _random_check_obs(src, samples, seed)
    out = {}
    for backend, key in (("onnxruntime", "onnxruntime"), ("torch", "torch_export")):
        res = _compare(eager, load_exported(folder, backend=backend), batches)
        if res["max_abs_diff"] > tolerance or res["actions_equal"] != res["samples"]:
            raise ExportError(
                f"{folder}: the {backend} model differs from the eager network on random observations: "
                f"max |diff| {res['max_abs_diff']:.3g} (tolerance {tolerance:g}), "
                f"{res['samples'] - res['actions_equal']} of {res['samples']} actions differ"
            )
        out[key] = res
    return dict(observations="random, from the observation space", tolerance=tolerance, seed=seed, **out)


# --------------------------------------------------------------------------------------------------
# Export


def _prepare_out(out: Path, src: PolicySource, overwrite: bool) -> Path:
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"output {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ExportError(f"output {out} exists and is not empty (pass overwrite=true to replace it)")
    if src.path is not None:
        o, s = out.resolve(), Path(src.path).resolve()
        if o == s or s in o.parents or o in s.parents:
            raise ExportError(f"output {out} overlaps the source folder {src.path}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    """Rename the finished temporary folder into place (replacing an old one last)."""
    old = None
    if out.exists():
        old = out.parent / f".old-{out.name}-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_policy(
    source: str | os.PathLike | PolicySource,
    out: str | os.PathLike,
    *,
    opset: int = DEFAULT_OPSET,
    check_samples: int = 32,
    tolerance: float = 1e-4,
    overwrite: bool = False,
    seed: int = 0,
) -> ExportResult:
    """Export SOURCE (or a resolved PolicySource) into the package folder ``out``; see the module docstring.

    Raises PolicySourceError for a missing or corrupt source and ExportError for an output that
    cannot be written or exported models that do not match the eager network.
    """
    t0 = time.perf_counter()
    src = source if isinstance(source, PolicySource) else resolve_policy_source(source)
    out = Path(out)
    tmp = _prepare_out(out, src, overwrite)
    try:
        if src.kind == "exported":
            spec = _copy_package(src, tmp, check_samples, seed)
        else:
            spec = _write_package(src, tmp, opset, check_samples, tolerance, seed, t0)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    seconds = time.perf_counter() - t0
    log.info("exported %s to %s in %.1f s", src.provenance.get("spec"), out, seconds)
    return ExportResult(out, spec, seconds)


def _copy_package(src: PolicySource, tmp: Path, check_samples: int, seed: int) -> dict:
    """Re-export: the (already verified) files copied unchanged, then checked where they now lie."""
    assert src.path is not None and src.policy_json is not None
    spec = src.policy_json
    for name in [POLICY_JSON, *spec["files"]]:
        shutil.copyfile(Path(src.path) / name, tmp / name)
    tol = float((spec.get("parity") or {}).get("tolerance", 1e-4))
    resolve_policy_source(tmp)  # sizes and sha256 of the copies
    check_package(tmp, src, check_samples, tol, seed)
    return spec


def _write_package(
    src: PolicySource, tmp: Path, opset: int, check_samples: int, tolerance: float, seed: int, t0: float
) -> dict:
    from safetensors.torch import save as save_tensors  # the export extra, as onnx and onnxruntime

    net = src.build_policy()
    wrapper = ExportPolicy(net).eval()
    names = [e["name"] for e in src.inputs]
    space = policy_space(src.obs_space)  # the policy's inputs; an asymmetric critic's parts stay out
    critic = critic_space(src.obs_space)  # the value function's alone
    example = _example_obs(space, 2, seed)  # batch 2: a batch of 1 would be specialised

    weights = {k: v.detach().cpu().contiguous() for k, v in src.weights.items()}
    (tmp / WEIGHTS_FILE).write_bytes(save_tensors(weights, metadata={"format": "splatdrive ActorCritic state_dict"}))
    t = time.perf_counter()
    exporter = _export_onnx(wrapper, names, example, tmp / ONNX_FILE, opset)
    onnx_s = time.perf_counter() - t
    t = time.perf_counter()
    _export_pt2(wrapper, names, example, tmp / PT2_FILE)
    pt2_s = time.perf_counter() - t

    pcfg = to_dict(net.cfg)  # what the network was built with (a checkpoint's config may predate a field)
    env_config = {k: v for k, v in src.env_config.items() if k != "critic"}  # what a car's env emits
    try:
        env_resolved = EnvConfig.from_dict(env_config).to_dict()
    except ValueError:
        env_resolved = None
    train = src.train_config or {}
    spec: dict[str, Any] = dict(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        exported_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        observation_mode=src.observation_mode,
        inputs=space_to_json(space, describe=True),
        batch=dict(dim=0, dynamic=True, note="every input and output has a leading batch dimension B >= 1"),
        outputs=_outputs_json(src.action_spec, bool(critic.spaces)),
        action=_action_json(src.action_spec),
        mask=_mask_json(src.action_spec),
        normalisation=_normalisation_json(net),
        rig=_rig_json(src.rig, space),
        onnx=dict(file=ONNX_FILE, opset=opset, exporter=exporter, input_names=names, output_names=list(OUTPUTS)),
        torch_export=dict(
            file=PT2_FILE,
            load="torch.export.load(path).module()(obs) with obs a dict of tensors named as 'inputs'; the "
            "archive holds raw tensors only (nothing pickled), policy.exported checks that before loading",
            dynamic_dims=dict(batch=dict(min=1)),
        ),
        weights=dict(
            file=WEIGHTS_FILE,
            format="safetensors: the ActorCritic state_dict (policy.network); rebuild with policy_config and inputs",
            parameters=int(sum(p.numel() for p in net.parameters())),
        ),
        versions=_versions(opset),
        policy_config=pcfg,
        env_config=env_config,
        env_config_resolved=env_resolved,
        train_suite=train.get("suite"),
        source=_source_json(src),
        train_config=train or None,
    )
    if critic.spaces:  # the network's other inputs: its value function's (weights.safetensors holds it whole)
        spec["critic_inputs"] = space_to_json(critic, describe=True)
    spec["files"] = {n: _file_entry(tmp / n) for n in (ONNX_FILE, PT2_FILE, WEIGHTS_FILE)}
    _write_json(tmp / POLICY_JSON, spec)
    spec["parity"] = check_package(tmp, src, check_samples, tolerance, seed)
    total = time.perf_counter() - t0
    spec["export_seconds"] = dict(onnx=round(onnx_s, 3), torch_export=round(pt2_s, 3), total=round(total, 3))
    _write_json(tmp / POLICY_JSON, spec)
    return spec


def _source_json(src: PolicySource) -> dict:
    p = src.provenance
    if p.get("kind") == "exported":
        return dict(p.get("source") or {})
    keys = ("kind", "spec", "store_uri", "run", "version", "manifest_sha256", "wall_time", "meta", "train_state")
    out = {k: p.get(k) for k in keys}
    out["manifest"] = "manifest_sha256: sha256 of the checkpoint's MANIFEST.json bytes (which list every file's sha256)"
    out["files"] = p.get("files")
    return out


# --------------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_cli(
        ExportConfig,
        argv,
        "python -m policy.export",
        __doc__,
        flags=[
            ("--policy", "policy", "SOURCE: <store>/<run>[@<version>|@latest], a ckpt-XXXXXXXX folder or a package"),
            ("--out", "out", "the package folder to write"),
        ],
    )
    if not cfg.policy or not cfg.out:
        print("policy.export: --policy SOURCE and --out DIR are required (see --help)", file=sys.stderr)
        return 2
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    try:
        res = export_policy(
            cfg.policy,
            cfg.out,
            opset=cfg.opset,
            check_samples=cfg.check_samples,
            tolerance=cfg.tolerance,
            overwrite=cfg.overwrite,
            seed=cfg.seed,
        )
    except (PolicySourceError, ExportError) as e:
        print(f"policy.export: {e}", file=sys.stderr)
        return 1
    spec = res.policy_json
    summary = dict(
        out=str(res.path),
        source=spec.get("source", {}).get("spec"),
        manifest_sha256=spec.get("source", {}).get("manifest_sha256"),
        files=spec["files"],
        parity=spec.get("parity"),
        seconds=round(res.seconds, 2),
        config=dataclasses.asdict(cfg),
    )
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
