#!/bin/bash
# Seed noise in stage perception, and whether a wider grid CNN lowers the velocity error (README, "Seed noise, and
# where the velocity error lives"). Each variant is trained at seeds SEEDS on the same 20,160 `train` frames
# (the cache is shared: seeds change the initialisation and the batches, not the frames), 8 epochs, and scored on
# the 350 `val` frames. The stage's log and each run's tracking/perception.md give the figures, the velocity
# error split by detection, speed and distance ahead among them. ~7 min a `small` run, ~11 min a `deep` one.
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/velocity-probe}
SEEDS=${SEEDS:-"0 1"}
WIDE=(policy.lift_bev_dilation=[2,4])
DEEP=(policy.lift_backbone=deep policy.lift_align_s=0.3)
for seed in $SEEDS; do
  $PY -m learner.train stage=perception run=small-s$seed seed=$seed store=$STORE
  $PY -m learner.train stage=perception run=wide-s$seed seed=$seed store=$STORE "${WIDE[@]}"
  $PY -m learner.train stage=perception run=deep-s$seed seed=$seed store=$STORE "${DEEP[@]}"
  $PY -m learner.train stage=perception run=deep-wide-s$seed seed=$seed store=$STORE "${DEEP[@]}" "${WIDE[@]}"
done
$PY -m learner.train stage=perception run=deep-wide-vel seed=0 store=$STORE "${DEEP[@]}" "${WIDE[@]}" \
  perception.velocity_weight=0.5 perception.lr_final_fraction=0.1
$PY -m learner.train stage=perception run=deep-wide-gap05 seed=0 store=$STORE policy.lift_backbone=deep "${WIDE[@]}" \
  env.camera_history=5 policy.lift_align_s=0.5  # 0.5 s between the frames: its own frame cache (~7 min, ~3 GB)
# Longer training (README, "Longer training, and the val curve"): each seed's deep-wide perception run resumed for
# more epochs (the same as a fresh run that long: constant learning rate, shuffles seeded by seed and epoch); every
# epoch is scored on val (perception.val_curve), so one 32-epoch run gives the whole curve. 85-140 s an epoch (load ~2).
for seed in $SEEDS; do
  $PY -m learner.train stage=perception run=deep-wide-32-s$seed seed=$seed store=$STORE "${DEEP[@]}" "${WIDE[@]}" \
    perception.run=deep-wide-s$seed-perception perception.epochs=32
done
# A decaying learning rate (README, "A decaying learning rate"): seed 0 trained 24 epochs afresh with the rate falling
# linearly to 0.1x (1.82 m/s against the constant rate's 1.70 at 32 epochs; seed 1 was not run, by the rule set
# before the run). ~70 min with its frame cache (load ~2).
$PY -m learner.train stage=perception run=deep-wide-decay24-s0 seed=0 store=$STORE "${DEEP[@]}" "${WIDE[@]}" \
  perception.epochs=24 perception.lr_final_fraction=0.1
