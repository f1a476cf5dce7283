"""Byzantine robustness of the aggregated statistics: attacks and robust aggregators."""

from fednorm.robust.aggregators import (
    AGGREGATORS,
    aggregate,
    check_byzantine,
    coordinate_median,
    mean,
    nearest_neighbour_mixing,
    nnm,
    trimmed_mean,
)
from fednorm.robust.attacks import (
    ATTACKS,
    a_little_is_enough,
    alie_z,
    attack,
    fall_of_empires,
    keep_variance_valid,
    no_attack,
    sign_flip,
)
from fednorm.robust.server import Server

__all__ = [
    "AGGREGATORS",
    "ATTACKS",
    "Server",
    "a_little_is_enough",
    "aggregate",
    "alie_z",
    "attack",
    "check_byzantine",
    "coordinate_median",
    "fall_of_empires",
    "keep_variance_valid",
    "mean",
    "nearest_neighbour_mixing",
    "nnm",
    "no_attack",
    "sign_flip",
    "trimmed_mean",
]
