"""The report's files, categories and captions, from the configuration alone."""

import re
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_parts
from jinja2 import Environment

from fednorm.claims import load_claims
from fednorm.plan import TABLE_KINDS, TOY_FIGURES, load_plan, merge
from fednorm.report import MNIST5K, NOT_IN_PAPERS, SYNTHETIC, captions, entries

ROOT = Path(__file__).resolve().parents[1]
PROFILES = {"paper": ("config/config.yaml",), "quick": ("config/config.yaml", "config/quick.yaml"),
            "test": ("config/config.yaml", ".test/config.yaml")}
# The figures of config/config.yaml that no paper has (README, The figures)
OURS = {"fbn/norm_error_curves", "fbn/norm_error_vs_heterogeneity", "fbn/byzantine_norm_error",
        "compare/heatmap", "compare/table", "compare/norm_error", "compare/tuning",
        "compare/small_batch", "compare/feature_shift", "compare/feature_shift_domains",
        "compare/improvement", "compare/performance_profile",
        "compare/improvement_feature_shift", "compare/performance_profile_feature_shift"}


def _plan(profile):
    config = {}
    for name in PROFILES[profile]:
        config = merge(config, yaml.safe_load((ROOT / name).read_text()))
    plan = load_plan(config)
    return plan, load_claims(str(ROOT / plan.claims), plan)


@pytest.fixture(scope="module", params=list(PROFILES))
def profile(request):
    plan, claims = _plan(request.param)
    return request.param, plan, claims, entries(plan, claims), captions(plan, claims)


def test_every_figure_table_toy_figure_and_the_ledger_has_one_entry(profile):
    _, plan, _, shown, texts = profile
    kinds = {name: fig.kind for name, fig in plan.figures.items()}
    expected = [plan.paths.figure(n, "md" if k in TABLE_KINDS else "png")
                for n, k in kinds.items()]
    expected += [plan.paths.figure(f"fbn/{n}", "png") for n in TOY_FIGURES]
    expected += [plan.paths.figure(name, ext) for name in ("claims", "claims_words")
                 for ext in ("png", "md")]
    assert [e.file for e in shown] == expected
    assert list(texts) == [e.caption for e in shown]  # one caption file each, in order
    assert all(e.caption.startswith(f"{plan.paths.results}/report/") for e in shown)
    categories = {e.file.removeprefix(plan.paths.figures + "/").split("/")[0]: e.category
                  for e in shown}
    assert categories == {"fbn": "FBN", "fixbn": "FixBN", "fedtan": "FedTAN",
                          "compare": "All methods", "claims.png": "Claims ledger",
                          "claims.md": "Claims ledger", "claims_words.png": "Claims ledger",
                          "claims_words.md": "Claims ledger"}
    labels = [tuple(e.labels.values()) for e in shown]
    assert len(set(labels)) == len(labels)  # the report's rows are told apart by their labels


def test_each_caption_names_its_figure_and_what_it_reproduces(profile):
    name, plan, _, shown, texts = profile
    for entry in shown[:len(plan.figures)]:
        fig = plan.figures[entry.labels["figure"]]
        text = texts[entry.caption]
        assert f"(``{fig.name}``)" in text
        assert f":Reproduces: {fig.paper or NOT_IN_PAPERS}\n" in text
        datasets = {r.dataset for r in plan.figure_runs(fig)}
        assert datasets <= {"test": {"synthetic", "tinyimagenet", "imagenet", "digits5"},
                            "quick": {"mnist5k"}}.get(
            name, {"cifar10", "tinyimagenet", "imagenet", "digits5"}), fig.name
        assert (SYNTHETIC in text) == ("synthetic" in datasets), fig.name
        assert (MNIST5K in text) == (name == "quick"), fig.name
        assert ("at a reduced scale" in text) == (name != "paper"), fig.name
        assert (".. include::" in text) == (fig.kind in TABLE_KINDS)
    assert {n for n, fig in plan.figures.items() if fig.paper is None} == OURS
    assert all(re.fullmatch(r"(FBN|FixBN|FedTAN)('s)? .+", fig.paper)
               for n, fig in plan.figures.items() if n not in OURS)


def test_a_caption_states_the_grid_behind_its_figure():
    plan, claims = _plan("paper")
    texts = captions(plan, claims)
    caption = {e.labels["figure"]: texts[e.caption] for e in entries(plan, claims)}
    assert (":Runs: 84 of experiment ``fbn_gamma``: a grid of ``normalizer`` (central, bn, fbn, "
            "fixbn) × ``heterogeneity`` (0, 0.01, 0.05, 0.1, 0.3, 0.5, 1) × ``seed`` (0, 1, 2)\n"
            ) in caption["fbn/fig3a"]
    assert (":Runs: 12 of experiment ``fbn_gamma`` with ``heterogeneity`` = 0.01: a grid of "
            "``normalizer`` (central, bn, fbn, fixbn) × ``seed`` (0, 1, 2)\n"
            ) in caption["fbn/fig3b"]
    # Fig 4 as the paper lays it out: its CIFAR-10 and Tiny-ImageNet parts
    assert (":Runs: 90 of experiments ``fixbn_partitions``, ``fixbn_tiny_partitions``: varying "
            "``dataset`` (cifar10, tinyimagenet), ``image_size`` (32, 64)") in caption["fixbn/fig4"]
    assert (":Scale: CIFAR-10 and Tiny-ImageNet, at the scale the configuration sets"
            in caption["fixbn/fig4"])
    # not a full grid: at E = 2500 the 128 epochs round to 26 rounds, 65,000 steps
    assert (":Runs: 150 of experiment ``fixbn_epochs``: varying ``normalizer`` (bn, gn), "
            "``split`` (IID, Dir(0.6), Dir(0.3), Dir(0.1), Shards(2)), ``local_steps`` (1, 20, "
            "100, 500, 2500), ``steps`` (64000, 65000), ``seed`` (0, 1, 2)\n"
            ) in caption["fixbn/fig2a"]
    assert ":Shared: ``dataset`` = cifar10, ``model`` = fbn_cnn" in caption["fbn/fig3a"]
    assert "CIFAR-10, at the scale the configuration sets" in caption["fbn/fig3a"]
    numbers = len(claims.numbers)
    assert f"{numbers} of the {numbers} claims select runs" in caption["claims (plot)"]
    words = caption["claims_words (plot)"]
    assert f"({len(claims.words.claims)} qualitative claims of ``config/claims.yaml``: FBN" in words
    assert "CIFAR-10" in words
    assert "at the paper's scale" in caption["fbn/fig1a"]
    quick, quick_claims = _plan("quick")
    texts = captions(quick, quick_claims)
    shown = {e.labels["figure"]: texts[e.caption] for e in entries(quick, quick_claims)}
    ledger = shown["claims (tables)"]
    numbers = len(quick_claims.numbers)
    assert f"0 of the {numbers} claims select runs" in ledger and MNIST5K in ledger
    assert MNIST5K in shown["claims_words (tables)"]
    tiny, tiny_claims = _plan("test")
    toy = next(e for e in entries(tiny, tiny_claims) if e.labels["figure"] == "fbn/fig2c")
    assert ("at a reduced scale: ``rounds`` = 20 (the paper's: 100)"
            in captions(tiny, tiny_claims)[toy.caption])


def _render(caption):
    """As Snakemake renders a caption: Jinja with its settings, then docutils to HTML (here
    halting on any warning)."""
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(caption).render()
    return publish_parts(text, writer="html",
                         settings_overrides={"halt_level": 2, "report_level": 5})["body"]


def test_a_title_is_shown_as_written():
    title = "the *best* run_ of `E` | {{ x }} {% if %}"
    plan = load_plan({"run": {"steps": 10, "eval_every": 5},
                      "experiments": {"e": {"grid": {"normalizer": ["bn", "fbn"]}}},
                      "figures": {"f": {"experiment": "e", "kind": "curves", "title": title,
                                        "paper": "FBN Fig *3*"}}})
    (caption,) = captions(plan).values()
    html = _render(caption)
    assert f"<strong>{title}</strong>" in html and ">FBN Fig *3*<" in html
    assert "<em>" not in html


def test_captions_render_as_snakemake_renders_them_without_a_warning(profile, tmp_path,
                                                                     monkeypatch):
    """Jinja (Snakemake's settings), then docutils, halting on any warning (an unescaped '*' in
    a title would be one); a table's caption shows its .md, read from the working directory."""
    *_, shown, texts = profile
    monkeypatch.chdir(tmp_path)
    for entry in shown:
        if entry.file.endswith(".md"):
            Path(entry.file).parent.mkdir(parents=True, exist_ok=True)
            Path(entry.file).write_text(f"| the table {entry.labels['figure']} |\n")
    html = {e.labels["figure"]: _render(texts[e.caption]) for e in shown}
    assert "reset, local (*) and global (†) momentum</strong>" in html["fixbn/fig5"]
    assert "| the table fixbn/table4 |" in html["fixbn/table4"]
    assert "the table" not in html["claims (tables)"]  # the ledger's .md is long: not inlined


def test_a_figure_note_is_in_its_caption_on_one_line():
    plan, claims = _plan("quick")
    fig = plan.figures["compare/table"]
    assert fig.note.startswith("FBN under this common recipe") and "\n" not in fig.note
    texts = captions(plan, claims)
    caption = next(texts[e.caption] for e in entries(plan, claims)
                   if e.labels["figure"] == "compare/table")
    assert ":Note: FBN under this common recipe" in caption
    assert all(":Note:" not in texts[e.caption] for e in entries(plan, claims)
               if e.labels["figure"] in ("fbn/fig3a", "fixbn/fig2a"))



def test_the_words_ledgers_caption_states_the_rule_it_was_judged_by():
    """α and the seeds a firm verdict needs come from the claims file: the caption says the
    values the ledger used."""
    from dataclasses import replace

    from fednorm.report import words_caption

    plan, claims = _plan("quick")
    rule = claims.words.rule
    text = words_caption(plan, claims.words, "md")
    assert (f"each verdict a one-sided test at α = {rule.alpha:g} (docs/claims.md), no firm "
            f"verdict from fewer than {rule.min_seeds} seeds") in text
    other = replace(claims.words, rule=replace(rule, alpha=0.1, min_seeds=3))
    text = words_caption(plan, other, "png")
    assert "test at α = 0.1" in text and "fewer than 3 seeds" in text
