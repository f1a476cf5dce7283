"""FixBN's variants (``fixbn_fix``; the FixBN paper, Appendix B, Table H): from the freeze step
T* the BN statistics (``stats``, FixBN), the BN affine parameters gamma, beta (``affine``; the
statistics go on as naive BN) or both (``both``) stop changing, bit for bit; everything else
trains. Momentum and weight decay are on, so a frozen parameter that were merely given a zero
gradient would still move."""

from __future__ import annotations

import pytest
import torch

from fednorm.config import ConfigError, RunConfig, run_config
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.round import DSGD, FedAvg
from fednorm.models import build_model
from fednorm.norms import BatchStats, FedBatchNorm2d, FrozenStats, bn_layers, normalizer_for

N, B, SIZE = 3, 4, 8


def config(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=SIZE, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="fixbn", n_clients=N, batch_size=B, steps=8,
        fixbn_freeze=0.5, lr=[0.05], lr_milestones=[], momentum=0.9,
        momentum_convention="pytorch", weight_decay=1e-2, eval_every=4, seed=0,
    )
    values.update(overrides)
    return run_config(values)


def data():
    gen = torch.Generator().manual_seed(0)
    owner = torch.arange(N * 6) // 6
    x = torch.randn(N * 6, 3, SIZE, SIZE, generator=gen) + owner.float().view(-1, 1, 1, 1) / 2
    y = torch.randint(0, 10, (N * 6,), generator=gen)
    return x, y, [torch.arange(i * 6, (i + 1) * 6) for i in range(N)]


def trajectory(cfg):
    """Per round: (affine params, running statistics, other params) snapshots, as clones,
    taken after the round; the first entry is before training."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg)
    x, y, parts = data()
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], B, [cfg.seed]))
    layers = bn_layers(model)
    affine_ids = {id(p) for la in layers for p in (la.weight, la.bias)}

    def snap():
        affine = [p.detach().clone() for la in layers for p in (la.weight, la.bias)]
        stats = [t.clone() for la in layers for t in (la.running_mean, la.running_var)]
        other = [p.detach().clone() for p in model.parameters() if id(p) not in affine_ids]
        return affine, stats, other

    shots = [snap()]
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
        shots.append(snap())
    return trainer, shots


def same(a, b):
    return all(torch.equal(s, t) for s, t in zip(a, b, strict=True))


@pytest.mark.parametrize("local_steps", [1, 2])
@pytest.mark.parametrize("fix", ["stats", "affine", "both"])
def test_what_fixbn_fixes_is_bit_identical_from_the_freeze_round_on(fix, local_steps):
    """T* = 4 (steps 8): the rounds before it move gamma, beta and the statistics; from it on
    the fixed ones are bit-identical (on the global model), the others and every other
    parameter keep moving. FedAvg (E = 2) with global momentum: the clients' copies and the
    server's average must leave them exact too."""
    extra = dict(client_momentum="global") if local_steps == 2 else {}
    cfg = config(fixbn_fix=fix, local_steps=local_steps, **extra)
    trainer, shots = trajectory(cfg)
    assert isinstance(trainer, DSGD if local_steps == 1 else FedAvg)
    freeze_round = 4 // local_steps  # shots[freeze_round]: the state the freeze starts from
    rounds = len(shots) - 1
    for r in range(1, rounds + 1):
        (a0, s0, o0), (a1, s1, o1) = shots[r - 1], shots[r]
        assert not same(o0, o1)  # the rest always trains
        frozen_now = r > freeze_round  # the round from step (r - 1) * E starts at or after T*
        affine_fixed = frozen_now and fix in ("affine", "both")
        stats_fixed = frozen_now and fix in ("stats", "both")
        assert same(a0, a1) == affine_fixed, (r, "affine")
        assert same(s0, s1) == stats_fixed, (r, "stats")
    # every fixed tensor is exactly its value at the freeze, at the end
    a_end, s_end, _ = shots[-1]
    if fix in ("affine", "both"):
        assert same(a_end, shots[freeze_round][0])
    if fix in ("stats", "both"):
        assert same(s_end, shots[freeze_round][1])


def test_frozen_params_are_the_bn_layers_weight_and_bias_from_t_star():
    cfg = config(fixbn_fix="affine")
    torch.manual_seed(0)
    model = build_model(cfg)
    normalizer = normalizer_for(cfg)
    want = {f"{name}.{p}" for name, mod in model.named_modules()
            if type(mod) is FedBatchNorm2d for p in ("weight", "bias")}
    assert len(want) == 8 and want <= {k for k, _ in model.named_parameters()}
    assert normalizer.frozen_params_at(3, model) == frozenset()
    assert normalizer.frozen_params_at(4, model) == want
    assert normalizer.frozen_params_at(7, model) == want
    # affine: the statistics stay naive BN throughout; both: frozen from T*
    assert all(isinstance(normalizer.rule_at(s), BatchStats) for s in range(8))
    both = normalizer_for(config(fixbn_fix="both"))
    assert isinstance(both.rule_at(3), BatchStats) and isinstance(both.rule_at(4), FrozenStats)
    assert both.frozen_params_at(4, model) == want
    assert normalizer_for(config()).frozen_params_at(7, model) == frozenset()


@pytest.mark.parametrize("normalizer", ["bn", "fbn", "gn"])
def test_fixbn_fix_other_than_stats_needs_fixbn(normalizer):
    with pytest.raises(ConfigError, match=r"key 'fixbn_fix' has value 'affine'.*'fixbn'"):
        config(normalizer=normalizer, fixbn_fix="affine", gn_groups=2)
    assert config(normalizer=normalizer, gn_groups=2).fixbn_fix == "stats"
    with pytest.raises(ConfigError, match=r"key 'fixbn_fix' has value 'mu'.*'both'"):
        config(fixbn_fix="mu")
    assert RunConfig().fixbn_fix == "stats"
