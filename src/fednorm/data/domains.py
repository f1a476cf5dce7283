"""Feature shift from the digits at hand: each client's images come from its own domain.

FedBN (Li et al. 2021, arXiv 2102.07623) and FedWon (Zhuang & Lyu 2024, arXiv 2306.05879) test
normalization under *feature shift* on Digits-Five (MNIST, SVHN, USPS, SynthDigits, MNIST-M):
the label distribution is the same everywhere, the look of the images is not. At the quick CPU
scale the domains are built from the MNIST digits themselves by the transforms of
:data:`TRANSFORMS`, each chosen so that a domain's per-channel mean or standard deviation (what
BN normalizes) differs from every other's:

- ``mnist``: the digits unchanged;
- ``inverted``: ``1 - x`` (the polarity of SVHN's and USPS's digits against MNIST's);
- ``colour``: digit and background each in their own random colour (MNIST-M's colour shift);
- ``noise``: additive Gaussian noise, clipped (a noisy sensor);
- ``blur``: a Gaussian blur (USPS's low resolution);
- ``texture``: the background replaced by a random smooth colour texture (SynthDigits' and
  MNIST-M's cluttered backgrounds).

Where they apply: on float images ``(N, 3, H, W)`` in [0, 1], grey replicated to 3 channels,
at the final image size, before the dataset's normalization: in
:func:`fednorm.data.mnist5k.split_and_normalize`, on what ``to_float`` returns and before the
mean and standard deviation are taken. At the final size, because the stated formulas (the
noise's standard deviation, the blur's σ in pixels, the two colours) then hold for the pixels
the model sees; at 28×28 the area resizing to 8×8 would average the noise down by about 3.5
and swallow the blur. Before normalization, because every formula assumes [0, 1] (``1 - x``,
the clipping, the colours).

Randomness is counter-based (:mod:`fednorm.rng`): image i rendered in domain d draws from the
key ``fold(run_key(seed), stream, d, i)`` (d the domain's position in :data:`DOMAINS`, i the
image's row, stream :data:`TRAIN` or :data:`TEST`), never from the global RNG. The output is a
pure function of the images, the domains and the seed: the same bits on every device, whatever
the batch, and unrelated draws for different images, domains and splits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from fednorm.metrics import RENDERED_DOMAINS
from fednorm.rng import fold, run_key, uniform

NOISE_STD = 0.2  # σ of the additive noise, in units of the [0, 1] pixel range
BLUR_SIGMA = 1.0  # σ of the Gaussian blur, in pixels of the image it is applied to
TEXTURE_GRID = 4  # the texture is bilinear between TEXTURE_GRID x TEXTURE_GRID random colours
TEXTURE_MAX = 0.6  # each texture colour channel is uniform on [0, TEXTURE_MAX]
TRAIN, TEST = 0, 1  # the streams of the training and the test images' draws

# A transform: images (B, 3, H, W) in [0, 1] and one key per image (B,) -> images of the same
# shape in [0, 1], the b-th drawn from key[b] alone.
Transform = Callable[[Tensor, Tensor], Tensor]


def _gaussian(key: Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """Standard normals ``key.shape + shape`` by Box-Muller from two uniforms u, v in [0, 1):
    ``z = √(-2 ln(1 - u)) · cos(2π v)``."""
    u, v = uniform(key, (2, *shape)).to(dtype).unbind(1)
    return torch.sqrt(-2.0 * torch.log1p(-u)) * torch.cos(2.0 * math.pi * v)


def mnist(x: Tensor, key: Tensor) -> Tensor:
    """The identity: MNIST's own domain."""
    return x


def inverted(x: Tensor, key: Tensor) -> Tensor:
    """``1 - x``: white background, black digit."""
    return 1.0 - x


def colour(x: Tensor, key: Tensor) -> Tensor:
    """``out_c = b_c + x_c · (f_c - b_c)``: black goes to the background colour b, white to the
    digit colour f, greys in between. ``b`` uniform on [0, 1)³ per image, ``f_c = (b_c + ½) mod
    1``, so that digit and background differ by exactly ½ in every channel (never invisible)."""
    background = uniform(key, (3, 1, 1)).to(x.dtype)
    digit = torch.remainder(background + 0.5, 1.0)
    return background + x * (digit - background)


def noise(x: Tensor, key: Tensor) -> Tensor:
    """``clip(x + σ·z, 0, 1)``, z standard normal, independent per pixel and channel,
    σ = :data:`NOISE_STD`."""
    return (x + NOISE_STD * _gaussian(key, tuple(x.shape[1:]), x.dtype)).clamp(0.0, 1.0)


def blur(x: Tensor, key: Tensor) -> Tensor:
    """Separable Gaussian blur, σ = :data:`BLUR_SIGMA` pixels: weights ``k_i ∝ exp(-i²/2σ²)``
    for ``|i| <= ⌈3σ⌉``, summing to 1, the border replicated (a constant image stays constant;
    the mean is kept up to the border). No randomness: ``key`` is unused."""
    radius = math.ceil(3 * BLUR_SIGMA)
    offsets = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    weights = torch.exp(-offsets**2 / (2 * BLUR_SIGMA**2))
    weights = (weights / weights.sum()).expand(x.shape[1], 1, 1, -1)
    padded = F.pad(x, (radius, radius, radius, radius), mode="replicate")
    rows = F.conv2d(padded, weights, groups=x.shape[1])
    return F.conv2d(rows, weights.transpose(2, 3), groups=x.shape[1])


def texture(x: Tensor, key: Tensor) -> Tensor:
    """``x + (1 - x) · t``: white stays white, black becomes the texture t, a bilinear
    interpolation (corners aligned) of a :data:`TEXTURE_GRID`² grid of colours uniform on
    [0, :data:`TEXTURE_MAX`)³, drawn per image."""
    grid = uniform(key, (x.shape[1], TEXTURE_GRID, TEXTURE_GRID)).to(x.dtype) * TEXTURE_MAX
    smooth = F.interpolate(grid, size=x.shape[2:], mode="bilinear", align_corners=True)
    return x + (1.0 - x) * smooth


# In the order of fednorm.metrics.RENDERED_DOMAINS (the names the configuration checks): a
# domain's position there is part of its images' random keys
TRANSFORMS: dict[str, Transform] = {"mnist": mnist, "inverted": inverted, "colour": colour,
                                    "noise": noise, "blur": blur, "texture": texture}
DOMAINS = RENDERED_DOMAINS
assert tuple(TRANSFORMS) == DOMAINS, "one transform per domain name, in its order"


def _check_domains(domains: Sequence[str]) -> None:
    if isinstance(domains, str) or not domains:
        raise ValueError(f"domains must be a non-empty sequence of names, got domains="
                         f"{domains!r}; allowed names: {', '.join(DOMAINS)}")
    for name in domains:
        if name not in TRANSFORMS:
            raise ValueError(f"unknown domain={name!r} in domains={list(domains)!r}; allowed: "
                             f"{', '.join(DOMAINS)}")
    if len(set(domains)) != len(domains):
        raise ValueError(f"domains must not repeat a name, got domains={list(domains)!r}")


def _check_images(x01: Tensor) -> None:
    if x01.dim() != 4 or x01.shape[1] != 3 or not x01.is_floating_point():
        raise ValueError(f"x01 must be float images (N, 3, H, W) in [0, 1], got dtype "
                         f"{x01.dtype} and shape {tuple(x01.shape)}")


def _positive_int(value: int, name: str, upper: tuple[int, str] | None = None) -> None:
    """ValueError naming ``name`` unless ``value`` is an int in [1, upper] (upper: its value
    and what it is)."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not is_int or value < 1 or (upper is not None and value > upper[0]):
        bound = "" if upper is None else f" and <= {upper[0]} ({upper[1]})"
        raise ValueError(f"{name} must be an int >= 1{bound}, got {name}={value!r}")


def _render(x01: Tensor, name: str, rows: Tensor, seed: int, stream: int) -> Tensor:
    """Images ``x01`` rendered in domain ``name``, row j drawing from
    ``fold(run_key(seed), stream, DOMAINS.index(name), rows[j])``."""
    base = run_key(seed, device=x01.device)
    return TRANSFORMS[name](x01, fold(base, stream, DOMAINS.index(name), rows))


def render_domains(x01: Tensor, domains: Sequence[str], assignment: Tensor,
                   seed: int) -> Tensor:
    """The training images, image i rendered in ``domains[assignment[i]]`` (stream
    :data:`TRAIN`, key of row i); an image assigned -1 (no domain: :func:`assign_domains`'s
    leftovers, in no client) is returned unchanged. Same shape as ``x01``."""
    _check_images(x01)
    _check_domains(domains)
    if assignment.shape != (len(x01),) or assignment.dtype != torch.int64:
        raise ValueError(f"assignment must be int64 of shape ({len(x01)},) (one domain per "
                         f"image), got {assignment.dtype} {tuple(assignment.shape)}")
    if len(assignment) and not -1 <= int(assignment.min()) <= int(assignment.max()) < len(domains):
        raise ValueError(f"assignment must hold values in [-1, {len(domains) - 1}] (-1 or a "
                         f"position in domains={list(domains)!r}), got "
                         f"[{int(assignment.min())}, {int(assignment.max())}]")
    out = x01.clone()
    for d, name in enumerate(domains):
        rows = torch.nonzero(assignment == d).flatten()
        out[rows] = _render(x01[rows], name, rows, seed, TRAIN)
    return out


def render_test(x01: Tensor, domains: Sequence[str], seed: int) -> tuple[Tensor, Tensor]:
    """Every test image rendered in every domain (stream :data:`TEST`): images
    ``(D·N, 3, H, W)``, domain by domain (rows ``d·N .. d·N + N - 1`` are domain d's test set),
    and their domain ids ``(D·N,)`` int64. The labels that go with them are
    ``test_y.repeat(D)``. Each domain keeps the whole test set, so per-domain accuracies are
    measured on the same digits and differ only by the domain."""
    _check_images(x01)
    _check_domains(domains)
    rows = torch.arange(len(x01), device=x01.device)
    images = torch.cat([_render(x01, name, rows, seed, TEST) for name in domains])
    ids = torch.arange(len(domains), device=x01.device).repeat_interleave(len(x01))
    return images, ids


def assign_domains(n_images: int, n_domains: int, seed: int) -> Tensor:
    """Each image's domain, int64 ``(n_images,)``: a seeded permutation of ``range(n_images)``
    cut into ``n_domains`` equal contiguous parts, the images of part d in domain d. The
    ``n_images mod n_domains`` images at the permutation's tail are marked -1 (no domain), so
    every domain has ``n_images // n_domains`` images and no image is in two domains."""
    _positive_int(n_images, "n_images")
    _positive_int(n_domains, "n_domains", upper=(n_images, "n_images"))
    size = n_images // n_domains
    permutation = torch.randperm(n_images, generator=torch.Generator().manual_seed(seed))
    assignment = torch.full((n_images,), -1, dtype=torch.int64)
    assignment[permutation[: size * n_domains]] = torch.arange(n_domains).repeat_interleave(size)
    return assignment


def client_domains(n_domains: int, clients_per_domain: int) -> Tensor:
    """Client c's domain, ``c // clients_per_domain``, int64 ``(n_domains·clients_per_domain,)``."""
    _positive_int(n_domains, "n_domains")
    _positive_int(clients_per_domain, "clients_per_domain")
    return torch.arange(n_domains).repeat_interleave(clients_per_domain)


def feature_shift(domain_of_image: Tensor, clients_per_domain: int, seed: int) -> list[Tensor]:
    """The feature-shift split: ``D·clients_per_domain`` int64 index tensors (D =
    ``max(domain_of_image) + 1``), each sorted ascending, pairwise disjoint; client c holds
    images of domain ``c // clients_per_domain`` only, an IID share of them: each domain's
    images, in the order of one seeded generator's permutation (domain 0 first), cut into
    ``clients_per_domain`` equal parts of ``m // clients_per_domain`` images, m the smallest
    domain's count; the rest are dropped, and so are the images marked -1."""
    _positive_int(clients_per_domain, "clients_per_domain")
    if domain_of_image.dim() != 1 or domain_of_image.dtype != torch.int64:
        raise ValueError(f"domain_of_image must be 1-D int64, got {domain_of_image.dtype} "
                         f"{tuple(domain_of_image.shape)}")
    counts = torch.bincount(domain_of_image[domain_of_image >= 0])
    if len(counts) == 0 or int(domain_of_image.min()) < -1:
        raise ValueError("domain_of_image must hold domains 0, 1, ... (and -1 for none), got "
                         f"values {torch.unique(domain_of_image).tolist()}")
    size = int(counts.min()) // clients_per_domain
    if size < 1:
        raise ValueError(f"clients_per_domain={clients_per_domain} exceeds the {int(counts.min())}"
                         f" images of the smallest domain (domains 0..{len(counts) - 1} each "
                         f"need at least clients_per_domain images)")
    generator = torch.Generator().manual_seed(seed)
    parts = []
    for d in range(len(counts)):
        members = torch.nonzero(domain_of_image == d).flatten()
        shuffled = members[torch.randperm(len(members), generator=generator)]
        parts.extend(shuffled[: size * clients_per_domain].view(clients_per_domain, size))
    return [torch.sort(part).values for part in parts]
