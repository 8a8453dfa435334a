#!/usr/bin/env bash
# scripts/gpu-check.sh: the GPU proof, on a GPU node as it is (no network, no venv: its own python3 with torch).
#
#   scripts/gpu-wheels.sh   # beforehand, on a machine with a network: the wheels the node lacks -> .gpu-wheels/
#   scripts/gpu-check.sh    # on the GPU node, in a copy of the checkout that includes .gpu-wheels/
#
# Steps, each with its own time limit inside one budget (GPU_CHECK_BUDGET_S, 540 s: the whole run ends in
# under ten minutes, the kernel compile included); a failing step is recorded and the others still run:
#  wheels        GPU_CHECK_PACKAGES (gsplat, gymnasium) that the interpreter cannot import are installed from
#                the wheels folder into <work>/site with pip and no index, and put on PYTHONPATH; nothing
#                is installed when all import (a machine with a full environment)
#  environment   python, torch, CUDA, the GPU, nvcc, ninja, the packages and where they come from, gsplat's
#                status and what render_backend='auto' resolves to (must be gsplat)
#  compile       gsplat's CUDA kernels, once, with MAX_JOBS = every core and TORCH_CUDA_ARCH_LIST = the GPU's
#                compute capability, into TORCH_EXTENSIONS_DIR (<cache>/torch_extensions: a rerun reuses
#                it); its seconds are reported. Meanwhile, on the CPU:
#  prepare       a small generated suite (GPU_CHECK_SUITE_COUNT scenarios) and the numba kernels compiled
#  gpu_tests     pytest -m gpu on the test files that have such tests: gsplat against the reference renderer
#                (>= 45 dB PSNR), S scenes x C cameras in one call; none may be skipped (junit xml read back)
#  render_bench  B environments x the front3 rig (3 cameras) at 256x128 on a GPU_CHECK_GAUSSIANS street in
#                ONE sim.render call, B in GPU_CHECK_ENVS: ms per call, camera- and rig-frames/s, peak GPU
#                memory; PSNR against the cpu renderer at B = 1
#  vector_env    the vector env on the suite with the backend, cameras on (the scenarios' front3 at 128x64):
#                env-steps/s for each N in GPU_CHECK_VECTOR_ENVS
#  training      a short in-process run (rollout.num_actors=0, no Ray; 2 IL and 3 RL iterations),
#                env.render_backend=GPU_CHECK_BACKEND, gpus_per_learner=GPU_CHECK_GPUS_PER_LEARNER; the
#                backends are read back from its run.json
# Steps that need gsplat are not run when its kernels failed to compile on a GPU (each would compile again).
# Every Python step runs with the packages in GPU_CHECK_ABSENT made unimportable (what the node lacks: a step
# that needs one fails here too). Writes gpu-check.json (ok, failed_checks, checks, per-step rc, seconds,
# limit_s and the end of a failed step's log, and the figures) and gpu-check-logs.tar.gz to GPU_CHECK_OUT;
# exits 0 only if every check passed. No step downloads anything.
#
# Knobs (defaults in brackets):
#   GPU_CHECK_PYTHON [python3]         the interpreter (the node's, with torch)
#   GPU_CHECK_OUT [$OUT, else ./]      where the JSON and the logs go
#   GPU_CHECK_CACHE [.cache/gpu-check] the run folders (<cache>/run.*) and the compiled kernels
#   GPU_CHECK_WHEELS [.gpu-wheels]     the wheels folder (scripts/gpu-wheels.sh)
#   GPU_CHECK_PACKAGES [gsplat gymnasium]  import names the run needs beyond the node's own
#   GPU_CHECK_ABSENT [ray boto3 botocore moto mlflow]
#   GPU_CHECK_BACKEND [gsplat]         render backend of the bench, the vector env and the training run
#   GPU_CHECK_GAUSSIANS [300000]  GPU_CHECK_ENVS [1 4 16 64]  GPU_CHECK_VECTOR_ENVS [8 64]
#   GPU_CHECK_GPUS_PER_LEARNER [1]  GPU_CHECK_TRAIN_ENVS [8]: the training run's envs
#   GPU_CHECK_SUITE_COUNT [2]  GPU_CHECK_BENCH_S [2]: seconds timed per bench case
#   GPU_CHECK_BUDGET_S [540]  GPU_CHECK_STEPS [all]: the steps to run, e.g. "wheels environment gpu_tests"
# A dry run on a machine without a GPU (tests/test_gpu_check.py runs one; the checks that need the GPU fail):
#   GPU_CHECK_PYTHON=.venv/bin/python GPU_CHECK_BACKEND=cpu GPU_CHECK_GPUS_PER_LEARNER=0 \
#   GPU_CHECK_GAUSSIANS=20000 GPU_CHECK_ENVS="1 2" GPU_CHECK_VECTOR_ENVS="2" GPU_CHECK_TRAIN_ENVS=2 \
#   scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=$(command -v "${GPU_CHECK_PYTHON:-python3}") || {
  echo "[gpu-check] no interpreter ${GPU_CHECK_PYTHON:-python3} (GPU_CHECK_PYTHON)" >&2
  exit 2
}
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" # absolute, links kept (a venv's python is one)
RESULT_DIR=${GPU_CHECK_OUT:-${OUT:-$ROOT}}
CACHE=${GPU_CHECK_CACHE:-$ROOT/.cache/gpu-check}
mkdir -p "$CACHE" "$RESULT_DIR"
WORK=$(mktemp -d "$CACHE/run.XXXXXX")
BIN="$WORK/bin" PARTS="$WORK/parts"
mkdir -p "$BIN" "$PARTS"
export GPU_CHECK_WORK="$WORK" GPU_CHECK_PARTS="$PARTS" GPU_CHECK_SITE="$WORK/site" GPU_CHECK_SUITE="$WORK/suite"
export GPU_CHECK_WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.gpu-wheels}
export GPU_CHECK_PACKAGES=${GPU_CHECK_PACKAGES:-gsplat gymnasium}
export GPU_CHECK_ABSENT=${GPU_CHECK_ABSENT:-ray boto3 botocore moto mlflow}
export GPU_CHECK_BACKEND=${GPU_CHECK_BACKEND:-gsplat}
export GPU_CHECK_GAUSSIANS=${GPU_CHECK_GAUSSIANS:-300000}
export GPU_CHECK_ENVS=${GPU_CHECK_ENVS:-1 4 16 64}
export GPU_CHECK_VECTOR_ENVS=${GPU_CHECK_VECTOR_ENVS:-8 64}
export GPU_CHECK_GPUS_PER_LEARNER=${GPU_CHECK_GPUS_PER_LEARNER:-1}
export GPU_CHECK_TRAIN_ENVS=${GPU_CHECK_TRAIN_ENVS:-8}
export GPU_CHECK_SUITE_COUNT=${GPU_CHECK_SUITE_COUNT:-2}
export GPU_CHECK_BENCH_S=${GPU_CHECK_BENCH_S:-2}
export GPU_CHECK_BUDGET_S=${GPU_CHECK_BUDGET_S:-540}
export GPU_CHECK_STEPS=${GPU_CHECK_STEPS:-all}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$CACHE/torch_extensions}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$ROOT/.cache/numba}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export PATH="$(dirname "$PY"):$PATH" # the interpreter's own bin (ninja, which torch's extension builder runs)
T0=$(date +%s)

say() { echo "[gpu-check $(($(date +%s) - T0))s] $*" >&2; }

wanted() { [ "$GPU_CHECK_STEPS" = all ] || [[ " $GPU_CHECK_STEPS " == *" $1 "* ]]; }

# record NAME RC SECONDS LIMIT [NOTE]: the step's line in the JSON
record() {
  printf '{"rc": %d, "seconds": %d, "limit_s": %d, "log": "%s", "note": "%s"}\n' "$2" "$3" "$4" "$WORK/$1.log" \
    "${5:-}" >"$PARTS/$1.step.json"
}

# step NAME LIMIT_S command...: run it (output in $WORK/NAME.log) within its limit and what is left of the budget
step() {
  local name=$1 limit=$2 t rc left
  shift 2
  wanted "$name" || return 0
  left=$((GPU_CHECK_BUDGET_S - ($(date +%s) - T0)))
  if [ "$left" -lt 15 ]; then
    say "$name not run: the budget of ${GPU_CHECK_BUDGET_S}s is spent"
    record "$name" 124 0 0 "not run: the budget (GPU_CHECK_BUDGET_S=$GPU_CHECK_BUDGET_S) was spent"
    return 0
  fi
  [ "$limit" -le "$left" ] || limit=$left
  say "$name (limit ${limit}s)"
  t=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  record "$name" "$rc" "$(($(date +%s) - t))" "$limit" "$( ((rc == 124 || rc == 137)) && echo "stopped at its time limit")"
  if [ "$rc" != 0 ]; then
    say "$name FAILED (rc $rc); the end of $WORK/$name.log:"
    tail -n 15 "$WORK/$name.log" >&2
  fi
  return 0
}

# not_run NAME WHY: a step that cannot run (what it needs failed), recorded as failed
not_run() {
  wanted "$1" || return 0
  say "$1 not run: $2"
  record "$1" 125 0 0 "not run: $2"
}

# -- the Python of the steps ------------------------------------------------------------------------------
# run.py: runs a module (-m NAME ARGS) or a file (FILE ARGS) as __main__, the GPU_CHECK_ABSENT packages unimportable
cat >"$BIN/run.py" <<'EOF'
import importlib.abc
import os
import runpy
import sys

ABSENT = set(os.environ.get("GPU_CHECK_ABSENT", "").replace(",", " ").split())


class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r} (GPU_CHECK_ABSENT: the GPU node has none)", name=name)
        return None


sys.meta_path.insert(0, Absent())
sys.path[0] = os.getcwd()  # as with python -m: the checkout first, never this folder
args = sys.argv[1:]
if args[0] == "-m":
    sys.argv = args[1:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
EOF

cat >"$BIN/wheels.py" <<'EOF'
"""GPU_CHECK_PACKAGES importable: wheels of the missing ones go from GPU_CHECK_WHEELS into GPU_CHECK_SITE (no index)."""
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

need = os.environ["GPU_CHECK_PACKAGES"].split()
folder, site = Path(os.environ["GPU_CHECK_WHEELS"]), Path(os.environ["GPU_CHECK_SITE"])


def importable(name):
    return importlib.util.find_spec(name) is not None


def top_level(wheel):  # the import names a wheel provides: its top-level folders and modules
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    return {n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data"))}


missing = [n for n in need if not importable(n)]
res = dict(packages=need, missing=missing, wheels=str(folder), installed=[], skipped=not missing)
if missing:
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    have = set().union(*(top_level(w) for w in wheels)) if wheels else set()
    if set(missing) - have:
        raise SystemExit(
            f"wheels: {', '.join(sorted(set(missing) - have))} not importable by {sys.executable} and no wheel of it "
            f"in {folder}: run scripts/gpu-wheels.sh on a machine with a network and bring {folder} along"
        )
    chosen = [w for w in wheels if not all(importable(n) for n in top_level(w))]
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(site), *map(str, chosen)]
    pip += ["--quiet", "--no-compile", "--no-cache-dir", "--disable-pip-version-check"]
    print(" ".join(pip), flush=True)
    subprocess.run(pip, check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})  # no config: no index, no links
    res["installed"] = [w.name for w in chosen]
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    probe = "import importlib, sys; [importlib.import_module(n) for n in sys.argv[1:]]"
    subprocess.run([sys.executable, "-c", probe, *need], check=True, env={**os.environ, "PYTHONPATH": path})
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "wheels.json"), "w"), indent=2)
print(json.dumps(res))
EOF

cat >"$BIN/environment.py" <<'EOF'
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys

import torch
import torch.utils.cpp_extension

from sim.rendering import backend_report, gsplat_status


def package(name):
    try:
        m = importlib.import_module(name)
        return dict(version=getattr(m, "__version__", None), path=os.path.dirname(m.__file__))
    except Exception as e:
        return dict(error=f"not importable: {type(e).__name__}: {e}")


def command(*cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip()
    except Exception as e:
        return f"unavailable: {type(e).__name__}: {e}"


cuda = torch.cuda.is_available()
st = gsplat_status()
out = dict(
    python=sys.executable, python_version=platform.python_version(), machine=platform.machine(), cpus=os.cpu_count(),
    torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=cuda,
    devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    compute_capability=".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    cuda_home=torch.utils.cpp_extension.CUDA_HOME, nvcc=command("nvcc", "--version").splitlines()[-1:],
    ninja=shutil.which("ninja"), max_jobs=os.environ.get("MAX_JOBS"),
    torch_extensions_dir=os.environ.get("TORCH_EXTENSIONS_DIR"),
    packages={n: package(n) for n in sorted({*os.environ["GPU_CHECK_PACKAGES"].split(), "numpy", "numba"})},
    gsplat_status=dict(usable=st.usable, reason=st.reason), auto=backend_report("auto"),
    nvidia_smi=command("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"),
)
if cuda:  # the architecture gsplat's kernels are compiled for (the shell exports it as TORCH_CUDA_ARCH_LIST)
    out["torch_cuda_arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or out["compute_capability"]
    open(os.path.join(os.environ["GPU_CHECK_WORK"], "cuda_arch"), "w").write(out["torch_cuda_arch_list"])
json.dump(out, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "environment.json"), "w"), indent=2)
print(json.dumps(out, indent=2))
EOF

cat >"$BIN/compile.py" <<'EOF'
import glob
import json
import os
import time

import torch

if not torch.cuda.is_available():
    raise SystemExit("compile: torch sees no CUDA device; gsplat's kernels are compiled for the GPU found")
build = os.environ["TORCH_EXTENSIONS_DIR"]
cached = bool(glob.glob(os.path.join(build, "**", "gsplat_cuda*.so"), recursive=True))
print(f"compile: MAX_JOBS={os.environ['MAX_JOBS']} TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST')} "
      f"into {build} ({'a build is there' if cached else 'from scratch'})", flush=True)
t = time.perf_counter()
from gsplat.cuda._backend import _C  # noqa: E402  (compiles on import where no build is there)

seconds = time.perf_counter() - t
if _C is None:
    raise SystemExit("compile: gsplat found no CUDA toolkit (nvcc, CUDA_HOME) and compiled nothing")
import numpy as np  # noqa: E402

import sim  # noqa: E402
from sim.camera import make_rig  # noqa: E402
from sim.frames import pose_matrix  # noqa: E402
from sim.gaussians import GaussianCloud  # noqa: E402

rng = np.random.default_rng(0)
n = 1000
cloud = GaussianCloud.create(rng.uniform((2, -5, 0), (30, 5, 4), (n, 3)), rng.normal(size=(n, 4)),
                             np.exp(rng.uniform(-3, -1, (n, 3))), rng.uniform(0.1, 0.9, n), rng.uniform(0, 1, (n, 3)))
rig = make_rig("front3", 64, 32)
t = time.perf_counter()
out = sim.render(cloud, rig.viewmats(pose_matrix(0, 0, 0, 0)), rig.Ks(), 64, 32, backend="gsplat")
first = time.perf_counter() - t
assert out.rgb.is_cuda and bool(torch.isfinite(out.rgb).all()) and float(out.alpha.max()) > 0, "compile: a blank render"
res = dict(seconds=round(seconds, 1), cached=cached, max_jobs=int(os.environ["MAX_JOBS"]),
           torch_cuda_arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST"), build_dir=build, first_render_s=round(first, 3))
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "compile.json"), "w"), indent=2)
print(res)
EOF

cat >"$BIN/prepare.py" <<'EOF'
import os

from envs.vector import VectorDrivingEnv
from scenarios.generate import main as generate

suite = os.environ["GPU_CHECK_SUITE"]
count = os.environ["GPU_CHECK_SUITE_COUNT"]
rc = generate(["--suite", "gpu-check", "--count", count, "--seed", "0", "--out", suite, "-q"])
assert not rc, f"prepare: scenarios.generate returned {rc}"
# numba compiles the env's and the cpu renderer's kernels into NUMBA_CACHE_DIR here, not in the timed steps
venv = VectorDrivingEnv(suite, 2, dict(render_backend="cpu"))
infos = venv.reset(seed=0)[1]
for _ in range(3):
    infos = venv.step(infos["expert_action"])[4]
venv.close()
print(f"prepare: suite {suite}, the numba kernels compiled")
EOF

cat >"$BIN/render_bench.py" <<'EOF'
import json
import math
import os
import time

import numpy as np
import torch

import sim
from sim.camera import make_rig
from sim.frames import pose_matrix
from sim.procedural import demo_scene
from sim.rendering import backend_report

backend = os.environ["GPU_CHECK_BACKEND"]
W, H = 256, 128
t = time.perf_counter()
scene = demo_scene(seed=0, target_gaussians=int(os.environ["GPU_CHECK_GAUSSIANS"]), kind="straight")
rig = make_rig("front3", W, H)
Ks = rig.Ks()
C = len(rig)
res = dict(backend=backend_report(backend), width=W, height=H, cameras_per_rig=C,
           background_gaussians=len(scene.background), scene_s=round(time.perf_counter() - t, 2), cases=[])
cuda = torch.cuda.is_available()
sync = torch.cuda.synchronize if cuda else (lambda: None)
seconds = float(os.environ["GPU_CHECK_BENCH_S"])


def poses(B, t0):
    i = np.arange(B) * 7 + t0  # B environments at different places along the street
    return pose_matrix(1.0 * i % 60.0, -1.75 + 0.3 * np.sin(0.2 * i), 0.0 * i, 0.03 * np.sin(0.1 * i))


def psnr(a, b):
    mse = float(((a.float() - b.float()) ** 2).mean())
    return 120.0 if mse < 1e-12 else -10.0 * math.log10(mse)


for B in map(int, os.environ["GPU_CHECK_ENVS"].split()):
    comps = [scene.compose(5 + b) for b in range(B)]
    for k in range(2):  # warm-up: first-call costs stay out of the figures
        sim.render(comps, rig.viewmats(poses(B, k)), Ks, W, H, backend=backend, far_plane=200.0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync()
    calls, t = 0, time.perf_counter()
    while calls < 5 or time.perf_counter() - t < seconds:
        out = sim.render(comps, rig.viewmats(poses(B, calls)), Ks, W, H, backend=backend, far_plane=200.0)
        calls += 1
    sync()
    dt = time.perf_counter() - t
    assert out.rgb.shape == (B, C, H, W, 3), out.rgb.shape
    case = dict(envs=B, cameras_per_call=B * C, calls=calls, ms_per_call=round(1e3 * dt / calls, 2),
                rig_frames_per_s=round(B * calls / dt, 1), camera_frames_per_s=round(B * C * calls / dt, 1))
    if cuda:
        case["peak_gpu_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    res["cases"].append(case)
    print(case, flush=True)

# agreement with the cpu renderer on the bench scene at B = 1 (information: the gpu tests hold the backends to
# the reference on smaller scenes)
comp, vm = scene.compose(5), rig.viewmats(poses(1, 0))[0]
a = sim.render(comp, vm, Ks, W, H, backend=backend, far_plane=200.0)
b = sim.render(comp, vm, Ks, W, H, backend="cpu", far_plane=200.0)
res["psnr_vs_cpu_db"] = dict(rgb=round(psnr(a.rgb.cpu(), b.rgb), 2), alpha=round(psnr(a.alpha.cpu(), b.alpha), 2))
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "render_bench.json"), "w"), indent=2)
print(json.dumps(res["psnr_vs_cpu_db"]))
EOF

cat >"$BIN/vector_env.py" <<'EOF'
import json
import os
import time

import torch

from envs.bench import vector_stepper
from sim.rendering import backend_report

backend = os.environ["GPU_CHECK_BACKEND"]
suite = os.environ["GPU_CHECK_SUITE"]
seconds = float(os.environ["GPU_CHECK_BENCH_S"])
sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
res = dict(backend=backend_report(backend), suite=suite, cameras=True, cases=[])
for n in map(int, os.environ["GPU_CHECK_VECTOR_ENVS"].split()):
    step, per_step = vector_stepper(suite, dict(render_backend=backend, cameras=True), n)  # warmed
    sync()
    steps, t = 0, time.perf_counter()
    while steps < 5 or time.perf_counter() - t < seconds:
        step()
        steps += 1
    sync()
    dt = time.perf_counter() - t
    case = dict(num_envs=n, vector_steps=steps, env_steps_per_s=round(steps * per_step / dt, 1),
                ms_per_vector_step=round(1e3 * dt / steps, 2))
    res["cases"].append(case)
    print(case, flush=True)
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "vector_env.json"), "w"), indent=2)
EOF

cat >"$BIN/summary.py" <<'EOF'
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

parts, work = Path(os.environ["GPU_CHECK_PARTS"]), Path(os.environ["GPU_CHECK_WORK"])
backend = os.environ["GPU_CHECK_BACKEND"]
ENVS = [int(b) for b in os.environ["GPU_CHECK_ENVS"].split()]
VECTOR_ENVS = [int(n) for n in os.environ["GPU_CHECK_VECTOR_ENVS"].split()]


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


steps = {}
for f in sorted(parts.glob("*.step.json"), key=lambda p: p.stat().st_mtime):
    s = load(f) or {"rc": -1, "note": f"unreadable {f}"}
    if s.get("rc") != 0 and Path(s.get("log", "")).is_file():
        s["log_tail"] = Path(s["log"]).read_text(errors="replace").splitlines()[-40:]
    steps[f.name.removesuffix(".step.json")] = s
settings = {k.lower(): v for k, v in os.environ.items() if k.startswith("GPU_CHECK_") and k not in (
    "GPU_CHECK_WORK", "GPU_CHECK_PARTS", "GPU_CHECK_SITE", "GPU_CHECK_SUITE", "GPU_CHECK_SECONDS", "GPU_CHECK_RESULT")}
settings.update(max_jobs=os.environ.get("MAX_JOBS"), torch_cuda_arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST"))
res = {"seconds": int(os.environ["GPU_CHECK_SECONDS"]), "work": str(work), "settings": settings, "steps": steps}
for name in ("wheels", "environment", "compile", "render_bench", "vector_env"):
    res[name] = load(parts / f"{name}.json")

tests = None
if (work / "gpu-tests.xml").exists():
    tests = dict(passed=[], failed=[], skipped=[])
    for c in ET.parse(work / "gpu-tests.xml").getroot().iter("testcase"):
        name = f"{c.get('classname')}::{c.get('name')}"
        if c.find("failure") is not None or c.find("error") is not None:
            tests["failed"].append(name)
        elif c.find("skipped") is not None:
            tests["skipped"].append(name)
        else:
            tests["passed"].append(name)
res["gpu_tests"] = tests

train = None
run = work / "runs" / "gpu-check"
prov = load(run / "run.json")
if prov is not None:
    rows = []
    if (run / "metrics.jsonl").exists():
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    store = work / "store" / "gpu-check"
    train = dict(render=prov.get("render"), learners=prov.get("learners"),
                 sps=[r["charts/SPS"] for r in rows if "charts/SPS" in r],
                 checkpoints=sorted(p.name for p in store.glob("*")) if store.exists() else [])
res["training"] = train


def ran(name):
    return steps.get(name, {}).get("rc") == 0


env, bench, vec = res["environment"] or {}, res["render_bench"] or {}, res["vector_env"] or {}
render = (train or {}).get("render") or {}
renderers = [render.get("driver") or {}, *(render.get("rollout_actors") or [])]
cases = bench.get("cases", [])
figures = ("ms_per_call", "rig_frames_per_s", "camera_frames_per_s")
checks = {
    "wheels": ran("wheels"),
    "environment": ran("environment"),
    "prepare": ran("prepare"),
    "cuda_available": bool(env.get("cuda_available")),
    "auto_resolves_to_gsplat": (env.get("auto") or {}).get("used") == "gsplat",
    "gsplat_compiled": ran("compile") and res["compile"] is not None,
    "gpu_tests_pass_none_skipped": bool(tests and tests["passed"] and not tests["failed"] and not tests["skipped"]),
    "render_bench_ran": ran("render_bench") and [c["envs"] for c in cases] == ENVS
    and all(c[k] > 0 for c in cases for k in figures),
    "render_bench_on_gsplat": (bench.get("backend") or {}).get("used") == "gsplat",
    "vector_env_ran": ran("vector_env") and [c["num_envs"] for c in vec.get("cases", [])] == VECTOR_ENVS
    and all(c["env_steps_per_s"] > 0 for c in vec["cases"]),
    "vector_env_on_gsplat": (vec.get("backend") or {}).get("used") == "gsplat",
    "training_ran": ran("training") and bool((train or {}).get("sps")) and bool(render.get("driver")),
    "training_rendered_with_gsplat": len(renderers) > 1 and all(r.get("used") == "gsplat" for r in renderers),
    "training_learner_on_cuda": ((train or {}).get("learners") or {}).get("device") == "cuda",
}
res["checks"] = checks
res["ok"] = all(checks.values())
res["failed_checks"] = [k for k, v in checks.items() if not v]
res["figures"] = dict(  # the headline numbers, for the README
    compile_s=(res["compile"] or {}).get("seconds"),
    camera_frames_per_s={c["envs"]: c["camera_frames_per_s"] for c in cases},
    psnr_vs_cpu_db=bench.get("psnr_vs_cpu_db"),
    vector_env_steps_per_s={c["num_envs"]: c["env_steps_per_s"] for c in vec.get("cases", [])},
    training_sps=(train or {}).get("sps"),
)
out = Path(os.environ["GPU_CHECK_RESULT"])
out.write_text(json.dumps(res, indent=2, default=str))
print(json.dumps({"ok": res["ok"], "failed_checks": res["failed_checks"], "result": str(out)}))
raise SystemExit(0 if res["ok"] else 1)
EOF

# -- the steps ------------------------------------------------------------------------------------------------
RUN=("$PY" "$BIN/run.py")
step wheels 60 "$PY" "$BIN/wheels.py"
if [ -d "$GPU_CHECK_SITE" ]; then
  export PYTHONPATH="$PYTHONPATH:$GPU_CHECK_SITE" # the checkout first; the site holds only what was missing
fi
step environment 60 "${RUN[@]}" "$BIN/environment.py"
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ] && [ -s "$WORK/cuda_arch" ]; then
  export TORCH_CUDA_ARCH_LIST=$(cat "$WORK/cuda_arch") # the visible GPU's compute capability, e.g. 9.0
fi

step prepare 240 "${RUN[@]}" "$BIN/prepare.py" &
PREPARE=$!
step compile 330 "${RUN[@]}" "$BIN/compile.py"
wait "$PREPARE"

# gsplat's kernels did not compile on a machine with a GPU: each step that needs them would compile again
NEEDS_GSPLAT=""
if [ -s "$WORK/cuda_arch" ] && [ ! -f "$PARTS/compile.json" ]; then
  NEEDS_GSPLAT="gsplat's kernels did not compile (see the compile step)"
fi
if [ -n "$NEEDS_GSPLAT" ]; then
  not_run gpu_tests "$NEEDS_GSPLAT"
else
  mapfile -t GPU_TEST_FILES < <(grep -rlE --include='*.py' 'pytest\.mark\.gpu' tests | sort)
  [ "${#GPU_TEST_FILES[@]}" -gt 0 ] || GPU_TEST_FILES=(tests/no-file-has-gpu-tests) # pytest then fails, saying so
  step gpu_tests 120 "${RUN[@]}" -m pytest "${GPU_TEST_FILES[@]}" -m gpu -q -p no:cacheprovider \
    --junitxml="$WORK/gpu-tests.xml"
fi
if [ -n "$NEEDS_GSPLAT" ] && [ "$GPU_CHECK_BACKEND" = gsplat ]; then
  not_run render_bench "$NEEDS_GSPLAT"
  not_run vector_env "$NEEDS_GSPLAT"
  not_run training "$NEEDS_GSPLAT"
else
  step render_bench 150 "${RUN[@]}" "$BIN/render_bench.py"
  step vector_env 120 "${RUN[@]}" "$BIN/vector_env.py"
  step training 150 "${RUN[@]}" -m learner.train --run gpu-check --store "$WORK/store" "tracking.out=$WORK/runs" \
    "suite=$GPU_CHECK_SUITE" "eval.suite=$GPU_CHECK_SUITE" "env.render_backend=$GPU_CHECK_BACKEND" \
    rollout.num_actors=0 "rollout.envs_per_actor=$GPU_CHECK_TRAIN_ENVS" rollout.fragment_length=16 stage=il+rl \
    il.pretrain_iterations=2 iterations=3 store.checkpoint_every=2 eval.every=0 eval.num_envs=2 \
    "gpus_per_learner=$GPU_CHECK_GPUS_PER_LEARNER"
fi

# -- the JSON and the logs ------------------------------------------------------------------------------------
export GPU_CHECK_SECONDS=$(($(date +%s) - T0)) GPU_CHECK_RESULT="$RESULT_DIR/gpu-check.json"
rm -f "$GPU_CHECK_RESULT"
"$PY" "$BIN/summary.py"
rc=$?
if [ ! -f "$GPU_CHECK_RESULT" ]; then # the summary itself failed: still one JSON that says so
  printf '{"ok": false, "failed_checks": ["summary"], "work": "%s"}\n' "$WORK" >"$GPU_CHECK_RESULT"
  rc=1
fi
tar -czf "$RESULT_DIR/gpu-check-logs.tar.gz" -C "$WORK" --exclude=./site --exclude=./suite --exclude=./store . 2>/dev/null || say "could not pack the logs of $WORK"
say "done in $(($(date +%s) - T0))s: $GPU_CHECK_RESULT (logs in $WORK and $RESULT_DIR/gpu-check-logs.tar.gz)"
exit "$rc"
