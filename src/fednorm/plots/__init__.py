"""Figures: curves over training, final values vs a setting, and the 2-D toy's point clouds."""

import matplotlib

matplotlib.use("Agg")

from fednorm.plots.curves import curve_data, plot_curves
from fednorm.plots.figure import make_figure
from fednorm.plots.final import final_data, plot_final_vs
from fednorm.plots.save import save_figure
from fednorm.plots.scatter import error_figure, plot_points, toy_figure
from fednorm.plots.style import colour, label, marker

__all__ = [
    "colour",
    "curve_data",
    "error_figure",
    "final_data",
    "label",
    "make_figure",
    "marker",
    "plot_curves",
    "plot_final_vs",
    "plot_points",
    "save_figure",
    "toy_figure",
]
