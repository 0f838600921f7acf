"""A CPU-usable torch from PyPI's CUDA wheel without its ~2.5 GB of CUDA wheels ("lean" mode).

Shared by scripts/setup-deepinv.sh and scripts/setup-torch.sh. PyPI has no CPU-only torch for Linux
x86_64: its torch wheel declares nvidia-*/cuda-* wheels and triton, and torch's shared libraries are
linked against the CUDA ones, so `pip install --no-deps` alone gives a torch that fails to load. The
two commands below install the rest:

  python lean_torch.py deps WHEELS NAME==VERSION...
      prints the requirements of the named wheels (found in the folder WHEELS), one a line, less the
      named packages themselves and the CUDA wheels; the caller installs these, then the named
      packages with --no-deps.

  python lean_torch.py stubs SITE_PACKAGES
      builds one stub library per CUDA soname that torch's shared objects need and the environment
      lacks, into site-packages/nvidia/cu13/lib (on those objects' RPATH). Each stub defines exactly
      the symbols torch references from it (with their symbol versions, from readelf -V), as functions
      returning 100 (cudaErrorNoDevice), so that loading succeeds and CUDA reports no device. Needs cc,
      readelf and nm.
"""

import glob
import os
import re
import subprocess
import sys
import zipfile


def deps(wheels, pins):
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    top = dict(pin.split("==", 1) for pin in pins)
    skip = {canonicalize_name(n) for n in top} | {"triton"}
    out = set()
    for name, version in top.items():
        dist = name.replace("-", "_")
        [path] = glob.glob(f"{wheels}/{dist}-{version}-*.whl")
        with zipfile.ZipFile(path) as whl:
            meta = whl.read(f"{dist}-{version}.dist-info/METADATA").decode()
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


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def needed(path):
    return re.findall(r"\(NEEDED\).*\[(.+?)\]", run("readelf", "-dW", path))


def defined_in(path):
    return {l.split()[-1].split("@")[0] for l in run("nm", "-D", "--defined-only", path).splitlines() if l.strip()}


def stubs(site):
    stub_dir = os.path.join(site, "nvidia", "cu13", "lib")
    objs = glob.glob(os.path.join(site, "torch", "lib", "*.so*")) + glob.glob(os.path.join(site, "torch", "_C*.so"))
    objs += glob.glob(os.path.join(site, "torchvision", "*.so"))
    # auditwheel bundles some libraries (torchvision.libs/): they are there, not missing.
    bundled = glob.glob(os.path.join(site, "*.libs", "*.so*"))
    shipped = {os.path.basename(p) for p in objs + bundled}
    # Objects that need the driver itself (libcuda.so.1) are only loaded on demand with a GPU: skip them.
    objs = [p for p in objs if "libcuda.so.1" not in needed(p)]
    # The system's 64-bit libraries by soname (ldconfig also lists 32-bit ones, e.g. in /lib32).
    syspath = {}
    for soname, flags, path in re.findall(r"^\s*(\S+) \((.*)\) => (\S+)$", run("ldconfig", "-p"), re.M):
        if "64" in flags:
            syspath.setdefault(soname, path)

    stubbed = {}  # soname -> {symbol: version or None}
    for p in objs:
        for soname in needed(p):
            if soname not in shipped and soname not in syspath:
                stubbed.setdefault(soname, {})
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
            if f in stubbed:
                stubbed[f][name] = ver.lstrip("@")
    # An unversioned reference binds to an unversioned definition anywhere in the object's load scope:
    # define it in the unversioned stubs that the object itself needs.
    for p, names in loose.items():
        targets = [n for n in needed(p) if n in stubbed and all(v is None for v in stubbed[n].values())]
        if not targets:
            sys.exit(f"cannot place unversioned symbols of {p}: {sorted(names)[:5]}")
        for n in targets:
            stubbed[n].update(dict.fromkeys(names))

    os.makedirs(stub_dir, exist_ok=True)
    for soname, syms in sorted(stubbed.items()):
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
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-o", base, base + ".c", f"-Wl,-soname,{soname}", f"-Wl,--version-script={base}.map"],
            check=True,
        )
        os.remove(base + ".c")
        os.remove(base + ".map")
    print(f"built {len(stubbed)} CUDA stub libraries in {stub_dir}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "deps":
        deps(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "stubs":
        stubs(sys.argv[2])
    else:
        sys.exit(__doc__)
