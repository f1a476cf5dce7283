"""Which summary rows a configured figure draws, and how each kind draws them."""

import itertools

import numpy as np
import pandas as pd
import pytest

import fednorm.plots.figure
from fednorm.figures import draw, draw_all, figure_rows
from fednorm.plan import Figure
from fednorm.plots.save import save_figure


def _summary() -> pd.DataFrame:
    rows = [  # run, groups, normalizer, attack, aggregator
        ("a", "clean", "bn", "none", "mean"),
        ("b", "clean", "central", "none", "mean"),
        ("c", "clean|attacked", "fbn", "none", "mean"),
        ("d", "attacked", "fbn", "sf", "mean"),
        ("e", "attacked", "fbn", "alie", "mean"),
        ("f", "defended", "fbn", "sf", "median"),
        ("g", "defended", "fbn", "sf", "trimmed_mean"),
        ("h", "other", "fbn", "sf", "median"),
    ]
    return pd.DataFrame(rows, columns=["run_id", "figure_group", "normalizer", "attack",
                                       "aggregator"])


def test_rows_of_any_listed_experiment_whose_keys_are_in_the_lists():
    fig = Figure("f", ("clean", "attacked", "defended"), "curves",
                 where=(("normalizer", ("bn", "fbn")), ("attack", ("none", "sf")),
                        ("aggregator", ("mean", "median"))))
    assert list(figure_rows(fig, _summary()).run_id) == ["a", "c", "d", "f"]


def test_a_single_value_filter_is_an_equality():
    fig = Figure("f", ("attacked",), "curves", where=(("attack", "sf"),))
    assert list(figure_rows(fig, _summary()).run_id) == ["d"]


# --- drawing each kind from summary rows ---------------------------------------------------


STEPS = 40


def _runs(local_steps=(1, 20), splits=("IID", "Shards(2)"), seeds=(0, 1)) -> pd.DataFrame:
    """Summary rows: bn and gn runs of STEPS steps, evaluated every 10; the accuracy grows with
    the step, E and the seed, so every cell's final value differs."""
    rows = []
    for norm, split, e, seed in itertools.product(("bn", "gn"), splits, local_steps, seeds):
        run_id = f"{norm}-{split}-E{e}-s{seed}"
        for step in range(0, STEPS + 1, 10):
            acc = 0.1 + step / 100 + e / 1000 + seed / 100 + (norm == "gn") / 50
            rows.append({"run_id": run_id, "figure_group": "fixbn", "normalizer": norm,
                         "partition": "shards" if split != "IID" else "iid", "split": split,
                         "local_steps": e, "steps": STEPS, "seed": seed, "step": step,
                         "test_accuracy": acc, "status": "ok"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("x", "expected"), [("round", lambda step, e: step / e),
                                             ("progress", lambda step, e: step / STEPS)])
def test_curves_over_round_or_progress_compute_x_from_step(tmp_path, x, expected):
    summary = _runs(splits=("IID",))
    fig = Figure("f", ("fixbn",), "curves", x=x, hue=("local_steps", "normalizer"))
    (_, _, csv) = draw(fig, summary, tmp_path / "fig6")
    plotted = pd.read_csv(csv)
    for e in (1, 20):
        xs = plotted[(plotted.local_steps == e) & (plotted.normalizer == "bn")][x]
        np.testing.assert_allclose(xs, [expected(s, e) for s in range(0, STEPS + 1, 10)])
    assert plotted["progress" if x == "progress" else "round"].max() == (
        1.0 if x == "progress" else STEPS)


def _axes_of(monkeypatch) -> list:
    """Capture the axes of the figures saved while the test runs."""
    saved = []

    def spy(fig, data, stem):
        saved.append(list(fig.axes))
        return save_figure(fig, data, stem)

    monkeypatch.setattr(fednorm.plots.figure, "save_figure", spy)
    return saved


@pytest.mark.parametrize(("logx", "local_steps", "scale"), [
    (True, (1, 2, 5), "log"),  # values the automatic choice would draw linearly
    (None, (1, 2, 5), "linear"),
    (False, (1, 100, 2500), "linear"),  # values the automatic choice would draw on a log axis
    (None, (1, 100, 2500), "log"),
])
def test_final_vs_logx(tmp_path, monkeypatch, logx, local_steps, scale):
    saved = _axes_of(monkeypatch)
    fig = Figure("h", ("fixbn",), "final_vs", x="local_steps", logx=logx)
    draw(fig, _runs(local_steps=local_steps), tmp_path / "figH")
    assert saved[0][0].get_xscale() == scale


def test_heatmap_bars_and_table_follow_the_figure_orders(tmp_path):
    summary = _runs()
    orders = (("split", ("Shards(2)", "IID")),)
    heatmap = Figure("h", ("fixbn",), "heatmap", rows="split", cols="local_steps",
                     compare="normalizer", compare_values=("bn", "gn"), orders=orders)
    paths = draw(heatmap, summary, tmp_path / "fig2")
    data = pd.read_csv(paths[2])
    assert list(dict.fromkeys(data.split)) == ["Shards(2)", "IID"]
    diff = data[data.panel == "gn - bn"]["mean"]
    np.testing.assert_allclose(diff, 2.0)  # gn is 0.02 above bn in every cell
    bars = Figure("b", ("fixbn",), "bars", x="split", where=(("local_steps", 20),),
                  orders=orders)
    data = pd.read_csv(draw(bars, summary, tmp_path / "fig4")[2])
    assert list(dict.fromkeys(data.split)) == ["Shards(2)", "IID"]
    table = Figure("t", ("fixbn",), "table", rows="normalizer", cols="split", orders=orders,
                   where=(("local_steps", 1),))
    paths = draw(table, summary, tmp_path / "table1")
    assert [p.suffix for p in paths] == [".csv", ".md"]
    header = paths[1].read_text().splitlines()[2]
    assert header == "| normalizer | Shards(2) | IID | seeds |"
    # bn, E = 1, seeds 0 and 1: finals 0.1 + 0.4 + 0.001 + seed / 100 -> 50.10 and 51.10
    row = paths[1].read_text().splitlines()[4]
    assert row.startswith(f"| Naive BN | {50.6:.2f} ± {np.std([50.1, 51.1], ddof=1):.2f} |")


def test_a_domains_figure_draws_the_configured_domains_rows_and_filters(tmp_path):
    """Its columns are the figure's domains then its y, its rows its order; ``where`` holds."""
    summary = _runs(splits=("IID",)).rename(columns={"normalizer": "method"})
    summary = summary.assign(test_accuracy_svhn=summary.test_accuracy - 0.05,
                             test_accuracy_mnist=summary.test_accuracy + 0.05,
                             domain_accuracy=summary.test_accuracy)
    fig = Figure("d", ("fixbn",), "domains", rows="method", y="domain_accuracy",
                 domains=("svhn", "mnist"), orders=(("method", ("gn", "bn")),),
                 where=(("local_steps", 20),))
    data = pd.read_csv(draw(fig, summary, tmp_path / "shift")[2])
    assert list(dict.fromkeys(data.domain)) == ["svhn", "mnist", "domain_accuracy"]
    assert list(dict.fromkeys(data.method)) == ["gn", "bn"]
    # bn, E = 20, seeds 0 and 1: 0.1 + 0.4 + 0.02 + seed / 100 -> mean 52.5 %; svhn 5 below
    bn = data[data.method == "bn"].set_index("domain")["mean"]
    np.testing.assert_allclose(bn.to_numpy(), [47.5, 57.5, 52.5])
    assert set(data[data.worst].domain) == {"svhn"} and data.worst.sum() == 2  # one a row


def test_a_parts_figure_draws_each_part_as_its_own_figure_would(tmp_path):
    """Each part of a ``parts`` figure selects its own rows and draws exactly the numbers the
    same figure drawn alone draws; several metrics as y are one line each."""
    summary = _runs(splits=("IID",))
    summary["train_loss"] = 2.0 - summary["test_accuracy"]
    curves = Figure("c", ("fixbn",), "curves", where=(("normalizer", "bn"),),
                    y=("test_accuracy", "train_loss"), title="(a)")
    final = Figure("d", ("fixbn",), "final_vs", x="local_steps", title="(b)")
    parts = Figure("p", ("fixbn",), "parts", parts=(curves, final))
    (_, _, csv) = draw(parts, summary, tmp_path / "parts")
    both = pd.read_csv(csv)
    assert list(both["part"].unique()) == ["(a)", "(b)"]
    (_, _, alone) = draw(final, summary, tmp_path / "final")
    alone = pd.read_csv(alone)
    mine = both[both.part == "(b)"].reset_index(drop=True)
    assert len(mine) == len(alone) == 4  # bn and gn at E = 1, 20
    for column in ("normalizer", "local_steps", "mean", "std", "n_seeds"):
        assert mine[column].tolist() == alone[column].tolist(), column
    lines = both[both.part == "(a)"]
    assert set(lines["metric"]) == {"test_accuracy", "train_loss"}
    for metric in ("test_accuracy", "train_loss"):
        mine = lines[lines.metric == metric].sort_values("step")
        bn = summary[summary.normalizer == "bn"].groupby("step")[metric].mean()
        np.testing.assert_allclose(mine["mean"], bn.to_numpy())


def test_a_tables_extra_metric_is_one_more_column_of_each_rows_final_mean(tmp_path):
    summary = _runs(local_steps=(1,))
    summary["comm_rounds"] = summary["step"] * np.where(summary.normalizer == "bn", 3, 1)
    table = Figure("t", ("fixbn",), "table", rows="normalizer", cols="split",
                   extra=("comm_rounds",))
    csv, md = draw(table, summary, tmp_path / "t")
    data = pd.read_csv(csv)
    assert data.groupby("normalizer")["comm_rounds"].first().to_dict() == {
        "bn": 3 * STEPS, "gn": STEPS}
    text = md.read_text()
    assert "| normalizer | IID | Shards(2) | comm rounds | seeds |" in text
    assert f"| {3 * STEPS:,} | 2 |" in text


def test_a_figure_that_fails_does_not_stop_the_others_and_is_named(tmp_path):
    """One job draws a whole folder: a figure without rows fails, the others are still
    written, and the error names the failed one with its reason."""
    summary = _runs(splits=("IID",))
    good = Figure("fixbn/a", ("fixbn",), "curves")
    empty = Figure("fixbn/b", ("fixbn",), "final_vs", x="local_steps",
                   where=(("normalizer", "fixbn"),))
    also = Figure("fixbn/c", ("fixbn",), "table", rows="normalizer", cols="local_steps")
    stems = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    with pytest.raises(RuntimeError, match=r"could not draw fixbn/b: .*no rows") as error:
        draw_all([good, empty, also], summary, stems)
    assert "fixbn/a" not in str(error.value) and "fixbn/c" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.pdf", "a.png", "c.csv",
                                                          "c.md"]
    written = draw_all([good, also], summary, [stems[0], stems[2]])
    assert sorted(p.name for p in written) == ["a.csv", "a.pdf", "a.png", "c.csv", "c.md"]


def test_the_improvement_table_and_profile_are_the_statistics_of_the_final_values(tmp_path):
    """kind improvement: the CSV is fednorm.improvement.improvement of each run's final value
    in %, per (method, setting), the baseline first; kind profile: its CSV is the profile of
    the same runs over a grid from the least to the largest value."""
    from fednorm.improvement import improvement, profile
    from fednorm.plots.improvement import profile_taus

    summary = _runs(seeds=(0, 1, 2)).rename(columns={"normalizer": "method"})
    summary.loc[summary.run_id == "gn-IID-E1-s2", "test_accuracy"] -= 0.3  # a collapsed seed
    final = summary[summary.step == STEPS]
    runs = pd.DataFrame({"method": final.method, "setting": final.split, "seed": final.seed,
                         "value": 100 * final.test_accuracy})
    fig = Figure("i", ("fixbn",), "improvement", rows="method", cols="split", baseline="gn",
                 where=(("local_steps", 1),))
    paths = draw(fig, summary, tmp_path / "improvement")
    assert [p.suffix for p in paths] == [".csv", ".md"]
    data = pd.read_csv(paths[0])
    runs = runs[final.local_steps.to_numpy() == 1].reset_index(drop=True)
    expected = improvement(runs, "gn")
    assert data["method"].tolist() == ["gn", "bn"]
    pd.testing.assert_frame_equal(data, expected, check_dtype=False)
    # bn's seed 2 ties gn's seed 0 (52.1 %), bn is below gn's other seeds and above the
    # collapsed one: Shards(2) 0.5 / 9, IID 3.5 / 9
    assert data.loc[1, "probability"] == pytest.approx((0.5 / 9 + 3.5 / 9) / 2)
    text = paths[1].read_text()
    assert "| Naive BN | 0.22 [" in text and text.startswith("**i**")
    fig = Figure("p", ("fixbn",), "profile", rows="method", cols="split",
                 where=(("local_steps", 1),))
    paths = draw(fig, summary, tmp_path / "profile")
    assert [p.suffix for p in paths] == [".pdf", ".png", ".csv"]
    data = pd.read_csv(paths[2])
    pd.testing.assert_frame_equal(data, profile(runs, profile_taus(runs["value"])),
                                  check_dtype=False)
