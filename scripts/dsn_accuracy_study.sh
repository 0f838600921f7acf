#!/bin/bash
# Multi-DSN against the source-only classifier (the same network trained with the source's task loss
# only) on the bundled dsn_shapes preset, 3 seeds: final held-out accuracy per domain and the mean
# over the targets, per method, then each method's mean over the seeds.
# Usage: scripts/dsn_accuracy_study.sh [OUT_DIR] [SIMILARITY ...]   (tessera built in release)
#   SIMILARITY: mmd (default) and/or dann, e.g. `scripts/dsn_accuracy_study.sh out/study mmd dann`.
# Extra preset overrides go in DSN_SET, e.g. DSN_SET="train.dann_schedule=constant".
set -euo pipefail
T=${TESSERA:-target/release/tessera}
OUT=${1:-out/dsn-accuracy-study}
shift || true
SIMS=("$@")
[ ${#SIMS[@]} -eq 0 ] && SIMS=(mmd)
EXTRA=()
for s in ${DSN_SET:-}; do EXTRA+=(--set "$s"); done
uptime
methods=(source_only "${SIMS[@]}")
for seed in 0 1 2; do for m in "${methods[@]}"; do
  dir="$OUT/seed${seed}_$m"
  if [ "$m" = source_only ]; then
    args=(--set train.source_only=true)
  else
    args=(--set train.source_only=false --set "train.similarity=$m")
  fi
  "$T" train dsn_shapes --quiet --set seed=$seed "${args[@]}" ${EXTRA[@]+"${EXTRA[@]}"} --out "$dir"
  python3 -c "import json,sys;e=json.load(open(sys.argv[1]))['epochs'][-1];print('seed $seed %-11s target accuracy %.4f per domain %s'%('$m',e['target_accuracy'],[round(a,3) for a in e['accuracy']]))" "$dir/train.json"
done; done
python3 - "$OUT" "${methods[@]}" <<'EOF'
import json, sys
out, methods = sys.argv[1], sys.argv[2:]
acc = {m: [json.load(open(f"{out}/seed{s}_{m}/train.json"))["epochs"][-1]["target_accuracy"] for s in range(3)] for m in methods}
base = sum(acc["source_only"]) / 3
for m in methods:
    mean = sum(acc[m]) / 3
    print(f"mean over 3 seeds: {m:<11} target accuracy {mean:.4f}  ({100 * (mean - base):+.1f} points vs source-only)")
EOF
uptime
