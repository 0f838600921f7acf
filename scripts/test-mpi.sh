#!/usr/bin/env bash
# Tests the `mpi` feature: builds tessera with Open MPI and checks that the same preset gives
# byte-identical reconstructions on 1 process and under `mpirun -np 2` and `-np 3`, with the MPI
# transport and with the default socket transport launched by mpirun; that a stopped rank is named;
# and that an elastic run under mpirun stops with a checkpoint that `--resume` finishes. Loopback
# only.
# Needs: libopenmpi-dev openmpi-bin libclang-dev (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cargo build --release --features mpi
target_dir="${CARGO_TARGET_DIR:-target}"
bin="$target_dir/release/tessera"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

args=(run multiblur --quiet --set 'image.size=[64,96]' --set algorithm.iterations=3
      --set tiling.patch_size=32 --set tiling.overlap=8)
"$bin" "${args[@]}" --out "$work/one"

passed=0
failed=0
for np in 2 3; do
  for backend in mpi sockets; do
    out="$work/np$np-$backend"
    if mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np "$np" \
         "$bin" "${args[@]}" --backend "$backend" --out "$out" \
       && cmp -s "$work/one/reconstruction.npy" "$out/reconstruction.npy" \
       && grep -q "\"world_size\": $np" "$out/metrics.json"; then
      echo "ok: mpirun -np $np --backend $backend == 1 process"
      passed=$((passed + 1))
    else
      echo "FAILED: mpirun -np $np --backend $backend differs from 1 process (or failed)"
      failed=$((failed + 1))
    fi
  done
done
# Liveness under mpirun: MPI calls cannot time out, so a SIGSTOPped rank must be named by the
# heartbeats beside MPI and the whole job must end, within seconds rather than never.
long_args=(run multiblur --quiet --set 'image.size=[64,96]' --set algorithm.iterations=100000
           --set tiling.patch_size=32 --set tiling.overlap=8 --backend mpi --liveness-timeout 2)
mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 \
  "$bin" "${long_args[@]}" --out "$work/stopped" 2>"$work/stopped.log" &
mpirun_pid=$!
rank1=""
for _ in $(seq 1 120); do
  for pid in $(pgrep -f -- "--out $work/stopped" || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' \
       && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$bin")" ]; then
      rank1=$pid
    fi
  done
  # The group is joined (heartbeats running) once rank 0 has staged its run folder.
  if [ -n "$rank1" ] && ls -a "$work" | grep -q '^\.tessera-partial-'; then break; fi
  sleep 0.5
done
stopped_at=$(date +%s)
[ -n "$rank1" ] && kill -STOP "$rank1"
ended=""
for _ in $(seq 1 60); do
  if ! kill -0 "$mpirun_pid" 2>/dev/null; then ended=yes; break; fi
  sleep 1
done
took=$(( $(date +%s) - stopped_at ))
if [ -n "$rank1" ] && [ -n "$ended" ] && ! wait "$mpirun_pid" \
   && grep -q "rank 1 sent no heartbeat" "$work/stopped.log"; then
  echo "ok: mpirun -np 2 --backend mpi: a SIGSTOPped rank is named and the job ends (${took} s)"
  passed=$((passed + 1))
else
  echo "FAILED: mpirun -np 2 --backend mpi with rank 1 stopped (pid '${rank1}', ended '${ended}', ${took} s):"
  cat "$work/stopped.log"
  failed=$((failed + 1))
fi
[ -n "$rank1" ] && kill -KILL "$rank1" 2>/dev/null || true
kill -KILL "$mpirun_pid" 2>/dev/null || true
wait "$mpirun_pid" 2>/dev/null || true


# Elastic under mpirun (docs/ELASTIC.md, "Under mpirun, srun or torchrun"): the group cannot shrink
# (no ULFM), so a lost rank stops the run; rank 0 keeps a checkpoint every iteration, the job ends
# within seconds (our heartbeats name the rank, mpirun stops the rest) and the log says which rank
# was lost and the command that continues the run, which then finishes with the bytes of an
# uninterrupted run, on 1 process and under mpirun -np 2.
iterations=6
seed=${TESSERA_TEST_SEED:-$RANDOM}
die_at=$((2 + seed % (iterations - 2)))   # 2..=iterations-1: at least one checkpoint after 0
echo "elastic under mpirun: seed $seed, rank 1 dies at the start of iteration $die_at"
el_args=(run multiblur --quiet --set 'image.size=[64,96]' --set "algorithm.iterations=$iterations"
         --set tiling.patch_size=32 --set tiling.overlap=8 --set distributed.checkpoint_every=1)
"$bin" "${el_args[@]}" --out "$work/el-one"
ck="$work/el.checkpoint"
started=$(date +%s)
set +e
TESSERA_TEST_DIE_AT="1:$die_at" timeout 120 \
  mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 3 \
  "$bin" "${el_args[@]}" --backend mpi --elastic --out "$work/el" >"$work/el.log" 2>&1
status=$?
set -e
took=$(( $(date +%s) - started ))
held=$(grep -o "(after iteration [0-9]*)" "$work/el.log" | head -1 | tr -dc 0-9)
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ ! -e "$work/el" ] \
   && grep -q "MPI communicators cannot shrink without ULFM, so a lost rank stops this run" "$work/el.log" \
   && grep -q "rank 1 closed its heartbeat link without leaving the group" "$work/el.log" \
   && grep -q "the run stopped: rank 1 was lost" "$work/el.log" \
   && grep -qxF "  mpirun -np 3 tessera run --resume $ck --backend mpi --elastic" "$work/el.log" \
   && [ -n "$held" ] && [ "$held" -ge $((die_at - 2)) ] && [ "$held" -le $((die_at - 1)) ] \
   && [ -f "$ck/checkpoint.tessera" ]; then
  echo "ok: mpirun -np 3 --backend mpi --elastic: rank 1 lost in iteration $die_at stops the run in ${took} s, named, with its checkpoint (after iteration $held) and the resume command"
  passed=$((passed + 1))
else
  echo "FAILED: mpirun -np 3 --backend mpi --elastic with rank 1 lost in iteration $die_at (status $status, ${took} s, checkpoint after '${held}'):"
  cat "$work/el.log"
  failed=$((failed + 1))
fi
# Every output but metrics.json (which records the resume) has the uninterrupted run's bytes.
same_outputs() {
  local f
  [ -d "$1" ] || return 1
  for f in "$work/el-one"/*; do
    [ "$(basename "$f")" = metrics.json ] && continue
    cmp -s "$f" "$1/$(basename "$f")" || return 1
  done
  [ "$(ls "$work/el-one" | wc -l)" -eq "$(ls "$1" | wc -l)" ]
}
if [ -f "$ck/checkpoint.tessera" ]; then
  cp -a "$ck" "$work/el-copy"
  if "$bin" run --resume "$ck" --quiet 2>"$work/resume1.log" && same_outputs "$work/el" \
     && grep -q "\"after\": $held" "$work/el/metrics.json" && [ ! -e "$ck" ]; then
    echo "ok: mpirun … --elastic stopped, then tessera run --resume DIR (1 process) == uninterrupted run"
    passed=$((passed + 1))
  else
    echo "FAILED: mpirun … --elastic stopped, then tessera run --resume DIR (1 process) differs (or failed):"
    cat "$work/resume1.log"
    failed=$((failed + 1))
  fi
  rm -rf "$work/el"
  mv "$work/el-copy" "$ck"
  if mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 \
       "$bin" run --resume "$ck" --quiet --backend mpi --elastic 2>"$work/resume2.log" \
     && same_outputs "$work/el" && grep -q '"world_size": 2' "$work/el/metrics.json"; then
    echo "ok: mpirun -np 2 tessera run --resume DIR --backend mpi --elastic == uninterrupted run"
    passed=$((passed + 1))
  else
    echo "FAILED: mpirun -np 2 tessera run --resume DIR --backend mpi --elastic differs (or failed):"
    cat "$work/resume2.log"
    failed=$((failed + 1))
  fi
else
  for how in "tessera run --resume DIR (1 process)" "mpirun -np 2 tessera run --resume DIR"; do
    echo "FAILED: mpirun … --elastic stopped, then $how: no checkpoint to resume in $ck"
    failed=$((failed + 1))
  done
fi

echo "mpi: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
