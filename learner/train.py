"""``python -m learner.train``: the training driver, and the Ray job entrypoint.

    python -m learner.train                                    # the default: perception, IL, PPO+IL
    python -m learner.train --run my-run rollout.num_actors=4 iterations=200
    python -m learner.train stage=il+rl env.observation=privileged env.cameras=false   # a state teacher
    python -m learner.train --config run.yaml --store s3://bucket/runs
    ray job submit --working-dir . -- python -m learner.train --store s3://bucket/runs --run r1

RAD's three stages, ``stage=perception+il+rl`` (the default) in one run, each checkpointed through
the store and never redone on a resume: **perception** (``learner.perception``) trains the camera
encoder and BEV heads to see the agents and the map from frames rendered once into a checksummed
cache, labelled by the digital twin's ground truth; **il** trains the planner to imitate the expert
on demonstrations, the perception encoder frozen (``perception.freeze``); **rl** is PPO + IL, the
encoder still frozen. The policy observes ``env.observation=camera`` (images, its own motion,
navigation from the map) unless ``env.observation=privileged`` (ground truth: a teacher).

One iteration: policy weights to the rollout actors (one ``ray.put``), fixed-length fragments back
(``ray.wait``), GAE per reward part, PPO epochs on the learner(s); IL rounds on demonstrations
rendered along the experts' paths alternate with RL rounds (RAD's 4:1) or join them as a weighted
sum. Checkpoints go to the store in the background every ``checkpoint_every`` iterations;
rerunning the same ``--run`` resumes from the latest committed one (weights, optimizer, RNG,
counters); a second driver on the same run is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from envs.vector import VectorDrivingEnv
from learner import checkpoint as ckpt_io
from learner import dagger
from learner.config import SELECT_METRICS, TrainConfig
from learner.group import LearnerGroup
from learner.learner import LearnerSettings, NonFiniteLoss
from learner.perception import perception_run_name
from learner.stages import Stages, il_snapshot_name
from learner.tracking import Tracker, closing_lines, run_folder
from policy.network import policy_changes, upgrade_policy_config
from rollout.cluster import connect
from rollout.group import ActorResources, RolloutGroup
from rollout.worker import WorkerSpec, build_env, build_policy
from sim.configs import ConfigError, from_dict, parse_cli, to_dict
from sim.rendering import backend_report
from store import AsyncCommitter, CheckpointStore, Lease, RetryPolicy, Reuse, RunLocked, parse_ref

log = logging.getLogger("learner.train")

HEARTBEAT_S = 10.0  # lease refresh period (the store's lease timeout is 60 s)
CLOSE_TIMEOUT_S = 600.0  # longest wait for pending checkpoints at exit (the store may be down)


@dataclass
class TrainResult:
    run: str
    folder: Path
    store_uri: str
    state: ckpt_io.TrainState
    last_version: int | None
    perception: dict | None = None  # stage perception's val metrics and figures (None: no such stage)


def config_changes(before: dict, after: dict, prefix: str = "") -> list[str]:
    """``key: old -> new`` for every dotted key whose value differs between two ``to_dict`` trees."""
    out = []
    for k in sorted(set(before) | set(after)):
        a, b = before.get(k), after.get(k)
        if isinstance(a, dict) and isinstance(b, dict) and a and b:
            out += config_changes(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return out


def saved_config(saved: dict) -> dict:
    """A checkpoint's config.json with its ``policy`` read as the network it was built as (the settings it
    predates filled in by policy.network.upgrade_policy_config, not by today's defaults)."""
    if isinstance(saved.get("policy"), dict):
        saved = {**saved, "policy": upgrade_policy_config(saved["policy"])}
    return saved


def default_run_name() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S")


def learner_settings(cfg: TrainConfig, total_updates: int, lr: float) -> LearnerSettings:
    """The learner's settings for a stage (learning rate ``lr``, schedule over ``total_updates``
    optimizer steps): the run's ``ppo`` and ``il`` sections as they are, with the stage's rate and horizon."""
    return LearnerSettings(
        ppo=cfg.ppo,
        il=cfg.il,
        lr=lr,
        total_updates=max(1, total_updates),
        seed=cfg.seed,
        device="cuda" if cfg.gpus_per_learner > 0 else "cpu",
    )


class Trainer(Stages):
    """One training run; ``run()`` does it all. Split in methods so tests can drive parts of it."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.name = cfg.run or default_run_name()
        # tracking files: <store>/<run>/tracking/ through a local working copy, or <tracking.out>/<run>/
        self.folder, self.tracking = run_folder(cfg.tracking.out, cfg.store.uri, self.name)
        self.config_dict = to_dict(dataclasses.replace(cfg, run=self.name))
        # None until build() / open_store(); close() shuts down what there is
        self.group: RolloutGroup | None = None  # only with stage rl
        self.learners: LearnerGroup | None = None
        self.lease: Lease | None = None
        self.committer: AsyncCommitter | None = None
        self._ray_started = False
        # Broken scenarios, named in the logs, the metrics and summary.json: {scenario id: last error}
        self.quarantined: dict[str, str] = {}  # no longer sampled by the rollout actors
        self.demos_skipped: dict[str, str] = {}  # left out of the demonstrations
        self.scenario_failures = 0  # failure reports from rollouts (a failed episode, or a reset that charged some)
        self.side_leases: list = []  # leases beside the run's, kept fresh by the same heartbeat (perception run)
        self.perception: dict | None = None  # stage perception's metrics, this call or read back from its run
        self._eval_env: VectorDrivingEnv | None = None  # the periodic evaluation's envs, built once
        self.dagger_data: dagger.Labelled | None = None  # the labelled states DAgger aggregated, checkpointed
        sign = SELECT_METRICS[cfg.eval.select_metric]
        self.selection = dagger.BestOfLast(cfg.eval.select_last, cfg.eval.select_metric, sign)  # stage rl's

    @property
    def learner_group(self) -> LearnerGroup:
        """The learners, once build() made them."""
        if self.learners is None:
            raise RuntimeError("Trainer: no learner group yet; call build() first")
        return self.learners

    @property
    def rollout_group(self) -> RolloutGroup:
        """The rollout actors, once build() made them (stage rl only)."""
        if self.group is None:
            raise RuntimeError("Trainer: no rollout group; build() makes one when cfg.stages has rl")
        return self.group

    @property
    def async_committer(self) -> AsyncCommitter:
        """The run's background committer, once open_store() made it."""
        if self.committer is None:
            raise RuntimeError("Trainer: no checkpoint committer yet; call open_store() first")
        return self.committer

    # -- set-up ------------------------------------------------------------------------------------
    def open_store(self):
        self.store = CheckpointStore(self.cfg.store.uri)
        self.rs = self.store.run(self.name)
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease = self.rs.acquire(owner)  # RunLocked if another driver writes this run
        self._beating = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True)
        self._beat.start()
        self.rs.cleanup()  # half-written versions of a crashed earlier driver
        self.committer = AsyncCommitter(self.rs, max_pending=2, on_commit=self._on_commit)

    def _heartbeat(self) -> None:
        """Keep the run lease fresh through long phases (demonstrations, evaluation) as well."""
        while not self._beating.wait(HEARTBEAT_S):
            for lease in [self.lease, *self.side_leases]:
                try:
                    lease.heartbeat()
                except Exception as e:  # LeaseLost surfaces at the next commit; keep beating otherwise
                    log.warning("lease heartbeat failed: %s", e)

    def _on_commit(self, version: int, meta: dict) -> None:
        log.info("checkpoint %d committed to %s", version, self.rs.uri)
        try:
            self.rs.retain(self.cfg.store.keep_last, keep_best=1, metric="val/CR", mode="min")
        except Exception as e:  # retention is housekeeping: never fatal
            log.warning("retention failed: %s", e)

    def worker_spec(self, num_envs: int) -> WorkerSpec:
        return WorkerSpec(
            scenarios=(self.cfg.suite,),
            env_config=to_dict(self.cfg.env),
            policy_config=to_dict(self.cfg.policy),
            num_envs=num_envs,
            seed=self.cfg.seed,
            threads=self.cfg.rollout.threads_per_actor,
        )

    def build(self) -> None:
        cfg = self.cfg
        r = cfg.rollout
        # rollout actors drive for stage rl, and for DAgger in stage il
        needs_rollouts = "rl" in cfg.stages or ("il" in cfg.stages and cfg.il.dagger_rounds > 0)
        if (needs_rollouts and r.num_actors > 0) or cfg.num_learners > 1 or cfg.learner_resources:
            self._ray_started = connect(cfg.ray_address, cfg.ray_num_cpus)
        spec = self.worker_spec(r.envs_per_actor)
        if needs_rollouts:
            self.group = RolloutGroup(
                spec, r.num_actors, ActorResources(r.cpus_per_actor, r.gpus_per_actor, r.max_restarts, r.resources)
            )
            obs_space, action_spec, rig = self.group.observation_space(), self.group.action_spec(), self.group.rig()
        else:
            env = build_env(spec, num_envs=1)
            obs_space, action_spec = env.single_observation_space, env.action_spec
            rig = (env.rig.name, env.rig.width, env.rig.height)
            env.close()
        self.obs_space, self.action_spec, self.rig = obs_space, action_spec, rig
        policy_config = to_dict(cfg.policy)
        self.frozen = frozen = self._cameras_frozen()

        def make_policy():
            net = build_policy(obs_space, action_spec, policy_config)
            if frozen:  # stages il and rl train the planner; the perception encoder stays as it learned
                net.freeze_cameras()
            return net

        self.make_policy = make_policy
        if "il" in cfg.stages and cfg.il.dagger_rounds > 0:  # refused here, not hours later by the kernel
            soft_bins = 0 if cfg.il.teacher == "reactive" else action_spec.n_long + action_spec.n_lat
            il = cfg.il
            grid = make_policy().frozen_grid_shape()  # kept in place of the images (learner.dagger.as_grids)
            plan = dagger.memory_plan(obs_space, il.dagger_rounds, il.dagger_steps, il.dagger_max, soft_bins, grid=grid)
            self.tracker.progress(plan)
        total = (
            self._rl_updates_total()
            if cfg.stages == ("rl",)
            else cfg.il.pretrain_iterations * cfg.il.steps_per_iteration
        )
        self.learners = LearnerGroup(
            make_policy,
            learner_settings(cfg, total, cfg.il.lr),
            cfg.num_learners,
            cfg.gpus_per_learner,
            resources=cfg.learner_resources,
        )

    def _cameras_frozen(self) -> bool:
        """Stages il and rl keep the camera encoder frozen (``perception.freeze``) when stage perception
        trained it: this run's, or, for stage rl alone, the ``init_from`` run's."""
        cfg = self.cfg
        if not cfg.perception.freeze or "cameras" not in self.obs_space.spaces:
            return False
        if "perception" in cfg.stages:
            return True
        if cfg.stages == ("rl",) and cfg.init_from:
            try:
                run, version = parse_ref(cfg.init_from)
                rs = self.store.run(run)
                ck = rs.load(version) if version is not None else rs.load_latest()
                stage = "" if ck is None else str(json.loads(ck.files["config.json"]).get("stage", ""))
            except Exception:  # a bad init_from is reported, with its reason, when the weights are loaded
                return False
            return "perception" in stage.split("+")
        return False

    def record_provenance(self) -> None:
        """Write what runs where into the run's provenance (run.json, TensorBoard text): the render
        backend each rendering process actually uses (the rollout actors; the driver, which renders the
        demonstrations and evaluations) and where the learners run and how they rendezvoused."""
        requested = self.cfg.env.render_backend
        render: dict = dict(requested=requested, cameras=self.cfg.env.cameras)
        if render["cameras"]:
            render["driver"] = backend_report(requested)
            if self.group is not None:  # asked inside each actor: its own CUDA, its own gsplat
                render["rollout_actors"] = self.group.render_reports(requested)
        self.tracker.provenance("render", render)
        self.tracker.provenance("learners", self.learner_group.describe())
        reports = [render["driver"], *render.get("rollout_actors", [])] if render["cameras"] else []
        used = sorted({rep["used"] for rep in reports})
        line = f"render backend {requested!r} -> {', '.join(used) or 'none (env.cameras=false)'}"
        fallbacks = [rep for rep in reports if rep.get("fallback")]
        if fallbacks:
            line += f" (FALLBACK from the GPU in {len(fallbacks)} process(es): {fallbacks[0]['reason']})"
        elif any("reason" in rep for rep in reports):
            line += f" ({next(rep['reason'] for rep in reports if 'reason' in rep)})"
        self.tracker.progress(line)

    def _rl_updates_total(self) -> int:
        """Optimizer steps of stage rl, the LR schedule's horizon: the critic's warm-up and the RL iterations
        (epochs x minibatches each) and the IL rounds that really run between them (RAD's alternation: il_rounds
        after every rl_rounds RL iterations but the last)."""
        cfg = self.cfg
        il = cfg.il
        il_rounds = 0
        if il.mode == "alternate" and il.il_rounds and cfg.iterations:
            il_rounds = il.il_rounds * ((cfg.iterations - 1) // il.rl_rounds)
        ppo_steps = (cfg.ppo.critic_warmup + cfg.iterations) * cfg.ppo.epochs * cfg.ppo.minibatches
        return ppo_steps + il_rounds * il.steps_per_iteration

    # -- checkpoints -------------------------------------------------------------------------------
    def checkpoint(self, state: ckpt_io.TrainState, reason: str, snapshot_run: str | None = None) -> None:
        """Commit a checkpoint in the background. ``snapshot_run``: also commit it, now, as the newest
        version of that run in the same store (the IL policy is kept as ``<run>-il`` so that it
        survives retention and can be evaluated beside the final one, or be stage rl's ``init_from``;
        without DAgger's data, which only this run's resume reads: 3.6 GB of images after 12 camera rounds)."""
        lstate = self.learner_group.state()
        files: dict[str, bytes | Reuse] = dict(
            ckpt_io.encode(
                lstate,
                state,
                self.config_dict,
                observation_space=self.obs_space,
                action_spec=self.action_spec,
                rig=self.rig,
            )
        )
        if self.dagger_data is not None:
            files.update(self.dagger_data.files())  # only rounds no checkpoint holds yet are serialised
        metrics = {}
        if state.last_eval:
            metrics = {f"val/{k}": v for k, v in state.last_eval.items() if isinstance(v, int | float)}
        meta = dict(
            stage=state.stage,
            iteration=state.iteration,
            il_iteration=state.il_iteration,
            env_steps=state.env_steps,
            version=state.version,
            reason=reason,
            metrics=metrics,
        )
        self.async_committer.submit(files, meta)
        if snapshot_run:
            # A short retry: while the store is down the copy is given up after ~10 s rather than
            # holding training up for the store's full retry budget.
            quick = copy.copy(self.store)
            quick.retry = RetryPolicy(max_attempts=3, total_timeout=10.0)
            try:
                policy_files = {k: v for k, v in files.items() if not dagger.is_dagger_file(k)}
                v = quick.run(snapshot_run).commit(policy_files, dict(meta, snapshot_of=self.name))
                self.tracker.progress(f"IL policy kept as {self.store.uri}/{snapshot_run}@{v}")
            except Exception as e:  # a convenience copy: the main run's checkpoint has it too
                log.warning("could not keep the IL policy as run %s: %s", snapshot_run, e)

    def restore(self) -> ckpt_io.TrainState:
        cfg = self.cfg
        latest = self.rs.load_latest()
        if latest is not None:
            lstate, state, rng, saved = ckpt_io.decode(latest.files)
            self._compare_config(saved, latest.version)
            self.dagger_data = dagger.Labelled.from_files(latest.files)
            self.learner_group.load_state(lstate)
            if self.dagger_data is not None:  # a checkpoint written before the grids holds the rounds' images
                self.dagger_data.convert(self.as_grids)
            self._set_stage_settings(state)
            ckpt_io.restore_rng(rng)
            if state.stage == "done" and "rl" in cfg.stages and state.iteration < cfg.iterations:
                state.stage = "rl"  # asked for more iterations than the finished run had: go on
                self._set_stage_settings(state)
            elif state.stage == "done" and cfg.stages[-1] == "il" and state.dagger_round < cfg.il.dagger_rounds:
                state.stage = "il"  # a finished imitation run asked for more DAgger rounds: go on
                self._set_stage_settings(state)
            log.info("resuming run %s from checkpoint %d (%s)", self.name, latest.version, state.stage)
            self.tracker.progress(
                f"resumed from checkpoint {latest.version}: stage {state.stage}, iteration {state.iteration}, "
                f"IL iteration {state.il_iteration}, {state.env_steps:,} env steps"
            )
            return state
        state = ckpt_io.TrainState(stage=cfg.stages[0])
        if cfg.stages == ("rl",):
            weights = self._init_weights()
            self.learner_group.load_state({"policy": weights})
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)  # noqa: NPY002 (the global RNG, for third-party code)
        torch.manual_seed(cfg.seed)
        self._set_stage_settings(state)
        return state

    def _compare_config(self, saved: dict, version: int) -> None:
        """The checkpoint's config.json read back into the tree, against this command's: the changes are
        named (more iterations, another learning rate: fine); another network is refused, since the
        checkpoint's weights are that network's."""
        try:
            before = to_dict(from_dict(TrainConfig, saved_config(saved)))
        except ConfigError as e:  # written by an older layout of the config: nothing to compare it with
            log.warning("checkpoint %d: config.json is not this code's TrainConfig (%s); not compared", version, e)
            return
        changes = config_changes(before, self.config_dict)
        network = [c for c in changes if c.startswith("policy.")]
        if network:
            raise ConfigError(
                f"run {self.name!r}: checkpoint {version} holds the weights of another network ("
                + "; ".join(network)
                + "); resume it with its own policy settings, or start a new --run"
            )
        if changes:
            self.tracker.progress(f"resuming with changed settings: {'; '.join(changes)}")

    def _init_weights(self) -> dict:
        """Stage rl starts from an IL checkpoint: ``init_from`` = run or run@version in this store."""
        src = self.cfg.init_from
        if not src:
            raise ValueError("stage=rl needs init_from=<IL run name>[@version] (a run in the same store)")
        try:
            run, version = parse_ref(src)  # run, run@latest (newest intact) or run@<version>
        except ValueError as e:
            raise ValueError(f"init_from={src!r}: {e} (expected <IL run name>[@<version>|@latest])") from None
        rs = self.store.run(run)
        ck = rs.load(version) if version is not None else rs.load_latest()
        if ck is None:
            raise ValueError(f"init_from={src!r}: run {run!r} has no committed checkpoint in {self.store.uri}")
        if "config.json" in ck.files:
            changes = policy_changes(json.loads(ck.files["config.json"]).get("policy"), self.cfg.policy)
            if changes:
                raise ConfigError(
                    f"init_from={src!r}: checkpoint {ck.version} holds the weights of another network ("
                    + "; ".join(changes)
                    + "); train stage rl with that run's policy settings"
                )
        self.tracker.progress(f"stage rl starts from {run} checkpoint {ck.version}")
        return ckpt_io.policy_weights(ck.files)

    def _set_stage_settings(self, state: ckpt_io.TrainState) -> None:
        cfg = self.cfg
        if state.stage in ("perception", "il"):  # (the learner idles through stage perception)
            s = learner_settings(cfg, cfg.il.pretrain_iterations * cfg.il.steps_per_iteration, cfg.il.lr)
        else:
            s = learner_settings(cfg, self._rl_updates_total(), cfg.ppo.lr)
        self.learner_group.set_settings(s, state.stage)

    # -- the whole run -----------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg = self.cfg
        self.open_store()
        try:
            t = cfg.tracking
            self.tracker = Tracker(
                self.folder, self.config_dict, cfg.seed, t.tensorboard, t.mlflow, store=self.tracking, sync_s=t.sync_s,
                name=self.name,
            )  # fmt: skip
            self.tracker.progress(f"run {self.name}: tracking in {self.tracker.where}, checkpoints in {self.rs.uri}")
            self.build()
            self.record_provenance()
            state = self.restore()
            if state.stage == "perception":
                self.stage_perception(state)
            elif "perception" in cfg.stages:
                self.perception = self._perception_done()
            demos = None
            if state.stage != "done" and (state.stage == "il" or cfg.il.mode == "weighted" or cfg.il.il_rounds):
                demos = self.demos()
            if state.stage == "il":
                self.stage_il(state, demos)
            if state.stage == "rl":
                self.stage_rl(state, self.imitation_data(demos))
            self.async_committer.flush()
            self.summary(state)
            last = self.async_committer.last_committed
            return TrainResult(self.name, self.folder, self.rs.uri, state, last, self.perception)
        finally:
            self.close()

    def _perception_done(self) -> dict | None:
        """A finished stage perception's metrics, read back from its run (a resumed run does not redo it)."""
        try:
            ck = self.store.run(perception_run_name(self.name, self.cfg.perception.run)).load_latest()
            meta = json.loads(ck.files["perception.json"]) if ck is not None else None
        except Exception as e:  # only for the summary: the weights are in this run's checkpoint
            log.warning("stage perception's metrics could not be read back: %s", e)
            return None
        if not meta:
            return None
        keep = ("metrics", "epoch", "frames_per_s", "history", "frames")
        return {k: meta.get(k) for k in keep}

    def summary(self, state: ckpt_io.TrainState) -> None:
        s = dict(
            run=self.name,
            store=self.rs.uri,
            folder=str(self.folder),
            tracking=self.tracker.where,
            il=state.il_eval,
            final=state.last_eval,
            scenario_failures=self.scenario_failures,
            quarantined=self.quarantined,
            demonstrations_skipped=self.demos_skipped,
            perception=self.perception,
        )
        self.tracker.write("summary.json", json.dumps(s, indent=2, default=float))
        if self.quarantined or self.demos_skipped:
            self.tracker.progress(
                f"broken scenarios: quarantined {sorted(self.quarantined) or 'none'}, left out of the "
                f"demonstrations {sorted(self.demos_skipped) or 'none'} (errors in {self.tracker.where}/summary.json)"
            )
        if state.il_eval and state.last_eval and "rl" in self.cfg.stages:
            a, b = state.il_eval, state.last_eval
            self.tracker.progress(
                f"val collision rate: IL {a['CR']:.3f} -> RL+IL {b['CR']:.3f}; deviation rate {a['DR']:.3f} -> "
                f"{b['DR']:.3f}"
            )
        compare = state.il_eval and "il" in self.cfg.stages and "rl" in self.cfg.stages
        suite = (il_snapshot_name(self.name), self.cfg.eval.suite) if compare else None
        for line in closing_lines(self.tracker, self.cfg.store.uri, self.name, self.rs.uri, suite):
            self.tracker.progress(line)

    def close(self) -> None:
        errors = []
        if getattr(self, "_beating", None) is not None:
            self._beating.set()
        tracker = getattr(self, "tracker", None)  # made by run()
        steps: list[Callable[[], object]] = []
        if self.committer is not None:
            steps.append(functools.partial(self.committer.close, timeout=CLOSE_TIMEOUT_S))
        for part in (self.group, self.learners):
            if part is not None:
                steps.append(part.shutdown)
        if self.lease is not None:
            steps.append(self.lease.release)
        if tracker is not None:
            steps.append(tracker.close)
        for fn in steps:
            try:
                fn()
            except Exception as e:
                errors.append(e)
        if self._ray_started:
            import ray

            ray.shutdown()
        for err in errors:
            log.warning("while closing: %s", err)


def train(cfg: TrainConfig) -> TrainResult:
    return Trainer(cfg).run()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = parse_cli(
        TrainConfig,
        argv,
        "python -m learner.train",
        __doc__.split("\n\n")[0],
        flags=[
            ("--run", "run", "run name (rerun to resume)"),
            ("--store", "store", "checkpoint store URI (store.uri)"),
            ("--out", "tracking.out", "local folder for the run folders (tracking.out; default: in the store)"),
        ],
    )
    try:
        train(cfg)
    except RunLocked as e:
        print(f"learner.train: {e}", file=sys.stderr)
        return 3
    except ConfigError as e:  # a resume that asks for another network than the checkpoint's
        print(f"learner.train: {e}", file=sys.stderr)
        return 2
    except NonFiniteLoss as e:
        print(f"learner.train: {e}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        print(
            "learner.train: interrupted; committed checkpoints are kept: rerun with the same --run to resume",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
