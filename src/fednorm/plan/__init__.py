"""From the YAML configuration to the plan: the runs to train and the figures to draw.

The configuration has four top-level sections (see ``config/config.yaml``):

``paths``        where results, figures and downloaded data go;
``execution``    how jobs run (:class:`Execution`): ``device``, ``threads`` and ``gpus_per_job``
                 of a training job, ``bundle_size``: at most that many runs train together
                 in one job (see :func:`bundles`), and what a training job asks a cluster for:
                 ``cpus_per_gpu``, ``mem_mb`` (MB), ``runtime`` (minutes);
                 ``checkpoint_minutes``: between two saves of a bundle's resume point;
                 ``data_workers``: processes decoding ImageNet-1K's JPEGs in a training job;
                 ``images_per_second`` and ``max_runtime``: each training job's ``runtime``
                 from its training images instead (:meth:`Execution.job_runtime`,
                 docs/run.md);
``run``          defaults for every run (any :class:`~fednorm.config.RunConfig` key);
``experiments``  name -> ``{set: {key: value}, grid: {key: [values]}}``: the product of the grid
                 axes over the defaults updated by ``set``; a budget (``epochs`` or ``rounds``,
                 ``lr_decay_at``: fednorm.config.resolve_budget) set in a layer replaces the
                 ``steps`` (``lr_milestones``) of the layers below; the grid axis ``settings``
                 takes mappings that set several keys together, e.g. ``[{partition: iid},
                 {partition: dirichlet, heterogeneity: 0.1}]`` (the product runs over them);
                 an axis set to null is left out (a profile's way to remove the axis of the
                 file it is merged over);
``figures``      name -> ``{experiment, kind, where, y, title, paper, ...}``: ``experiment`` one
                 name or a list (the union of their runs); ``where`` ``{key: value or
                 [values]}``; ``y`` a metric; ``paper`` the paper's figure or table it
                 reproduces, e.g. 'FBN Fig 3a' (the report's caption; none: not in the papers);
                 then the keys of the ``kind`` (see FIGURE_KEYS):
                 ``curves``    y over training: ``x`` step (default), round (step / E),
                               progress (step / steps) or a run key; ``hue`` the column, or two
                               (colour, then dash), that tells lines apart (default normalizer;
                               ``scenario``, e.g. 'SF, median + NNM', is derived from attack, f,
                               aggregator and nnm); ``panels: {key: [values]}`` one axes per
                               value; ``logy``; ``y`` may list several metrics: one line each
                               (colour), the hue (one column) as dash;
                 ``final_vs``  final y against a run key ``x``: as curves, plus ``logx`` (true:
                               log axis, false: linear; default: chosen from the values);
                 ``bars``      final y, grouped by ``x`` (any column, e.g. split), one bar per
                               ``hue`` (one column), ``x_order``, ``panels``;
                 ``heatmap``   final y over ``rows`` x ``cols`` (columns) for the two values of
                               ``compare: {key: [A, B]}``: panels A, B and B - A; ``row_order``,
                               ``col_order``;
                 ``table``     final y as "mean ± std" over ``rows`` x ``cols``, written as .csv
                               and .md; ``row_order``, ``col_order``; ``extra``: metrics shown
                               as one more column each (e.g. comm_rounds); ``select:
                               val_accuracy``: per cell, only the runs of the ``lr_scale``
                               with the best validation accuracy (fednorm.tuning);
                 ``tuning``    per ``rows`` x ``cols`` cell, the ``lr_scale`` chosen on the
                               validation accuracy (``select``, the only choice), its test
                               accuracy, and the test accuracy at lr_scale 1 (the common
                               recipe), as .csv and .md (fednorm.figures.tuning_table);
                 ``parts``     ``parts: [figure, ...]``: figures of kinds curves, final_vs or
                               bars side by side in one file, one axes each (no panels), each
                               with its own experiment (default the parent's), where, y, title.
                 An order key lists every value the figure's runs have for that axis, in the
                 order to draw; without it, numbers ascend and anything else keeps the order of
                 first appearance in the runs;
``toy``          the FBN paper's 2-D normalization toy (Figs 1, 2): ``settings`` (ToyConfig keys),
                 ``gammas``, ``seeds``, ``figures`` (the folder under ``paths.figures``);
``claims``       the path of the claims ledger's file (each paper number beside ours), or null
                 for none; the file itself is read and checked by ``fednorm.claims``;
``claims_prereg`` the path of the committed pre-registration the ledger is checked against
                 (config/claims_prereg.json: ``fednorm prereg``, fednorm.claims.prereg), or null
                 for no check.

A run that two experiments need is planned (and trained) once: runs are keyed by their run_id,
which derives from the run's config alone. Runs train in bundles, which derive from the config
alone too. Every error is raised here, before any job starts.

The rooms, each importing only those listed before it (and fednorm.config, fednorm.metrics):
``experiments`` (a grid of runs), ``figure_specs`` (:class:`Figure` and its keys' rules),
``jobs`` (:class:`Execution`, bundles, training jobs), ``pipeline`` (:class:`Plan`,
:func:`load_plan`, :func:`merge`, :func:`merged_config`) and ``seeds`` (how full the bundles
are, the price of one more seed: :func:`median_bundle_sizes`, :func:`seed_price`). Import the
names from ``fednorm.plan``.
"""

from __future__ import annotations

from fednorm.metrics import FIGURE_METRICS
from fednorm.plan.experiments import RUN_KEYS, SETTINGS, expand
from fednorm.plan.figure_specs import (
    COLUMNS,
    CURVE_X,
    FIGURE_EXTENSIONS,
    FIGURE_KEYS,
    FIGURE_KINDS,
    REQUIRED,
    TABLE_EXTENSIONS,
    TABLE_KINDS,
    Figure,
    extensions,
    figure_spec,
    matches_where,
)
from fednorm.plan.jobs import (
    AUTO_BUNDLE_RUNS,
    EXECUTION_RULES,
    Execution,
    balanced_jobs,
    bundle_label,
    bundles,
    gpu_hours,
    load_execution,
    training_images,
    training_jobs,
)
from fednorm.plan.pipeline import (
    RUN_FILES,
    TOP_KEYS,
    TOY_ERROR_SCHEMES,
    TOY_FIGURES,
    TOY_SCATTER_FIGURES,
    Plan,
    ToyPlan,
    load_plan,
    merge,
    merged_config,
)
from fednorm.plan.seeds import SeedPrice, median_bundle_sizes, next_seed_runs, seed_price

__all__ = [
    "AUTO_BUNDLE_RUNS",
    "COLUMNS",
    "CURVE_X",
    "EXECUTION_RULES",
    "FIGURE_EXTENSIONS",
    "FIGURE_KEYS",
    "FIGURE_KINDS",
    "FIGURE_METRICS",  # fednorm.metrics': what a figure's or a claim's y may be
    "REQUIRED",
    "RUN_FILES",
    "RUN_KEYS",
    "SETTINGS",
    "TABLE_EXTENSIONS",
    "TABLE_KINDS",
    "TOP_KEYS",
    "TOY_ERROR_SCHEMES",
    "TOY_FIGURES",
    "TOY_SCATTER_FIGURES",
    "Execution",
    "Figure",
    "Plan",
    "SeedPrice",
    "ToyPlan",
    "balanced_jobs",
    "bundle_label",
    "bundles",
    "expand",
    "extensions",
    "figure_spec",
    "gpu_hours",
    "load_execution",
    "load_plan",
    "matches_where",
    "median_bundle_sizes",
    "merge",
    "merged_config",
    "next_seed_runs",
    "seed_price",
    "training_images",
    "training_jobs",
]
