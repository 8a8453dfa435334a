"""Shared fixtures. Ray, where a test needs it, is one session-scoped local instance."""

from __future__ import annotations

import os

import pytest

from tests.s3_servers import moto_s3, swift_s3  # noqa: F401  (S3 endpoints on loopback, for any test)

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "numba"))


# Two cores: one torch thread per test process keeps small tensor work from thrashing
# (tests that need more set it themselves).
try:
    import torch

    torch.set_num_threads(1)
except ImportError:
    pass


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (gsplat)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def scratch_copies(tmp_path_factory):
    """Local working copies of store folders (store.scratch_folder) in the session's temporary folder,
    which pytest prunes, not in the system's temp folder; child processes (a Ray head) inherit it."""
    old = os.environ.get("SPLATDRIVE_SCRATCH")
    os.environ["SPLATDRIVE_SCRATCH"] = str(tmp_path_factory.mktemp("scratch"))
    yield
    if old is None:
        os.environ.pop("SPLATDRIVE_SCRATCH", None)
    else:
        os.environ["SPLATDRIVE_SCRATCH"] = old


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (ray.init takes seconds)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
