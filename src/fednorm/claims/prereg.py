"""The ledger's pre-registration: what its verdicts are decided by, fixed and committed before
the runs, and checked by the ledger (docs/claims.md, Pre-registration).

Four parts. The **claims file**: its sha256 (its text, line endings made '\\n', so that a
checkout on any system hashes the same). The **rule**: the source of every module on the path
from a run's metrics to a verdict, each hashed as the claims file, then their names and hashes
hashed together; the modules are found by listing (RULE_PATTERNS: the claims package whole,
config's fields and rules, the second stage's seeds, the
methods' tuned keys and grids, the summary and the results' reading, the tuning's choice), so
that a new module of the claims package is hashed without a hand edit. The **engine
revision** (fednorm.ENGINE_REVISION: the commit that last moved the engine's float bits; every
run.json carries the revision that trained it). And the **design** (:func:`design`), what a
profile fixes before the runs: the resolved run ids of every experiment a claim in words names
and of every tuning experiment, with their seeds listed, their budgets (``steps``) and, for a
tuning experiment, the values each tuned key sweeps; the methods' own tuning grids
(fednorm.methods.Tune); the second stage's seeds; the data files the rule reads.
The source rather than a declared version number: a number is bumped by hand and drifts from
the code it names; a hash changes with any edit (a comment too: such an edit is then seen, and
judged, by whoever reads the diff). The run ids rather than a count of seeds: seeds 2-7 moved
to 3-8 are other runs. Two ledgers on disjoint seeds (``seed_offset``) are two profiles, each
fixed on its own (PROFILES), and they share the design but its seeds (``seedless_sha256``:
``fednorm across-seeds`` compares that).

The committed record (config/claims_prereg.json, the config's ``claims_prereg``) holds the
four for every profile and the date they were fixed: ``fednorm prereg --write`` writes it (and
refuses once a judged run of a profile exists in its results folder, unless told
``--exploratory``: the record is then marked so, and every ledger checked against it says so),
``fednorm prereg`` checks it against the tree and against the runs found in each profile's
results folder (each must carry the recorded engine revision), and the ledger fails where the
code, the claims file, its plan's design or its runs' revisions differ from it
(:func:`verified`): a new rule is a commit before the runs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fednorm import ENGINE_REVISION, methods
from fednorm.claims.file import PREREG_NAME, Claims, load_claims
from fednorm.config import ConfigError, RunConfig
from fednorm.io import write_text
from fednorm.plan import Plan, load_plan, merged_config

# the deciding modules, relative to the fednorm package: a pattern with a wildcard is listed
# anew each time (a module added to the claims package is hashed at once), a plain name is
# hashed even when absent (then a module that arrives later is a difference)
RULE_PATTERNS = ("claims/*.py", "config/*.py", "plan/stage2.py", "methods.py", "metrics.py",
                 "integrity.py", "summarize.py", "results.py", "tuning.py")
# the data files a verdict reads (relative to the repository's root), hashed with the design
DATA_FILES: tuple[str, ...] = ("config/claims_noise.csv",)
_QUICK = ("config/config.yaml", "config/quick.yaml")
# the profiles whose designs the committed record fixes: their config files, merged in order
PROFILES = {"paper": ("config/config.yaml",),
            "hour": ("config/config.yaml", "config/hour.yaml"),
            "quick": _QUICK,
            "quick_other_seeds": (*_QUICK, "config/quick_other_seeds.yaml"),
            "quick_third_seeds": (*_QUICK, "config/quick_third_seeds.yaml"),
            "gpu_quick": (*_QUICK, "config/gpu_quick.yaml")}
PACKAGE = Path(__file__).resolve().parent.parent
NO_REVISION = "none"  # a run whose run.json names no engine revision (trained before the stamp)
EXPLORATORY = "exploratory: the pre-registration was written after judged runs existed"


def text_sha256(path: str | Path) -> str:
    """sha256 of a text file's UTF-8 bytes with its line endings made '\\n'."""
    text = Path(path).read_bytes().replace(b"\r\n", b"\n")
    return hashlib.sha256(text).hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical_sha(body: Any) -> str:
    return _sha(json.dumps(body, sort_keys=True, separators=(",", ":")))


def rule_files(folder: str | Path | None = None,
               patterns: Sequence[str] | None = None) -> tuple[str, ...]:
    """The deciding modules of ``folder`` (default PACKAGE; patterns default RULE_PATTERNS):
    each pattern's files in sorted order, a plain name as it is (present or not)."""
    root = Path(PACKAGE if folder is None else folder)
    out: list[str] = []
    for pattern in RULE_PATTERNS if patterns is None else patterns:
        if any(c in pattern for c in "*?["):
            out += sorted(p.relative_to(root).as_posix() for p in root.glob(pattern)
                          if p.is_file())
        else:
            out.append(pattern)
    return tuple(dict.fromkeys(out))


def rule_sha256(folder: str | Path | None = None, files: Sequence[str] | None = None
                ) -> tuple[str, dict[str, str | None]]:
    """The rule's hash over ``files`` of ``folder`` (default :func:`rule_files`; one line
    'name sha256' each, in their order; '-' and None for a file that does not exist), and
    each file's hash."""
    root = Path(PACKAGE if folder is None else folder)
    each = {name: text_sha256(root / name) if (root / name).is_file() else None
            for name in (rule_files(root) if files is None else files)}
    return _sha("".join(f"{name} {sha or '-'}\n" for name, sha in each.items())), each


def _order(value: Any) -> tuple:
    """A sort key over a tuned key's values: numbers, then text, then null (no clipping)."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def _values(values: Iterable[Any]) -> list[Any]:
    return sorted(set(values), key=_order)


def _setting(cfg: RunConfig) -> str:
    """A run's config without its seed, and its method's revision (as its run id has it)."""
    identity = {k: v for k, v in cfg.identity().items() if k != "seed"}
    return json.dumps({**identity, "revision": methods.method(cfg.normalizer).revision},
                      sort_keys=True)


def method_grids() -> dict[str, dict[str, list[Any]]]:
    """Each method's own tuning grids (fednorm.methods.Tune), FedFN's scale as 'feature_norm'."""
    out = {m.name: {t.key: list(t.grid) for t in m.tunes} for m in methods.METHODS if m.tunes}
    return {**out, "feature_norm": {t.key: list(t.grid) for t in methods.FEATURE_NORM_TUNES}}


def _experiment(plan: Plan, name: str, tuning: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """One experiment's design and the same without its seeds (its settings' hash instead)."""
    ids = sorted(plan.experiments.get(name, ()))
    cfgs = [plan.runs[r] for r in ids]
    shared: dict[str, Any] = {"steps": _values(c.steps for c in cfgs)}
    if tuning:
        shared["grid"] = {k: _values(getattr(c, k) for c in cfgs) for k in methods.TUNED_KEYS}
    seeds = _values(c.seed for c in cfgs)
    seedless = {**shared, "seeds": len(seeds),
                "settings": _sha("\n".join(sorted({_setting(c) for c in cfgs})))}
    return {"runs": ids, "seeds": seeds, **shared}, seedless


def design(plan: Plan, claims: Claims, data: Sequence[str | Path] | None = None
           ) -> dict[str, Any]:
    """What the plan fixes before the runs, with its ``sha256`` over canonical JSON:
    ``experiments``, each experiment a claim in words names and each tuning experiment -> its
    planned run ids (sorted), their distinct ``seeds`` and ``steps``, and for a tuning one its
    ``grid`` (each tuned key, fednorm.methods.TUNED_KEYS -> the values its runs take);
    ``methods``, each method's own tuning grids (:func:`method_grids`); ``stage2``, the second
    stage's seeds (None: one stage); ``data``, each data file (default
    DATA_FILES) -> its hash (as :func:`text_sha256`). ``seedless_sha256`` hashes the same with
    the seeds counted and each experiment's runs as the hash of their configs but the seed:
    equal for the profile on disjoint seeds (``seed_offset``)."""
    words = claims.words
    tuning = set(words.tuning)
    names = sorted({*(n for claim in words.claims for n in claim.experiments), *tuning})
    parts = {n: _experiment(plan, n, n in tuning) for n in names}
    stage2 = plan.stage2
    files = {Path(p).as_posix(): text_sha256(p) for p in (DATA_FILES if data is None else data)}
    body = {"experiments": {n: full for n, (full, _) in parts.items()},
            "methods": method_grids(),
            "stage2": stage2 and {"seeds": list(stage2.seeds)},
            "data": files}
    seedless = {**body, "experiments": {n: bare for n, (_, bare) in parts.items()},
                "stage2": stage2 and {"seeds": len(stage2.seeds)}}
    return {**body, "seedless_sha256": _canonical_sha(seedless), "sha256": _canonical_sha(body)}


def run_revisions(summary: pd.DataFrame) -> dict[str, int]:
    """Engine revision -> the number of the summary's runs it trained (NO_REVISION: a run
    whose run.json names none; a summary without the column: every run)."""
    runs = summary.drop_duplicates("run_id")
    column = runs["engine_revision"] if "engine_revision" in runs else pd.Series(
        [None] * len(runs), dtype=object)
    return dict(Counter(NO_REVISION if pd.isna(r) else str(r) for r in column))


def found_runs(plan: Plan, plan_design: Mapping[str, Any]) -> dict[str, str]:
    """The design's runs whose run.json exists in the plan's results folder -> the engine
    revision that trained each (NO_REVISION where it names none or cannot be read)."""
    ids = dict.fromkeys(r for e in plan_design["experiments"].values() for r in e["runs"])
    out = {}
    for run_id in ids:
        path = Path(plan.paths.run_dir(run_id)) / "run.json"
        if path.is_file():
            try:
                meta = json.loads(path.read_text())
            except (OSError, ValueError):
                meta = {}
            out[run_id] = str(meta.get("engine_revision") or NO_REVISION)
    return out


def revisions_text(counts: Mapping[str, int]) -> str:
    """'runs of 2 engine revisions: 2cf004e (430 runs), none recorded (20 runs)'."""
    items = sorted(counts.items(), key=lambda kv: (kv[0] == NO_REVISION, -kv[1], kv[0]))
    return (f"runs of {len(items)} engine revision{'s' * (len(items) != 1)}: "
            + ", ".join(f"{'none recorded' if r == NO_REVISION else r} ({n} run"
                        f"{'s' * (n != 1)})" for r, n in items))


def revisions_line(record: Mapping[str, Any]) -> str:
    """One markdown line for the ledger: the engine revisions of its runs, the code's."""
    counts = record.get("run_revisions") or {}
    return (f"**Engine**: {revisions_text(counts) if counts else 'no runs'}; the ledger's "
            f"code is at engine revision {record['engine_revision']}.")


def preregistration(claims: str | Path, folder: str | Path | None = None,
                    files: Sequence[str] | None = None,
                    plan_design: Mapping[str, Any] | None = None,
                    engine: str | None = None,
                    runs: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The record written beside claims_words.csv: the claims file and its hash, the rule's
    hash and its files' (:func:`rule_sha256`), the engine revision (default the tree's), the
    plan's ``design`` where given, and ``sha256``, the hash of the hashes (one string to
    compare); with ``runs`` (:func:`run_revisions`), the revisions of the runs judged, outside
    the hash (they are found, not fixed)."""
    rule, each = rule_sha256(folder, files)
    claims_sha = text_sha256(claims)
    engine = ENGINE_REVISION if engine is None else engine
    hashes = [claims_sha, rule, engine, *([plan_design["sha256"]] if plan_design else [])]
    return {"claims_file": str(claims), "claims_sha256": claims_sha, "rule_sha256": rule,
            "rule_files": each, "engine_revision": engine,
            **({"design": dict(plan_design)} if plan_design else {}),
            **({"run_revisions": dict(runs)} if runs is not None else {}),
            "sha256": _sha(" ".join(hashes) + "\n")}


def profile_plans(profiles: Mapping[str, Sequence[str | Path]] | None = None
                  ) -> dict[str, Plan]:
    """Each profile's plan (default PROFILES), its config files merged in order."""
    return {name: load_plan(merged_config(paths))
            for name, paths in (PROFILES if profiles is None else profiles).items()}


def fixed(plans: Mapping[str, Plan] | None = None, data: Sequence[str | Path] | None = None,
          folder: str | Path | None = None, files: Sequence[str] | None = None,
          engine: str | None = None) -> tuple[Path, dict[str, Any]]:
    """What the committed record would hold now, but its date, and where it is (the first
    profile's ``claims_prereg``): its claims file's hash, the rule's, the engine revision and
    each profile's design (default :func:`profile_plans`)."""
    plans = profile_plans() if plans is None else plans
    first = next(iter(plans.values()))
    if not (first.claims and first.claims_prereg):
        raise ConfigError(f"config: keys 'claims' and 'claims_prereg' have values "
                          f"{first.claims!r} and {first.claims_prereg!r}; allowed: two paths")
    record = preregistration(first.claims, folder, files, engine=engine)
    del record["sha256"]
    record["designs"] = {name: design(plan, load_claims(plan.claims), data)
                         for name, plan in plans.items() if plan.claims}
    return Path(first.claims_prereg), record


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "absent"


def _differs(what: str, now: str | None, then: str | None) -> list[str]:
    return [f"{what}: {_short(now)} now, {_short(then)} committed"] if now != then else []


def _seeds(seeds: Sequence[int]) -> str:
    """'2-7', '0, 8-10': runs of consecutive seeds as ranges."""
    spans: list[list[int]] = []
    for s in seeds:
        if spans and s == spans[-1][-1] + 1:
            spans[-1].append(s)
        else:
            spans.append([s])
    return ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else f"{s[0]}" for s in spans) or "none"


def _experiment_lines(name: str, now: Mapping[str, Any] | None,
                      then: Mapping[str, Any] | None) -> list[str]:
    if now == then:
        return []
    if now is None or then is None:
        return [f"experiment {name} {'absent now' if now is None else 'not committed'}"]
    parts = []
    if now["seeds"] != then["seeds"]:
        parts.append(f"seeds {_seeds(now['seeds'])} now, {_seeds(then['seeds'])} committed")
    if now["steps"] != then["steps"]:
        parts.append(f"steps {now['steps']} now, {then['steps']} committed")
    grid, old = now.get("grid", {}), then.get("grid", {})
    parts += [f"grid of {k} {grid.get(k)} now, {old.get(k)} committed"
              for k in dict.fromkeys([*grid, *old]) if grid.get(k) != old.get(k)]
    moved = set(now["runs"]) ^ set(then["runs"])
    if moved:
        parts.append(f"{len(set(now['runs']) - set(then['runs']))} run ids new, "
                     f"{len(set(then['runs']) - set(now['runs']))} gone "
                     f"(e.g. {sorted(moved)[0]})")
    return [f"experiment {name}: {'; '.join(parts)}"]


def design_differences(now: Mapping[str, Any], then: Mapping[str, Any] | str | None
                       ) -> list[str]:
    """What differs between two designs, a part each (an experiment's seeds, steps, tuning
    grid or run ids; the methods' grids; the second stage; a data file); a committed design
    written as a hash alone differs as a whole."""
    if not isinstance(then, Mapping) or "experiments" not in then:
        old = then.get("sha256") if isinstance(then, Mapping) else then
        return _differs("design", now["sha256"], old)
    if now["sha256"] == then["sha256"]:
        return []
    exps, old = now["experiments"], then["experiments"]
    out = [line for n in dict.fromkeys([*exps, *old])
           for line in _experiment_lines(n, exps.get(n), old.get(n))]
    grids, old_grids = now["methods"], then.get("methods", {})
    out += [f"the tuning grids of method {m}: {grids.get(m)} now, {old_grids.get(m)} committed"
            for m in dict.fromkeys([*grids, *old_grids]) if grids.get(m) != old_grids.get(m)]
    if now["stage2"] != then.get("stage2"):
        out.append(f"stage2 {now['stage2']} now, {then.get('stage2')} committed")
    data, old_data = now["data"], then.get("data", {})
    for path in dict.fromkeys([*data, *old_data]):
        out += _differs(f"data file {path}", data.get(path), old_data.get(path))
    return out or [f"design: {_short(now['sha256'])} now, {_short(then['sha256'])} committed"]


def revision_lines(what: str, counts: Mapping[str, int], engine: str | None) -> list[str]:
    """A line where some run's engine revision is not ``engine`` (the recorded one)."""
    if not counts or set(counts) == {engine}:
        return []
    return [f"{what}: {revisions_text(counts)}; the pre-registration's is {engine}"]


def check(record: Mapping[str, Any], committed: Mapping[str, Any]) -> list[str]:
    """What differs between a record computed now and the committed one, a line each: the
    claims file, each rule file, the engine revision, the design (a whole record's
    ``designs``, each profile's, part by part; a ledger's ``design`` must be one of the
    committed profiles', and is told against the nearest of them) and a ledger's runs' engine
    revisions (each must be the committed one)."""
    out = _differs(f"claims file {record['claims_file']}", record["claims_sha256"],
                   committed.get("claims_sha256"))
    files, then = record["rule_files"], committed.get("rule_files", {})
    for name in dict.fromkeys([*files, *then]):
        out += _differs(f"rule file {name}", files.get(name), then.get(name))
    engine = committed.get("engine_revision")
    if record["engine_revision"] != engine:
        out.append(f"engine revision: {record['engine_revision']} now, {engine} committed")
    designs = committed.get("designs", {})
    if "designs" in record:
        for name in dict.fromkeys([*record["designs"], *designs]):
            now, old = record["designs"].get(name), designs.get(name)
            lines = (design_differences(now, old) if now and old else
                     [f"absent {'now' if now is None else 'from the record'}"])
            out += [f"design of profile {name}: {line}" for line in lines]
    elif "design" in record:
        out += _ledger_design(record["design"], designs)
    return out + revision_lines("the ledger's runs", record.get("run_revisions", {}), engine)


def _ledger_design(now: Mapping[str, Any], designs: Mapping[str, Any]) -> list[str]:
    shas = {n: d["sha256"] if isinstance(d, Mapping) else d for n, d in designs.items()}
    if now["sha256"] in shas.values():
        return []
    head = (f"design {_short(now['sha256'])}: none of the committed ("
            + ", ".join(f"{n} {_short(s)}" for n, s in shas.items()) + ")")
    if not designs:
        return [head]
    nearest = min(designs, key=lambda n: len(design_differences(now, designs[n])))
    return [f"{head}; against {nearest}: " + "; ".join(design_differences(now, designs[nearest]))]


def verified(record: dict[str, Any], path: str | Path | None) -> dict[str, Any]:
    """``record`` with the date of the committed record at ``path`` and whether it is
    exploratory (None: no check, the record as it is); a ConfigError in one line naming each
    difference (:func:`check`)."""
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
    return {**record, "fixed_on": committed["fixed_on"],
            **({"exploratory": True} if committed.get("exploratory") else {})}


def _modules(files: Iterable[str]) -> str:
    """'claims (16 modules), config (8), methods, plan.stage2': a folder's modules counted."""
    folders = Counter(n.split("/")[0] for n in files if "/" in n)
    out, seen = [], set()
    for name in files:
        top = name.split("/")[0]
        if "/" in name and folders[top] > 1:
            if top not in seen:
                seen.add(top)
                out.append(f"{top} ({folders[top]} modules)")
        else:
            out.append(name.removesuffix(".py").replace("/", "."))
    return ", ".join(out)


def prereg_line(record: dict[str, Any]) -> str:
    """One markdown line for the ledger: its date and hashes (their first 12 characters), the
    engine revision, and whether it is exploratory."""
    when = f"fixed on {record['fixed_on']}" if "fixed_on" in record else "not committed"
    when += f"; {EXPLORATORY}" if record.get("exploratory") else ""
    design_sha = f", the design {record['design']['sha256'][:12]}" if "design" in record else ""
    return (f"**Pre-registration** (claims_prereg.json, {when}): {record['sha256'][:12]}, of "
            f"the claims file `{Path(record['claims_file']).name}` "
            f"{record['claims_sha256'][:12]}{design_sha}, the engine revision "
            f"{record['engine_revision']} and the rule {record['rule_sha256'][:12]} (fednorm: "
            f"{_modules(record['rule_files'])}).")


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
