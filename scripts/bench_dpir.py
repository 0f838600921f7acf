#!/usr/bin/env python3
"""PnP by half-quadratic splitting (DPIR) in tessera against deepinv 0.5.0's, in one run (issue #30).

For a bundled preset whose physics is one circular Gaussian blur and whose algorithm is the DPIR rule
(`photo_deblur`, `quick`), the script runs `tessera run PRESET` --repeats times, reads its outputs
(ground truth, measurement, reconstruction, metrics.json), then runs deepinv's iteration on the same
measurement: the same sigma schedule and prox steps (deepinv's get_DPIR_params, the data term's prox
by deepinv's exact FFT solve `BlurFFT.prox_l2`), the denoiser being the bundled grey DRUNet in
tessera's opponent colour space (deepinv's DRUNet loading assets/weights/drunet_grey.safetensors).
It prints a table (solve time, of which the denoiser, and PSNR, median of --repeats after one
untimed warm-up) and one JSON object, and fails when deepinv's blur does not reproduce the
measurement to its noise level or when the two PSNRs differ by more than 0.05 dB (both solve the prox
in closed form in Fourier; their denoisers and transforms round differently).

    ~/.cache/tessera/deepinv-venv/bin/python scripts/bench_dpir.py [--tessera target/release/tessera]
        [--preset photo_deblur] [--threads 2] [--repeats 3]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

import numpy as np
import torch
import deepinv
from deepinv.optim.dpir import get_DPIR_params

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from check_trained_weights import read_safetensors  # noqa: E402

R3, R6, R2 = math.sqrt(3), math.sqrt(6), math.sqrt(2)
# tessera's opponent colour space (src/nn/opponent.rs): z = Q rgb + (0, 1/2, 1/2), Q the orthonormal
# opponent basis / sqrt(3); the grey network denoises each channel at sigma / sqrt(3); back with 3 Q^T.
Q = torch.tensor([[1 / R3, 1 / R3, 1 / R3], [1 / R2, 0, -1 / R2], [1 / R6, -2 / R6, 1 / R6]]) / R3
OFFSET = torch.tensor([0.0, 0.5, 0.5])[None, :, None, None]


def psnr(a, b):
    return 10 * math.log10(1.0 / float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


def fail(message):
    sys.exit(f"bench_dpir: {message}")


def run_tessera(binary, preset, threads, out):
    cmd = [binary, "run", preset, "--out", out, "--replace", "--quiet", "--threads-per-rank", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    with open(os.path.join(out, "metrics.json")) as f:
        return json.load(f)


def the_blur(config):
    physics = config.get("physics", [])
    if len(physics) != 1 or physics[0].get("kind") != "blur" or physics[0].get("padding") != "circular":
        fail("the preset's physics must be one circular Gaussian blur (deepinv's BlurFFT)")
    algorithm = config.get("algorithm", {})
    if algorithm.get("splitting") != "hqs" or algorithm.get("sigma_schedule") != "dpir":
        fail("the preset's algorithm must be the DPIR rule (splitting = \"hqs\", sigma_schedule = \"dpir\")")
    denoiser = config.get("denoiser", {})
    if denoiser.get("kind") != "drunet" or denoiser.get("weights") or not denoiser.get("opponent_colour"):
        fail("the preset's denoiser must be the bundled grey DRUNet on opponent colour channels")
    blur = physics[0]
    return blur["sigma"], blur.get("angle_deg", 0.0), config["noise"]["sigma"], algorithm["iterations"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tessera", default=os.path.join(ROOT, "target", "release", "tessera"))
    parser.add_argument("--preset", default="photo_deblur")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "run")
        runs = [run_tessera(args.tessera, args.preset, args.threads, out) for _ in range(args.repeats + 1)][1:]
        x = np.load(os.path.join(out, "ground_truth.npy"))
        y = np.load(os.path.join(out, "measurement_0.npy"))
        ours = np.load(os.path.join(out, "reconstruction.npy"))
    config = tomllib.loads(runs[0]["preset"])
    (s_vertical, s_horizontal), angle, noise, iterations = the_blur(config)

    grey = deepinv.models.DRUNet(in_channels=1, out_channels=1, nc=[16, 32, 64, 128], nb=2, pretrained=None)
    grey.load_state_dict(read_safetensors(os.path.join(ROOT, "assets", "weights", "drunet_grey.safetensors")), strict=True)
    grey.eval()
    denoiser_secs = [0.0]

    def denoise(v, sigma):
        started = time.perf_counter()
        z = torch.einsum("ij,bjhw->bihw", Q, v) + OFFSET
        b, _, h, w = z.shape
        out = grey(z.reshape(b * 3, 1, h, w), sigma / R3).reshape(z.shape)
        result = torch.einsum("ji,bjhw->bihw", Q * 3, out - OFFSET)
        denoiser_secs[0] += time.perf_counter() - started
        return result

    xt, yt = torch.from_numpy(x).float(), torch.from_numpy(y).float()
    kernel = deepinv.physics.functional.blur.gaussian_blur(sigma=(s_vertical, s_horizontal), angle=angle)
    physics = deepinv.physics.BlurFFT(img_size=tuple(xt.shape[1:]), filter=kernel)
    residual = float((physics.A(xt) - yt).std())
    if abs(residual - noise) > 0.1 * noise:
        fail(f"deepinv's blur leaves a residual of std {residual:.4g} on tessera's measurement, not the noise level {noise}")
    sigmas, steps, n = get_DPIR_params(noise)
    if n != iterations:
        fail(f"deepinv's DPIR rule has {n} iterations, the preset {iterations}")

    def dpir():
        denoiser_secs[0] = 0.0
        started = time.perf_counter()
        with torch.no_grad():
            v = physics.A_adjoint(yt)
            for k in range(n):
                v = denoise(physics.prox_l2(v, yt, gamma=steps[k]), float(sigmas[k]))
            v = v.clamp(0, 1)
        return time.perf_counter() - started, denoiser_secs[0], v

    dpir()
    theirs = [dpir() for _ in range(args.repeats)]
    theirs_psnr = psnr(theirs[-1][2].numpy(), x)
    ours_psnr = psnr(ours, x)
    if abs(ours_psnr - theirs_psnr) > 0.05:
        fail(f"PSNR differs: tessera {ours_psnr:.3f} dB, deepinv {theirs_psnr:.3f} dB")

    row = {
        "preset": args.preset,
        "image_shape": list(x.shape),
        "threads": args.threads,
        "repeats": args.repeats,
        "tessera_solve_secs": statistics.median(r["solve_secs"] for r in runs),
        "tessera_denoiser_secs": statistics.median(r["denoiser_secs"] for r in runs),
        "deepinv_solve_secs": statistics.median(t for t, _, _ in theirs),
        "deepinv_denoiser_secs": statistics.median(d for _, d, _ in theirs),
        "tessera_psnr_db": ours_psnr,
        "deepinv_psnr_db": theirs_psnr,
        "load": os.getloadavg()[0],
    }
    row["ratio"] = row["tessera_solve_secs"] / row["deepinv_solve_secs"]
    row["denoiser_ratio"] = row["tessera_denoiser_secs"] / row["deepinv_denoiser_secs"]
    print(f"{'':24}{'tessera':>10}{'deepinv':>10}{'ratio':>8}", file=sys.stderr)
    print(f"{'solve (s)':24}{row['tessera_solve_secs']:10.3f}{row['deepinv_solve_secs']:10.3f}{row['ratio']:8.2f}", file=sys.stderr)
    print(f"{'of which denoiser (s)':24}{row['tessera_denoiser_secs']:10.3f}{row['deepinv_denoiser_secs']:10.3f}{row['denoiser_ratio']:8.2f}", file=sys.stderr)
    print(f"{'PSNR (dB)':24}{ours_psnr:10.2f}{theirs_psnr:10.2f}", file=sys.stderr)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
