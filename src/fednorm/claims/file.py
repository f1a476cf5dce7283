"""A claims file read and checked, both ledgers at once, and the files the ledgers write.

The file's sections: ``estimand``, the value of a run that both ledgers judge where a claim
names no ``at`` (:func:`fednorm.claims.numbers.parse_estimand`; ``window`` in
config/claims.yaml: the mean over the last quarter of the budget), ``recipes`` and
``claims``, the numeric claims (:mod:`fednorm.claims.numbers`), and ``qualitative``, the
claims in words (:mod:`fednorm.claims.words`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fednorm.claims.numbers import Claim, parse_claims, parse_estimand
from fednorm.claims.power import check_tuning_seeds
from fednorm.claims.words import Words, parse_words
from fednorm.claims.words import check_plan as check_words
from fednorm.config import ConfigError, fail
from fednorm.inputs import read_yaml
from fednorm.plan import Plan

EXTENSIONS = ("csv", "md", "pdf", "png")
NAME = "claims"  # the ledger's files: <figures>/claims.<ext>
WORDS_NAME = "claims_words"  # the qualitative claims': <figures>/claims_words.<ext>
PREREG_NAME = "claims_prereg"  # <figures>/claims_prereg.json, beside claims_words.csv
CALIBRATION_NAME = "claims_calibration"  # the words ledger's bootstrap: <figures>/<name>.csv


@dataclass(frozen=True)
class Claims:
    """A claims file, checked: its numeric claims and its claims in words."""

    numbers: tuple[Claim, ...]
    words: Words

    def __bool__(self) -> bool:
        return bool(self.numbers or self.words.claims)


def ledger_files(plan: Plan) -> list[str]:
    """The ledgers' files under the plan's figures folder, the numbers' then the words' (none
    without a claims file)."""
    if not plan.claims:
        return []
    return [plan.paths.figure(name, ext) for name in (NAME, WORDS_NAME) for ext in EXTENSIONS]


def calibration_file(plan: Plan) -> list[str]:
    """The words ledger's calibration (fednorm.claims.calibration), none without a claims
    file."""
    return [plan.paths.figure(CALIBRATION_NAME, "csv")] if plan.claims else []


def prereg_file(plan: Plan) -> list[str]:
    """The words ledger's pre-registration (fednorm.claims.prereg), none without a claims
    file."""
    return [plan.paths.figure(PREREG_NAME, "json")] if plan.claims else []


def load_claims(path: str, plan: Plan | None = None) -> Claims:
    """Read and check a claims file, both kinds of claims; with ``plan``, also against the
    plan (:func:`check_plan`)."""
    if not Path(path).is_file():
        raise fail("config", "claims", path, "the path of an existing claims file (e.g. "
                   "config/claims.yaml) or null")
    where = f"claims file {path}"
    spec = read_yaml(path, "claims file")
    numbers = parse_claims(spec, where=where)  # the sections and the estimand checked first
    claims = Claims(numbers, parse_words(spec.get("qualitative"), parse_estimand(spec, where)))
    if plan is not None:
        check_plan(claims, plan)
    return claims


def check_plan(claims: Claims, plan: Plan) -> None:
    """Checks against the plan, before any job: the ledgers' names are free, and each claim in
    words is one the plan's runs can answer (:func:`fednorm.claims.words.check_plan`), and no
    tuning seed judges a claim (:func:`fednorm.claims.power.check_tuning_seeds`). (A
    numeric claim whose runs are several configurations is not an error: a user may widen a
    grid without touching the claims; the ledger says 'not comparable' and why.)"""
    for name in (NAME, WORDS_NAME):
        if name in plan.figures:
            raise ConfigError(f"figures: key '{name}' names a figure; allowed: another name "
                              f"('{name}' is the claims ledger's)")
    check_words(claims.words, plan)
    check_tuning_seeds(claims.words, plan)
