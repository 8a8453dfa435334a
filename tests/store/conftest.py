"""Fixtures of the store tests: the same tests run on a directory, on moto, and (slow) on Swift."""

from __future__ import annotations

import uuid

import pytest

from tests.s3_servers import *  # noqa: F403  (the fixtures moto_s3 and swift_s3)
from tests.store.helpers import Backend, Raw


@pytest.fixture(params=["local", "moto", pytest.param("swift", marks=pytest.mark.slow)])
def backend(request, tmp_path) -> Backend:
    if request.param == "local":
        root = tmp_path / "store"
        return Backend("local", str(root), Raw(root=root))
    server = request.getfixturevalue(f"{request.param}_s3")
    prefix = f"t-{uuid.uuid4().hex[:12]}"  # one session-wide bucket: each test under its own prefix
    return Backend(request.param, server.uri(prefix), Raw(server=server, prefix=prefix))
