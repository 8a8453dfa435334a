#!/bin/bash
# Does a camera student keep more of a teacher that acts only on what its grid covers? (README, "What the student
# cannot see")  DAgger's reactive labeller (il.labeller.*: the labels only; the task, its scoring and evaluation's
# `reactive` unchanged) in two settings: `lab36` sees 36 m (the grid's reach ahead of the axle; 70 m by default) and
# ramps its nudges over 1.5 s / at least 10 m (2.5 s / 15 m by default); `labnudge` the nudge ramps only. The camera
# student at the camera study's budget (60 IL iterations, 12 DAgger rounds of 2,048 env-steps, the `small`
# encoder, perception shared; ~13 min a run), seeds SEEDS, scored on val beside the default-labelled student of
# the same seed (--compare pairs them on the same clips), and each labeller alone.
# Measured (README): the labellers alone 0.991 / 0.993 (CR 0); students lab36 0.825 / 0.837, labnudge 0.825 /
# 0.815 against 0.821 / 0.827: paired DS +0.007 [-0.020, +0.037] and -0.004 [-0.034, +0.027].
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/labeller-probe}
SEEDS=${SEEDS:-"0 1"}
NUDGE=(il.labeller.nudge_ramp_time=1.5 il.labeller.min_nudge_ramp=10)
$PY -m evaluation --compare reactive reactive:sensing_range=36,nudge_ramp_time=1.5,min_nudge_ramp=10 \
  reactive:nudge_ramp_time=1.5,min_nudge_ramp=10 --suite val --out $STORE/eval-labellers
for seed in $SEEDS; do
  common=(stage=perception+distill seed=$seed il.pretrain_iterations=60 il.dagger_rounds=12
          perception.run=probe-small-perception store=$STORE)
  $PY -m learner.train "${common[@]}" run=probe-r12-s$seed
  $PY -m learner.train "${common[@]}" run=probe-lab36-s$seed il.labeller.sensing_range=36 "${NUDGE[@]}"
  $PY -m learner.train "${common[@]}" run=probe-labnudge-s$seed "${NUDGE[@]}"
  $PY -m evaluation --compare "$STORE/probe-r12-s$seed@latest" "$STORE/probe-lab36-s$seed@latest" \
    "$STORE/probe-labnudge-s$seed@latest" --suite val --out $STORE/eval-s$seed
done
