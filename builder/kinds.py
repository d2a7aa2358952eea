"""What a model answers: binary or multi-class classifier, regressor, or other.

Each converter describes its model once (``FlavorConverter.describe``); the export records it
with the version (``serving.kind``, ``serving.classes``, ``serving.outputs``) so clients read
a prediction by role, not by guessing from output names. Output names are the same for every
flavor: classifiers ``label`` [N, 1] and ``probabilities`` [N, C], regressors ``prediction``
[N, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

KINDS = ("binary", "multiclass", "regression", "other")
LABEL, PROBABILITIES, PREDICTION = "label", "probabilities", "prediction"


@dataclass(frozen=True)
class ModelKind:
    kind: str
    classes: tuple[Any, ...] | None = None  # probability-column order; classifiers only
    outputs: dict[str, str] = field(default_factory=dict)  # role -> output tensor name

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}")

    @classmethod
    def classifier(cls, classes: Any) -> ModelKind:
        labels = tuple(_plain(c) for c in classes)
        return cls(
            "binary" if len(labels) == 2 else "multiclass",
            labels,
            {"label": LABEL, "probabilities": PROBABILITIES},
        )

    @classmethod
    def regressor(cls) -> ModelKind:
        return cls("regression", None, {"value": PREDICTION})

    @property
    def is_classifier(self) -> bool:
        return self.kind in ("binary", "multiclass")

    @property
    def string_labels(self) -> bool:
        return bool(self.classes) and any(isinstance(c, str) for c in self.classes or ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "classes": list(self.classes) if self.classes is not None else None,
            "outputs": dict(self.outputs),
        }


def _plain(value: Any) -> Any:
    """numpy scalars -> Python ones (JSON can carry them); other labels become strings."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)
