"""Run an exported policy package without the training code: numpy plus onnxruntime, or torch.export.

A package (written by ``python -m policy.export``) is a folder::

    policy.json          what the model takes and gives: observation inputs (name, shape, dtype,
                         meaning, units, frame), action bins, mask rule and table, normalisation,
                         versions, configs, provenance (source checkpoint's manifest sha256), and the
                         size + sha256 of every other file
    policy.onnx          ONNX graph (opset in policy.json), inputs by observation name, dynamic batch
    policy.pt2           the same as a torch.export program (torch.export.save), dynamic batch
    weights.safetensors  the network's state_dict (for rebuilding it with the training code)

Every model maps observations ``{name: [B, *shape]}`` to four outputs:

    action          int64   [B, 2]              deterministic (lateral, longitudinal) bin indices
    logits_long     float32 [B, n_long]         longitudinal logits
    logits_lat_all  float32 [B, n_long, n_lat]  lateral logits for every longitudinal bin, infeasible
                                                pairs already set to -1e9
    values          float32 [B, 2]              value estimates (lateral part, longitudinal part)

Usage::

    from policy.exported import load_exported
    pol = load_exported("exports/myrun-3")            # backend="onnxruntime" (or "torch")
    actions = pol.act(obs)                            # obs: dict of numpy [B, ...] -> int64 [B, 2]
    lat_m, long_m = pol.decode(actions)               # metres, ego frame, 0.5 s ahead
    pol.observation_mode                              # "camera" (a car's view) or "privileged"
    pol.check_env(env)                                # refuses a SplatDrive env of the other mode

``policy.json``'s ``observation_mode`` says what the policy was trained to observe: "camera" (images,
the ego's own status, navigation from the map) or "privileged" (ground-truth state: a teacher).

This module imports only the standard library and numpy; onnxruntime or torch load on first use.
Nothing is unpickled: policy.onnx is protobuf, and policy.pt2 is refused unless every tensor in it
is stored raw (no pickled weights, constants, custom objects or sample inputs) before
``torch.export.load`` sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "splatdrive-policy"
FORMAT_VERSION = 1
POLICY_JSON = "policy.json"
OUTPUTS = ("action", "logits_long", "logits_lat_all", "values")
BACKENDS = ("onnxruntime", "torch")
MAX_POLICY_JSON_BYTES = 64 << 20


class ExportError(ValueError):
    """An exported package that cannot be used (missing, corrupt, inconsistent), or bad input to it."""


class ObservationMismatch(ExportError):
    """Observations that do not match the package's observation spec (names, shapes, dtypes)."""


def _sha256_file(path: Path) -> str:
    # sim.files.sha256_file, repeated: this module imports only the standard library and numpy.
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_policy_json(folder: str | os.PathLike) -> dict:
    """Parse and check the structure of ``<folder>/policy.json``; raise ExportError naming what is wrong."""
    folder = Path(folder)
    path = folder / POLICY_JSON
    if not folder.is_dir():
        raise ExportError(f"{folder}: no such folder (an exported policy package is a folder with {POLICY_JSON})")
    if not path.is_file():
        raise ExportError(f"{path} is missing: {folder} is not an exported policy package")
    if path.stat().st_size > MAX_POLICY_JSON_BYTES:
        raise ExportError(f"{path}: larger than {MAX_POLICY_JSON_BYTES} bytes, not a policy.json")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ExportError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(spec, dict):
        raise ExportError(f"{path}: expected a JSON object at the top level")
    if spec.get("format") != FORMAT:
        raise ExportError(f"{path}: field 'format' is {spec.get('format')!r}, expected {FORMAT!r}")
    if spec.get("format_version") != FORMAT_VERSION:
        raise ExportError(
            f"{path}: field 'format_version' is {spec.get('format_version')!r}; this code reads {FORMAT_VERSION}"
        )
    inputs = spec.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise ExportError(f"{path}: field 'inputs' must be a non-empty list")
    for i, e in enumerate(inputs):
        ok = (
            isinstance(e, dict)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("shape"), list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in e["shape"])
            and e.get("dtype") in ("uint8", "float32")
        )
        if not ok:
            raise ExportError(f"{path}: field 'inputs[{i}]' needs name (str), shape (ints), dtype (uint8|float32)")
    files = spec.get("files")
    if not isinstance(files, dict) or not files:
        raise ExportError(f"{path}: field 'files' must map file names to {{size, sha256}}")
    for name, entry in files.items():
        if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", "..", POLICY_JSON):
            raise ExportError(f"{path}: field 'files' lists an invalid file name {name!r}")
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("size"), int)
            or not isinstance(entry.get("sha256"), str)
        ):
            raise ExportError(f"{path}: field 'files.{name}' needs size (int) and sha256 (hex str)")
    act = spec.get("action")
    if not isinstance(act, dict) or not all(isinstance(act.get(k), int) for k in ("n_lat", "n_long")):
        raise ExportError(f"{path}: field 'action' needs n_lat and n_long (ints)")
    return spec


def verify_files(folder: str | os.PathLike, spec: Mapping[str, Any], names: tuple[str, ...] | None = None) -> None:
    """Check each file listed in policy.json (or just ``names``) against its size and sha256."""
    folder = Path(folder)
    files = spec["files"]
    for name in names if names is not None else tuple(files):
        if name not in files:
            raise ExportError(f"{folder / POLICY_JSON}: field 'files' does not list {name}")
        p = folder / name
        if not p.is_file():
            raise ExportError(f"{p} is missing (listed in {POLICY_JSON})")
        size = p.stat().st_size
        if size != files[name]["size"]:
            raise ExportError(f"{p} has {size} bytes, {POLICY_JSON} says {files[name]['size']} (truncated?)")
        digest = _sha256_file(p)
        if digest != files[name]["sha256"]:
            raise ExportError(f"{p} has sha256 {digest}, {POLICY_JSON} says {files[name]['sha256']} (changed bytes)")


def check_observations(
    inputs: Sequence[Mapping[str, Any]], obs: Mapping[str, Any], what: str = "policy"
) -> tuple[dict[str, np.ndarray], int]:
    """Check a batch of observations against an observation spec; returns (contiguous arrays in spec
    order, batch size B). ``inputs``: [{name, shape (no batch), dtype}]; ``obs``: {name: array [B, *shape]}.

    Raises ObservationMismatch naming every missing or unexpected key, or the first input whose
    shape, dtype or batch size is off, with what was expected.
    """
    if not isinstance(obs, Mapping):
        raise ObservationMismatch(f"{what}: observations must be a dict of name -> array, got {type(obs).__name__}")
    names = [e["name"] for e in inputs]
    missing = [n for n in names if n not in obs]
    extra = sorted(str(k) for k in obs if k not in names)
    if missing or extra:
        raise ObservationMismatch(
            f"{what}: observation keys do not match the spec: "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {extra}" if extra else "")
            + f" (the policy takes {names})"
        )
    out: dict[str, np.ndarray] = {}
    batch: int | None = None
    for e in inputs:
        n, shape, dtype = e["name"], tuple(e["shape"]), np.dtype(e["dtype"])
        a = obs[n]
        if not isinstance(a, np.ndarray):
            if hasattr(a, "numpy") and hasattr(a, "detach"):  # a torch tensor
                a = a.detach().cpu().numpy()
            else:
                a = np.asarray(a)
        if a.dtype != dtype:
            raise ObservationMismatch(
                f"{what}: observation {n!r} has dtype {a.dtype}, expected {dtype.name} "
                f"[B, {', '.join(map(str, shape))}]"
            )
        if a.ndim != len(shape) + 1 or tuple(a.shape[1:]) != shape:
            raise ObservationMismatch(
                f"{what}: observation {n!r} has shape {tuple(a.shape)}, expected [B, {', '.join(map(str, shape))}]"
            )
        if batch is None:
            batch = a.shape[0]
        elif a.shape[0] != batch:
            raise ObservationMismatch(
                f"{what}: observation {n!r} has batch size {a.shape[0]}, {names[0]!r} has {batch} (one batch for all)"
            )
        out[n] = np.ascontiguousarray(a)
    if not batch:
        raise ObservationMismatch(f"{what}: empty batch (B = 0)")
    return out, batch


def check_pt2_archive(path: str | os.PathLike) -> None:
    """Refuse a torch.export archive that would make ``torch.export.load`` unpickle anything.

    torch.export.load reads raw tensor bytes for plain tensors but falls back to pickle for tensor
    subclasses, custom and opaque objects, legacy weight files, and non-empty sample inputs that
    weights_only loading rejects. A package from policy.export has none of these.
    """
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise ExportError(f"{path}: not a torch.export archive ({e})") from None
    with zf:
        infos = {i.filename: i for i in zf.infolist()}
        roots = {n.split("/", 1)[0] for n in infos}
        if len(roots) != 1:
            raise ExportError(f"{path}: expected one archive root folder, found {sorted(roots)}")
        root = roots.pop() + "/"
        rel = {n[len(root) :]: i for n, i in infos.items()}
        models = [n for n in rel if n.startswith("models/") and n.endswith(".json")]
        if len(models) != 1:
            raise ExportError(f"{path}: expected one program in models/, found {models}")
        model = models[0][len("models/") : -len(".json")]
        for name, info in rel.items():
            if name.endswith(".pt") or name.endswith(".pkl"):
                if name == f"data/sample_inputs/{model}.pt" and info.file_size == 0:
                    continue
                raise ExportError(f"{path}: holds {name}, a pickled payload; refusing to load it")
            if name.startswith(("extra/", "data/aotinductor", "data/custom_objects")):
                raise ExportError(f"{path}: holds {name}, which this loader does not accept")
        for cfg_name, prefix in (
            (f"data/weights/{model}_weights_config.json", "weight_"),
            (f"data/constants/{model}_constants_config.json", "tensor_"),
        ):
            if cfg_name not in rel:
                raise ExportError(f"{path}: {cfg_name} is missing (not a current torch.export archive)")
            try:
                cfg = json.loads(zf.read(root + cfg_name).decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise ExportError(f"{path}: {cfg_name} is not valid JSON ({e})") from None
            for fqn, meta in (cfg.get("config") or {}).items():
                if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
                    raise ExportError(f"{path}: {cfg_name} stores {fqn!r} pickled; refusing to load it")
                if not str(meta.get("path_name", "")).startswith(prefix):
                    raise ExportError(f"{path}: {cfg_name} stores {fqn!r} as {meta.get('path_name')!r}, not raw")


class _OnnxRunner:
    def __init__(self, path: Path, spec: Mapping[str, Any], threads: int | None, providers: list[str] | None):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
            opts.inter_op_num_threads = 1
        try:
            # From bytes: the model cannot point at external data files beside it.
            providers = providers or ["CPUExecutionProvider"]
            self.session = ort.InferenceSession(path.read_bytes(), opts, providers=providers)
        except Exception as e:
            raise ExportError(f"{path}: onnxruntime cannot load it: {e}") from None
        types = {"uint8": "tensor(uint8)", "float32": "tensor(float)"}
        got = [(i.name, i.type) for i in self.session.get_inputs()]
        want = [(e["name"], types[e["dtype"]]) for e in spec["inputs"]]
        if sorted(got) != sorted(want):
            raise ExportError(f"{path}: ONNX inputs {got} do not match {POLICY_JSON}'s inputs {want}")
        outs = [o.name for o in self.session.get_outputs()]
        if outs != list(OUTPUTS):
            raise ExportError(f"{path}: ONNX outputs {outs}, expected {list(OUTPUTS)}")

    def __call__(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(list(OUTPUTS), arrays)


class _TorchRunner:
    def __init__(self, path: Path, threads: int | None):
        check_pt2_archive(path)
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        try:
            self.module = torch.export.load(str(path)).module()
        except Exception as e:
            raise ExportError(f"{path}: torch.export.load cannot load it: {e}") from None
        self.torch = torch

    def __call__(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        with torch.no_grad():
            outs = self.module({k: torch.from_numpy(v) for k, v in arrays.items()})
        return [o.detach().cpu().numpy() for o in outs]


class ExportedPolicy:
    """A loaded package. ``act(obs)`` -> int64 [B, 2]; ``run(obs)`` -> every output; ``spec`` = policy.json.

    obs: {name: numpy [B, *shape]} with exactly the names, shapes and dtypes of ``spec['inputs']``
    (uint8 cameras, float32 the rest); anything else raises ObservationMismatch.
    """

    def __init__(self, path: Path, spec: dict, backend: str, runner):
        self.path, self.spec, self.backend, self._runner = path, spec, backend, runner
        self.inputs: list[dict] = spec["inputs"]
        self.input_names = tuple(e["name"] for e in self.inputs)

    def __repr__(self) -> str:
        return f"ExportedPolicy({str(self.path)!r}, backend={self.backend!r}, inputs={list(self.input_names)})"

    @property
    def observation_mode(self) -> str:
        """ "camera" or "privileged": policy.json's ``observation_mode`` (packages from before it: read
        from the inputs, which then held privileged parts)."""
        mode = self.spec.get("observation_mode") or (self.spec.get("env_config") or {}).get("observation")
        if mode:
            return str(mode)
        shapes = {e["name"]: list(e.get("shape", [])) for e in self.inputs}
        camera_parts = set(shapes) <= {"cameras", "ego", "navigation", "command"}
        return "camera" if camera_parts and shapes.get("ego", [4]) == [4] else "privileged"

    def check_mode(self, mode: str, what: str = "the env") -> None:
        """Raise ExportError unless ``mode`` (an env's observation mode) is the package's."""
        if mode != self.observation_mode:
            raise ExportError(
                f"exported policy {self.path} was trained with observation={self.observation_mode!r}, {what} "
                f"observes {mode!r}: build the env with observation={self.observation_mode!r}"
            )

    def check_env(self, env: Any) -> None:
        """Raise ExportError unless a SplatDrive env (anything with ``config.observation``, or wrapping one)
        observes in the package's mode."""
        cfg = getattr(getattr(env, "unwrapped", env), "config", None)
        mode = getattr(cfg, "observation", None)
        if mode is None:
            raise ExportError(f"check_env: {env!r} has no config.observation (not a SplatDrive env?)")
        self.check_mode(str(mode), f"the env {type(env).__name__}")

    def check(self, obs: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """(arrays in spec order, batch size); raises ObservationMismatch."""
        return check_observations(self.inputs, obs, f"exported policy {self.path}")

    def run(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """{action [B, 2] int64, logits_long [B, n_long], logits_lat_all [B, n_long, n_lat], values [B, 2]}."""
        arrays, _ = self.check(obs)
        return dict(zip(OUTPUTS, self._runner(arrays)))

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Deterministic actions int64 [B, 2] (lateral, longitudinal bin indices)."""
        return self.run(obs)["action"].astype(np.int64, copy=False)

    __call__ = act

    def logits(self, obs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(logits_long [B, n_long], logits_lat_all [B, n_long, n_lat], infeasible pairs at -1e9)."""
        out = self.run(obs)
        return out["logits_long"], out["logits_lat_all"]

    def values(self, obs: Mapping[str, Any]) -> np.ndarray:
        """[B, 2] (lateral part, longitudinal part)."""
        return self.run(obs)["values"]

    def feasibility(self) -> np.ndarray:
        """[n_long, n_lat] bool: the mask applied to logits_lat_all (from policy.json's band)."""
        m = self.spec["mask"]
        lo, hi = np.asarray(m["band_lo"]), np.asarray(m["band_hi"])
        j = np.arange(self.spec["action"]["n_lat"])
        return (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])

    def decode(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """int [..., 2] bin indices -> (lateral m, longitudinal m): the anchor 0.5 s ahead, ego frame."""
        a = np.asarray(actions)
        act = self.spec["action"]
        return np.asarray(act["lateral_m"])[a[..., 0]], np.asarray(act["longitudinal_m"])[a[..., 1]]


def load_exported(
    path: str | os.PathLike,
    backend: str = "onnxruntime",
    *,
    verify: bool = True,
    threads: int | None = None,
    providers: list[str] | None = None,
) -> ExportedPolicy:
    """Load an exported package for inference, without the training code.

    backend: 'onnxruntime' (policy.onnx; ``providers`` as onnxruntime takes them, CPU by default) or
    'torch' (policy.pt2 through torch.export.load, after :func:`check_pt2_archive`).
    verify: check the model file's size and sha256 against policy.json first.
    threads: intra-op threads (None: the runtime's default).
    """
    if backend not in BACKENDS:
        raise ExportError(f"load_exported: backend must be one of {BACKENDS}, got {backend!r}")
    folder = Path(path)
    spec = read_policy_json(folder)
    key = "onnx" if backend == "onnxruntime" else "torch_export"
    entry = spec.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise ExportError(f"{folder / POLICY_JSON}: field '{key}.file' is missing: the package has no {backend} model")
    name = entry["file"]
    if verify:
        verify_files(folder, spec, (name,))
    elif name not in spec["files"] or "/" in name:
        raise ExportError(f"{folder / POLICY_JSON}: '{key}.file' {name!r} is not one of the listed files")
    if key == "onnx":
        runner: Any = _OnnxRunner(folder / name, spec, threads, providers)
    else:
        runner = _TorchRunner(folder / name, threads)
    return ExportedPolicy(folder, spec, backend, runner)
