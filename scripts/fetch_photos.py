#!/usr/bin/env python3
"""Exports real photographs that ship inside the scikit-image wheel as PNG, for held-out evaluation
of tessera's bundled denoisers (assets/weights/README.md) and for the fast test's fixtures.

Pretrained weights and photo collections cannot be downloaded here (no GitHub), but PyPI is
reachable: scikit-image's wheel bundles a few photographs under skimage/data, all free of
copyright restrictions (their licences, as scikit-image's docstrings state them, are written to
LICENSE.txt next to the images):

  camera     512x512 grey    CC0, photographer Lav Varshney
  astronaut  512x512 colour  public domain (NASA Great Images, Eileen Collins)
  coffee     400x600 colour  CC0, photographer Rachel Michetti
  chelsea    300x451 colour  CC0, photographer Stefan van der Walt

and, for training only (`OUT_DIR/train/`, which the bundled denoisers' training presets read; never
used for evaluation):

  train/colour/rocket                427x640 colour  public domain (SpaceX)
  train/colour/immunohistochemistry  512x512 colour  no known copyright restrictions
  train/colour/retina                1411x1411 colour CC0 (Mikael Häggström)
  train/grey/brick, grass, gravel    512x512 grey    CC0 (CC0Textures)
  train/grey/coins                   303x384 grey    no known copyright restrictions
  train/colour/hubble_deep_field     872x1000 colour public domain (NASA)
  train/grey/cell                    660x550 grey    CC0 (quantitative phase image)
  train/grey/clock                   300x400 grey    public domain (Stefan van der Walt)
  train/grey/text                    172x448 grey    public domain (Wikipedia, Corner.png)

Every other photograph in the wheel is left out: moon and page (the docstrings state no licence),
microaneurysms (102x102, smaller than a scaled training crop), the motorcycle stereo pair and the
lfw faces (third-party data sets), and the synthetic or binary images (horse, logo, colour wheel,
chessboards, phantom).

Usage (the benchmark venv from scripts/setup-deepinv.sh; scikit-image is pip-installed into it
when missing):

  ~/.cache/tessera/deepinv-venv/bin/python scripts/fetch_photos.py [OUT_DIR] [--fixtures]

OUT_DIR defaults to out/photos. --fixtures also rewrites the 128x128 crops in tests/fixtures/photos
(camera grey, astronaut colour) that the fast test of the bundled weights uses.
"""

import os
import subprocess
import sys

SKIMAGE_VERSION = "0.26.0"

PHOTOS = {
    "camera": "CC0 (no copyright restrictions), photographer Lav Varshney",
    "astronaut": "public domain (NASA Great Images database, https://flic.kr/p/r9qvLn)",
    "coffee": "CC0 (no copyright restrictions), photographer Rachel Michetti, courtesy of Pikolo Espresso Bar",
    "chelsea": "CC0 (no copyright restrictions), photographer Stefan van der Walt",
}

# Training photographs, (sub-folder, name) -> licence; disjoint from PHOTOS, the held-out ones.
TRAIN = {
    ("colour", "rocket"): "public domain (SpaceX, released to the public domain)",
    ("colour", "immunohistochemistry"): "no known copyright restrictions",
    ("colour", "retina"): "CC0 1.0 (Mikael Häggström)",
    ("grey", "brick"): "CC0 (CC0Textures, Bricks25)",
    ("grey", "grass"): "CC0 (CC0Textures)",
    ("grey", "gravel"): "CC0 (CC0Textures, Gravel04)",
    ("grey", "coins"): "no known copyright restrictions (Greek coins, Brooklyn Museum)",
    ("colour", "hubble_deep_field"): "public domain (NASA, Hubble eXtreme Deep Field)",
    ("grey", "cell"): "CC0 (quantitative phase image, Paul Müller)",
    ("grey", "clock"): "public domain (photographer Stefan van der Walt)",
    ("grey", "text"): "public domain (Wikipedia, File:Corner.png)",
}

# 128x128 crops for tests/fixtures/photos: (name, photo, top row, left column).
CROPS = [("camera_128.png", "camera", 60, 200), ("astronaut_128.png", "astronaut", 40, 170)]


def ensure_skimage():
    try:
        import skimage  # noqa: F401
    except ImportError:
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "-q", f"scikit-image=={SKIMAGE_VERSION}"]
        )


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    fixtures = "--fixtures" in sys.argv[1:]
    out = args[0] if args else os.path.join("out", "photos")
    ensure_skimage()
    import skimage
    import skimage.data
    from PIL import Image

    os.makedirs(out, exist_ok=True)
    lines = [f"Photographs bundled with scikit-image {skimage.__version__} (skimage/data):", ""]
    images = {}
    for name, licence in PHOTOS.items():
        pixels = getattr(skimage.data, name)()
        images[name] = pixels
        Image.fromarray(pixels).save(os.path.join(out, f"{name}.png"))
        lines.append(f"{name}.png  {pixels.shape}  {licence}")
        print(f"{os.path.join(out, name)}.png {pixels.shape}")
    lines += ["", "Training only (train/), never scored:", ""]
    for (sub, name), licence in TRAIN.items():
        pixels = getattr(skimage.data, name)()
        folder = os.path.join(out, "train", sub)
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(pixels).save(os.path.join(folder, f"{name}.png"))
        lines.append(f"train/{sub}/{name}.png  {pixels.shape}  {licence}")
        print(f"{os.path.join(folder, name)}.png {pixels.shape}")
    with open(os.path.join(out, "LICENSE.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if fixtures:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "photos")
        os.makedirs(here, exist_ok=True)
        for file, name, top, left in CROPS:
            crop = images[name][top : top + 128, left : left + 128]
            Image.fromarray(crop).save(os.path.join(here, file))
            print(f"tests/fixtures/photos/{file} from {name} rows {top}.. cols {left}..")


if __name__ == "__main__":
    main()
