"""The house's shape, kept: no source file over 500 lines; the engine (fednorm.fl) names no
method in its code, nor a method's parts or flags (a method enters through its hooks,
fednorm.norms.hooks, and its parts through fednorm.fl.parts). Where a method is named:
tests/test_methods.py."""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from pathlib import Path

import pytest

from fednorm import methods
from fednorm.norms.parts import PARTS

SRC = Path(__file__).resolve().parents[1] / "src" / "fednorm"
LONGEST = 500


def code_tokens(path: Path) -> list[str]:
    """The names and string literals of a module's code: no comment, no docstring (a string
    that stands as a statement of its own)."""
    out, statement_start = [], True
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL):
            continue
        if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and not statement_start):
            out.append(tok.string)
        statement_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    return out


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def test_no_source_file_is_over_500_lines():
    long = {str(p.relative_to(SRC)): n for p in sources()
            if (n := len(p.read_text().splitlines())) > LONGEST}
    assert long == {}


# the methods' names, and the words that stand for them in code (a rule's or a layer's name);
# "central" and "none" are ordinary words too, and so not searched for
NAMES = sorted({m.name for m in methods.METHODS} - {"central", "none", "in", "ln", "gn",
                                                             "bn"}
               | {"hybrid", "fedfn", "heterofl", "fedtan", "fedwon"})


@pytest.mark.parametrize("path", sorted((SRC / "fl").glob("*.py")), ids=lambda p: p.name)
def test_the_engine_names_no_method_in_its_code(path):
    pattern = re.compile("|".join(re.escape(n) for n in NAMES), re.IGNORECASE)
    named = sorted({t for t in code_tokens(path) if pattern.search(t)})
    assert named == [], f"{path.name}: {named}"


# the parts a client keeps, as the methods name them (fednorm.norms.parts; "stats" is also the
# name of the state's own field, BundleState.stats), and the record's and normalizer's flags
# the engine once read: the engine asks fednorm.fl.parts.ClientParts and the hooks instead
PART_WORDS = {f'"{p}"' for p in PARTS} - {'"stats"'} | {"affine", "mixing", "personal",
                                                         "clips"}
FLAG_WORDS = {"union_every_step", "clientwise", "Clientwise", "kept"}
NORMALIZER_FIELDS = {"local", "kept", "clientwise", "personal", "round_start", "clips"}


@pytest.mark.parametrize("path", sorted((SRC / "fl").glob("*.py")), ids=lambda p: p.name)
def test_the_engine_names_no_method_s_parts_or_flags_in_its_code(path):
    tokens = code_tokens(path)
    named = sorted({t for t in tokens if t in PART_WORDS | FLAG_WORDS})
    # a flag read off the normalizer or its record: ``normalizer.local``, ``method.clips``
    read = sorted({f"{a}.{b}" for a, b in itertools.pairwise(tokens)
                   if a in ("normalizer", "record", "method") and b in NORMALIZER_FIELDS})
    assert named == [] and read == [], f"{path.name}: {named} {read}"
