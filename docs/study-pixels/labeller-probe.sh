#!/bin/bash
# Does a camera student keep more of a teacher that acts only on what its grid covers? (README, "What the student
# cannot see")  DAgger's reactive labeller sees 36 m (the grid's reach ahead of the axle; 70 m by default) and
# ramps its nudges over 1.5 s / at least 10 m (2.5 s / 15 m): il.labeller.*, the labels only; the task, its scoring
# and evaluation's `reactive` unchanged. The camera student at the camera study's budget (60 IL iterations, 12
# DAgger rounds of 2,048 env-steps, the `small` encoder, perception shared; ~13 min a seed), seeds SEEDS, scored on
# val beside the default-labelled student of the same seed (--compare pairs them on the same clips).
# Measured (README): that labeller drives val alone at 0.991 (default 0.993, CR 0 both).
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/labeller-probe}
SEEDS=${SEEDS:-"0 1"}
for seed in $SEEDS; do
  common=(stage=perception+distill seed=$seed il.pretrain_iterations=60 il.dagger_rounds=12
          perception.run=probe-small-perception store=$STORE)
  $PY -m learner.train "${common[@]}" run=probe-r12-s$seed
  $PY -m learner.train "${common[@]}" run=probe-lab36-s$seed il.labeller.sensing_range=36 \
    il.labeller.nudge_ramp_time=1.5 il.labeller.min_nudge_ramp=10
  $PY -m evaluation --compare "$STORE/probe-r12-s$seed@latest" "$STORE/probe-lab36-s$seed@latest" --suite val \
    --out $STORE/eval-s$seed
done
