"""What both ledgers share: the papers a claim cites, the runs a setting selects, and values
written as a config writes them."""

from __future__ import annotations

import math
import numbers
from typing import Any

import pandas as pd

from fednorm import methods
from fednorm.config import FIELDS, RunConfig
from fednorm.results import matches

# The papers whose claims the ledgers judge: each method's own (its record, fednorm.methods),
# and FedFN's (a variant of any normalizer: ``feature_norm``)
PAPERS = {**methods.papers(),
          "fedfn": "FedFN: Kim, Lee, Oh, Yun, FL@FM-NeurIPS 2023, arXiv 2311.13267"}
# Each paper's own method, as a group names it: a contradiction of a claim about it must survive
# twice the budget (fednorm.claims.words_ledger.budget_checked)
OWN_METHODS = {**{name: ("normalizer", name) for name in methods.papers()},
               "fedfn": ("feature_norm", True)}
# Keys that make a run a variant no paper ran: the penultimate feature normalized (FedFN),
# training images held out for validation, the learning rate and the methods' own tuned keys
# swept (the tuning grids). A claim that does not name one matches only runs at its default, so
# that those runs never join the seeds of a paper's setting.
VARIANT_KEYS = ("feature_norm", "val_fraction", *methods.TUNED_KEYS)
_DEFAULT_RUN = RunConfig()

Pairs = tuple[tuple[str, Any], ...]


def selects(frame: pd.DataFrame, setting: Pairs, variants: bool = True) -> pd.Series:
    """The rows of ``frame`` (summary columns) equal to ``setting`` on each of its keys (see
    :func:`fednorm.results.matches`: null matches an empty value, numbers to a relative 1e-12),
    and at their defaults on the VARIANT_KEYS that it does not name wherever some of those rows
    are at the default (unless not ``variants``: a qualitative claim's ``where``, whose groups
    then pick their own variants). Where none is (a grid that holds out validation images in
    every run, as the quick comparison does), the variant is the setting itself and is kept."""
    named = {key for key, _ in setting}
    defaults = tuple((k, getattr(_DEFAULT_RUN, k)) for k in VARIANT_KEYS
                     if variants and k not in named and k in frame.columns)
    mask = pd.Series(True, index=frame.index)
    for key, value in setting:
        mask &= matches(frame[key], value)
    for key, value in defaults:
        at_default = mask & matches(frame[key], value)
        if at_default.any():
            mask = at_default
    return mask


def ambiguity(rows: pd.DataFrame) -> str:
    """'' when the runs a claim matches are the seeds of one configuration; else what tells
    them apart, in words (the claim's setting must name those keys to pick one)."""
    keys = [k for k in FIELDS if k != "seed" and rows[k].nunique(dropna=False) > 1]
    if not keys:
        return ""
    values = sorted(map(str, rows[keys[0]].unique()))
    return (f"ambiguous: the matching runs differ in {keys} (e.g. {keys[0]} {values}); add "
            f"them to the claim's setting")


def config_text(value: Any) -> str:
    """A value as a config writes it: null, true/false, numbers as :g, lists in brackets."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, numbers.Real):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(config_text, value)) + "]"
    return str(value)
