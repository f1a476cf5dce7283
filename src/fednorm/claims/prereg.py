"""The ledger's pre-registration: what its verdicts are decided by, fixed and committed before
the runs, and checked by the ledger (docs/claims.md, Pre-registration).

Three parts, each a sha256: the **claims file** (its text, line endings made '\\n', so that a
checkout on any system hashes the same); the **rule**, the source of every module that decides
a verdict (RULE_FILES), each hashed as the claims file, then their names and hashes hashed
together; and the **design** (:func:`design`), what a profile fixes before the runs: how many
seeds each judged or tuning experiment has, the second stage's seeds, and the data
files the rule reads. The source rather than a declared version number: a number is bumped by
hand and drifts from the code it names; a hash changes with any edit (a comment too: such an
edit is then seen, and judged, by whoever reads the diff). Seeds are counted, not listed: two
ledgers on disjoint seeds (``seed_offset``) share one design (``fednorm across-seeds``).

The committed record (config/claims_prereg.json, the config's ``claims_prereg``) holds the
three for every profile (PROFILES) and the date they were fixed: ``fednorm prereg --write``
writes it, ``fednorm prereg`` checks it against the tree, and the ledger fails where the code,
the claims file or its plan's design differ from it (:func:`verified`): a new rule is a commit
before the runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fednorm.claims.file import PREREG_NAME, Claims, load_claims
from fednorm.claims.power import planned_seeds
from fednorm.config import ConfigError
from fednorm.io import write_text
from fednorm.plan import Plan, load_plan, merged_config

# every module of this package that decides a verdict, relative to the fednorm package:
# results.py decides a run's value (the estimand) and settling, tuning.py a method's values
RULE_FILES = ("claims/common.py", "claims/rule.py", "claims/stats.py", "claims/verdicts.py",
              "claims/comparisons.py", "claims/words.py", "claims/words_ledger.py",
              "claims/stage2.py", "claims/calibration.py", "claims/power.py", "results.py",
              "tuning.py")
# the data files a verdict reads (relative to the repository's root), hashed with the design
DATA_FILES: tuple[str, ...] = ("config/claims_noise.csv",)
# the profiles whose designs the committed record fixes: their config files, merged in order
PROFILES = {"paper": ("config/config.yaml",),
            "hour": ("config/config.yaml", "config/hour.yaml"),
            "quick": ("config/config.yaml", "config/quick.yaml"),
            "gpu_quick": ("config/config.yaml", "config/quick.yaml", "config/gpu_quick.yaml")}
PACKAGE = Path(__file__).resolve().parent.parent


def text_sha256(path: str | Path) -> str:
    """sha256 of a text file's UTF-8 bytes with its line endings made '\\n'."""
    text = Path(path).read_bytes().replace(b"\r\n", b"\n")
    return hashlib.sha256(text).hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rule_sha256(folder: str | Path = PACKAGE, files: Sequence[str] = RULE_FILES
                ) -> tuple[str, dict[str, str | None]]:
    """The rule's hash over ``files`` of ``folder`` (one line 'name sha256' each, in the order
    of ``files``; '-' and None for a file that does not exist), and each file's hash."""
    each = {name: text_sha256(Path(folder) / name) if (Path(folder) / name).is_file() else None
            for name in files}
    return _sha("".join(f"{name} {sha or '-'}\n" for name, sha in each.items())), each


def design(plan: Plan, claims: Claims, data: Sequence[str | Path] = DATA_FILES
           ) -> dict[str, Any]:
    """What the plan fixes before the runs, with its ``sha256`` over canonical JSON: ``seeds``,
    each experiment a claim in words names and each tuning experiment -> the distinct seeds of
    its planned runs (:func:`fednorm.claims.power.planned_seeds`); ``stage2``, the second
    stage's number of seeds (None: one stage); ``data``, each data file ->
    its hash (as :func:`text_sha256`)."""
    words = claims.words
    names = sorted({*(n for claim in words.claims for n in claim.experiments), *words.tuning})
    stage2 = plan.stage2
    body = {"seeds": {n: planned_seeds(plan, n) for n in names},
            "stage2": stage2 and {"seeds": len(stage2.seeds)},
            "data": {Path(p).as_posix(): text_sha256(p) for p in data}}
    return {**body, "sha256": _sha(json.dumps(body, sort_keys=True, separators=(",", ":")))}


def preregistration(claims: str | Path, folder: str | Path = PACKAGE,
                    files: Sequence[str] = RULE_FILES,
                    plan_design: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The record written beside claims_words.csv: the claims file and its hash, the rule's
    hash and its files', the plan's ``design`` where given, and ``sha256``, the hash of the
    hashes (one string to compare)."""
    rule, each = rule_sha256(folder, files)
    claims_sha = text_sha256(claims)
    hashes = [claims_sha, rule, *([plan_design["sha256"]] if plan_design else [])]
    return {"claims_file": str(claims), "claims_sha256": claims_sha, "rule_sha256": rule,
            "rule_files": each, **({"design": dict(plan_design)} if plan_design else {}),
            "sha256": _sha(" ".join(hashes) + "\n")}


def fixed(profiles: Mapping[str, Sequence[str]] | None = None,
          data: Sequence[str | Path] | None = None, folder: str | Path | None = None,
          files: Sequence[str] | None = None) -> tuple[Path, dict[str, Any]]:
    """What the committed record would hold now, but its date, and where it is (the first
    profile's ``claims_prereg``): its claims file's hash, the rule's, and each profile's design
    (the default arguments: PROFILES, DATA_FILES, PACKAGE, RULE_FILES)."""

    plans = {name: load_plan(merged_config(paths))
             for name, paths in (PROFILES if profiles is None else profiles).items()}
    first = next(iter(plans.values()))
    if not (first.claims and first.claims_prereg):
        raise ConfigError(f"config: keys 'claims' and 'claims_prereg' have values "
                          f"{first.claims!r} and {first.claims_prereg!r}; allowed: two paths")
    record = preregistration(first.claims, PACKAGE if folder is None else folder,
                             RULE_FILES if files is None else files)
    del record["sha256"]
    record["designs"] = {
        name: design(plan, load_claims(plan.claims), DATA_FILES if data is None else data
                     )["sha256"] for name, plan in plans.items() if plan.claims}
    return Path(first.claims_prereg), record


def check(record: Mapping[str, Any], committed: Mapping[str, Any]) -> list[str]:
    """What differs between a record computed now and the committed one, a line each: the
    claims file, each rule file, and the design: a ledger's record (its ``design``) must be one
    of the committed profiles', a whole record's (``designs``) each profile's."""
    def short(sha: str | None) -> str:
        return sha[:12] if sha else "absent"

    def differs(what: str, now: str | None, then: str | None) -> list[str]:
        return [f"{what}: {short(now)} now, {short(then)} committed"] if now != then else []

    out = differs(f"claims file {record['claims_file']}", record["claims_sha256"],
                  committed.get("claims_sha256"))
    files, then = record["rule_files"], committed.get("rule_files", {})
    for name in dict.fromkeys([*files, *then]):
        out += differs(f"rule file {name}", files.get(name), then.get(name))
    designs = committed.get("designs", {})
    if "designs" in record:
        for name in dict.fromkeys([*record["designs"], *designs]):
            out += differs(f"design of profile {name}", record["designs"].get(name),
                           designs.get(name))
    elif "design" in record and record["design"]["sha256"] not in designs.values():
        out.append(f"design {short(record['design']['sha256'])}: none of the committed ("
                   + ", ".join(f"{n} {short(s)}" for n, s in designs.items()) + ")")
    return out


def verified(record: dict[str, Any], path: str | Path | None) -> dict[str, Any]:
    """``record`` with the date of the committed record at ``path`` (None: no check, the record
    as it is); a ConfigError in one line naming each difference (:func:`check`)."""
    if path is None:
        return record
    committed = read_prereg(path)
    if committed is None:
        raise ConfigError(f"config: key 'claims_prereg' has value {str(path)!r}; allowed: a "
                          "committed pre-registration (`fednorm prereg --write` writes it) "
                          "or null")
    differ = check(record, committed)
    if differ:
        raise ConfigError(f"the ledger differs from its pre-registration {path} (fixed on "
                          f"{committed['fixed_on']}): {'; '.join(differ)}. `fednorm prereg "
                          "--write` records a new rule, as a commit before the runs")
    return {**record, "fixed_on": committed["fixed_on"]}


def prereg_line(record: dict[str, Any]) -> str:
    """One markdown line for the ledger: its date and hashes (their first 12 characters)."""
    when = f"fixed on {record['fixed_on']}" if "fixed_on" in record else "not committed"
    design_sha = f", the design {record['design']['sha256'][:12]}" if "design" in record else ""
    return (f"**Pre-registration** (claims_prereg.json, {when}): {record['sha256'][:12]}, of "
            f"the claims file `{Path(record['claims_file']).name}` "
            f"{record['claims_sha256'][:12]}{design_sha} and the rule "
            f"{record['rule_sha256'][:12]} (fednorm: "
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
