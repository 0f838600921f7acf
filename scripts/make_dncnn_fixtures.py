"""Writes DnCNN parity fixtures from deepinv into tests/fixtures/deepinv (run with the venv of
scripts/setup-deepinv.sh): seeded random weights (.pth), an input, and deepinv's output.

    ~/.cache/tessera/deepinv-venv/bin/python scripts/make_dncnn_fixtures.py
"""
import json
import pathlib

import numpy as np
import torch
import deepinv

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "deepinv"

CASES = {
    # name: (DnCNN arguments, input shape)
    "dncnn2d_color": (dict(in_channels=3, out_channels=3, depth=5, nf=16, bias=True, dim=2), (2, 3, 21, 34)),
    "dncnn2d_gray_nobias": (dict(in_channels=1, out_channels=1, depth=4, nf=8, bias=False, dim=2), (1, 1, 40, 27)),
    "dncnn3d_gray": (dict(in_channels=1, out_channels=1, depth=3, nf=8, bias=True, dim=3), (1, 1, 9, 12, 10)),
}


def main():
    manifest = {"deepinv": deepinv.__version__, "torch": torch.__version__, "cases": {}}
    for i, (name, (args, shape)) in enumerate(CASES.items()):
        torch.manual_seed(100 + i)
        net = deepinv.models.DnCNN(pretrained=None, **args).eval()
        x = torch.rand(shape, dtype=torch.float32)
        with torch.no_grad():
            y = net(x, 0.1)
        torch.save(net.state_dict(), OUT / f"{name}.pth")
        np.save(OUT / f"{name}_x.npy", x.numpy())
        np.save(OUT / f"{name}_y.npy", y.numpy())
        manifest["cases"][name] = {"args": args, "input_shape": list(shape), "sigma": 0.1}
    (OUT / "dncnn_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
