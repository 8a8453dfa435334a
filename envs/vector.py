"""``VectorDrivingEnv``: N driving envs stepped together, with one render call per step for all.

What rollout actors use. It follows gymnasium's ``VectorEnv`` API with **same-step autoreset**
(``metadata["autoreset_mode"] == AutoresetMode.SAME_STEP``): when a sub-env's episode ends, it is
reset within the same ``step`` call; the returned observation is the new episode's first, and the
ended episode's last observation and info are in ``infos["final_obs"][i]`` and
``infos["final_info"]`` (masks ``infos["_final_obs"]``), so a truncated step can be bootstrapped.

Each sub-env is a :class:`envs.driving.DrivingEnv` sharing one scenario pool (tables built once,
failure counts and quarantine shared) with its own seeded generator: ``reset(seed=s)`` seeds
sub-env i with ``sim.seeding.derive_seed(s, i)`` (not gymnasium's ``s + i``, which gives runs of
neighbouring seeds the same sub-envs), so the vector env matches N single envs reset with those seeds
and fed the same actions (each single env being reset when its episode ends). Per step, the dynamics of all
sub-envs run in one vectorised call, their geometry in numpy, and every camera of every sub-env --
including the final frame of an ended episode and the first frame of its successor -- is drawn by
one ``sim.render`` call (one batched gsplat call on a GPU).

``autoreset=False`` (what closed-loop evaluation uses): an ended sub-env keeps its last state (so it
can still be filmed with ``render``) and is left alone by later steps (its action is ignored, it
returns no reward and no info keys) until :meth:`reset_envs` starts it on another scenario.

Infos (gymnasium's dict of arrays with ``_key`` masks): keys that describe the *step just taken*
(``reward_terms``, ``reward_parts``, ``event``, ``collision_*``, ``static_gaussians``,
``action_applied``, ``action_projected``, ``error``) are given for every sub-env, ended or not;
keys that describe the *returned observation* (``scenario``, ``step``, ``expert_action``,
``path_distance``, ``lateral_offset``, ``heading_error``, ``route_completion``, ``progress_lag``,
``ego_state``, ``action_mask``) follow the new episode for ended ones; the ended episode's own are
in ``final_info``.

A sub-env whose scenario raises (in reset, step or rendering) ends that episode truncated with
``info["error"]`` and carries on with another scenario; the rest are not disturbed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.config import EnvConfig
from envs.driving import DrivingEnv, advance, check_action, render_requests
from envs.suite import ScenarioPool, resolve_scenarios
from scenarios.actions import project_feasible
from sim.seeding import derive_seed

log = logging.getLogger("envs")

STEP_KEYS = (
    "reward_terms",
    "reward_parts",
    "event",
    "collision_location",
    "collision_point",
    "collision_with",
    "static_gaussians",
    "action_applied",
    "action_projected",
)


class VectorDrivingEnv(VectorEnv):
    """N :class:`DrivingEnv` sharing a scenario pool; one render call per step (module docstring).

    scenarios: as DrivingEnv's (default ``config["suite"]``); num_envs: N; config: dict of
    overrides or EnvConfig; skip_broken: overrides ``config["skip_broken"]``; autoreset: False keeps ended
    sub-envs as they ended until :meth:`reset_envs` (module docstring).
    """

    # gymnasium's VectorEnv declares metadata an instance attribute, which a ClassVar may not override
    metadata: dict[str, Any] = {  # noqa: RUF012 (see above)
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "autoreset_mode": AutoresetMode.SAME_STEP,
    }
    single_observation_space: spaces.Dict  # a DrivingEnv's observation space

    def __init__(
        self,
        scenarios=None,
        num_envs: int = 8,
        config: dict[str, Any] | EnvConfig | None = None,
        render_mode: str | None = None,
        *,
        skip_broken: bool | None = None,
        autoreset: bool = True,
    ):
        cfg = EnvConfig.from_dict(config)
        if skip_broken is not None:
            cfg = dataclasses.replace(cfg, skip_broken=bool(skip_broken))
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"VectorDrivingEnv: num_envs must be an int >= 1, got {num_envs!r}")
        source = scenarios if scenarios is not None else cfg.suite
        self.pool = ScenarioPool(resolve_scenarios(source, cfg.skip_broken), cfg)
        self.config = cfg
        self.render_mode = render_mode
        self.envs = [DrivingEnv(cfg, render_mode=render_mode, pool=self.pool) for _ in range(num_envs)]
        e0 = self.envs[0]
        self.num_envs = num_envs
        self.single_observation_space = e0.observation_space
        self.single_action_space = e0.action_space
        self.observation_space = batch_space(e0.observation_space, num_envs)
        self.action_space = batch_space(e0.action_space, num_envs)
        self.action_spec = e0.action_spec
        self.action_mask = e0.action_mask
        self.rig = e0.rig
        self._Ks = e0._Ks
        self._seeded = False
        self.autoreset = bool(autoreset)

    @property
    def quarantined(self) -> list[str]:
        """Scenario ids no longer sampled after repeated failures (shared by all sub-envs)."""
        return self.pool.quarantined

    # -- reset -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        N = self.num_envs
        if seed is None and not self._seeded and self.config.seed is not None:
            seed = self.config.seed
        if seed is None or isinstance(seed, int | np.integer):
            seeds = [None if seed is None else derive_seed(int(seed), i) for i in range(N)]
        else:
            seeds = list(seed)
            if len(seeds) != N:
                raise ValueError(f"VectorDrivingEnv.reset: seed must be an int or {N} seeds, got {len(seeds)}")
        super().reset(seed=seeds[0])
        self._seeded = True
        per_env = _split_options(options, N)
        requests, infos_i = [], []
        for i, env in enumerate(self.envs):
            env._seeded = True
            gym.Env.reset(env, seed=seeds[i])  # gymnasium's seeding of the sub-env's generator
            infos_i.append(env._reset_state(per_env[i]))
            requests.append((i, _request(env)))
        reset_infos = dict(enumerate(infos_i))
        self._render_requests(requests, reset_infos=reset_infos)
        infos = merge_infos([reset_infos[i] for i in range(N)], N)
        return self._batch_obs([env._observation for env in self.envs]), infos

    def reset_envs(self, indices, scenarios) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start sub-envs ``indices`` on ``scenarios`` (ids or pool indices, one each), the others untouched;
        their first frames in one render call. Returns the batched observation of all N sub-envs and the
        infos of the reset ones (gymnasium's layout, ``_key`` masks False for the others). A scenario that
        fails to start raises, naming it (the caller asked for it by name)."""
        indices = [int(i) for i in indices]
        scenarios = list(scenarios)
        if len(indices) != len(scenarios):
            raise ValueError(f"VectorDrivingEnv.reset_envs: {len(indices)} indices but {len(scenarios)} scenarios")
        if not self._seeded:
            self.reset(seed=self.config.seed)  # every sub-env seeded once, as a first reset would
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        requests = []
        for i, sc in zip(indices, scenarios):
            env = self.envs[i]
            infos[i] = env._reset_state({"scenario": sc})
            requests.append((i, _request(env)))
        for i, r in requests:  # asked for by name: a failure is the caller's to see, not another scenario's
            if isinstance(r, Exception):
                raise RuntimeError(f"VectorDrivingEnv.reset_envs: {self.pool.record_failure(self.envs[i]._k, r)}")
        good = [(i, r) for i, r in requests if r is not None]
        if good:
            images = render_requests([r for _, r in good], self.rig, self._Ks, self.config.render_backend)
            for (i, _), img in zip(good, images):
                self.envs[i]._set_cameras(img)
        return self._batch_obs([env._observation for env in self.envs]), merge_infos(infos, self.num_envs)

    # -- step ------------------------------------------------------------------------------------
    def step(self, actions):
        N, spec = self.num_envs, self.action_spec
        try:
            a = np.asarray(actions)
        except (ValueError, TypeError) as e:  # ragged or odd objects: say so, not numpy's words alone
            raise ValueError(f"VectorDrivingEnv.step: actions must be [num_envs={N}, 2] integers ({e})") from None
        if a.shape != (N, 2):
            raise ValueError(
                f"VectorDrivingEnv.step: actions must be [num_envs={N}, 2] (lateral index, longitudinal index), "
                f"got shape {a.shape}"
            )
        ok = np.issubdtype(a.dtype, np.integer) and a.dtype != bool
        ok = ok and bool(((a[:, 0] >= 0) & (a[:, 0] < spec.n_lat) & (a[:, 1] >= 0) & (a[:, 1] < spec.n_long)).all())
        if ok:  # the usual case, checked at once; otherwise per env, for a message that names it
            idx = a.astype(np.int64)
        else:
            idx = np.array([check_action(a[i], spec, f"VectorDrivingEnv.step (env {i})") for i in range(N)])
        live = np.array([env._active for env in self.envs])
        if self.autoreset and not live.all():
            i = int(np.argmin(live))
            raise RuntimeError(f"VectorDrivingEnv.step: env {i} has no episode running; call reset() first")
        lat_p, projected = project_feasible(idx[:, 0], idx[:, 1], spec)
        lat_m, long_m = spec.lateral[lat_p], spec.longitudinal[idx[:, 1]]
        new, accel, steer = np.full((N, 4), np.nan), np.zeros(N), np.zeros(N)
        on = np.flatnonzero(live)
        if len(on):
            states = np.stack([self.envs[i]._state for i in on])
            dts = [self.envs[i]._data.dt for i in on]
            wbs = [self.envs[i]._data.wheelbase for i in on]
            try:
                new[on], accel[on], steer[on] = advance(states, lat_m[on], long_m[on], dts, wbs)
            except Exception:  # find whose it is: one env at a time (below)
                pass

        rewards = np.zeros(N)
        terminated = np.zeros(N, dtype=bool)
        truncated = np.zeros(N, dtype=bool)
        step_infos: list[dict] = [{} for _ in range(N)]
        requests = []
        for i, env in enumerate(self.envs):
            if not live[i]:  # autoreset=False: an ended sub-env waits for reset_envs
                continue
            try:
                if not np.isfinite(new[i]).all():
                    one = slice(i, i + 1)
                    d = env._loaded
                    n1, a1, s1 = advance(env._state[None], lat_m[one], long_m[one], [d.dt], [d.wheelbase])
                    new[i], accel[i], steer[i] = n1[0], a1[0], s1[0]
                r, te, tr, info = env._after_dynamics(
                    new[i], float(accel[i]), float(steer[i]), float(lat_m[i]), float(long_m[i]),
                    (int(lat_p[i]), int(idx[i, 1])), bool(projected[i]),
                )  # fmt: skip
                requests.append((i, _request(env)))
            except Exception as e:
                _, r, te, tr, info = env._fail_step(e)
            rewards[i], terminated[i], truncated[i], step_infos[i] = r, te, tr, info
        self._render_requests(requests, step_infos=step_infos, terminated=terminated, truncated=truncated)

        # same-step autoreset: keep the final observation, start the next episode, render it too
        ended = np.flatnonzero(terminated | truncated) if self.autoreset else np.array([], dtype=np.int64)
        final_obs: dict[int, dict] = {}
        reset_infos: dict[int, dict] = {}
        requests = []
        for i in ended:
            env = self.envs[i]
            final_obs[i] = env._obs
            reset_infos[i] = env._reset_state(None)
            requests.append((i, _request(env)))
        if requests:
            self._render_requests(requests, reset_infos=reset_infos)

        per_env = []
        for i in range(N):
            if i in final_obs:
                merged = dict(reset_infos[i])
                for k in STEP_KEYS:
                    if k in step_infos[i]:
                        merged[k] = step_infos[i][k]
                errors = [m for m in (step_infos[i].get("error"), reset_infos[i].get("error")) if m]
                if errors:
                    merged["error"] = " | ".join(errors)
                merged["final_obs"], merged["final_info"] = final_obs[i], step_infos[i]
                per_env.append(merged)
            else:
                per_env.append(step_infos[i])
        infos = merge_infos(per_env, N)
        obs = self._batch_obs([env._observation for env in self.envs])
        return obs, rewards, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode != "rgb_array":
            return None
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs):
        for env in self.envs:
            env.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _render_requests(self, requests, step_infos=None, terminated=None, truncated=None, reset_infos=None) -> None:
        """Render every (env index, request) in one call and hand each env its images.

        If the batched call raises, each request is rendered alone to find the culprit: a failed
        step request ends that env's episode (truncated unless the step terminated it, with
        ``error``; the step's reward and events stand); a failed reset request charges
        the scenario and resets that env to another (rendered alone).
        """
        requests = [(i, r) for i, r in requests if r is not None]
        if not requests:
            return
        good = [r for _, r in requests if not isinstance(r, Exception)]
        try:
            batch = iter(self._render_batch(good)) if good else iter(())
            images = [r if isinstance(r, Exception) else next(batch) for _, r in requests]
        except Exception:
            images = []
            for _, r in requests:
                try:
                    images.append(r if isinstance(r, Exception) else self._render_batch([r])[0])
                except Exception as e:
                    images.append(e)
        for (i, _), img in zip(requests, images):
            env = self.envs[i]
            if not isinstance(img, Exception):
                env._set_cameras(img)
            elif reset_infos is None:
                step_infos[i]["error"] = env._fail_step(img)[4]["error"]
                truncated[i] = not terminated[i]
            else:
                msg = self.pool.record_failure(env._k, img)
                while True:  # another scenario, rendered alone
                    info = env._reset_state(None)
                    try:
                        env._set_cameras(env._render_one(*env._camera_request()))
                        break
                    except Exception as e:
                        msg += " | " + self.pool.record_failure(env._k, e)
                info["error"] = msg + (" | " + info["error"] if "error" in info else "")
                reset_infos[i] = info

    def _render_batch(self, requests) -> np.ndarray:
        """[S, C, H, W, 3] uint8 for S (Composite, viewmats [C, 4, 4], far plane) requests, in one call."""
        return render_requests(requests, self.rig, self._Ks, self.config.render_backend)

    def _batch_obs(self, obs_list: list[dict]) -> dict[str, np.ndarray]:
        return {k: np.stack([o[k] for o in obs_list]) for k in self.single_observation_space.spaces}


def merge_infos(infos: list[dict], n: int) -> dict[str, Any]:
    """gymnasium's vector info layout, as ``VectorEnv._add_info`` builds it value by value: for each
    key, an array over the n sub-envs (numbers and bools by their Python/numpy type, arrays stacked,
    anything else in an object array, nested dicts likewise) and a ``_key`` bool mask of the
    sub-envs that have it; ``final_obs`` is an object array of observation dicts. Built one key at
    a time (a vector step's infos have some 20 keys; per-value insertion cost more than the step)."""
    out: dict[str, Any] = {}
    keys: dict[str, None] = dict.fromkeys(infos[0]) if infos else {}
    same = all(info.keys() == keys.keys() for info in infos)  # the usual case: one layout
    if not same:
        for info in infos:
            keys.update(dict.fromkeys(info))
    for k in keys:
        arr: dict[str, Any] | np.ndarray
        if same:
            have = np.ones(n, dtype=bool)
            vals = [info[k] for info in infos]
            first = vals[0]
        else:
            have = np.array([k in info for info in infos], dtype=bool)
            vals = [info.get(k) for info in infos]
            first = vals[int(np.argmax(have))]
        if isinstance(first, dict) and k != "final_obs":
            arr = merge_infos([v if h else {} for v, h in zip(vals, have)], n)
        elif k != "final_obs" and (type(first) in (int, float, bool) or isinstance(first, np.number)):
            dtype = type(first)
            arr = np.array(vals, dtype=dtype) if have.all() else _fill(np.zeros(n, dtype=dtype), vals, have)
        elif k != "final_obs" and isinstance(first, np.ndarray):
            if have.all() and all(v.shape == first.shape for v in vals):
                arr = np.stack(vals).astype(first.dtype, copy=False)
            else:
                arr = _fill(np.zeros((n, *first.shape), dtype=first.dtype), vals, have)
        elif same and all(isinstance(v, str) for v in vals):
            arr = np.array(vals, dtype=object)
        else:
            arr = _fill(np.full(n, None, dtype=object), vals, have)
        out[k], out[f"_{k}"] = arr, have
    return out


def _fill(arr: np.ndarray, vals: list, have: np.ndarray) -> np.ndarray:
    for i in np.flatnonzero(have):
        arr[i] = vals[i]
    return arr


def _request(env: DrivingEnv):
    """The env's camera request, or the exception that building it raised (charged later)."""
    try:
        return env._camera_request()
    except Exception as e:
        return e


def _split_options(options: dict | None, n: int) -> list[dict | None]:
    """Per-env reset options: ``{"scenario": x}`` for all, or ``{"scenario": [x0, ..., xN-1]}``."""
    if not options:
        return [None] * n
    sc = options.get("scenario")
    if isinstance(sc, list | tuple):
        if len(sc) != n:
            raise ValueError(f"VectorDrivingEnv.reset: options['scenario'] must be one id or {n} of them")
        return [{**options, "scenario": s} for s in sc]
    return [options] * n
