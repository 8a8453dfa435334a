"""The project's own tooling: the static checks script, the core dependencies, the S3 test endpoints.

- ``scripts/check.sh`` (``./dev check``; ``./dev test`` runs it first) names each check that fails
  and still checks the packages that exist when one listed in pyproject is not there yet.
- The core packages import without any optional extra (ray, s3, export, viz, gpu, tracking): heavy
  optional dependencies are imported inside the functions that need them.
- An S3 endpoint that cannot start is a test error in CI and a skip elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.s3_servers import MotoServer, endpoint_unavailable, in_ci

REPO = Path(__file__).resolve().parent.parent
VENV = Path(sys.executable).parent.parent  # the venv this test runs in (its ruff, mypy, lint-imports)

# What the extras bring (pyproject.toml [project.optional-dependencies]), by import name.
OPTIONAL = [
    "ray",
    "boto3",
    "botocore",
    "pyarrow",
    "onnx",
    "onnxruntime",
    "matplotlib",
    "imageio",
    "imageio_ffmpeg",
    "cv2",
    "gsplat",
    "tensorboard",
    "mlflow",
]


# -- S3 endpoints: an error in CI, a skip elsewhere ----------------------------------------------------


@pytest.mark.parametrize("value", ["true", "1", "yes", "True"])
def test_an_unavailable_endpoint_is_an_error_in_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="moto_server is not installed"):
        endpoint_unavailable("moto_server is not installed")


@pytest.mark.parametrize("value", [None, "", "0", "false"])
def test_an_unavailable_endpoint_skips_outside_ci(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="no extended attributes"):
        endpoint_unavailable("Swift needs extended attributes; /tmp/x has no extended attributes")


def test_moto_without_its_server_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    server = MotoServer(tmp_path)
    server.exe = None  # as on a machine where moto[server] was not installed
    with pytest.raises(pytest.fail.Exception, match=r"moto_server is not installed \(pip install 'moto\[server\]'"):
        server.start()
    assert server.proc is None


# -- core dependencies -----------------------------------------------------------------------------------


def test_the_packages_import_without_the_optional_extras():
    """Every module of every package imports with the extras' packages made unimportable: a top-level
    ``import ray`` (or boto3, onnxruntime, matplotlib, cv2...) in a core module fails here."""
    code = textwrap.dedent(
        f"""
        import importlib, importlib.abc, pkgutil, sys
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib

        BLOCKED = {OPTIONAL!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: an optional extra)", name=name)
                return None

        sys.meta_path.insert(0, Block())
        include = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["packages"]["find"]["include"]
        names = [p.rstrip("*") for p in include]
        failed = []
        for name in names:
            try:
                pkg = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name:  # else a package listed in pyproject that is not there (yet)
                    failed.append(f"{{name}}: {{e}}")
                continue
            except Exception as e:
                failed.append(f"{{name}}: {{type(e).__name__}}: {{e}}")
                continue
            for info in pkgutil.walk_packages(pkg.__path__, name + "."):
                if info.name.rsplit(".", 1)[-1] == "__main__":
                    continue  # importing it would run the command
                try:
                    importlib.import_module(info.name)
                except Exception as e:
                    failed.append(f"{{info.name}}: {{type(e).__name__}}: {{e}}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"modules that need an optional extra at import:\n{r.stdout}{r.stderr[-3000:]}"


# -- scripts/check.sh ------------------------------------------------------------------------------------

PYPROJECT = """
[tool.setuptools.packages.find]
include = ["high*", "low*", "gone*"]

[tool.ruff]
line-length = 120

[tool.mypy]
ignore_missing_imports = true

[tool.importlinter]
root_packages = ["high", "low", "gone"]

[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
layers = ["high", "low | gone"]
ignore_imports = ["low.alias -> gone.thing"]
"""


def _project(root: Path, low_a: str, high_b: str) -> Path:
    """A two-package project (``gone`` listed in pyproject but absent) with the real check script."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "check.sh", root / "scripts" / "check.sh")
    (root / "pyproject.toml").write_text(PYPROJECT)
    for pkg, module, text in (("low", "a", low_a), ("high", "b", high_b)):
        (root / pkg).mkdir()
        (root / pkg / "__init__.py").write_text("")
        (root / pkg / f"{module}.py").write_text(text)
    return root


def _check(root: Path) -> tuple[int, str]:
    env = {**os.environ, "SPLATDRIVE_VENV": str(VENV)}
    r = subprocess.run(
        ["bash", str(root / "scripts" / "check.sh")], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    return r.returncode, r.stdout + r.stderr


def test_check_names_the_check_that_failed(tmp_path):
    # an upward import (low -> high) breaks the layers; the code is clean otherwise
    rc, out = _check(_project(tmp_path / "p1", "import high.b\n\nY = high.b.X\n", "X: int = 1\n"))
    assert rc == 1, out
    assert "[check] FAILED: lint-imports" in out and "[check] FAILED static checks: lint-imports\n" in out, out
    assert "low.a -> high.b" in out, out
    for name in ("ruff check", "ruff format", "mypy"):
        assert f"[check] {name}: ok" in out, out
    assert "package gone (pyproject) is not there yet" in out and "gone not there yet" in out, out

    # the import fixed and a type error made: now only mypy fails
    rc, out = _check(_project(tmp_path / "p2", "Y = 2\n", 'X: int = "one"\n'))
    assert rc == 1, out
    assert "[check] FAILED: mypy" in out and "[check] FAILED static checks: mypy\n" in out, out
    assert 'high/b.py:1: error: Incompatible types in assignment (expression has type "str"' in out, out
    assert "[check] lint-imports: ok" in out, out


def test_check_passes_a_clean_project(tmp_path):
    rc, out = _check(_project(tmp_path / "p", "Y = 2\n", "X: int = 1\n"))
    assert rc == 0, out
    assert "[check] all static checks passed (ruff check, ruff format, mypy on high low, lint-imports)" in out, out
