#!/bin/bash
# Does a narrow front camera make the camera student see what is far ahead? (README, "What the student cannot
# see")  env.rig=front4: front3 and `front_narrow` (30 deg at the same 128x64: 2.6x the front camera's pixels per
# degree ahead, a car 30 m out ~14 px wide rather than ~5). Perception trained anew on front4 frames (its own
# cache: 20,160 frames, ~4.1 GB), then the camera student at the camera study's budget (60 IL iterations, 12
# DAgger rounds of 2,048 env-steps, the `small` encoder, reactive labels), seeds SEEDS, scored on val beside the
# front3 student of the same seed (--compare pairs them on the same clips).
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/narrow-camera-probe}
SEEDS=${SEEDS:-"0 1"}
F4=(env.rig=front4 policy.lift_rig=front4)
$PY -m learner.train stage=perception run=probe-f3 seed=0 store=$STORE
$PY -m learner.train stage=perception run=probe-f4 seed=0 "${F4[@]}" store=$STORE
for seed in $SEEDS; do
  common=(stage=perception+distill seed=$seed il.pretrain_iterations=60 il.dagger_rounds=12 store=$STORE)
  $PY -m learner.train "${common[@]}" run=probe-f3-s$seed perception.run=probe-f3-perception
  $PY -m learner.train "${common[@]}" run=probe-f4-s$seed perception.run=probe-f4-perception "${F4[@]}"
  $PY -m evaluation --compare "$STORE/probe-f3-s$seed@latest" "$STORE/probe-f4-s$seed@latest" \
    --suite val --out $STORE/eval-s$seed
done
