"""The numbers README.md and docs/ state about a plan or a run, written from one source.

A page marks each such number's block ``<!-- generated: NAME -->`` … ``<!-- /generated -->``;
:func:`refresh` rewrites every block from its source, and leaves a block whose source is
missing as it is (a clone that has not run the quick profile yet). The blocks (BLOCKS):

- ``quick-plan``, ``cifar10-plan``, ``paper-plan``: runs, jobs, bundles and figures of the
  profile's configs, and the GPU-hours of a GPU plan, as ``fednorm plan`` counts and prices
  them (no PyTorch needed);
- ``quick-verdicts``: the claims ledger's verdict counts per paper and the firm verdicts
  (``<figures>/claims_words.csv``);
- ``quick-findings``: the accuracies the front page quotes, each from its figure's CSV;
- ``quick-runs``: the runs trained and the minutes they took (``<results>/runs/*/run.json``);
- ``quick-replication``: the quick ledger against the same claims on disjoint seeds
  (``<figures>_other_seeds/claims_words.csv``, ``make quick-other-seeds``): the share of claims
  that keep their verdict, and the flips (:mod:`fednorm.claims.across`).

``make docs-numbers`` (``fednorm docs-numbers``) runs it on the quick profile's folders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)"
                   r"(<!-- /generated -->)", re.S)
PAGES = ("README.md", "docs/*.md")  # where blocks are looked for, from the repository root
PROFILES = {  # a profile's name in a block -> the config files its plan merges, in order
    "quick": ("config/config.yaml", "config/quick.yaml"),
    "cifar10": ("config/config.yaml", "config/hour.yaml"),
    "paper": ("config/config.yaml",),
}


@dataclass(frozen=True)
class Sources:
    """Where the run-derived blocks read: the quick profile's figures and results folders."""

    root: Path
    figures: Path
    results: Path


def _n(x: float) -> str:
    return f"{x:,.0f}"


def plan_text(profile: str, root: Path) -> str:
    """One line: the profile's runs, jobs, bundles and figures; on a GPU plan its GPU-hours at
    the committed measured rates (``fednorm plan`` prints the same)."""
    from fednorm.plan import load_plan, merged_config
    from fednorm.plan.prices import plan_price

    configs = PROFILES[profile]
    plan = load_plan(merged_config([root / c for c in configs]))
    text = (f"{_n(len(plan.runs))} training runs in {_n(len(plan.jobs))} jobs "
            f"({_n(len(plan.bundles))} bundles), {len(plan.figures)} figures")
    if plan.execution.device != "cpu":
        price = plan_price(plan)
        hours = f"{price.total:,.0f}" if price.total >= 100 else f"{price.total:.3g}"
        text += f", {hours} GPU-hours on one {price.rates.device}"
    return f"{text} (`fednorm plan {' '.join(configs)}`)\n"


def verdicts_text(src: Sources) -> str | None:
    """The verdict counts per paper (the ledger's own table) and the firm verdicts."""
    from fednorm.claims.render import counts_text
    from fednorm.claims.words import FIRM

    path = src.figures / "claims_words.csv"
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    judged = table[table["verdict"] != "not run"]
    firm = judged["verdict"].isin(FIRM).sum()
    return ("\n".join(counts_text(table)) + "\n\n"
            f"**{firm} firm verdicts of the {len(judged)} judged** "
            f"(`{path.relative_to(src.root)}`)\n")


# The accuracies the front page quotes: (what, figure CSV under <figures>, its rows, column)
FINDINGS = (
    ("naive BN at γ = 0 / 1 (FBN Fig 3a)", "fbn/fig3a.csv",
     [{"normalizer": "bn", "heterogeneity": 0}, {"normalizer": "bn", "heterogeneity": 1}]),
    ("FBN at γ = 0 / 1", "fbn/fig3a.csv",
     [{"normalizer": "fbn", "heterogeneity": 0}, {"normalizer": "fbn", "heterogeneity": 1}]),
    ("centralized BN at γ = 0 / 1", "fbn/fig3a.csv",
     [{"normalizer": "central", "heterogeneity": 0},
      {"normalizer": "central", "heterogeneity": 1}]),
    ("GN on Shards(2), E = 1 / 5 / 25 (FixBN Fig 2a)", "fixbn/fig2a.csv",
     [{"panel": "gn", "split": "Shards(2)", "local_steps": e} for e in (1, 5, 25)]),
)


def _percent(frame: pd.DataFrame, name: str) -> pd.Series:
    """The CSV's means in %: a final_vs CSV keeps fractions, heatmaps and tables write %."""
    mean = frame["mean"].astype(float)
    return mean * 100.0 if name.startswith("fbn/fig3") else mean


def _value(frame: pd.DataFrame, where: dict) -> float | None:
    """The one row's value whose columns equal ``where`` (numbers compared as numbers)."""
    mask = pd.Series(True, index=frame.index)
    for key, value in where.items():
        if key not in frame.columns:
            return None
        column = frame[key]
        mask &= (column.astype(str) == value if isinstance(value, str)
                 else pd.to_numeric(column, errors="coerce") == value)
    hit = frame.loc[mask, "value"]
    return float(hit.iloc[0]) if len(hit) == 1 else None


def findings_text(src: Sources) -> str | None:
    """A table: each quoted accuracy (mean over seeds, %) and the CSV it comes from."""
    lines = ["| what | final test accuracy (%) | from |", "|---|---:|---|"]
    for what, name, cells in FINDINGS:
        path = src.figures / name
        if not path.is_file():
            return None
        frame = pd.read_csv(path)
        frame = frame.assign(value=_percent(frame, name))
        values = [_value(frame, cell) for cell in cells]
        shown = " / ".join("–" if v is None else f"{v:.1f}" for v in values)
        lines.append(f"| {what} | {shown} | `{path.relative_to(src.root)}` |")
    return "\n".join(lines) + "\n"


def runs_text(src: Sources) -> str | None:
    """The runs trained (their run.json files) and their summed wall time in minutes."""
    records = sorted((src.results / "runs").glob("*/run.json"))
    if not records:
        return None
    seconds = sum(float(json.loads(p.read_text()).get("wall_time_s") or 0.0) for p in records)
    return (f"{_n(len(records))} runs trained, {seconds / 60:,.0f} run-minutes "
            f"(`{src.results.relative_to(src.root)}/runs/*/run.json`)\n")


def replication_text(src: Sources) -> str | None:
    """One line: the claims judged in both ledgers, the share that keep their verdict, the
    moves and the flips, and each flip or move by claim id."""
    from fednorm.claims.across import compare_files, summary

    first = src.figures / "claims_words.csv"
    other = src.figures.with_name(src.figures.name + "_other_seeds") / "claims_words.csv"
    if not (first.is_file() and other.is_file()):
        return None
    table = compare_files(first, other)
    changed = table[table.change.isin(["moved", "flipped"])]
    moves = "; ".join(f"{r.id}: {r.a} → {r.b}" for r in changed.itertuples(index=False))
    return (f"{summary(table)} (`fednorm across-seeds {first.relative_to(src.root)} "
            f"{other.relative_to(src.root)}`)" + (f". Changed: {moves}" if moves else "")
            + "\n")


BLOCKS: dict[str, Callable[[Sources], str | None]] = {
    **{f"{p}-plan": (lambda src, p=p: plan_text(p, src.root)) for p in PROFILES},
    "quick-verdicts": verdicts_text,
    "quick-findings": findings_text,
    "quick-runs": runs_text,
    "quick-replication": replication_text,
}


def pages(root: Path, patterns: Sequence[str] = PAGES) -> list[Path]:
    return sorted(p for pattern in patterns for p in root.glob(pattern))


def rewrite(text: str, src: Sources, cache: dict[str, str | None]) -> str:
    """``text`` with every block rewritten from its source (a block whose source is missing
    kept as it is); ValueError naming a block that BLOCKS does not know."""
    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise ValueError(f"generated block '{name}' is unknown; known: {sorted(BLOCKS)}")
        if name not in cache:
            cache[name] = BLOCKS[name](src)
        new = cache[name]
        return match[0] if new is None else f"{match[1]}{new}{match[4]}"

    return BLOCK.sub(body, text)


def refresh(src: Sources, files: Iterable[Path] | None = None) -> list[Path]:
    """Rewrite the blocks of README.md and docs/*.md (or ``files``); returns the files that
    changed."""
    cache: dict[str, str | None] = {}
    changed = []
    for path in files if files is not None else pages(src.root):
        text = path.read_text()
        new = rewrite(text, src, cache)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed
