#!/bin/bash
# Multi-DSN with the encoders and decoder split spatially ([distributed] ranks_per_domain, issue 12):
# peak memory per rank and seconds per step at 128² (batch 32, 1 source + 1 target), against the
# baseline of one process holding both domains whole, measured in the same run; printed as ratios.
#   scripts/dsn_spatial_memory.sh [out_dir]    (TESSERA: the binary, default target/release/tessera)
set -euo pipefail
B=${TESSERA:-target/release/tessera}
O=${1:-out/dsn_spatial_memory}
STEPS=4
S=(--quiet --set model.image_size=128 --set train.batch=32 --set train.epochs=1
   --set train.steps_per_epoch=$STEPS --set train.train_images=64 --set train.test_images=16
   --set 'domains=[{name="source"},{name="noisy",transforms=[{kind="noise",sigma=0.25}]}]')
uptime
# A process with the same code and tiny images: what does not scale with the image.
$B train dsn_shapes "${S[@]}" --set model.image_size=16 --out "$O/base" >/dev/null
for cfg in "1 1" "2 1" "2 2" "4 2"; do
  set -- $cfg
  rm -rf "$O/r$1p$2"
  $B train dsn_shapes --ranks "$1" "${S[@]}" --set distributed.ranks_per_domain="$2" \
    --out "$O/r$1p$2" 2>&1 | grep -v '^\[launcher\]' || true
done
python3 - "$O" "$STEPS" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
def ranks(name):
    return json.load(open(f"{out}/{name}/train.json"))["per_rank"]
base = ranks("base")[0]["peak_rss_bytes"] / 2**20
one = ranks("r1p1")[0]
one_mem = one["peak_rss_bytes"] / 2**20
one_step = (one["compute_secs"] + one["exchange_secs"]) / steps
print(f"process without images (16² run): {base:.0f} MiB")
print(f"{'ranks':>5} {'per domain':>10} {'domains/rank':>12} {'peak MiB/rank':>14} {'ratio':>6} "
      f"{'above base':>10} {'ratio':>6} {'s/step':>7} {'ratio':>6} {'exchange':>8}")
for name, n, p in [("r1p1", 1, 1), ("r2p1", 2, 1), ("r2p2", 2, 2), ("r4p2", 4, 2)]:
    rs = ranks(name)
    mem = max(r["peak_rss_bytes"] for r in rs) / 2**20
    step = max(r["compute_secs"] + r["exchange_secs"] for r in rs) / steps
    exch = max(r["exchange_secs"] for r in rs) / steps
    print(f"{n:>5} {p:>10} {len(rs[0]['domains']):>12} {mem:>14.1f} {mem / one_mem:>6.2f} "
          f"{mem - base:>10.1f} {(mem - base) / (one_mem - base):>6.2f} {step:>7.3f} "
          f"{step / one_step:>6.2f} {exch:>8.3f}")
PY
