"""The metric columns, named once: what a run records at each evaluation point (its
``metrics.csv``, fednorm.fl.train), what the summary adds from its ``run.json``
(fednorm.summarize), and what a figure or a claim may plot (fednorm.plan).

Every other module imports these names; none writes the list again.
"""

# The FixBN paper's training dynamics of BN, summed over the layers (fednorm.fl.dynamics)
DYNAMICS = ("stat_change", "stat_deviation", "stat_variance")
# The domains of a feature-shift dataset (``domains``): the digits rendered in six domains at
# the quick scale (fednorm.data.domains), and Digits-Five's five datasets (fednorm.data.digits5)
RENDERED_DOMAINS = ("mnist", "inverted", "colour", "noise", "blur", "texture")
DIGITS5_DOMAINS = ("mnist", "svhn", "usps", "synthdigits", "mnistm")
DOMAINS = tuple(dict.fromkeys((*RENDERED_DOMAINS, *DIGITS5_DOMAINS)))


def domain_metric(domain: str) -> str:
    """The metric column of a domain's accuracy: ``test_accuracy_<domain>``."""
    return f"test_accuracy_{domain}"


# Each domain's accuracy: its test set, through its clients' models (the global model, or each
# client's own under personalized BN, weighted by how much of the domain each client holds)
DOMAIN_ACCURACY = tuple(map(domain_metric, DOMAINS))
# A run's values at an evaluation point (an accuracy as a fraction); ``domain_accuracy``: the
# mean of its domains' accuracies, ``worst_domain_accuracy`` their least (NaN without domains)
RUN_METRICS = ("test_accuracy", "test_loss", "train_loss", "norm_error_mean", "norm_error_var",
               *DYNAMICS, "comm_rounds", "local_test_accuracy", "val_accuracy",
               "domain_accuracy", "worst_domain_accuracy", *DOMAIN_ACCURACY)
METRIC_COLUMNS = ("step", *RUN_METRICS)  # a run's metrics.csv, one row per evaluation point
# from the run's run.json, the same on all its rows; ``engine_revision``: the engine's revision
# that trained it (fednorm.ENGINE_REVISION; empty for a run trained before runs were stamped)
RUN_STATUS = ("status", "wall_time_s", "engine_revision")
# columns read as text whatever they hold (a revision such as '0123456' is no number)
TEXT_COLUMNS = {"engine_revision": str}
SUMMARY_METRICS = (*METRIC_COLUMNS, *RUN_STATUS)  # the summary's last columns, in this order
# What a figure's or a claim's y may be: a run's metric, or lr_scale (the learning rate that
# a tuning figure chose)
FIGURE_METRICS = (*RUN_METRICS, "lr_scale")


# beside a value whose runs diverged, in every table, figure and ledger
DIVERGED_MARK = "†"


def percent(y: str) -> bool:
    """Whether ``y`` is shown in % (an accuracy, stored as a fraction in the summary; a
    domain's too, ``test_accuracy_<domain>``)."""
    return "accuracy" in y
