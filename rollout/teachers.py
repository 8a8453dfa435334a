"""Teachers: per-step labels of the states a policy visits, as ``rollout.episodes.Extra`` functions.

An extra is called before every action with (vector env, observation batch, per-env infos) and returns
one value per sub-env; rollout workers record it beside the fragment's steps (``Fragment.extras``) or an
episode's records. Module-level functions, so they travel to Ray actors by reference.
"""

from __future__ import annotations

import numpy as np

from envs.vector import VectorDrivingEnv


def reactive_labels(venv: VectorDrivingEnv, obs, infos) -> np.ndarray:
    """int64 [N, 2]: the reactive expert's (lateral, longitudinal) bins for each sub-env's current state
    (``DrivingEnv.reactive_label``): DAgger's labels."""
    return np.stack([env.reactive_label() for env in venv.envs])


TEACHERS = {"reactive": reactive_labels}
