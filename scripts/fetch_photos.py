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
