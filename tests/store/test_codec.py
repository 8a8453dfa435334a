"""Payloads without pickle: safetensors, JSON, nested states and an optimizer that resumes bit-identically."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from store import (
    CheckpointStore,
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    payload_to_state,
    state_to_payload,
    tensors_to_bytes,
)


def test_tensors_round_trip_through_safetensors():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensors = {
        "w": torch.randn(5, 3),
        "half": torch.randn(4).to(torch.bfloat16),
        "ids": torch.tensor([1, 2, 3], dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "scalar": torch.tensor(3.0),
        "empty": torch.zeros(0, 2),
        "transposed": base.t(),  # not contiguous
        "tied_a": base,
        "tied_b": base,  # shares memory with tied_a
    }
    back = bytes_to_tensors(tensors_to_bytes(tensors))
    assert back.keys() == tensors.keys()
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape and torch.equal(back[k], t), k
    with pytest.raises(ValueError, match="safetensors"):
        bytes_to_tensors(b"definitely not safetensors")


def test_the_one_allocation_writer_reads_back_as_safetensors_own_file():
    """store.codec.safetensors_bytes against safetensors.torch.save, the reference: the same bytes for every
    dtype it names (header, order, padding), read back by safetensors' own reader; others fall back to it."""
    from safetensors.torch import load, save

    from store.codec import SAFETENSORS_DTYPES, safetensors_bytes

    g = torch.Generator().manual_seed(0)
    tensors = {
        f"t_{name[6:]}": (torch.randn(3, 5, generator=g) * 50).to(getattr(torch, name[6:]))
        for name in SAFETENSORS_DTYPES
    }
    tensors |= {
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4, dtype=torch.int64),
        "odd": torch.ones(3, dtype=torch.uint8),
    }
    data = tensors_to_bytes(tensors)
    assert data == save(tensors)
    back = load(data)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t), k
    assert int.from_bytes(data[:8], "little") % 8 == 0  # the data start 8-aligned
    assert tensors_to_bytes({}) == save({})
    assert safetensors_bytes({"x": torch.ones(2, dtype=torch.float16)}) == save(
        {"x": torch.ones(2, dtype=torch.float16)}
    )
    f8 = {"f8": torch.zeros(4, dtype=torch.float8_e4m3fn)}  # a dtype it does not name: safetensors writes it
    assert tensors_to_bytes(f8) == save(f8)
    tied = torch.ones(4, dtype=torch.float8_e4m3fn)  # the fallback copies tensors that share memory
    back = bytes_to_tensors(tensors_to_bytes({"a": tied, "b": tied, "c": torch.arange(3.0)}))
    assert all(torch.equal(back[k].float(), tied.float()) for k in "ab") and torch.equal(back["c"], torch.arange(3.0))
    with pytest.raises(ValueError, match="contiguous"):
        safetensors_bytes({"t": torch.ones(3, 2).t()})


def test_json_payload_round_trip():
    obj = {"lr": 3e-4, "schedule": [1, 2, 3], "name": "rad", "nan": float("nan"), "none": None}
    back = from_json_bytes(json_bytes(obj))
    assert back.pop("nan") != back.get("nan", 0)  # NaN survives as NaN
    obj.pop("nan")
    assert back == obj
    with pytest.raises(ValueError, match="JSON"):
        from_json_bytes(b"\xff{")


def test_nested_state_round_trip_without_pickle():
    import random

    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}, 1: {}},
        "betas": (0.9, 0.999),
        "nested": [{"a": None, "b": True}, (1, "two", 3.5)],
        "__tuple__": "a key that looks like a marker",
        (1, 2): "tuple key",
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "np_scalar": np.float64(0.5),
        "python_rng": random.Random(7).getstate(),
        "torch_rng": torch.get_rng_state(),
    }
    tensors, tree = state_to_payload(state)
    assert set(tensors) >= {"state/0/step", "state/0/exp_avg", "array", "torch_rng"}
    back = payload_to_state(bytes_to_tensors(tensors_to_bytes(tensors)), from_json_bytes(json_bytes(tree)))
    assert back["betas"] == (0.9, 0.999) and isinstance(back["betas"], tuple)
    assert back["state"][1] == {} and torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert back["nested"] == [{"a": None, "b": True}, (1, "two", 3.5)]
    assert back["__tuple__"] == state["__tuple__"] and back[(1, 2)] == "tuple key"
    assert back["array"].dtype == np.int32 and np.array_equal(back["array"], state["array"])
    assert back["np_scalar"] == 0.5
    rng = random.Random()
    rng.setstate(back["python_rng"])
    assert rng.random() == random.Random(7).random()
    assert torch.equal(back["torch_rng"], state["torch_rng"])
    with pytest.raises(TypeError, match=r"at 'a/b'.*without pickle"):
        state_to_payload({"a": {"b": object()}})


def _make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_adam_state_round_trip_resumes_bit_identically(tmp_path):
    x, y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.randn(16, 2)

    def step(model, opt):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    model = _make_model(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.99), weight_decay=1e-3)
    for _ in range(3):
        step(model, opt)
    opt_tensors, opt_tree = optimizer_state_to_payload(opt.state_dict())
    rs = CheckpointStore(tmp_path).run("adam")
    version = rs.commit(
        {
            "policy.safetensors": tensors_to_bytes(model.state_dict()),
            "optimizer.safetensors": tensors_to_bytes(opt_tensors),
            "optimizer.json": json_bytes(opt_tree),
        },
        {"iteration": 3},
    )

    ckpt = rs.load(version)
    resumed = _make_model(123)  # different initial weights: everything must come from the checkpoint
    resumed.load_state_dict(bytes_to_tensors(ckpt.files["policy.safetensors"]))
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=0.5)  # wrong hyperparameters, on purpose
    resumed_opt.load_state_dict(
        optimizer_state_from_payload(
            bytes_to_tensors(ckpt.files["optimizer.safetensors"]), from_json_bytes(ckpt.files["optimizer.json"])
        )
    )
    group = resumed_opt.param_groups[0]
    assert group["lr"] == 1e-2 and group["betas"] == (0.8, 0.99) and isinstance(group["betas"], tuple)
    assert group["weight_decay"] == 1e-3
    for p, q in zip(model.parameters(), resumed.parameters()):
        a, b = opt.state[p], resumed_opt.state[q]
        assert torch.equal(a["step"], b["step"]) and b["step"].item() == 3
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    for _ in range(2):
        step(model, opt)
        step(resumed, resumed_opt)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(TypeError, match="optimizer"):
        optimizer_state_to_payload({"not": "an optimizer state"})


def test_json_safe_writes_what_strict_json_holds():
    import json
    import math

    import numpy as np

    from store import json_safe

    got = json_safe({1: (np.float32(0.5), float("nan")), "x": [np.int64(3), math.inf, {"y": np.float64("nan")}]})
    assert got == {"1": [0.5, None], "x": [3, None, {"y": None}]}
    assert type(got["x"][0]) is int
    json.dumps(got, allow_nan=False)  # would raise on a NaN or a numpy scalar left over
