"""No silent fallback: 'gsplat' raises saying why, 'auto' warns once when it leaves an expected GPU,
and ``backend_report`` says what a request renders with (what runs record in their provenance)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch

import sim
import sim.rendering as rendering
from sim.camera import make_rig
from sim.frames import pose_matrix
from sim.rendering import BackendUnavailable, GsplatStatus, gsplat_status_of
from tests.sim.test_render import PARITY_DB, posed_asset_composite, psnr, random_cloud


def _imports_fine():
    return None


def _not_installed():
    raise ModuleNotFoundError("No module named 'gsplat'")


def _broken():
    raise OSError("libcudart.so.12: cannot open shared object file")


@pytest.mark.parametrize(
    "facts, usable, expected, words",
    [
        # (cuda visible, torch CUDA version, NVIDIA driver, CUDA_VISIBLE_DEVICES, import)
        ((False, None, False, None, _imports_fine), False, False, ["CPU build", "no NVIDIA driver"]),
        ((False, None, True, None, _imports_fine), False, True, ["CPU build"]),  # a GPU box, CPU torch
        ((False, "12.4", True, "", _imports_fine), False, False, ["CUDA_VISIBLE_DEVICES=''"]),  # hidden on purpose
        ((False, "12.4", True, "-1", _imports_fine), False, False, ["CUDA_VISIBLE_DEVICES='-1'"]),
        ((False, "12.4", True, None, _imports_fine), False, True, ["no usable CUDA device"]),  # driver mismatch
        ((True, "12.4", True, "0", _not_installed), False, True, ["not installed", "SPLATDRIVE_GPU=1"]),
        ((True, "12.4", True, None, _broken), False, True, ["importing gsplat failed", "OSError", "libcudart"]),
        ((True, "12.4", True, None, _imports_fine), True, True, []),
    ],
)
def test_gsplat_status_decides_from_the_facts(facts, usable, expected, words):
    st = gsplat_status_of(*facts)
    assert st.usable is usable
    assert st.gpu_expected is expected
    for w in words:
        assert w in st.reason, (w, st.reason)


@pytest.fixture
def status(monkeypatch):
    """Pretend this process has a given GsplatStatus; the once-per-process announcement is reset."""

    def set_status(st: GsplatStatus):
        monkeypatch.setattr(rendering, "gsplat_status", lambda: st)
        monkeypatch.setattr(rendering, "_fallback_announced", False)

    return set_status


NOT_INSTALLED = GsplatStatus(False, "the gsplat package is not installed (No module named 'gsplat')", True)
NO_GPU_HERE = GsplatStatus(False, "torch 2.13.0+cpu is a CPU build (no CUDA); this machine has no NVIDIA driver", False)


def test_gsplat_never_falls_back_and_says_why(status):
    status(NOT_INSTALLED)
    with pytest.raises(BackendUnavailable, match="cannot run here: the gsplat package is not installed"):
        rendering.resolve_backend("gsplat")
    cloud = random_cloud(10, 0)
    rig = make_rig("front3", 32, 16)
    with pytest.raises(BackendUnavailable, match="never falls back"):
        sim.render(cloud, rig.viewmats(pose_matrix(0, 0, 0, 0)), rig.Ks(), 32, 16, backend="gsplat")


def test_gsplat_on_this_machine_names_the_missing_cuda():
    if rendering.gsplat_available():
        pytest.skip("gsplat is usable here")
    with pytest.raises(BackendUnavailable, match="CUDA"):
        rendering.resolve_backend("gsplat")


def test_auto_warns_once_loudly_when_it_falls_back_from_an_expected_gpu(status, caplog):
    status(NOT_INSTALLED)
    with caplog.at_level(logging.WARNING, logger="sim.rendering"):
        with warnings.catch_warnings(record=True) as first:
            warnings.simplefilter("always")
            assert rendering.resolve_backend("auto") == "cpu"
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            assert rendering.resolve_backend("auto") == "cpu"
    assert len(first) == 1 and issubclass(first[0].category, RuntimeWarning)
    assert "FALLS BACK TO THE CPU" in str(first[0].message) and "not installed" in str(first[0].message)
    assert again == []  # once per process
    logged = [r for r in caplog.records if r.levelno == logging.WARNING and "FALLS BACK" in r.getMessage()]
    assert len(logged) == 1
    rep = rendering.backend_report("auto")
    assert rep == dict(requested="auto", used="cpu", reason=NOT_INSTALLED.reason, fallback=True)


def test_auto_without_a_gpu_is_the_cpu_by_design_logged_not_warned(status, caplog):
    status(NO_GPU_HERE)
    with caplog.at_level(logging.INFO, logger="sim.rendering"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert rendering.resolve_backend("auto") == "cpu"
    assert seen == []
    assert any("renders on the CPU" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    assert rendering.backend_report("auto")["fallback"] is False


def test_auto_fallback_renders_what_cpu_renders(status):
    status(NOT_INSTALLED)
    cloud = random_cloud(300, 1)
    rig = make_rig("front3", 32, 16)
    vm = rig.viewmats(pose_matrix(0, 0, 0, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sim.render(cloud, vm, rig.Ks(), 32, 16, backend="auto")
    b = sim.render(cloud, vm, rig.Ks(), 32, 16, backend="cpu")
    assert torch.equal(a.rgb, b.rgb) and float(a.alpha.max()) > 0.1


def test_explicit_backends_report_themselves():
    assert rendering.backend_report("cpu") == dict(requested="cpu", used="cpu")
    assert rendering.backend_report("reference") == dict(requested="reference", used="reference")
    with pytest.raises(ValueError, match="unknown backend"):
        rendering.backend_report("vulkan")


# -- on a GPU: gsplat renders every camera of every scene in one call, as the reference does ---------


@pytest.mark.gpu
def test_gsplat_batched_scenes_match_the_reference():
    """S scenes x C cameras in one gsplat call (scenes of different sizes: padding must not draw)."""
    rig = make_rig("front3", 128, 64)
    scenes = [random_cloud(3000, 31, degree=1), posed_asset_composite(offset_y=0.5), random_cloud(500, 32)]
    poses = np.stack([pose_matrix(-5.0, 0.3, 0.0, 0.05), pose_matrix(-3.0, 0.0, 0.0, 0.0), pose_matrix(0, 1, 0, 0.2)])
    vms = rig.viewmats(poses)  # [S, C, 4, 4]
    out = sim.render(scenes, vms, rig.Ks(), 128, 64, backend="gsplat")
    assert out.rgb.shape == (3, 3, 64, 128, 3) and out.rgb.is_cuda
    for i, sc in enumerate(scenes):
        cloud = sc.to_cloud() if hasattr(sc, "to_cloud") else sc
        ref = sim.render(cloud, vms[i], rig.Ks(), 128, 64, backend="reference")
        assert psnr(out.rgb[i].cpu(), ref.rgb) >= PARITY_DB
        assert psnr(out.alpha[i].cpu(), ref.alpha) >= PARITY_DB
