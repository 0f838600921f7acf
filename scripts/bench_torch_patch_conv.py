"""Times PyTorch's CPU forward convolutions on the shapes benches/patch_conv.rs times in the native
engine (bias and ReLU included, as there), for that benchmark's native/PyTorch ratios.

Usage: python bench_torch_patch_conv.py [--threads 2] [--reps 5]
Prints `torch NAME MEDIAN_SECS MIN_SECS` lines (median and minimum of REPS timed calls after one
warm-up call).
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def timed(reps, f):
    f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


CASES = [
    # name, conv, c_in, c_out, k, stride, pad, spatial dims
    ("conv3d_3x3x3", F.conv3d, 32, 32, 3, 1, 1, (48, 48, 48)),
    ("down_2x2_s2", F.conv2d, 64, 128, 2, 2, 0, (256, 256)),
    ("conv2d_5x5", F.conv2d, 32, 32, 5, 1, 2, (256, 256)),
    ("conv1d_9", F.conv1d, 16, 16, 9, 1, 4, (1 << 18,)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, conv, c_in, c_out, k, stride, pad, dims in CASES:
            x = torch.rand(1, c_in, *dims) - 0.5
            w = (torch.rand(c_out, c_in, *([k] * len(dims))) - 0.5) * 0.1
            b = torch.full((c_out,), 0.01)
            t = timed(args.reps, lambda: F.relu(conv(x, w, b, stride=stride, padding=pad)))
            print(f"torch {name} {t[0]:.6f} {t[1]:.6f}", flush=True)


if __name__ == "__main__":
    main()
