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


class TokenScorer(torch.nn.Module):
    """A float feature vector and a row of token ids (int64) -> a score, the ids through an
    ``nn.Embedding`` of 8 rows: fewer than the 0..9 that parity drew for ids it knew no range of
    (issue 29, item 6)."""

    def __init__(self, tokens: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(num_embeddings=tokens, embedding_dim=4)
        self.linear = torch.nn.Linear(3 + 4, 1)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.cat([x, self.embed(ids).mean(dim=1)], dim=1))


class TableScorer(torch.nn.Module):
    """Category ids (int64) looked up in a plain parameter table of 5 rows: no ``nn.Embedding``,
    so nothing in the module tells the builder which ids it takes."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(5, 2))
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, category: torch.Tensor) -> torch.Tensor:
        return self.linear(self.table[category[:, 0]])
