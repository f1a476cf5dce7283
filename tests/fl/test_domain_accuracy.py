"""Each domain's accuracy (feature shift; fednorm.fl.evaluate.evaluate_chunks) against the
models run by hand: the global model on each domain's test images, and under personalized BN
each client's own model, weighted by the share of the domain it holds."""

from __future__ import annotations

import copy

import torch
from test_engine import _float64, batches_for, client_data, tiny_config, twin_models  # noqa: F401

from fednorm.fl.build import make_trainer
from fednorm.fl.evaluate import evaluate_chunks
from fednorm.norms import normalizer_for


def trained(normalizer: str):
    """A bundle of one trained 2 rounds (E = 2), and its test images in 3 domains (the
    images shifted per domain, so the accuracies differ), in chunks of 5."""
    cfg = tiny_config(normalizer=normalizer, local_steps=2, steps=4, lr=[0.5])
    x, y, parts = client_data()
    model, _ = twin_models(cfg)
    trainer = make_trainer([cfg], [model], normalizer_for(cfg), batches_for(x, y, parts, 4))
    for first in range(0, cfg.steps, cfg.local_steps):
        trainer.round(first)
    gen = torch.Generator().manual_seed(5)
    domain_of = torch.arange(3).repeat_interleave(7)
    test_x = torch.randn(21, *x.shape[1:], generator=gen) + 2 * domain_of.view(-1, 1, 1, 1)
    test_y = torch.randint(0, 10, (21,), generator=gen)
    chunks = lambda size: ((test_x[i:i + 5], test_y[i:i + 5]) for i in range(0, 21, 5))  # noqa: E731
    return trainer, model, test_x, test_y, domain_of, chunks


def accuracy(model, x, y) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        out = (model(x).argmax(1) == y).double().mean()
    model.train()
    return out


def test_the_global_model_is_tested_on_each_domain_s_images():
    trainer, model, x, y, domain_of, chunks = trained("bn")
    dist = torch.full((1, 3, 3), 1 / 3, dtype=torch.float64)
    evaluation = evaluate_chunks(trainer, chunks, torch.full((1, 3, 10), 0.1), domain_of, dist)
    got = evaluation.domain_accuracy[0]
    want = torch.stack([accuracy(model, x[domain_of == d], y[domain_of == d])
                        for d in range(3)])
    torch.testing.assert_close(got, want)
    # the domains' images are all the test images: its accuracy is theirs, in one pass
    torch.testing.assert_close(evaluation.accuracy[0], accuracy(model, x, y))


def test_under_personalized_bn_a_domain_is_tested_through_the_models_of_its_clients():
    """FedBN: client i's model is the global weights with its own BN parts; the domain's
    accuracy weighs each client's by the share p_i(d) of the domain in its data."""
    trainer, model, x, y, domain_of, chunks = trained("fedbn")
    dist = torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0], [0, 0.25, 0.75]]], dtype=torch.float64)
    got = evaluate_chunks(trainer, chunks, torch.full((1, 3, 10), 0.1), domain_of,
                          dist).domain_accuracy[0]
    per_client = torch.zeros(3, 3, dtype=torch.float64)
    for i in range(3):
        client = copy.deepcopy(model)
        client.load_state_dict({**client.state_dict(),
                                **{k: v[0, i] for k, v in trainer.state.local.items()}})
        for d in range(3):
            per_client[i, d] = accuracy(client, x[domain_of == d], y[domain_of == d])
    want = (dist[0] * per_client).sum(0) / dist[0].sum(0)
    torch.testing.assert_close(got, want)
    # the clients' own parts differ (their models are not one)
    assert any(not torch.allclose(v[0, 0], v[0, 2]) for v in trainer.state.local.values())
