#!/usr/bin/env bash
# Sets up the Python side of tessera's benchmarks: a virtual environment OUTSIDE the repository with
# deepinv 0.5.0 on a CPU-only torch, for scripts/bench_deepinv.py (see docs/BENCHMARKS.md).
#
# Idempotent: a second run that finds the environment complete only prints its versions.
#
#   TESSERA_BENCH_VENV   where the environment goes (default ~/.cache/tessera/deepinv-venv)
#   TESSERA_BENCH_TORCH  lean (default) or full, see below
#   PYTHON               interpreter to build the environment from (default python3, >= 3.10)
#   PIP_CACHE_DIR        downloaded wheels are kept in $PIP_CACHE_DIR/tessera-wheels (default ~/.cache/pip)
#
# Why "lean": PyPI has no CPU-only torch for Linux x86_64. Its torch wheel (539 MB) declares ~2.5 GB of
# CUDA wheels (nvidia-*, triton) that a CPU run never calls, but torch's shared libraries are linked
# against them, so `pip install --no-deps` alone gives a torch that fails to import. Lean mode installs
# the torch wheel without them and builds tiny stub libraries (one per missing CUDA soname, every entry
# point returning "no device") so that the dynamic linker is satisfied; torch then runs on CPU with the
# same CPU kernels, and torch.cuda.is_available() is False (scripts/lean_torch.py, shared with
# scripts/setup-torch.sh). Needs cc, readelf and nm (Debian's build-essential / binutils). "full"
# installs the CUDA wheels as PyPI declares them instead.
set -euo pipefail

DEEPINV_VERSION=0.5.0
TORCH_VERSION=2.15.0       # the torch the fixtures in tests/fixtures/deepinv were made with
TORCHVISION_VERSION=0.29.2 # requires torch>=2.14
TORCHMETRICS_VERSION=1.9.0

VENV=${TESSERA_BENCH_VENV:-$HOME/.cache/tessera/deepinv-venv}
MODE=${TESSERA_BENCH_TORCH:-lean}
PY=${PYTHON:-python3}
WHEELS=${PIP_CACHE_DIR:-$HOME/.cache/pip}/tessera-wheels
HERE=$(cd "$(dirname "$0")" && pwd)
STAMP="deepinv==$DEEPINV_VERSION torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION mode=$MODE"

case "$MODE" in lean | full) ;; *)
    echo "TESSERA_BENCH_TORCH must be lean or full, got '$MODE'" >&2
    exit 2
    ;;
esac

report() {
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, deepinv
for name in ("deepinv", "torch", "torchvision", "torchmetrics", "numpy"):
    print(f"  {name:13s} {md.version(name)}")
print(f"  torch threads {torch.get_num_threads()}  cuda available: {torch.cuda.is_available()}")
EOF
    echo "  venv: $VENV ($(du -sh "$VENV" | cut -f1)), wheels: $WHEELS ($(du -sh "$WHEELS" 2>/dev/null | cut -f1))"
}

if [[ -x "$VENV/bin/python" && -f "$VENV/.tessera-setup" && "$(cat "$VENV/.tessera-setup")" == "$STAMP" ]] &&
    "$VENV/bin/python" -c "import deepinv, torch" 2>/dev/null; then
    echo "deepinv environment already set up ($STAMP):"
    report
    exit 0
fi

"$PY" -c 'import sys; assert sys.version_info >= (3, 10), "deepinv 0.5.0 needs Python >= 3.10"'
# shellcheck source=scripts/torch-wheels.sh
source "$HERE/torch-wheels.sh"
require_lean_tools TESSERA_BENCH_TORCH

start=$(date +%s)
wheels_before=$(du -sb "$WHEELS" 2>/dev/null | cut -f1 || echo 0)
echo "creating $VENV ($MODE torch) with $("$PY" --version)"
install_torch_packages "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" \
    "torchmetrics==$TORCHMETRICS_VERSION" "deepinv==$DEEPINV_VERSION"

# Smoke test: a blur through deepinv on CPU.
"$VENV/bin/python" - <<'EOF'
import warnings
import torch, deepinv as dinv
warnings.simplefilter("ignore", DeprecationWarning)  # physics.blur.gaussian_blur: kept for old callers
x = torch.rand(1, 3, 16, 16)
y = dinv.physics.Blur(filter=dinv.physics.blur.gaussian_blur(sigma=(1.0, 0.5), angle=30.0), padding="circular")(x)
assert y.shape == x.shape and torch.isfinite(y).all()
assert not torch.cuda.is_available() or torch.version.cuda
EOF
echo "$STAMP" >"$VENV/.tessera-setup"

wheels_after=$(du -sb "$WHEELS" | cut -f1)
echo "installed in $(($(date +%s) - start)) s, downloaded $(((wheels_after - wheels_before) / 1000000)) MB:"
report
