#!/usr/bin/env bash
# The asymmetric-critic probe (docs/study-pixels/asymmetric-critic.md): per seed, the camera study's distill ->
# RL+IL run twice, with the usual critic (camera parts) and with env.critic=[ego,route,agents,map]; one shared
# perception stage; scored on val by each run's own evaluations. Run from the repository root; a few runs of
# about 15 min each on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/asym-store}
OUT=${OUT:-runs/asym-out}
SEEDS=${SEEDS:-"0 1"}
COMMON=(stage=perception+distill+rl iterations=100 store.checkpoint_every=50 il.pretrain_iterations=60 eval.every=50
        il.dagger_rounds=6 il.teacher=reactive perception.run=asym-perception eval.suite=val)
for seed in $SEEDS; do
  for arm in sym asym; do
    extra=()
    if [ "$arm" = asym ]; then extra=("env.critic=[ego,route,agents,map]"); fi
    echo "=== seed $seed arm $arm start $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$PY" -m learner.train --run "asym-$arm-s$seed" --store "$STORE" --out "$OUT" "seed=$seed" "${COMMON[@]}" "${extra[@]}"
  done
done
