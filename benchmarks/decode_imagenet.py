"""Images per second that one DataLoader worker of fednorm.data.imagenet decodes, crops and
flips (StreamedBatches' work per image), on JPEGs of ImageNet's typical size.

    python benchmarks/decode_imagenet.py --size 224 --images 200

ImageNet's training JPEGs average about 400x350 pixels (500x375 is the most common size); the
benchmark writes ``--images`` JPEGs of 500x375 (smooth colour fields with noise, quality 90)
into a temporary folder and times fednorm.data.imagenet.decode_crop_flip on each, one process,
one thread. A run's training rate is bounded by workers x this rate.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from fednorm.data.imagenet import decode_crop_flip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224, help="output side (the crop's)")
    parser.add_argument("--images", type=int, default=200)
    args = parser.parse_args()
    gen = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k in range(args.images):
            y, x = np.mgrid[0:375, 0:500]
            base = np.stack([x * 0.4, y * 0.5, (x + y) * 0.2], -1) + gen.uniform(0, 80, 3)
            pixels = np.clip(base + gen.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
            paths.append(Path(tmp, f"{k}.JPEG"))
            Image.fromarray(pixels).save(paths[-1], quality=90)
        u = gen.uniform(size=(args.images, 5)).tolist()
        start = time.perf_counter()
        for path, uk in zip(paths, u, strict=True):
            decode_crop_flip(str(path), uk, args.size)
        seconds = time.perf_counter() - start
    print(f"{args.images} JPEGs of 500x375 -> {args.size}x{args.size}: "
          f"{args.images / seconds:.0f} images/s per worker (one core)")


if __name__ == "__main__":
    main()
