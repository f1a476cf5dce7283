"""Snakemake script: download and cache CIFAR-10 (logic in fednorm.data.cifar)."""
import logging
import sys
from pathlib import Path

from fednorm.data.cifar import DatasetUnavailable, cache_cifar10

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
try:
    path = cache_cifar10(Path(snakemake.output[0]).parent, download=True)  # noqa: F821
except DatasetUnavailable as err:
    logging.error("%s", err)
    print(f"\nfednorm: {err}\n", file=sys.stderr)
    sys.exit(1)
logging.info("cached %s", path)
