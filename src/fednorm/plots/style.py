"""One look (label, colour, marker) per normalizer, shared by every figure.

Known normalizers have fixed looks, so a method is drawn the same way in every figure. Any other
hue value gets its name as label and a colour/marker from a fallback cycle, chosen by the value's
rank among the unknown values of the same figure (``among``): deterministic, and distinct within
a figure.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Look:
    """How one normalizer is drawn."""

    label: str
    colour: str
    marker: str


KNOWN: dict[str, Look] = {
    "central": Look("Centralized BN", "#222222", "s"),
    "bn": Look("Naive BN", "#d62728", "v"),
    "fixbn": Look("FixBN", "#2ca02c", "^"),
    "fbn": Look("FBN", "#1f77b4", "o"),
    "gn": Look("GroupNorm", "#9467bd", "D"),
}
FALLBACK_COLOURS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FALLBACK_MARKERS = ("P", "X", "*", "h", "<", ">")


def _sort_key(name: object) -> tuple[bool, float, str]:
    """Numbers first in numeric order, then everything else by its text."""
    if isinstance(name, numbers.Real):
        return (False, float(name), "")
    return (True, 0.0, str(name))


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
