"""What a model answers: binary or multi-class classifier, regressor, outlier detector,
clusterer, or other.

Each converter describes its model once (``FlavorConverter.describe``); the export records it
with the version (``serving.kind``, ``serving.classes``, ``serving.outputs``) so clients read
a prediction by role, not by guessing from output names. Output names are the same for every
flavor: classifiers ``label`` [N, 1] and ``probabilities`` [N, C] (a classifier without
``predict_proba``: ``scores`` [N, C], its decision function, [N, 1] for a binary one), regressors
``prediction`` [N, K] (K targets, usually 1), outlier detectors ``label`` [N, 1] (1 inlier, -1
outlier) and ``score`` [N, 1] (the decision function: below 0 is an outlier), clusterers
(KMeans, MiniBatchKMeans) ``label`` [N, 1] INT64 (the cluster id, ``0..K-1``) and
``distances`` [N, K] (the distance to each cluster centre, scikit-learn's ``transform``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from serving_contract import KINDS, Kind, OutlierScore, ServingContract

LABEL, PROBABILITIES, PREDICTION = "label", "probabilities", "prediction"
SCORES, SCORE, DISTANCES = "scores", "score", "distances"
# An outlier detector's score is its decision function; scikit-learn's convention (and the
# label's) is that a score below 0 is an outlier.
OUTLIER_SCORE = OutlierScore("decision_function", 0.0)


@dataclass(frozen=True)
class ModelKind:
    kind: str
    classes: tuple[Any, ...] | None = None  # probability-column order; classifiers only
    outputs: dict[str, str] = field(default_factory=dict)  # role -> output tensor name
    targets: int = 1  # regression: columns of ``prediction`` (a multi-target regressor's K)
    clusters: int | None = None  # cluster: K, the cluster ids being 0..K-1 (None: not known)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}")

    @classmethod
    def classifier(cls, classes: Any, *, probabilities: bool = True, scores: bool = True) -> ModelKind:
        """A classifier over ``classes``; without ``predict_proba`` its second output is the
        decision function (``scores``), or none when it has no decision function either."""
        labels = tuple(_plain(c) for c in classes)
        second = {"probabilities": PROBABILITIES} if probabilities else {"scores": SCORES} if scores else {}
        return cls("binary" if len(labels) == 2 else "multiclass", labels, {"label": LABEL, **second})

    @classmethod
    def regressor(cls, targets: int = 1) -> ModelKind:
        return cls("regression", None, {"value": PREDICTION}, targets=targets)

    @classmethod
    def outlier(cls) -> ModelKind:
        return cls("outlier", None, {"label": LABEL, "score": SCORE})

    @classmethod
    def cluster(cls, clusters: int | None, *, distances: bool = True) -> ModelKind:
        """A clusterer of ``clusters`` clusters: its label is the cluster id, and (KMeans and
        MiniBatchKMeans) its distances to every cluster centre."""
        outputs = {"label": LABEL, **({"distances": DISTANCES} if distances else {})}
        return cls("cluster", None, outputs, clusters=clusters)

    @property
    def is_classifier(self) -> bool:
        return self.kind in ("binary", "multiclass")

    @property
    def string_labels(self) -> bool:
        return bool(self.classes) and any(isinstance(c, str) for c in self.classes or ())

    def contract(self) -> ServingContract:
        """The serving contract's facts the kind decides (docs/serving-contract.md): ``targets``
        only for a multi-target regressor, ``score`` only for an outlier detector, ``clusters``
        only for a clusterer that says how many it has. The export adds the inputs
        (export/describe.py)."""
        return ServingContract(
            kind=cast(Kind, self.kind),  # checked in __post_init__
            classes=self.classes,
            outputs=dict(self.outputs),
            targets=self.targets if self.kind == "regression" and self.targets > 1 else None,
            score=OUTLIER_SCORE if self.kind == "outlier" else None,
            clusters=self.clusters if self.kind == "cluster" else None,
        )


def with_targets(kind: ModelKind, graph: Any) -> ModelKind:
    """A regressor's kind with its number of targets: the columns of its (normalised) graph's
    ``prediction`` output, [batch, K]."""
    if kind.kind != "regression":
        return kind
    for out in graph.graph.output:
        if out.name == kind.outputs.get("value"):
            dims = [d.dim_value for d in out.type.tensor_type.shape.dim[1:]]
            targets = int(np.prod(dims)) if dims and all(d > 0 for d in dims) else 1
            return replace(kind, targets=targets)
    return kind


def _plain(value: Any) -> Any:
    """numpy scalars -> Python ones (JSON can carry them); other labels become strings."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)
