"""The checks of a configuration value, and the one form every config error takes.

A rule is a small frozen object, called with a value: None if the value is allowed, else what
is allowed, in words. Its fields describe the allowed values (tests/test_config_properties.py
generates configurations from them). :func:`fail` is the error of a key's value: where, the
key, the value, what is allowed. Used by the run configuration (fednorm.config), the methods'
own keys (fednorm.methods) and the claims file.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Check = Callable[[Any], "str | None"]


class ConfigError(ValueError):
    """A configuration value is not allowed. The message names the key, the value and the rule."""



def fail(where: str, key: str, value: Any, allowed: str) -> ConfigError:
    """The error of a key's value, in the one form every config message takes (the claims
    file's too): where, the key, the value, what is allowed."""
    return ConfigError(f"{where}: key '{key}' has value {value!r}; allowed: {allowed}")


def check(where: str, key: str, value: Any, rule: Callable[[Any], str | None]) -> Any:
    """``value`` when ``rule`` (one of the checks above: OneOf, NumberIn, Finite, ...) allows
    it, else the :func:`fail` error naming where, the key, the value and what ``rule`` allows."""
    problem = rule(value)
    if problem is not None:
        raise fail(where, key, value, problem)
    return value


# Every integer key is at most this (a signed 32-bit integer): seeds become 32-bit keys
# (fednorm.rng) and counts index tensors; anything larger is a typo, not a run.
INT_MAX = 2**31 - 1


def real_number(v: Any) -> bool:
    """Whether ``v`` is a finite real number that a float holds (not a bool; an integer too
    large for a float, e.g. 10**400, is not: it would overflow where a run uses it)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


@dataclass(frozen=True)
class OneOf:
    """One of a few names."""

    allowed: tuple[str, ...]

    def __call__(self, v: Any) -> str | None:
        return None if isinstance(v, str) and v in self.allowed else f"one of {list(self.allowed)}"


@dataclass(frozen=True)
class IntIn:
    """An integer in [low, high] (not a bool, not a float such as 2.0)."""

    low: int
    high: int = INT_MAX

    def __call__(self, v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and self.low <= v <= self.high
        return None if ok else f"an integer >= {self.low} (at most {self.high})"


@dataclass(frozen=True)
class NumberIn:
    """A finite number in [low, high] (an end left out if open); high may be inf."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __call__(self, v: Any) -> str | None:
        ok = real_number(v) and (self.low < v if self.low_open else self.low <= v)
        ok = ok and (v < self.high if self.high_open else v <= self.high)
        left, right = "([" [not self.low_open], ")]"[not self.high_open]
        return None if ok else f"a number in {left}{self.low}, {self.high}{right}"


@dataclass(frozen=True)
class Nullable:
    """null, or what ``rule`` allows."""

    rule: Callable[[Any], str | None]

    def __call__(self, v: Any) -> str | None:
        problem = None if v is None else self.rule(v)
        return None if problem is None else f"null or {problem}"


@dataclass(frozen=True)
class Finite:
    """Any finite number (at least ``low`` when given)."""

    low: float | None = None

    def __call__(self, v: Any) -> str | None:
        if real_number(v) and (self.low is None or v >= self.low):
            return None
        return "a finite number" + ("" if self.low is None else f" >= {self.low:g}")


@dataclass(frozen=True)
class Boolean:
    def __call__(self, v: Any) -> str | None:
        return None if isinstance(v, bool) else "true or false"


@dataclass(frozen=True)
class ListOf:
    """A list whose items ``item`` allows: at least ``min_len`` of them, strictly increasing
    if ``increasing``."""

    item: Callable[[Any], str | None]
    what: str  # the list in words, e.g. "a non-empty list of positive numbers"
    min_len: int = 0
    increasing: bool = False

    def __call__(self, v: Any) -> str | None:
        ok = isinstance(v, list | tuple) and len(v) >= self.min_len
        ok = ok and all(self.item(x) is None for x in v)
        ok = ok and (not self.increasing or all(a < b for a, b in itertools.pairwise(v)))
        return None if ok else self.what


def int_at_least(low: int) -> IntIn:
    """A check: None if the value is an integer in [low, INT_MAX], else what is allowed."""
    return IntIn(low)


def number_in(low: float, high: float, *, low_open: bool = False) -> NumberIn:
    """A check: None if the value is a finite number in [low, high] ((low, high] if low_open)."""
    return NumberIn(low, high, low_open)
