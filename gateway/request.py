"""The typed predict request every transport parses into, and its check against a ModelSpec.

HTTP (JSON) and gRPC (protobuf) each turn their wire format into one ``PredictRequest``: rows of
named scalars that keep the type the caller sent (a JSON ``1`` is an int, ``1.0`` a float,
``true`` a bool; a protobuf ``Value`` says its kind). Absent and null are the same: no value.
``validate`` then checks meaning against the model: exactly its entity keys and request fields,
each of its column's (or join key's) type; every error names the field (``rows[0].channel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.catalog import ModelSpec
from gateway.errors import InvalidInput
from gateway.values import Mismatch, Scalar, from_request

EntityRow = dict[str, int | str]  # what Feast reads: join key -> value
RequestValues = dict[str, Scalar]  # request-time field -> value of its column's type


@dataclass(frozen=True, slots=True)
class Row:
    fields: Mapping[str, Scalar]


@dataclass(frozen=True, slots=True)
class PredictRequest:
    model: str
    rows: tuple[Row, ...]
    # ``"explain": k``, as the caller sent it (any JSON scalar; gRPC: an int64), checked by
    # gateway/explain.py; None: no reason codes asked, and none computed.
    explain: Scalar | None = None


def validate(spec: ModelSpec, request: PredictRequest) -> tuple[list[EntityRow], list[RequestValues]]:
    """Each row: exactly the entity keys (int64 or string, as Feast has them) and the request
    fields (each of its column's type); anything else is an InvalidInput naming the field."""
    allowed = set(spec.entity_key_names) | set(spec.request_fields)
    entity_rows: list[EntityRow] = []
    values: list[RequestValues] = []
    for i, row in enumerate(request.rows):
        where = f"rows[{i}]"
        unknown = sorted(set(row.fields) - allowed)
        if unknown:
            raise InvalidInput(
                f"unknown field {unknown[0]!r}; this model takes {', '.join(sorted(allowed))}",
                field=f"{where}.{unknown[0]}",
            )
        keys: EntityRow = {}
        for key in spec.entity_keys:
            value = row.fields.get(key.name)
            if value is None:
                raise InvalidInput(f"missing entity key {key.name!r}", field=f"{where}.{key.name}")
            try:
                keys[key.name] = from_request(key.dtype, value)  # type: ignore[assignment]  # int or str
            except Mismatch as exc:
                raise InvalidInput(f"entity key {key.name!r} {exc}", field=f"{where}.{key.name}") from None
        fields: RequestValues = {}
        for name in spec.request_fields:
            value = row.fields.get(name)
            if value is None:
                raise InvalidInput(f"missing request field {name!r}", field=f"{where}.{name}")
            try:
                fields[name] = from_request(spec.dtype(name), value)
            except Mismatch as exc:
                raise InvalidInput(f"request field {name!r} {exc}", field=f"{where}.{name}") from None
        entity_rows.append(keys)
        values.append(fields)
    return entity_rows, values
