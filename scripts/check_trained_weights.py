"""Checks that weights written by `tessera train` load back into deepinv and give tessera's output.

Reads OUT/denoiser.toml and its .safetensors (parsed here with numpy: the safetensors format is an
8-byte header length, a JSON header and raw little-endian tensors), builds deepinv's DnCNN or DRUNet
with the same architecture, loads the state dict strictly (every key, every shape), denoises INPUT
(.npy, (B, C, H, W)) at SIGMA and compares with TESSERA_OUTPUT (.npy from `tessera denoise`).

    ~/.cache/tessera/deepinv-venv/bin/python scripts/check_trained_weights.py OUT INPUT TESSERA_OUTPUT SIGMA [TOLERANCE]

TOLERANCE is the largest max |deepinv - tessera| accepted (default 1e-4).
"""
import json
import pathlib
import sys
import tomllib

import numpy as np
import torch
import deepinv


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        assert meta["dtype"] == "F32", f"{key}: {meta['dtype']}"
        lo, hi = meta["data_offsets"]
        out[key] = torch.from_numpy(np.frombuffer(data[lo:hi], dtype="<f4").reshape(meta["shape"]).copy())
    return out


def main():
    out_dir, inp, theirs, sigma = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    tolerance = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-4
    cfg = tomllib.loads((out_dir / "denoiser.toml").read_text())
    state = read_safetensors(out_dir / cfg["weights"])
    dim = cfg.get("dim") or 2
    if cfg["kind"] == "dncnn":
        net = deepinv.models.DnCNN(
            in_channels=cfg["in_channels"], out_channels=cfg["out_channels"], depth=cfg["depth"],
            nf=cfg["nf"], bias=cfg["bias"], pretrained=None, dim=dim,
        )
    else:
        net = deepinv.models.DRUNet(
            in_channels=cfg["in_channels"], out_channels=cfg["out_channels"], nc=cfg["nc"],
            nb=cfg["nb"], pretrained=None, dim=dim,
        )
    net.load_state_dict(state, strict=True)
    net.eval()
    x = torch.from_numpy(np.load(inp))
    with torch.no_grad():
        y = net(x, sigma).numpy()
    t = np.load(theirs)
    err = float(np.abs(y - t).max())
    print(f"deepinv {deepinv.__version__} loaded {len(state)} tensors; max |deepinv - tessera| = {err:.3e}")
    sys.exit(0 if err <= tolerance else 1)


if __name__ == "__main__":
    main()
