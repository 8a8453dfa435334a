"""Payloads without pickle: tensors as safetensors, everything else as JSON.

A nested python structure holding tensors (an optimizer state, RNG states) is split by
:func:`state_to_payload` into flat tensors plus a JSON tree that points at them by key;
:func:`payload_to_state` puts it back together. Nothing here ever unpickles.

torch and safetensors are imported on first use: a process that only lists versions or holds a
run lease (the store's other half) never pays the second or so torch takes to import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


def tensors_to_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """Serialise a flat ``{name: tensor}`` dict with safetensors (moved to CPU, made contiguous)."""
    import torch
    from safetensors.torch import save

    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"tensors_to_bytes needs a dict of str -> Tensor; entry {name!r} is {type(tensor).__name__}"
            )
        out[name] = tensor.detach().to("cpu").contiguous()
    if all(str(t.dtype) in SAFETENSORS_DTYPES for t in out.values()):
        return safetensors_bytes(out)  # reads each tensor in place: shared memory (tied weights) is no matter
    # A dtype this writer does not name (float8 ...): safetensors' own, which refuses tensors that share
    # memory, so those get a copy.
    storages: set[int] = set()
    for name, t in out.items():
        ptr = t.untyped_storage().data_ptr()
        if ptr and ptr in storages:
            out[name] = t.clone()
        storages.add(ptr)
    return save(out)


# torch dtype -> (its name in a safetensors header, its place in safetensors' dtype order: files list the later
# first, which puts larger elements first, so every tensor's offset is aligned to its element size)
SAFETENSORS_DTYPES = {
    "torch.bool": ("BOOL", 0), "torch.uint8": ("U8", 4), "torch.int8": ("I8", 5), "torch.int16": ("I16", 9),
    "torch.float16": ("F16", 11), "torch.bfloat16": ("BF16", 12), "torch.int32": ("I32", 13),
    "torch.float32": ("F32", 15), "torch.float64": ("F64", 17), "torch.int64": ("I64", 18),
}  # fmt: skip


def safetensors_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """The safetensors file of contiguous CPU ``tensors``, built in one allocation: the header, then each
    tensor's bytes read in place. ``safetensors.torch.save`` (the reference, which ``bytes_to_tensors`` and any
    safetensors reader read back alike) first copies every tensor into Python bytes, then all of them again
    into the file: three times a payload's size at the peak where this needs two, which is what decides
    whether a camera policy's DAgger data (~150 KB a state, 3.6 GB after 12 rounds) fits in memory.

    Layout as the format specifies: 8 bytes little-endian header length, the JSON header (padded with spaces
    to a multiple of 8), the data; tensors in safetensors' order (dtype, larger elements first, then name):
    the bytes safetensors itself writes."""
    import torch

    names = sorted(tensors, key=lambda k: (-SAFETENSORS_DTYPES[str(tensors[k].dtype)][1], k))
    header: dict[str, dict] = {}
    views = []
    offset = 0
    for name in names:
        t = tensors[name]
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"safetensors_bytes: tensor {name!r} must be a contiguous CPU tensor")
        n = t.numel() * t.element_size()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[str(t.dtype)][0],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + n],
        }
        if n:
            views.append(t.reshape(-1).view(torch.uint8).numpy().data)  # a view: no copy
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    return b"".join([len(head).to_bytes(8, "little"), head, *views])


def bytes_to_tensors(data: bytes) -> dict[str, torch.Tensor]:
    """Inverse of :func:`tensors_to_bytes`; tensors come back on CPU."""
    from safetensors.torch import load

    try:
        return load(bytes(data))
    except Exception as exc:
        raise ValueError(f"not a valid safetensors payload ({len(data)} bytes): {exc}") from None


def json_bytes(obj: Any) -> bytes:
    """UTF-8 JSON of ``obj`` (NaN and infinities allowed, as Python's json reads them back)."""
    return json.dumps(obj, allow_nan=True, ensure_ascii=False).encode("utf-8")


def json_safe(obj: Any) -> Any:
    """``obj`` as strict JSON can hold it: NaN/Inf as None, numpy scalars as Python numbers, tuples as
    lists, mapping keys as strings (for reports that other tools read; :func:`json_bytes` keeps NaN)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def from_json_bytes(data: bytes) -> Any:
    """Inverse of :func:`json_bytes`."""
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a valid JSON payload ({len(data)} bytes): {exc}") from None


_MARKERS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__")


def state_to_payload(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested python structure holding tensors into ``(tensors, json_tree)``, without pickle.

    Handles dicts (any hashable JSON-able keys, e.g. the int parameter ids of an optimizer state),
    lists, tuples (kept as tuples, e.g. Adam's ``betas``), None/bool/int/float/str, torch tensors and
    numpy arrays. Each tensor is replaced in the tree by ``{"__tensor__": key}``, its key being its
    path (``state/0/exp_avg``). Store the parts with :func:`tensors_to_bytes` and :func:`json_bytes`;
    :func:`payload_to_state` is the inverse.
    """
    import torch

    tensors: dict[str, torch.Tensor] = {}

    def key_for(path: list[str]) -> str:
        key = "/".join(path) or "."
        n = 1
        while key in tensors:
            key = f"{'/'.join(path)}#{n}"
            n += 1
        return key

    def enc(obj: Any, path: list[str]) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, torch.Tensor):
            key = key_for(path)
            tensors[key] = obj
            return {"__tensor__": key}
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError(f"cannot store a numpy object array at '{'/'.join(path)}' without pickle")
            key = key_for(path)
            tensors[key] = torch.from_numpy(np.ascontiguousarray(obj))
            return {"__ndarray__": key}
        if isinstance(obj, np.generic):
            return enc(obj.item(), path)
        if isinstance(obj, list):
            return [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"__tuple__": [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in obj):
                return {k: enc(v, [*path, k]) for k, v in obj.items()}
            # JSON object keys are strings: other keys (ints, tuples) go as [key, value] pairs.
            return {"__dict__": [[enc(k, [*path, "key"]), enc(v, [*path, str(k)])] for k, v in obj.items()]}
        raise TypeError(
            f"cannot store a {type(obj).__name__} at '{'/'.join(path) or '.'}' without pickle: use tensors, "
            "numpy arrays, numbers, strings, None, lists, tuples or dicts"
        )

    return tensors, enc(state, [])


def payload_to_state(tensors: Mapping[str, torch.Tensor], tree: Any) -> Any:
    """Inverse of :func:`state_to_payload`."""

    def tensor(key: str) -> torch.Tensor:
        try:
            return tensors[key]
        except KeyError:
            raise ValueError(f"payload refers to tensor '{key}', which is not among the stored tensors") from None

    def dec(obj: Any) -> Any:
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        if isinstance(obj, dict):
            if len(obj) == 1:
                ((k, v),) = obj.items()
                if k == "__tensor__":
                    return tensor(v)
                if k == "__ndarray__":
                    return tensor(v).numpy()
                if k == "__tuple__":
                    return tuple(dec(x) for x in v)
                if k == "__dict__":
                    return {dec(pk): dec(pv) for pk, pv in v}
            return {k: dec(v) for k, v in obj.items()}
        return obj

    return dec(tree)


def optimizer_state_to_payload(state_dict: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict]:
    """``optimizer.state_dict()`` -> ``(tensors, json_tree)`` (see :func:`state_to_payload`).

    Keeps everything a resume needs: per-parameter state including step counts (tensors in torch 2),
    and every param group's hyperparameters, so the next step after a resume is bit-identical.
    """
    if not isinstance(state_dict, Mapping) or "state" not in state_dict or "param_groups" not in state_dict:
        raise TypeError("optimizer_state_to_payload needs an optimizer.state_dict() (keys 'state' and 'param_groups')")
    return state_to_payload(dict(state_dict))


def optimizer_state_from_payload(tensors: Mapping[str, torch.Tensor], tree: Any) -> dict:
    """Inverse of :func:`optimizer_state_to_payload`; pass the result to ``optimizer.load_state_dict``."""
    state = payload_to_state(tensors, tree)
    if not isinstance(state, dict) or "state" not in state or "param_groups" not in state:
        raise ValueError("payload is not an optimizer state (no 'state' / 'param_groups')")
    return state
