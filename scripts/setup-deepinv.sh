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
# same CPU kernels, and torch.cuda.is_available() is False. Needs cc, readelf and nm (Debian's
# build-essential / binutils). "full" installs the CUDA wheels as PyPI declares them instead.
set -euo pipefail

DEEPINV_VERSION=0.5.0
TORCH_VERSION=2.15.0       # the torch the fixtures in tests/fixtures/deepinv were made with
TORCHVISION_VERSION=0.29.2 # requires torch>=2.14
TORCHMETRICS_VERSION=1.9.0

VENV=${TESSERA_BENCH_VENV:-$HOME/.cache/tessera/deepinv-venv}
MODE=${TESSERA_BENCH_TORCH:-lean}
PY=${PYTHON:-python3}
WHEELS=${PIP_CACHE_DIR:-$HOME/.cache/pip}/tessera-wheels
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
if [[ "$MODE" == lean ]]; then
    for tool in cc readelf nm; do
        command -v "$tool" >/dev/null || {
            echo "lean mode needs '$tool' (apt-get install build-essential), or set TESSERA_BENCH_TORCH=full" >&2
            exit 1
        }
    done
fi

start=$(date +%s)
wheels_before=$(du -sb "$WHEELS" 2>/dev/null | cut -f1 || echo 0)
echo "creating $VENV ($MODE torch) with $("$PY" --version)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")" "$WHEELS"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" --disable-pip-version-check)

# The package mirror sends no cache validators, so pip's HTTP cache keeps nothing: keep the wheels
# ourselves. `pip download -d` skips files already in $WHEELS.
TOP=("torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" "torchmetrics==$TORCHMETRICS_VERSION"
    "deepinv==$DEEPINV_VERSION")
if [[ "$MODE" == full ]]; then
    "${PIP[@]}" download -q -d "$WHEELS" "${TOP[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" "${TOP[@]}"
else
    "${PIP[@]}" download -q --no-deps -d "$WHEELS" "${TOP[@]}"
    # The dependencies of the four, less each other and the CUDA wheels, from their metadata.
    mapfile -t DEPS < <("$VENV/bin/python" - "$WHEELS" "$TORCH_VERSION" "$TORCHVISION_VERSION" \
        "$TORCHMETRICS_VERSION" "$DEEPINV_VERSION" <<'EOF'
import glob, sys, zipfile
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
wheels, versions = sys.argv[1], sys.argv[2:]
top = dict(zip(("torch", "torchvision", "torchmetrics", "deepinv"), versions))
skip = set(top) | {"triton"}
out = set()
for name, version in top.items():
    [path] = [p for p in glob.glob(f"{wheels}/{name}-{version}-*.whl")]
    with zipfile.ZipFile(path) as whl:
        meta = whl.read(f"{name}-{version}.dist-info/METADATA").decode()
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        dep = canonicalize_name(req.name)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        if dep in skip or dep.startswith(("nvidia-", "cuda-")):
            continue
        out.add(str(req).split(";")[0])
print("\n".join(sorted(out)))
EOF
    )
    "${PIP[@]}" download -q -d "$WHEELS" "${DEPS[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" "${DEPS[@]}"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELS" --no-deps "${TOP[@]}"

    SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$VENV/bin/python" - "$SITE" <<'EOF'
# Builds one stub library per CUDA soname that torch's shared objects need and the environment lacks,
# into site-packages/nvidia/cu13/lib (on those objects' RPATH). Each stub defines exactly the symbols
# torch references from it (with their symbol versions, from readelf -V), as functions returning 100
# (cudaErrorNoDevice), so that loading succeeds and CUDA reports no device.
import glob, os, re, subprocess, sys

site = sys.argv[1]
stub_dir = os.path.join(site, "nvidia", "cu13", "lib")

def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout

def needed(path):
    return re.findall(r"\(NEEDED\).*\[(.+?)\]", run("readelf", "-dW", path))

objs = glob.glob(os.path.join(site, "torch", "lib", "*.so*")) + glob.glob(os.path.join(site, "torch", "_C*.so"))
objs += glob.glob(os.path.join(site, "torchvision", "*.so"))
# auditwheel bundles some libraries (torchvision.libs/): they are there, not missing.
bundled = glob.glob(os.path.join(site, "*.libs", "*.so*"))
shipped = {os.path.basename(p) for p in objs + bundled}
# Objects that need the driver itself (libcuda.so.1) are only loaded on demand with a GPU: skip them.
objs = [p for p in objs if "libcuda.so.1" not in needed(p)]
syspath = dict(re.findall(r"^\s*(\S+) \(.*=> (\S+)$", run("ldconfig", "-p"), re.M))

def defined_in(path):
    return {l.split()[-1].split("@")[0] for l in run("nm", "-D", "--defined-only", path).splitlines() if l.strip()}

stubs = {}  # soname -> {symbol: version or None}
for p in objs:
    for soname in needed(p):
        if soname not in shipped and soname not in syspath:
            stubs.setdefault(soname, {})
defined = set()
for p in objs + bundled:
    defined |= defined_in(p)
for soname in {n for p in objs for n in needed(p) if n in syspath}:
    defined |= defined_in(syspath[soname])

loose = {}  # object -> unversioned references that nothing we know defines
for p in objs:
    ver_file, cur = {}, None  # version name -> the file that must define it
    for line in run("readelf", "-VW", p).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Name: (\S+)", line)
        if m and cur:
            ver_file[m.group(1)] = cur
    for line in run("nm", "-D", "--undefined-only", p).splitlines():
        parts = line.split()
        if len(parts) != 2 or parts[0] != "U":
            continue
        if "@" not in parts[1]:
            if parts[1] not in defined and not re.match(r"_*Py", parts[1]):
                loose.setdefault(p, set()).add(parts[1])
            continue
        name, ver = parts[1].split("@", 1)
        f = ver_file.get(ver.lstrip("@"))
        if f in stubs:
            stubs[f][name] = ver.lstrip("@")
# An unversioned reference binds to an unversioned definition anywhere in the object's load scope:
# define it in the unversioned stubs that the object itself needs.
for p, names in loose.items():
    targets = [n for n in needed(p) if n in stubs and all(v is None for v in stubs[n].values())]
    if not targets:
        sys.exit(f"cannot place unversioned symbols of {p}: {sorted(names)[:5]}")
    for n in targets:
        stubs[n].update(dict.fromkeys(names))

os.makedirs(stub_dir, exist_ok=True)
for soname, syms in sorted(stubs.items()):
    base = os.path.join(stub_dir, soname)
    by_version = {}
    for s, v in syms.items():
        by_version.setdefault(v, []).append(s)
    with open(base + ".c", "w") as fh:
        fh.write("/* stub: every entry point reports no device (100) */\n")
        fh.writelines(f"int {s}(void) {{ return 100; }}\n" for s in sorted(syms))
    with open(base + ".map", "w") as fh:
        if None in by_version:
            fh.write(f"{{ global: {'; '.join(sorted(by_version.pop(None)))}; local: *; }};\n")
        elif not by_version:
            fh.write("{ local: *; };\n")
        for v, ss in sorted(by_version.items()):
            fh.write(f"{v} {{ global: {'; '.join(sorted(ss))}; local: *; }};\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", base, base + ".c", f"-Wl,-soname,{soname}",
                    f"-Wl,--version-script={base}.map"], check=True)
    os.remove(base + ".c")
    os.remove(base + ".map")
print(f"built {len(stubs)} CUDA stub libraries in {stub_dir}")
EOF
fi

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
