"""Figures: curves over training, final values vs a setting, grouped bars, heatmaps that compare
two settings, a heatmap of each method's accuracy per domain, tables of final values, and the
2-D toy's point clouds."""

import matplotlib

matplotlib.use("Agg")

from fednorm.plots.bars import bar_data, plot_bars
from fednorm.plots.cells import cell_stats
from fednorm.plots.curves import curve_data, plot_curves
from fednorm.plots.domains import domain_data, domains_figure, make_domains
from fednorm.plots.figure import Part, make_figure, make_parts_figure
from fednorm.plots.final import final_data, plot_final_vs
from fednorm.plots.heatmap import heatmap_data, heatmap_figure, make_heatmap
from fednorm.plots.save import save_figure, save_table
from fednorm.plots.scatter import error_figure, plot_points, toy_figure
from fednorm.plots.style import colour, label, marker
from fednorm.plots.table import make_table, table_data

__all__ = [
    "Part",
    "bar_data",
    "cell_stats",
    "colour",
    "curve_data",
    "domain_data",
    "domains_figure",
    "error_figure",
    "final_data",
    "heatmap_data",
    "heatmap_figure",
    "label",
    "make_domains",
    "make_figure",
    "make_heatmap",
    "make_parts_figure",
    "make_table",
    "marker",
    "plot_bars",
    "plot_curves",
    "plot_final_vs",
    "plot_points",
    "save_figure",
    "save_table",
    "table_data",
    "toy_figure",
]
