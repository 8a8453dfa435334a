"""``scripts/gpu-check.sh`` on a machine without a GPU: its plumbing, so that it cannot rot unseen.

- A dry run on the CPU (``GPU_CHECK_BACKEND=cpu``, a small street, the packages already importable so no
  wheel is installed) runs every step and writes one JSON in which exactly the checks that need a GPU fail.
- The wheel step installs a missing package from a folder of wheels, with no index, onto the path of the
  later steps; without a wheel for it, that step fails and says which command fetches one.
- The script reaches no network: no download, no package index, no set-up that fetches.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu-check.sh"
STEPS = {"wheels", "environment", "compile", "prepare", "gpu_tests", "render_bench", "vector_env", "training"}
# what a machine without CUDA cannot pass; every other check must pass on it
NEEDS_A_GPU = {
    "cuda_available",
    "auto_resolves_to_gsplat",
    "gsplat_compiled",
    "gpu_tests_pass_none_skipped",
    "render_bench_on_gsplat",
    "vector_env_on_gsplat",
    "training_rendered_with_gsplat",
    "training_learner_on_cuda",
}


def run_check(tmp_path: Path, timeout: float, **settings: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "GPU_CHECK_PYTHON": sys.executable,
        "GPU_CHECK_OUT": str(out),
        "GPU_CHECK_CACHE": str(tmp_path / "cache"),
        "CUDA_VISIBLE_DEVICES": "",  # a CPU run even where a GPU is
        **settings,
    }
    env.pop("OUT", None)
    r = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    result = out / "gpu-check.json"
    assert result.is_file(), f"{SCRIPT.name} wrote no {result} (rc {r.returncode}):\n{r.stderr[-4000:]}"
    return r, json.loads(result.read_text())


@pytest.mark.slow
def test_the_cpu_dry_run_runs_every_step_and_fails_only_the_checks_that_need_a_gpu(tmp_path):
    r, res = run_check(
        tmp_path,
        timeout=400,
        GPU_CHECK_BACKEND="cpu",
        GPU_CHECK_GPUS_PER_LEARNER="0",
        GPU_CHECK_GAUSSIANS="20000",
        GPU_CHECK_ENVS="1 2",
        GPU_CHECK_VECTOR_ENVS="2",
        GPU_CHECK_TRAIN_ENVS="2",
        GPU_CHECK_BENCH_S="1",
        GPU_CHECK_PACKAGES="gymnasium numpy",  # importable here: the wheel step installs nothing
        GPU_CHECK_WHEELS=str(tmp_path / "no-wheels"),
    )
    log = r.stderr[-4000:]
    assert r.returncode == 1, log
    assert set(res["steps"]) == STEPS, log
    rcs = {name: s["rc"] for name, s in res["steps"].items()}
    assert all(isinstance(rc, int) for rc in rcs.values()), rcs
    # only the compile fails (no CUDA device); Ray (GPU_CHECK_ABSENT) was not needed by any step
    assert {name for name, rc in rcs.items() if rc != 0} == {"compile"}, (rcs, log)
    assert "no CUDA device" in "\n".join(res["steps"]["compile"]["log_tail"])
    assert all(s["seconds"] <= s["limit_s"] + 10 for s in res["steps"].values()), res["steps"]
    assert "ray" in res["settings"]["gpu_check_absent"].split()

    assert res["wheels"]["skipped"] and res["wheels"]["installed"] == [], res["wheels"]
    assert res["environment"]["cuda_available"] is False
    assert res["environment"]["auto"]["used"] == "cpu"
    assert res["compile"] is None

    tests = res["gpu_tests"]  # read back from the junit xml: here every gpu test is skipped
    assert tests["passed"] == [] and tests["failed"] == []
    assert any("test_gsplat_matches_reference" in t for t in tests["skipped"]), tests
    assert any("test_gsplat_batched_scenes_match_the_reference" in t for t in tests["skipped"]), tests

    bench = res["render_bench"]
    assert bench["backend"] == {"requested": "cpu", "used": "cpu"}
    assert (bench["width"], bench["height"], bench["cameras_per_rig"]) == (256, 128, 3)
    assert [c["envs"] for c in bench["cases"]] == [1, 2]
    for c in bench["cases"]:
        assert c["cameras_per_call"] == 3 * c["envs"] and c["calls"] >= 5, c
        assert c["ms_per_call"] > 0 and c["rig_frames_per_s"] > 0, c
        assert c["camera_frames_per_s"] == pytest.approx(3 * c["rig_frames_per_s"], rel=0.01), c
    assert bench["psnr_vs_cpu_db"]["rgb"] >= 100  # the cpu renderer against itself

    vec = res["vector_env"]
    assert vec["backend"]["used"] == "cpu" and vec["cameras"] is True
    assert [c["num_envs"] for c in vec["cases"]] == [2] and vec["cases"][0]["env_steps_per_s"] > 0

    train = res["training"]
    assert train["render"]["driver"] == {"requested": "cpu", "used": "cpu"}
    assert [a["used"] for a in train["render"]["rollout_actors"]] == ["cpu"]
    assert train["learners"]["device"] == "cpu" and train["learners"]["num_learners"] == 1
    assert len(train["sps"]) == 3 and all(s > 0 for s in train["sps"]), train
    assert train["checkpoints"], train

    assert res["ok"] is False
    assert set(res["failed_checks"]) == NEEDS_A_GPU, res["checks"]
    assert all(v for k, v in res["checks"].items() if k not in NEEDS_A_GPU), res["checks"]
    assert res["figures"]["camera_frames_per_s"] == {
        "1": bench["cases"][0]["camera_frames_per_s"],
        "2": bench["cases"][1]["camera_frames_per_s"],
    }
    assert (tmp_path / "out" / "gpu-check-logs.tar.gz").is_file()


def probe_wheel(folder: Path) -> Path:
    """A one-module wheel, ``gpucheckprobe`` 0.1, made here (nothing is fetched)."""
    folder.mkdir(parents=True)
    path = folder / "gpucheckprobe-0.1-py3-none-any.whl"
    info = "gpucheckprobe-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("gpucheckprobe/__init__.py", '__version__ = "0.1"\n')
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: gpucheckprobe\nVersion: 0.1\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        files = ["gpucheckprobe/__init__.py", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"]
        z.writestr(f"{info}/RECORD", "".join(f"{f},,\n" for f in files))
    return path


def test_the_wheel_step_installs_what_is_missing_onto_the_path_of_the_later_steps(tmp_path):
    wheel = probe_wheel(tmp_path / "wheels")
    r, res = run_check(
        tmp_path,
        timeout=180,
        GPU_CHECK_STEPS="wheels environment",
        GPU_CHECK_PACKAGES="gpucheckprobe gymnasium",
        GPU_CHECK_WHEELS=str(wheel.parent),
    )
    assert set(res["steps"]) == {"wheels", "environment"}, r.stderr[-3000:]
    assert res["steps"]["wheels"]["rc"] == 0 and res["steps"]["environment"]["rc"] == 0, res["steps"]
    assert res["wheels"]["missing"] == ["gpucheckprobe"] and res["wheels"]["installed"] == [wheel.name]
    probe = res["environment"]["packages"]["gpucheckprobe"]
    assert probe["version"] == "0.1"
    assert Path(probe["path"]).parent == Path(res["work"]) / "site", probe  # found in the run's own site folder
    assert res["checks"]["wheels"] and not res["ok"]  # the steps that were not run count as failed


def test_without_a_wheel_for_a_missing_package_the_wheel_step_fails_and_names_the_fetch_command(tmp_path):
    (tmp_path / "wheels").mkdir()
    r, res = run_check(
        tmp_path,
        timeout=120,
        GPU_CHECK_STEPS="wheels",
        GPU_CHECK_PACKAGES="gpucheckprobe",
        GPU_CHECK_WHEELS=str(tmp_path / "wheels"),
    )
    assert r.returncode == 1
    assert res["steps"]["wheels"]["rc"] != 0 and res["failed_checks"][0] == "wheels", res
    tail = "\n".join(res["steps"]["wheels"]["log_tail"])
    assert "gpucheckprobe not importable" in tail and "scripts/gpu-wheels.sh" in tail, tail


def test_steps_the_budget_no_longer_covers_are_recorded_as_not_run(tmp_path):
    r, res = run_check(tmp_path, timeout=60, GPU_CHECK_STEPS="wheels environment", GPU_CHECK_BUDGET_S="10")
    assert r.returncode == 1
    assert set(res["steps"]) == {"wheels", "environment"}
    for s in res["steps"].values():
        assert s["rc"] == 124 and "GPU_CHECK_BUDGET_S=10" in s["note"], s
    assert {"wheels", "environment"} <= set(res["failed_checks"])


def logical_lines(text: str) -> list[str]:
    """The script's lines with backslash continuations joined."""
    return text.replace("\\\n", " ").splitlines()


NETWORK = [
    (re.compile(r"\bpip3?\b.*\bdownload\b"), "pip download"),
    (re.compile(r"\bcurl\b|\bwget\b"), "curl or wget"),
    (re.compile(r"dev setup"), "./dev setup (it installs from an index)"),
    (re.compile(r"index-url|find-links|\bgit clone\b"), "a package index or a clone"),
    (re.compile(r"https?://|\burllib\b|\brequests\b"), "a URL or an HTTP client"),
]


def network_steps(text: str) -> list[str]:
    found = []
    for n, line in enumerate(logical_lines(text), 1):
        for pattern, what in NETWORK:
            if pattern.search(line):
                found.append(f"line {n}: {what}: {line.strip()}")
        if re.search(r"\bpip3?\b", line) and re.search(r"\binstall\b", line) and "--no-index" not in line:
            found.append(f"line {n}: pip install without --no-index: {line.strip()}")
    return found


def test_the_gpu_check_reaches_no_network():
    assert network_steps(SCRIPT.read_text()) == []


@pytest.mark.parametrize(
    "line",
    [
        "step setup 420 env SPLATDRIVE_GPU=1 ./dev setup",
        '"$PY" -m pip download --no-deps -d .whl gsplat==1.5.3',
        '"$PY" -m pip install \\\n  gsplat',
        "curl -LO https://example.org/x.whl",
        'pip = [sys.executable, "-m", "pip", "install", "--target", site]',
    ],
)
def test_the_network_grep_finds_a_download(line):
    assert network_steps(f"#!/usr/bin/env bash\n{line}\n") != []
