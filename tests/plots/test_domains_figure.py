"""The feature-shift heatmap (methods x domains, then their mean): numbers, worst-domain box,
row order, domain columns from the data."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from fednorm.metrics import DOMAINS
from fednorm.plots import style
from fednorm.plots.domains import domains_figure, make_domains

DOMAIN_NAMES = ("mnist", "svhn", "usps")
# method -> seeds' final accuracies per domain (None: the seed diverged); the worst domain is
# known: bn's is usps (0.50), fedbn's svhn (0.60), gn's mnist (0.40 and 0.42)
FINALS = {
    "bn": [(0.90, 0.70, 0.50), (0.92, 0.72, 0.54)],
    "fedbn": [(0.95, 0.60, 0.80), (0.97, 0.62, 0.84)],
    "gn": [(0.40, 0.80, 0.90), None, (0.42, 0.82, 0.94)],
}


def _summary(finals=FINALS) -> pd.DataFrame:
    """Rows of a run per (method, seed), evaluated at steps 0 and 100; the step-0 values (0.99)
    must never count, nor a diverged run's. Listed gn first, so the row order is not the
    data's."""
    rows = []
    for method, seeds in reversed(finals.items()):
        for seed, accs in enumerate(seeds):
            status = "ok" if accs else "diverged"
            final = accs or (math.nan,) * len(DOMAIN_NAMES)
            for step, values in ((0, (0.99,) * len(DOMAIN_NAMES)), (100, final)):
                domain = dict(zip((f"test_accuracy_{d}" for d in DOMAIN_NAMES), values,
                                  strict=True))
                rows.append({"run_id": f"{method}-s{seed}", "method": method, "seed": seed,
                             "step": step, "status": status, **domain,
                             "test_accuracy_blur": math.nan,  # a domain of no run here
                             "domain_accuracy": sum(values) / len(values)})
    return pd.DataFrame(rows)


def test_csv_cells_are_the_seed_means_of_each_domain_and_of_their_mean(tmp_path):
    summary = _summary()
    (_, _, csv) = make_domains(summary, tmp_path / "shift")
    plotted = pd.read_csv(csv).set_index(["method", "domain"])["mean"]
    final = summary[(summary.step == 100) & (summary.status == "ok")]
    columns = {**{d: f"test_accuracy_{d}" for d in DOMAIN_NAMES},
               "domain_accuracy": "domain_accuracy"}
    for name, column in columns.items():
        expected = 100 * final.groupby("method")[column].mean()
        for method, value in expected.items():
            assert plotted[(method, name)] == pytest.approx(value, rel=1e-12)
    assert set(plotted.index.get_level_values("domain")) == set(columns)  # blur: no number


def test_the_worst_domain_of_each_row_is_marked_and_boxed():
    fig, data = domains_figure(_summary())
    worst = data[data["worst"]].set_index("method")["domain"].to_dict()
    assert worst == {"bn": "usps", "fedbn": "svhn", "gn": "mnist"}
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    centres = {(round(b.get_x() + b.get_width() / 2), round(b.get_y() + b.get_height() / 2))
               for b in boxes}
    names = [t.get_text() for t in ax.get_xticklabels()]
    methods = [t.get_text() for t in ax.get_yticklabels()]
    assert centres == {(names.index(style.DOMAIN_LABELS[d]), methods.index(style.label(m)))
                       for m, d in worst.items()}


def test_rows_follow_the_given_order_else_the_methods_order():
    given = ["gn", "fedbn", "bn"]
    _, data = domains_figure(_summary(), order={"method": given})
    assert list(dict.fromkeys(data["method"])) == given
    fig, data = domains_figure(_summary())
    assert list(dict.fromkeys(data["method"])) == ["bn", "gn", "fedbn"]  # fednorm.methods'
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        style.label(m) for m in ("bn", "gn", "fedbn")]


def test_a_diverged_seed_is_counted_marked_and_the_seeds_stated():
    fig, data = domains_figure(_summary(), domains=["svhn", "mnist"])
    assert list(dict.fromkeys(data["domain"])) == ["svhn", "mnist", "domain_accuracy"]
    gn = data[(data.method == "gn") & (data.domain == "mnist")]
    assert (gn["n_seeds"].item(), gn["n_diverged"].item()) == (2, 1)
    assert "41.0†" in [t.get_text() for t in fig.axes[0].texts]
    assert "mean over 2 seeds" in fig.get_supxlabel()
    assert "diverged" in fig.get_supxlabel()


def test_every_domain_has_a_label():
    assert set(style.DOMAIN_LABELS) == set(DOMAINS)
