#!/bin/bash
# Is the camera student short of pixels or of budget? (README, "What the student cannot see")  The camera student's
# exact DAgger recipe (60 IL iterations, ROUNDS rounds x 2,048 env-steps, 20 IL iterations a round, reactive labels)
# on privileged observations (ground truth, no cameras; ~1-3 min a run on 2 cores), at 12, 24 and 48 rounds, and at
# 12 rounds with 4x the IL iterations or 4x the states a round; then the camera student at 24 rounds (learner.train
# refuses more on 24 GiB: 32 rounds of 148 KB states, twice over for a resume, pass 60 % of it). All on val, scored
# beside the 12-round camera student of the same seed (--compare pairs them clip by clip).
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/budget-probe}
SEEDS=${SEEDS:-"0 1"}
P=(env.observation=privileged env.cameras=false)
for seed in $SEEDS; do
  common=(seed=$seed il.pretrain_iterations=60 store=$STORE)
  for r in 12 24 48; do
    $PY -m learner.train stage=il "${common[@]}" "${P[@]}" il.dagger_rounds=$r run=priv-r$r-s$seed
  done
  $PY -m learner.train stage=il "${common[@]}" "${P[@]}" il.dagger_rounds=12 il.dagger_iterations=80 run=priv-it80-s$seed
  $PY -m learner.train stage=il "${common[@]}" "${P[@]}" il.dagger_rounds=12 il.dagger_steps=8192 run=priv-st8k-s$seed
  $PY -m learner.train stage=perception+distill "${common[@]}" il.dagger_rounds=12 perception.run=probe-perception run=cam-r12-s$seed
  $PY -m learner.train stage=perception+distill "${common[@]}" il.dagger_rounds=24 perception.run=probe-perception run=cam-r24-s$seed
  specs=()
  for run in cam-r12 cam-r24 priv-r12 priv-r24 priv-r48 priv-it80 priv-st8k; do specs+=("$STORE/$run-s$seed@latest"); done
  $PY -m evaluation --compare "${specs[@]}" --suite val --out "$STORE/eval-s$seed"
done
