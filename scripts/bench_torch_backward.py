"""Times PyTorch's CPU forward and backward passes of the layers benches/backward.rs times in the
native engine, on the same shapes, for that benchmark's native/PyTorch ratios.

Usage: python bench_torch_backward.py [--threads 2] [--reps 5]
Prints `torch NAME MEDIAN_SECS MIN_SECS` lines (median and minimum of REPS timed calls after one
warm-up call): a 64->64 3x3 convolution on 1x64x256x256 (forward, input gradient, weight + bias
gradient), a 2x2 stride-2 transposed convolution 64->32 from 128^2 (forward, input gradient, weight
gradient), and the depth-8, 32-feature DnCNN on 8x1x64x64 (inference; one training step: forward
keeping activations + backward of the sum of its output times a fixed gradient).
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


def report(name, t):
    print(f"torch {name} {t[0]:.6f} {t[1]:.6f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    reps = args.reps

    x = torch.rand(1, 64, 256, 256) - 0.5
    w = (torch.rand(64, 64, 3, 3) - 0.5) * 0.1
    b = torch.zeros(64)
    dz = torch.rand(1, 64, 256, 256) - 0.5
    with torch.no_grad():
        report("conv_forward", timed(reps, lambda: F.conv2d(x, w, b, padding=1)))
    # The two halves of autograd's convolution backward, each on its own, as the engine runs them.
    def conv_grad(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dz, x, w, [64], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask
        )

    report("conv_backward_input", timed(reps, conv_grad([True, False, False])))
    report("conv_backward_params", timed(reps, conv_grad([False, True, True])))

    xt = torch.rand(1, 64, 128, 128) - 0.5
    wt = (torch.rand(64, 32, 2, 2) - 0.5) * 0.2
    dy = torch.rand(1, 32, 256, 256) - 0.5
    with torch.no_grad():
        report("transposed_forward", timed(reps, lambda: F.conv_transpose2d(xt, wt, stride=2)))

    def t_grad(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dy, xt, wt, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1, mask
        )

    report("transposed_backward_input", timed(reps, t_grad([True, False, False])))
    report("transposed_backward_weights", timed(reps, t_grad([False, True, False])))

    widths = [(1, 32)] + [(32, 32)] * 6 + [(32, 1)]
    layers = []
    for i, (ci, co) in enumerate(widths):
        conv = torch.nn.Conv2d(ci, co, 3, padding=1)
        layers.append(conv)
        if i + 1 < len(widths):
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    batch = torch.rand(8, 1, 64, 64)
    with torch.no_grad():
        report("dncnn_inference", timed(reps, lambda: net(batch)))

    def step():
        net.zero_grad(set_to_none=True)
        y = net(batch)
        y.backward(y.detach())

    report("dncnn_training_step", timed(reps, step))


if __name__ == "__main__":
    main()
