#!/usr/bin/env python3
"""Times deepinv 0.5.0 on CPU for the workloads that tessera's Rust benchmarks measure.

Run it with the environment from scripts/setup-deepinv.sh (see docs/BENCHMARKS.md):

    ~/.cache/tessera/deepinv-venv/bin/python scripts/bench_deepinv.py [--threads 2] [--repeats 3] [--warmup 1]

Prints one JSON object on stdout (seconds, median of --repeats after --warmup untimed runs) and a
table on stderr. Each workload is also checked for plausibility (shapes, adjoint dot test, blur keeps
the mean, the stacked gradient equals the explicit sum) and the script fails if a check fails.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import warnings

import numpy as np
import torch

import deepinv as dinv

# physics.blur.gaussian_blur is deprecated in favour of physics.functional.blur.gaussian_blur (same
# kernel); the benchmark keeps the documented call.
warnings.simplefilter("ignore", DeprecationWarning)

IMAGE_H, IMAGE_W = 683, 1024
BLUR_SCALE = 1024  # S: sigma = (0.01 S, 0.005 S) pixels
N_ANGLES = 8


def timed(name, fn, warmup, repeats):
    """Runs fn warmup times untimed, then repeats times.

    Returns (median wall seconds, samples, last result); samples holds the wall times and the process
    CPU times (all threads), which a loaded machine inflates much less than the wall times.
    """
    out = None
    for _ in range(warmup):
        out = fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(
        f"  .. {name}: wall {' '.join(f'{v:.3f}' for v in wall)} s, cpu {' '.join(f'{v:.3f}' for v in cpu)} s",
        file=sys.stderr,
        flush=True,
    )
    return statistics.median(wall), {"wall": wall, "cpu": cpu, "cpu_median": statistics.median(cpu)}, out


def dot(a, b):
    return float((a.double() * b.double()).sum())


def check(cond, what):
    if not cond:
        raise SystemExit(f"plausibility check failed: {what}")


def bench_blur_stack(args):
    torch.manual_seed(0)
    x = torch.rand(1, 3, IMAGE_H, IMAGE_W)
    angles_deg = np.linspace(0.0, 180.0, N_ANGLES)
    sigma_px = (0.01 * BLUR_SCALE, 0.005 * BLUR_SCALE)
    ops = [
        dinv.physics.Blur(
            filter=dinv.physics.blur.gaussian_blur(sigma=sigma_px, angle=float(a)),
            padding="circular",
            use_fft=args.blur_fft,
        )
        for a in angles_deg
    ]
    kernel_shape = list(ops[0].filter.shape)

    stacked = dinv.physics.stack(*ops)
    check(isinstance(stacked, dinv.physics.StackedLinearPhysics), "stack() of Blur gives StackedLinearPhysics")
    fidelity = dinv.optim.L2()  # sigma = 1: grad = sum_i A_i^T (A_i x - y_i)
    y = stacked.A(torch.rand_like(x))

    t_a, s_a, ax = timed("blur A", lambda: stacked.A(x), args.warmup, args.repeats)
    t_at, s_at, aty = timed("blur AT", lambda: stacked.A_adjoint(y), args.warmup, args.repeats)
    t_g, s_g, grad = timed("blur grad", lambda: fidelity.grad(x, y, stacked), args.warmup, args.repeats)

    check(len(ax) == N_ANGLES and all(list(t.shape) == list(x.shape) for t in ax), "A gives 8 images of x's shape")
    check(list(aty.shape) == list(x.shape), "A^T gives one image of x's shape")
    # A Gaussian kernel sums to 1 and circular padding wraps, so each blur keeps the image mean.
    for t in ax:
        check(abs(float(t.mean()) - float(x.mean())) < 1e-4, "circular blur keeps the mean")
    rel = abs(dot(ax[3], y[3]) - dot(x, ops[3].A_adjoint(y[3]))) / abs(dot(ax[3], y[3]))
    check(rel < 1e-5, f"adjoint dot test, relative error {rel:.2e}")
    explicit = sum(op.A_adjoint(op.A(x) - yi) for op, yi in zip(ops, y))
    err = float((grad - explicit).abs().max() / explicit.abs().max())
    check(err < 1e-4, f"L2().grad equals sum A_i^T(A_i x - y_i), relative error {err:.2e}")

    return {
        "A_s": t_a,
        "AT_s": t_at,
        "grad_s": t_g,
        "method": "deepinv.physics.stack -> StackedLinearPhysics (A, A_adjoint with sum), "
        "deepinv.optim.L2().grad(x, y, stacked)",
        "use_fft": args.blur_fft,
        "image_shape": list(x.shape),
        "kernel_shape": kernel_shape,
        "sigma_px": list(sigma_px),
        "angles_deg": [float(a) for a in angles_deg],
        "padding": "circular",
        "samples_s": {"A": s_a, "AT": s_at, "grad": s_g},
    }


def bench_tomography(args, width=512, n_angles=180):
    torch.manual_seed(1)
    # normalize is left unset as in the documented call; deepinv 0.5.0 then uses normalize=True (warns).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        physics = dinv.physics.Tomography(angles=n_angles, img_width=width, circle=False, device="cpu")
    x = torch.rand(1, 1, width, width)
    sino = physics.A(x)
    y = torch.rand_like(sino)

    t_a, s_a, sino = timed("tomography A", lambda: physics.A(x), args.warmup, args.repeats)
    t_at, s_at, aty = timed("tomography AT", lambda: physics.A_adjoint(y), args.warmup, args.repeats)

    # circle=False: the detector spans the image diagonal, ceil(sqrt(2) * width) bins.
    check(sino.shape[:2] == (1, 1) and sino.shape[-1] == n_angles, f"sinogram shape {list(sino.shape)}")
    check(sino.shape[-2] >= width, f"sinogram shape {list(sino.shape)}")
    check(list(aty.shape) == [1, 1, width, width], f"adjoint shape {list(aty.shape)}")
    rel = abs(dot(sino, y) - dot(x, aty)) / abs(dot(sino, y))
    check(rel < 1e-3, f"tomography adjoint dot test, relative error {rel:.2e}")
    return {
        "A_s": t_a,
        "AT_s": t_at,
        "normalize": bool(physics.normalize),
        "image_shape": list(x.shape),
        "sinogram_shape": list(sino.shape),
        "adjoint_dot_test_rel_err": rel,
        "samples_s": {"A": s_a, "AT": s_at},
    }


def bench_drunet(args):
    torch.manual_seed(2)
    model = dinv.models.DRUNet(in_channels=3, out_channels=3, pretrained=None, device="cpu").eval()
    x = torch.rand(1, 3, 512, 512)
    with torch.no_grad():
        t, s, out = timed("DRUNet", lambda: model(x, sigma=0.05), args.warmup, args.repeats)
    check(list(out.shape) == list(x.shape) and bool(torch.isfinite(out).all()), "DRUNet output shape")
    return {"forward_s": t, "image_shape": list(x.shape), "weights": "random (pretrained=None)", "samples_s": s}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per measurement; the median is reported")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before timing")
    p.add_argument("--only", choices=["blur", "tomography", "drunet"], help="run one workload only")
    p.add_argument("--blur-fft", action="store_true", help="Blur(use_fft=True) instead of deepinv's default direct convolution")
    p.add_argument("--drunet", action="store_true", help="also time DRUNet forward on 1x3x512x512 (random weights)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    result = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "deepinv": dinv.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "loadavg_before": [round(v, 2) for v in os.getloadavg()],
    }
    if args.only in (None, "blur"):
        result["blur_stack"] = bench_blur_stack(args)
    if args.only in (None, "tomography"):
        result["tomography_512_180"] = bench_tomography(args)
    if args.drunet or args.only == "drunet":
        result["drunet_512"] = bench_drunet(args)
    result["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]

    rows = []
    if "blur_stack" in result:
        b = result["blur_stack"]
        tag = "fft" if b["use_fft"] else "direct"
        rows += [
            (f"blur stack 8x {IMAGE_H}x{IMAGE_W}x3, kernel {b['kernel_shape'][-2]}x{b['kernel_shape'][-1]} ({tag}): A", b["A_s"], b["samples_s"]["A"]),
            ("blur stack: A^T summed", b["AT_s"], b["samples_s"]["AT"]),
            ("blur stack: L2 grad", b["grad_s"], b["samples_s"]["grad"]),
        ]
    if "tomography_512_180" in result:
        t = result["tomography_512_180"]
        rows += [
            ("tomography 512, 180 angles: A", t["A_s"], t["samples_s"]["A"]),
            ("tomography 512, 180 angles: A^T", t["AT_s"], t["samples_s"]["AT"]),
        ]
    if "drunet_512" in result:
        d = result["drunet_512"]
        rows.append(("DRUNet forward 1x3x512x512", d["forward_s"], d["samples_s"]))
    print(
        f"deepinv {result['deepinv']}, torch {result['torch']}, {result['torch_threads']} threads, "
        f"median of {args.repeats}; load {result['loadavg_before']} -> {result['loadavg_after']}",
        file=sys.stderr,
    )
    print(f"  {'':66s} {'wall':>9s}   {'cpu':>9s}", file=sys.stderr)
    for name, secs, samples in rows:
        print(f"  {name:66s} {secs:9.3f} s {samples['cpu_median']:9.3f} s", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
