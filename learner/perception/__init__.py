"""Stage perception (RAD's stage 1): the image encoder learns to see agents and the map from the cameras.

Design (RAD §3.2, kept small enough for two CPU cores):

- **Encoder**: ``policy.network.CameraEncoder``, the policy's own -- a strided CNN shared by every camera,
  a learned per-camera embedding, the cameras fused into one feature [B, E]. Stage perception trains it;
  stages il and rl load it into the policy and keep it frozen (``ActorCritic.freeze_cameras``): the
  planner reads the world only through what perception learned to see.
- **Heads** (:class:`BEVDecoder`): the fused feature -> a bird's-eye grid of ``cells`` x ``cells`` over
  ``range_m`` x ``range_m`` m around the ego (from ``behind_m`` behind the rear axle forward, centred
  laterally; ego frame, row i along x forward, column j along y left), five channels: agent occupancy
  (logit), agent velocity (vx, vy, m/s in the ego frame), drivable area (logit) and lane centre (logit).
- **Labels** from the digital twin's ground truth (:func:`bev_labels`): a cell is occupied when it
  overlaps an agent's or a static obstacle's box (its centre within half a cell of the box along the
  box's axes); its velocity is that agent's; drivable when its centre lies within half a lane width of
  a lane centre line; lane centre within ``LANE_CENTRE_M`` of one. Cells no camera sees (behind or
  beside the rig's fields of view, :func:`visible_cells`) are left out of losses and metrics.
- **Frames** are rendered once along the training clips' expert drives: ``frames`` of them drawn evenly
  over the clips (every clip its share, at steps spread over its horizon: :func:`frame_plan`; or one
  every ``every`` steps of each clip), each seen from the expert's pose moved sideways by up to
  ``jitter_m`` m and turned by up to ``jitter_deg`` degrees (seeded per clip and step, so closed-loop
  poses off the log are seen too), into a **frame cache** (:class:`FrameCache`): uint8 ``.npz`` shards
  of ``shard_frames`` frames, each with its sha256 in ``index.json``, read with ``allow_pickle=False``;
  a shard whose checksum fails is rendered again; the cache holds at most ``cache_mb`` MB (an evenly
  spaced subset of the planned frames when the plan is bigger). Epochs read the cache; nothing is
  re-rendered.
- **Metrics** on the validation frames, overall and per kind (:func:`evaluate_perception`):
  occupancy IoU, velocity error (mean |v - v*| m/s over truly occupied cells), drivable-area IoU,
  lane-centre IoU, each beside the IoU of the train set's per-cell prior (what a network that ignored
  its images could reach); and where the velocity error lives (:func:`velocity_breakdown`: in the cells
  the network marks occupied or misses, by the agent's speed, by the distance ahead).
- **Checkpoints**: every epoch to the store run ``<run>-perception`` (``perception.safetensors``,
  the optimizer, ``perception.json`` with the epoch, history and metrics); a rerun resumes there, and a
  finished stage is not trained again.

``python -m learner.perception --bench`` prints the cache's render frames/s, the stage's training
frames/s and the camera-mode rollout + PPO loop's env-steps/s as JSON, with the machine's load.

Modules, bottom up: ``labels`` (the grid, :func:`bev_labels`, :func:`visible_cells`), ``cache``
(:class:`FrameCache`), ``heads`` (:class:`PerceptionNet`, :func:`with_encoder`), ``loss``, ``metrics``,
``checkpoint`` (the store run ``<run>-perception``), ``stage`` (:func:`train_perception`,
:func:`run_stage`), ``bench`` and ``__main__`` (the command line).
"""

from learner.perception.cache import CACHE_VERSION, FrameCache, frame_plan, frame_pose
from learner.perception.checkpoint import lease_owner, perception_run_name
from learner.perception.heads import CHANNELS, ENCODER_PREFIX, BEVDecoder, PerceptionNet, with_encoder
from learner.perception.labels import LABEL_KEYS, LANE_CENTRE_M, BEVGrid, bev_labels, grid_of, visible_cells
from learner.perception.loss import perception_loss
from learner.perception.metrics import (
    evaluate_perception,
    metrics_table,
    perception_metrics,
    plot_curve,
    predict,
    velocity_breakdown,
)
from learner.perception.stage import PerceptionResult, build_net, run_stage, train_perception

__all__ = [
    "CACHE_VERSION",
    "CHANNELS",
    "ENCODER_PREFIX",
    "LABEL_KEYS",
    "LANE_CENTRE_M",
    "BEVDecoder",
    "BEVGrid",
    "FrameCache",
    "PerceptionNet",
    "PerceptionResult",
    "bev_labels",
    "build_net",
    "evaluate_perception",
    "frame_plan",
    "frame_pose",
    "grid_of",
    "lease_owner",
    "metrics_table",
    "perception_loss",
    "perception_metrics",
    "perception_run_name",
    "plot_curve",
    "predict",
    "run_stage",
    "train_perception",
    "velocity_breakdown",
    "visible_cells",
    "with_encoder",
]
