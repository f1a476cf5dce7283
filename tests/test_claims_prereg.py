"""fednorm.claims.prereg: the ledger's pre-registration (hashes of the claims file and of the
deciding modules), and `fednorm across-seeds` refusing two ledgers judged under different
ones."""

import hashlib
import json
import shutil

import pandas as pd

from fednorm.claims.across import preregistrations
from fednorm.claims.prereg import (
    PACKAGE,
    RULE_FILES,
    beside,
    prereg_line,
    preregistration,
    write_prereg,
)
from fednorm.cli import main

CLAIMS = "config/claims.yaml"


def _rule_copy(tmp_path):
    folder = tmp_path / "rule"
    folder.mkdir()
    for name in RULE_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE / name, folder / name)
    return folder


def test_the_hashes_are_those_of_the_files_computed_another_way():
    """sha256 of the claims file as hashlib reads it (it has '\\n' line endings), the rule's
    over 'name sha' lines of its files in RULE_FILES order, and the pair's."""
    record = preregistration(CLAIMS)
    with open(CLAIMS, "rb") as f:
        claims = hashlib.sha256(f.read()).hexdigest()
    each = {n: hashlib.sha256((PACKAGE / n).read_bytes()).hexdigest() for n in RULE_FILES}
    rule = hashlib.sha256("".join(f"{n} {h}\n" for n, h in each.items()).encode()).hexdigest()
    assert (record["claims_sha256"], record["rule_files"], record["rule_sha256"]) == (
        claims, each, rule)
    assert record["sha256"] == hashlib.sha256(f"{claims} {rule}\n".encode()).hexdigest()
    assert preregistration(CLAIMS) == record  # the same inputs, the same hashes


def test_changing_the_claims_file_or_a_deciding_module_changes_the_hash(tmp_path):
    claims = tmp_path / "claims.yaml"
    shutil.copy(CLAIMS, claims)
    folder = _rule_copy(tmp_path)
    first = preregistration(claims, folder)
    claims.write_text(claims.read_text().replace("alpha: 0.05", "alpha: 0.1"))
    changed = preregistration(claims, folder)
    assert changed["claims_sha256"] != first["claims_sha256"]
    assert changed["rule_sha256"] == first["rule_sha256"] and changed["sha256"] != first["sha256"]
    shutil.copy(CLAIMS, claims)
    with open(folder / "claims/stats.py", "a") as f:
        f.write("# an edit\n")
    edited = preregistration(claims, folder)
    assert edited["claims_sha256"] == first["claims_sha256"]
    assert edited["rule_sha256"] != first["rule_sha256"]
    assert [n for n in RULE_FILES if edited["rule_files"][n] != first["rule_files"][n]] == [
        "claims/stats.py"]


def test_line_endings_do_not_change_the_hash(tmp_path):
    """A checkout with CRLF line endings hashes as one with LF."""
    crlf = tmp_path / "claims.yaml"
    crlf.write_bytes(open(CLAIMS, "rb").read().replace(b"\n", b"\r\n"))
    assert preregistration(crlf)["claims_sha256"] == preregistration(CLAIMS)["claims_sha256"]


def _ledger_dir(tmp_path, name, record):
    folder = tmp_path / name
    folder.mkdir()
    csv = folder / "claims_words.csv"
    pd.DataFrame({"id": ["c1", "c2"], "verdict": ["holds", "inconclusive"],
                  "q_by": [0.01, 0.5]}).to_csv(csv, index=False)
    if record is not None:
        write_prereg(record, beside(csv))
    return csv


def test_across_seeds_confirms_only_under_one_preregistration(tmp_path, capsys):
    record = preregistration(CLAIMS)
    other = {**record, "rule_sha256": "0" * 64, "sha256": "1" * 64,
             "rule_files": {**record["rule_files"], "claims/verdicts.py": "2" * 64}}
    a = _ledger_dir(tmp_path, "a", record)
    same = _ledger_dir(tmp_path, "same", record)
    moved = _ledger_dir(tmp_path, "moved", other)
    old = _ledger_dir(tmp_path, "old", None)
    assert preregistrations(a, same) == (
        f"pre-registration: the same in both ({record['sha256'][:12]}: claims file "
        f"{record['claims_sha256'][:12]}, rule {record['rule_sha256'][:12]})", False)
    line, differ = preregistrations(a, moved)
    assert differ and line.startswith("pre-registration differs: rule (claims/verdicts.py)")
    assert preregistrations(a, old)[1] is False
    assert main(["across-seeds", str(a), str(same)]) == 0
    assert main(["across-seeds", str(a), str(moved)]) == 1
    assert "pre-registration differs" in capsys.readouterr().out
    assert main(["across-seeds", str(a), str(old)]) == 0


def test_the_ledgers_line_names_the_three_hashes(tmp_path):
    record = preregistration(CLAIMS)
    line = prereg_line(record)
    assert all(record[k][:12] in line for k in ("sha256", "claims_sha256", "rule_sha256"))
    assert "`claims.yaml`" in line
    assert "claims.stats, claims.verdicts, claims.stage2" in line and "results)" in line
    path = write_prereg(record, tmp_path / "claims_prereg.json")
    assert json.loads(path.read_text()) == record
