"""FedAP (fednorm.norms.fedap) against references written another way, in float64: the feature
statistics from one forward over all of a client's images, the Wasserstein distances and the
mixing matrix by loops over clients, layers and channels, each client's served parameters by a
loop over the clients; its pretraining images; its config errors."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from torch.utils._pytree import tree_map

from fednorm import rng
from fednorm.config import ConfigError, run_config
from fednorm.data.synthetic import colour_classes
from fednorm.fl.build import build
from fednorm.norms import FedBatchNorm2d, fedap

N = 4
_DATA = colour_classes(n_train=80, n_test=20, image_size=8, seed=0)
DATA = dataclasses.replace(_DATA, train_x=_DATA.train_x.double(), test_x=_DATA.test_x.double())
BASE = dict(dataset="synthetic", n_train=80, n_test=20, image_size=8, model="fbn_cnn", width=4,
            hidden=8, dropout=0.25, normalizer="fedap", gn_groups=2, n_clients=N,
            partition="gamma", heterogeneity=0.5, batch_size=4, steps=8, lr=[0.05],
            lr_milestones=[], momentum=0.9, eval_every=4, local_steps=2,
            self_weight=0.3, pretrain_passes=2)


def trainer_of(runs: int = 2, **overrides):
    cfgs = [run_config({**BASE, **overrides, "seed": s}) for s in range(runs)]
    return build(cfgs, DATA)


def reference_statistics(model, x):
    """Per BN layer: the mean and biased variance per channel of its input over all of x's
    values, from one forward, by the textbook sums."""
    model.eval()
    seen = []
    handles = [m.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
               for m in model.modules() if isinstance(m, FedBatchNorm2d)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    out = []
    for f in seen:
        values = f.transpose(0, 1).reshape(f.shape[1], -1)
        mean = values.sum(1) / values.shape[1]
        out.append((mean, ((values - mean[:, None]) ** 2).sum(1) / values.shape[1]))
    return out


def reference_matrix(stats, self_weight):
    """Row i: lambda at i, (1 - lambda) 1/d_ij / sum_k 1/d_ik elsewhere; d by loops."""
    n = len(stats)
    d = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            for (mi, vi), (mj, vj) in zip(stats[i], stats[j], strict=True):
                d[i][j] += math.sqrt(sum((float(mi[c]) - float(mj[c])) ** 2
                                         + (math.sqrt(float(vi[c])) - math.sqrt(float(vj[c])))
                                         ** 2 for c in range(len(mi))))
    w = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        total = sum(1.0 / d[i][k] for k in range(n) if k != i)
        for j in range(n):
            w[i, j] = self_weight if i == j else (1 - self_weight) * (1.0 / d[i][j]) / total
    return w


def test_feature_statistics_in_batches_are_those_of_all_the_images_at_once():
    trainer = trainer_of(1)
    x = DATA.train_x[:37]  # batches of 4 and a last one of 1
    got = fedap.feature_statistics(trainer.model, x, 4)
    want = reference_statistics(trainer.model, x)
    assert len(got) == len(want) == len(trainer.layers)
    for (gm, gv), (wm, wv) in zip(got, want, strict=True):
        torch.testing.assert_close(gm, wm, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gv, wv, rtol=1e-12, atol=1e-12)


def test_the_mixing_matrix_is_the_inverse_wasserstein_distances_with_the_self_weight():
    trainer = trainer_of(1)
    batches = trainer.batches
    stats = [reference_statistics(trainer.model, batches.x[batches.index[0, i, :int(s)]])
             for i, s in enumerate(batches.sizes[0])]
    got = fedap.mixing_matrix(fedap.inverse_distances(stats)[None], 0.3)[0]
    torch.testing.assert_close(got, reference_matrix(stats, 0.3), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.sum(1), torch.ones(N, dtype=torch.float64))


def test_over_the_participants_the_matrix_is_that_of_their_clients_alone():
    inverse = torch.rand(2, 5, 5, dtype=torch.float64) + 0.1
    inverse = (inverse + inverse.transpose(1, 2)) * (1 - torch.eye(5, dtype=torch.float64))
    who = torch.tensor([[0, 2, 3], [1, 3, 4]])
    got = fedap.mixing_matrix(inverse, 0.6, who)
    for r in range(2):
        sub = inverse[r][who[r]][:, who[r]]
        for i in range(3):
            others = sum(float(sub[i, k]) for k in range(3) if k != i)
            for j in range(3):
                want = 0.6 if i == j else 0.4 * float(sub[i, j]) / others
                assert math.isclose(float(got[r, i, j]), want, rel_tol=1e-12)
    assert torch.equal(fedap.mixing_matrix(inverse, 0.6, who[:, :1]),
                       torch.ones(2, 1, 1, dtype=torch.float64))


def test_each_client_is_served_its_own_mix_and_keeps_its_own_bn_layers():
    """After a round: client i's parameters outside BN are sum_j W_ij theta_j of the clients'
    trained ones (a loop over clients), its BN parameters and statistics its own trained ones,
    the global parameters the clients' plain mean; the matrix is the one measured before
    round 0 under the pretrained model."""
    trainer = trainer_of(2)
    trainer.before_training()
    seen = {}
    serve = trainer.parts.serve

    def recorded(state, matrix, clients, who):
        seen.update(mixing=matrix.clone(), clients={k: t.clone() for k, t in clients.items()})
        serve(state, matrix, clients, who)

    trainer.parts.serve = recorded
    before = {k: s.clone() for k, s in trainer.state.stats.items()}
    trainer.round(0)
    W, clients = seen["mixing"], seen["clients"]
    torch.testing.assert_close(W, fedap.mixing_matrix(trainer.state.method[fedap.KEY], 0.3))
    bn = {f"{la.key}.{p}" for la in trainer.layers for p in ("weight", "bias")}
    stats = set(trainer.stat_names)
    assert set(trainer.state.local) == set(trainer.names) | stats
    for k in trainer.names:
        own = trainer.state.local[k]
        for r in range(2):
            for i in range(N):
                want = (clients[k][r, i] if k in bn else
                        sum(W[r, i, j] * clients[k][r, j] for j in range(N)))
                torch.testing.assert_close(own[r, i], want, rtol=1e-12, atol=1e-12)
        if k not in bn:
            torch.testing.assert_close(trainer.state.params[k], clients[k].mean(1))
    for k in stats:  # each client's own; the server aggregates none
        assert torch.equal(trainer.state.stats[k], before[k])
        assert not torch.equal(trainer.state.local[k][:, 0], before[k])
    assert not (W == 0.3 * torch.eye(N, dtype=W.dtype)).all()  # the clients do mix


def test_pretraining_images_are_a_class_balanced_share_of_the_clients_training_images():
    trainer = trainer_of(1)
    b = trainer.batches
    picked = fedap.pretraining_indices(b.y, b.index[0], b.sizes[0], torch.tensor(7))
    pooled = torch.cat([b.index[0, i, :int(s)] for i, s in enumerate(b.sizes[0])])
    assert set(picked.tolist()) <= set(pooled.tolist()) and len(set(picked.tolist())) == len(picked)
    for c in b.y[pooled].unique():
        assert int((b.y[picked] == c).sum()) == round(0.3 * int((b.y[pooled] == c).sum()))
    again = fedap.pretraining_indices(b.y, b.index[0], b.sizes[0], torch.tensor(7))
    other = fedap.pretraining_indices(b.y, b.index[0], b.sizes[0], torch.tensor(8))
    assert torch.equal(picked, again) and not torch.equal(picked, other)


def test_a_run_measures_the_same_matrix_alone_and_in_a_bundle():
    alone, bundled = trainer_of(1), trainer_of(2)
    alone.before_training()
    bundled.before_training()
    assert torch.equal(alone.state.method[fedap.KEY][0], bundled.state.method[fedap.KEY][0])
    kept = bundled.state.select([1]).method[fedap.KEY]
    assert torch.equal(kept[0], bundled.state.method[fedap.KEY][1])


def test_fedap_refuses_streamed_images_and_a_self_weight_outside_0_1():
    with pytest.raises(ConfigError, match="self_weight"):
        run_config({**BASE, "self_weight": 1.5})
    with pytest.raises(ConfigError, match="'imagenet'"):
        run_config({**BASE, "dataset": "imagenet", "model": "resnet18"})


def test_a_resumed_bundle_mixes_with_the_matrix_measured_before_round_0():
    """The matrix is kept in the state (``method``): a trainer that loads a state saved after
    round 0, and never pretrains, trains round 1 to the same bits."""
    first = trainer_of(2)
    first.before_training()
    first.round(0)
    saved = tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t,
                     first.state.state_dict())
    first.round(2)
    resumed = trainer_of(2)
    resumed.state.load_state_dict(saved)
    resumed.round(2)
    for part in ("params", "local", "method"):
        for k, t in getattr(first.state, part).items():
            assert torch.equal(getattr(resumed.state, part)[k], t), (part, k)


def test_pretraining_is_plain_sgd_with_pytorch_s_batch_norm():
    """The pretraining against torch.optim.SGD (no momentum) on the same model with every
    federated BN layer replaced by nn.BatchNorm2d (momentum beta), in the same batch order."""
    trainer = trainer_of(1, dropout=0.0)
    x, y = DATA.train_x[:30], DATA.train_y[:30]
    key = torch.tensor(3)
    got = fedap.pretrain(copy.deepcopy(trainer.model), x, y, 0.05, 4, 0.1, key, passes=2)
    ref = copy.deepcopy(trainer.model)
    for name, m in list(ref.named_modules()):
        if isinstance(m, FedBatchNorm2d):
            bn = torch.nn.BatchNorm2d(m.num_features, eps=m.eps, momentum=0.1).double()
            bn.load_state_dict({**m.state_dict(), "num_batches_tracked": torch.tensor(0)})
            parent, _, leaf = name.rpartition(".")
            setattr(ref.get_submodule(parent) if parent else ref, leaf, bn)
    ref.train()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for e in range(2):
        order = rng.uniform(rng.fold(key, e), (len(y),)).argsort()
        for start in range(0, len(y) - 4 + 1, 4):  # the last smaller batch left out
            idx = order[start:start + 4]
            opt.zero_grad()
            torch.nn.functional.nll_loss(ref(x[idx]), y[idx]).backward()
            opt.step()
    want = {k: t for k, t in ref.state_dict().items() if "num_batches" not in k}
    assert want.keys() == got.state_dict().keys()
    for k, t in got.state_dict().items():
        torch.testing.assert_close(t, want[k], rtol=1e-10, atol=1e-12)
