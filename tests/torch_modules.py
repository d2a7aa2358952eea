"""PyTorch modules the tests register; importable, since a pickled module is loaded by name."""

from __future__ import annotations

import torch


class EmbeddingScorer(torch.nn.Module):
    """A float feature vector and a category index (int64) -> a probability."""

    def __init__(self) -> None:
        super().__init__()
        # 10 rows: parity rows without an input example draw integers from 0..9.
        self.embed = torch.nn.Embedding(10, 3)
        self.linear = torch.nn.Linear(4 + 3, 1)

    def forward(self, x: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(torch.cat([x, self.embed(category[:, 0])], dim=1)))
