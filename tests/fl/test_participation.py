"""Partial participation (``participation``; the FixBN paper, Fig. I): the drawn set, and one
FedAvg round against a plain per-client loop that trains model copies and averages only the
drawn participants (float64).

References are written another way: the participants come from :func:`participant_indices`
(the engine's function, itself checked against a hand ranking of the same uniform draws), the
clients train as deep copies in a Python loop, the server's averages are ``torch.stack(...)
.mean(0)`` over the participants, and FBN's statistics are computed from each participant's
BN inputs with ``torch.var_mean``.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from client_loop import hybrid_start_statistics

from fednorm import rng
from fednorm.config import ConfigError, bundle_key, participants_per_round, run_config
from fednorm.data.augment import augment_for
from fednorm.fl.batches import ClientBatches
from fednorm.fl.build import make_trainer
from fednorm.fl.participation import Participants, participant_indices, participation_keys
from fednorm.fl.round import FedAvg
from fednorm.fl.train import train
from fednorm.models import build_model
from fednorm.norms import (
    BatchStats,
    FederatedStats,
    HybridStats,
    NormContext,
    bn_layers,
    norm_context,
    normalizer_for,
)

N, B, SIZE = 5, 4, 8


def config(**overrides):
    values = dict(
        dataset="synthetic", n_train=60, n_test=20, image_size=SIZE, model="fbn_cnn", width=4,
        hidden=8, dropout=0.0, normalizer="bn", gn_groups=2, n_clients=N, batch_size=B,
        local_steps=2, steps=4, lr=[0.05], lr_milestones=[], momentum=0.9,
        momentum_convention="pytorch", weight_decay=1e-3, participation=0.4, eval_every=2,
        seed=3,
    )
    values.update(overrides)
    return run_config(values)


def data(shift: dict[int, float] | None = None, per_client: int = 6):
    """float64 images; client i's shifted by i/2, plus ``shift[i]`` (a far-off client)."""
    gen = torch.Generator().manual_seed(0)
    owner = torch.arange(N * per_client) // per_client
    x = torch.randn(N * per_client, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
    offset = owner.double() / 2 + torch.tensor([(shift or {}).get(i, 0.0) for i in range(N)],
                                                dtype=torch.float64)[owner]
    x = x + offset.view(-1, 1, 1, 1)
    y = torch.randint(0, 10, (N * per_client,), generator=gen)
    parts = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(N)]
    return x, y, parts


def drawn(cfg, first_step: int) -> list[int]:
    """The participants of the round from ``first_step``, through the engine's function."""
    return participant_indices(participation_keys([cfg.seed]), first_step, cfg.n_clients,
                               cfg.participants)[0].tolist()


# --- the drawn set ------------------------------------------------------------------------------


@pytest.mark.parametrize(("participation", "n", "m"), [
    (0.5, 5, 3), (0.3, 5, 2), (0.01, 10, 1), (1.0, 100, 100), (0.1, 100, 10), (0.05, 5, 1),
    (0.25, 10, 3),  # 2.5 rounds half up
])
def test_participants_per_round_rounds_half_up_and_at_least_one(participation, n, m):
    assert participants_per_round(participation, n) == m
    assert run_config({"n_clients": n, "participation": participation}).participants == m


def test_the_drawn_set_is_the_m_smallest_uniform_draws_distinct_and_reproducible():
    seeds, n = [0, 1, 7], 10
    keys = participation_keys(seeds)
    sets = []
    for step in range(0, 60, 2):
        for m in (3, 5, 10):
            who = participant_indices(keys, step, n, m)
            assert who.shape == (3, m) and who.dtype == torch.int64
            assert torch.equal(who, participant_indices(keys, step, n, m))  # reproducible
            # alone (a bundle of one) it draws the same set
            assert torch.equal(participant_indices(participation_keys([1]), step, n, m)[0],
                               who[1])
            # the reference: rank the same draws by hand, ties to the lower index
            for r, seed in enumerate(seeds):
                key = rng.fold(rng.fold(rng.run_key(seed), rng.PARTICIPATE), step)
                u = rng.uniform(key, (n,)).tolist()
                smallest = sorted(range(n), key=lambda i, u=u: (u[i], i))[:m]
                assert sorted(smallest) == who[r].tolist()
        sets.append(tuple(participant_indices(keys, step, n, 3)[0].tolist()))
    assert len(set(sets)) > 10  # different rounds draw different sets
    counts = torch.zeros(n)
    for s in sets:
        counts[list(s)] += 1
    assert counts.min() > 0  # every client takes part now and then
    # other seeds draw other sets
    firsts = [participant_indices(participation_keys([s]), 0, n, 3) for s in range(8)]
    assert len({tuple(f[0].tolist()) for f in firsts}) > 1


def test_a_round_draws_its_participants_at_its_first_step():
    keys, n = participation_keys([0, 1, 7]), 10
    chosen = Participants(keys, n, 3, local_steps=4)
    for step in (8, 9, 11):  # the round of steps 8..11 draws at step 8
        assert torch.equal(chosen.at(step), participant_indices(keys, 8, n, 3))
    assert not torch.equal(chosen.at(12), chosen.at(11))
    assert torch.equal(chosen.select(torch.tensor([2, 0])).at(8), chosen.at(8)[[2, 0]])


@pytest.mark.parametrize("augment", ["none", "crop_flip", "resized_crop_flip"])
def test_a_participants_sampler_draws_their_rows_of_the_full_draw(augment):
    """Two runs of 5 clients with different splits; the sampler for m = 2 participants draws,
    at every step, exactly the full sampler's batches of those clients (indices, labels,
    augmented images), so a participant's batch does not depend on the idle clients'."""
    x, y, parts = data()
    other = [torch.arange(N * 6).flip(0)[i * 6:(i + 1) * 6] for i in range(N)]
    seeds = [3, 8]
    full = ClientBatches(x, y, [parts, other], B, seeds, augment=augment_for(augment, 2))
    chosen = Participants(participation_keys(seeds), N, 2, local_steps=2)
    few = full.for_participants(chosen)
    kept = few.select(torch.tensor([1]))
    for step in range(6):
        who = chosen.at(step)
        rows = (who[:, :, None] * B + torch.arange(B)).flatten(1)  # (R, m*b) of the full draw
        x_full, y_full = full.sample(step)
        x_few, y_few = few.sample(step)
        assert x_few.shape == (2, 2 * B, 3, SIZE, SIZE)
        assert torch.equal(few.indices(step), full.indices(step).gather(1, rows))
        assert torch.equal(y_few, y_full.gather(1, rows))
        assert torch.equal(x_few, torch.stack([x_full[r, rows[r]] for r in range(2)]))
        assert torch.equal(kept.sample(step)[0], x_few[1:])  # a run dropped: the same draws
    assert full.participants is None  # the full sampler is left as it was


@pytest.mark.parametrize("local_steps", [1, 2])
def test_only_the_participants_compute(local_steps, monkeypatch):
    """Runs that draw m = 2 of 5 clients sample and forward 2 batches a run per local step (not
    5), alone and in a bundle; runs with different m do not share a bundle (their stacks would
    be ragged)."""
    from fednorm.data.synthetic import colour_classes

    dataset = colour_classes(n_train=60, n_test=20, image_size=SIZE, seed=0)
    seen: list[tuple[int, ...]] = []
    sample = ClientBatches.sample
    monkeypatch.setattr(ClientBatches, "sample",
                        lambda self, step: (self.stream == rng.SAMPLE and seen.append(
                            tuple(sample(self, step)[1].shape))) or sample(self, step))
    same = [config(local_steps=local_steps, steps=4, seed=s) for s in (3, 4)]
    for c in same:
        seen.clear()
        train(c, dataset)
        assert set(seen) == {(1, 2 * B)}
    seen.clear()
    from fednorm.fl.train import train_bundle

    train_bundle(same, dataset)  # as alone: tests/fl/test_bundle.py (float64)
    assert set(seen) == {(2, 2 * B)}
    mixed = [same[0], dataclasses.replace(same[1], participation=0.6)]  # m = 2 and 3
    assert bundle_key(mixed[0]) != bundle_key(mixed[1])
    with pytest.raises(ValueError, match="bundle_key"):
        train_bundle(mixed, dataset)


# --- one FedAvg round against model copies ------------------------------------------------------


def per_client_reference(cfg, model, x, y, parts, rounds):
    """FedAvg the plain way with partial participation: per round, a deep copy of the global
    model for each drawn participant, E local steps of torch.optim.SGD (momentum kept per client
    across the rounds it takes part in: ``local``), then the mean of the participants'
    parameters and (naive BN) running statistics. Idle clients do nothing.

    Hybrid BN (``normalizer: hybridbn``): the clients' statistics stay the round's global G;
    the server pools the statistics of the downloaded global model (with each participant's
    own d) on the participants' round-start images alone (tests/fl/client_loop.py, drawn for
    all n clients: a participant's rows are the same).

    Own parts (``own_keys``: names of the state dict): each client keeps them from the rounds
    it takes part in; a client that never took part starts from the model's values at the
    start (``never_averaged``: FedBN's, SiloBN's) or from the global ones (Hybrid BN's d, which
    the server also averages). The server never averages the ``never_averaged`` ones, and
    aggregates no statistics when they are among them.
    """
    n, E = cfg.n_clients, cfg.local_steps
    hybrid = cfg.normalizer == "hybridbn"
    own_keys, never_averaged = own_parts(cfg, model)
    initial = {k: t.clone() for k, t in model.state_dict().items() if k in own_keys}
    own: dict[int, dict[str, torch.Tensor]] = {}
    replay = ClientBatches(x, y, [parts], B, [cfg.seed])
    S = cfg.hybridbn_stats_images
    stat_replay = replay.resized(S, rng.STATISTICS)
    buffers: dict[int, list[torch.Tensor]] = {}

    def client_model(i: int) -> torch.nn.Module:
        client = copy.deepcopy(model)
        start = own.get(i, {k: initial[k] for k in never_averaged})
        client.load_state_dict({**client.state_dict(), **start})
        return client

    for rnd in range(rounds):
        first = rnd * E
        who = drawn(cfg, first)
        clients = {i: client_model(i) for i in who}
        if hybrid:
            xs = stat_replay.sample(first)[0][0]
            new_stats = hybrid_start_statistics(list(clients.values()),
                                                [xs[i * S:(i + 1) * S] for i in who],
                                                cfg.hybridbn_report, cfg.hybridbn_momentum)
        layers = {i: bn_layers(c) for i, c in clients.items()}  # names the report keys
        opts = {}
        for i, client in clients.items():
            opts[i] = torch.optim.SGD(client.parameters(), lr=cfg.lr[0], momentum=cfg.momentum,
                                      weight_decay=cfg.weight_decay)
            if i in buffers:
                for p, buf in zip(client.parameters(), buffers[i], strict=True):
                    opts[i].state[p]["momentum_buffer"] = buf.clone()
        for e in range(E):
            xb, yb = (t[0] for t in replay.sample(first + e))
            for i, client in clients.items():
                rows = slice(i * B, (i + 1) * B)
                ctx = NormContext(HybridStats() if hybrid else BatchStats(), 1, n,
                                  cfg.bn_momentum)
                opts[i].zero_grad()
                with norm_context(ctx):
                    F.nll_loss(client(xb[rows]), yb[rows]).backward()
                opts[i].step()
                with torch.no_grad():
                    for layer in [] if hybrid else layers[i]:  # Hybrid BN: G stays
                        layer.running_mean.copy_(ctx.reports[layer.key].mean[0])
                        layer.running_var.copy_(ctx.reports[layer.key].var[0])
        for i, client in clients.items():
            buffers[i] = [opts[i].state[p]["momentum_buffer"].clone()
                          for p in client.parameters()]
        for i, client in clients.items():
            own[i] = {k: t.clone() for k, t in client.state_dict().items() if k in own_keys}
        states = [c.state_dict() for c in clients.values()]
        new = {k: torch.stack([s[k] for s in states]).mean(0) for k in states[0]}
        for name, (mean, var) in new_stats.items() if hybrid else ():
            new[f"{name}.running_mean"], new[f"{name}.running_var"] = mean, var
        stats_kept = any("running" in k for k in never_averaged)
        for k, t in model.state_dict().items():
            if k in never_averaged or (stats_kept and "running" in k):
                new[k] = t  # the clients' own parts never come back into the global model
        model.load_state_dict(new)
    return model, buffers, own


def own_parts(cfg, model) -> tuple[set[str], set[str]]:
    """The state-dict names each client keeps (FedBN: its BN layers' statistics and affine
    parameters; SiloBN: the statistics; Hybrid BN with its own d: the layers' mix), and those
    of them the server never averages (all but Hybrid BN's d)."""
    parts = {"fedbn": ("running_mean", "running_var", "weight", "bias"),
             "silobn": ("running_mean", "running_var")}.get(cfg.normalizer, ())
    keys = {f"{layer.key}.{p}" for layer in bn_layers(model) for p in parts}
    if cfg.normalizer == "hybridbn" and cfg.hybridbn_mixing == "client":
        return {f"{layer.key}.mix" for layer in bn_layers(model)}, set()
    return keys, keys


def fresh_model(cfg):
    torch.manual_seed(cfg.seed)
    return build_model(cfg).double()


def trained_as_the_reference(cfg, x, y, parts, rounds):
    """FedAvg's rounds on one run, checked against the per-client loop (parameters and
    statistics, float64). Returns the model, its state at the start, the trainer and the
    reference's momentum buffers per client."""
    model, ref = fresh_model(cfg), fresh_model(cfg)
    start = copy.deepcopy(model.state_dict())
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], B, [cfg.seed]))
    assert isinstance(trainer, FedAvg)
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    ref_model, buffers, _ = per_client_reference(cfg, ref, x, y, parts, rounds)
    for k, t in ref_model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], t, rtol=1e-10, atol=1e-12,
                                   msg=lambda msg, k=k: f"{k}: {msg}")
    return model, start, trainer, buffers


@pytest.mark.parametrize("rounds", [1, 3])
def test_fedavg_rounds_average_only_the_drawn_participants(rounds):
    """n = 5, participation 0.4: m = 2 of the 5 clients per round; parameters, statistics and
    each client's momentum (local) as the per-client loop. Idle clients' momenta untouched."""
    cfg = config(steps=2 * rounds)
    assert cfg.participants == 2
    x, y, parts = data()
    model, start, trainer, buffers = trained_as_the_reference(cfg, x, y, parts, rounds)
    assert not torch.equal(model.classifier[3].bias, start["classifier.3.bias"])
    names = [k for k, _ in model.named_parameters()]
    for i in range(N):
        for k, want in zip(names, buffers.get(i, [None] * len(names)), strict=True):
            got = trainer.state.momenta[k][0, i]
            if want is None:  # never drawn: its momentum was never touched
                assert torch.equal(got, torch.zeros_like(got)), (i, k)
            else:
                torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # the full average would differ: the idle clients are really left out
    if rounds == 1:
        everyone = per_client_reference(dataclasses.replace(cfg, participation=1.0),
                                         fresh_model(cfg), x, y, parts, 1)[0]
        assert not torch.allclose(everyone.classifier[3].bias, model.classifier[3].bias)


@pytest.mark.parametrize("normalizer", ["fbn", "bn"])
def test_idle_clients_statistics_stay_out_of_the_bn_aggregation(normalizer):
    """One E = 1 round with m = 2 of 5: the idle clients' images are shifted by +100, so their
    statistics, were they averaged in, would move every channel mean by ~60. The server's running
    statistics are those of the participants alone, by hand: each participant's report from
    its BN inputs (torch.var_mean; FBN: Km/(Km-1) with the union of the m participants, and the
    spread term of Algorithm 2, line 10, over them)."""
    cfg = config(normalizer=normalizer, local_steps=1, steps=1)
    who = drawn(cfg, 0)
    assert len(who) == 2
    x, y, parts = data(shift={i: 100.0 for i in range(N) if i not in who})
    model, ref = fresh_model(cfg), fresh_model(cfg)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], B, [cfg.seed]))
    trainer.round(0)
    xb, _ = (t[0] for t in ClientBatches(x, y, [parts], B, [cfg.seed]).sample(0))
    layers = bn_layers(ref)
    inputs = {}
    for layer in layers:
        layer.register_forward_hook(lambda mod, inp, out: inputs.__setitem__(mod.key, inp[0]))
    m, beta = len(who), cfg.bn_momentum
    rule = FederatedStats() if normalizer == "fbn" else BatchStats()
    reports = {la.key: [] for la in layers}
    with torch.no_grad():
        for i in who:
            with norm_context(NormContext(rule, 1, N, beta)):
                ref(xb[i * B:(i + 1) * B])
            for la in layers:
                inp = inputs[la.key]
                k = inp.numel() // inp.shape[1]
                var, mean = torch.var_mean(inp.transpose(0, 1).flatten(1), dim=1, correction=0)
                unbias = k * m / (k * m - 1) if normalizer == "fbn" else k / (k - 1)
                reports[la.key].append(((1 - beta) * la.running_mean + beta * mean,
                                        (1 - beta) * la.running_var + beta * var * unbias, k))
    for layer in bn_layers(model):
        rows = reports[layer.key]
        means = torch.stack([r[0] for r in rows])
        mean = means.mean(0)
        var = torch.stack([r[1] for r in rows]).mean(0)
        if normalizer == "fbn":
            k = rows[0][2]
            var = var + k * m / ((k * m - 1) * beta) * ((means - mean) ** 2).mean(0)
        torch.testing.assert_close(layer.running_mean, mean, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(layer.running_var, var, rtol=1e-10, atol=1e-12)
    assert bn_layers(model)[0].running_mean.abs().max() < 5  # nothing of the +100 clients


@pytest.mark.parametrize("rounds", [1, 3])
def test_hybrid_bn_pools_only_the_drawn_participants_batches(rounds):
    """Hybrid BN with E = 2 and m = 2 of 5 clients: parameters (the mixing weights d among
    them) and the global statistics as the per-client loop with the server's pool by hand over
    the participants' round-start statistics of the global model. In one round the idle
    clients' images are shifted by +100: pooled in, they would move every channel mean of the
    first layer by far more than 5."""
    cfg = config(normalizer="hybridbn", steps=2 * rounds)
    assert cfg.participants == 2
    who = drawn(cfg, 0)
    x, y, parts = data(shift={i: 100.0 for i in range(N) if i not in who} if rounds == 1
                       else None)
    model, _, _, _ = trained_as_the_reference(cfg, x, y, parts, rounds)
    first = bn_layers(model)[0]
    assert not torch.equal(first.mix, torch.zeros_like(first.mix))  # d trained
    assert not torch.allclose(first.running_var, torch.ones_like(first.running_var))
    if rounds == 1:
        assert first.running_mean.abs().max() < 5  # nothing of the +100 clients


@pytest.mark.parametrize("normalizer", ["fedbn", "silobn", "hybridbn"])
def test_clients_keep_their_own_parts_across_the_rounds_they_miss(normalizer):
    """n = 5, m = 2 a round, E = 2, 5 rounds: FedBN's and SiloBN's own BN parts and Hybrid BN's
    own d under partial participation. Parameters and statistics as the per-client loop in
    which each client keeps its own parts (``per_client_reference``, float64); each client's
    parts in the engine's state as the loop's; an idle client's parts unchanged until it
    returns (one client at least is drawn, then idle, then drawn again); clients trained on
    other data hold other parts."""
    rounds = 5
    cfg = config(normalizer=normalizer, steps=2 * rounds)
    x, y, parts = data()
    model, ref = fresh_model(cfg), fresh_model(cfg)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg),
                           ClientBatches(x, y, [parts], B, [cfg.seed]))
    history = []
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
        history.append({k: t[0].clone() for k, t in trainer.state.local.items()})
    ref_model, _, own = per_client_reference(cfg, ref, x, y, parts, rounds)
    for k, t in ref_model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], t, rtol=1e-10, atol=1e-12,
                                   msg=lambda msg, k=k: f"{k}: {msg}")
    keys = own_parts(cfg, ref)[0]
    assert keys and keys == set(trainer.state.local)
    for i, mine in own.items():
        for k in keys:
            torch.testing.assert_close(trainer.state.local[k][0, i], mine[k], rtol=1e-10,
                                       atol=1e-12)
    draws = [set(drawn(cfg, r * cfg.local_steps)) for r in range(rounds)]
    for r in range(1, rounds):
        for i in set(range(N)) - draws[r]:
            for k in keys:
                assert torch.equal(history[r][k][i], history[r - 1][k][i]), (r, i, k)
    assert any(i in draws[a] and i not in draws[b] and i in draws[c]
               for i in range(N) for a in range(rounds) for b in range(a + 1, rounds)
               for c in range(b + 1, rounds))
    a, b = sorted(own)[:2]
    assert not all(torch.allclose(own[a][k], own[b][k]) for k in keys)


def test_full_participation_is_the_default_run_bit_for_bit():
    """participation 1.0 is the default: DSGD's fused pass, no participants; the participants'
    path with every client drawn (0.95 x 5 -> m = 5) computes the same numbers up to
    rounding."""
    cfg = config(local_steps=1, steps=4, participation=1.0)
    default = dataclasses.replace(cfg)
    values = cfg.identity()
    del values["participation"]
    assert run_config(values) == cfg == default
    x, y, parts = data()
    runs = []
    for c in (cfg, run_config(values), config(local_steps=1, steps=4, participation=0.95)):
        model = fresh_model(c)
        trainer = make_trainer([c], [model], normalizer_for(c),
                               ClientBatches(x, y, [parts], B, [c.seed]))
        assert trainer.partial == (c.participation < 1)
        for step in range(c.steps):
            trainer.round(step)
        runs.append(model.state_dict())
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k]), k
        torch.testing.assert_close(runs[2][k], runs[0][k], rtol=1e-10, atol=1e-12)


def test_partial_runs_train_end_to_end_and_diverge_alone():
    from fednorm.data.synthetic import colour_classes

    dataset = colour_classes(n_train=60, n_test=20, image_size=SIZE, seed=0)
    result = train(config(steps=4, normalizer="fbn", participation=0.6), dataset)
    assert result.status == "ok" and len(result.rows) == 3


# --- what partial participation refuses --------------------------------------------------------


@pytest.mark.parametrize(("values", "key"), [
    (dict(attack="sf", f=1), "attack"),
    (dict(aggregator="median"), "aggregator"),
    (dict(nnm=True), "nnm"),
    (dict(attack_updates=True, normalizer="gn"), "attack_updates"),
    (dict(normalizer="central", local_steps=1), "participation"),
    (dict(normalizer="fbn", fbn_init="first_batch"), "fbn_init"),
    (dict(participation=0.0), "participation"),
    (dict(participation=1.5), "participation"),
    (dict(participation=True), "participation"),
])
def test_participation_refuses_what_it_cannot_mask(values, key):
    with pytest.raises(ConfigError) as err:
        config(**values)
    message = str(err.value)
    assert f"key '{key}'" in message and "allowed" in message
    if "participation" in values:
        assert "(0, 1]" in message


def test_runs_drawing_the_same_number_of_clients_bundle_together_the_others_apart():
    assert bundle_key(config(participation=0.4)) == bundle_key(config(participation=0.45))  # 2
    assert bundle_key(config(participation=0.4)) != bundle_key(config(participation=0.8))  # 4
    assert bundle_key(config(participation=0.4)) != bundle_key(config(participation=1.0))
    assert bundle_key(config(participation=1.0)) == bundle_key(
        config(participation=1.0, seed=9, lr=[0.3]))
