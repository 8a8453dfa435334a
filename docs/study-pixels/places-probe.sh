#!/bin/bash
# Does the camera student drive new places worse because it has seen too few? (README, "What the student cannot
# see", *Places it has driven, and places it has not*)  First the held-in look: the 48-round students of
# rounds-probe.sh (RUNS, their store's run folders) on the 112 clips of train's shard-05 (14 training places that
# DAgger drives and no demonstration covers) beside val. Then a suite of more places: train's 64 demonstration
# clips (so the expert demonstrations are the baseline's), then 504 new places with 2 traffic variants each, ordered
# as the built-in suites are (variant by variant, kinds in turn); and the camera student at ROUNDS (24) DAgger
# rounds on it, with the baseline's perception (PERCEPTION) and with perception trained on the new places, scored on
# val beside the baseline's own checkpoint after as many rounds (--compare pairs them clip by clip). The README's
# figures paired against those checkpoints of the 48-round runs, as here. ARMS picks the arms (pl: the baseline's
# perception, plp: perception trained on the new places); TEST=1 then scores each seed's arms once on test beside
# the baseline, reactive and lane-follow. BASE_ROUNDS (ROUNDS when unset) picks the baseline's checkpoint when the
# arms run longer than it. The README's 48-round figures: ROUNDS=48 SEEDS="0 1 2" ARMS=plp TEST=1
# RUNS="cam-r48-s0 cam-r48-s1 cam-r48-s2" (rounds-probe.sh with SEEDS="0 1 2" makes the third baseline); its
# 72-round figures: the same with ROUNDS=72 BASE_ROUNDS=48 ARMS=pl (the README's runs were the 48-round ones resumed
# to 72 rounds, which learner.train does when a finished imitation run is asked for more).
set -euo pipefail
PY=${PY:-.venv/bin/python}
STORE=${STORE:-runs/rounds-probe}
SEEDS=${SEEDS:-"0 1"}
ROUNDS=${ROUNDS:-24}
BASE_ROUNDS=${BASE_ROUNDS:-$ROUNDS}
RUNS=${RUNS:-"cam-r48-s0 cam-r48-s1"}
PERCEPTION=${PERCEPTION:-probe-perception}
WORK=${WORK:-runs/places-probe}
ARMS=${ARMS:-"pl plp"}
for arm in $ARMS; do
  case $arm in pl | plp) ;; *) echo "ARMS: unknown arm '$arm' (pl, plp)" >&2; exit 2 ;; esac
done
mkdir -p "$WORK"
# shellcheck source=version-at.sh
. "$(dirname "$0")/version-at.sh"
held_in=$($PY -c "from scenarios.builtin import load_suite, suite_folder; load_suite('train'); print(suite_folder('train') / 'shard-05')")
specs=()
for run in $RUNS; do specs+=("$STORE/$run@latest"); done
$PY -m evaluation --compare "${specs[@]}" --suite "$held_in" --out "$WORK/eval-held-in" videos=0
# suite.yaml is the generator's last write: a folder without it is a build that stopped, and is built again
[ -f "$WORK/gen/suite.yaml" ] || $PY -m scenarios.generate --suite train --seed 14 --count 1008 --variants 2 --out "$WORK/gen" -q
if [ ! -d "$WORK/suite" ]; then
  $PY - "$WORK/suite" "$WORK/gen" <<'PYEOF'
import json, os, re, shutil, sys
from pathlib import Path
from scenarios.builtin import builtin_files
out, gen = Path(sys.argv[1]), Path(sys.argv[2])
tmp = out.with_name(out.name + ".tmp")
shutil.rmtree(tmp, ignore_errors=True)
(tmp / "backgrounds").mkdir(parents=True)
(tmp / "assets").mkdir()
def place(src, dst):  # a hard link where the filesystem allows it (no copy of 3 GB), else a copy
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
new = sorted(gen.glob("*.json"), key=lambda p: (int(p.stem[-2:]), int(re.search(r"-(\d{8})-\d\d$", p.stem).group(1))))
for i, p in enumerate([*builtin_files("train:64"), *new]):
    place(p, tmp / f"{i:05d}-{p.name}")  # names in this order: a folder's scenarios load sorted by name
    d = json.loads(p.read_text())
    for rel in [d["scene"]["background"], *d["scene"]["assets"].values()]:
        if not (tmp / rel).exists():
            place(p.parent / rel, tmp / rel)
tmp.rename(out)
PYEOF
fi
if [[ " $ARMS " == *" plp "* ]]; then  # only the plp arm reads perception trained on the new places
  $PY -m learner.train stage=perception seed=0 run=places-perc perception.run=places-perception \
    suite="$WORK/suite" store=$STORE
fi
for seed in $SEEDS; do
  common=(stage=perception+distill seed=$seed il.pretrain_iterations=60 il.dagger_rounds=$ROUNDS store=$STORE
    store.keep_last=$((ROUNDS + 8)) suite="$WORK/suite")
  base=$(echo $RUNS | cut -d' ' -f$((seed + 1)))  # RUNS lists the baselines of seeds 0, 1, ... in order
  v=$(version_at "$STORE/$base" "$BASE_ROUNDS")
  specs=("$STORE/$base@$v")
  for arm in $ARMS; do
    if [ $arm = pl ]; then perception=$PERCEPTION; else perception=places-perception; fi
    $PY -m learner.train "${common[@]}" run=$arm-r$ROUNDS-s$seed perception.run=$perception
    v=$(version_at "$STORE/$arm-r$ROUNDS-s$seed" "$ROUNDS")
    specs+=("$STORE/$arm-r$ROUNDS-s$seed@$v")
  done
  $PY -m evaluation --compare "${specs[@]}" --suite val --out "$WORK/eval-r$ROUNDS-s$seed" videos=0
  if [ "${TEST:-0}" = 1 ]; then  # the recipe chosen on val, scored once on test
    $PY -m evaluation --compare "${specs[@]}" reactive lane-follow --suite test --out "$WORK/test-r$ROUNDS-s$seed" videos=0
  fi
done
