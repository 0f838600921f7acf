#!/usr/bin/env python3
"""BM3D for `tessera bench denoisers` (src/train/bm3d.rs): denoises the noisy inputs tessera wrote.

  python scripts/bench_bm3d.py DIR

DIR holds bm3d.json (a list of {image, sigma, input, output}) and the noisy inputs, (1, C, H, W)
float32 .npy files written by tessera, so that BM3D sees the very tensors the other columns
denoise. Each is denoised by PyPI `bm3d` 4.0.3 with its noise level given exactly (sigma_psd = σ,
image range 0..1): `bm3d.bm3d` for one channel, `bm3d.bm3d_rgb` for three. The outputs are written
as (1, C, H, W) float32 .npy files named by `output`.

Runs in the benchmark environment (scripts/setup-deepinv.sh); `bm3d==4.0.3` is pip-installed into
it when missing.
"""

import json
import os
import subprocess
import sys
import time

BM3D_VERSION = "4.0.3"


def ensure_bm3d():
    try:
        import bm3d  # noqa: F401
    except ImportError:
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "-q", f"bm3d=={BM3D_VERSION}"],
            stdout=sys.stderr,
        )
    import bm3d
    from importlib.metadata import version

    found = version("bm3d")
    if found != BM3D_VERSION:
        sys.exit(f"bm3d {found} is installed; this benchmark pins {BM3D_VERSION}")
    return bm3d


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    bm3d = ensure_bm3d()
    import numpy as np

    with open(os.path.join(folder, "bm3d.json")) as f:
        jobs = json.load(f)
    for job in jobs:
        x = np.load(os.path.join(folder, job["input"]))
        if x.ndim != 4 or x.shape[0] != 1 or x.shape[1] not in (1, 3):
            sys.exit(f"{job['input']}: expected (1, 1|3, H, W), got {x.shape}")
        sigma = float(job["sigma"])
        start = time.time()
        if x.shape[1] == 1:
            y = bm3d.bm3d(x[0, 0].astype(np.float64), sigma_psd=sigma)[None, None]
        else:
            hwc = np.transpose(x[0], (1, 2, 0)).astype(np.float64)
            y = np.transpose(bm3d.bm3d_rgb(hwc, sigma_psd=sigma), (2, 0, 1))[None]
        np.save(os.path.join(folder, job["output"]), np.ascontiguousarray(y, dtype=np.float32))
        print(
            f"{job['image']} σ {sigma}: {time.time() - start:.1f} s", file=sys.stderr, flush=True
        )


if __name__ == "__main__":
    main()
