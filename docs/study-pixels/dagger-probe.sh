#!/bin/bash
# Is the distilled camera student data-limited? (README, "Does the better encoder make a better driver?")
# The `small` student at the camera study's budget (60 IL iterations, reactive labels) with ROUNDS DAgger rounds
# of 2,048 env-steps each, seeds SEEDS, scored on val; perception trained by the first run and shared by the
# others (STORE=runs/encoder-probe reuses the encoder probe's).
# ~10 min a run at 6 rounds, ~14 at 12, ~18 at 18, plus ~1.5 min of evaluation, one at a time on 2 cores.
# Measured (README): 6 -> 12 rounds +0.063 [+0.028, +0.100] driving score on val; 12 -> 18 (ROUNDS="12 18")
# +0.025 [-0.010, +0.059].
# Each seed's policies are scored side by side (--compare): report.md pairs every setting with the first
# on the same clips (paired bootstrap intervals, McNemar on collisions).
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/dagger-probe}
ROUNDS=${ROUNDS:-"6 12"}
SEEDS=${SEEDS:-"0 1"}
for seed in $SEEDS; do
  policies=()
  for r in $ROUNDS; do
    $PY -m learner.train stage=perception+distill run=probe-r$r-s$seed seed=$seed il.pretrain_iterations=60 \
      il.dagger_rounds=$r perception.run=probe-small-perception store=$STORE
    policies+=("$STORE/probe-r$r-s$seed@latest")
  done
  $PY -m evaluation --compare "${policies[@]}" --suite val --out $STORE/eval-s$seed
done
