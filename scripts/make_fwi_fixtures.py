"""Writes the fixtures of the FWI loop's torch semantics and of SEG-Y reading into tests/fixtures/fwi
(run with the venv of scripts/setup-deepinv.sh plus `pip install segyio`):

    ~/.cache/tessera/deepinv-venv/bin/python scripts/make_fwi_fixtures.py

- adam_*.npy: torch.optim.Adam([p], lr=5.0, eps=1e-22) (the reference loop's settings) on a float32 vector of
  1037 velocities for 6 steps of given gradients: the parameters after each step.
- tensor_split.json: torch.tensor_split(arange(n), k) for several (n, k) (the reference loop's shot split).
- segyio_*.sgy: files written by segyio (IBM and IEEE float) with the arrays they hold (.npy) and
  their trace headers (FFID, trace number) in segy_manifest.json.
"""
import json
import pathlib

import numpy as np
import torch
import segyio

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fwi"


def adam():
    g = torch.Generator().manual_seed(5)
    p0 = (2000.0 + 500.0 * torch.rand(1037, generator=g)).float()
    grads = (torch.randn(6, 1037, generator=g) * 1e-3).float()
    grads[2, :100] = 0.0
    p = torch.nn.Parameter(p0.clone())
    opt = torch.optim.Adam([p], lr=5.0, eps=1e-22)
    out = []
    for k in range(grads.shape[0]):
        opt.zero_grad()
        p.grad = grads[k].clone()
        opt.step()
        out.append(p.detach().clone())
    np.save(OUT / "adam_params0.npy", p0.numpy())
    np.save(OUT / "adam_grads.npy", grads.numpy())
    np.save(OUT / "adam_params.npy", torch.stack(out).numpy())


def tensor_split():
    cases = []
    for n in [0, 1, 5, 7, 8, 10, 13]:
        for k in [1, 2, 3, 4]:
            parts = torch.tensor_split(torch.arange(n), k)
            cases.append({"n": n, "k": k, "parts": [t.tolist() for t in parts]})
    (OUT / "tensor_split.json").write_text(json.dumps(cases) + "\n")


def segy():
    manifest = {}
    rng = np.random.default_rng(3)
    for name, fmt in [("segyio_ibm", 1), ("segyio_ieee", 5)]:
        traces, samples = 12, 17
        data = (rng.standard_normal((traces, samples)) * 1000.0).astype(np.float32)
        spec = segyio.spec()
        spec.format = fmt
        spec.samples = list(range(samples))
        spec.tracecount = traces
        with segyio.create(OUT / f"{name}.sgy", spec) as f:
            for i in range(traces):
                f.header[i] = {
                    segyio.TraceField.FieldRecord: 100 + i // 4,
                    segyio.TraceField.TraceNumber: i % 4 + 1,
                    segyio.TraceField.TRACE_SAMPLE_INTERVAL: 2000,
                }
                f.trace[i] = data[i]
            f.bin.update(hdt=2000, hns=samples)
        with segyio.open(OUT / f"{name}.sgy", ignore_geometry=True) as f:
            back = np.stack([f.trace[i] for i in range(traces)])
        np.save(OUT / f"{name}.npy", back)
        manifest[name] = {"format": fmt, "traces": traces, "samples": samples, "dt_us": 2000,
                          "ffid": [100 + i // 4 for i in range(traces)],
                          "trace_number": [i % 4 + 1 for i in range(traces)]}
    (OUT / "segy_manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    adam()
    tensor_split()
    segy()
