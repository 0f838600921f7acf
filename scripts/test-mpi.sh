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
echo "mpi: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
