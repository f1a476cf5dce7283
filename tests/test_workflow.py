"""The Snakemake DAG end to end on the smallest grid (.test/), a dry run at paper scale, and
run bundles: only new runs train, and a killed bundle job loses no finished run."""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from dag import SNAKEMAKE, assert_trained_as_in_one_go, snakemake, work_copy

from fednorm.claims import load_claims
from fednorm.plan import load_plan, merge
from fednorm.report import entries

# The tests that write their own config/config.yaml name it: a bare snakemake would merge
# config/quick.yaml over it (the Snakefile's default)
OWN_CONFIG = ("--configfile", "config/config.yaml")


def _job_counts(out):
    """Snakemake's job stats ('--quiet rules'): rule name -> number of jobs."""
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}


def _bundle_jobs(counts):
    return sum(n for rule, n in counts.items() if rule.startswith("train_"))


@pytest.mark.parametrize(("bundle_size", "jobs"), [
    # FBN: Fig 3 (4 x 7 x 3) + Fig 5 (4 x 5 x 3) + the Byzantine runs (Figs 4, 6-13); FixBN:
    # 579 runs; FedTAN's setting 48; the comparison 213 more (tests/test_plan.py), and its new
    # methods (hybridbn, fedwon, none: 72; FedFN: 48) and the tuning grid (510); FixBN on
    # Tiny-ImageNet 417 (150 + 150 Fig 2 + 15 FixBN of Fig 4 + 102 of Fig G not in Fig 2);
    # ImageNet-1K 9 (Table 2); the small batches 42 (7 methods x 2 batch sizes x 3 seeds)
    # Digits-Five's feature shift 33 (11 methods x 3 seeds); each method's own keys swept in
    # every setting of its claims: the tuning grid grows to 900, and tuning_splits 225,
    # tuning_small_batch 540, tuning_feature_shift 165 (tests/test_plan.py); FedAP under
    # feature shift 3 and its tuning 75 (5 lr_scales x 5 self-weights x 3 seeds)
    (1, 144 + 72 + 144 + 72 + 579 + 48 + 213 + 72 + 48 + 510 + 417 + 9 + 42 + 33
     + (900 - 510) + 225 + 540 + 165 + 3 + 75),
    # FBN: per normalizer, Figs 3 and 5 share a key: 36 runs -> 16 + 16 + 4; the Byzantine runs
    # of a normalizer share one (attacks and server rules are per run): 144 runs -> 9 x 16.
    # FixBN, per (normalizer, E) at 64,000 steps: bn and gn 15 splits x seeds + 6 momentum runs
    # -> 16 + 5 (x 5 E x 2); fixbn 9 momentum runs (+ 15 - 3 partition runs at E = 100) -> 1
    # (2 at E = 100); fixed rounds (E = 500 is the 64,000-step run) 15 runs -> 1 (x 4 E x 2);
    # centralized BN 1; Table 1 (no momentum): central, gn, bn -> 3. Figs K-N add 12 fixbn runs
    # at E = 1, 20, 500 (-> 2 bundles each); Table 4: gn_ws, ln, in, fixup -> 4; Table I: 4 and
    # 8 groups -> 2; Fig J: bn, fixbn x 3 other batch sizes -> 6; Table H: affine, both -> 2;
    # Fig I, per normalizer: 4 more client counts x (full, 50 %, 10 %: the partial runs bundle
    # by their number of participants) + 50 % and 10 % at M = 5 -> 14;
    # Fig 3: the dynamics runs -> 1, FixBN freezing at 4 more fractions -> 4. FedTAN's
    # setting: 8 schemes -> 8. The comparison, per (normalizer, E), 12 runs -> 1: fbn, fedtan,
    # fedbn, silobn, heterofl_sbn at E = 1 and 100 -> 10; gn_ws, ln, in, fixup at E = 1 -> 4
    # (at E = 100 Table 4's 3 runs grow to a bundle of 12); bn, gn, fixbn and centralized BN
    # are runs of the FixBN figures -> 0. The new methods: hybridbn, fedwon, none and FedFN's
    # none+fn, bn+fn at E = 1 and 100, 12 runs each -> 10; the tuning grid, per (method, E), 5
    # lr_scales x 3 seeds -> 17 x 2 (its held-out images make a key of their own); the small
    # batches, per (method, batch size), 3 seeds -> 7 x 2.
    (16, 4 * 3 + 2 * 9 + (2 * 5 * 2 + 4 + 2 + 2 * 4 + 1 + 3) + (3 + 4 + 2 + 6) + (2 + 2 * 14)
     + (1 + 4) + 8 + (10 + 4) + 10 + 17 * 2 + 7 * 2
     # Tiny-ImageNet, per (normalizer, E): bn and gn at fixed epochs 15 + 6 momentum runs -> 2
     # (x 5 E x 2), fixbn 15 + 6 at E = 100 -> 2 and 9 at each other E -> 1 (x 4); fixed
     # rounds 15 -> 1 (x 5 E x 2: E = 500 at 128 rounds is 64,000 steps, not the 128,000 of
     # the epoch budget)
     + (20 + 2 + 4 + 10)
     # ImageNet-1K: gn, bn, fixbn, 3 seeds each -> 3
     + 3
     # Digits-Five's feature shift, per method: 3 seeds -> 11
     + 11
     # each own-key value is a bundle key: the tuning grid, per (method and own-key values, E),
     # 15 runs -> 30 x 2 (was 17 x 2); tuning_splits, per method and own-key values, 3 splits
     # x 15 runs -> 5 x 3; tuning_small_batch, per (method and own-key values, batch size)
     # -> 18 x 2; tuning_feature_shift -> 11
     + (30 - 17) * 2 + 5 * 3 + 18 * 2 + 11
     # FedAP under feature shift: its 3 seeds -> 1; its tuning, per self-weight (5 values),
     # 5 lr_scales x 3 seeds -> 5
     + 1 + 5),
])
@pytest.mark.slow
def test_paper_dry_run_counts_the_bundle_jobs(tmp_path, bundle_size, jobs):
    size = tmp_path / "size.yaml"
    size.write_text(yaml.safe_dump({"execution": {"bundle_size": bundle_size}}))
    out = snakemake("--dry-run", "--quiet", "rules", "--cores", "1", "--configfile", str(size))
    assert out.returncode == 0, out.stderr
    counts = _job_counts(out.stdout)
    assert _bundle_jobs(counts) == jobs
    assert all(n == 1 for rule, n in counts.items() if rule.startswith("train_"))
    # the caches of CIFAR-10 and Tiny-ImageNet
    assert counts["dataset_cache"] == 2 and counts["toy"] == 1 and counts["claims"] == 1
    assert counts["report_captions"] == 1
    assert [counts[f"figures_{f}"] for f in ("fbn", "fixbn", "fedtan", "compare")] == [1] * 4


@pytest.mark.parametrize(("patch", "message"), [
    ({"experiments": {"fbn_gamma": {"grid": {"heterogeneity": [0, 1.5]}}}},
     "key 'heterogeneity' has value 1.5"),
    ({"experiments": {"fbn_byzantine_gamma": {"set": {"f": 5}}}}, "key 'f' has value 5"),
    ({"experiments": {"fbn_byzantine_gamma": {"set": {"f": -1}}}}, "key 'f' has value -1"),
    ({"experiments": {"fbn_byzantine_gamma": {"grid": {"attack": ["sf", "lie"]}}}},
     "key 'attack' has value 'lie'"),
    ({"execution": {"bundle_size": 0}},
     "execution: key 'bundle_size' has value 0; allowed: an integer >= 1"),
])
def test_bad_config_fails_before_any_job(tmp_path, patch, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"paths": {"results": str(tmp_path / "results")}, **patch}))
    out = snakemake("--cores", "1", "--configfile", str(bad))
    assert out.returncode == 2
    assert _fednorm_line(out.stderr).startswith("fednorm: configuration error: ")
    assert message in _fednorm_line(out.stderr)
    assert not (tmp_path / "results").exists()


def _fednorm_line(stderr):
    """The one line fednorm prints for a bad config or file at the workflow's parse time
    (fednorm.inputs.user_errors): Snakemake's traceback of it must not follow."""
    assert "Traceback" not in stderr and '  File "' not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("fednorm: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_claims_file_that_is_not_yaml_is_one_line(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text("claims:\n  - id: x\n    setting: {normalizer: bn\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"paths": {"results": str(tmp_path / "results")},
                                   "claims": str(claims)}))
    out = snakemake("--cores", "1", "--configfile", str(bad))
    assert out.returncode == 2
    assert _fednorm_line(out.stderr).startswith(
        f"fednorm: claims file {claims}: not valid YAML: line 4, column 1: ")


def test_a_bad_claim_fails_before_any_job(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"claims": [
        {"id": "fbn-fig3-bn", "paper": "fbn", "source": "Fig 3a", "value": 40,
         "setting": {"normalizer": "bn", "heterogeneity": 2}}]}))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"paths": {"results": str(tmp_path / "results")},
                                   "claims": str(claims)}))
    out = snakemake("--cores", "1", "--configfile", str(bad))
    assert out.returncode != 0
    assert "claim 'fbn-fig3-bn', setting: key 'heterogeneity' has value 2" in out.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("tiny_dag")
def test_tiny_dag_builds_every_figure_and_records_divergence(tiny_dag, tmp_path):
    work, out = tiny_dag.work, tiny_dag.out
    assert out.returncode == 0, out.stderr[-3000:]
    config = merge(*(yaml.safe_load((work / f).read_text())
                     for f in ("config/config.yaml", ".test/config.yaml")))
    plan = load_plan(config)
    # a job of several bundles (execution.bundles_per_job) trains each of them; each job's log
    # names each of its bundles, and each bundle is in one job
    assert _bundle_jobs(_job_counts(out.stderr)) == len(plan.jobs) < len(plan.bundles) < len(
        plan.runs)
    logs = {p.stem: p.read_text() for p in (work / plan.paths.results / "logs/train").iterdir()}
    assert len(logs) == len(plan.jobs)
    for bundle_id, run_ids in plan.bundles.items():
        trained = [job for job, log in logs.items()
                   if f"bundle {bundle_id}: training {len(run_ids)} runs" in log]
        assert len(trained) == 1, (bundle_id, trained)
        for run_id in run_ids:
            meta = json.loads((work / plan.paths.run_dir(run_id) / "run.json").read_text())
            assert meta["bundle"]["id"] == bundle_id
    figures = work / ".test/figures/fbn"
    for name in ("fig3a", "fig3b", "fig3c", "fig5a", "fig5b", "fig5c", "norm_error_curves",
                 "norm_error_vs_heterogeneity", "fig4", *(f"fig{n}" for n in range(6, 14)),
                 "byzantine_norm_error"):
        for ext in ("pdf", "png", "csv"):
            assert (figures / f"{name}.{ext}").stat().st_size > 0

    fixbn = work / ".test/figures/fixbn"
    for name in ("fig2a", "fig2b", "fig1", "fig4", "fig5", "fig6", "figH", "figI", "figJ",
                 "figK", "figL", "figM", "figN", "fig3", "fig2a_tiny", "fig2b_tiny", "figG"):
        for ext in ("pdf", "png", "csv"):
            assert (fixbn / f"{name}.{ext}").stat().st_size > 0
    tiny = pd.read_csv(fixbn / "fig2a_tiny.csv")  # Tiny-ImageNet's BN and GN over 2 splits x 2 E
    assert tiny.groupby("panel").size().nunique() == 1 and len(tiny) == 3 * 2 * 2
    assert pd.read_csv(fixbn / "fig4.csv")["part"].nunique() == 2  # CIFAR-10, Tiny-ImageNet
    fig3 = pd.read_csv(fixbn / "fig3.csv")  # four parts; (a) and (b) from the recorded dynamics
    assert fig3["part"].nunique() == 4
    for name, ext in itertools.product(("table1", "table4", "tableH", "tableI", "table2"),
                                       ("csv", "md")):
        assert (fixbn / f"{name}.{ext}").stat().st_size > 0
    table2 = pd.read_csv(fixbn / "table2.csv")  # the ImageNet-shaped tree, streamed
    assert set(table2.normalizer) == {"gn", "bn", "fixbn"}
    table4 = pd.read_csv(fixbn / "table4.csv")
    assert set(table4.normalizer) == {"gn_ws", "ln", "in", "fixup"}
    heat = pd.read_csv(fixbn / "fig2a.csv")
    assert heat.groupby("panel").size().nunique() == 1  # 3 panels x 2 splits x 2 E
    for name in ("fig1a", "fig1b", "fig2a", "fig2b", "fig2c"):  # the 2-D toy
        for ext in ("pdf", "png", "csv"):
            assert (figures / f"{name}.{ext}").stat().st_size > 0
    toy = pd.read_csv(figures / "fig2c.csv")
    assert set(toy.scheme) == {"bn", "fbn", "fixbn"} and set(toy.gamma) == {0, 1}

    # the claims' second stage (.test/config.yaml, stage2): its checkpoint chose runs that the
    # first summary lacks and the summary holds; no claim here is judged at tuned values, and
    # the design fixed the seeds and the budget: no seed is bought, no run at another budget
    record = json.loads((work / ".test/results/stage2/plan.json").read_text())
    second = {e["run_id"]: e for e in record["runs"]}
    everything = pd.read_csv(work / ".test/results/summary.csv")
    summary = pd.read_csv(work / ".test/results/stage2/summary_first.csv")
    assert set(summary.run_id) == set(plan.runs) and not second.keys() & set(plan.runs)
    assert set(everything.run_id) == set(plan.runs) | second.keys()
    assert not second and record["jobs"] == {}
    assert len(list((work / ".test/results/stage2/jobs").glob("*.json"))) == len(record["jobs"])
    calibration = pd.read_csv(work / ".test/figures/claims_calibration.csv").set_index("id")
    assert set(calibration.index) == {"tiny-words-holds", "tiny-words-contradicted",
                                      "tiny-words-negligible"}
    dynamics = summary[summary.record_dynamics & (summary.step > 0)]
    assert dynamics.run_id.nunique() == 1
    assert (dynamics[["stat_change", "stat_deviation", "stat_variance"]] > 0).all().all()
    assert summary.loc[~summary.record_dynamics, "stat_change"].isna().all()
    for column in ("run_id", "figure_group", "model", "normalizer", "partition",
                   "heterogeneity", "local_steps", "attack", "f", "aggregator", "nnm",
                   "scenario", "seed", "step", "test_accuracy", "test_loss", "train_loss",
                   "status"):
        assert column in summary.columns
    # .test/config.yaml's grids: FBN 42 (6 + 1 settings at six seeds) + 3 + 12 + 4; FixBN 8
    # (bn, gn x 2 splits x 2 E) + 4
    # fixed rounds (E = 4 is the epochs run) + 2 fixbn + 5 momentum (bn global, fixbn reset at
    # E = 1 and global) + 2 (fixbn local, centralized) + 4 Table 1
    # + 7 for the other analyses: fixbn on IID at E = 1, 4 normalizers of Table 4, GN with 4
    # groups, BN with batch 10
    # + 5: Table H's affine and both, Fig I's partial and 10-client runs
    # + 2: Fig 3's dynamics run and FixBN freezing at 0.25
    # + 16: FedTAN's setting (6 schemes x 2 splits, FedTAN, centralized x 2 splits)
    # + 9: the comparison (bn, fedtan, fedbn x 2 splits x 2 E and 2 centralized; bn's 4 and
    # centralized BN on IID are Fig 2a's and Fig 1's)
    # + 4: FedFN (none+fn x 2 splits x 2 E); + 6: the tuning grid (bn, and hybridbn at 2
    # smoothings, x lr x 1, 2)
    # + 17: Tiny-ImageNet-shaped, 8 (bn, gn x 2 splits x 2 E) + 4 fixed rounds at E = 1 + 2
    # fixbn + 3 momentum (fixbn reset at E = 1, global at E = 1 and 4)
    # + 2: the small batches (bn, fedwon at batch 2); + 3: ImageNet-shaped (Table 2: gn, bn,
    # fixbn); + 2: feature shift on Digits-Five-shaped files (bn, fedbn)
    assert summary["run_id"].nunique() == (42 + 3 + 12 + 4 + (8 + 4 + 2 + 5 + 2 + 4) + 7 + 5 + 2
                                           + 16 + 9 + 4 + 6 + 17 + 2 + 3 + 2)
    shifted = summary[(summary.dataset == "digits5") & (summary.step > 0)]
    assert shifted.run_id.nunique() == 2 and (shifted.status == "ok").all()
    both = shifted[["test_accuracy_usps", "test_accuracy_svhn"]]
    assert both.notna().all().all() and shifted.test_accuracy_mnist.isna().all()
    assert np.allclose(shifted.domain_accuracy, both.mean(axis=1))
    tiny_runs = summary[summary.dataset == "tinyimagenet"]
    assert tiny_runs.run_id.nunique() == 17 and set(tiny_runs.model) == {"resnet18"}
    imagenet = summary[summary.dataset == "imagenet"]  # 10 rounds, evaluated every 5 steps
    assert imagenet.run_id.nunique() == 3 and (imagenet.status == "ok").all()
    assert sorted(imagenet.step.unique()) == [0, 5, 10]
    assert imagenet.test_accuracy.between(0, 1).all()
    trained = imagenet[(imagenet.step > 0) & (imagenet.normalizer != "gn")]
    assert trained.norm_error_mean.notna().all() and (trained.norm_error_mean >= 0).all()
    tuned = summary[summary.val_fraction > 0]
    assert tuned.run_id.nunique() == 6 and tuned.val_accuracy.notna().all()
    assert summary.loc[summary.val_fraction == 0, "val_accuracy"].isna().all()
    tuning = pd.read_csv(work / ".test/figures/compare/tuning.csv")
    assert tuning["method"].tolist() == ["bn", "hybridbn"]
    assert set(tuning["lr_scale"]) <= {1.0, 2.0} and tuning["common_mean"].notna().all()
    for suffix in ("", "_feature_shift"):  # rliable's reading of the comparisons
        gains = pd.read_csv(work / f".test/figures/compare/improvement{suffix}.csv")
        assert gains["method"].iloc[0] == "bn" and gains["probability"].iloc[1:].notna().all()
        inside = gains.iloc[1:]
        assert ((inside.low <= inside.probability) & (inside.probability <= inside.high)).all()
        curves = pd.read_csv(work / f".test/figures/compare/performance_profile{suffix}.csv")
        assert set(curves["method"]) == set(gains["method"])
        assert (curves.groupby("method")["fraction"].diff().dropna() <= 0).all()
    ok = summary[summary.status == "ok"]
    assert ok.test_accuracy.between(0, 1).all()
    fbn_runs = ok[ok.model == "fbn_cnn"]  # the others (LeNet) evaluate every 4 steps
    assert sorted(fbn_runs.step.unique()) == [0, 10, 20]
    diverged = summary[summary.status == "diverged"]
    assert diverged.run_id.nunique() == 6 and diverged.partition.eq("dirichlet").all()  # 6 seeds
    meta = json.loads(next((work / ".test/results/runs").glob("fbn-dirichlet*-E1-s0-*/run.json"))
                      .read_text())
    assert meta["status"] == "diverged" and meta["config"]["lr"] == [1e6]
    for key in ("git_commit", "engine_revision", "versions", "device", "wall_time_s", "seed"):
        assert key in meta
    panels = pd.read_csv(figures / "norm_error_curves.csv")
    assert list(panels.heterogeneity.unique()) == [0.01, 0.0]  # one panel per gamma, in order
    assert (panels[panels.normalizer == "fbn"]["mean"] >= 0).all()
    plotted = pd.read_csv(figures / "fig5a.csv")  # every seed is drawn
    diverging = everything[(everything.status == "diverged")
                           & ~everything.figure_group.str.contains("@")].run_id.nunique()
    assert diverging == 6  # the six seeds of the diverging setting
    assert plotted["n_diverged"].sum() == 6  # the diverged runs are shown, not dropped
    sf_median = pd.read_csv(figures / "fig6.csv")  # lines: scenario x normalizer
    lines = set(zip(sf_median.scenario, sf_median.normalizer, strict=True))
    assert lines == {("no attack", "bn"), ("no attack", "fbn"), ("SF, no defense", "fbn"),
                     ("SF, median + NNM", "bn"), ("SF, median + NNM", "fbn")}
    dirichlet = pd.read_csv(figures / "fig13.csv")
    assert set(dirichlet.scenario) == {"no attack", "SF, trimmed mean + NNM"}
    ledger = pd.read_csv(work / ".test/figures/claims.csv").set_index("id")  # .test/claims.yaml
    assert dict(ledger.verdict) == {"tiny-fbn-iid": "reproduced", "tiny-fbn-diverged": "differs",
                                    "tiny-bn-paper-scale": "not comparable",
                                    "tiny-bn-gamma0.5": "not run"}
    (iid,) = [r for r, cfg in plan.runs.items() if (cfg.normalizer, cfg.heterogeneity,
                                                     cfg.attack, cfg.seed) == ("fbn", 1, "none", 0)]
    # the numbers' ledger reads the summary too: the six seeds of the same setting
    cfg = plan.runs[iid]
    seeds = [r for r, c in plan.runs.items() if r != iid
             and {**c.identity(), "seed": cfg.seed} == cfg.identity()]
    finals = [everything[everything.run_id == r].sort_values("step").test_accuracy.iloc[-1]
              for r in (iid, *seeds)]
    assert len(finals) == 6
    assert ledger.loc["tiny-fbn-iid", "ours_mean"] == pytest.approx(100 * np.mean(finals))
    assert ledger.loc["tiny-fbn-diverged", "n_diverged"] == 6
    for ext in ("md", "pdf", "png"):
        assert (work / f".test/figures/claims.{ext}").stat().st_size > 0
    words = pd.read_csv(work / ".test/figures/claims_words.csv").set_index("id")
    assert dict(words.verdict) == {"tiny-words-holds": "holds",
                                   "tiny-words-contradicted": "contradicted",
                                   "tiny-words-negligible": "negligible"}
    # six seeds, each a diverging run on one side: the exact sign test (p = 1/64 < α)
    assert words.loc["tiny-words-contradicted", "n_diverged"] == 6
    assert words.loc["tiny-words-holds", "n_diverged"] == 6  # the side behind diverged
    assert words.loc["tiny-words-holds", "p"] == pytest.approx(1 / 64)
    assert set(words.settled.dropna()) <= {"yes", "no"} and words.rates.notna().all()
    assert words.loc["tiny-words-negligible", "margin"] == 0
    for ext in ("md", "pdf", "png"):
        assert (work / f".test/figures/claims_words.{ext}").stat().st_size > 0

    report = tmp_path / "report.html"  # self-contained: every file embedded
    out = snakemake("--configfile", ".test/config.yaml", "--report", str(report), cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    _check_report(report.read_text(), work, plan)
    leftovers = [p for p in (work / ".test").rglob(".*") if p.is_file()]
    assert leftovers == []  # no temporary file left behind


def _report_variable(html, name):
    """One of the JSON objects the report's page holds: results (file -> name, labels, caption
    as HTML, mime type, data) or categories (category -> subcategory -> files)."""
    return json.loads(re.search(rf"^\s*var {name} = (\{{.*\}});$", html, re.M).group(1))


def _check_report(html, work, plan):
    """Every figure, table, toy figure and the ledger is in the report, under its paper's
    category, with its caption: its name, what it reproduces, the scale of its data; a table's
    caption shows the table."""
    shown = entries(plan, load_claims(str(work / plan.claims), plan))
    results = _report_variable(html, "results")
    assert set(results) == {e.file for e in shown}
    assert len(shown) == len(plan.figures) + 5 + 4  # the toy's figures, the ledgers' two each
    categories = {category: {f for files in subs.values() for f in files}
                  for category, subs in _report_variable(html, "categories").items()}
    assert categories == {c: {e.file for e in shown if e.category == c}
                          for c in ("FBN", "FixBN", "FedTAN", "All methods", "Claims ledger")}
    for entry in shown:
        result = results[entry.file]
        assert result["labels"] == entry.labels
        assert result["mime_type"] == ("text/markdown" if entry.file.endswith(".md")
                                       else "image/png")
        caption, name = result["caption"], Path(entry.file).relative_to(plan.paths.figures)
        assert f'<tt class="docutils literal">{name.with_suffix("")}' in caption
        assert entry.labels["reproduces"].replace("'", "&#x27;") in caption.replace("'",
                                                                                   "&#x27;")
        assert "at a reduced scale" in caption  # the toy's 20 rounds, or synthetic data
        assert ("Synthetic data" in caption) == (entry.labels["figure"] not in {
            *(f"fbn/{n}" for n in ("fig1a", "fig1b", "fig2a", "fig2b", "fig2c")),
            *(f"fixbn/{n}" for n in ("fig2a_tiny", "fig2b_tiny", "figG", "table2")),  # JPEGs
            "compare/feature_shift", "compare/feature_shift_domains",  # Digits-Five's files
            "compare/improvement_feature_shift", "compare/performance_profile_feature_shift"})
        if entry.file.endswith(".md") and entry.category != "Claims ledger":
            header = (work / entry.file).read_text().splitlines()[2]  # the table's first row
            assert header.startswith("| ") and header in caption


# Run bundles, end to end on a config of a few tiny runs (no figures): what trains, what is kept.
TINY = {"dataset": "synthetic", "n_train": 400, "n_test": 200, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 8, "steps": 20, "lr": [0.1], "lr_milestones": [],
        "eval_every": 10, "partition": "gamma"}


def _tiny_config(work, bundle_size, experiment, execution=None, **run):
    """Replace the work copy's config/config.yaml: one experiment, its runs and the summary."""
    config = {"paths": {"results": "results", "figures": "figures", "data": "data"},
              "execution": {"device": "cpu", "threads": 1, "gpus_per_job": 0,
                            "bundle_size": bundle_size, **(execution or {})},
              "run": {**TINY, **run}, "experiments": {"e": experiment}}
    (work / "config/config.yaml").write_text(yaml.safe_dump(config))
    return load_plan(config)


def _run_json(work, plan, run_ids):
    """run_id -> (bytes, mtime in ns) of its run.json, for those that exist."""
    paths = {r: work / plan.paths.run_dir(r) / "run.json" for r in run_ids}
    return {r: (p.read_bytes(), p.stat().st_mtime_ns) for r, p in paths.items() if p.exists()}


@pytest.mark.slow
def test_a_new_seed_trains_only_the_new_runs(tmp_path):
    work = work_copy(tmp_path)
    grid = {"normalizer": ["fbn"], "heterogeneity": [0, 1]}
    before = _tiny_config(work, 3, {"grid": {**grid, "seed": [0]}})
    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    old = _run_json(work, before, before.runs)
    assert len(old) == 2

    after = _tiny_config(work, 3, {"grid": {**grid, "seed": [0, 1]}})
    new = set(after.runs) - set(before.runs)
    # bundles of 3 in (seed, run_id) order: both old runs and one new run share the first
    mixed = next(ids for ids in after.bundles.values() if len(ids) == 3)
    assert set(mixed) - new == set(old) and len(set(mixed) & new) == 1
    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _run_json(work, before, before.runs) == old  # byte for byte, not even rewritten
    trained = {r: json.loads(meta) for r, (meta, _) in _run_json(work, after, new).items()}
    assert set(trained) == new and _bundle_jobs(_job_counts(out.stderr)) == 2
    for run_id, meta in trained.items():
        assert run_id in after.bundles[meta["bundle"]["id"]]
    summary = pd.read_csv(work / after.paths.summary())
    assert set(summary.run_id) == set(after.runs)


def test_a_new_seed_plans_only_its_runs_in_a_dry_run(tmp_path):
    """Issue 22: with every run of the quick profile complete, one more seed on the FBN gamma
    grid makes a dry run plan exactly its runs (one per normalizer and heterogeneity), and no
    run that exists. With execution.images_per_second and max_runtime, each training job asks
    for 5 minutes plus 1.25 times its images' time at that rate, at most max_runtime."""
    work = work_copy(tmp_path)
    before = load_plan(merge(yaml.safe_load((work / "config/config.yaml").read_text()),
                             yaml.safe_load((work / "config/quick.yaml").read_text())))
    for path in before.run_files(tuple(before.runs)):  # complete: all its files exist
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("")
    rate, cap = 200.0, 15  # the new runs' jobs (balanced over every bundle) ask 20 minutes
    more = {"experiments": {"fbn_gamma": {"grid": {"seed": [2, 3, 4, 5, 6, 7, 8]}}},
            "execution": {"images_per_second": rate, "max_runtime": cap}}
    (work / "more.yaml").write_text(yaml.safe_dump(more))
    out = snakemake("-n", "--configfile", "config/quick.yaml", "more.yaml", cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = [block for block in re.split(r"\n(?=rule )", out.stdout + out.stderr)
            if block.startswith("rule train_")]
    after = load_plan(merge(merge(yaml.safe_load((work / "config/config.yaml").read_text()),
                                  yaml.safe_load((work / "config/quick.yaml").read_text())),
                            more))
    planned, minutes = set(), []
    for job in jobs:
        output = next(line for line in job.splitlines() if line.strip().startswith("output:"))
        ids = re.findall(rf"{before.paths.results}/runs/([^/\s,]+)/run\.json", output)
        planned |= set(ids)
        cfgs = [after.runs[r] for r in ids]
        images = sum(c.steps * c.n_clients * c.batch_size for c in cfgs)
        uncapped = 5 + -(-1.25 * images // (rate * 60))
        want = min(cap, uncapped)
        minutes.append(uncapped)
        assert f"runtime={want:.0f}," in job, (want, job)
    axes = yaml.safe_load((work / "config/quick.yaml").read_text())["experiments"]["fbn_gamma"]
    size = len(axes["grid"]["normalizer"]) * len(axes["grid"]["heterogeneity"])
    assert planned == set(after.runs) - set(before.runs) and len(planned) == size
    assert all(r.split("-s")[-1].startswith("8-") for r in planned)
    assert max(minutes) > cap, minutes  # the cap was reached (tests/test_plan.py: below it)


@pytest.mark.slow
def test_a_killed_bundle_job_loses_no_finished_run(tmp_path):
    work = work_copy(tmp_path)
    # one bundle (lr is not in the key) whose diverged run finishes at once and whose other two
    # train long: whatever the order, once one run.json exists, another run is still training
    plan = _tiny_config(work, 4, {"set": {"momentum": 0.0}, "grid": {
        "normalizer": ["fbn"], "heterogeneity": [0], "lr": [[1.0e6], [0.1], [0.05]]}},
        steps=400, eval_every=200)
    ((bundle_id, run_ids),) = plan.bundles.items()
    with open(tmp_path / "killed.log", "w") as log:
        job = subprocess.Popen([*SNAKEMAKE, "--cores", "1", *OWN_CONFIG], cwd=work,
                               stdout=log, stderr=log,
                               start_new_session=True)
        deadline = time.monotonic() + 300
        while job.poll() is None and time.monotonic() < deadline:
            if 0 < len(_run_json(work, plan, run_ids)) < len(run_ids):
                break
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)  # Snakemake and its job
        job.wait(timeout=60)
    finished = _run_json(work, plan, run_ids)
    assert 0 < len(finished) < len(run_ids), (tmp_path / "killed.log").read_text()[-3000:]

    assert snakemake("--unlock", *OWN_CONFIG, cwd=work).returncode == 0
    out = snakemake("--cores", "1", "--rerun-incomplete", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert {r: v for r, v in _run_json(work, plan, run_ids).items() if r in finished} == finished
    log = (work / plan.paths.results / "logs/train" / f"{bundle_id}.log").read_text()
    assert f"bundle {bundle_id}: training {len(run_ids) - len(finished)} runs" in log
    statuses = [json.loads(meta)["status"] for meta, _ in _run_json(work, plan, run_ids).values()]
    assert sorted(statuses) == ["diverged", "ok", "ok"]


@pytest.mark.slow
def test_a_stopped_bundle_job_resumes_where_it_stopped(tmp_path):
    """SIGTERM to Snakemake and its training job (as SLURM sends at a time limit): the job saves
    its bundle's state at <results>/resume/<bundle id>.pt, which Snakemake keeps although the
    job failed. Run again, the job's log says "resumed at step N of 400" (N > 0), the resume
    point is gone, and the runs' files equal those of the bundle trained in one go."""
    work = work_copy(tmp_path)
    plan = _tiny_config(work, 2, {"grid": {"normalizer": ["fbn"], "heterogeneity": [0],
                                           "lr": [[0.1], [0.05]]}},
                        execution={"checkpoint_minutes": 0.001}, steps=400, eval_every=100)
    ((bundle_id, run_ids),) = plan.bundles.items()
    resume = work / plan.paths.resume_point(bundle_id)
    with open(tmp_path / "stopped.log", "w") as log:
        job = subprocess.Popen([*SNAKEMAKE, "--cores", "1", *OWN_CONFIG], cwd=work,
                               stdout=log, stderr=log,
                               start_new_session=True)
        deadline = time.monotonic() + 300
        while job.poll() is None and not resume.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # well into training
        os.killpg(job.pid, signal.SIGTERM)  # Snakemake and its job
        job.wait(timeout=120)
    assert resume.exists(), (tmp_path / "stopped.log").read_text()[-3000:]
    assert not _run_json(work, plan, run_ids)

    assert snakemake("--unlock", *OWN_CONFIG, cwd=work).returncode == 0
    out = snakemake("--cores", "1", "--rerun-incomplete", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    log = (work / plan.paths.results / "logs/train" / f"{bundle_id}.log").read_text()
    assert int(re.search(r"resumed at step (\d+) of 400", log).group(1)) > 0, log
    assert not resume.exists()

    whole = tmp_path / "whole"
    assert_trained_as_in_one_go(work, plan, bundle_id, run_ids, whole)
    for r in run_ids:
        got, want = (json.loads((d / "run.json").read_text())
                     for d in (work / plan.paths.run_dir(r), whole / r))
        for key in ("config", "status", "rows", "bundle"):
            assert got[key] == want[key], key


# The FixBN kinds end to end: each figure's files come from its kind (a table: .csv and .md).
FIXBN_FIGURES = {
    "fixbn/fig2": {"experiment": ["iid", "shards"], "kind": "heatmap", "rows": "split",
                   "cols": "local_steps", "compare": {"normalizer": ["bn", "gn"]},
                   "row_order": ["Shards(2)", "IID"]},
    "fixbn/fig4": {"experiment": ["iid", "shards"], "kind": "bars", "x": "split",
                   "where": {"local_steps": 2}},
    "fixbn/table1": {"experiment": ["iid", "shards"], "kind": "table", "rows": "normalizer",
                     "cols": "split", "where": {"local_steps": 1}},
    "fixbn/figH": {"experiment": "shards", "kind": "final_vs", "x": "local_steps",
                   "logx": True},
    "fixbn/fig6": {"experiment": "shards", "kind": "curves", "x": "progress",
                   "hue": ["local_steps", "normalizer"]},
    "fixbn/fig1": {"experiment": "shards", "kind": "curves", "x": "round",
                   "where": {"local_steps": 2}},
}


def _fixbn_config(work):
    grid = {"normalizer": ["bn", "gn"], "local_steps": [1, 2]}
    config = {"paths": {"results": "results", "figures": "figures", "data": "data"},
              "execution": {"device": "cpu", "threads": 1, "gpus_per_job": 0,
                            "bundle_size": 4},
              "run": {**TINY, "gn_groups": 2},
              "experiments": {"iid": {"set": {"partition": "iid"}, "grid": grid},
                              "shards": {"set": {"partition": "shards", "heterogeneity": 2},
                                         "grid": grid}},
              "figures": FIXBN_FIGURES}
    (work / "config/config.yaml").write_text(yaml.safe_dump(config))
    return load_plan(config)


@pytest.mark.slow
def test_fixbn_kinds_write_their_own_files(tmp_path):
    work = work_copy(tmp_path)
    plan = _fixbn_config(work)
    out = snakemake("--dry-run", "--quiet", "rules", "--cores", "1", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr
    counts = _job_counts(out.stdout)
    assert counts["figures_fixbn"] == 1 and "figures_top" not in counts
    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    written = sorted(str(p.relative_to(work)) for p in (work / "figures").rglob("*"))
    assert written == sorted(["figures/fixbn", *plan.figure_files()])
    assert "figures/fixbn/table1.md" in written and "figures/fixbn/table1.pdf" not in written
    heatmap = pd.read_csv(work / "figures/fixbn/fig2.csv")
    assert list(dict.fromkeys(heatmap.split)) == ["Shards(2)", "IID"]
    assert heatmap["n_seeds"].gt(0).all()
    table = (work / "figures/fixbn/table1.md").read_text().splitlines()
    assert table[2] == "| normalizer | IID | Shards(2) | seeds |"
    progress = pd.read_csv(work / "figures/fixbn/fig6.csv")
    assert sorted(progress.progress.unique()) == [0.0, 0.5, 1.0]  # steps 0, 10, 20 of 20
    rounds = pd.read_csv(work / "figures/fixbn/fig1.csv")
    assert sorted(rounds["round"].unique()) == [0.0, 5.0, 10.0]  # E = 2


def test_the_workflow_lint_fails_on_any_finding(tmp_path):
    """make lint-workflow: clean as the repository is, failing once a rule lacks its conda
    environment (one of Snakemake's lints)."""
    work = work_copy(tmp_path)
    make = ["make", "--no-print-directory", "lint-workflow", f"PYTHON={sys.executable}",
            "LINT_CONFIGS=.test/config.yaml"]
    clean = subprocess.run(make, cwd=work, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    with open(work / "Snakefile", "a") as snakefile:
        snakefile.write('\n\nrule unlinted:\n    output:\n        "unlinted.txt",\n    log:\n'
                        '        "unlinted.log",\n    shell:\n        "touch {output}"\n')
    found = subprocess.run(make, cwd=work, capture_output=True, text=True, timeout=300)
    assert found.returncode != 0
    assert "Lints for rule unlinted" in found.stdout
    assert "Specify a conda environment or container for each rule" in found.stdout
    assert "lint-workflow: findings for .test/config.yaml" in found.stdout


@pytest.mark.slow
def test_results_cut_short_are_named_retrained_and_never_dropped(tmp_path):
    """A cut metrics.csv and a run.json that is not JSON: the summary job names both and fails;
    the next `snakemake` retrains exactly those runs. A cut summary: the figure job names it
    and fails; the next `snakemake` writes it again, with every run (fednorm.integrity)."""
    work = work_copy(tmp_path)
    config = {"paths": {"results": "results", "figures": "figures", "data": "data"},
              "execution": {"device": "cpu", "threads": 1, "gpus_per_job": 0},
              "run": TINY, "experiments": {"e": {"grid": {"heterogeneity": [0, 1]}}},
              "figures": {"fig": {"experiment": "e", "kind": "curves", "x": "progress",
                                  "hue": "heterogeneity"}}}
    (work / "config/config.yaml").write_text(yaml.safe_dump(config))
    plan = load_plan(config)
    assert snakemake("--cores", "2", *OWN_CONFIG, cwd=work).returncode == 0
    cut, not_json = (work / plan.paths.run_dir(r) for r in plan.runs)
    metrics = {d: (d / "metrics.csv").read_bytes() for d in (cut, not_json)}
    # cut at a line end (the header and one row): what the row count in run.json finds
    (cut / "metrics.csv").write_bytes(b"".join(metrics[cut].splitlines(keepends=True)[:2]))
    (not_json / "run.json").write_bytes((not_json / "run.json").read_bytes()[:40])

    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode != 0
    assert "2 run(s) have files that were cut short" in out.stderr, out.stderr[-3000:]
    report = out.stderr[out.stderr.index("2 run(s)"):]
    assert f"{cut.relative_to(work)}/metrics.csv: cut: 1 rows, run.json records 3" in report, \
        report[:2000]
    assert f"{not_json.relative_to(work)}/run.json: not JSON (line " in out.stderr
    assert "Traceback" not in out.stderr

    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _bundle_jobs(_job_counts(out.stderr)) == 2  # the two runs, trained again
    assert {d: (d / "metrics.csv").read_bytes() for d in metrics} == metrics  # bit for bit
    summary = work / plan.paths.summary()
    assert set(pd.read_csv(summary).run_id) == set(plan.runs)

    whole = summary.read_bytes()
    summary.write_bytes(whole[: len(whole) - 10])
    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode != 0
    assert f"summary {plan.paths.summary()}: cut mid-line" in out.stderr, out.stderr[-3000:]
    out = snakemake("--cores", "2", *OWN_CONFIG, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert summary.read_bytes() == whole
    drawn = pd.read_csv(work / plan.paths.figures / "fig.csv")
    assert set(drawn.heterogeneity) == {0, 1}
