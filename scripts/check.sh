#!/usr/bin/env bash
# The static checks, run by `./dev check` alone and by `./dev test` before the tests (what CI runs):
#   ruff check, ruff format --check, mypy on the packages, lint-imports (the contracts in pyproject.toml).
# Every check runs; each one that fails is named in a line of its own ("[check] FAILED: mypy"), and the
# script exits 1 if any did. Tools come from $SPLATDRIVE_VENV (default .venv at the repository root).
# The packages are those of pyproject's [tool.setuptools.packages.find] that exist as folders with an
# __init__.py; one listed there but not (yet) present is left out with a note, so is its layer.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${SPLATDRIVE_VENV:-.venv}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "[check] no $PY: run ./dev setup first" >&2; exit 2; }

failed=()
run_check() {
  local name=$1 rc=0
  shift
  echo "[check] $name: $*"
  "$@" || rc=$?
  if [ "$rc" = 0 ]; then
    echo "[check] $name: ok"
  else
    echo "[check] FAILED: $name (exit $rc)"
    failed+=("$name")
  fi
}

# The packages: [tool.setuptools.packages.find] include patterns ("sim*") that are folders with an __init__.py.
mapfile -t PACKAGES < <("$PY" - <<'EOF'
import pathlib, sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy brings tomli
    import tomli as tomllib

include = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
for pattern in include:
    name = pattern.rstrip("*").rstrip(".")
    if (pathlib.Path(name) / "__init__.py").is_file():
        print(name)
    else:
        print(f"[check] package {name} (pyproject) is not there yet: left out", file=sys.stderr)
EOF
)
if [ "${#PACKAGES[@]}" = 0 ]; then
  echo "[check] FAILED: no package of pyproject's [tool.setuptools.packages.find] found" >&2
  exit 1
fi

run_check "ruff check" "$VENV/bin/ruff" check .
run_check "ruff format" "$VENV/bin/ruff" format --check .
mypy_args=()
for p in "${PACKAGES[@]}"; do mypy_args+=(-p "$p"); done
run_check "mypy" "$VENV/bin/mypy" "${mypy_args[@]}"

# lint-imports refuses a root package that is not there; while one is missing (a package being created),
# check the others: the missing one is an optional layer and ignore_imports that name it are dropped.
LINT_CONFIG=$("$PY" - "${PACKAGES[@]}" <<'EOF'
import json, os, pathlib, sys, tempfile

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy brings tomli
    import tomli as tomllib

present = set(sys.argv[1:])
config = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["tool"]["importlinter"]
missing = [p for p in config["root_packages"] if p not in present]
if not missing:
    sys.exit(0)  # pyproject.toml as it is
print(f"[check] lint-imports: {', '.join(missing)} not there yet: checking the other packages", file=sys.stderr)


def root(module: str) -> str:
    return module.strip().strip("()").split(".")[0]


def layer(entry: str) -> str:
    sep = "|" if "|" in entry else ":" if ":" in entry else None
    names = [n.strip() for n in entry.split(sep)] if sep else [entry.strip()]
    names = [f"({n.strip('()')})" if root(n) in missing else n for n in names]
    return f" {sep} ".join(names) if sep else names[0]


def keep(rule: str) -> bool:
    return not any(root(side) in missing for side in rule.split("->"))


lines = ["[tool.importlinter]", f"root_packages = {json.dumps([p for p in config['root_packages'] if p in present])}"]
for contract in config.get("contracts", []):
    c = dict(contract)
    if "layers" in c:
        c["layers"] = [layer(e) for e in c["layers"]]
    for key in ("ancestors", "modules", "source_modules", "forbidden_modules"):
        if key in c:
            c[key] = [m for m in c[key] if root(m) not in missing]
    if "ignore_imports" in c:
        c["ignore_imports"] = [r for r in c["ignore_imports"] if keep(r)]
    lines.append("[[tool.importlinter.contracts]]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in c.items()]  # JSON strings, lists and booleans are TOML
fd, path = tempfile.mkstemp(prefix="importlinter-", suffix=".toml")
with os.fdopen(fd, "w") as f:
    f.write("\n".join(lines) + "\n")
print(path)
EOF
)
if [ -n "$LINT_CONFIG" ]; then
  run_check "lint-imports" "$VENV/bin/lint-imports" --no-cache "$LINT_CONFIG"
  rm -f "$LINT_CONFIG"
else
  run_check "lint-imports" "$VENV/bin/lint-imports" --no-cache
fi

if [ "${#failed[@]}" != 0 ]; then
  echo "[check] FAILED static checks: ${failed[*]}"
  exit 1
fi
echo "[check] all static checks passed (ruff check, ruff format, mypy on ${PACKAGES[*]}, lint-imports)"
