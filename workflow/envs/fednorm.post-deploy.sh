#!/usr/bin/env bash
# Run by Snakemake once, inside the environment it has just created from fednorm.yaml, in its
# working directory (the repository root): this package, editable, without dependencies (the
# environment has them), so the jobs run the checkout's code.
set -euo pipefail
if [ ! -f pyproject.toml ] || [ ! -d src/fednorm ]; then
    echo "fednorm.post-deploy.sh: run snakemake from the repository root (found: $PWD)" >&2
    exit 1
fi
python -m pip install --quiet --no-deps -e .
