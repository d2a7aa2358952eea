"""The serving contract as one typed object, and its two written forms.

``ServingContract.to_parameters`` / ``from_parameters``: the Triton config's ``parameters``
(a string map, as config.pbtxt holds them and tritonclient's ``as_json`` gives them, each
value's ``string_value``); ``to_metadata`` / ``from_metadata``: the ``serving`` section and the
``feast.*`` ``tags`` of the version's metadata.json. Writing checks nothing (the export writes
what it knows, as it always did); reading checks everything a client relies on and says what
is wrong in a ``ContractError`` that names the key.

Reading rules for versions exported before a fact existed: no ``layout`` is the ``matrix``
layout; no ``kind`` is a legacy binary classifier (``legacy``: its outputs found by tensor
name, nothing else about them read); no ``columns`` in the matrix layout are the
``feature_names``, every one float32 (``input_columns``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serving_contract import keys
from serving_contract.read import Metadata, Parameters, read
from serving_contract.types import (
    ROLES,
    ClassLabel,
    Column,
    ContractError,
    Explainer,
    Kind,
    Layout,
    OutlierScore,
    OutputRoles,
    names,
)


@dataclass(frozen=True)
class ServingContract:
    """What an exported model takes and answers (docs/serving-contract.md). None (and the
    empty ``outputs``/``feast``) is a fact the export did not write."""

    layout: Layout = "matrix"
    columns: tuple[Column, ...] | None = None  # signature order; absent for tensors
    feature_names: tuple[str, ...] | None = None  # the columns' names (for older clients)
    kind: Kind | None = None  # None: exported before kinds (a binary classifier, outputs by name)
    classes: tuple[ClassLabel, ...] | None = None  # classifiers: probability-column order
    outputs: Mapping[str, str] = field(default_factory=dict)  # role -> output tensor, as written
    targets: int | None = None  # regression: K (absent: 1)
    score: OutlierScore | None = None  # outlier only
    clusters: int | None = None  # cluster: K, the ids being 0..K-1 (absent: not known)
    decision_threshold: float | None = None  # binary with probabilities only
    string_ops: bool = False  # the graph uses ONNX string operators (needs a UTF-8 locale)
    # The run's feast.* tags as logged (full keys): the feature service, its join keys, the
    # request-time fields, and any other the run has.
    feast: Mapping[str, str] = field(default_factory=dict)
    explainer: Explainer | None = None  # the model that explains this one (docs/explain.md)

    # -- typed views -------------------------------------------------------------------------

    @property
    def legacy(self) -> bool:
        """Exported before ``serving.kind``: a binary classifier whose outputs are found by name."""
        return self.kind is None

    @property
    def roles(self) -> OutputRoles:
        return OutputRoles(**{r: self.outputs.get(r) for r in ROLES})

    @property
    def input_columns(self) -> tuple[Column, ...] | None:
        """The columns a client sends: ``columns``; in the matrix layout of older exports, the
        ``feature_names``, every one float32; None when the contract has neither."""
        if self.columns is not None:
            return self.columns
        if self.layout == "matrix" and self.feature_names is not None:
            return tuple(Column(n, "float32") for n in self.feature_names)
        return None

    @property
    def feature_service(self) -> str | None:
        return self.feast.get(keys.FEATURE_SERVICE)

    @property
    def entity_keys(self) -> tuple[str, ...]:
        return names(self.feast.get(keys.ENTITY_KEYS, ""), keys.ENTITY_KEYS)

    @property
    def request_fields(self) -> tuple[str, ...]:
        return names(self.feast.get(keys.REQUEST_FIELDS, ""), keys.REQUEST_FIELDS)

    def missing_feast(self) -> list[str]:
        """The Feast tags a feature-serving client needs that the export did not record."""
        return [k for k in keys.FEAST_KEYS if k not in self.feast]

    # -- the two written forms ---------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        """metadata.json's ``serving`` section: each written fact as a JSON value."""
        facts: dict[str, Any] = {keys.LAYOUT: self.layout}
        if self.columns is not None:
            facts[keys.COLUMNS] = [c.to_dict() for c in self.columns]
        if self.feature_names is not None:
            facts[keys.FEATURE_NAMES] = list(self.feature_names)
        if self.kind is not None:
            facts[keys.KIND] = self.kind
            if self.classes is not None:
                facts[keys.CLASSES] = list(self.classes)
            facts[keys.OUTPUTS] = dict(self.outputs)
        optional = {
            keys.TARGETS: self.targets,
            keys.SCORE: self.score.to_dict() if self.score is not None else None,
            keys.CLUSTERS: self.clusters,
            keys.DECISION_THRESHOLD: self.decision_threshold,
        }
        facts.update({k: v for k, v in optional.items() if v is not None})
        if self.string_ops:
            facts[keys.STRING_OPS] = True
        if self.explainer is not None:
            facts[keys.EXPLAINER] = self.explainer.to_dict()
        return facts

    def to_metadata(self) -> dict[str, Any]:
        """The contract's part of metadata.json: its ``serving`` section and the ``feast.*``
        entries of its ``tags``."""
        return {keys.SERVING: self.facts(), keys.TAGS: dict(self.feast)}

    def to_parameters(self) -> dict[str, str]:
        """The Triton config parameters: the run's ``feast.*`` tags as they are, and each fact
        as ``serving.<fact>``, a string as it is and anything else as JSON."""
        params = dict(sorted(self.feast.items()))
        for fact, value in self.facts().items():
            if isinstance(value, str):
                text = value
            elif isinstance(value, bool):
                text = "true" if value else "false"
            else:
                text = json.dumps(value)
            params[keys.parameter(fact)] = text
        return params

    @classmethod
    def from_parameters(cls, params: Mapping[str, str], *, check: bool = True) -> ServingContract:
        """Read a Triton config's parameters (``{key: string_value}``), checked for a client
        that reads predictions by role unless ``check`` is False (serving_contract/read.py);
        parameters outside the contract (the version's, a user step's) are left alone."""
        return cls(**read(Parameters(params), feast_tags(params), check))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], *, check: bool = True) -> ServingContract:
        """Read a version's metadata.json (its ``serving`` and ``tags``), checked as
        ``from_parameters`` checks."""
        serving = metadata.get(keys.SERVING) or {}
        tags = metadata.get(keys.TAGS) or {}
        if not isinstance(serving, Mapping) or not isinstance(tags, Mapping):
            raise ContractError(f"metadata.json's {keys.SERVING} and {keys.TAGS} must be JSON objects")
        return cls(**read(Metadata(serving), feast_tags(tags), check))


def feast_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """The ``feast.*`` entries of a run's tags (or of a config's parameters), as text."""
    return {str(k): str(v) for k, v in tags.items() if str(k).startswith(keys.FEAST_PREFIX)}


def serving_parameters(params: Mapping[str, str]) -> dict[str, str]:
    """The ``serving.*`` parameters of a config (what a client shows as its serving facts)."""
    return {k: v for k, v in params.items() if keys.is_serving(k)}
