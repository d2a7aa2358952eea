"""What both readers share: a view's read plan, the answer's shape, and the fan-out from distinct
entities back to request rows.

The answer (``Columns``) has the shape of ``OnlineResponse.to_dict(include_event_timestamps=True)``
without the join keys: per output feature one value per request row (None when the store has
no value) and one event time (whole epoch seconds, 0 when the store has no row for the entity:
Feast's empty Timestamp). ``to_feast_dict`` adds the join keys back, for comparing with Feast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from feast_access.online.keys import KeyEncoder, key_encoder
from feast_access.online.spec import ServiceSpec, ViewSpec
from feast_access.online.values import Decoder, decoder_for

TIMESTAMP_SUFFIX = "__ts"  # feast.online_response.TIMESTAMP_POSTFIX


@dataclass(frozen=True)
class Columns:
    """Per output feature: a value per request row, and the event time of its view's row."""

    values: dict[str, list[Any]]
    times: dict[str, list[int]]


@dataclass(frozen=True)
class ViewPlan:
    """One view, resolved for reading: its key encoder, its features and their decoders."""

    spec: ViewSpec
    encode: KeyEncoder
    names: tuple[str, ...]  # the features' names in the store
    outputs: tuple[str, ...]  # ... in the answer
    decoders: tuple[Decoder, ...]
    position: dict[str, int]  # store name -> position in names


def plans(spec: ServiceSpec) -> tuple[ViewPlan, ...]:
    """Every view of ``spec``, resolved (the spec is checked first)."""
    spec.check_layout()
    out = []
    for view in spec.views:
        names = tuple(f.name for f in view.features)
        out.append(
            ViewPlan(
                spec=view,
                encode=key_encoder(view.keys, spec.entity_key_serialization_version),
                names=names,
                outputs=tuple(f.output for f in view.features),
                decoders=tuple(decoder_for(f.value_type) for f in view.features),
                position={n: i for i, n in enumerate(names)},
            )
        )
    return tuple(out)


def distinct_keys(plan: ViewPlan, rows: Sequence[Mapping[str, Any]]) -> tuple[list[bytes], list[int]]:
    """Each distinct entity's serialized key (read once, as Feast dedups), and per request row
    the position of its entity among them."""
    if len(rows) == 1:
        return [plan.encode(rows[0])], [0]
    seen: dict[bytes, int] = {}
    keys: list[bytes] = []
    index: list[int] = []
    for row in rows:
        key = plan.encode(row)
        at = seen.get(key)
        if at is None:
            at = seen[key] = len(keys)
            keys.append(key)
        index.append(at)
    return keys, index


def fill(
    plan: ViewPlan,
    raw: Sequence[Sequence[bytes | None]],
    times: Sequence[int],
    index: Sequence[int],
    out: Columns,
) -> None:
    """Decode each distinct entity's raw values (per feature, None when absent) into ``out``,
    fanned out to the request rows."""
    if len(index) == 1:  # one row: no fan-out
        (values,) = raw
        time = [times[0]]
        for j, (name, decode) in enumerate(zip(plan.outputs, plan.decoders, strict=True)):
            value = values[j]
            out.values[name] = [None if value is None else decode(value)]
            out.times[name] = time
        return
    row_times = [times[i] for i in index]
    for j, (name, decode) in enumerate(zip(plan.outputs, plan.decoders, strict=True)):
        decoded = [None if values[j] is None else decode(values[j]) for values in raw]  # type: ignore[arg-type]
        out.values[name] = [decoded[i] for i in index]
        out.times[name] = row_times


def to_feast_dict(
    spec: ServiceSpec,
    rows: Sequence[Mapping[str, Any]],
    columns: Columns,
    include_event_timestamps: bool = False,
) -> dict[str, list[Any]]:
    """``columns`` as ``OnlineResponse.to_dict`` gives a read of the same rows: the request's join
    keys, then each feature (and its ``__ts`` list when asked for). Equal as a dict: Feast's own
    key order is not the service's (it groups a view's features in a set, so it varies with the
    process's string hashing)."""
    out: dict[str, list[Any]] = {}
    for key in spec.request_keys:
        if rows and key in rows[0]:
            out[key] = [row[key] for row in rows]
            if include_event_timestamps:  # Feast gives a join key an empty event time too
                out[key + TIMESTAMP_SUFFIX] = [0] * len(rows)
    for name in spec.outputs:
        out[name] = columns.values[name]
        if include_event_timestamps:
            out[name + TIMESTAMP_SUFFIX] = columns.times[name]
    return out
