"""The engine's arithmetic, pinned: a sha256 of every BundleState tensor after 3 rounds, in
float64 on the CPU, for every method of tests/fl/test_dispatched.py at 1 and 3 runs, and of the
metric rows of whole trainings (evaluation, HeteroFL's static statistics, FBN's first-batch
calibration, Hybrid BN's fresh evaluation, personalized tests, the dynamics), committed in
tests/fl/bitwise.json. A restructuring of the engine must leave every hash as it is.

float64 results can differ in their last bits between CPU kinds (BLAS and oneDNN pick kernels
by instruction set) and between torch versions, so the hashes are kept per machine kind
(:func:`machine`); on a kind with none recorded the hashes are not compared, but each tensor's
float64 sum and norm are (to 1e-9 relative), which any change of the arithmetic beyond
rounding moves. Record a new kind's hashes (or, after a change that is meant to move the
numbers, all of them) with

    PYTHONPATH=src python tests/fl/test_bitwise.py --write
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_dispatched import BASE, METHODS

from fednorm import ENGINE_REVISION
from fednorm.config import run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import build as bundle
from fednorm.fl.state import MODEL_PARTS
from fednorm.fl.train import train_bundle

RECORD = Path(__file__).with_name("bitwise.json")
# beyond the dispatched methods: FedWon without its clipping (then DSGD's path at E = 1)
STATES = {**METHODS, "fedwon, no clipping": dict(normalizer="fedwon", agc_lambda=None,
                                                local_steps=1)}
ROUNDS = 3
# whole trainings: what happens outside a round (evaluation, calibration, static statistics)
TRAININGS = {
    "heterofl_sbn": dict(normalizer="heterofl_sbn", dropout=0.0),
    "fbn, first batch": dict(normalizer="fbn", local_steps=1, fbn_init="first_batch"),
    "hybridbn, fresh eval": dict(normalizer="hybridbn", hybridbn_stats_images=4,
                                 hybridbn_eval="fresh"),
    "fedbn, personalized": dict(normalizer="fedbn"),
    "bn, dynamics": dict(record_dynamics=True),
    "fedwon, clipped": dict(normalizer="fedwon", clip_norm=1.0),
    "fixbn, weighted": dict(normalizer="fixbn", fixbn_freeze=0.5, weighted_average=True),
}


def machine() -> str:
    """The machine kind whose float64 bits the hashes are: CPU vendor and torch version."""
    vendor = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}-{vendor}-torch{torch.__version__.split('+')[0]}"


def _data():
    data = colour_classes(n_train=80, n_test=20, image_size=8, seed=0)
    return dataclasses.replace(data, train_x=data.train_x.double(),
                               test_x=data.test_x.double())


def _digest(tensors: dict[str, torch.Tensor]) -> dict:
    h = hashlib.sha256()
    total, norm = 0.0, 0.0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(t.numpy().tobytes())
        if t.is_floating_point():
            total += float(t.nansum())  # a row's NaN (no loss before step 1) is in the hash
            norm += float(t.pow(2).nansum())
    return {"sha256": h.hexdigest(), "sum": total, "norm": math.sqrt(norm)}


def state_after_rounds(method: str, runs: int) -> dict:
    cfgs = [run_config({**BASE, **STATES[method], "seed": s}) for s in range(runs)]
    trainer = bundle(cfgs, _data())
    E = cfgs[0].local_steps
    tensors = {}
    for r in range(ROUNDS):
        tensors[f"loss.{r}"] = trainer.round(r * E)
    for part in MODEL_PARTS:
        tensors.update({f"{part}.{k}": t for k, t in getattr(trainer.state, part).items()})
    return _digest(tensors)


def training_rows(method: str) -> dict:
    cfgs = [run_config({**BASE, **TRAININGS[method], "seed": s}) for s in range(2)]
    results = train_bundle(cfgs, _data())
    tensors = {}
    for r, res in enumerate(results):
        for part in ("rows", "layer_rows", "dynamics_rows"):
            for i, row in enumerate(getattr(res, part)):
                for k, v in row.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        tensors[f"{r}.{part}.{i}.{k}"] = torch.tensor(float(v),
                                                                     dtype=torch.float64)
    return _digest(tensors)


CASES = ([(f"state/{m}/{r}", lambda m=m, r=r: state_after_rounds(m, r))
          for m in STATES for r in (1, 3)]
         + [(f"training/{m}", lambda m=m: training_rows(m)) for m in TRAININGS])


def _recorded() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


@pytest.mark.parametrize("case", [c for c, _ in CASES])
def test_the_engine_computes_the_recorded_bits(case):
    recorded = _recorded()
    assert case in recorded.get("summaries", {}), f"{case}: not recorded (--write)"
    got = dict(CASES)[case]()
    want = recorded["summaries"][case]
    assert got["sum"] == pytest.approx(want["sum"], rel=1e-9, abs=1e-9)
    assert got["norm"] == pytest.approx(want["norm"], rel=1e-9, abs=1e-9)
    hashes = recorded.get("hashes", {}).get(machine())
    if hashes is None:
        pytest.skip(f"no hashes recorded for {machine()} (the sums agree); "
                    f"python tests/fl/test_bitwise.py --write records them")
    assert got["sha256"] == hashes[case], (
        f"{case}: the engine's float64 bits moved; a change meant to move them names its commit "
        "as fednorm.ENGINE_REVISION and re-records (--write)")


def test_the_record_is_of_the_engine_revision_runs_are_stamped_with():
    assert _recorded().get("revision") == ENGINE_REVISION


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: PYTHONPATH=src python tests/fl/test_bitwise.py --write")
    torch.set_num_threads(1)
    record = _recorded()
    got = {case: fn() for case, fn in CASES}
    before = record.get("hashes", {}).get(machine(), {})
    moved = sorted(c for c, g in got.items() if c in before and before[c] != g["sha256"])
    if moved and record.get("revision") == ENGINE_REVISION:
        sys.exit(f"{len(moved)} cases moved (e.g. {moved[0]}) under the recorded revision "
                 f"{ENGINE_REVISION}: set fednorm.ENGINE_REVISION to this change's commit first")
    if moved:
        record["hashes"] = {}  # other kinds' hashes are of the old revision
    record["revision"] = ENGINE_REVISION
    record["summaries"] = {c: {"sum": g["sum"], "norm": g["norm"]} for c, g in got.items()}
    record.setdefault("hashes", {})[machine()] = {c: g["sha256"] for c, g in got.items()}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{RECORD}: {len(got)} cases recorded for {machine()}")
