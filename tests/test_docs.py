"""README.md and docs/ as a manual whose numbers cannot go stale: each block the pages mark
generated is what `fednorm docs-numbers` writes now (so it agrees with `fednorm plan`); no run
count, job count or price stands outside such a block; no cross-reference is dead; README is
short and so are its sentences; docs/ fits its budget of lines."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from fednorm.docs_numbers import BLOCK, BLOCKS, Sources, pages, plan_text, rewrite, verdicts_text
from tests.dag import ROOT

PAGES = pages(ROOT)
# a run count with its jobs or bundles, or a price in GPU-hours: what `fednorm plan` states
PLAN_NUMBER = re.compile(r"\b\d[\d,]* (?:training |distinct )?runs in \d[\d,]* (?:jobs|bundles)"
                         r"|\b\d[\d,.]* (?:H100|H200|GPU)-hours?\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _outside_blocks(text: str) -> str:
    return BLOCK.sub("", text)


def test_every_generated_plan_block_is_what_fednorm_plan_counts_now():
    src = Sources(ROOT, ROOT / "no-figures", ROOT / "no-results")  # the plan blocks alone
    blocks = [(page, m["name"]) for page in PAGES for m in BLOCK.finditer(page.read_text())]
    assert {"quick-plan", "cifar10-plan", "paper-plan"} <= {name for _, name in blocks}
    assert {name for _, name in blocks} <= set(BLOCKS)
    stale = [page.name for page in PAGES if rewrite(page.read_text(), src, {}) !=
             page.read_text()]
    assert stale == []


def test_no_plan_number_stands_outside_a_generated_block():
    found = {page.relative_to(ROOT).as_posix(): PLAN_NUMBER.findall(" ".join(
        _outside_blocks(page.read_text()).split())) for page in PAGES}
    assert {page: hits for page, hits in found.items() if hits} == {}


def test_a_block_is_rewritten_from_its_source_and_kept_without_one(tmp_path):
    page = tmp_path / "README.md"
    text = "a\n<!-- generated: quick-verdicts -->\nold\n<!-- /generated -->\nb\n"
    page.write_text(text)
    src = Sources(tmp_path, tmp_path / "figures", tmp_path / "results")
    assert rewrite(text, src, {}) == text  # no ledger yet: the block as it was
    (tmp_path / "figures").mkdir()
    pd.DataFrame({"paper": ["fbn", "fbn", "fixbn", "fixbn"],
                  "verdict": ["holds", "inconclusive", "contradicted", "not run"]}).to_csv(
        tmp_path / "figures/claims_words.csv", index=False)
    new = rewrite(text, src, {})
    assert new.startswith("a\n<!-- generated: quick-verdicts -->\n| paper |")
    assert "**2 firm verdicts of the 3 judged**" in new and new.endswith("<!-- /generated -->\nb\n")
    assert "| **all** | 4 | 1 | 1 |" in verdicts_text(src)
    with pytest.raises(ValueError, match="generated block 'nonsense' is unknown"):
        rewrite("<!-- generated: nonsense -->\n<!-- /generated -->", src, {})


def test_the_plan_line_counts_the_quick_profile_as_fednorm_plan_prints_it(capsys):
    from fednorm.cli import main

    assert main(["plan", "config/config.yaml", "config/quick.yaml"]) == 0
    printed = re.search(r"([\d,]+) distinct training runs in ([\d,]+) jobs",
                        capsys.readouterr().out)
    stated = re.match(r"([\d,]+) training runs in ([\d,]+) jobs", plan_text("quick", ROOT))
    assert [int(n.replace(",", "")) for n in stated.groups()] == [int(n) for n in printed.groups()]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_no_cross_reference_is_dead():
    dead = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            if not goal.exists() or (anchor and goal.suffix == ".md"
                                     and anchor not in _anchors(goal)):
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert dead == []


def _sentences(text: str) -> list[str]:
    """The prose of a Markdown page: code blocks, tables, headings and comments left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", _outside_blocks(text), flags=re.S)
    prose = " ".join(line for line in text.splitlines()
                     if not line.lstrip().startswith(("|", "#")))
    prose = re.sub(r"`[^`]*`", "code", prose)
    return [s for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z*\[(!])", prose) if s.strip()]


def test_the_readme_is_a_short_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    long = [s for s in _sentences(text) if len(s.split()) > 40]
    assert long == []
    figure = re.search(r"!\[[^\]]*\]\((docs/img/[^)]+\.png)\)", text)
    assert figure and (ROOT / figure[1]).is_file()


def test_docs_fit_their_budget_of_lines():
    lines = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "docs").glob("*.md")}
    assert sum(lines.values()) <= 2000, lines
    assert lines["speed.md"] <= 250


def test_the_findings_are_read_from_the_figures_csvs_in_percent(tmp_path):
    """fig3a's CSV (final_data: fractions) and fig2a's (heatmap_data: %), written by the
    plotting functions themselves from a built frame, quoted in % to one decimal."""
    from fednorm.docs_numbers import findings_text
    from fednorm.plots.final import final_data
    from fednorm.plots.heatmap import heatmap_data

    fbn = pd.DataFrame([{"run_id": f"{n}{g}{s}", "normalizer": n, "heterogeneity": g,
                         "seed": s, "step": 10, "status": "ok",
                         "test_accuracy": {"bn": 0.8, "fbn": 0.85, "central": 0.9}[n] + g / 10
                         + (0.01 if s else -0.01)}
                        for n in ("bn", "fbn", "central") for g in (0, 1) for s in (0, 1)])
    fixbn = pd.DataFrame([{"run_id": f"{n}{e}{s}", "normalizer": n, "split": "Shards(2)",
                           "local_steps": e, "seed": s, "step": 10, "status": "ok",
                           "test_accuracy": 0.5 + e / 100} for n in ("bn", "gn")
                          for e in (1, 5, 25) for s in (0, 1)])
    (tmp_path / "figures/fbn").mkdir(parents=True)
    (tmp_path / "figures/fixbn").mkdir()
    final_data(fbn, x="heterogeneity").to_csv(tmp_path / "figures/fbn/fig3a.csv", index=False)
    heatmap_data(fixbn, rows="split", cols="local_steps", compare="normalizer",
                 values=("bn", "gn")).to_csv(tmp_path / "figures/fixbn/fig2a.csv", index=False)
    text = findings_text(Sources(tmp_path, tmp_path / "figures", tmp_path / "results"))
    assert "| naive BN at γ = 0 / 1 (FBN Fig 3a) | 80.0 / 90.0 | `figures/fbn/fig3a.csv` |" \
        in text  # the mean over seeds 0.79 and 0.81
    assert "| centralized BN at γ = 0 / 1 | 90.0 / 100.0 |" in text
    assert "| GN on Shards(2), E = 1 / 5 / 25 (FixBN Fig 2a) | 51.0 / 55.0 / 75.0 |" in text
