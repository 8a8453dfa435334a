#!/bin/bash
# Does the camera student keep climbing past 24 DAgger rounds? (README, "What the student cannot see")  With a
# frozen lift, DAgger's states keep its BEV grid (33 kB) in place of their images (148 kB), so 48 rounds of 2,048
# env-steps fit on 24 GiB (32 were refused). The camera student at the camera study's recipe (60 IL iterations,
# 20 IL iterations a round, the `small` encoder, reactive labels) driven to ROUNDS rounds, every round's checkpoint
# kept, and the checkpoints after rounds 12, 24, 36 and 48 scored on val side by side (--compare pairs them clip by
# clip: one run's curve, the same perception throughout). Arguments go to learner.train (NAME names the runs and
# their perception), e.g. NAME=f4 rounds-probe.sh env.rig=front4 policy.lift_rig=front4. SUITE, the rounds scored
# (AT) and baselines driven beside them (BASELINES) are settings: the 48-round student on test, once, 3 seeds with
# one perception (as the study shares it): SEEDS="0 1 2" SUITE=test AT="12 48" BASELINES="reactive lane-follow"
# NAME=test48 STORE=runs/test48 rounds-probe.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/rounds-probe}
SEEDS=${SEEDS:-"0"}
ROUNDS=${ROUNDS:-48}
NAME=${NAME:-cam}
SUITE=${SUITE:-val}
AT=${AT:-"12 24 36 48"}
BASELINES=${BASELINES:-}
# shellcheck source=version-at.sh
. "$(dirname "$0")/version-at.sh"
for seed in $SEEDS; do
  run=$NAME-r$ROUNDS-s$seed
  $PY -m learner.train stage=perception+distill seed=$seed il.pretrain_iterations=60 il.dagger_rounds=$ROUNDS \
    perception.run=$NAME-perception store=$STORE store.keep_last=$((ROUNDS + 8)) run=$run "$@"
  specs=()
  for n in $AT; do
    [ "$n" -le "$ROUNDS" ] || continue
    v=$(version_at "$STORE/$run" "$n")
    specs+=("$STORE/$run@$v")
  done
  # shellcheck disable=SC2206
  specs+=($BASELINES)
  $PY -m evaluation --compare "${specs[@]}" --suite "$SUITE" --out "$STORE/eval-$SUITE-s$seed"
done
