"""fednorm.claims.prereg: the ledger's pre-registration (hashes of the claims file, of the
deciding modules and of each profile's design), checked against the committed record, and
`fednorm across-seeds` refusing two ledgers judged under different ones. Every rule folder
here is a temporary one with fake modules, never the package's own list."""

import datetime
import hashlib
import json

import pandas as pd
import pytest

from fednorm.claims import prereg
from fednorm.claims.across import preregistrations
from fednorm.claims.file import load_claims
from fednorm.claims.prereg import (
    beside,
    check,
    design,
    fixed,
    prereg_line,
    preregistration,
    read_prereg,
    rule_sha256,
    verified,
    write_prereg,
)
from fednorm.cli import main
from fednorm.config import ConfigError
from fednorm.plan import load_plan, merge

FILES = ("claims/judge.py", "claims/tests.py", "value.py")
CLAIMS = """\
claims:
  - {id: fbn-number, paper: fbn, source: Fig 3a, setting: {normalizer: fbn}, value: 50}
qualitative:
  tuning: tuning
  claims:
    - id: fbn-beats-bn
      paper: fbn
      source: Fig 3a
      words: "FBN beats BN"
      experiment: a
      relation: greater
      a: {normalizer: fbn}
      b: {normalizer: bn}
"""
BASE = {"run": {"steps": 10, "eval_every": 5},
        "experiments": {"a": {"grid": {"normalizer": ["bn", "fbn"], "seed": [0, 1]}},
                        "tuning": {"grid": {"normalizer": ["bn"], "seed": [0]}},
                        "unjudged": {"grid": {"normalizer": ["gn"], "seed": [0, 1, 2]}}},
        "stage2": {"seeds": [100, 101]}}


@pytest.fixture
def tree(tmp_path):
    """A claims file, a rule folder of fake modules and a config naming both."""
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    for name in FILES:
        (tmp_path / "rule" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "rule" / name).write_text(f"# {name}\n")
    config = {**BASE, "claims": str(tmp_path / "claims.yaml"),
              "claims_prereg": str(tmp_path / "prereg.json")}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    return tmp_path


def _design(tree, patch=None, data=()):
    plan = load_plan(merge({**BASE, "claims": str(tree / "claims.yaml")}, patch or {}))
    return design(plan, load_claims(plan.claims), data)


def _record(tree, patch=None):
    return preregistration(tree / "claims.yaml", tree / "rule", FILES, _design(tree, patch))


def _committed(tree):
    return {"fixed_on": "2025-01-31", **{k: v for k, v in _record(tree).items()
                                         if k not in ("design", "sha256")},
            "designs": {"paper": _design(tree)["sha256"]}}


def test_the_hashes_are_those_of_the_files_computed_another_way(tree):
    """sha256 of each file as hashlib reads it (it has '\\n' line endings), the rule's over
    'name sha' lines in FILES order ('-' for a file that is absent), the design's over its
    canonical JSON, and the three together."""
    record = _record(tree)
    claims = hashlib.sha256((tree / "claims.yaml").read_bytes()).hexdigest()
    each = {n: hashlib.sha256((tree / "rule" / n).read_bytes()).hexdigest() for n in FILES}
    rule = hashlib.sha256("".join(f"{n} {h}\n" for n, h in each.items()).encode()).hexdigest()
    assert (record["claims_sha256"], record["rule_files"], record["rule_sha256"]) == (
        claims, each, rule)
    body = {"data": {}, "seeds": {"a": 2, "tuning": 1}, "stage2": {"seeds": 2}}
    sha = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    assert record["design"] == {**body, "sha256": sha.hexdigest()}
    assert record["sha256"] == hashlib.sha256(
        f"{claims} {rule} {sha.hexdigest()}\n".encode()).hexdigest()
    assert rule_sha256(tree / "rule", (*FILES, "absent.py"))[1]["absent.py"] is None
    assert rule_sha256(tree / "rule", (*FILES, "absent.py"))[0] == hashlib.sha256(
        "".join(f"{n} {h}\n" for n, h in {**each, "absent.py": "-"}.items()).encode()
    ).hexdigest()


def test_line_endings_do_not_change_the_hash(tree):
    """A checkout with CRLF line endings hashes as one with LF, a data file too."""
    crlf = tree / "crlf.yaml"
    crlf.write_bytes((tree / "claims.yaml").read_bytes().replace(b"\n", b"\r\n"))
    assert preregistration(crlf, tree / "rule", FILES)["claims_sha256"] == _record(
        tree)["claims_sha256"]
    assert _design(tree, data=[crlf])["data"] == {crlf.as_posix(): _record(tree)[
        "claims_sha256"]}


@pytest.mark.parametrize(("edit", "named"), [
    ("rule", "rule file claims/tests.py: "),
    ("new rule", "rule file claims/new.py: "),
    ("claims", "claims file "),
])
def test_a_changed_file_is_a_difference_that_names_it(tree, edit, named):
    committed = _committed(tree)
    assert check(_record(tree), committed) == []
    if edit == "rule":
        with open(tree / "rule/claims/tests.py", "a") as f:
            f.write("# an edit\n")
    elif edit == "new rule":  # a listed module that arrives later: absent, then present
        committed["rule_files"]["claims/new.py"] = None
        (tree / "rule/claims/new.py").write_text("ALPHA = 0.05\n")
    else:
        (tree / "claims.yaml").write_text(CLAIMS.replace("FBN beats BN", "FBN beats BN."))
    files = (*FILES, "claims/new.py") if edit == "new rule" else FILES
    now = preregistration(tree / "claims.yaml", tree / "rule", files, _design(tree))
    assert [line[:len(named)] for line in check(now, committed)] == [named]


@pytest.mark.parametrize("patch", [
    {"experiments": {"a": {"grid": {"seed": [0, 1, 2]}}}},  # a judged experiment's seeds
    {"experiments": {"tuning": {"grid": {"seed": [0, 1]}}}},  # a tuning experiment's
    {"stage2": {"seeds": [100, 101, 102]}},  # the second stage's
    {"stage2": None},
])
def test_a_changed_design_is_a_difference_that_names_it(tree, patch):
    line, = check(_record(tree, patch), _committed(tree))
    assert line.startswith(f"design {_design(tree, patch)['sha256'][:12]}: none of the "
                           f"committed (paper {_design(tree)['sha256'][:12]})")


def test_the_design_counts_seeds_and_does_not_list_them(tree):
    """Disjoint seeds (seed_offset) share a design; an experiment no claim names is not in it;
    a data file is."""
    moved = load_plan({**BASE, "claims": "x", "seed_offset": 2})
    assert {c.seed for c in moved.runs.values()} == {2, 3, 4}  # the seeds did move
    assert _design(tree, {"seed_offset": 2}) == _design(tree)
    assert _design(tree, {"experiments": {"unjudged": {"grid": {"seed": [0]}}}}) == _design(tree)
    table = tree / "noise.csv"
    table.write_text("experiment,sd\na,1.5\n")
    first = _design(tree, data=[table])["sha256"]
    table.write_text("experiment,sd\na,2.5\n")
    assert len({_design(tree)["sha256"], first, _design(tree, data=[table])["sha256"]}) == 3


def test_the_ledger_fails_loudly_naming_each_difference(tree):
    path = write_prereg(_committed(tree), tree / "prereg.json")
    record = _record(tree)
    assert verified(record, None) is record
    assert verified(record, path) == {**record, "fixed_on": "2025-01-31"}
    with open(tree / "rule/value.py", "a") as f:
        f.write("AT = 'max'\n")
    with pytest.raises(ConfigError, match=r"pre-registration .*prereg.json \(fixed on "
                       r"2025-01-31\): rule file value.py: \w{12} now, \w{12} committed; design "
                       r"\w{12}: none .*`fednorm prereg --write` records a new rule, as a "
                       r"commit before the runs"):
        verified(_record(tree, {"stage2": None}), path)
    with pytest.raises(ConfigError, match=r"key 'claims_prereg' has value '.*absent.json'"):
        verified(record, tree / "absent.json")


def test_the_config_key_is_a_path_or_null():
    assert load_plan(BASE).claims_prereg is None
    assert load_plan({**BASE, "claims_prereg": "p.json"}).claims_prereg == "p.json"
    with pytest.raises(ConfigError, match="key 'claims_prereg' has value 3; allowed: the path"):
        load_plan({**BASE, "claims_prereg": 3})


def test_the_cli_writes_then_checks_and_names_each_difference(tree, monkeypatch, capsys):
    more = tree / "more.yaml"
    more.write_text("stage2: {seeds: [100, 101, 102]}\n")
    monkeypatch.setattr(prereg, "PROFILES", {"paper": [tree / "config.yaml"],
                                             "more": [tree / "config.yaml", more]})
    monkeypatch.setattr(prereg, "PACKAGE", tree / "rule")
    monkeypatch.setattr(prereg, "RULE_FILES", FILES)
    assert main(["prereg"]) == 1 and "no record" in capsys.readouterr().out
    assert main(["prereg", "--write"]) == 0
    written = read_prereg(tree / "prereg.json")
    assert written["fixed_on"] == datetime.date.today().isoformat()
    assert set(written["designs"]) == {"paper", "more"}
    assert written["designs"]["more"] != written["designs"]["paper"]
    assert main(["prereg"]) == 0
    assert capsys.readouterr().out.endswith(f"as fixed on {written['fixed_on']}\n")
    with open(tree / "rule/claims/judge.py", "a") as f:
        f.write("# an edit\n")
    more.write_text("stage2: {seeds: [100, 101, 102, 103]}\n")
    assert main(["prereg"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["rule file claims/judge.py",
                                                      "design of profile more"]


def test_committed_prereg_matches_tree():
    """config/claims_prereg.json is what the tree gives now (`fednorm prereg --write` after a
    change to a deciding module, the claims file or a profile's design)."""
    path, now = fixed()
    committed = read_prereg(path)
    assert committed is not None and check(now, committed) == []


def _ledger_dir(tmp_path, name, record):
    folder = tmp_path / name
    folder.mkdir()
    csv = folder / "claims_words.csv"
    pd.DataFrame({"id": ["c1", "c2"], "verdict": ["holds", "inconclusive"],
                  "q_by": [0.01, 0.5]}).to_csv(csv, index=False)
    if record is not None:
        write_prereg(record, beside(csv))
    return csv


def test_across_seeds_confirms_only_under_one_preregistration(tree, capsys):
    record = _record(tree)
    other = {**record, "rule_sha256": "0" * 64, "sha256": "1" * 64,
             "rule_files": {**record["rule_files"], "claims/tests.py": "2" * 64}}
    redesigned = _record(tree, {"stage2": None})
    a = _ledger_dir(tree, "a", record)
    same = _ledger_dir(tree, "same", record)
    moved = _ledger_dir(tree, "moved", other)
    design_moved = _ledger_dir(tree, "design", redesigned)
    old = _ledger_dir(tree, "old", None)
    assert preregistrations(a, same) == (
        f"pre-registration: the same in both ({record['sha256'][:12]}: claims file "
        f"{record['claims_sha256'][:12]}, rule {record['rule_sha256'][:12]})", False)
    line, differ = preregistrations(a, moved)
    assert differ and line.startswith("pre-registration differs: rule (claims/tests.py)")
    line, differ = preregistrations(a, design_moved)
    assert differ and line.startswith("pre-registration differs: design:")
    assert preregistrations(a, old)[1] is False
    assert main(["across-seeds", str(a), str(same)]) == 0
    assert main(["across-seeds", str(a), str(moved)]) == 1
    assert "pre-registration differs" in capsys.readouterr().out
    assert main(["across-seeds", str(a), str(old)]) == 0


def test_the_ledgers_line_names_its_date_and_hashes(tree):
    record = _record(tree)
    assert "(claims_prereg.json, not committed)" in prereg_line(record)
    line = prereg_line({**record, "fixed_on": "2025-01-31"})
    assert "(claims_prereg.json, fixed on 2025-01-31)" in line
    assert all(record[k][:12] in line for k in ("sha256", "claims_sha256", "rule_sha256"))
    assert f"the design {record['design']['sha256'][:12]}" in line
    assert "`claims.yaml`" in line and "(fednorm: claims.judge, claims.tests, value)" in line
    path = write_prereg(record, tree / "claims_prereg.json")
    assert json.loads(path.read_text()) == record
