#!/bin/bash
# Does a camera student keep more of a privileged RL teacher than of the reactive rule? (README, "What the
# student cannot see")  First the privileged teacher (docs/study-teacher's DAgger -> RL+IL settings: 500 IL
# iterations, 10 DAgger rounds of 4,096 env-steps, 490 RL iterations of 2,048 env-steps, privileged observation,
# cameras off, in process; ~18 min), then the camera student at the camera study's budget (60 IL iterations, 12
# DAgger rounds of 2,048 env-steps, the `small` encoder, perception shared) labelled by the teacher's action
# distributions (il.teacher=<teacher>; ~15 min a seed), seeds SEEDS, all scored on val beside each other.
# Measured (README): the teacher 0.938 driving score on val; the students 0.813 / 0.784 (0.85x of it), against
# 0.821 / 0.827 for the reactive-labelled student of the same seeds: paired DS -0.025 [-0.068, +0.016], CR +0.093.
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/teacher-probe}
SEEDS=${SEEDS:-"0 1"}
$PY -m learner.train stage=il+rl run=teacher-priv-s0 seed=0 env.observation=privileged env.cameras=false \
  rollout.num_actors=0 rollout.envs_per_actor=16 rollout.fragment_length=128 il.pretrain_iterations=500 \
  il.dagger_rounds=10 il.dagger_steps=4096 il.dagger_iterations=50 iterations=490 eval.every=70 eval.num_envs=14 \
  store.checkpoint_every=70 store=$STORE
policies=("$STORE/teacher-priv-s0@latest")
for seed in $SEEDS; do
  $PY -m learner.train stage=perception+distill run=probe-tdistill-s$seed seed=$seed il.pretrain_iterations=60 \
    il.dagger_rounds=12 il.teacher=$STORE/teacher-priv-s0@latest perception.run=probe-small-perception store=$STORE
  policies+=("$STORE/probe-tdistill-s$seed@latest")
done
$PY -m evaluation --compare "${policies[@]}" --suite val --out $STORE/eval-teacher
