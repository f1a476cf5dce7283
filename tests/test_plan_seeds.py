"""How full the bundles are and what one more seed costs (fednorm.plan.seeds), and the hour
profile's seeds filling its bundles: the median run's bundle size against the same median
counted bundle by bundle, one more seed against the grid written with that seed, its price
against the cost model's formula and the rate curve worked by hand."""

import json
import statistics
from pathlib import Path

import pytest
import yaml

from fednorm.config import bundle_key
from fednorm.plan import load_plan, median_bundle_sizes, merge, next_seed_runs, seed_price
from fednorm.plan.costs import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
# 10 clients of 8 images (80 a step), DSGD, 200 steps: the shape the table below holds
RUN = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
       "hidden": 8, "batch_size": 8, "steps": 200, "lr": [0.1], "lr_milestones": [],
       "eval_every": 100, "normalizer": "bn"}
SHAPE = "synthetic,fbn_cnn,8,4,80,dsgd,bn"
STEP = {1: 0.1, 2: 0.16, 3: 0.21}  # a bundle's seconds a step at R runs


def _config(seeds, size=3, rates=None, table=None):
    """bn at two heterogeneities (one bundle key), fbn at one, ``seeds`` each; a bundle cap
    of ``size``."""
    execution = {"device": "cpu", "bundle_size": size,
                 **({"images_per_second": rates} if rates else {})}
    return {"run": RUN, "execution": execution,
            **({"stage2": {"step_costs": table}} if table else {}),
            "experiments": {
                "bn": {"set": {"partition": "gamma", "normalizer": "bn"},
                       "grid": {"heterogeneity": [0, 1], "seed": list(seeds)}},
                "fbn": {"set": {"partition": "gamma", "normalizer": "fbn"},
                        "grid": {"heterogeneity": [0.5], "seed": list(seeds)}}}}


def _table(tmp_path):
    rows = [f"{SHAPE},{r},{s}" for r, s in STEP.items()]
    rows += [f"{SHAPE.replace(',bn', ',fbn')},{r},{2 * s}" for r, s in STEP.items()]
    path = tmp_path / "costs.csv"
    path.write_text("\n".join([",".join(COLUMNS), *rows]) + "\n")
    return str(path)


def test_the_median_runs_bundle_size_is_the_median_counted_bundle_by_bundle():
    """Bundles of 3 over bn's 2 x 5 runs (3, 3, 3, 1) and fbn's 5 (3, 2), and a second model
    (LeNet, 2 runs): per model, the lower median of the list of bundle sizes with one entry a
    run, by sorting."""
    config = _config(range(5))
    config["experiments"]["cnn"] = {"set": {"model": "lenet", "normalizer": "bn"},
                                    "grid": {"seed": [0, 1]}}
    plan = load_plan(config)
    got = median_bundle_sizes(plan.runs, plan.bundles)
    for model in ("fbn_cnn", "lenet"):
        sizes = sorted(len(ids) for ids in plan.bundles.values()
                       for _ in ids if plan.runs[ids[0]].model == model)
        assert got[model] == sizes[(len(sizes) - 1) // 2]
    assert got == {"fbn_cnn": 3, "lenet": 2}
    # one large bundle and many small ones: the median follows the runs, not the bundles
    plan = load_plan(_config(range(5), size=8))  # bn: 8 + 2; fbn: 5
    assert sorted(map(len, plan.bundles.values())) == [2, 5, 8]
    assert median_bundle_sizes(plan.runs, plan.bundles) == {"fbn_cnn": 8}  # the 8th of 15
    assert statistics.median_low([2, 5, 8]) == 5  # the median bundle's size


def test_one_more_seed_is_the_grid_written_with_the_next_seed():
    two, three = load_plan(_config([0, 1])), load_plan(_config([0, 1, 2]))
    assert next_seed_runs(two.runs) == {r: c for r, c in three.runs.items() if c.seed == 2}
    # each setting its own next seed, after its own highest
    mixed = {**two.runs, **{r: c for r, c in three.runs.items()
                            if c.seed == 2 and c.normalizer == "bn"}}
    assert sorted((c.normalizer, c.seed) for c in next_seed_runs(mixed).values()) == [
        ("bn", 3), ("bn", 3), ("fbn", 2)]


def test_the_price_of_one_more_seed_by_the_cost_model_and_a_rate_curve(tmp_path, capsys,
                                                                         monkeypatch):
    """Seed 0 alone: bn's 2 runs in one bundle of 2, fbn's 1 alone. Seed 1 added: bn 3 + 1,
    fbn 2. Cost model: T x S(R) / R a run (fbn's S twice bn's); GPU: images / rate(R)."""
    rates = {"synthetic/fbn_cnn": {1: 100, 2: 180, 3: 240}}
    config = _config([0], rates=rates, table=_table(tmp_path))
    price = seed_price(load_plan(config))
    T = RUN["steps"]
    before = 2 * T * STEP[2] / 2 + T * 2 * STEP[1]  # 32 + 40 s
    after = 3 * T * STEP[3] / 3 + T * STEP[1] + 2 * T * 2 * STEP[2] / 2  # 42 + 20 + 64 s
    assert price.runs == (3, 6) and price.bundles == (2, 3)
    assert price.seconds == pytest.approx((before, after), rel=1e-12)
    assert price.seconds[1] - price.seconds[0] == pytest.approx(54.0)
    images = T * 10 * 8
    hours = (2 * images / 180 + images / 100, 3 * images / 240 + images / 100
             + 2 * images / 180)
    assert price.gpu_hours == pytest.approx(tuple(h / 3600 for h in hours), rel=1e-12)
    assert price.medians == ({"fbn_cnn": 2}, {"fbn_cnn": 2})  # sizes 2, 2, 1; 3, 3, 3, 1, 2, 2
    # what fednorm plan prints
    from fednorm.cli import main

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "median run's bundle size (runs of one model, cap 3): fbn_cnn 2 (3 runs)" in out
    plan = load_plan(config)  # the printed median: the middle of the sizes listed run by run
    sizes = sorted(len(ids) for ids in plan.bundles.values() for _ in ids)
    assert sizes == [1, 2, 2] and sizes[(len(sizes) - 1) // 2] == 2
    line = next(x for x in out if x.startswith("one more seed"))
    assert line.startswith("one more seed of every setting: +3 runs, 2 -> 3 bundles "
                           "(median run's bundle then fbn_cnn 2)")
    assert f"+{54 / 3600:.3g} CPU-hours of one thread by the committed CPU cost table" in line
    assert f"+{(hours[1] - hours[0]) / 3600:.3g} GPU-hours" in line


def test_a_flat_rate_prices_a_seed_by_its_images_and_no_rate_prints_no_gpu_hours():
    flat = seed_price(load_plan(_config([0], rates=50.0)))
    images = RUN["steps"] * 10 * 8
    assert flat.gpu_hours is not None
    assert flat.gpu_hours[1] - flat.gpu_hours[0] == pytest.approx(3 * images / 50.0 / 3600)
    assert seed_price(load_plan(_config([0]))).gpu_hours is None


@pytest.fixture(scope="module")
def hour():
    config = {}
    for name in ("config/config.yaml", "config/hour.yaml"):
        config = merge(config, yaml.safe_load((ROOT / name).read_text()))
    return load_plan(config)


def test_the_hours_seeds_fill_its_bundles(hour):
    """At least 4 seeds of every judged setting whose bundle key has room for 4 (settings x 4
    within the bundle cap), the tuning's 3 (its own seeds, none judged); no bundle key split
    over two bundles (seeds fill the bundles they open); the median ResNet-20 run trains in a
    bundle of at least 16."""
    cap = hour.execution.planned_bundle_size
    seeds: dict[tuple, dict[str, set[int]]] = {}  # bundle key -> setting -> its seeds
    for cfg in hour.runs.values():
        setting = json.dumps({k: v for k, v in cfg.identity().items() if k != "seed"},
                             sort_keys=True)
        seeds.setdefault(bundle_key(cfg), {}).setdefault(setting, set()).add(cfg.seed)
    roomy = [settings for settings in seeds.values() if 4 * len(settings) <= cap]
    assert len(roomy) >= 0.9 * len(seeds)  # all but the Byzantine runs' keys
    tuning = {json.dumps({k: v for k, v in hour.runs[r].identity().items() if k != "seed"},
                         sort_keys=True) for name, ids in hour.experiments.items()
              if name.startswith("tuning") for r in ids}
    assert all(len(s) >= (3 if setting in tuning else 4)
               for settings in roomy for setting, s in settings.items())
    assert len(hour.bundles) == len(seeds)  # one bundle a key: none opened for a seed
    assert median_bundle_sizes(hour.runs, hour.bundles)["resnet20"] >= 16
