"""One look (label, colour, marker, dash) per normalizer, shared by every figure.

Known normalizers have fixed looks, so a method is drawn the same way in every figure. Any other
hue value gets its name as label and a colour/marker from a fallback cycle, chosen by the value's
rank among the unknown values of the same figure (``among``): deterministic, and distinct within
a figure.

A figure's lines are keyed by one column (``hue``, e.g. the normalizer) or by two
(e.g. ``[scenario, normalizer]``): then the first column gives the colour and the second the
line style and marker, so "FBN, SF, median" and "Naive BN, SF, median" share a colour and differ
in dash (see :func:`lines`).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from fednorm import methods
from fednorm.methods import Look

# Every method's look from its record (fednorm.methods), then FedFN's variants
KNOWN: dict[str, Look] = {**{m.name: m.look for m in methods.METHODS}, **methods.VARIANT_LOOKS}
# How each domain of a feature-shift dataset (fednorm.metrics.DOMAINS) is named on a figure
DOMAIN_LABELS = {"mnist": "MNIST", "inverted": "inverted", "colour": "colour", "noise": "noise",
                 "blur": "blur", "texture": "texture", "svhn": "SVHN", "usps": "USPS",
                 "synthdigits": "SynthDigits", "mnistm": "MNIST-M"}
FALLBACK_COLOURS = ("#ff7f0e", "#bcbd22", "#7f7f7f", "#a6761d", "#1b9e77", "#e7298a")
FALLBACK_MARKERS = ("P", "X", "*", "h", "<", ">")
FALLBACK_DASHES = ("-", "--", "-.", ":", (0, (3, 1, 1, 1, 1, 1)), (0, (5, 2)))


def _sort_key(name: object) -> tuple[bool, float, str]:
    """Numbers first in numeric order, then everything else by its text; among Byzantine
    scenarios (fednorm.config.RunConfig.scenario), 'no attack' first, then the undefended."""
    if isinstance(name, numbers.Real):
        return (False, float(name), "")
    text = str(name)
    return (True, 0.0 if text == "no attack" else 1.0 if "no defense" in text else 2.0, text)


def order(names: Iterable[object]) -> list[object]:
    """The distinct ``names``: known normalizers in canonical order, then the others sorted."""
    unique = set(names)
    known = [n for key in KNOWN for n in unique if str(n) == key]
    unknown = sorted((n for n in unique if str(n) not in KNOWN), key=_sort_key)
    return known + unknown


def _fallback_index(name: object, among: Iterable[object]) -> int:
    """Rank of ``name`` among the unknown names of ``among`` (plus ``name`` itself)."""
    unknown = order(n for n in [*among, name] if str(n) not in KNOWN)
    return unknown.index(name)


def label(name: object) -> str:
    """Legend label of a normalizer (the name itself when unknown)."""
    look = KNOWN.get(str(name))
    return look.label if look else str(name)


def colour(name: object, among: Iterable[object] = ()) -> str:
    """Colour of a normalizer; unknown names cycle through FALLBACK_COLOURS by sorted rank."""
    look = KNOWN.get(str(name))
    if look:
        return look.colour
    return FALLBACK_COLOURS[_fallback_index(name, among) % len(FALLBACK_COLOURS)]


def marker(name: object, among: Iterable[object] = ()) -> str:
    """Marker of a normalizer; unknown names cycle through FALLBACK_MARKERS by sorted rank."""
    look = KNOWN.get(str(name))
    if look:
        return look.marker
    return FALLBACK_MARKERS[_fallback_index(name, among) % len(FALLBACK_MARKERS)]


def dash(name: object, among: Iterable[object] = ()) -> str | tuple:
    """Line style of a normalizer; unknown names cycle through FALLBACK_DASHES by sorted rank."""
    look = KNOWN.get(str(name))
    if look:
        return look.dash
    return FALLBACK_DASHES[_fallback_index(name, among) % len(FALLBACK_DASHES)]


@dataclass(frozen=True)
class Line:
    """One drawn line: the hue values it stands for and how it looks."""

    values: tuple[object, ...]  # one value per hue column
    label: str
    colour: str
    marker: str
    dash: str | tuple

    def rows(self, frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
        """Boolean mask of the rows of ``frame`` that belong to this line."""
        mask = pd.Series(True, index=frame.index)
        for key, value in zip(keys, self.values, strict=True):
            mask &= frame[key] == value
        return mask


def lines(frame: pd.DataFrame, keys: Sequence[str]) -> list[Line]:
    """The lines of a figure whose hue columns are ``keys`` (one or two), in legend order.

    One key: each value its own look (label, colour, marker), solid. Two keys: colour from the
    first column's value, dash and marker from the second's; label "<second> – <first>"; ordered
    by the second column, then the first. Only the combinations present in ``frame`` are lines.
    """
    if len(keys) not in (1, 2):
        raise ValueError(f"hue must be one or two columns, got {list(keys)}")
    first = order(frame[keys[0]])
    if len(keys) == 1:
        return [Line((v,), label(v), colour(v, first), marker(v, first), "-") for v in first]
    second = order(frame[keys[1]])
    present = set(frame[list(keys)].itertuples(index=False, name=None))
    return [
        Line((c, s), f"{label(s)} – {label(c)}", colour(c, first), marker(s, second),
             dash(s, second))
        for s in second for c in first if (c, s) in present
    ]
