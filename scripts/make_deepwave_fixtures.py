"""Writes wave-propagation parity fixtures from deepwave 0.1.0 into tests/fixtures/deepwave (run with
the venv of scripts/setup-deepinv.sh, which installs deepwave):

    ~/.cache/tessera/deepinv-venv/bin/python scripts/make_deepwave_fixtures.py

Every case is one call of `deepwave.scalar` on a small layered model with a slow lens: receiver data
of a "true" model and the gradient of 0.5*sum((d_syn - d_obs)**2) with respect to the velocity at a
smoothed starting model. `manifest.json` lists each case's parameters and files. Cases cover the
four accuracies, float32 and float64, a free surface, several sources per shot, and a time step
above the CFL limit (step_ratio > 1: wavelets upsampled and data downsampled by FFT); for that case
the gradient comes from backend="eager" (autograd through every internal step, the exact discrete
gradient) because the compiled backend samples the gradient only every step_ratio internal steps.
"""
import json
import pathlib

import numpy as np
import torch
import deepwave
from deepwave import scalar

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "deepwave"


def layered_model(nz, nx, seed):
    """Three dipping layers and a slow elliptical lens (m/s)."""
    rng = np.random.default_rng(seed)
    z = np.arange(nz)[:, None]
    x = np.arange(nx)[None, :]
    v = np.full((nz, nx), 1600.0)
    v = np.where(z > 0.3 * nz + 0.1 * x, 2000.0, v)
    v = np.where(z > 0.65 * nz - 0.05 * x, 2500.0, v)
    lens = ((z - 0.5 * nz) / (0.12 * nz)) ** 2 + ((x - 0.6 * nx) / (0.15 * nx)) ** 2 < 1
    v = np.where(lens, 1800.0, v)
    return v + rng.uniform(-20, 20, size=v.shape)


def box_smooth(v, k):
    pad = np.pad(v, k // 2, mode="edge")
    out = np.zeros_like(v)
    for i in range(k):
        for j in range(k):
            out += pad[i:i + v.shape[0], j:j + v.shape[1]]
    return out / (k * k)


CASES = {
    # name: accuracy, dtype, free surface, dt, nt, sources per shot, eager gradient
    "acc2_f64": dict(accuracy=2, dtype="float64", free=False, dt=0.0008, nt=300, nsrc=1),
    "acc4_f64": dict(accuracy=4, dtype="float64", free=False, dt=0.0008, nt=300, nsrc=1),
    "acc6_f64": dict(accuracy=6, dtype="float64", free=False, dt=0.0008, nt=300, nsrc=1),
    "acc8_f64": dict(accuracy=8, dtype="float64", free=False, dt=0.0008, nt=300, nsrc=1),
    "acc4_f32": dict(accuracy=4, dtype="float32", free=False, dt=0.0008, nt=300, nsrc=1),
    "free_acc4_f64": dict(accuracy=4, dtype="float64", free=True, dt=0.0008, nt=300, nsrc=1),
    "two_sources_acc6_f64": dict(accuracy=6, dtype="float64", free=False, dt=0.0008, nt=300, nsrc=2),
    "substep_acc4_f64": dict(accuracy=4, dtype="float64", free=False, dt=0.003, nt=100, nsrc=1, eager=True),
}

NZ, NX, DX, FREQ, PML = 40, 60, 8.0, 25.0, 12


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    v_true = layered_model(NZ, NX, 7)
    v_start = box_smooth(v_true, 7)
    np.save(OUT / "v_true.npy", v_true)
    np.save(OUT / "v_start.npy", v_start)
    manifest = {
        "generator": f"deepwave {deepwave.__version__}, torch {torch.__version__}",
        "grid": [NZ, NX],
        "dx_m": DX,
        "freq_hz": FREQ,
        "pml_width": PML,
        "pml_freq_hz": FREQ,
        "misfit": "0.5 * sum((d_syn - d_obs)^2)",
        "cases": {},
    }
    for name, c in CASES.items():
        dtype = getattr(torch, c["dtype"])
        nshots, nrec, nsrc = 2, 12, c["nsrc"]
        src = np.zeros((nshots, nsrc, 2), dtype=np.int64)
        for s in range(nshots):
            for k in range(nsrc):
                src[s, k] = [1 + 3 * k, 8 + 40 * s + 5 * k]
        rec = np.zeros((nshots, nrec, 2), dtype=np.int64)
        rec[:, :, 0] = 2
        rec[:, :, 1] = 3 + 4 * np.arange(nrec)
        peak = 1.5 / FREQ
        w = deepwave.wavelets.ricker(FREQ, c["nt"], c["dt"], peak, dtype=torch.float64)
        amp = w[None, None].repeat(nshots, nsrc, 1)
        if nsrc > 1:
            amp[:, 1] *= -0.5
        kw = dict(
            source_amplitudes=amp.to(dtype),
            source_locations=torch.from_numpy(src),
            receiver_locations=torch.from_numpy(rec),
            accuracy=c["accuracy"],
            pml_freq=FREQ,
        )
        if c["free"]:
            kw["pml_width"] = [0, PML, PML, PML]
            kw["boundary"] = ["free", "pml", "pml", "pml"]
        else:
            kw["pml_width"] = PML
        vt = torch.from_numpy(v_true).to(dtype)
        d_obs = scalar(vt, DX, c["dt"], **kw).receiver_amplitudes
        vs = torch.from_numpy(v_start).to(dtype).requires_grad_()
        backend = "eager" if c.get("eager") else "auto"
        out = scalar(vs, DX, c["dt"], backend=backend, **kw)
        loss = 0.5 * ((out.receiver_amplitudes - d_obs) ** 2).sum()
        loss.backward()
        np.save(OUT / f"{name}_data.npy", d_obs.detach().numpy())
        np.save(OUT / f"{name}_grad.npy", vs.grad.detach().numpy())
        if name == "acc4_f64":
            np.save(OUT / "sources.npy", src)
            np.save(OUT / "receivers.npy", rec)
            np.save(OUT / "ricker.npy", w.numpy())
        if nsrc > 1:
            np.save(OUT / f"{name}_sources.npy", src)
            np.save(OUT / f"{name}_amplitudes.npy", amp.numpy())
        manifest["cases"][name] = {
            **{k: v for k, v in c.items() if k != "eager"},
            "gradient_backend": backend,
            "step_ratio": out.info.step_ratio,
            "loss": float(loss.detach()),
            "peak_time_s": peak,
            "files": [f"{name}_data.npy", f"{name}_grad.npy"],
        }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
