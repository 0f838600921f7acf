"""deepinv's DPIR (half-quadratic splitting) with tessera's bundled grey DRUNet, for the parity test
`tests/dpir_parity.rs` (issue #30). Writes tests/fixtures/deepinv/dpir_*.npy:

  dpir_x.npy       the clean image: the centre 64x64 of tests/fixtures/photos/astronaut_128.png, (1,3,64,64)
  dpir_kernel.npy  deepinv's gaussian_blur(sigma=(1.5, 1.5)), (h, w)
  dpir_y.npy       BlurFFT(kernel).A(x) + 0.03 * seeded Gaussian noise
  dpir_out.npy     DPIR's output: deepinv.optim.optim_iterators HQS with deepinv's get_DPIR_params(0.03)
                   (8 iterations, sigma from 49/255 to 0.03, prox step (sigma_k/0.03)^2/0.23), the
                   denoiser being the bundled grey DRUNet (assets/weights/drunet_grey.safetensors)
                   in tessera's opponent colour space (src/nn/opponent.rs), from A^T y, no clamping.

Run with deepinv 0.5.0 (scripts/setup-deepinv.sh):
  ~/.cache/tessera/deepinv-venv/bin/python scripts/make_dpir_fixture.py
Regenerate whenever the bundled DRUNet changes.
"""
import os
import sys

import numpy as np
import torch
import deepinv
from deepinv.optim.dpir import get_DPIR_params
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from check_trained_weights import read_safetensors  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "deepinv")
NOISE = 0.03

torch.manual_seed(0)
grey = deepinv.models.DRUNet(in_channels=1, out_channels=1, nc=[16, 32, 64, 128], nb=2, pretrained=None)
grey.load_state_dict(read_safetensors(os.path.join(ROOT, "assets", "weights", "drunet_grey.safetensors")), strict=True)
grey.eval()

# tessera's opponent colour space: z = Q rgb + (0, 1/2, 1/2), Q the orthonormal opponent basis / sqrt(3);
# the grey network denoises the three channels at sigma / sqrt(3); back with 3 Q^T.
r3, r6, r2 = 3 ** 0.5, 6 ** 0.5, 2 ** 0.5
Q = torch.tensor([[1 / r3, 1 / r3, 1 / r3], [1 / r2, 0, -1 / r2], [1 / r6, -2 / r6, 1 / r6]]) / r3
OFF = torch.tensor([0.0, 0.5, 0.5])[None, :, None, None]


def denoise(y, sigma):
    z = torch.einsum("ij,bjhw->bihw", Q, y) + OFF
    b, _, h, w = z.shape
    out = grey(z.reshape(b * 3, 1, h, w), sigma / r3).reshape(z.shape)
    return torch.einsum("ji,bjhw->bihw", Q * 3, out - OFF)


photo = np.asarray(Image.open(os.path.join(ROOT, "tests", "fixtures", "photos", "astronaut_128.png")).convert("RGB"), dtype=np.float32) / 255.0
x = torch.from_numpy(photo[32:96, 32:96].copy()).permute(2, 0, 1)[None].contiguous()
kernel = deepinv.physics.functional.blur.gaussian_blur(sigma=(1.5, 1.5))
physics = deepinv.physics.BlurFFT(img_size=tuple(x.shape[1:]), filter=kernel)
g = torch.Generator().manual_seed(1)
y = physics.A(x) + NOISE * torch.randn(x.shape, generator=g)

sigmas, steps, iterations = get_DPIR_params(NOISE)
with torch.no_grad():
    xk = physics.A_adjoint(y)
    for k in range(iterations):
        z = physics.prox_l2(xk, y, gamma=float(steps[k]))
        xk = denoise(z, float(sigmas[k]))

for name, a in [("x", x), ("kernel", kernel[0, 0]), ("y", y), ("out", xk)]:
    np.save(os.path.join(OUT, f"dpir_{name}.npy"), a.numpy().astype(np.float32))
psnr = 10 * np.log10(1 / np.mean((xk.clamp(0, 1).numpy() - x.numpy()) ** 2))
print(f"DPIR: {iterations} iterations, sigmas {[round(float(s), 5) for s in sigmas]}, PSNR {psnr:.2f} dB")
