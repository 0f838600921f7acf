"""PSNR of denoisers on a held-out clean image with added Gaussian noise (run with the venv of
scripts/setup-deepinv.sh, for numpy): each denoiser runs through `tessera denoise`; the classical
ones are tried at a few strengths and their best PSNR is reported (an oracle choice in their favour).

    python scripts/compare_denoisers.py TESSERA CLEAN.npy SIGMA TRAINED_DENOISER.toml
"""
import pathlib
import subprocess
import sys
import tempfile

import numpy as np


def psnr(x, ref):
    return 10 * np.log10(1.0 / np.mean((x - ref) ** 2))


def main():
    tessera, clean_path, sigma, trained = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    clean = np.load(clean_path).astype(np.float32)
    if clean.ndim == 4 and clean.shape[1] == 3:
        clean = clean.mean(axis=1, keepdims=True)
    rng = np.random.default_rng(1234)
    noisy = (clean + sigma * rng.standard_normal(clean.shape)).astype(np.float32)
    tmp = pathlib.Path(tempfile.mkdtemp())
    np.save(tmp / "noisy.npy", noisy)
    print(f"image {clean.shape}, sigma {sigma}: noisy PSNR {psnr(noisy, clean):.2f} dB")

    def run(toml_text_or_path, strength):
        cfg = pathlib.Path(toml_text_or_path)
        if not cfg.exists():
            cfg = tmp / "d.toml"
            cfg.write_text(toml_text_or_path)
        out = tmp / "out.npy"
        subprocess.run([tessera, "denoise", "--denoiser", str(cfg), "--sigma", str(strength),
                        str(tmp / "noisy.npy"), str(out)], check=True)
        return psnr(np.load(out), clean)

    print(f"  trained ({trained}): {run(trained, sigma):.2f} dB")
    for name, toml in [("tv", 'kind = "tv"\n'),
                       ("wavelet db4", 'kind = "wavelet"\nwv = "db4"\nlevels = 3\n')]:
        best = max((run(toml, sigma * f), f) for f in [0.25, 0.5, 1.0, 2.0, 3.0])
        print(f"  {name}: {best[0]:.2f} dB (best strength {best[1]}·sigma)")


if __name__ == "__main__":
    main()
