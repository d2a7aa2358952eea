"""Which Triton model serves a gateway model, and how to build its input.

Everything comes from Triton's model-config API (parameters ``builder export`` wrote from the
MLflow run): the input's column order (``serving.feature_names``), the Feast feature service,
the entity keys and the request-time fields. So the gateway needs no access to the model
repository's files, and a new model version brings its own feature list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the name clients use (the exported model's)
    triton_model: str  # what the gateway calls: NAME_ensemble when there is one, else NAME
    version: str
    input_name: str
    feature_names: tuple[str, ...]  # the model input's columns, in training order
    feature_service: str
    entity_keys: tuple[str, ...]
    request_fields: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def online_features(self) -> tuple[str, ...]:
        """Columns read from the online store (the rest come with the request)."""
        return tuple(f for f in self.feature_names if f not in self.request_fields)


class SpecError(ValueError):
    """The model's config lacks what the gateway needs (it was not exported from a Feast run)."""


def _csv_or_json(value: str) -> tuple[str, ...]:
    value = value.strip()
    if value.startswith("["):
        return tuple(str(v) for v in json.loads(value))
    return tuple(v.strip() for v in value.split(",") if v.strip())


def spec_from_config(name: str, triton_model: str, version: str, config: dict) -> ModelSpec:
    """Build a ModelSpec from a Triton model config (as JSON, tritonclient's ``as_json``)."""
    params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
    missing = [
        k
        for k in (
            "serving.feature_names",
            "feast.feature_service",
            "feast.entity_keys",
            "feast.request_fields",
        )
        if k not in params
    ]
    if missing:
        raise SpecError(
            f"model {name!r} has no {', '.join(missing)} in its Triton config: export it from an "
            "MLflow run tagged with its Feast feature service"
        )
    inputs = config.get("input") or []
    if len(inputs) != 1:
        raise SpecError(f"model {name!r} has {len(inputs)} inputs; the gateway feeds one tabular input")
    spec = ModelSpec(
        name=name,
        triton_model=triton_model,
        version=version,
        input_name=inputs[0]["name"],
        feature_names=_csv_or_json(params["serving.feature_names"]),
        feature_service=params["feast.feature_service"],
        entity_keys=_csv_or_json(params["feast.entity_keys"]),
        request_fields=_csv_or_json(params["feast.request_fields"]),
        outputs=tuple(o["name"] for o in config.get("output") or []),
    )
    unknown = set(spec.request_fields) - set(spec.feature_names)
    if unknown:
        raise SpecError(f"model {name!r}: request fields {sorted(unknown)} are not model inputs")
    return spec
