"""The claims' verdicts' error rates by simulation, through the rule's own code
(fednorm.claims.rule.verdict_codes, which tests/test_claims_calibration.py checks unit by unit
against fednorm.claims.verdicts.judge_claim), where the rule is strained: units that share
settings and a setting noisier than the others, one look at α. (The ledger's own bootstrap, at
its claims' boundaries on its designs: fednorm.claims.calibration.)

    python benchmarks/claims_calibration.py                    # about 12 s on one core
    python benchmarks/claims_calibration.py --replicates 20000

An *experiment* is K = 4 settings × n seeds: run x_js = b_s + μ_j + σ_j ε_js, a seed's common
part b_s ~ N(0, BLOCK²) (cancelled by pairing), σ_j = σ or, strained, setting 0 at 3σ. Its
*designs* (the units, as the claims file makes them):

- ``pairs``: every pair of the four settings, a ``greater`` unit each (six units sharing
  sides, each its own claim);
- ``best``: setting 0 against each other one, one claim of three units (Holm);
- ``trend``: the least-squares change over the four settings (stats.trend_contrast);
- ``within``: every pair within δ (TOST).

Each unit's truth is put on the boundary of the null of ``holds`` (greater, best, trend: all
settings equal; within: adjacent settings δ apart) and of ``contradicted`` (the rule is
symmetric: greater, best, trend the same boundary, all settings equal; within: δ apart); the
rate is reported for the units on the boundary. Rates are per unit, each
over the replicates, with their Monte Carlo standard error sqrt(max(rate, α)(1 − ·)/R); ``ok``:
every unit's rate ≤ α + 3 SE.

One look at α on n seeds (2, 3 and the design's 6). Then the variance models compared (the
choice: stats' docstring): each unit's own margins (the rule), each setting's variance from the
model's residuals (Welch–Satterthwaite), one variance (the equal-variance model) and limma's
moderated per-setting variances, on all pairs with setting 0 at 3σ, and the power of each at a
margin of 4 σ-units (each model's one-sided t of a pair: stats.fit_contrasts, stats.sign_ps);
last, the rule's power at stats.detectable's margin.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

import numpy as np

from fednorm.claims.rule import CONTRADICTED, HOLDS, verdict_codes
from fednorm.claims.stats import ALPHA, SESOI, detectable, fit_contrasts, sign_ps, trend_contrast

DELTA = 3.0  # points: a near-equality's δ
SETTINGS = 4
BLOCK = 10.0  # points: the spread of a seed's common part
NOISY = 3.0  # the strained setting's σ over the others'
SEEDS = (2, 3, 6)  # one look on each: the fewest a t test takes, and the design's


@dataclass(frozen=True)
class Design:
    """The units of one experiment: contrasts over its settings, the claim of each (Holm), and
    the true settings' means on the boundary of each verdict's null (``holds_null``,
    ``contradicted_null``) with the units on it (the others are not counted)."""

    name: str
    contrasts: np.ndarray
    claim: np.ndarray
    within: bool
    holds_null: np.ndarray
    contradicted_null: np.ndarray

    def boundary(self, means: np.ndarray, verdict: int) -> np.ndarray:
        """The units whose true contrast is on the boundary of ``verdict``'s null."""
        truth = self.contrasts @ means
        if self.within:
            return np.isclose(np.abs(truth), DELTA)
        return np.isclose(truth, 0.0)  # a sign claim's two verdicts share one boundary


def _pairs() -> np.ndarray:
    eye = np.eye(SETTINGS)
    return np.array([eye[a] - eye[b] for a, b in itertools.combinations(range(SETTINGS), 2)])


def designs() -> dict[str, Design]:
    """The four designs of the module's docstring."""
    eye, pairs = np.eye(SETTINGS), _pairs()
    ladder = np.arange(SETTINGS, dtype=float)
    trend = trend_contrast(SETTINGS)[None, :]
    best = np.array([eye[0] - eye[k] for k in range(1, SETTINGS)])
    zero = np.zeros(SETTINGS)
    return {
        "pairs": Design("pairs", pairs, np.arange(len(pairs)), False, zero, zero),
        "best": Design("best", best, np.zeros(len(best), dtype=int), False, zero, zero),
        "trend": Design("trend", trend, np.zeros(1, dtype=int), False, zero, zero),
        "within": Design("within", pairs, np.arange(len(pairs)), True, DELTA * ladder,
                         DELTA * ladder),
    }


def sigmas(sigma: float, strained: bool) -> np.ndarray:
    """Each setting's σ: all ``sigma``, or setting 0 at NOISY times it."""
    out = np.full(SETTINGS, sigma)
    if strained:
        out[0] *= NOISY
    return out


def draw(rng: np.random.Generator, replicates: int, seeds: int, means: np.ndarray,
         sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(runs, the seeds' parts, the runs' noise): runs (replicates, settings, seeds)."""
    block = BLOCK * rng.standard_normal((replicates, 1, seeds))
    noise = rng.standard_normal((replicates, SETTINGS, seeds))
    return block + means[:, None] + sigma[:, None] * noise, block, noise


def judge(design: Design, values: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Verdict codes (replicates, units) of ``values`` by the rule's code, one look at
    ``alpha``."""
    return verdict_codes(values, design.contrasts, design.claim, within=design.within,
                         delta=DELTA, sesoi=SESOI, alpha=alpha).codes


def held(design: Design, values: np.ndarray, variances: str, alpha: float = ALPHA
         ) -> np.ndarray:
    """Whether each sign unit (replicates, units) holds by the one-sided t of ``variances``'s
    standard error (stats.fit_contrasts): the rule's test with another variance model."""
    fit = fit_contrasts(values, design.contrasts, variances=variances)
    return sign_ps(fit.estimate, fit.se, fit.df, 0.0, SESOI)[0] <= alpha


@dataclass(frozen=True)
class Rate:
    """Per unit on the boundary: the rates and their Monte Carlo standard errors."""

    rates: np.ndarray
    se: np.ndarray

    @classmethod
    def of(cls, hits: np.ndarray, units: np.ndarray, alpha: float = ALPHA) -> Rate:
        r = hits[:, units].mean(axis=0)
        n = hits.shape[0]
        return cls(r, np.sqrt(np.maximum(r, alpha) * (1 - np.maximum(r, alpha)) / n))

    def ok(self, alpha: float = ALPHA) -> bool:
        """Every unit's rate within α + 3 SE."""
        return bool(np.all(self.rates <= alpha + 3 * self.se))

    def __str__(self) -> str:
        worst = int(np.argmax(self.rates - 3 * self.se))
        return (f"{self.rates.max():.4f} ± {self.se[worst]:.4f} (max of {len(self.rates)}; "
                f"mean {self.rates.mean():.4f}) {'ok' if self.ok() else 'ABOVE α + 3 SE'}")


def errors(design: Design, rng: np.random.Generator, replicates: int, sigma: np.ndarray,
           seeds: int) -> tuple[Rate, Rate]:
    """(false holds, false contradicted) per unit on each null's boundary, one look at α on
    ``seeds`` seeds."""
    out = []
    for means, code in ((design.holds_null, HOLDS), (design.contradicted_null, CONTRADICTED)):
        codes = judge(design, draw(rng, replicates, seeds, means, sigma)[0])
        out.append(Rate.of(codes == code, design.boundary(means, code)))
    return out[0], out[1]


def models(rng: np.random.Generator, replicates: int, seeds: int, strained: bool,
           shift: float = 0.0) -> dict[str, tuple[float, float]]:
    """Per variance model: the share of ``holds`` (at α, one look) on the pairs that touch
    setting 0 and on the others, with setting 3 ``shift`` σ-units below the rest (0: the null;
    then the rate on the pairs (k, 3) is power)."""
    design = designs()["pairs"]
    means = np.zeros(SETTINGS)
    means[3] = -shift
    values = draw(rng, replicates, seeds, means, sigmas(1.0, strained))[0]
    pairs = list(itertools.combinations(range(SETTINGS), 2))
    touching = np.array([0 in p for p in pairs])
    onto = np.array([p[1] == 3 for p in pairs])
    out = {}
    for variances in ("unit", "setting", "equal", "moderated"):
        holds = held(design, values, variances)
        if shift:
            out[variances] = (float(holds[:, onto & touching].mean()),
                              float(holds[:, onto & ~touching].mean()))
        else:
            out[variances] = (float(holds[:, touching].mean()), float(holds[:, ~touching].mean()))
    return out


def power(rng: np.random.Generator, replicates: int, seeds: int, sigma: float = 5.0
          ) -> tuple[float, float]:
    """(margin, holds rate) of a pair at stats.detectable's margin for ``seeds`` seeds on
    seeds − 1 df at α: one look, the other settings equal."""
    truth = detectable(seeds, 2.0, sigma, seeds - 1, ALPHA)
    means = np.zeros(SETTINGS)
    means[1] = -truth
    design = designs()["pairs"]
    codes = judge(design, draw(rng, replicates, seeds, means, sigmas(sigma, False))[0])
    return truth, float((codes[:, 0] == HOLDS).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng, r = np.random.default_rng(args.seed), args.replicates
    print(f"α {ALPHA} one-sided, one look, sesoi {SESOI}, δ {DELTA} points; {SETTINGS} "
          f"settings; {r} replicates a row; per unit on the boundary: the largest rate ± its "
          "MC SE (and the mean over units)")
    print(f"{'design':<8}{'σ':>4} {'noise':<10}{'seeds':<7}{'false holds':<44}"
          "false contradicted")
    for name, design in designs().items():
        for sigma in ((1.0, 5.0) if design.within else (5.0,)):
            for strained in (False, True):
                for seeds in SEEDS:
                    holds, contradicted = errors(design, rng, r, sigmas(sigma, strained), seeds)
                    print(f"{name:<8}{sigma:>4g} {'3σ on 0' if strained else 'equal':<10}"
                          f"{seeds:<7}{holds!s:<44}{contradicted}")
    print("\nThe variance models, all pairs, one look at α: holds on the pairs touching setting 0"
          " / on the others")
    for seeds in SEEDS:
        for strained in (False, True):
            null = models(rng, r, seeds, strained)
            moved = models(rng, r, seeds, strained, shift=4.0)
            print(f"  {seeds} seeds, {'setting 0 at 3σ' if strained else 'equal σ'}: "
                  + "; ".join(f"{k} {v[0]:.3f} / {v[1]:.3f} (power at 4σ {moved[k][0]:.2f} / "
                              f"{moved[k][1]:.2f})" for k, v in null.items()))
    print(f"\nPower: a pair holds at stats.detectable's margin (σ 5, df seeds − 1, α {ALPHA})")
    for seeds in (2, 3, 4, 6):
        truth, rate = power(rng, r, seeds)
        print(f"  {seeds} seeds, margin {truth:.2f} points: {rate:.3f}")


if __name__ == "__main__":
    main()
