#!/bin/bash
# Does the better encoder make a better camera student? (README, "Does the better encoder make a better
# driver?") The distilled student at the camera study's budget with each encoder, 2 seeds, scored on val;
# perception trained once per encoder and shared by the seeds. Run one at a time: ~2 h on 2 cores.
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/encoder-probe}
# (the 12-round rows: docs/study-pixels/dagger-probe.sh; STORE=runs/encoder-probe there reuses this perception run)
for seed in 0 1; do
  for enc in small deep-align; do
    over=""
    [ "$enc" = deep-align ] && over="policy.lift_backbone=deep policy.lift_align_s=0.3"
    $PY -m learner.train stage=perception+distill run=probe-$enc-s$seed seed=$seed il.pretrain_iterations=60 \
      perception.run=probe-$enc-perception $over store=$STORE
    $PY -m evaluation --policy $STORE/probe-$enc-s$seed@latest --suite val --out $STORE/eval-$enc-s$seed
  done
done
