"""The claims ledgers: each number a paper states beside ours, with a verdict, and each claim it
makes in words judged on our runs with the seed noise.

The rooms, each importing only those listed before it: ``stats`` (the tests, from scipy.stats),
``rule`` (the verdict rule, once, over arrays), ``common`` (the papers, the runs a setting selects,
values as a config writes them), ``numbers`` (the numeric ledger: the ``recipes`` and ``claims`` of
a claims file), ``words`` (its ``qualitative`` claims, read and checked), ``comparisons`` (their
units: sides, margins, tuned values), ``verdicts`` (the units' verdicts), ``power`` (each claim's
power, stated before the runs), ``words_ledger`` (the words ledger, judged once at α),
``calibration`` (a parametric bootstrap of the whole ledger), ``stage2`` (the second stage: the
tuned methods' fresh seeds), ``extension`` (the tuning grids extended beyond an edge),
``render`` (the ledger's files, after judging), ``prereg`` (the ledger's pre-registration),
then ``file`` (:func:`load_claims`: a claims file read and checked, both ledgers at once, and
the files they write). The numeric ledger's
names and the file's are importable from ``fednorm.claims``.
"""

from __future__ import annotations

from fednorm.claims.common import PAPERS, VARIANT_KEYS, Pairs, ambiguity, config_text, selects
from fednorm.claims.file import (
    CALIBRATION_NAME,
    EXTENSIONS,
    NAME,
    PREREG_NAME,
    WORDS_NAME,
    Claims,
    calibration_file,
    check_plan,
    ledger_files,
    load_claims,
    prereg_file,
)
from fednorm.claims.numbers import (
    DIFFERS,
    LEDGER_COLUMNS,
    NOT_COMPARABLE,
    NOT_RUN,
    PAPER_MARKERS,
    REPRODUCED,
    SCALE_KEYS,
    SECTIONS,
    TOLERANCE,
    VERDICT_COLOURS,
    VERDICTS,
    Claim,
    ledger,
    ledger_figure,
    ledger_row,
    markdown,
    parse_claim,
    parse_claims,
    setting_text,
    verdict,
    write_ledger,
)

__all__ = [
    "CALIBRATION_NAME",
    "DIFFERS",
    "EXTENSIONS",
    "LEDGER_COLUMNS",
    "NAME",
    "NOT_COMPARABLE",
    "NOT_RUN",
    "PAPERS",
    "PAPER_MARKERS",
    "PREREG_NAME",
    "REPRODUCED",
    "SCALE_KEYS",
    "SECTIONS",
    "TOLERANCE",
    "VARIANT_KEYS",
    "VERDICTS",
    "VERDICT_COLOURS",
    "WORDS_NAME",
    "Claim",
    "Claims",
    "Pairs",
    "ambiguity",
    "calibration_file",
    "check_plan",
    "config_text",
    "ledger",
    "ledger_figure",
    "ledger_files",
    "ledger_row",
    "load_claims",
    "markdown",
    "parse_claim",
    "parse_claims",
    "prereg_file",
    "selects",
    "setting_text",
    "verdict",
    "write_ledger",
]
