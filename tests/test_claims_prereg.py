"""fednorm.claims.prereg: the ledger's pre-registration (hashes of the claims file and of the
deciding modules, the engine revision, each profile's design with its run ids and seeds
listed), checked against the committed record, `fednorm prereg` refusing to rewrite it after
judged runs, and `fednorm across-seeds` refusing two ledgers judged under different ones. The
rule folders here are temporary: fake modules, or a copy of the package's own."""

import dataclasses
import datetime
import hashlib
import json
import os
import shutil

import pandas as pd
import pytest

from fednorm import ENGINE_REVISION, methods
from fednorm.claims import prereg
from fednorm.claims.across import preregistrations
from fednorm.claims.file import load_claims
from fednorm.claims.prereg import (
    EXPLORATORY,
    beside,
    check,
    design,
    fixed,
    prereg_line,
    preregistration,
    read_prereg,
    revisions_line,
    rule_files,
    rule_sha256,
    run_revisions,
    verified,
    write_prereg,
)
from fednorm.cli import main
from fednorm.config import ConfigError
from fednorm.plan import load_plan, merge

PACKAGE = prereg.PACKAGE  # the package's own, before a fixture moves the root
PACKAGE_PATTERNS = prereg.RULE_PATTERNS
PATTERNS = ("claims/*.py", "value.py")
FILES = ("claims/judge.py", "claims/tests.py", "value.py")  # what PATTERNS list in the fixture
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
JUDGED = [2, 3, 4, 5, 6, 7]
BASE = {"run": {"steps": 10, "eval_every": 5, "val_fraction": 0.1},
        "experiments": {"a": {"grid": {"normalizer": ["bn", "fbn"], "seed": JUDGED}},
                        "tuning": {"tune": {"agc_lambda": [0.01, 0.16]},
                                   "grid": {"normalizer": ["bn", "fedwon"],
                                            "lr_scale": [1, 4], "seed": [0]}},
                        "unjudged": {"grid": {"normalizer": ["gn"], "seed": [0, 1, 2]}}},
        "stage2": {"seeds": [100, 101]}}
MOVED = {"experiments": {"a": {"grid": {"seed": [3, 4, 5, 6, 7, 8]}}}}  # the same count
REGRIDDED = {"experiments": {"tuning": {"grid": {"lr_scale": [1, 2]}}}}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A claims file, a rule folder of fake modules (the patterns' root) and a config naming
    both; the results under tmp_path/results."""
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    for name in FILES:
        (tmp_path / "rule" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "rule" / name).write_text(f"# {name}\n")
    config = {**BASE, "claims": str(tmp_path / "claims.yaml"),
              "claims_prereg": str(tmp_path / "prereg.json"),
              "paths": {"results": str(tmp_path / "results")}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    monkeypatch.setattr(prereg, "PACKAGE", tmp_path / "rule")
    monkeypatch.setattr(prereg, "RULE_PATTERNS", PATTERNS)
    return tmp_path


def _plan(tree, patch=None):
    return load_plan(merge({**BASE, "claims": str(tree / "claims.yaml")}, patch or {}))


def _design(tree, patch=None, data=()):
    plan = _plan(tree, patch)
    return design(plan, load_claims(plan.claims), data)


def _record(tree, patch=None, **kw):
    return preregistration(tree / "claims.yaml", plan_design=_design(tree, patch), **kw)


def _committed(tree):
    return {"fixed_on": "2025-01-31", **{k: v for k, v in _record(tree).items()
                                         if k not in ("design", "sha256")},
            "designs": {"paper": _design(tree)}}


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_hashes_are_those_of_the_files_computed_another_way(tree):
    """sha256 of each file as hashlib reads it (it has '\\n' line endings), the rule's over
    'name sha' lines of the files the patterns list, in order ('-' for an absent plain name),
    the design's over its canonical JSON, and the four together."""
    record = _record(tree)
    claims = hashlib.sha256((tree / "claims.yaml").read_bytes()).hexdigest()
    each = {n: hashlib.sha256((tree / "rule" / n).read_bytes()).hexdigest() for n in FILES}
    rule = _sha("".join(f"{n} {h}\n" for n, h in each.items()))
    assert (record["claims_sha256"], record["rule_files"], record["rule_sha256"]) == (
        claims, each, rule)
    body = {k: v for k, v in record["design"].items() if k not in ("sha256", "seedless_sha256")}
    assert record["design"]["sha256"] == _sha(json.dumps(body, sort_keys=True,
                                                         separators=(",", ":")))
    assert record["engine_revision"] == ENGINE_REVISION
    assert record["sha256"] == _sha(
        f"{claims} {rule} {ENGINE_REVISION} {record['design']['sha256']}\n")
    assert rule_sha256(files=(*FILES, "absent.py"))[1]["absent.py"] is None
    assert rule_sha256(files=(*FILES, "absent.py"))[0] == _sha(
        "".join(f"{n} {h}\n" for n, h in {**each, "absent.py": "-"}.items()))


def test_the_design_lists_run_ids_seeds_budgets_and_grids(tree):
    """Each judged and tuning experiment's run ids as the plan resolves them, its seeds listed,
    its steps; a tuning experiment's values of each tuned key; the methods' own grids; the
    second stage's seeds listed. An experiment no claim names is not in it."""
    plan = _plan(tree)
    got = _design(tree)
    assert set(got["experiments"]) == {"a", "tuning"}
    assert got["experiments"]["a"]["runs"] == sorted(plan.experiments["a"])
    assert got["experiments"]["a"]["seeds"] == JUDGED
    assert got["experiments"]["a"]["steps"] == [10]
    grid = got["experiments"]["tuning"]["grid"]
    assert (grid["lr_scale"], grid["agc_lambda"]) == ([1.0, 4.0], [0.01, 0.16])
    assert "grid" not in got["experiments"]["a"]
    assert got["methods"]["fedwon"]["agc_lambda"] == [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, None]  # fednorm.methods, as written
    assert got["stage2"] == {"seeds": [100, 101]}


def test_the_rule_files_are_the_package_listed(tree):
    """The package's deciding modules: every module of the claims and config packages (as
    os.listdir finds them) and the named ones; a module added to a listed folder is hashed."""
    listed = rule_files(PACKAGE, PACKAGE_PATTERNS)
    for folder in ("claims", "config"):
        assert {f"{folder}/{n}" for n in os.listdir(PACKAGE / folder)
                if n.endswith(".py")} <= set(listed)
    assert {"claims/numbers.py", "methods.py", "plan/stage2.py", "results.py", "tuning.py",
            "summarize.py"} <= set(listed)
    assert not any(n.startswith("fl/") for n in listed)  # the engine: by its revision
    assert rule_files() == FILES
    (tree / "rule/claims/new.py").write_text("ALPHA = 0.05\n")
    assert rule_files() == (FILES[0], "claims/new.py", *FILES[1:])
    assert "claims/new.py" in _record(tree)["rule_files"]


def test_line_endings_do_not_change_the_hash(tree):
    """A checkout with CRLF line endings hashes as one with LF, a data file too."""
    crlf = tree / "crlf.yaml"
    crlf.write_bytes((tree / "claims.yaml").read_bytes().replace(b"\n", b"\r\n"))
    assert preregistration(crlf)["claims_sha256"] == _record(tree)["claims_sha256"]
    assert _design(tree, data=[crlf])["data"] == {crlf.as_posix(): _record(tree)[
        "claims_sha256"]}


@pytest.mark.parametrize(("edit", "named"), [
    ("rule", "rule file claims/tests.py: "),
    ("new rule", "rule file claims/new.py: "),
    ("claims", "claims file "),
    ("engine", "engine revision: abc1234 now, "),
])
def test_a_changed_file_is_a_difference_that_names_it(tree, edit, named):
    committed = _committed(tree)
    assert check(_record(tree), committed) == []
    if edit == "rule":
        with open(tree / "rule/claims/tests.py", "a") as f:
            f.write("# an edit\n")
    elif edit == "new rule":  # found by listing the folder: no list to update
        (tree / "rule/claims/new.py").write_text("ALPHA = 0.05\n")
    elif edit == "claims":
        (tree / "claims.yaml").write_text(CLAIMS.replace("FBN beats BN", "FBN beats BN."))
    now = _record(tree, engine="abc1234" if edit == "engine" else None)
    assert [line[:len(named)] for line in check(now, committed)] == [named]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """A copy of the package's own source, and a claims file."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(PACKAGE, root / "fednorm", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "claims.yaml").write_text(CLAIMS)
    return root


@pytest.mark.parametrize("module", ["claims/numbers.py", "claims/rule.py", "claims/stage2.py",
                                    "claims/words_ledger.py", "methods.py", "config/run.py",
                                    "config/schema.py", "plan/stage2.py", "results.py",
                                    "tuning.py", "summarize.py", "claims/added.py"])
def test_a_code_change_in_a_deciding_module_fails(package_copy, module):
    """An edit of any deciding module of the package (a copy of it), and a module added to
    the claims package, is a difference naming it; an edit of the engine is not (its revision
    is: the test above)."""
    root = package_copy / "fednorm"

    def record():
        return preregistration(package_copy / "claims.yaml", root,
                               rule_files(root, PACKAGE_PATTERNS))

    committed = {**record(), "fixed_on": "2025-01-31"}
    edited = {}
    try:
        for name in ("fl/trainer.py", module):
            path = root / name
            edited[path] = path.read_text() if path.is_file() else None
            path.write_text((edited[path] or "") + "# an edit\n")
            said = [] if name.startswith("fl/") else [f"rule file {module}"]
            assert [line.split(":")[0] for line in check(record(), committed)] == said
    finally:
        for path, text in edited.items():
            path.unlink() if text is None else path.write_text(text)


@pytest.mark.parametrize(("patch", "said"), [
    (MOVED, "experiment a: seeds 3-8 now, 2-7 committed; 2 run ids new, 2 gone"),
    ({"experiments": {"tuning": {"grid": {"seed": [0, 1]}}}},
     "experiment tuning: seeds 0-1 now, 0 committed; 6 run ids new, 0 gone"),
    (REGRIDDED, "experiment tuning: grid of lr_scale [1.0, 2.0] now, [1.0, 4.0] committed; "
     "3 run ids new, 3 gone"),
    ({"experiments": {"tuning": {"tune": {"agc_lambda": [0.01, 0.64]}}}},
     "experiment tuning: grid of agc_lambda [0.01, 0.64] now, [0.01, 0.16] committed"),
    ({"run": {"steps": 20}}, "experiment a: steps [20] now, [10] committed"),
    ({"stage2": {"seeds": [101, 102]}}, "stage2 {'seeds': [101, 102]} now"),
    ({"stage2": None}, "stage2 None now"),
])
def test_a_changed_design_is_a_difference_that_names_it(tree, patch, said):
    """Moved seeds at the same count, another tuning grid or steps, the second stage: each
    a difference, against the nearest committed design, saying what moved."""
    line, = check(_record(tree, patch), _committed(tree))
    assert line.startswith(f"design {_design(tree, patch)['sha256'][:12]}: none of the "
                           f"committed (paper {_design(tree)['sha256'][:12]}); against paper: ")
    assert said in line


def test_a_methods_tuning_grid_is_in_the_design(tree, monkeypatch):
    before = _design(tree)
    fedwon = methods.method("fedwon")
    changed = dataclasses.replace(fedwon, tunes=(methods.Tune("agc_lambda", "λ", (0.01, 1.0)),))
    monkeypatch.setattr(methods, "METHODS", tuple(changed if m is fedwon else m
                                                  for m in methods.METHODS))
    assert _design(tree)["methods"]["fedwon"] == {"agc_lambda": [0.01, 1.0]}
    line, = prereg.design_differences(_design(tree), before)
    assert line.startswith("the tuning grids of method fedwon: {'agc_lambda': [0.01, 1.0]} now")


def test_disjoint_seeds_are_another_design_of_the_same_settings(tree):
    """seed_offset moves the seeds, hence the design; its seedless hash stays; an experiment
    no claim names and a data file: out of it and in it."""
    moved = _plan(tree, {"seed_offset": 8})
    assert {moved.runs[r].seed for r in moved.experiments["a"]} == {s + 8 for s in JUDGED}
    offset = _design(tree, {"seed_offset": 8})
    assert offset["sha256"] != _design(tree)["sha256"]
    assert offset["seedless_sha256"] == _design(tree)["seedless_sha256"]
    assert _design(tree, MOVED)["seedless_sha256"] == _design(tree)["seedless_sha256"]
    assert _design(tree, REGRIDDED)["seedless_sha256"] != _design(tree)["seedless_sha256"]
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


def _summary(revisions):
    """A summary's rows: two evaluation points of each run, its engine revision (None: none)."""
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(len(revisions)) for _ in (0, 1)],
                         "engine_revision": [r for r in revisions for _ in (0, 1)]})


def test_runs_of_another_engine_revision_fail_the_ledger_and_are_named_in_its_header(tree):
    """The runs' revisions counted per run (not per row); one other than the recorded, or a
    run without one, fails the check; the header line says how many revisions there were."""
    committed = _committed(tree)
    same = run_revisions(_summary([ENGINE_REVISION] * 3))
    assert same == {ENGINE_REVISION: 3}
    assert check(_record(tree, runs=same), committed) == []
    mixed = run_revisions(_summary([ENGINE_REVISION, ENGINE_REVISION, "abc1234", None]))
    assert mixed == {ENGINE_REVISION: 2, "abc1234": 1, "none": 1}
    assert check(_record(tree, runs=mixed), committed) == [
        f"the ledger's runs: runs of 3 engine revisions: {ENGINE_REVISION} (2 runs), abc1234 "
        f"(1 run), none recorded (1 run); the pre-registration's is {ENGINE_REVISION}"]
    assert run_revisions(pd.DataFrame({"run_id": ["a", "a", "b"]})) == {"none": 2}
    assert revisions_line(_record(tree, runs=mixed)) == (
        f"**Engine**: runs of 3 engine revisions: {ENGINE_REVISION} (2 runs), abc1234 (1 run), "
        f"none recorded (1 run); the ledger's code is at engine revision {ENGINE_REVISION}.")
    assert revisions_line(_record(tree, runs=same)).startswith(
        f"**Engine**: runs of 1 engine revision: {ENGINE_REVISION} (3 runs);")
    assert _record(tree, runs=mixed)["sha256"] == _record(tree)["sha256"]  # found, not fixed


def test_the_config_key_is_a_path_or_null():
    assert load_plan(BASE).claims_prereg is None
    assert load_plan({**BASE, "claims_prereg": "p.json"}).claims_prereg == "p.json"
    with pytest.raises(ConfigError, match="key 'claims_prereg' has value 3; allowed: the path"):
        load_plan({**BASE, "claims_prereg": 3})


def _cli(tree, monkeypatch, more_yaml="stage2: {seeds: [100, 101, 102]}\n"):
    more = tree / "more.yaml"
    more.write_text(more_yaml)
    monkeypatch.setattr(prereg, "PROFILES", {"paper": [tree / "config.yaml"],
                                             "more": [tree / "config.yaml", more]})
    return more


def _run(plan, run_id, revision):
    """A finished run's run.json in the plan's results folder (revision None: none named)."""
    folder = plan.paths.run_dir(run_id)
    os.makedirs(folder, exist_ok=True)
    meta = {"status": "ok", **({"engine_revision": revision} if revision else {})}
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump(meta, f)
    return folder


def test_the_cli_writes_then_checks_and_names_each_difference(tree, monkeypatch, capsys):
    more = _cli(tree, monkeypatch)
    assert main(["prereg"]) == 1 and "no record" in capsys.readouterr().out
    assert main(["prereg", "--write"]) == 0
    written = read_prereg(tree / "prereg.json")
    assert written["fixed_on"] == datetime.date.today().isoformat()
    assert set(written["designs"]) == {"paper", "more"} and "exploratory" not in written
    assert written["designs"]["more"] != written["designs"]["paper"]
    assert written["engine_revision"] == ENGINE_REVISION
    assert main(["prereg"]) == 0
    assert capsys.readouterr().out.endswith(f"as fixed on {written['fixed_on']}\n")
    with open(tree / "rule/claims/judge.py", "a") as f:
        f.write("# an edit\n")
    more.write_text("stage2: {seeds: [100, 101, 102, 103]}\n")
    assert main(["prereg"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["rule file claims/judge.py",
                                                      "design of profile more"]


@pytest.mark.parametrize(("more_yaml", "said"), [
    (json.dumps(MOVED), "design of profile more: experiment a: seeds 3-8 now, 2-7 committed"),
    (json.dumps(REGRIDDED), "design of profile more: experiment tuning: grid of lr_scale "
     "[1.0, 2.0] now, [1.0, 4.0] committed"),
])
def test_the_cli_fails_on_moved_seeds_and_a_changed_tuning_grid(tree, monkeypatch, capsys,
                                                                more_yaml, said):
    more = _cli(tree, monkeypatch, "{}\n")
    assert main(["prereg", "--write"]) == 0
    assert main(["prereg"]) == 0
    more.write_text(more_yaml)
    capsys.readouterr()
    assert main(["prereg"]) == 1
    line, = capsys.readouterr().out.splitlines()
    assert line.startswith(said)


def test_the_cli_fails_on_runs_of_another_engine_revision(tree, monkeypatch, capsys):
    _cli(tree, monkeypatch)
    assert main(["prereg", "--write"]) == 0
    plan = _plan(tree, {"paths": {"results": str(tree / "results")}})
    a, b, c = sorted(plan.experiments["a"])[:3]
    _run(plan, a, ENGINE_REVISION)
    capsys.readouterr()
    assert main(["prereg"]) == 0  # runs of the recorded revision only
    _run(plan, b, "abc1234")
    _run(plan, c, None)
    capsys.readouterr()
    assert main(["prereg"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"runs of profile {name} in {tree / 'results'}: runs of 3 engine "
                     f"revisions: {ENGINE_REVISION} (1 run), abc1234 (1 run), none recorded "
                     f"(1 run); the pre-registration's is {ENGINE_REVISION}"
                     for name in ("paper", "more")]


def test_write_refuses_once_a_judged_run_exists_unless_exploratory(tree, monkeypatch, capsys):
    _cli(tree, monkeypatch)
    plan = _plan(tree, {"paths": {"results": str(tree / "results")}})
    unjudged = _run(plan, plan.experiments["unjudged"][0], ENGINE_REVISION)
    assert main(["prereg", "--write"]) == 0  # a run no claim reads: not judged
    os.remove(tree / "prereg.json")
    judged = _run(plan, plan.experiments["tuning"][0], ENGINE_REVISION)
    capsys.readouterr()
    assert main(["prereg", "--write"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"fednorm prereg --write: refused: {judged} is a judged run of "
                          f"profile paper (1 found):")
    assert not (tree / "prereg.json").exists() and unjudged not in err
    assert main(["prereg", "--exploratory"]) == 2  # it marks what --write writes
    assert main(["prereg", "--write", "--exploratory"]) == 0
    written = read_prereg(tree / "prereg.json")
    assert written["exploratory"] is True
    assert main(["prereg"]) == 0
    assert capsys.readouterr().out.endswith("(exploratory: written after judged runs "
                                            "existed)\n")
    plan = _plan(tree)
    now = preregistration(tree / "claims.yaml", plan_design=design(plan, load_claims(plan.claims)))
    ledger = verified(now, tree / "prereg.json")  # the CLI's data files: DATA_FILES
    assert ledger["exploratory"] is True
    assert f"fixed on {written['fixed_on']}; {EXPLORATORY})" in prereg_line(ledger)
    assert EXPLORATORY == ("exploratory: the pre-registration was written after judged runs "
                           "existed")


def test_committed_prereg_matches_tree():
    """config/claims_prereg.json is what the tree gives now (`fednorm prereg --write` after a
    change to a deciding module, the claims file or a profile's design)."""
    path, now = fixed()
    committed = read_prereg(path)
    assert committed is not None and check(now, committed) == []
    assert set(committed["designs"]) == set(prereg.PROFILES)
    quick, other = (committed["designs"][n] for n in ("quick", "quick_other_seeds"))
    assert quick["seedless_sha256"] == other["seedless_sha256"]
    assert quick["sha256"] != other["sha256"]
    assert not set(quick["experiments"]["tuning"]["runs"]) & set(
        other["experiments"]["tuning"]["runs"])


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
    a = _ledger_dir(tree, "a", record)
    same = _ledger_dir(tree, "same", record)
    seeds = _ledger_dir(tree, "seeds", _record(tree, {"seed_offset": 8}))
    moved = _ledger_dir(tree, "moved", other)
    design_moved = _ledger_dir(tree, "design", _record(tree, {"stage2": None}))
    engine = _ledger_dir(tree, "engine", _record(tree, engine="abc1234"))
    old = _ledger_dir(tree, "old", None)
    assert preregistrations(a, same) == (
        f"pre-registration: the same in both ({record['sha256'][:12]}: claims file "
        f"{record['claims_sha256'][:12]}, rule {record['rule_sha256'][:12]})", False)
    line, differ = preregistrations(a, seeds)
    assert not differ and line.startswith("pre-registration: the same in both but the seeds")
    line, differ = preregistrations(a, moved)
    assert differ and line.startswith("pre-registration differs: rule (claims/tests.py)")
    line, differ = preregistrations(a, design_moved)
    assert differ and line.startswith("pre-registration differs: design:")
    line, differ = preregistrations(a, engine)
    assert differ and line.startswith("pre-registration differs: engine revision:")
    assert preregistrations(a, old)[1] is False
    assert main(["across-seeds", str(a), str(same)]) == 0
    assert main(["across-seeds", str(a), str(seeds)]) == 0
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
    assert f"the engine revision {ENGINE_REVISION}" in line
    assert "`claims.yaml`" in line and "(fednorm: claims (2 modules), value)" in line
    path = write_prereg(record, tree / "claims_prereg.json")
    assert json.loads(path.read_text()) == record
