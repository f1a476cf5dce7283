"""Figures from the tidy results table: curves over training and final values vs a setting."""

import matplotlib

matplotlib.use("Agg")

from fednorm.plots.curves import curve_data, plot_curves
from fednorm.plots.figure import make_figure
from fednorm.plots.final import final_data, plot_final_vs
from fednorm.plots.save import save_figure
from fednorm.plots.style import colour, label, marker

__all__ = [
    "colour",
    "curve_data",
    "final_data",
    "label",
    "make_figure",
    "marker",
    "plot_curves",
    "plot_final_vs",
    "save_figure",
]
