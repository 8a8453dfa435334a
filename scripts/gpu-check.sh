#!/usr/bin/env bash
# scripts/gpu-check.sh: the whole GPU proof in one command (under 10 minutes on one GPU).
#
#   scripts/gpu-check.sh            # on a machine with an NVIDIA GPU and a network
#
# 1. setup        SPLATDRIVE_GPU=1 ./dev setup: .venv with the CUDA build of torch and gsplat
# 2. environment  torch, CUDA, the GPU, gsplat; what render_backend='auto' resolves to (must be gsplat)
# 3. warm-up      one small gsplat render (gsplat may compile its CUDA kernels on first use)
# 4. gpu tests    pytest -m gpu: gsplat against the reference renderer (>= 45 dB PSNR), S scenes x C
#                 cameras in one call; none may be skipped here
# 5. render bench B environments x the front3 rig (3 cameras) in one sim.render call, 256x128 per
#                 camera, a 300k-Gaussian street, for B = 1, 4, 8, 16; gsplat vs cpu PSNR at B = 1
# 6. training     a short run, render_backend=gsplat (no fallback possible), rollout.gpus_per_actor=0.5,
#                 gpus_per_learner=1; what rendered where is read back from the run's provenance
# Writes one JSON, $OUT/gpu-check.json when OUT is set, else ./gpu-check.json; exits 0 only if
# every check passed. Each step has its own time limit; a failing step is recorded and the others run.
#
# Knobs (for trying the script on a CPU machine: GPU_CHECK_SETUP=0 GPU_CHECK_BACKEND=cpu
# GPU_CHECK_GPUS_PER_ACTOR=0 GPU_CHECK_GPUS_PER_LEARNER=0 GPU_CHECK_GAUSSIANS=20000; the checks then fail,
# as they should, where they need the GPU):
#   GPU_CHECK_SETUP=0            use the existing .venv as it is
#   GPU_CHECK_BACKEND=gsplat     render backend of the bench and the training run
#   GPU_CHECK_GAUSSIANS=300000   bench scene size
#   GPU_CHECK_GPUS_PER_ACTOR=0.5 GPU_CHECK_GPUS_PER_LEARNER=1
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYV="$ROOT/.venv/bin/python"
RESULT_DIR=${OUT:-$ROOT}
RESULT="$RESULT_DIR/gpu-check.json"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
PARTS="$WORK/parts"
mkdir -p "$PARTS" "$RESULT_DIR"
export GPU_CHECK_BACKEND=${GPU_CHECK_BACKEND:-gsplat}
export GPU_CHECK_GAUSSIANS=${GPU_CHECK_GAUSSIANS:-300000}
export GPU_CHECK_GPUS_PER_ACTOR=${GPU_CHECK_GPUS_PER_ACTOR:-0.5}
export GPU_CHECK_GPUS_PER_LEARNER=${GPU_CHECK_GPUS_PER_LEARNER:-1}
export GPU_CHECK_WORK="$WORK" GPU_CHECK_PARTS="$PARTS"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NUMBA_CACHE_DIR="$ROOT/.cache/numba"
T0=$(date +%s)

say() { echo "[gpu-check $(($(date +%s) - T0))s] $*" >&2; }

# step NAME LIMIT_S command...: run it with a time limit, its output in $WORK/NAME.log; record rc and seconds
step() {
  local name=$1 limit=$2 t rc
  shift 2
  say "$name (limit ${limit}s)"
  t=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  printf '{"rc": %d, "seconds": %d, "limit_s": %d, "log": "%s"}\n' "$rc" "$(($(date +%s) - t))" "$limit" \
    "$WORK/$name.log" >"$PARTS/$name.step.json"
  if [ "$rc" != 0 ]; then
    say "$name FAILED (rc $rc); the end of $WORK/$name.log:"
    tail -n 15 "$WORK/$name.log" >&2
  fi
  return 0
}

# -- 1. set-up ------------------------------------------------------------------------------------------
if [ "${GPU_CHECK_SETUP:-1}" = 1 ]; then
  step setup 420 env SPLATDRIVE_GPU=1 ./dev setup
else
  say "setup skipped (GPU_CHECK_SETUP=0): using $ROOT/.venv as it is"
fi
[ -x "$PYV" ] || { say "no $PYV: the set-up failed"; }

# -- 2. environment -------------------------------------------------------------------------------------
step environment 120 "$PYV" - <<'EOF'
import json, os, subprocess
import torch
from sim.rendering import backend_report, gsplat_status
out = dict(
    torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
    devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    gsplat_status=dict(usable=gsplat_status().usable, reason=gsplat_status().reason),
    auto=backend_report("auto"),
)
try:
    import gsplat
    out["gsplat"] = gsplat.__version__
except Exception as e:
    out["gsplat"] = f"not importable: {type(e).__name__}: {e}"
try:
    out["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30).stdout.strip()
except Exception as e:
    out["nvidia_smi"] = f"unavailable: {e}"
json.dump(out, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "environment.json"), "w"), indent=2)
print(json.dumps(out, indent=2))
EOF

# -- 3. warm-up: gsplat may compile its kernels on first use; keep that out of the bench ------------------
step warmup 300 "$PYV" - <<'EOF'
import json, os, time
import numpy as np
import sim
from sim.camera import make_rig
from sim.frames import pose_matrix
from sim.gaussians import GaussianCloud
backend = os.environ["GPU_CHECK_BACKEND"]
rng = np.random.default_rng(0)
n = 1000
cloud = GaussianCloud.create(rng.uniform((2, -5, 0), (30, 5, 4), (n, 3)), rng.normal(size=(n, 4)),
                             np.exp(rng.uniform(-3, -1, (n, 3))), rng.uniform(0.1, 0.9, n), rng.uniform(0, 1, (n, 3)))
rig = make_rig("front3", 64, 32)
t = time.perf_counter()
out = sim.render(cloud, rig.viewmats(pose_matrix(0, 0, 0, 0)), rig.Ks(), 64, 32, backend=backend)
res = dict(backend=backend, first_render_seconds=time.perf_counter() - t, device=str(out.rgb.device))
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "warmup.json"), "w"), indent=2)
print(res)
EOF

# -- 4. the gpu tests ---------------------------------------------------------------------------------------
step gpu_tests 240 "$PYV" -m pytest tests -m gpu -q -p no:cacheprovider --junitxml="$WORK/gpu-tests.xml"

# -- 5. render bench: B x C cameras in one call --------------------------------------------------------------
step render_bench 240 "$PYV" - <<'EOF'
import json, math, os, time
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
res = dict(backend=backend_report(backend), width=W, height=H, cameras_per_rig=len(rig),
           background_gaussians=len(scene.background), scene_seconds=time.perf_counter() - t, cases=[])
cuda = torch.cuda.is_available()
sync = torch.cuda.synchronize if cuda else (lambda: None)


def poses(B, t0):
    i = np.arange(B) * 7 + t0  # B environments at different places along the street
    return pose_matrix(1.0 * i % 60.0, -1.75 + 0.3 * np.sin(0.2 * i), 0.0 * i, 0.03 * np.sin(0.1 * i))


def psnr(a, b):
    mse = float(((a.float() - b.float()) ** 2).mean())
    return 120.0 if mse < 1e-12 else -10.0 * math.log10(mse)


for B in (1, 4, 8, 16):
    comps = [scene.compose(5 + b) for b in range(B)]
    vms = rig.viewmats(poses(B, 0))  # [B, C, 4, 4]
    for _ in range(3):
        sim.render(comps, vms, Ks, W, H, backend=backend, far_plane=200.0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync()
    calls, t = 0, time.perf_counter()
    while calls < 5 or time.perf_counter() - t < 3.0:
        out = sim.render(comps, rig.viewmats(poses(B, calls)), Ks, W, H, backend=backend, far_plane=200.0)
        calls += 1
    sync()
    dt = time.perf_counter() - t
    assert out.rgb.shape == (B, len(rig), H, W, 3), out.rgb.shape
    case = dict(envs=B, cameras_per_call=B * len(rig), calls=calls, ms_per_call=1e3 * dt / calls,
                rig_frames_per_s=B * calls / dt, camera_frames_per_s=B * len(rig) * calls / dt)
    if cuda:
        case["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    res["cases"].append(case)
    print(case, flush=True)

# agreement with the project's CPU renderer on the big scene (information: the gpu tests hold the
# backends to the reference on smaller scenes)
comp, vm = scene.compose(5), rig.viewmats(poses(1, 0))[0]
a = sim.render(comp, vm, Ks, W, H, backend=backend, far_plane=200.0)
b = sim.render(comp, vm, Ks, W, H, backend="cpu", far_plane=200.0)
res["psnr_vs_cpu_db"] = dict(rgb=psnr(a.rgb.cpu(), b.rgb), alpha=psnr(a.alpha.cpu(), b.alpha))
json.dump(res, open(os.path.join(os.environ["GPU_CHECK_PARTS"], "render_bench.json"), "w"), indent=2)
print(json.dumps(res["psnr_vs_cpu_db"]))
EOF

# -- 6. a short training run on the GPU ------------------------------------------------------------------------
step scenarios 180 "$PYV" -m scenarios.generate --suite gpu-check --count 2 --seed 0 --out "$WORK/suite" -q
step training 300 "$PYV" -m learner.train --run gpu-check --store "$WORK/store" \
  "tracking.out=$WORK/runs" "suite=$WORK/suite" "eval.suite=$WORK/suite" "env.render_backend=$GPU_CHECK_BACKEND" \
  rollout.num_actors=1 rollout.envs_per_actor=4 "rollout.gpus_per_actor=$GPU_CHECK_GPUS_PER_ACTOR" \
  "gpus_per_learner=$GPU_CHECK_GPUS_PER_LEARNER" il.pretrain_iterations=4 iterations=4 store.checkpoint_every=2 \
  eval.every=0 eval.num_envs=2 tracking.tensorboard=true

# -- the JSON ----------------------------------------------------------------------------------------------------
export GPU_CHECK_SECONDS=$(($(date +%s) - T0)) GPU_CHECK_RESULT="$RESULT"
rm -f "$RESULT"
PYJ="$PYV"
[ -x "$PYJ" ] || PYJ=$(command -v python3)  # the set-up failed before making a venv: still write the JSON
"$PYJ" - <<'EOF'
import json, os, xml.etree.ElementTree as ET
from pathlib import Path

parts, work = Path(os.environ["GPU_CHECK_PARTS"]), Path(os.environ["GPU_CHECK_WORK"])
backend = os.environ["GPU_CHECK_BACKEND"]


def load(name):
    p = parts / name
    return json.loads(p.read_text()) if p.exists() else None


res = {"seconds": int(os.environ["GPU_CHECK_SECONDS"]), "work": str(work), "settings": {
    k.lower(): os.environ[k] for k in ("GPU_CHECK_BACKEND", "GPU_CHECK_GAUSSIANS", "GPU_CHECK_GPUS_PER_ACTOR",
                                       "GPU_CHECK_GPUS_PER_LEARNER")}}
steps = {}
for f in sorted(parts.glob("*.step.json")):
    steps[f.name[: -len(".step.json")]] = json.loads(f.read_text())
res["steps"] = steps
res["environment"] = load("environment.json")
res["warmup"] = load("warmup.json")
res["render_bench"] = load("render_bench.json")

tests = None
xml = work / "gpu-tests.xml"
if xml.exists():
    root = ET.parse(xml).getroot()
    cases = root.iter("testcase")
    tests = dict(passed=[], failed=[], skipped=[])
    for c in cases:
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
if (run / "run.json").exists():
    prov = json.loads((run / "run.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    sps = [r["charts/SPS"] for r in rows if "charts/SPS" in r]
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else None
    store = work / "store" / "gpu-check"
    train = dict(render=prov.get("render"), learners=prov.get("learners"), sps=sps,
                 final=(summary or {}).get("final"), checkpoints=sorted(p.name for p in store.glob("*")) if store.exists() else [])
res["training"] = train

env, bench = res["environment"] or {}, res["render_bench"] or {}
actors = ((train or {}).get("render") or {}).get("rollout_actors") or []
checks = {
    "setup": steps.get("setup", {"rc": 0}).get("rc") == 0,
    "cuda_available": bool(env.get("cuda_available")),
    "auto_resolves_to_gsplat": (env.get("auto") or {}).get("used") == "gsplat",
    "gpu_tests_pass_none_skipped": bool(tests and tests["passed"] and not tests["failed"] and not tests["skipped"]),
    "render_bench_ran": steps.get("render_bench", {}).get("rc") == 0 and len(bench.get("cases", [])) == 4,
    "render_bench_on_gsplat": (bench.get("backend") or {}).get("used") == "gsplat",
    "training_ran": steps.get("training", {}).get("rc") == 0 and bool((train or {}).get("sps")),
    "training_rollouts_rendered_with_gsplat": bool(actors) and all(a.get("used") == "gsplat" for a in actors),
    "training_learner_on_cuda": ((train or {}).get("learners") or {}).get("device") == "cuda",
}
res["checks"] = checks
res["ok"] = all(checks.values())
res["failed_checks"] = [k for k, v in checks.items() if not v]
out = Path(os.environ["GPU_CHECK_RESULT"])
out.write_text(json.dumps(res, indent=2, default=str))
print(json.dumps({"ok": res["ok"], "failed_checks": res["failed_checks"], "result": str(out)}))
raise SystemExit(0 if res["ok"] else 1)
EOF
rc=$?
if [ ! -f "$RESULT" ]; then  # the summary itself failed: still one JSON that says so
  printf '{"ok": false, "failed_checks": ["summary"], "work": "%s"}\n' "$WORK" >"$RESULT"
  rc=1
fi
say "done in $(($(date +%s) - T0))s: $RESULT (logs in $WORK)"
exit "$rc"
