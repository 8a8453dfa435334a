"""Teachers: per-step labels of the states a policy visits, as ``rollout.episodes.Extra`` functions.

An extra is called before every action with (vector env, observation batch, per-env infos) and returns
one value per sub-env; rollout workers record it beside the fragment's steps (``Fragment.extras``) or an
episode's records. They travel to Ray actors pickled: module-level functions by reference, a
:class:`PolicyTeacher` with its weights (its network is built once per process, on first use).

Teachers:

- ``reactive_labels``: the reactive expert's bins, int64 [N, 2] (DAgger's labels); :class:`ReactiveTeacher` the
  same from an expert with other settings (``il.labeller``).
- :class:`PolicyTeacher`: a privileged policy (a checkpoint trained with ``env.observation=privileged``)
  reading the privileged observation of each state a camera policy visits (``DrivingEnv.observe_as``), the
  camera student never sees it. float32 [N, 3 + n_long + n_lat]: its likeliest bins (lateral, longitudinal),
  n_long, its longitudinal probabilities, its lateral probabilities given that longitudinal bin (stage
  distill's targets, ``learner.dagger.collect``).
"""

from __future__ import annotations

import numpy as np
import torch

from envs.vector import VectorDrivingEnv
from policy.network import MASK_KEYS, ExportPolicy
from policy.sources import PolicySource, resolve_policy_source
from scenarios.reactive import ReactiveSettings


def reactive_labels(venv: VectorDrivingEnv, obs, infos) -> np.ndarray:
    """int64 [N, 2]: the reactive expert's (lateral, longitudinal) bins for each sub-env's current state
    (``DrivingEnv.reactive_label``): DAgger's labels."""
    return np.stack([env.reactive_label() for env in venv.envs])


class ReactiveTeacher:
    """:func:`reactive_labels` from a reactive expert with other settings (``il.labeller``): ``settings``,
    fields of ``scenarios.ReactiveSettings`` (e.g. {"sensing_range": 36.0}); unknown names and values <= 0 are
    refused here, before any rollout."""

    def __init__(self, settings: dict):
        self.settings = ReactiveSettings.with_overrides(settings, "il.labeller")

    def __call__(self, venv: VectorDrivingEnv, obs, infos) -> np.ndarray:
        return np.stack([env.reactive_label(self.settings) for env in venv.envs])


class PolicyTeacher:
    """A privileged policy as a teacher (module docstring). ``source``: a policy SOURCE or a resolved
    ``PolicySource``; it must observe in privileged mode without cameras, on the env's action bins."""

    def __init__(self, source: str | PolicySource):
        src = resolve_policy_source(source) if isinstance(source, str) else source
        if src.observation_mode != "privileged" or "cameras" in src.obs_space.spaces:
            raise ValueError(
                f"il.teacher {src.provenance.get('spec')!r}: a teacher reads the privileged state without cameras, "
                f"but it was trained with observation={src.observation_mode!r} and parts {sorted(src.obs_space.spaces)}"
            )
        self.source = src
        self.parts = tuple(k for k in src.obs_space.spaces if k not in MASK_KEYS.values())
        self._module: ExportPolicy | None = None

    def __getstate__(self):
        return {"source": self.source, "parts": self.parts, "_module": None}

    def __call__(self, venv: VectorDrivingEnv, obs, infos) -> np.ndarray:
        spec = self.source.action_spec
        if self._module is None:  # first call in this process: the env's bins checked, the network built
            if (spec.n_lat, spec.n_long) != (venv.envs[0].action_spec.n_lat, venv.envs[0].action_spec.n_long):
                raise ValueError(f"il.teacher: its action bins {spec.n_lat}x{spec.n_long} are not the env's")
            self._module = ExportPolicy(self.source.build_policy()).eval()
        rows = [env.observe_as("privileged", self.parts) for env in venv.envs]
        want = self.source.obs_space.spaces
        batch = {}
        for k in want:
            a = np.stack([r[k] for r in rows])
            if a.shape[1:] != want[k].shape:
                raise ValueError(
                    f"il.teacher: its {k!r} is {want[k].shape}, the env gives {a.shape[1:]} (train the teacher "
                    "with the student's env settings: max_agents, map_points, route_points)"
                )
            batch[k] = torch.from_numpy(a)
        with torch.no_grad():
            action, logits_long, lat_all, _ = self._module(batch)
        p_long = torch.softmax(logits_long.float(), -1)
        row = lat_all[torch.arange(len(action)), action[:, 1]]  # [N, n_lat] given its longitudinal bin
        p_lat = torch.softmax(row.float(), -1)
        n_long = torch.full((len(action), 1), float(spec.n_long))
        return torch.cat([action.float(), n_long, p_long, p_lat], 1).numpy().astype(np.float32)


def make_teacher(spec: str, labeller: dict | None = None):
    """``il.teacher``: 'reactive' (with ``il.labeller``'s settings when given) or a privileged policy SOURCE."""
    if spec != "reactive":
        if labeller:
            raise ValueError(f"il.labeller sets the reactive expert's settings, but il.teacher={spec!r}")
        return PolicyTeacher(spec)
    return ReactiveTeacher(labeller) if labeller else reactive_labels


TEACHERS = {"reactive": reactive_labels}
