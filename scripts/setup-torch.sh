#!/usr/bin/env bash
# Sets up libtorch for tessera's `torch` feature (tch 0.26): a virtual environment OUTSIDE the
# repository with torch 2.13.0 from PyPI, the exact version tch 0.26 checks for at build time
# (torch-sys 0.26's build.rs: TORCH_VERSION = "2.13.0"). See docs/TORCH.md.
#
# Idempotent: a second run that finds the environment complete only prints how to use it.
#
#   TESSERA_TORCH_VENV   where the environment goes (default ~/.cache/tessera/torch-venv)
#   TESSERA_TORCH_MODE   lean (default) or full: lean installs torch without its CUDA wheels and builds
#                        stub libraries in their place (CPU only; scripts/lean_torch.py says why and
#                        how); full installs the CUDA wheels as PyPI declares them (~2.5 GB more), for
#                        running on a GPU
#   PYTHON               interpreter to build the environment from (default python3)
#   PIP_CACHE_DIR        downloaded wheels are kept in $PIP_CACHE_DIR/tessera-wheels (default ~/.cache/pip)
#
# Prints, last, the environment to build with, e.g.
#   export LIBTORCH_USE_PYTORCH=1 PATH=~/.cache/tessera/torch-venv/bin:$PATH
# `eval "$(scripts/setup-torch.sh --env)"` sets it in the calling shell (other output goes to stderr).
set -euo pipefail

TORCH_VERSION=2.13.0
# For the fixture scripts under tests/fixtures/torch (and to silence torch's "no numpy" warning).
NUMPY_VERSION=2.4.6

VENV=${TESSERA_TORCH_VENV:-$HOME/.cache/tessera/torch-venv}
MODE=${TESSERA_TORCH_MODE:-lean}
PY=${PYTHON:-python3}
WHEELS=${PIP_CACHE_DIR:-$HOME/.cache/pip}/tessera-wheels
STAMP="torch==$TORCH_VERSION numpy==$NUMPY_VERSION mode=$MODE"
HERE=$(cd "$(dirname "$0")" && pwd)

env_only=0
[[ "${1:-}" == --env ]] && env_only=1
# With --env, everything but the final export line goes to stderr.
if [[ $env_only == 1 ]]; then exec 3>&1 1>&2; else exec 3>&1; fi

case "$MODE" in lean | full) ;; *)
    echo "TESSERA_TORCH_MODE must be lean or full, got '$MODE'" >&2
    exit 2
    ;;
esac

print_env() {
    echo "torch $TORCH_VERSION ($MODE) in $VENV; build tessera's torch feature with:"
    echo "export LIBTORCH_USE_PYTORCH=1 PATH=\"$VENV/bin:\$PATH\"" >&3
}

if [[ -x "$VENV/bin/python" && -f "$VENV/.tessera-setup" && "$(cat "$VENV/.tessera-setup")" == "$STAMP" ]] &&
    "$VENV/bin/python" -c "import importlib.util as u; assert u.find_spec('torch')" 2>/dev/null; then
    # (find_spec, not import: importing torch takes seconds; the smoke test below ran at install.)
    print_env
    exit 0
fi

# shellcheck source=scripts/torch-wheels.sh
source "$HERE/torch-wheels.sh"
require_lean_tools TESSERA_TORCH_MODE

start=$(date +%s)
echo "creating $VENV ($MODE torch $TORCH_VERSION) with $("$PY" --version)"
install_torch_packages "torch==$TORCH_VERSION" -- "numpy==$NUMPY_VERSION"

# Smoke test: what tch's build script asks (version, ABI, library path), and a convolution.
"$VENV/bin/python" - "$TORCH_VERSION" <<'EOF'
import sys
import torch
from torch.utils import cpp_extension
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert cpp_extension.library_paths()
y = torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3), padding=1)
assert y[0, 0, 1, 1].item() == 9.0
print(f"  torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, lib: {cpp_extension.library_paths()[0]}")
EOF
echo "$STAMP" >"$VENV/.tessera-setup"
echo "installed in $(($(date +%s) - start)) s ($(du -sh "$VENV" | cut -f1))"
print_env
