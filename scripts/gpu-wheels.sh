#!/usr/bin/env bash
# scripts/gpu-wheels.sh: fetch, on a machine with a network, the wheels that scripts/gpu-check.sh installs on
# a GPU node that has none (the node's own python3 with torch, no gsplat, no gymnasium, no network).
#
#   scripts/gpu-wheels.sh      # -> .gpu-wheels/ (git-ignored); copy it to the node with the checkout
#
# Fetches exactly the packages the node lacks, pinned (one version of each), as wheels for the node's
# interpreter (CPython 3.12, manylinux x86-64) whatever this machine runs: gsplat (pure Python; it compiles
# its CUDA kernels with the node's nvcc on first use), gymnasium and gymnasium's farama-notifications. Then
# it checks every wheel's Requires-Dist (extras aside, markers evaluated for the node) against the node's
# packages and the fetched wheels, and refuses, leaving the folder as it was, when one is missing or the
# wheels exceed the size budget (they travel with the working tree). Prints each wheel and the total.
#
# Knobs: GPU_WHEELS_DIR (.gpu-wheels), GPU_WHEELS_BUDGET_MB (20), GPU_WHEELS_PYTHON (python3: the pip that
# fetches), GPU_WHEELS_PACKAGES (the pins below), GPU_WHEELS_NODE_HAS (the node's distributions, below).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${GPU_WHEELS_DIR:-$ROOT/.gpu-wheels}
BUDGET_MB=${GPU_WHEELS_BUDGET_MB:-20}
PY=${GPU_WHEELS_PYTHON:-python3}
PACKAGES=${GPU_WHEELS_PACKAGES:-gsplat==1.5.3 gymnasium==1.4.0 farama-notifications==0.0.6}
# The node's Python distributions (its image's package list), for the Requires-Dist check.
NODE_HAS=${GPU_WHEELS_NODE_HAS:-"absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils
execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore
httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py
mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy
numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision
tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug
wheel wrapt xarray xxhash yarl zipp"}

say() { echo "[gpu-wheels] $*" >&2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-wheels.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# shellcheck disable=SC2086  # PACKAGES is a list of name==version words
say "fetching $PACKAGES (CPython 3.12, manylinux x86-64) into $TMP"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$TMP" $PACKAGES

# Requires-Dist of every wheel, for the node (Python 3.12 on Linux x86-64, no extras): each must be on the
# node or among the wheels; one version of each distribution; the size budget.
NODE_HAS="$NODE_HAS" BUDGET_MB="$BUDGET_MB" "$PY" - "$TMP" <<'EOF'
import os
import re
import sys
import zipfile
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement  # pip's own copy: nothing else to install here


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


tmp = Path(sys.argv[1])
wheels = sorted(tmp.glob("*.whl"))
node = {norm(n) for n in os.environ["NODE_HAS"].split()}
env = dict(python_version="3.12", python_full_version="3.12.3", sys_platform="linux", platform_system="Linux",
           platform_machine="x86_64", os_name="posix", implementation_name="cpython",
           platform_python_implementation="CPython", extra="")
dists = {}
for w in wheels:
    dists.setdefault(norm(w.name.split("-")[0]), []).append(w.name)
twice = {d: names for d, names in dists.items() if len(names) > 1}
problems = [f"two versions of {d}: {', '.join(names)} (pip would refuse to install both)" for d, names in twice.items()]
for w in wheels:
    with zipfile.ZipFile(w) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate(env):
            continue  # an extra, or another Python or platform
        if norm(req.name) not in node and norm(req.name) not in dists:
            problems.append(f"{w.name} requires {req}, which is neither on the node nor among the wheels: "
                            "add it to GPU_WHEELS_PACKAGES")
total = sum(w.stat().st_size for w in wheels)
if total > float(os.environ["BUDGET_MB"]) * 2**20:
    problems.append(f"the wheels take {total / 2**20:.1f} MB, over the budget of {os.environ['BUDGET_MB']} MB "
                    "(GPU_WHEELS_BUDGET_MB): they travel with the working tree")
if problems:
    print("[gpu-wheels] refused, the folder is left as it was:\n  " + "\n  ".join(problems), file=sys.stderr)
    raise SystemExit(1)
EOF

mkdir -p "$DIR"
rm -f "$DIR"/*.whl
mv "$TMP"/*.whl "$DIR"/
total=0
for w in "$DIR"/*.whl; do
  size=$(wc -c <"$w")
  total=$((total + size))
  printf '%10d  %s\n' "$size" "${w#"$ROOT"/}"
done
printf '%10d  total (%s MB, budget %s MB)\n' "$total" "$(awk "BEGIN { printf \"%.1f\", $total / 1048576 }")" "$BUDGET_MB"
say "done: scripts/gpu-check.sh on the node installs these from $DIR (copy the folder along with the checkout)"
