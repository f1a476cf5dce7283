"""CPU milliseconds a local step, the CPU's per-client BatchNorm against the GPU's path run on
the CPU, at the quick profile's own bundles: the first bundle of each (normalizer, model,
local steps, image size) of the BN family, one thread, timed by the process's CPU time (what a
step costs, not what other processes take), the best of 3 timings of 3 rounds after one.

    PYTHONPATH=src python benchmarks/quick_paths.py
"""
import collections
import time

import torch

from fednorm.data import load_dataset
from fednorm.data.arrays import hold_out
from fednorm.fl.build import build
from fednorm.norms import folded
from fednorm.plan.pipeline import load_plan, merged_config

torch.set_num_threads(1)
plan = load_plan(merged_config(["config/config.yaml", "config/quick.yaml"]))
seen = collections.OrderedDict()
for bid, members in plan.bundles.items():
    c = plan.runs[members[0]]
    key = (c.normalizer, c.model, c.local_steps, c.image_size)
    if key not in seen: seen[key] = [plan.runs[m] for m in members]
data_cache = {}
def rate(cfgs, path):
    c = cfgs[0]
    k = (c.dataset, c.n_train, c.n_test, c.image_size)
    if k not in data_cache: data_cache[k] = load_dataset(c, "data")
    data = hold_out(data_cache[k], c.val_fraction)
    ctx = folded.gpu_path() if path == "gpu" else folded._FOLDED.bound(True)
    with ctx:
        tr = build(cfgs, data)
        E = c.local_steps
        tr.round(0)
        best = 1e9
        for rep in range(3):
            t = time.process_time()
            for k in range(3): tr.round(E * (k + 1))
            best = min(best, (time.process_time() - t) / 3 / E)
    return best * 1e3
for key, cfgs in list(seen.items()):
    if key[0] not in ("bn", "fbn", "central", "fixbn", "gn", "hybridbn", "fedbn"): continue
    try:
        g, cpu = rate(cfgs, "gpu"), rate(cfgs, "cpu")
        print(key, len(cfgs), f"gpu-path {g:.1f} ms/step  cpu-path {cpu:.1f} ms/step  gain {g/cpu:.2f}", flush=True)
    except Exception as e:
        print(key, "ERR", str(e)[:100], flush=True)
