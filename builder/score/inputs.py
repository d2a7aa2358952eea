"""The model's input tensors from an Arrow batch of joined rows, as the gateway builds them.

Each model column comes from the entity table (a request-time field, cast to the column's type
when the table was read) or from the point-in-time join (a feature). A feature with no value as
of the row's time stands in as the gateway's online reads do: NaN in a float32 column, ``""`` in
a string column, and the row's ``defaults_used`` is true; an int64 or bool column has no
stand-in (the gateway answers 404), nor does a missing request field (the gateway answers
422): such a row is not scored, and its ``missing_features`` say why.

Everything here runs on the executors too: plain dataclasses, numpy and pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The joined features' columns in the scored frame: never an entity table's (table.py refuses
# a table with such a column).
FEATURE_PREFIX = "_feature__"
NUMPY = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}


@dataclass(frozen=True)
class InputColumn:
    name: str  # the model column
    dtype: str  # float32 | int64 | bool | string (serving.columns)
    source: str  # its column in the joined frame
    feature: bool  # from the join (else a request-time field of the entity table)


@dataclass(frozen=True)
class InputPlan:
    layout: str  # matrix | columns
    columns: tuple[InputColumn, ...]  # training order


@dataclass
class Feeds:
    tensors: dict[str, np.ndarray]  # by column name; the matrix layout's one input is built later
    scorable: np.ndarray  # bool per row: every column has a value or a stand-in
    defaults_used: np.ndarray  # bool per row: some feature stood in
    missing: pa.ListArray  # per row, the columns without a value (features and fields)


def plan_inputs(
    layout: str, columns: tuple[tuple[str, str], ...], request_fields: tuple[str, ...]
) -> InputPlan:
    """Where each model column (name, dtype) comes from."""
    return InputPlan(
        layout,
        tuple(
            InputColumn(
                name,
                dtype,
                name if name in request_fields else FEATURE_PREFIX + name,
                name not in request_fields,
            )
            for name, dtype in columns
        ),
    )


def _float(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    values = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
    return values, np.isnan(values)  # a null arrives as NaN; a NaN in the source is missing too


def feeds(plan: InputPlan, batch: pa.RecordBatch) -> Feeds:
    """The batch's model columns, each a 1-D array of its dtype (every row: stand-ins where a
    value is missing, zeros where nothing can stand in and the row is not scorable)."""
    n = batch.num_rows
    scorable = np.ones(n, dtype=bool)
    defaults = np.zeros(n, dtype=bool)
    missing_by_column = np.zeros((n, len(plan.columns)), dtype=bool)
    tensors: dict[str, np.ndarray] = {}
    for j, column in enumerate(plan.columns):
        array = batch.column(column.source)
        if column.dtype == "float32":
            values, missing = _float(array)
            tensors[column.name] = values.astype(np.float32)
            stand_in = column.feature
        elif column.dtype == "string":
            missing = array.is_null().to_numpy(zero_copy_only=False)
            filled = pc.fill_null(pc.cast(array, pa.string()), "")
            tensors[column.name] = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=object)
            stand_in = column.feature
        else:  # int64, bool: nothing stands in for a missing value
            missing = array.is_null().to_numpy(zero_copy_only=False)
            zero = False if column.dtype == "bool" else 0
            filled = pc.fill_null(array, pa.scalar(zero, array.type))
            tensors[column.name] = filled.to_numpy(zero_copy_only=False).astype(NUMPY[column.dtype])
            stand_in = False
        missing_by_column[:, j] = missing
        if stand_in:
            defaults |= missing
        else:
            scorable &= ~missing
    return Feeds(tensors, scorable, defaults, _missing_lists(plan, missing_by_column))


def _missing_lists(plan: InputPlan, missing: np.ndarray) -> pa.ListArray:
    """Per row, the names of its missing columns, in training order (row-major nonzero keeps it)."""
    names = np.array([c.name for c in plan.columns], dtype=object)
    rows, cols = np.nonzero(missing)
    offsets = np.zeros(len(missing) + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=len(missing)), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(names[cols], type=pa.string()))


def model_inputs(
    plan: InputPlan, tensors: dict[str, np.ndarray], rows: np.ndarray, matrix_input: str
) -> dict[str, np.ndarray]:
    """The graph's feeds for the rows ``rows`` (indices): one ``[n, 1]`` tensor per column, or
    the matrix layout's one float32 ``[n, F]`` input named ``matrix_input``."""
    if plan.layout == "matrix":
        x = np.empty((len(rows), len(plan.columns)), dtype=np.float32)
        for j, column in enumerate(plan.columns):
            x[:, j] = tensors[column.name][rows]
        return {matrix_input: x}
    return {c.name: tensors[c.name][rows].reshape(-1, 1) for c in plan.columns}
