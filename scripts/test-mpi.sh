#!/usr/bin/env bash
# Tests the `mpi` feature: builds tessera with Open MPI and checks that the same preset gives
# byte-identical reconstructions on 1 process and under `mpirun -np 2` and `-np 3`, with the MPI
# transport and with the default socket transport launched by mpirun. Loopback only.
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

echo "mpi: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
