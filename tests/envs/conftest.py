"""Fixtures: hand-built straight-road scenarios (``handmade.py``) written once per session."""

from __future__ import annotations

import pytest

from tests.envs.handmade import limits_scenario, straight_scenario

FAST = {"resolution": (32, 16)}  # small cameras: the tests check logic, not pictures


@pytest.fixture(scope="session", autouse=True)
def _serial_renderer():
    """One renderer thread: these tests draw tiny images, and on a shared 2-core machine waking
    numba's thread pool costs more (tens of ms a call under load) than the drawing."""
    from sim.raster_cpu import set_num_threads

    set_num_threads(1)


@pytest.fixture(scope="session")
def hm_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("handmade")


@pytest.fixture(scope="session")
def plain(hm_dir):
    """Straight road, 10 m/s expert, nothing in the way; horizon 30."""
    return straight_scenario(hm_dir, sid="plain")


@pytest.fixture(scope="session")
def lead(hm_dir):
    """A stopped car 10 m ahead of the ego box's front."""
    return straight_scenario(hm_dir, sid="lead", lead_gap=10.0, lead_speed=0.0)


@pytest.fixture(scope="session")
def parked_box(hm_dir):
    """A parked car (Gaussians in the background and a static obstacle box) 20 m ahead, in lane."""
    return straight_scenario(hm_dir, sid="parked_box", parked_x=25.0)


@pytest.fixture(scope="session")
def parked_gaussians_only(hm_dir):
    """The same parked car, only as background Gaussians (no obstacle box)."""
    return straight_scenario(hm_dir, sid="parked_gs", parked_x=25.0, obstacle_box=False)


@pytest.fixture(scope="session")
def slow(hm_dir):
    """Expert at 2 m/s (1 m per 0.5 s: longitudinal bin 4)."""
    return straight_scenario(hm_dir, sid="slow", speed=2.0, horizon=40)


@pytest.fixture(scope="session")
def corrupt(hm_dir):
    """A scenario whose background PLY is truncated: it loads as a Scenario, fails at reset."""
    return straight_scenario(hm_dir, sid="corrupt", corrupt_background=True)


@pytest.fixture(scope="session")
def limits(hm_dir):
    """The straight road with its route in three lanes: 10 m/s up to x = 60, 15 m/s after."""
    return limits_scenario(hm_dir, sid="limits")
