"""The training run's config: one frozen dataclass per component, nested in ``TrainConfig``.

Defaults are the embedded main job: the built-in scenarios, local Ray, the CPU renderer, IL then
PPO+IL in about ten minutes on two cores. ``python -m learner.train --help`` lists every key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from envs.config import EnvConfig
from policy.network import PolicyConfig
from rollout.group import check_resources
from scenarios.format import DEFAULT_DT
from scenarios.reactive import ReactiveSettings
from sim.configs import coerce_fields, field
from store import check_name


@dataclass(frozen=True)
class RolloutConfig:
    num_actors: int = field(2, help="rollout actors (Ray); 0 runs one worker in the driver process (serial mode)")
    envs_per_actor: int = field(4, help="environments each actor steps together (one render call for all)")
    fragment_length: int = field(32, help="steps per fragment (T); a fragment is [T, envs_per_actor]")
    cpus_per_actor: float = field(1.0, help="Ray CPUs each rollout actor asks for")
    gpus_per_actor: float = field(0.0, help="fraction of a GPU per rollout actor (gsplat renders there)")
    threads_per_actor: int = field(1, help="torch and renderer threads inside an actor")
    resources: dict = field(
        {}, help="Ray custom resources each rollout actor asks for, e.g. rollout.resources.rollout_node=1"
    )
    max_restarts: int = field(100, help="replacements of crashed actors per slot before giving up")
    timeout_s: float = field(900.0, help="longest wait for one round of fragments")

    def __post_init__(self):
        if self.num_actors < 0 or self.envs_per_actor < 1 or self.fragment_length < 1:
            raise ValueError("rollout: num_actors >= 0, envs_per_actor >= 1 and fragment_length >= 1 are required")
        check_resources("rollout.resources", self.resources)


ADV_NORMS = ("batch", "minibatch", "none")


@dataclass(frozen=True)
class PPOConfig:
    gamma: float = field(
        0.99,
        help="discount (RAD: 0.9, a ~1 s horizon at 10 Hz; 0.99 was chosen on val: braking for a car 2-3 s ahead "
        "needs the -1 to reach back that far)",
    )
    lam: float = field(0.95, help="GAE lambda (RAD: 0.95, kept)")
    clip_lateral: float = field(0.1, help="PPO clip range of the lateral action (RAD: 0.1)")
    clip_longitudinal: float = field(0.2, help="PPO clip range of the longitudinal action (RAD: 0.2)")
    value_clip: float | None = field(None, help="clip range of the value loss (None: unclipped)")
    epochs: int = field(4, help="passes over each batch")
    minibatches: int = field(4, help="minibatches per pass")
    adv_norm: str = field(
        "batch",
        help="advantage normalisation per reward part: 'batch' (over the whole batch, std floored at adv_std_floor: a "
        "part without events stays ~0 instead of critic noise blown up to unit size), 'minibatch' (CleanRL's, per "
        "minibatch) or 'none'",
    )
    adv_std_floor: float = field(0.1, help="'batch' normalisation divides by max(std, this) per reward part")
    critic_warmup: int = field(
        4, help="RL iterations at the start of stage rl that train only the critic, on the IL policy's own rollouts"
    )
    lr: float = field(3e-4, help="Adam learning rate")
    adam_eps: float = field(1e-5, help="Adam epsilon (CleanRL's 1e-5)")
    lr_final_fraction: float = field(0.3, help="linear decay of the learning rate to lr * this by the run's end")
    ent_coef: float = field(0.005, help="entropy bonus")
    vf_coef: float = field(0.5, help="value loss weight")
    max_grad_norm: float = field(0.5, help="gradient clipping by global norm")
    aux_front: float = field(0.1, help="RAD directional loss weight: brake after a front collision")
    aux_rear: float = field(0.1, help="RAD directional loss weight: speed up after a rear collision")
    aux_left: float = field(0.1, help="RAD directional loss weight: steer right after drifting left")
    aux_right: float = field(0.1, help="RAD directional loss weight: steer left after drifting right")
    aux_progress: float = field(0.1, help="directional loss weight: speed up before a progress deviation (not RAD's)")
    max_consecutive_skips: int = field(20, help="non-finite losses in a row that stop the run")

    def __post_init__(self):
        if self.adv_norm not in ADV_NORMS:
            raise ValueError(f"ppo.adv_norm: expected one of {', '.join(ADV_NORMS)}, got {self.adv_norm!r}")
        if not self.adv_std_floor >= 0:
            raise ValueError(f"ppo.adv_std_floor: expected >= 0, got {self.adv_std_floor}")
        if self.critic_warmup < 0 or self.epochs < 1 or self.minibatches < 1:
            raise ValueError("ppo: critic_warmup >= 0, epochs >= 1 and minibatches >= 1 are required")


@dataclass(frozen=True)
class ILConfig:
    pretrain_iterations: int = field(30, help="IL (planning pre-training) iterations of stage il")
    steps_per_iteration: int = field(10, help="IL minibatches per IL iteration / IL round")
    batch_size: int = field(64, help="demonstration minibatch size")
    mode: str = field("alternate", help="PPO+IL mixing: 'alternate' rounds (RAD) or 'weighted' sum")
    rl_rounds: int = field(4, help="alternate mode: RL rounds per cycle (RAD's best RL:IL = 4:1)")
    il_rounds: int = field(1, help="alternate mode: IL rounds per cycle")
    weight: float = field(0.5, help="weighted mode: IL loss weight added to every PPO minibatch")
    focal_gamma: float = field(0.0, help="focal loss gamma (0: cross-entropy)")
    lr: float = field(1e-3, help="learning rate of stage il")
    demo_clips: int = field(
        64,
        help="with cameras: the expert demonstrations are rendered along the first N training clips (0: every "
        "clip; a front3 frame is 74 kB, the 1,008 clips of train are 80k frames, 5.9 GB, and ~15 min to render on 2 "
        "cores); rollouts still draw from every clip; privileged observations always take every clip",
    )
    dagger_rounds: int = field(
        0,
        help="DAgger rounds at the end of stage il (0: RAD's imitation on the expert's states only): each round the "
        "policy drives dagger_steps env-steps, the reactive expert labels every state it visits, the labels join the "
        "imitation data (also for the IL rounds of stage rl), then dagger_iterations IL iterations",
    )
    dagger_steps: int = field(2048, help="env-steps the policy drives (and the expert labels) per DAgger round")
    teacher: str = field(
        "reactive",
        help="who labels DAgger's (and stage distill's) visited states: 'reactive' (the reactive expert's action) or "
        "a privileged policy SOURCE (a checkpoint, <store>/<run>[@version], as python -m evaluation takes): its "
        "action distribution, read from the privileged observation of each visited state (the student learns the "
        "distribution: cross-entropy to its longitudinal probabilities and its lateral ones given its likeliest "
        "longitudinal bin)",
    )
    labeller: dict = field(
        {},
        help="il.teacher=reactive: the labelling expert's settings (scenarios.ReactiveSettings fields, e.g. "
        "il.labeller.sensing_range=36 il.labeller.nudge_ramp_time=1.5): labels a camera student can follow, from "
        "an expert that sees no farther than its grid; {}: the defaults, the reactive baseline's. Only the labels "
        "change: the task, its scoring and evaluation's reactive stay as they are",
    )
    dagger_iterations: int = field(20, help="IL iterations on the aggregated data after each DAgger round")
    dagger_max: int = field(200_000, help="most labelled visited states kept (the oldest go first)")

    def __post_init__(self):
        if self.mode not in ("alternate", "weighted"):
            raise ValueError(f"il.mode must be 'alternate' or 'weighted', got {self.mode!r}")
        for name in ("dagger_rounds", "dagger_iterations", "demo_clips"):
            if getattr(self, name) < 0:
                raise ValueError(f"il.{name}: expected >= 0, got {getattr(self, name)}")
        if self.dagger_steps < 1 or self.dagger_max < 1:
            raise ValueError(
                f"il: dagger_steps and dagger_max must be >= 1, got {self.dagger_steps}, {self.dagger_max}"
            )
        if self.labeller:
            if self.teacher != "reactive":
                raise ValueError(f"il.labeller sets the reactive expert's settings, but il.teacher={self.teacher!r}")
            ReactiveSettings.with_overrides(self.labeller, "il.labeller")
        if self.rl_rounds < 0 or self.il_rounds < 0 or self.rl_rounds + self.il_rounds == 0:
            raise ValueError("il: rl_rounds and il_rounds must be >= 0 and not both 0")


SELECT_METRICS = {"DS": 1.0, "RC": 1.0, "success_rate": 1.0, "CR": -1.0, "DR": -1.0}  # metric: +1 higher is better


@dataclass(frozen=True)
class EvalConfig:
    suite: str = field("val", help="scenarios for periodic evaluation (deterministic policy)")
    every: int = field(8, help="evaluate every N RL iterations (0: only at stage ends)")
    num_envs: int = field(7, help="environments stepped together during evaluation")
    select_last: int = field(
        3,
        help="the run's final policy is the best on the eval suite among the policies of its last K evaluations of "
        "stage rl (the end of the stage's included; 1: the last policy, whatever it scored)",
    )
    select_metric: str = field(
        "DS", help="what 'best' means: DS (mean driving score), RC or success_rate (higher), CR or DR (lower)"
    )
    select_start: bool = field(
        False,
        help="also count the policy stage rl started from (the end of stage il / distill, or init_from) among "
        "the candidates, so RL that makes it worse on the eval suite hands back where it started (selected 'il'; "
        "a run resumed inside stage rl has lost that candidate). Off: the run reports an RL-trained policy, as a "
        "study of what RL does needs",
    )

    def __post_init__(self):
        if self.select_last < 1:
            raise ValueError(f"eval.select_last: expected >= 1, got {self.select_last}")
        if self.select_metric not in SELECT_METRICS:
            raise ValueError(
                f"eval.select_metric: expected one of {', '.join(SELECT_METRICS)}, got {self.select_metric!r}"
            )


@dataclass(frozen=True)
class PerceptionConfig:
    """Stage perception (RAD's stage 1, ``learner.perception``): the camera encoder and BEV heads learn
    to see the agents and the map from the images, labelled by the digital twin's ground truth."""

    epochs: int = field(8, help="passes over the training frames")
    batch_size: int = field(32, help="frames per minibatch")
    lr: float = field(1e-3, help="Adam learning rate")
    frames: int = field(
        20160,
        help="training frames, drawn evenly over the training clips (each clip its share, at steps spread over its "
        "horizon; built-in train: 1,008 clips x 20)",
    )
    every: int = field(0, help="N > 0: a training frame every N steps of each training clip instead (frames ignored)")
    val_every: int = field(16, help="a metrics frame every N steps of each eval.suite clip")
    jitter_m: float = field(1.0, help="frames from the expert's pose moved sideways by up to this (m)")
    jitter_deg: float = field(10.0, help="... and turned by up to this (degrees)")
    seed: int = field(0, help="seed of the frames' pose jitter (not the run's: seeds share one frame cache)")
    cells: int = field(32, help="BEV grid side in cells (a multiple of 4)")
    range_m: float = field(40.0, help="BEV grid side in metres")
    behind_m: float = field(4.0, help="the grid starts this far behind the rear axle (m)")
    velocity_weight: float = field(0.1, help="weight of the velocity L1 loss (m/s) beside the BCE losses")
    pos_weight_cap: float = field(
        20.0,
        help="cap of the positive-class weight of each BCE loss (negatives / positives over visible cells): rare "
        "classes (agents fill ~1 % of the grid) weighted up to it; a high cap buys recall with false positives at "
        "the threshold 0.5 (the *_iou_cal metrics use thresholds chosen on training frames instead)",
    )
    lr_final_fraction: float = field(1.0, help="linear decay of the learning rate to lr * this by the last epoch")
    val_curve: bool = field(
        True,
        help="score eval.suite's frames after every epoch, not only the last: the val curve (the log line, val_* in "
        "each epoch's history row, metrics.jsonl / TensorBoard perception/epoch/*) to choose epochs on; each point "
        "costs a forward pass over the val frames and the calibration frames, and changes nothing that is trained",
    )
    cache_mb: float = field(4096.0, help="size cap of each frame cache (train, val) in MB: fewer frames beyond it")
    shard_frames: int = field(128, help="frames per cache shard (.npz, sha256-checked)")
    freeze: bool = field(True, help="stages il and rl keep the image encoder that stage perception trained frozen")
    run: str = field(
        "",
        help="the store run that holds this stage's checkpoints ('': <run>-perception); runs naming the same one "
        "share it (a finished stage is loaded, not trained again: a study's seeds and arms train perception once)",
    )

    def __post_init__(self):
        for name in ("epochs", "batch_size", "frames", "val_every", "cells", "shard_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"perception.{name}: expected >= 1, got {getattr(self, name)}")
        if self.every < 0:
            raise ValueError(f"perception.every: expected >= 0 (0: perception.frames decides), got {self.every}")
        if self.cells % 4:
            raise ValueError(f"perception.cells: expected a multiple of 4, got {self.cells}")
        for name in ("lr", "range_m", "cache_mb", "lr_final_fraction"):
            if not getattr(self, name) > 0:
                raise ValueError(f"perception.{name}: expected > 0, got {getattr(self, name)}")
        if not self.pos_weight_cap >= 1:
            raise ValueError(f"perception.pos_weight_cap: expected >= 1 (1: unweighted), got {self.pos_weight_cap}")
        for name in ("jitter_m", "jitter_deg", "behind_m", "velocity_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"perception.{name}: expected >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class StoreConfig:
    """The checkpoint store: where checkpoints go, how often, how many stay. ``store=URI`` (and
    ``--store URI``) is ``store.uri=URI``."""

    __scalar_field__ = "uri"

    uri: str = field("runs", help="checkpoint store: a path, file://..., or s3://bucket/prefix")
    checkpoint_every: int = field(4, help="commit a checkpoint every N iterations (IL and RL)")
    keep_last: int = field(3, help="checkpoints kept (plus the best by evaluation)")

    def __post_init__(self):
        if not self.uri:
            raise ValueError("store.uri: expected a path, file://... or s3://bucket/prefix, got ''")
        if self.checkpoint_every < 1 or self.keep_last < 1:
            raise ValueError(
                f"store: checkpoint_every >= 1 and keep_last >= 1 are required, got {self.checkpoint_every}, "
                f"{self.keep_last}"
            )


@dataclass(frozen=True)
class TrackingConfig:
    """Where a run's tracking files go (config.yaml, run.json, metrics.jsonl, summary.json, TensorBoard,
    reports): with its checkpoints, ``<store>/<run>/tracking/`` (``out`` empty), else ``<out>/<run>/``."""

    out: str = field(
        "",
        help="local folder for the run folders ('': with the run in the store, <store>/<run>/tracking/, uploaded "
        "every sync_s seconds; python -m learner.tracking pull <store>/<run> DIR brings them back)",
    )
    sync_s: float = field(30.0, help="seconds between uploads of the run's tracking files to the store")
    tensorboard: bool = field(True, help="write TensorBoard event files in the run folder")
    mlflow: bool = field(False, help="log to MLflow too (also on when MLFLOW_TRACKING_URI is set)")

    def __post_init__(self):
        if not self.sync_s > 0:
            raise ValueError(f"tracking.sync_s: expected seconds > 0, got {self.sync_s}")


STAGES = ("perception", "il", "rl")  # RAD's three, in their order
STAGE_CHOICES = (
    "perception+il+rl", "perception+il", "perception", "il+rl", "il", "rl",
    "perception+distill+rl", "perception+distill", "distill+rl", "distill",
)  # fmt: skip
DISTILL_ROUNDS = 6  # stage distill's DAgger rounds when il.dagger_rounds is left 0


@dataclass(frozen=True)
class TrainConfig:
    run: str = field("", help="run name (default: a new timestamped name); rerunning a name resumes it")
    stage: str = field(
        "perception+il+rl",
        help="RAD's stages, one run: 'perception' (the camera encoder and BEV heads learn agents and the map from "
        "the images, labelled by the twin's ground truth; learner.perception), 'il' (planning pre-training: the "
        "planner imitates the expert, the perception encoder frozen), 'rl' (PPO+IL, perception frozen; alone it "
        "starts from init_from); joined in order: perception+il+rl, perception+il, il+rl. 'distill' (in il's place: "
        "perception+distill+rl, perception+distill, distill+rl, distill) is stage il whose DAgger rounds "
        f"(il.dagger_rounds, {DISTILL_ROUNDS} when left 0) are labelled by il.teacher: the camera policy drives, the "
        "privileged teacher labels every state it visits with its action distribution, the student imitates it",
    )
    init_from: str = field("", help="stage rl: IL checkpoint to start from (a run name in the store, or run@version)")
    suite: str = field("train", help="training scenarios: a built-in suite (train, val, test), a folder or a file")
    seed: int = field(0, help="seed of everything")
    iterations: int = field(16, help="RL iterations (rounds of rollout + update) of stage rl")
    num_learners: int = field(1, help="data-parallel learners (Ray actors all-reducing gradients when > 1)")
    gpus_per_learner: float = field(0.0, help="GPUs per learner (NCCL when > 0)")
    learner_resources: dict = field(
        {}, help="Ray custom resources per learner, e.g. learner_resources.learner_node=1 (one learner: an actor too)"
    )
    ray_address: str = field("", help="Ray cluster to join ('' : RAY_ADDRESS or a local instance)")
    ray_num_cpus: int = field(0, help="CPUs of the local Ray instance (0: all)")
    env: EnvConfig = field(
        EnvConfig(camera_history=3),
        help="the environment (envs.EnvConfig), e.g. env.cameras=false; training's default stacks the images of "
        "0.3 s ago after the current ones (env.camera_history=3) so the lift encoder sees motion",
    )
    policy: PolicyConfig = field(
        PolicyConfig(camera_encoder="lift"),
        help="the network (policy.network.PolicyConfig); training's default camera encoder lifts image features "
        "into the bird's-eye grid (policy.camera_encoder=lift; 'flat' is the earlier one)",
    )
    rollout: RolloutConfig = field(RolloutConfig(), help="rollout actors")
    ppo: PPOConfig = field(PPOConfig(), help="PPO")
    il: ILConfig = field(ILConfig(), help="imitation")
    eval: EvalConfig = field(EvalConfig(), help="periodic evaluation")
    perception: PerceptionConfig = field(PerceptionConfig(), help="stage perception (RAD's stage 1)")
    store: StoreConfig = field(StoreConfig(), help="the checkpoint store")
    tracking: TrackingConfig = field(TrackingConfig(), help="logs, TensorBoard, MLflow")

    def __post_init__(self):
        coerce_fields(self, "TrainConfig")  # sections given as mappings (TrainConfig(env={...})) become typed
        if self.stage not in STAGE_CHOICES:
            raise ValueError(f"stage must be one of {', '.join(STAGE_CHOICES)}, got {self.stage!r}")
        if "distill" in self.stage.split("+"):
            if self.il.dagger_rounds == 0:
                object.__setattr__(self, "il", dataclasses.replace(self.il, dagger_rounds=DISTILL_ROUNDS))
            if self.env.observation != "camera":
                raise ValueError(
                    f"stage={self.stage}: distillation trains a camera student, but env.observation="
                    f"{self.env.observation!r}"
                )
        if "perception" in self.stages and not self.env.cameras:
            raise ValueError(f"stage={self.stage}: stage perception learns from the cameras, but env.cameras=false")
        if self.iterations < 0:
            raise ValueError(f"iterations: expected >= 0, got {self.iterations}")
        pol, per = self.policy, self.perception
        grid, want = (pol.bev_cells, pol.bev_range_m, pol.bev_behind_m), (per.cells, per.range_m, per.behind_m)
        default = PolicyConfig()
        if pol.camera_encoder == "lift" and grid != want:
            if grid != (default.bev_cells, default.bev_range_m, default.bev_behind_m):
                raise ValueError(
                    f"policy.camera_encoder=lift lifts into the perception grid: policy.bev_cells/bev_range_m/"
                    f"bev_behind_m {grid} must equal perception.cells/range_m/behind_m {want} (or be left alone: "
                    "they then follow perception's)"
                )
            pol = dataclasses.replace(pol, bev_cells=per.cells, bev_range_m=per.range_m, bev_behind_m=per.behind_m)
            object.__setattr__(self, "policy", pol)  # the lift's grid left as it was follows the perception grid
        gap = self.env.camera_history * DEFAULT_DT
        if pol.camera_encoder == "lift" and pol.lift_align_s and abs(pol.lift_align_s - gap) > 1e-6:
            raise ValueError(
                f"policy.lift_align_s={pol.lift_align_s} must be the gap between the two frames, env.camera_history="
                f"{self.env.camera_history} x {DEFAULT_DT} s = {gap:g} s (0 to lift both frames at the same points)"
            )
        if pol.camera_encoder == "lift" and self.env.rig not in (None, pol.lift_rig):
            raise ValueError(
                f"policy.lift_rig={pol.lift_rig!r} must be env.rig={self.env.rig!r} (the geometry it lifts with)"
            )
        check_resources("learner_resources", self.learner_resources)
        if not 0 <= self.seed < 2**31:  # numpy's global seed takes [0, 2**32); actors add offsets to it
            raise ValueError(f"seed must be an int in [0, 2**31), got {self.seed}")
        if self.run:
            check_name("run", self.run)  # one path segment: out/<run> and the store's <run>/ stay inside
        if self.perception.run:
            check_name("perception.run", self.perception.run)

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages this run goes through, in order (``stage`` split at '+'; distill is stage il, its DAgger
        rounds labelled by ``il.teacher``)."""
        return tuple("il" if s == "distill" else s for s in self.stage.split("+"))
