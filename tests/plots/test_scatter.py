"""The toy's figures: scatter of points before/after normalization, error vs γ, and the driver."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.markers import MarkerStyle

from fednorm.config import ToyConfig
from fednorm.plots.scatter import error_figure, plot_points, toy_figure
from fednorm.toy import make_toy_figures, simulate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def hand_table() -> pd.DataFrame:
    """3 classes x 2 points, before and after (after = before / 10)."""
    xy = np.array([[10.0, 0.0], [9.0, 1.0], [0.0, 10.0], [1.0, 9.0], [-10.0, 0.0], [-9.0, -1.0]])
    labels = [0, 0, 1, 1, 2, 2]
    before = pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1], "label": labels, "stage": "before"})
    after = before.assign(x=before["x"] / 10, y=before["y"] / 10, stage="after")
    return pd.concat([before, after], ignore_index=True)


def marker_path(collection: Collection) -> np.ndarray:
    return collection.get_paths()[0].vertices


def reference_path(marker: str) -> np.ndarray:
    style = MarkerStyle(marker)
    return style.get_path().transformed(style.get_transform()).vertices


def test_plot_points_draws_dots_before_and_crosses_after_one_colour_per_class() -> None:
    ax = Figure().subplots()
    data = plot_points(ax, hand_table())
    assert len(data) == 12
    dots, crosses = ax.collections[:3], ax.collections[3:]
    assert len(ax.collections) == 6  # 2 stages x 3 classes
    for coll in dots:
        np.testing.assert_allclose(marker_path(coll), reference_path("o"))
    for coll in crosses:
        np.testing.assert_allclose(marker_path(coll), reference_path("+"))
    colours = [tuple(c.get_facecolor()[0]) for c in dots]
    assert len(set(colours)) == 3
    assert [tuple(c.get_edgecolor()[0]) for c in crosses] == colours  # same class, same colour
    np.testing.assert_allclose(crosses[1].get_offsets(), [[0.0, 1.0], [0.1, 0.9]])
    assert ax.get_aspect() == 1.0
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["before normalization", "after normalization"]


def test_ten_classes_get_ten_distinct_colours() -> None:
    table = pd.DataFrame({"x": np.arange(10.0), "y": 0.0, "label": range(10), "stage": "before"})
    ax = Figure().subplots()
    plot_points(ax, table)
    assert len({tuple(c.get_facecolor()[0]) for c in ax.collections}) == 10


def test_plot_points_rejects_unknown_stages_and_missing_columns() -> None:
    ax = Figure().subplots()
    with pytest.raises(ValueError, match="during"):
        plot_points(ax, hand_table().replace({"stage": {"after": "during"}}))
    with pytest.raises(ValueError, match="label"):
        plot_points(ax, hand_table().drop(columns="label"))


def test_toy_figure_writes_pdf_png_and_the_plotted_table(tmp_path: Path) -> None:
    paths = toy_figure(hand_table(), tmp_path / "toy", "hand")
    assert [p.name for p in paths] == ["toy.pdf", "toy.png", "toy.csv"]
    assert paths[1].read_bytes().startswith(PNG_MAGIC)
    assert paths[0].read_bytes().startswith(b"%PDF")
    written = pd.read_csv(paths[2])
    pd.testing.assert_frame_equal(written, hand_table(), check_dtype=False)


def test_error_figure_summarises_seeds_per_scheme_and_gamma(tmp_path: Path) -> None:
    errors = pd.DataFrame({
        "scheme": ["bn"] * 4 + ["fbn"] * 4,
        "gamma": [0.0, 0.0, 1.0, 1.0] * 2,
        "seed": [0, 1] * 4,
        "error": [1.0, 3.0, 0.2, 0.4, 0.1, 0.3, 0.1, 0.1],
    })
    paths = error_figure(errors, tmp_path / "err", "errors")
    summary = pd.read_csv(paths[2]).set_index(["scheme", "gamma"])
    assert len(summary) == 4
    assert summary.loc[("bn", 0.0), "mean"] == pytest.approx(2.0)
    assert summary.loc[("bn", 0.0), ["min", "max"]].tolist() == [1.0, 3.0]
    assert summary.loc[("fbn", 1.0), "mean"] == pytest.approx(0.1)
    assert (summary["n_seeds"] == 2).all()


def test_error_figure_rejects_duplicate_runs(tmp_path: Path) -> None:
    errors = pd.DataFrame({"scheme": ["bn", "bn"], "gamma": [0.0, 0.0], "seed": [0, 0],
                           "error": [1.0, 2.0]})
    with pytest.raises(ValueError, match="same"):
        error_figure(errors, tmp_path / "err", "errors")


def test_make_toy_figures_writes_all_figures_with_consistent_numbers(tmp_path: Path) -> None:
    cfg = ToyConfig(rounds=20)
    gammas, seeds = (0.0, 1.0), (0, 1)
    paths = make_toy_figures(cfg, tmp_path, gammas=gammas, seeds=seeds)
    stems = ["fig1a", "fig1b", "fig2a", "fig2b", "fig2c"]
    expected = {f"{s}{ext}" for s in stems for ext in (".pdf", ".png", ".csv")}
    assert {p.name for p in paths} == expected
    assert {p.name for p in tmp_path.iterdir()} == expected
    # fig2c: one row per (scheme, gamma), the mean over seeds of the per-round-averaged error.
    summary = pd.read_csv(tmp_path / "fig2c.csv")
    assert sorted(zip(summary["scheme"], summary["gamma"], strict=True)) == sorted(
        (s, g) for s in ("bn", "fbn", "fixbn") for g in gammas
    )
    for row in summary.itertuples():
        errors = [float(simulate(cfg, row.scheme, row.gamma, s).error.mean()) for s in seeds]
        assert row.mean == pytest.approx(np.mean(errors), rel=1e-9)
    # fig1b: the round-20 points of naive BN at gamma = 0, before and after.
    points = pd.read_csv(tmp_path / "fig1b.csv")
    result = simulate(cfg, "bn", 0.0, seeds[0])
    after = points[points["stage"] == "after"]
    np.testing.assert_allclose(after[["x", "y"]].to_numpy(), result.normalized[-1].numpy())
