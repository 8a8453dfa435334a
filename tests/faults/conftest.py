"""Fixtures of the fault tests: a one-scenario suite for tiny runs."""

from __future__ import annotations

import pytest

from scenarios import save
from tests.envs.handmade import straight_scenario


@pytest.fixture(scope="session")
def fault_suite(tmp_path_factory):
    """One straight 10-step clip (the tiny runs' training and evaluation suite)."""
    d = tmp_path_factory.mktemp("fault_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    return d
