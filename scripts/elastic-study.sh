#!/bin/bash
# Elastic recovery and overhead (issue #29, "Measured"; docs/BENCHMARKS.md, "Elastic recovery"):
# each preset on RANKS ranks, three ways, round-robin REPEATS times:
#   plain   tessera run PRESET --ranks N                       (no --elastic)
#   elastic tessera run PRESET --ranks N --elastic              (no loss)
#   loss    the elastic run with TESSERA_TEST_DIE_AT=RANK:K     (rank LOSE_RANK SIGKILLs itself at
#           the start of iteration / epoch K, the middle of the run)
# Every run's outputs but metrics.json must equal the first plain run's byte for byte (cmp), else the
# study stops naming the file. Then a table of medians: (c) the elastic run's wall time against the
# plain run's, (b) the loss run's against the elastic run's, (a) from the loss (as the launcher saw
# it: the dead rank reaped) to the first iteration completed after the recovery (metrics.json's
# recoveries[0].since_loss_secs), and recovery_secs (from the survivor's own failure).
# Times are wall times of the whole command (launcher, set-up, solve, outputs) and its CPU time
# (user + system of the launcher and its ranks), which a loaded machine inflates far less.
#
# Usage: scripts/elastic-study.sh [OUT_DIR]          (tessera built in release)
#   TESSERA=path/to/tessera  REPEATS=3  RANKS=4  LOSE_RANK=2  THREADS=1 (per rank)
#   PRESETS="multiblur tomography2d fwi_marmousi"  KEEP=1 keeps every run's outputs
# The sizes: multiblur 8 iterations (683×1024 colour, 8 blurs), tomography2d 20 iterations (256²),
# fwi_marmousi 6 epochs without figures (80×240, 24 shots, batches of 6); the loss at the start of
# iteration 5, iteration 11 and epoch 4. SIZE_<preset>="K --set …" replaces one (see `sizes`), e.g.
#   SIZE_tomography2d="51 --set algorithm.iterations=100" scripts/elastic-study.sh out/full
set -euo pipefail
T=${TESSERA:-${CARGO_TARGET_DIR:-target}/release/tessera}
OUT=${1:-out/elastic-study}
REPEATS=${REPEATS:-3}
RANKS=${RANKS:-4}
LOSE_RANK=${LOSE_RANK:-2}
THREADS=${THREADS:-1}
PRESETS=${PRESETS:-multiblur tomography2d fwi_marmousi}
[ -x "$T" ] || { echo "no tessera binary at $T (build it, or set TESSERA)" >&2; exit 2; }
[ "$LOSE_RANK" -gt 0 ] && [ "$LOSE_RANK" -lt "$RANKS" ] ||
  { echo "LOSE_RANK=$LOSE_RANK must name a rank in 1..$((RANKS - 1))" >&2; exit 2; }
[ "$REPEATS" -ge 1 ] || { echo "REPEATS=$REPEATS must be at least 1" >&2; exit 2; }
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
  echo "$OUT is not empty: give another folder or remove it" >&2
  exit 2
fi
mkdir -p "$OUT"

# preset → "K overrides…": the loss at the start of iteration (epoch) K, and the preset's size.
# SIZE_<preset>="K overrides…" in the environment replaces a line.
sizes() {
  local own="SIZE_$1"
  if [ -n "${!own:-}" ]; then echo "${!own}"; return; fi
  case $1 in
    multiblur) echo "5 --set algorithm.iterations=8" ;;
    tomography2d) echo "11 --set algorithm.iterations=20" ;;
    fwi_marmousi) echo "4 --set fwi.epochs=6 --set output.figures_every=0" ;;
    *) echo "no study size for preset $1 (add it to sizes in $0)" >&2; return 1 ;;
  esac
}

SAMPLES="$OUT/samples.tsv"
printf 'preset\tmode\trepeat\twall_secs\tcpu_secs\tmetrics\n' > "$SAMPLES"
LOADS="$OUT/load.txt"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" | tee "$LOADS"
echo "tessera: $("$T" --version 2>/dev/null || echo "$T"), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')" | tee -a "$LOADS"
echo "start $(date -u '+%Y-%m-%d %H:%M UTC'): $(uptime)" | tee -a "$LOADS"

# Runs a command with its output in file $1; prints its wall seconds, the CPU seconds (user + system)
# of it and its descendants, and its exit status.
timed() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
with open(sys.argv[1], "w") as log:
    status = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
wall = time.monotonic() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.3f} {used.ru_utime + used.ru_stime:.3f} {status}")
PY
}

# Every output file but metrics.json of run $2 equals run $1's.
same_outputs() {
  local want=$1 got=$2 f
  diff <(cd "$want" && ls | grep -v '^metrics.json$') <(cd "$got" && ls | grep -v '^metrics.json$') >&2 ||
    { echo "$got and $want hold different files" >&2; return 1; }
  for f in $(cd "$want" && ls | grep -v '^metrics.json$'); do
    cmp "$want/$f" "$got/$f" >&2 || { echo "$got/$f differs from $want/$f" >&2; return 1; }
  done
}

for preset in $PRESETS; do
  spec=$(sizes "$preset")
  read -r die_k overrides <<< "$spec"
  # shellcheck disable=SC2206
  args=(run "$preset" --quiet --ranks "$RANKS" --threads-per-rank "$THREADS" $overrides)
  reference=""
  echo "$preset: ${args[*]}, the loss: rank $LOSE_RANK at $die_k; $(uptime)" | tee -a "$LOADS"
  for ((i = 1; i <= REPEATS; i++)); do
    for mode in plain elastic loss; do
      dir="$OUT/$preset/$mode-$i"
      mkdir -p "$OUT/$preset"
      extra=()
      env=()
      case $mode in
        elastic) extra=(--elastic) ;;
        loss) extra=(--elastic); env=(TESSERA_TEST_DIE_AT="$LOSE_RANK:$die_k") ;;
      esac
      read -r wall cpu status < <(timed "$dir.log" env ${env[@]+"${env[@]}"} "$T" "${args[@]}" \
        ${extra[@]+"${extra[@]}"} --out "$dir")
      if [ "$status" != 0 ]; then
        echo "$preset $mode $i failed (status $status): see $dir.log" >&2
        tail -5 "$dir.log" >&2
        exit 1
      fi
      [ -n "$reference" ] || reference=$dir
      [ "$dir" = "$reference" ] || same_outputs "$reference" "$dir"
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$preset" "$mode" "$i" "$wall" "$cpu" "$dir/metrics.json" \
        >> "$SAMPLES"
      echo "  $mode $i: $wall s, CPU $cpu s"
      if [ -z "${KEEP:-}" ] && [ "$dir" != "$reference" ]; then
        find "$dir" -type f ! -name metrics.json -delete
      fi
    done
  done
  echo "$preset: every run's outputs equal $reference's (cmp, all but metrics.json)" | tee -a "$LOADS"
done
echo "end $(date -u '+%Y-%m-%d %H:%M UTC'): $(uptime)" | tee -a "$LOADS"

python3 - "$SAMPLES" "$RANKS" "$LOSE_RANK" <<'EOF'
import csv, json, statistics, sys
samples, ranks, lose = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = list(csv.DictReader(open(samples), delimiter="\t"))
presets = list(dict.fromkeys(r["preset"] for r in rows))
med = statistics.median

def spread(xs):
    return f"{min(xs):.2f}–{max(xs):.2f}"

print()
print(f"Medians over {len({r['repeat'] for r in rows})} rounds, {ranks} ranks, rank {lose} lost; "
      "seconds (min–max in brackets); wall: the whole command; CPU: user + system of all its "
      "processes.")
print()
print("| preset | plain, wall | elastic, wall | (c) elastic / plain, wall | plain, CPU | elastic, CPU "
      "| (c) elastic / plain, CPU | loss run, wall | (b) one loss costs, wall "
      "| (a) loss → first iteration after | failure → first iteration after | resumed after "
      f"| one iteration (elastic, {ranks} ranks) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in presets:
    wall = {m: [float(r["wall_secs"]) for r in rows if r["preset"] == p and r["mode"] == m]
            for m in ("plain", "elastic", "loss")}
    metrics = {m: [json.load(open(r["metrics"])) for r in rows if r["preset"] == p and r["mode"] == m]
               for m in ("elastic", "loss")}
    recoveries = [m["recoveries"] for m in metrics["loss"]]
    for rec, m in zip(recoveries, metrics["loss"]):
        assert len(rec) == 1 and rec[0]["lost_slots"] == [lose], rec
        assert m["world_size"] == ranks - 1, m["world_size"]
    for m in metrics["elastic"]:
        assert "recoveries" not in m, m["recoveries"]
    since_loss = [rec[0]["since_loss_secs"] for rec in recoveries]
    recovery = [rec[0]["recovery_secs"] for rec in recoveries]
    resumed = sorted({rec[0]["resumed_from"] for rec in recoveries})
    unit = "epoch" if "epochs" in metrics["elastic"][0] else "iteration"
    units = metrics["elastic"][0].get("epochs") or metrics["elastic"][0].get("iterations")
    per_unit = [m["solve_secs"] / units for m in metrics["elastic"]]
    cpu = {m: [float(r["cpu_secs"]) for r in rows if r["preset"] == p and r["mode"] == m]
           for m in ("plain", "elastic")}
    plain, elastic, loss = (med(wall[m]) for m in ("plain", "elastic", "loss"))
    plain_cpu, elastic_cpu = med(cpu["plain"]), med(cpu["elastic"])
    print(f"| {p} | {plain:.2f} ({spread(wall['plain'])}) | {elastic:.2f} ({spread(wall['elastic'])}) "
          f"| {elastic / plain:.3f} ({100 * (elastic / plain - 1):+.1f} %) "
          f"| {plain_cpu:.2f} ({spread(cpu['plain'])}) | {elastic_cpu:.2f} ({spread(cpu['elastic'])}) "
          f"| {elastic_cpu / plain_cpu:.3f} ({100 * (elastic_cpu / plain_cpu - 1):+.1f} %) "
          f"| {loss:.2f} ({spread(wall['loss'])}) | {loss - elastic:+.2f} s ({100 * (loss / elastic - 1):+.1f} %) "
          f"| {med(since_loss):.2f} ({spread(since_loss)}) | {med(recovery):.2f} ({spread(recovery)}) "
          f"| {unit} {', '.join(map(str, resumed))} of {units} | {med(per_unit):.2f} |")
EOF
