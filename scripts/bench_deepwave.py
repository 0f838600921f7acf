"""deepwave's side of the wave benchmark, interleaved with tessera's (`tessera bench wave`) in one
sitting (run with the venv of scripts/setup-deepinv.sh, from the repository root):

    ~/.cache/tessera/deepinv-venv/bin/python scripts/bench_deepwave.py [--repeats 3] [--threads 2]
        [--tessera target/release/tessera] [--no-gradient]

Each round runs deepwave's forward (and forward+backward) on the problem of
`tessera::physics::wave::bench::problem` (the same model formula, grid, dt, wavelet, shots and
receivers, float32, accuracy 4, PML 20), then `tessera bench wave --json` on it, so both see the same
load. Prints both throughputs in cell-updates per second per core, their ratio, tessera's fraction of
the triad memory bandwidth, and the load average before and after.
"""
import argparse
import json
import math
import os
import subprocess
import time

import torch
import deepwave


def problem(nz, nx, shots, nt):
    dx = 4.0
    z = torch.arange(nz, dtype=torch.float64)[:, None] / nz
    x = torch.arange(nx, dtype=torch.float64)[None, :] / nx
    v = (1500.0 + 2500.0 * z + 150.0 * torch.sin(6.0 * x + 3.0 * z)).clamp(1500.0, 4000.0).float()
    vmax = float(v.max())
    dt = 0.95 * 0.6 * dx / (vmax * math.sqrt(2.0))
    src = torch.tensor([[[2, (s + 1) * nx // (shots + 1)]] for s in range(shots)])
    rec = torch.stack([torch.tensor([[2, 4 * r] for r in range(nx // 4)])] * shots)
    w = deepwave.wavelets.ricker(25.0, nt, dt, 1.5 / 25.0, dtype=torch.float32)
    amp = w[None, None].repeat(shots, 1, 1)
    return v, dx, dt, src, rec, amp


def run_deepwave(args, v, dx, dt, src, rec, amp, gradient):
    kw = dict(source_amplitudes=amp, source_locations=src, receiver_locations=rec,
              accuracy=4, pml_width=20, pml_freq=25.0)
    t = time.perf_counter()
    with torch.no_grad():
        out = deepwave.scalar(v, dx, dt, **kw)
    fwd = time.perf_counter() - t
    assert out.info.step_ratio == 1
    grad = None
    if gradient:
        obs = out.receiver_amplitudes
        vs = (0.98 * v).requires_grad_()
        t = time.perf_counter()
        syn = deepwave.scalar(vs, dx, dt, max_vel=float(v.max()), **kw).receiver_amplitudes
        (0.5 * ((syn - obs) ** 2).sum()).backward()
        grad = time.perf_counter() - t
    return fwd, grad


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nz", type=int, default=250)
    p.add_argument("--nx", type=int, default=600)
    p.add_argument("--shots", type=int, default=2)
    p.add_argument("--nt", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tessera", default="target/release/tessera")
    p.add_argument("--no-gradient", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    v, dx, dt, src, rec, amp = problem(a.nz, a.nx, a.shots, a.nt)
    padded = (a.nz + 2 * 22, a.nx + 2 * 22)
    updates = (padded[0] - 4) * (padded[1] - 4) * a.nt * a.shots
    load0 = os.getloadavg()
    dw_f, dw_g, ts_f, ts_g, bw_frac = [], [], [], [], []
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads))
    for _ in range(a.repeats):
        f, g = run_deepwave(a, v, dx, dt, src, rec, amp, not a.no_gradient)
        dw_f.append(f)
        if g is not None:
            dw_g.append(g)
        cmd = [a.tessera, "bench", "wave", "--json", "--repeats", "1", "--nz", str(a.nz), "--nx", str(a.nx),
               "--shots", str(a.shots), "--nt", str(a.nt)]
        if a.no_gradient:
            cmd.append("--no-gradient")
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
        ts_f.append(r["forward_secs"])
        bw_frac.append(r["forward_bandwidth_fraction"])
        if r.get("gradient_secs") is not None:
            ts_g.append(r["gradient_secs"])
    load1 = os.getloadavg()
    med = lambda xs: sorted(xs)[len(xs) // 2]
    per_core = lambda n, s: n / s / a.threads / 1e6
    print(f"grid {a.nz}x{a.nx} ({padded[0]}x{padded[1]} padded), {a.shots} shots x {a.nt} steps, "
          f"accuracy 4, float32, {a.threads} threads, deepwave {deepwave.__version__}, torch {torch.__version__}")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    print(f"forward          deepwave {per_core(updates, med(dw_f)):8.1f}  tessera {per_core(updates, med(ts_f)):8.1f}"
          f"  M cell-updates/s/core  ratio {med(dw_f) / med(ts_f):.2f}  (tessera at {100 * med(bw_frac):.0f} % of triad bandwidth)")
    if dw_g and ts_g:
        print(f"forward+backward deepwave {per_core(2 * updates, med(dw_g)):8.1f}  tessera {per_core(2 * updates, med(ts_g)):8.1f}"
              f"  M cell-updates/s/core  ratio {med(dw_g) / med(ts_g):.2f}")
    print("all rounds (s):", json.dumps({"deepwave_forward": dw_f, "tessera_forward": ts_f,
                                         "deepwave_gradient": dw_g, "tessera_gradient": ts_g}))


if __name__ == "__main__":
    main()
