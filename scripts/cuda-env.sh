#!/usr/bin/env bash
# Prints the shell line that lets a tessera built with `--features cuda` find NVIDIA's libraries,
# which it loads at run time (docs/GPU.md):
#
#   eval "$(scripts/cuda-env.sh)"            # the libraries of the Python environment's CUDA wheels
#   eval "$(scripts/cuda-env.sh ROOT...)"    # or of folders holding an `nvidia/` package tree
#                                            # (e.g. `pip install --target ROOT nvidia-cuda-nvrtc`)
#
# PyPI's NVIDIA wheels (what a CUDA PyTorch installs) put their libraries in
# site-packages/nvidia/*/lib (CUDA 13: nvidia/cu13/lib for the toolkit's, nvidia/cudnn/lib,
# nvidia/nccl/lib). Every such folder goes on LD_LIBRARY_PATH, in front of what is there. NCCL ships
# only libnccl.so.2, a name cudarc does not try, so a `libnccl.so` link to it is made in a private
# folder that goes on the path too. The Python used is $TESSERA_PYTHON, else /opt/torch/.venv's,
# else python3. What was found is reported on stderr.
set -euo pipefail

roots=("$@")
if [ "${#roots[@]}" -eq 0 ]; then
  python=${TESSERA_PYTHON:-}
  if [ -z "$python" ]; then
    if [ -x /opt/torch/.venv/bin/python3 ]; then python=/opt/torch/.venv/bin/python3; else python=python3; fi
  fi
  # The folders of the `nvidia` namespace package, one per line (none when it is not installed).
  mapfile -t pkgs < <("$python" - <<'PY' 2>/dev/null || true
import importlib.util
spec = importlib.util.find_spec("nvidia")
for path in (spec.submodule_search_locations or []) if spec else []:
    print(path)
PY
)
  if [ "${#pkgs[@]}" -eq 0 ]; then
    echo "cuda-env.sh: $python has no NVIDIA wheels (no 'nvidia' package); pass the folders that hold them" >&2
    exit 1
  fi
else
  pkgs=()
  for root in "${roots[@]}"; do
    if [ ! -d "$root/nvidia" ]; then
      echo "cuda-env.sh: $root has no nvidia/ folder" >&2
      exit 1
    fi
    pkgs+=("$root/nvidia")
  done
fi

dirs=()
for pkg in "${pkgs[@]}"; do
  for lib in "$pkg"/*/lib; do
    [ -d "$lib" ] && dirs+=("$(cd "$lib" && pwd)")
  done
done
if [ "${#dirs[@]}" -eq 0 ]; then
  echo "cuda-env.sh: no nvidia/*/lib folders under ${pkgs[*]}" >&2
  exit 1
fi

links="${TMPDIR:-/tmp}/tessera-cuda-links-$(id -u)"
mkdir -p "$links"
for dir in "${dirs[@]}"; do
  if [ -e "$dir/libnccl.so.2" ]; then
    ln -sfn "$dir/libnccl.so.2" "$links/libnccl.so"
  fi
done

path=$(IFS=:; echo "${dirs[*]}"):$links
# The driver's libcuda.so.1 where containers mount it, in case the loader's cache does not list it.
for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  if [ -e "$dir/libcuda.so.1" ]; then path=$path:$dir; fi
done
for name in libnvrtc.so.13 libcufft.so.12 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  for dir in "${dirs[@]}"; do
    if [ -e "$dir/$name" ]; then found=$dir; break; fi
  done
  echo "cuda-env.sh: $name: ${found:-not found}" >&2
done
printf 'export LD_LIBRARY_PATH=%q\n' "$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
