"""The ledger's pre-registration: what its verdicts were decided by, as hashes a reader can check
(docs/claims.md, Pre-registration).

Two parts, each a sha256: the **claims file** in use (its text, line endings made '\\n', so
that a checkout on any system hashes the same), and the **rule**: the source of the modules
that decide a verdict (RULE_FILES: the tests, the verdicts, the second stage's choice of runs
and the budget check, the rule's parsing, a run's value and its settling), each hashed as the
claims file, then their names and hashes hashed together. The source itself rather than a
declared version number: a number is bumped by hand and drifts silently from the code it
names; a hash of the source changes with any edit to a deciding module (a comment too: such an
edit is then seen, and judged, by whoever compares two ledgers). The run's own settings (the
config's ``stage2`` seeds and share, ``seed_offset``) are not part of it: two ledgers on
disjoint seeds share the same pre-registration (``fednorm across-seeds`` checks that they do).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fednorm.io import write_text

PREREG_NAME = "claims_prereg"  # <figures>/claims_prereg.json, beside claims_words.csv
# the modules of this package that decide a verdict, by file name
# relative to the fednorm package: results.py decides a run's value (the estimand) and settling
RULE_FILES = ("claims/stats.py", "claims/verdicts.py", "claims/stage2.py", "claims/words.py",
              "claims/words_ledger.py", "results.py")
PACKAGE = Path(__file__).resolve().parent.parent


def text_sha256(path: str | Path) -> str:
    """sha256 of a text file's UTF-8 bytes with its line endings made '\\n'."""
    text = Path(path).read_bytes().replace(b"\r\n", b"\n")
    return hashlib.sha256(text).hexdigest()


def rule_sha256(folder: str | Path = PACKAGE, files: tuple[str, ...] = RULE_FILES
                ) -> tuple[str, dict[str, str]]:
    """The rule's hash over ``files`` of ``folder`` (one line 'name sha256' each, in the order
    of ``files``), and each file's hash."""
    each = {name: text_sha256(Path(folder) / name) for name in files}
    joined = "".join(f"{name} {sha}\n" for name, sha in each.items())
    return hashlib.sha256(joined.encode()).hexdigest(), each


def preregistration(claims: str | Path, folder: str | Path = PACKAGE) -> dict[str, Any]:
    """The record written beside claims_words.csv: the claims file and its hash, the rule's
    hash and its files', and ``sha256``, the hash of the two hashes (one string to compare)."""
    rule, each = rule_sha256(folder)
    claims_sha = text_sha256(claims)
    both = hashlib.sha256(f"{claims_sha} {rule}\n".encode()).hexdigest()
    return {"claims_file": str(claims), "claims_sha256": claims_sha, "rule_sha256": rule,
            "rule_files": each, "sha256": both}


def prereg_line(record: dict[str, Any]) -> str:
    """One markdown line for the ledger: the three hashes (their first 12 characters)."""
    return (f"**Pre-registration** (claims_prereg.json): {record['sha256'][:12]}, of the claims "
            f"file `{Path(record['claims_file']).name}` {record['claims_sha256'][:12]} and the "
            f"rule {record['rule_sha256'][:12]} (fednorm: "
            f"{', '.join(n.removesuffix('.py').replace('/', '.') for n in record['rule_files'])}).")


def write_prereg(record: dict[str, Any], path: str | Path) -> Path:
    write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return Path(path)


def read_prereg(path: str | Path) -> dict[str, Any] | None:
    """The record at ``path``; None where there is none (a ledger written before it)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def beside(ledger: str | Path) -> Path:
    """The pre-registration beside a ledger's claims_words.csv."""
    return Path(ledger).with_name(f"{PREREG_NAME}.json")
