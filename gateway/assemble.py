"""The model's inputs, from request values and online features, in the layout the export recorded.

- ``matrix``: one float32 ``[N, F]`` input, columns in training order (today's models).
- ``columns``: one ``[N, 1]`` input per column, named after it, of the column's dtype; strings
  are object arrays, which the Triton client sends as BYTES.

A missing online value (the entity is unknown to the store, or the value expired) stands in as
NaN in a float32 column (the model's imputer, if it has one, reads it) and as ``""`` in a string
column (a OneHotEncoder with ``handle_unknown="ignore"`` reads it as an unseen category: all
zeros). An int64 or bool column has no such value: the entity cannot be scored, and the gateway
answers 404 naming the feature even under ``GATEWAY_MISSING_ENTITIES=default``.

Which values are missing is told once, at the read (gateway/clients/features.py): there, None or NaN from
the store becomes None, and each row's missing features are listed. Here a None is that marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gateway.catalog import ModelSpec
from gateway.errors import EntityNotFound, GatewayError
from gateway.request import RequestValues
from gateway.values import DEFAULTS, NUMPY, Mismatch, Scalar, from_store


def undefaultable(spec: ModelSpec, missing: Iterable[str]) -> list[str]:
    """Of an entity's missing online features, the model's columns that have no stand-in value."""
    return [f for f in missing if f in spec.dtypes and spec.dtypes[f] not in DEFAULTS]


def _online_column(spec: ModelSpec, name: str, values: Sequence[Any]) -> list[Scalar]:
    dtype = spec.dtypes[name]
    default = DEFAULTS.get(dtype)
    column: list[Scalar] = []
    for i, value in enumerate(values):
        if value is None:  # missing: FeatureRows carries every missing value as None
            if default is None:
                raise EntityNotFound(
                    f"no online value of {name!r} for rows[{i}]: a {dtype} feature has no missing "
                    "value to stand in",
                    field=f"rows[{i}]",
                )
            column.append(default)
            continue
        try:
            column.append(from_store(dtype, value))
        except Mismatch as exc:
            raise GatewayError(
                f"online feature {name!r} {exc}: feature service {spec.feature_service!r} does not "
                "match the model's columns"
            ) from None
    return column


def assemble_columns(
    spec: ModelSpec, request_values: Sequence[RequestValues], online: Mapping[str, Sequence[Any]], n: int
) -> dict[str, np.ndarray]:
    """Each model column as a 1-D array of its dtype, ``n`` rows, in training order."""
    columns: dict[str, np.ndarray] = {}
    for column in spec.columns:
        if column.name in spec.request_fields:
            values: list[Any] = [r[column.name] for r in request_values]
        else:
            raw = online.get(column.name)
            if raw is None:
                raise GatewayError(
                    f"feature service {spec.feature_service!r} does not provide {column.name!r}"
                )
            values = _online_column(spec, column.name, raw)
        array: np.ndarray = np.empty(n, dtype=NUMPY[column.dtype])
        array[:] = values
        columns[column.name] = array
    return columns


def model_inputs(spec: ModelSpec, columns: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The named input arrays Triton takes, from the model's columns (``assemble_columns``)."""
    if spec.layout == "matrix":
        x = np.empty((n, len(spec.columns)), dtype=np.float32)
        for j, name in enumerate(spec.feature_names):
            x[:, j] = columns[name]
        return {spec.input_name: x}
    return {name: array.reshape(n, 1) for name, array in columns.items()}


def assemble_input(
    spec: ModelSpec, request_values: Sequence[RequestValues], online: Mapping[str, Sequence[Any]], n: int
) -> dict[str, np.ndarray]:
    """The model's input arrays by name, for ``n`` rows."""
    return model_inputs(spec, assemble_columns(spec, request_values, online, n), n)
