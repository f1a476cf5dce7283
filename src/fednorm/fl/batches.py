"""Per-client mini-batches drawn on the device, for all clients at once (no per-client loop)."""

from __future__ import annotations

import torch
from torch import Tensor


class ClientBatches:
    """Samples b examples per client per step from each client's index set.

    Each client's b indices are drawn uniformly from its own data, independently across steps
    (with replacement across and within steps: clients of unequal size, as under Dirichlet
    partitions, are handled by the same single gather). The result is stacked client-major:
    rows [i*b, (i+1)*b) belong to client i.
    """

    def __init__(
        self,
        x: Tensor,
        y: Tensor,
        parts: list[Tensor],
        batch_size: int,
        generator: torch.Generator,
    ) -> None:
        if any(len(p) == 0 for p in parts):
            raise ValueError("every client needs at least one training example")
        device = x.device
        self.x, self.y = x, y
        self.n, self.b = len(parts), batch_size
        self.sizes = torch.tensor([len(p) for p in parts], device=device)
        self.index = torch.zeros(self.n, int(self.sizes.max()), dtype=torch.long, device=device)
        for i, p in enumerate(parts):  # once, at start-up
            self.index[i, : len(p)] = p.to(device)
        self.generator = generator

    def sample(self) -> tuple[Tensor, Tensor]:
        u = torch.rand(self.n, self.b, generator=self.generator, device=self.x.device)
        pos = torch.minimum((u * self.sizes[:, None]).long(), self.sizes[:, None] - 1)
        idx = self.index.gather(1, pos).reshape(-1)
        return self.x[idx], self.y[idx]
