#!/bin/bash
# Multi-DSN (MMD) against the source-only classifier (the same network trained with the source's task
# loss only) on the bundled dsn_shapes preset, 3 seeds: final held-out accuracy per domain and the
# mean over the targets. Usage: scripts/dsn_accuracy_study.sh [OUT_DIR] (tessera built in release).
set -euo pipefail
T=${TESSERA:-target/release/tessera}
OUT=${1:-out/dsn-accuracy-study}
uptime
for seed in 0 1 2; do for so in false true; do
  dir="$OUT/seed${seed}_source_only_$so"
  "$T" train dsn_shapes --quiet --set seed=$seed --set train.source_only=$so --out "$dir"
  python3 -c "import json,sys;e=json.load(open(sys.argv[1]))['epochs'][-1];print('seed $seed source_only=$so target accuracy %.4f per domain %s'%(e['target_accuracy'],[round(a,3) for a in e['accuracy']]))" "$dir/train.json"
done; done
uptime
