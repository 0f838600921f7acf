#!/usr/bin/env bash
# The GPU acceptance of issue 28 in one command, for a machine with an NVIDIA GPU where nothing can
# be built or installed (docs/GPU.md, "Checking a GPU machine"):
#
#   scripts/device-check.sh [TESSERA_BINARY]
#
# The binary is built elsewhere with `cargo build --release --features cuda --bin tessera` and
# travels with the command (default: ./tessera, then target/release/tessera). The CUDA libraries
# come from the machine's Python environment ($TESSERA_PYTHON, else /opt/torch/.venv, else python3:
# a CUDA PyTorch's wheels carry NVRTC, cuFFT, cuBLAS, cuDNN and NCCL) through scripts/cuda-env.sh.
# Steps: the machine (GPU, driver, libraries), then `tessera selftest --device cuda`. Everything goes
# to one report, $OUT/device-check.md (OUT defaults to ./device-check-out), with the self-test's
# JSON and the full log beside it. The exit status is the first failing step's.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/device-check-out}
mkdir -p "$out"
report=$out/device-check.md
log=$out/device-check.log
: >"$log"
status=0

bin=${1:-}
if [ -z "$bin" ]; then
  for candidate in ./tessera "$here/../target/release/tessera"; do
    if [ -x "$candidate" ]; then bin=$candidate; break; fi
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "device-check: no tessera binary (give its path; build it with --features cuda)" >&2
  exit 2
fi

section() { printf '\n## %s\n\n' "$1" >>"$report"; }
# Runs a step, its output into the log and (fenced) into the report; remembers the first failure.
step() {
  local name=$1
  shift
  local start end rc
  start=$(date +%s%N)
  echo "== $name: $*" >>"$log"
  "$@" >"$out/step.txt" 2>&1
  rc=$?
  end=$(date +%s%N)
  cat "$out/step.txt" >>"$log"
  {
    printf '`%s` — exit %d, %d ms\n\n```\n' "$*" "$rc" "$(((end - start) / 1000000))"
    cat "$out/step.txt"
    printf '```\n'
  } >>"$report"
  rm -f "$out/step.txt"
  echo "device-check: $name: exit $rc" >&2
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
  return "$rc"
}

# A step whose failure is worth reporting but fails nothing (facts about the machine).
info() {
  local kept=$status
  step "$@"
  status=$kept
}

{
  echo "# tessera device check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), binary $bin"
} >"$report"

section "Machine"
info "gpu" nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv
info "cpu" bash -c 'nproc; uptime'

section "CUDA libraries"
if env_line=$(bash "$here/cuda-env.sh" 2>"$out/env.txt"); then
  eval "$env_line"
  { echo '```'; cat "$out/env.txt"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo '```'; } >>"$report"
else
  { echo '```'; cat "$out/env.txt"; echo '```'; } >>"$report"
  if [ "$status" -eq 0 ]; then status=3; fi
fi
rm -f "$out/env.txt"

section "Self-test: every device operation against its CPU twin; device-resident PnP+TV runs timed against the CPU's"
step "selftest" "$bin" selftest --device cuda --json "$out/selftest.json"

section "Not yet in this check"
cat >>"$report" <<'MD'
The self-test's timing table holds issue 28's PnP+TV workloads (tomography 2048² with 100 angles,
8 Gaussians on a colour 4096² image) run whole on the device and on this machine's CPU, per
iteration. Presets through `tessera run --device cuda` (1 and 2 ranks), DRUNet, the wave kernels
and the benchmarks against PyTorch and deepinv come with the device paths that issue 28 still
lists as open (docs/GPU.md).
MD

echo "device-check: report in $report (exit $status)" >&2
exit "$status"
