"""The training run's stages as the driver runs them: the demonstrations, the periodic evaluation, stage
perception (RAD's stage 1), stage il (imitation, then DAgger rounds), stage rl (the critic's warm-up, PPO +
IL rounds, the choice of the final policy on the eval suite). A mixin of ``learner.train.Trainer``: these
methods use the run's store, groups and tracker that the trainer sets up (``build``, ``open_store``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from envs.demos import expert_demonstrations
from envs.suite import resolve_scenarios
from envs.vector import VectorDrivingEnv
from evaluation.metrics import rad_metrics
from learner import checkpoint as ckpt_io
from learner import dagger
from learner.config import TrainConfig
from learner.group import LearnerGroup
from learner.learner import DemoParts, Demos, ImitationData
from learner.perception import (
    lease_owner,
    metrics_table,
    perception_run_name,
    plot_curve,
    run_stage,
    with_encoder,
)
from learner.tracking import Tracker
from policy.network import ActorCritic
from rollout.episodes import Extra, run_episodes
from rollout.fragment import stack_time
from rollout.group import RolloutGroup
from rollout.teachers import make_teacher
from rollout.worker import to_torch
from scenarios.builtin import is_builtin_spec, parse_spec
from sim.configs import to_dict
from store import CheckpointStore

log = logging.getLogger("learner.train")


def il_snapshot_name(run: str) -> str:
    """The run that keeps a run's policy as it was at the end of stage il."""
    return f"{run}-il"


class Stages:
    """The stage loops of :class:`learner.train.Trainer` (see the module docstring). What they use of the
    trainer is declared here; ``Trainer`` sets it up."""

    cfg: TrainConfig
    name: str
    folder: Path
    tracker: Tracker
    store: CheckpointStore
    selection: dagger.BestOfLast
    make_policy: Callable[[], ActorCritic]
    demos_skipped: dict[str, str]
    quarantined: dict[str, str]
    _teacher: Extra | None = None  # il.teacher, made on the first DAgger round
    scenario_failures: int
    side_leases: list
    perception: dict | None
    dagger_data: dagger.Labelled | None
    _eval_env: VectorDrivingEnv | None

    @property
    def learner_group(self) -> LearnerGroup:
        raise NotImplementedError

    @property
    def rollout_group(self) -> RolloutGroup:
        raise NotImplementedError

    def checkpoint(self, state: ckpt_io.TrainState, reason: str, snapshot_run: str | None = None) -> None:
        raise NotImplementedError

    def _set_stage_settings(self, state: ckpt_io.TrainState) -> None:
        raise NotImplementedError

    # -- demonstrations and evaluation -------------------------------------------------------------
    def demo_source(self):
        """The clips the demonstrations follow: every training clip, or with cameras the first ``il.demo_clips``
        (a built-in suite as its prefix spec, which builds only the shards that hold it)."""
        suite, n = self.cfg.suite, self.cfg.il.demo_clips
        if not self.cfg.env.cameras or n == 0:
            return suite
        if is_builtin_spec(suite):
            name, count = parse_spec(suite)
            return f"{name}:{min(n, count or n)}"
        return resolve_scenarios(suite)[:n]

    def demos(self) -> Demos:
        t0 = time.perf_counter()
        d = expert_demonstrations(self.demo_source(), to_dict(self.cfg.env))
        self.tracker.progress(
            f"demonstrations: {len(d):,} expert frames from {d.num_scenarios} scenarios "
            f"({time.perf_counter() - t0:.1f} s)"
        )
        for sid, err in d.skipped.items():
            self.demos_skipped[sid] = err
            log.error("demonstrations: left out broken scenario %r: %s", sid, err)
            self.tracker.progress(f"demonstrations: left out broken scenario {sid!r}")
        return self.as_grids(Demos.of(d))

    def as_grids(self, d: Demos) -> Demos:
        """Imitation data with a frozen lift's BEV grid in place of its images (``learner.dagger.as_grids``:
        computed once, 32 KB a state in place of ~150 KB); ``d`` as it is for any other policy."""
        if "cameras" not in d.obs:
            return d
        net = self.make_policy()
        if net.frozen_grid_shape() is None:
            return d
        net.load_state_dict(self.learner_group.weights())
        net.eval()
        return dagger.as_grids(d, net)

    def evaluate(self, state: ckpt_io.TrainState, label: str) -> dict:
        """The current policy, deterministic, over every clip of ``eval.suite`` (in this process, by the
        rollout runner); the metrics are logged, kept in ``state`` and returned."""
        policy = self.make_policy()
        policy.load_state_dict(self.learner_group.weights())
        policy.eval()

        @torch.no_grad()
        def act(obs, infos):
            return policy.act(to_torch(obs), deterministic=True).action.numpy()

        t0 = time.perf_counter()
        if self._eval_env is None:
            scen = resolve_scenarios(self.cfg.eval.suite)
            n = max(1, min(self.cfg.eval.num_envs, len(scen)))
            self._eval_env = VectorDrivingEnv(scen, n, to_dict(self.cfg.env), autoreset=False)
        venv = self._eval_env
        records = run_episodes(act, venv, venv.pool.ids)
        m = rad_metrics(records)
        m["seconds"] = time.perf_counter() - t0
        row = dict(label=label, stage=state.stage, iteration=state.iteration, env_steps=state.env_steps, **m)
        state.history.append(row)
        state.last_eval = m
        step = state.env_steps + state.il_steps
        self.tracker.log(step, {f"val/{k}": v for k, v in m.items() if isinstance(v, int | float)})
        self.tracker.progress(
            f"eval [{label}] on {self.cfg.eval.suite}: CR {m['CR']:.3f} (DCR {m['DCR']:.3f}, SCR {m['SCR']:.3f}) "
            f"DR {m['DR']:.3f} ADD {m['ADD']:.3f} success {m['success_rate']:.2f} "
            f"({m['n']} clips, {m['seconds']:.0f} s)"
        )
        return m

    # -- stages ------------------------------------------------------------------------------------
    def stage_perception(self, state: ckpt_io.TrainState) -> None:
        """RAD's stage 1 (``learner.perception``): frames of the training clips rendered once into the
        frame cache, the camera encoder and its BEV heads trained on them (checkpointed every epoch to
        the store run ``<run>-perception``, resumed there), metrics on ``eval.suite``'s frames; the
        encoder then goes into the policy, and the run's checkpoint marks the stage done."""
        cfg = self.cfg
        rs = self.store.run(perception_run_name(self.name, cfg.perception.run))
        lease = rs.acquire(lease_owner())  # its own lease (pruning old epochs needs one), kept fresh with ours
        self.side_leases.append(lease)

        def curve(epoch: int, row: dict) -> None:  # training loss and val point of each epoch, step = epoch
            self.tracker.log(epoch, {f"perception/epoch/{k}": v for k, v in row.items()})

        try:
            result, info = run_stage(
                cfg.perception, cfg.policy, cfg.env, cfg.suite, cfg.eval.suite, seed=cfg.seed, run_store=rs,
                progress=self.tracker.progress,
                on_epoch=curve,
            )  # fmt: skip
        finally:
            self.side_leases.remove(lease)
            lease.release()
        learners = self.learner_group
        learners.load_state({"policy": with_encoder(learners.weights(), result.encoder)})
        self.perception = dict(
            metrics=result.metrics,
            epochs=result.epochs,
            train_frames_per_s=result.frames_per_s,
            history=result.history,
            store=f"{rs.uri}",
            **info,
        )
        if result.metrics:
            row = {f"perception/{k}": v for k, v in result.metrics["all"].items() if isinstance(v, int | float)}
            self.tracker.log(0, row)
            table = metrics_table(result.metrics)
            (self.folder / "perception.md").write_text(f"# Stage perception on {cfg.eval.suite}\n\n{table}\n")
        plot_curve(result.history, self.folder / "perception-curve.png")  # the val curve, epoch by epoch
        state.stage = "il" if "il" in cfg.stages else "done"
        self.checkpoint(state, "end of stage perception")

    def stage_il(self, state: ckpt_io.TrainState, demos) -> None:
        cfg = self.cfg
        n_it = cfg.il.pretrain_iterations
        if state.il_iteration == 0:
            # once per run: a resumed run's checkpoint holds the statistics with the demonstrations in
            self.learner_group.merge_obs_stats(demos)
        while state.il_iteration < n_it:
            t0 = time.perf_counter()
            m = self.learner_group.update_il(demos, cfg.il.steps_per_iteration)
            state.il_iteration += 1
            state.version += 1
            state.il_steps += cfg.il.steps_per_iteration * cfg.il.batch_size
            m["charts/il_seconds"] = time.perf_counter() - t0
            self.tracker.log(state.il_steps, m)
            if state.il_iteration % 10 == 0 or state.il_iteration == n_it:
                self.tracker.progress(
                    f"IL {state.il_iteration}/{n_it} | loss {m.get('losses/il_loss', float('nan')):.3f} | "
                    f"acc lat {m.get('il/accuracy_lat', 0):.2f} long {m.get('il/accuracy_long', 0):.2f}"
                )
            if state.il_iteration % cfg.store.checkpoint_every == 0 and state.il_iteration < n_it:
                self.checkpoint(state, "periodic")
        while state.dagger_round < cfg.il.dagger_rounds:
            self.dagger_round(state, demos)
        state.il_eval = self.evaluate(state, "il")
        state.stage = "rl" if "rl" in cfg.stages else "done"
        self._set_stage_settings(state)
        self.checkpoint(state, "end of stage il", snapshot_run=il_snapshot_name(self.name))

    def imitation_data(self, demos: Demos | None) -> ImitationData | None:
        """What IL learns from: the expert's own states, and the states DAgger labelled (when it ran), sampled
        side by side (``DemoParts``: no concatenated copy of the labelled states' images)."""
        labelled = self.dagger_data.rounds if self.dagger_data else []
        return DemoParts.of(([demos] if demos is not None else []) + labelled)

    def dagger_round(self, state: ckpt_io.TrainState, demos: Demos) -> None:
        """One DAgger round (``learner.dagger``): the policy drives ``il.dagger_steps`` env-steps, ``il.teacher``
        (the reactive expert, or a privileged policy: stage distill) labels every state it visits, the labels join
        the data, then ``il.dagger_iterations`` IL iterations on the expert's states and all the labelled ones."""
        cfg, il = self.cfg, self.cfg.il
        t0 = time.perf_counter()
        self.rollout_group.set_weights(state.version, self.learner_group.weights())
        if self._teacher is None:  # resolved once: a policy teacher's checkpoint is verified here
            self._teacher = make_teacher(il.teacher, il.labeller)
        new, m = dagger.collect(
            self.rollout_group, il.dagger_steps, cfg.rollout.fragment_length, cfg.rollout.timeout_s, self._teacher
        )
        new = self.as_grids(new)
        self.learner_group.merge_obs_stats(new)  # the visited states join the statistics once, as demos did
        if self.dagger_data is None:
            self.dagger_data = dagger.Labelled()
        self.dagger_data.add(new, il.dagger_max)
        data = self.imitation_data(demos)
        assert data is not None
        for _ in range(il.dagger_iterations):
            m.update(self.learner_group.update_il(data, il.steps_per_iteration))
            state.version += 1
            state.il_steps += il.steps_per_iteration * il.batch_size
        state.dagger_round += 1
        m["dagger/aggregated"] = float(len(self.dagger_data))
        m["charts/dagger_seconds"] = time.perf_counter() - t0
        self.tracker.log(state.il_steps, m)
        self.tracker.progress(
            f"DAgger {state.dagger_round}/{il.dagger_rounds} | {len(self.dagger_data):,} labelled states | policy = "
            f"expert on {m['dagger/agreement']:.0%} of its own | episodes failed {m['dagger/failure_rate']:.0%} | "
            f"IL loss {m.get('losses/il_loss', float('nan')):.3f}"
        )
        self.checkpoint(state, f"DAgger round {state.dagger_round}")

    def _is_il_round(self, state: ckpt_io.TrainState) -> bool:
        il = self.cfg.il
        if il.mode != "alternate" or il.il_rounds == 0:
            return False
        return state.rounds % (il.rl_rounds + il.il_rounds) >= il.rl_rounds

    def stage_rl(self, state: ckpt_io.TrainState, demos) -> None:
        cfg = self.cfg
        T = cfg.rollout.fragment_length
        ep_window: list[dict] = []
        if cfg.eval.select_start and state.iteration == 0 and state.warmup == 0 and self.selection.start is None:
            # the policy as stage rl gets it (eval.select_start): a candidate for the run's final policy
            m = state.il_eval or self.evaluate(state, "il")
            self.selection.offer_start("il", m, self.learner_group.weights())
        while state.warmup < cfg.ppo.critic_warmup and state.iteration == 0:
            # the critic learns the IL policy's returns before any policy update: PPO's first advantages are then
            # measured against a value function, not an untrained head's noise
            t0 = time.perf_counter()
            self.rollout_group.set_weights(state.version, self.learner_group.weights())
            frags = self.rollout_group.sample(T, timeout_s=cfg.rollout.timeout_s)
            m = self.learner_group.update_rl(stack_time(frags), critic_only=True)
            self._note_failures(frags)
            state.warmup += 1
            state.version += 1
            # counted apart: env_steps are the RL iterations' (warm-up steps = warmup x fragment x envs)
            m["charts/warmup_env_steps"] = float(sum(f.env_steps for f in frags))
            m["charts/warmup_seconds"] = time.perf_counter() - t0
            self.tracker.log(state.env_steps, m)
            self.tracker.progress(
                f"critic warm-up {state.warmup}/{cfg.ppo.critic_warmup} | value loss "
                f"{m.get('losses/value_loss', float('nan')):.4f} | explained variance "
                f"{m.get('losses/explained_variance', float('nan')):+.2f}"
            )
        while state.iteration < cfg.iterations:
            if self._is_il_round(state) and demos is not None:
                t0 = time.perf_counter()
                m = self.learner_group.update_il(demos, cfg.il.steps_per_iteration)
                state.rounds += 1
                state.version += 1
                state.il_steps += cfg.il.steps_per_iteration * cfg.il.batch_size
                m["charts/il_seconds"] = time.perf_counter() - t0
                self.tracker.log(state.env_steps + state.il_steps, m)
                continue
            t0 = time.perf_counter()
            self.rollout_group.set_weights(state.version, self.learner_group.weights())
            frags = self.rollout_group.sample(T, timeout_s=cfg.rollout.timeout_s)
            t_roll = time.perf_counter() - t0
            batch = stack_time(frags)
            steps = sum(f.env_steps for f in frags)
            t1 = time.perf_counter()
            m = self.learner_group.update_rl(batch, demos if cfg.il.mode == "weighted" else None)
            t_learn = time.perf_counter() - t1
            state.iteration += 1
            state.rounds += 1
            state.version += 1
            state.env_steps += steps
            episodes = [e for f in frags for e in f.episodes]
            ep_window = (ep_window + episodes)[-200:]
            m.update(self._episode_metrics(episodes, ep_window))
            lag = state.version - 1 - min(f.policy_version for f in frags)
            m.update(
                {
                    "charts/SPS": steps / max(t_roll + t_learn, 1e-9),
                    "charts/rollout_SPS": steps / max(t_roll, 1e-9),
                    "charts/rollout_seconds": t_roll,
                    "charts/learn_seconds": t_learn,
                    "charts/policy_lag": float(lag),
                    "charts/actor_restarts": float(self.rollout_group.restarts),
                    "charts/iteration": float(state.iteration),
                }
            )
            self._note_failures(frags)
            m["charts/scenario_failures"] = float(sum(len(f.errors) for f in frags))
            m["charts/quarantined_scenarios"] = float(len(self.quarantined))
            self.tracker.log(state.env_steps, m)
            ret = m.get("charts/episodic_return")
            coll = m.get("charts/collision_rate")
            self.tracker.progress(
                f"it {state.iteration}/{cfg.iterations} | {state.env_steps:,} steps | "
                f"{m['charts/SPS']:.1f} steps/s (rollout {m['charts/rollout_SPS']:.1f}) | "
                f"return {'n/a' if ret is None else f'{ret:+.2f}'} | "
                f"collisions {'n/a' if coll is None else f'{coll:.0%}'} | restarts {self.rollout_group.restarts}"
            )
            if cfg.eval.every and state.iteration % cfg.eval.every == 0 and state.iteration < cfg.iterations:
                m = self.evaluate(state, f"rl@{state.iteration}")
                self.selection.offer(f"rl@{state.iteration}", m, self.learner_group.weights())
            if state.iteration % cfg.store.checkpoint_every == 0 and state.iteration < cfg.iterations:
                self.checkpoint(state, "periodic")
        self.selection.offer("rl+il", self.evaluate(state, "rl+il"), self.learner_group.weights())
        self.select(state)
        state.stage = "done"
        self.checkpoint(state, "end of stage rl")

    def select(self, state: ckpt_io.TrainState) -> None:
        """The run reports the best policy of its last ``eval.select_last`` evaluations on ``eval.suite`` by
        ``eval.select_metric`` (``learner.dagger.BestOfLast``; after a resume, of those since it), not its last."""
        label, metrics, weights = self.selection.best()
        kept = [lab for lab, _, _ in self.selection.candidates]
        if label != kept[-1]:
            self.learner_group.load_state({"policy": weights})
        state.selected, state.last_eval = label, metrics
        key = self.cfg.eval.select_metric
        self.tracker.progress(
            f"final policy: {label} (best {key} {metrics.get(key, float('nan')):.3f} on {self.cfg.eval.suite} among "
            f"{', '.join(kept)})"
        )

    def _note_failures(self, frags) -> None:
        """Log the rollouts' scenario failures, and name each newly quarantined scenario once."""
        for f in frags:
            self.scenario_failures += len(f.errors)
            for err in f.errors:
                log.warning("scenario failure in rollout: %s", err)
            for sid in f.quarantined:
                if sid in self.quarantined:
                    continue  # (a replaced actor finds it again: named once)
                last = next((e for e in reversed(f.errors) if f"scenario {sid!r}" in e), "see the actor's log")
                self.quarantined[sid] = last
                log.error("scenario %r quarantined after repeated failures (no longer sampled); last: %s", sid, last)
                self.tracker.progress(f"quarantined scenario {sid!r} after repeated failures")

    @staticmethod
    def _episode_metrics(episodes: list[dict], window: list[dict]) -> dict:
        out: dict[str, float] = {}
        if episodes:
            out["charts/episodic_return"] = float(np.mean([e["ret"] for e in episodes]))
            out["charts/episodic_length"] = float(np.mean([e["length"] for e in episodes]))
            out["charts/return_lateral"] = float(np.mean([e["ret_lateral"] for e in episodes]))
            out["charts/return_longitudinal"] = float(np.mean([e["ret_longitudinal"] for e in episodes]))
            for term in (
                "dynamic_collision",
                "static_collision",
                "position_deviation",
                "heading_deviation",
                "progress_deviation",
            ):
                out[f"charts/return_{term}"] = float(np.mean([e["terms"].get(term, 0.0) for e in episodes]))
        if window:
            coll = [e["event"] in ("dynamic_collision", "static_collision") for e in window]
            out["charts/collision_rate"] = float(np.mean(coll))
            out["charts/deviation_rate"] = float(
                np.mean([e["event"] in ("position_deviation", "heading_deviation") for e in window])
            )
            out["charts/progress_deviation_rate"] = float(np.mean([e["event"] == "progress_deviation" for e in window]))
        return out
