"""Fuzzing the env's ``step`` with actions of every shape, dtype and value (NaN, infinities, out of
range, negative, fractional, strings, ragged lists, objects), on ``DrivingEnv`` and on the vector env.

A valid action steps the env; anything else raises ``ValueError`` from the env naming what was
wrong ("DrivingEnv.step: ..."), and leaves the episode as it was: the next valid action steps on
from the same state. Never another exception, never a crash of the process.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from envs.driving import DrivingEnv
from envs.vector import VectorDrivingEnv
from scenarios import save
from tests.envs.handmade import straight_scenario
from tests.fuzz.counting import count

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
ENV = {"cameras": False}  # actions are checked before anything renders: no cameras, for speed
DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
          np.float32, np.float64, np.bool_, np.complex64]  # fmt: skip


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("act")
    save(straight_scenario(d, sid="plain", horizon=20), d / "plain.json")
    return d / "plain.json"


@pytest.fixture(scope="module")
def env(scenario_file):
    e = DrivingEnv(ENV, scenarios=str(scenario_file))
    e.reset(seed=0)
    return e


@pytest.fixture(scope="module")
def venv(scenario_file):
    v = VectorDrivingEnv(str(scenario_file), 2, ENV)
    v.reset(seed=0)
    return v


def arrays(max_dims: int = 3):
    return st.sampled_from(DTYPES).flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=3))
    )


PY_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
)
ACTIONS = st.one_of(
    arrays(),
    st.lists(PY_VALUES, max_size=4),
    st.tuples(st.integers(-100, 100), st.integers(-100, 100)),
    st.tuples(st.integers(0, 60), st.floats(0, 60)),
    st.lists(st.one_of(st.integers(0, 60), st.lists(st.integers(0, 60), max_size=2)), min_size=2, max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.text(max_size=5),
    st.none(),
)


def _valid(a) -> bool:
    try:
        arr = np.asarray(a)
    except Exception:
        return False
    if arr.shape != (2,) or arr.dtype == bool:
        return False
    if np.issubdtype(arr.dtype, np.integer):
        pass
    elif np.issubdtype(arr.dtype, np.floating):
        if not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
            return False
    else:
        return False
    return bool(0 <= arr[0] < 61 and 0 <= arr[1] < 61)


@pytest.mark.timeout(300)
@FUZZ
@given(action=ACTIONS)
def test_fuzz_env_step_actions(env, action):
    count("action")
    t = env._t
    try:
        obs, _r, term, trunc, info = env.step(action)
    except ValueError as e:
        assert str(e).startswith("DrivingEnv.step: action"), e
        assert not _valid(action), action
        assert env._t == t  # nothing happened: the same episode goes on from the same step
    else:
        assert _valid(action), action
        assert env.observation_space.contains(obs) and info["step"] == t + 1
        if term or trunc:
            env.reset()
            return
    obs, *_ = env.step(np.array([30, 20]))  # and it still steps
    if env._active is False:
        env.reset()


@pytest.mark.timeout(300)
@FUZZ
@given(actions=st.one_of(arrays(max_dims=3), arrays(max_dims=2).filter(lambda a: a.shape[:1] == (2,))))
def test_fuzz_vector_env_step_actions(venv, actions):
    count("action")
    try:
        obs, *_ = venv.step(actions)
    except ValueError as e:
        assert str(e).startswith("VectorDrivingEnv.step"), e
    else:
        assert venv.observation_space.contains(obs)
    venv.step(np.tile([30, 20], (2, 1)))  # the vector env autoresets: it always steps on
