"""Times deepinv's DRUNet forward on CPU, for benches/drunet.rs to compare with the native engine.

Usage: python bench_torch_drunet.py [--threads 2] [--reps 3] [--in-channels 3] SIZE...
Prints one line per size: `torch SIZE MEDIAN_SECS MIN_SECS` (random weights, sigma = 0.1, batch 1,
median and minimum of REPS timed calls after one warm-up call).
"""

import argparse
import statistics
import time

import torch
import deepinv as dinv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--in-channels", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c = args.in_channels
    net = dinv.models.DRUNet(in_channels=c, out_channels=c, pretrained=None).eval()
    for size in args.sizes:
        x = torch.rand(1, c, size, size)
        times = []
        with torch.inference_mode():
            net(x, 0.1)  # warm-up
            for _ in range(args.reps):
                t0 = time.perf_counter()
                net(x, 0.1)
                times.append(time.perf_counter() - t0)
        print(f"torch {size} {statistics.median(times):.4f} {min(times):.4f}", flush=True)


if __name__ == "__main__":
    main()
