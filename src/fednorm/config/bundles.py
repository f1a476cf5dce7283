"""Which runs may train together in one bundle (one process, vectorized over runs)."""

from __future__ import annotations

from fednorm.config.run import FIELDS, RunConfig

# What may differ between the runs of one bundle (fednorm.fl.train.train_bundle).
BUNDLE_FREE = ("seed", "partition", "heterogeneity", "lr", "lr_scale", "client_momentum",
               "participation")


# The attack on the statistics and the server's rule for them: per run in a bundle, unless the
# model updates are attacked (FedAvg's per-client update path has one server per bundle).
SERVER_FREE = ("attack", "aggregator", "nnm", "foe_eps", "alie_z", "var_floor", "attack_stats")


def bundle_key(cfg: RunConfig) -> tuple:
    """Which runs may train together in one bundle (one process, vectorized over runs): those
    with equal keys share the shape of their computation. Every field counts except the run's
    ``seed``, its data split (``partition``, ``heterogeneity``), its ``lr`` values (a stacked
    hyper-parameter, and so is ``lr_scale``; ``lr_milestones`` must match, they decide when
    every run's lr moves) and
    its ``client_momentum`` (a per-run mask on what happens to the momenta between rounds), its
    ``participation`` (a per-run draw of the round's clients; the number m of them still
    counts: every run of a bundle trains its m participants alone, in one (R, m) stack; m < n
    runs train on FedAvg's per-client path, full ones on the code without participants, so a
    full run computes the same alone or bundled),
    and, unless ``attack_updates``, the attack on the statistics and the server's rule for them
    (``SERVER_FREE``; whether a run is attacked at all still counts).
    """
    free = BUNDLE_FREE if cfg.attack_updates else BUNDLE_FREE + SERVER_FREE
    # attacked or not decides how many clients' batches the normalization-error probe takes
    attacked = ("attacked", cfg.attack != "none")
    partial = ("participants", cfg.participants if cfg.participation < 1 else None)
    return (*((name, getattr(cfg, name)) for name in FIELDS if name not in free), attacked,
            partial)
