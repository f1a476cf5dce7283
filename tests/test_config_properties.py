"""Properties of the validators (run config, pipeline config, claims file), on configurations
generated from the validators' own description of their keys: fednorm.config's rules
(``_RULES``, ``_BUDGET_RULES``: OneOf, IntIn, NumberIn, ...), the pipeline's sections and
execution rules, the figure kinds' keys, the claims parser's required and optional keys.

- valid configurations validate (or meet a cross-check: a ConfigError naming a key) and plan;
- mutated ones (a key misspelt, a value of the wrong type, out of range, NaN or infinite, a list
  where a scalar belongs, a huge integer, an empty grid, an unknown experiment or figure kind, a
  required claim key dropped) raise ConfigError naming the key, never another exception.

Hypothesis profiles (tests/conftest.py): 'ci' (derandomized, a fixed example count) by default;
``FEDNORM_HYPOTHESIS=thorough`` or ``pytest --hypothesis-profile thorough`` for many more.
"""

import math
import re
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import example, given

from fednorm.claims import numbers as claims_module
from fednorm.config import (
    _BUDGET_RULES,
    _RULES,
    BUDGET_KEYS,
    FIELDS,
    INT_MAX,
    Boolean,
    ConfigError,
    Finite,
    IntIn,
    ListOf,
    Nullable,
    NumberIn,
    OneOf,
    run_config,
)
from fednorm.metrics import FIGURE_METRICS
from fednorm.plan import EXECUTION_RULES, FIGURE_KEYS, REQUIRED, TOP_KEYS, load_plan
from fednorm.plan.jobs import Rates
from fednorm.results import AT

# A valid run at the quick scale: the base that generated keys override.
BASE = {"dataset": "synthetic", "n_train": 200, "n_test": 100, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 4, "n_clients": 4, "steps": 6, "lr": [0.05],
        "lr_milestones": [], "eval_every": 3, "heterogeneity": 0.0}
ALL_RULES = {**_RULES, **_BUDGET_RULES}
HUGE = 10**400  # an integer no float holds


# ---------------------------------------------------------------------------------------------
# Strategies from a rule's description.


def valid(rule: Callable[[Any], str | None]) -> st.SearchStrategy | None:
    """Values the rule allows, from its fields; None for a rule that describes nothing."""
    match rule:
        case OneOf(allowed=allowed):
            return st.sampled_from(allowed)
        case IntIn(low=low, high=high):
            return st.integers(low, high)
        case NumberIn(low=low, high=high, low_open=lo, high_open=hi):
            top = None if math.isinf(high) else high
            return st.floats(low, top, exclude_min=lo, exclude_max=hi and top is not None,
                             allow_nan=False, allow_infinity=False)
        case Nullable(rule=inner):
            return st.none() | valid(inner)
        case Rates(number=number):  # the numbers (a mapping's parts depend on the plan)
            return valid(number)
        case Finite():
            return st.floats(allow_nan=False, allow_infinity=False)
        case Boolean():
            return st.booleans()
        case ListOf(item=item, min_len=n, increasing=up):
            items = st.lists(valid(item), min_size=n, max_size=3, unique=up)
            return items.map(sorted) if up else items
    return None


def _below(rule: IntIn | NumberIn) -> st.SearchStrategy:
    if isinstance(rule, IntIn):
        return st.integers(max_value=rule.low - 1)
    return st.floats(max_value=rule.low, exclude_max=not rule.low_open, allow_nan=False,
                     allow_infinity=False)


def invalid(rule: Callable[[Any], str | None]) -> st.SearchStrategy:
    """Values the rule rejects: the wrong type, out of range, NaN or infinite, a list where a
    scalar belongs, a huge integer."""
    other = st.text(max_size=5) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    match rule:
        case OneOf(allowed=allowed):
            near = st.sampled_from(allowed).map(lambda v: v.upper() + "x")
            return near | st.integers() | st.none() | st.booleans() | st.lists(
                st.sampled_from(allowed), min_size=1, max_size=2)
        case IntIn(low=low, high=high):
            return (_below(rule) | st.integers(min_value=high + 1) | st.just(HUGE)
                    | st.floats() | st.booleans() | st.none() | other
                    | st.lists(st.integers(low, low + 3), min_size=1, max_size=2))
        case NumberIn(high=high):
            above = st.floats(min_value=high, exclude_min=not rule.high_open,
                              allow_nan=False) if not math.isinf(high) else st.just(math.inf)
            return (_below(rule) | above | st.sampled_from([math.nan, -math.inf, HUGE, -HUGE])
                    | st.booleans() | st.none() | other | st.lists(valid(rule), min_size=1,
                                                                   max_size=2))
        case Nullable(rule=inner):
            return invalid(inner).filter(lambda v: v is not None)
        case Rates(number=number):
            return invalid(number).filter(lambda v: Rates(number)(v) is not None)
        case Finite():
            return st.sampled_from([math.nan, math.inf, -math.inf, HUGE, None, True]) | other
        case Boolean():
            return st.integers() | st.sampled_from(["yes", "true", None]) | st.lists(
                st.booleans(), min_size=1, max_size=1)
        case ListOf(item=item, min_len=n, increasing=up):
            bad_item = st.lists(invalid(item), min_size=1, max_size=2)
            scalar = valid(item)  # a scalar where a list belongs
            wrong = bad_item | scalar | other
            if n:
                wrong |= st.just([])
            if up:
                wrong |= st.lists(valid(item), min_size=2, max_size=3, unique=True).map(
                    lambda xs: sorted(xs, reverse=True))
            return wrong
    raise AssertionError(f"no strategy for the rule {rule!r}")


def misspelt(key: str, allowed) -> st.SearchStrategy:
    """The key with a character doubled, dropped or upper-cased: never an allowed key."""
    edits = st.integers(0, len(key) - 1).flatmap(lambda i: st.sampled_from([
        key[:i] + key[i] + key[i:], key[:i] + key[i + 1:], key[:i] + key[i].upper() + key[i + 1:],
        key + "s"]))
    return edits.filter(lambda k: k and k not in allowed)


def named_key(error: ConfigError, key: str) -> bool:
    return f"key '{key}'" in str(error)


def generated_runs() -> st.SearchStrategy:
    """BASE with up to four keys set to values their rules allow (cross-checks may still fail)."""
    keys = st.lists(st.sampled_from(sorted(_RULES)), max_size=4, unique=True)
    return keys.flatmap(lambda ks: st.fixed_dictionaries({k: valid(_RULES[k]) for k in ks})).map(
        lambda changes: {**BASE, **changes})


# ---------------------------------------------------------------------------------------------
# Run configurations.


def test_every_rule_describes_its_values():
    """The strategies cover every key: a rule added without a description fails here."""
    for key, rule in ALL_RULES.items():
        assert valid(rule) is not None, key


@given(generated_runs())
@example({**BASE, "seed": INT_MAX, "steps": INT_MAX - INT_MAX % 3, "local_steps": 3})
def test_valid_values_validate_or_name_a_key_and_plan(values):
    try:
        cfg = run_config(values)
    except ConfigError as error:  # a cross-check between keys
        assert re.search(r"key '(\w+)'", str(error)).group(1) in FIELDS, error
        return
    assert run_config(cfg.identity()) == cfg  # what a run.json holds gives the run back
    plan = load_plan({"run": values, "experiments": {"e": {"grid": {"seed": [cfg.seed]}}}})
    assert plan.runs == {cfg.run_id: cfg}


@st.composite
def mutated_run(draw) -> tuple[str, dict]:
    key = draw(st.sampled_from(sorted(ALL_RULES)))
    return key, {**BASE, key: draw(invalid(ALL_RULES[key]))}


@given(mutated_run())
@example(("seed", {**BASE, "seed": 10**30}))  # overflowed the int64 key of fednorm.rng
@example(("participation", {**BASE, "participation": HUGE}))  # OverflowError in isfinite
@example(("epochs", {**BASE, "epochs": HUGE}))
@example(("lr", {**BASE, "lr": [HUGE]}))
@example(("foe_eps", {**BASE, "foe_eps": HUGE}))
@example(("heterogeneity", {**BASE, "heterogeneity": math.nan}))
@example(("momentum", {**BASE, "momentum": [0.9]}))
@example(("lr_decay_at", {**BASE, "lr_decay_at": [0.5, 1.0]}))
def test_a_bad_value_is_a_config_error_naming_its_key(case):
    key, values = case
    with pytest.raises(ConfigError) as error:
        run_config(values)
    assert named_key(error.value, key), error.value


@given(st.sampled_from(["epochs", "rounds"]), st.sampled_from(["n_clients", "batch_size",
                                                                "local_steps", "n_train"]),
       st.sampled_from(["a", 2.5, None, [4]]))
@example("epochs", "n_clients", "a")  # the budget multiplied the string: TypeError
@example("epochs", "n_train", None)  # blamed 'epochs' for the 0 images of no n_train
def test_a_budget_never_reads_a_bad_key(budget, key, value):
    values = {k: v for k, v in BASE.items() if k != "steps"}
    with pytest.raises(ConfigError) as error:
        run_config({**values, budget: 2, key: value})
    assert named_key(error.value, key), error.value


@given(st.sampled_from(sorted(FIELDS + BUDGET_KEYS)).flatmap(
    lambda k: misspelt(k, FIELDS + BUDGET_KEYS)))
def test_a_misspelt_key_is_named(key):
    with pytest.raises(ConfigError, match=f"unknown key '{re.escape(key)}'"):
        run_config({**BASE, key: 1})


@given(st.sampled_from(sorted(BASE)))
def test_a_dropped_key_takes_its_default_or_is_named(key):
    values = {k: v for k, v in BASE.items() if k != key}
    try:
        assert getattr(run_config(values), key) == getattr(run_config({}), key) or \
            key in ("n_train", "n_test")
    except ConfigError as error:
        assert re.search(r"key '(\w+)'", str(error)).group(1) in FIELDS, error


# ---------------------------------------------------------------------------------------------
# Pipeline configurations (fednorm.plan.load_plan).

EXPERIMENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
FREE_KINDS = sorted(k for k, keys in FIGURE_KEYS.items() if REQUIRED not in keys.values())


@st.composite
def pipelines(draw) -> dict:
    """A pipeline config: execution keys from their rules, BASE as the run defaults, one or
    two experiments with a `set` and a small grid, figures of the kinds that need no key."""
    execution = {k: draw(valid(r)) for k, r in EXECUTION_RULES.items()
                 if valid(r) is not None and draw(st.booleans())}
    execution["gpus_per_job"] = 0  # with GPUs, cpus_per_gpu x gpus must cover the threads
    names = draw(st.lists(EXPERIMENT, min_size=1, max_size=2, unique=True))
    experiments = {}
    for name in names:
        grid_keys = draw(st.lists(st.sampled_from(sorted(_RULES)), max_size=2, unique=True))
        grid = {k: draw(st.lists(valid(_RULES[k]), min_size=1, max_size=2)) for k in grid_keys}
        fixed = draw(st.fixed_dictionaries({}, optional={
            k: valid(_RULES[k]) for k in ("normalizer", "partition", "local_steps")}))
        experiments[name] = {"set": fixed, "grid": grid}
    figures = {f"fig{i}": {"experiment": draw(st.sampled_from(names)),
                           "kind": draw(st.sampled_from(FREE_KINDS)),
                           "y": draw(st.sampled_from(FIGURE_METRICS))}
               for i in range(draw(st.integers(0, 2)))}
    return {"paths": {"results": "r", "figures": "f", "data": "d"}, "execution": execution,
            "run": dict(BASE), "experiments": experiments, "figures": figures}


@given(pipelines())
def test_generated_pipelines_plan_or_name_a_key(config):
    try:
        plan = load_plan(config)
    except ConfigError as error:
        assert re.search(r"key '(\w+)'", str(error)), error
        return
    assert set(plan.experiments) == set(config["experiments"])
    assert set(plan.figures) == set(config["figures"])
    assert {r for ids in plan.experiments.values() for r in ids} == set(plan.runs)


def _pipeline_mutations(config: dict) -> st.SearchStrategy:
    """(the key an error must name, the mutated config)."""
    name = next(iter(config["experiments"]))
    top = misspelt("experiments", TOP_KEYS).map(lambda k: (k, {**config, k: {}}))
    keyed_execution = st.sampled_from([k for k, r in EXECUTION_RULES.items()
                                     if valid(r) is not None])
    execution = keyed_execution.flatmap(lambda k: invalid(EXECUTION_RULES[k]).map(
        lambda v: (k, {**config, "execution": {**config["execution"], k: v}})))
    run = st.sampled_from(sorted(_RULES)).flatmap(lambda k: invalid(_RULES[k]).map(
        lambda v: (k, {**config, "run": {**config["run"], k: v}})))
    empty_grid = st.sampled_from(sorted(_RULES)).map(lambda k: (k, {
        **config, "experiments": {**config["experiments"], name: {"grid": {k: []}}}}))
    scalar_grid = st.sampled_from(sorted(_RULES)).flatmap(lambda k: valid(_RULES[k]).map(
        lambda v: (k, {**config, "experiments": {name: {"grid": {k: v}}}})))
    figure = {"experiment": name, "kind": "curves"}
    unknown_experiment = EXPERIMENT.filter(lambda e: e not in config["experiments"]).map(
        lambda e: ("experiment", {**config, "figures": {"f": {**figure, "experiment": e}}}))
    unknown_kind = st.text(min_size=1, max_size=6).filter(lambda k: k not in FIGURE_KEYS).map(
        lambda k: ("kind", {**config, "figures": {"f": {**figure, "kind": k}}}))
    paths = st.sampled_from(["results", "figures", "data"]).flatmap(
        lambda k: st.sampled_from([None, 3, [], "", ["r"]]).map(
            lambda v: (k, {**config, "paths": {**config["paths"], k: v}})))
    return st.one_of(top, execution, run, empty_grid, scalar_grid, unknown_experiment,
                     unknown_kind, paths)


def _plans(config: dict) -> bool:
    try:
        load_plan(config)
    except ConfigError:
        return False
    return True


# a mutation of a pipeline that is valid, so that the error can only come from the mutation
@given(pipelines().filter(_plans).flatmap(_pipeline_mutations))
@example(("results", {"paths": {"results": ["r"]}, "run": BASE,
                      "experiments": {"e": {"grid": {"seed": [0]}}}}))  # was accepted
@example(("aggregator", {"run": {**BASE, "aggregator": "MEANx"},  # was accepted: unused
                         "experiments": {"e": {"set": {"aggregator": "mean"}}}}))
def test_a_mutated_pipeline_is_a_config_error_naming_the_key(case):
    key, config = case
    with pytest.raises(ConfigError) as error:
        load_plan(config)
    assert key in str(error.value), error.value


# ---------------------------------------------------------------------------------------------
# Claims files (fednorm.claims.parse_claims), generated from the parser's required and
# optional keys; a key this module cannot generate is left to its default.

SETTING = st.lists(st.sampled_from(["normalizer", "partition", "heterogeneity", "seed",
                                    "local_steps"]), min_size=1, max_size=3, unique=True
                   ).flatmap(lambda ks: st.fixed_dictionaries({k: valid(_RULES[k]) for k in ks}))
FINITE = valid(Finite())
CLAIM_VALUES = {
    "id": st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
    "paper": st.sampled_from(sorted(claims_module.PAPERS)),
    "source": st.text(min_size=1, max_size=8).filter(str.strip),
    "setting": SETTING,
    "value": FINITE,
    "recipe": st.none(),
    "metric": st.sampled_from(FIGURE_METRICS),
    "at": st.sampled_from(sorted(AT)),
    "spread": st.none() | st.floats(0, 100),
    "tolerance": st.floats(0, 100),
    "note": st.text(max_size=8),
}
BAD_CLAIM_VALUES = {
    "paper": st.sampled_from(["FBN", "fedprox", 1, None]),
    "setting": st.sampled_from([{}, [], "bn", {"normalizer": "batchnorm"}]),
    "value": invalid(Finite()),
    "spread": st.sampled_from([-1.0, math.nan, math.inf, HUGE, "1", [1.0]]),
    "tolerance": st.sampled_from([-1.0, math.nan, math.inf, HUGE, None, [1.0]]),
    "metric": st.sampled_from(["accuracy", 1, None]),
    "at": st.sampled_from(["last", None, 1]),
}


@st.composite
def claim_files(draw) -> dict:
    keys = [*claims_module._REQUIRED, *claims_module._OPTIONAL]
    entries = []
    for i in range(draw(st.integers(1, 3))):
        entry = {k: draw(CLAIM_VALUES[k]) for k in keys if k in CLAIM_VALUES and (
            k in claims_module._REQUIRED or draw(st.booleans()))}
        entry["id"] = f"{entry['id']}-{i}"  # unique
        entries.append(entry)
    return {"claims": entries}


@given(claim_files())
def test_generated_claims_parse_or_name_a_key(spec):
    try:
        parsed = claims_module.parse_claims(spec)
    except ConfigError as error:  # a setting's cross-check over RunConfig's defaults
        assert re.search(r"key '(\w+)'", str(error)).group(1) in FIELDS, error
        return
    assert [c.id for c in parsed] == [e["id"] for e in spec["claims"]]


@st.composite
def mutated_claims(draw) -> tuple[str, dict]:
    spec = draw(claim_files())
    for entry in spec["claims"]:  # a setting that validates: only the mutation is wrong
        entry["setting"] = {"normalizer": "bn"}
    entry = dict(spec["claims"][0])
    how = draw(st.sampled_from(["drop", "misspell", "value"]))
    if how == "drop":
        key = draw(st.sampled_from(claims_module._REQUIRED))
        entry.pop(key)
    elif how == "misspell":
        allowed = (*claims_module._REQUIRED, *claims_module._OPTIONAL)
        key = draw(st.sampled_from(sorted(allowed)).flatmap(lambda k: misspelt(k, allowed)))
        entry[key] = 1
    else:
        key = draw(st.sampled_from(sorted(BAD_CLAIM_VALUES)))
        entry[key] = draw(BAD_CLAIM_VALUES[key])
    key = "normalizer" if entry.get("setting") == {"normalizer": "batchnorm"} else key
    return key, {"claims": [entry, *spec["claims"][1:]]}


@given(mutated_claims())
@example(("value", {"claims": [{"id": "c", "paper": "fbn", "source": "Fig 3a",
                                "setting": {"normalizer": "bn"}, "value": HUGE}]}))
def test_a_mutated_claim_is_a_config_error_naming_the_key(case):
    key, spec = case
    with pytest.raises(ConfigError) as error:
        claims_module.parse_claims(spec)
    assert f"'{key}'" in str(error.value), error.value
