"""The verdict rule (fednorm.claims.rule) on drawn experiments: the claim and its mirror judged
alike, its error rates at the boundaries of its nulls, its power, and the statistics that stand
beside the t (sign-flip p, collapsing seeds) against references written another way."""

import itertools

import numpy as np
import pytest
from scipy import stats

from fednorm.claims.rule import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    claim_codes,
    claim_verdict,
    outlier_seeds,
    sign_flip_ps,
    verdict_codes,
)

DRAWS = 20_000


def _draws(effects, sd=3.0, seeds=6, seed=0, lattice=0.1):
    """Values (DRAWS, settings, seeds): setting j at effects[j], a seed's common part shared by
    its settings, each run with its own noise, rounded to the lattice."""
    rng = np.random.default_rng(seed)
    effects = np.asarray(effects, dtype=float)
    x = (effects[None, :, None] + rng.normal(0, 2.0, (DRAWS, 1, seeds))
         + rng.normal(0, sd, (DRAWS, len(effects), seeds)))
    return np.round(x / lattice) * lattice


def _mirrored(codes):
    return np.where(codes == NEGLIGIBLE, NEGLIGIBLE, -codes)


@pytest.mark.parametrize("within", [False, True])
def test_the_claim_and_its_mirror_get_opposite_verdicts_unit_by_unit(within):
    """Three settings, all pairs as units (shared runs), grouped in one claim, a diverged seed
    here and there, a unit with one seed, a side at an edge: codes on −c are those on c,
    mirrored, in every draw."""
    values = _draws([0.0, 1.0, 2.5])
    values[::7, 0, 0] = np.nan
    values[::11, 2, :5] = np.nan
    contrasts = np.array([[1.0, -1.0, 0.0], [1.0, 0.0, -1.0], [0.0, 1.0, -1.0]])
    n_for = np.zeros((DRAWS, 3), dtype=int)
    n_for[::13, 1] = 1
    common = dict(claim=np.zeros(3, dtype=int), within=within, delta=3.0, lattice=0.1)
    v = verdict_codes(values, contrasts, n_for=n_for, n_against=n_for[:, ::-1],
                      edge=np.array([1, 0, -1]), **common)
    m = verdict_codes(values, -contrasts, n_for=n_for[:, ::-1] * 0 + n_for[:, ::-1],
                      n_against=n_for, edge=np.array([-1, 0, 1]), **common)
    if within:  # a near-equality is symmetric in its sides: the same verdicts
        assert (v.codes == m.codes).all()
    else:
        assert (_mirrored(v.codes) == m.codes).all()
    assert len(np.unique(v.codes)) >= 3  # the draws reach several verdicts


def test_error_rates_at_the_nulls_boundaries_are_at_most_alpha():
    """At a true margin 0 the unit holds and is contradicted each at most α of the time; at a
    true margin of ±sesoi (2 points) it is negligible at most α of the time."""
    c = np.array([[1.0, -1.0]])
    zero = verdict_codes(_draws([0.0, 0.0]), c, lattice=0.1).codes
    assert (zero == HOLDS).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / DRAWS)
    assert (zero == CONTRADICTED).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / DRAWS)
    for edge in (2.0, -2.0):
        at = verdict_codes(_draws([edge, 0.0], sd=1.0, seed=1), c, lattice=0.1).codes
        assert (at == NEGLIGIBLE).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / DRAWS)


def test_clean_power_at_four_points_with_sd_three_on_six_seeds():
    codes = verdict_codes(_draws([4.0, 0.0], sd=3.0, seed=2), np.array([[1.0, -1.0]]),
                          lattice=0.1).codes
    assert (codes == HOLDS).mean() >= 0.5
    mirror = verdict_codes(_draws([0.0, 4.0], sd=3.0, seed=2), np.array([[1.0, -1.0]]),
                           lattice=0.1).codes
    assert (mirror == CONTRADICTED).mean() == pytest.approx((codes == HOLDS).mean(), abs=0.02)


def test_a_claim_holds_when_every_unit_does_and_is_contradicted_after_holm():
    values = np.array([[[60.0, 61, 62, 60, 61, 62], [50, 50, 50, 50, 50, 50],
                        [55, 66, 58, 65, 56, 64]]])
    c = np.array([[1.0, -1.0, 0.0], [1.0, 0.0, -1.0]])
    v = verdict_codes(values, c, claim=np.array([0, 0]), lattice=0.1)
    assert v.codes.tolist() == [[HOLDS, INCONCLUSIVE]]
    assert claim_codes(v, np.array([0, 0])).tolist() == [[INCONCLUSIVE]]
    assert claim_verdict([HOLDS, HOLDS], [1.0, 1.0], 0.05) == HOLDS
    assert claim_verdict([HOLDS, CONTRADICTED], [1.0, 0.04], 0.05) == CONTRADICTED
    assert claim_verdict([HOLDS, CONTRADICTED], [1.0, 0.06], 0.05) == INCONCLUSIVE
    assert claim_verdict([NEGLIGIBLE, NEGLIGIBLE], [1.0, 1.0], 0.05) == NEGLIGIBLE


def test_the_sign_flip_p_is_the_share_of_sign_patterns_written_out():
    rng = np.random.default_rng(3)
    margins = rng.normal(1.0, 2.0, (50, 5))
    margins[::5, 4] = np.nan
    got_for, got_against = sign_flip_ps(margins)
    for row, p_for, p_against in zip(margins, got_for, got_against, strict=True):
        m = row[np.isfinite(row)]
        sums = [np.dot(s, m) for s in itertools.product((1, -1), repeat=len(m))]
        assert p_for == pytest.approx(np.mean([x >= m.sum() - 1e-9 for x in sums]))
        assert p_against == pytest.approx(np.mean([x <= m.sum() + 1e-9 for x in sums]))


def test_a_seed_far_from_the_median_margin_is_flagged():
    margins = np.array([[5.0, 5.2, 4.9, 5.1, 5.0, -20.0], [5.0, 5.2, 4.9, 5.1, 5.0, 4.7],
                        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    assert outlier_seeds(margins, lattice=0.1).tolist() == [1, 0, 0]
    mad = stats.median_abs_deviation(margins[0], scale="normal")
    far = np.abs(margins[0] - np.median(margins[0])) > 3 * mad
    assert far.sum() == 1
