"""What ``predict`` takes (what ``mlflow models predict`` takes) turned into Triton inputs by
the deployment's serving contract (docs/serving-contract.md), and Triton's outputs turned into
MLflow's answer.

Inputs: a pandas DataFrame, a numpy array, or MLflow's serving format as a dict
(``dataframe_split``, ``dataframe_records``, ``inputs``, ``instances``). The ``mlflow
deployments predict`` CLI reads its ``--input-path`` with ``pd.read_json``, which turns such a
dict into a one-column frame; that frame is read back as the dict it was. The contract is the
config parameters Triton serves (its layout and columns, read through ``serving_contract``), so
no file of the repository is read: ``matrix`` → one FP32 tensor, columns in signature order;
``columns`` → one ``[N, 1]`` tensor per column of its served dtype; otherwise (``tensors``, an
ensemble) the config's inputs by name (a lone input takes the whole frame or array).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from builder.mlflow_deploy.errors import PredictionError
from serving_contract import ContractError, ServingContract

SERVING_KEYS = ("dataframe_split", "dataframe_records", "inputs", "instances")
_TRITON_TO_NUMPY = {
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
    "TYPE_INT64": "int64",
    "TYPE_INT32": "int32",
    "TYPE_BOOL": "bool",
    "TYPE_STRING": "object",
}
_SERVED_TO_NUMPY = {"float32": "float32", "int64": "int64", "bool": "bool", "string": "object"}
_HINT = (
    "send a DataFrame with the model's columns, or MLflow's serving format "
    '({"dataframe_split": {"columns": [...], "data": [[...]]}})'
)


def parameters(config: dict[str, Any]) -> dict[str, str]:
    """A Triton config's parameters as plain strings."""
    return {k: str(v.get("string_value", "")) for k, v in (config.get("parameters") or {}).items()}


def as_data(inputs: Any) -> pd.DataFrame | np.ndarray:
    """The rows of any input form ``predict`` accepts, as a DataFrame (named columns) or an
    array (a matrix, in the model's column order)."""
    if isinstance(inputs, pd.DataFrame) and len(inputs.columns) == 1 and inputs.columns[0] in SERVING_KEYS:
        key = inputs.columns[0]  # the CLI's pd.read_json of a serving-format file
        column = inputs[key].dropna()
        inputs = {key: column.tolist() if key == "dataframe_records" else column.to_dict()}
    if isinstance(inputs, pd.DataFrame | np.ndarray):
        return inputs
    if isinstance(inputs, list):
        inputs = {"instances": inputs}
    if not isinstance(inputs, dict):
        raise PredictionError(f"inputs of type {type(inputs).__name__} are not supported", hint=_HINT)
    given = [k for k in SERVING_KEYS if k in inputs]
    if len(given) != 1:
        raise PredictionError(
            f"inputs name {len(given)} of {', '.join(SERVING_KEYS)}; one expected", hint=_HINT
        )
    key = given[0]
    body = inputs[key]
    try:
        if key == "dataframe_split":
            return pd.DataFrame(**{k: body[k] for k in ("columns", "data", "index") if k in body})
        if key == "dataframe_records" or (isinstance(body, list) and body and isinstance(body[0], dict)):
            return pd.DataFrame.from_records(body)
        if isinstance(body, dict):
            return pd.DataFrame({k: np.asarray(v).reshape(len(v), -1)[:, 0] for k, v in body.items()})
        return np.asarray(body)
    except (TypeError, ValueError, KeyError) as exc:
        raise PredictionError(f"{key} is not readable as rows: {exc}", hint=_HINT) from None


def served_contract(config: dict[str, Any]) -> ServingContract:
    """The deployment's serving contract, read as a client that only sends rows reads it: its
    facts decoded, not checked for reading predictions by role (the gateway's refusals)."""
    try:
        return ServingContract.from_parameters(parameters(config), check=False)
    except ContractError as exc:
        raise PredictionError(f"the deployment's serving contract is unreadable: {exc}") from None


def triton_inputs(data: pd.DataFrame | np.ndarray, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Triton's input tensors for ``data`` under the served model's contract."""
    contract = served_contract(config)
    columns = contract.columns if contract.layout in ("matrix", "columns") else None
    if columns:
        names = [c.name for c in columns]
        frame = _frame(data, names)
        if contract.layout == "matrix":
            return {config["input"][0]["name"]: _cast(frame[names].to_numpy(), "float32", "input")}
        return {
            c.name: _cast(frame[[c.name]].to_numpy(), _SERVED_TO_NUMPY.get(c.dtype, "float32"), c.name)
            for c in columns
        }
    specs = config.get("input") or []
    if len(specs) == 1:
        array = data.to_numpy() if isinstance(data, pd.DataFrame) else np.asarray(data)
        return {
            specs[0]["name"]: _cast(
                array, _TRITON_TO_NUMPY.get(specs[0]["data_type"], "float32"), specs[0]["name"]
            )
        }
    frame = _frame(data, [s["name"] for s in specs])
    return {
        s["name"]: _cast(
            frame[[s["name"]]].to_numpy(), _TRITON_TO_NUMPY.get(s["data_type"], "float32"), s["name"]
        )
        for s in specs
    }


def _frame(data: pd.DataFrame | np.ndarray, names: list[str]) -> pd.DataFrame:
    if isinstance(data, np.ndarray):
        array = data.reshape(1, -1) if data.ndim == 1 else data
        if array.ndim != 2 or array.shape[1] != len(names):
            raise PredictionError(
                f"an array of shape {list(data.shape)} given; the model takes {len(names)} columns "
                f"({', '.join(names)})",
                hint=_HINT,
            )
        return pd.DataFrame(array, columns=names)
    missing = [n for n in names if n not in data.columns]
    if missing:
        raise PredictionError(f"inputs lack column(s) {', '.join(missing)}", hint=_HINT)
    return data


def _cast(array: np.ndarray, dtype: str, name: str) -> np.ndarray:
    try:
        if dtype == "object":
            return np.array([["" if v is None else str(v) for v in row] for row in array], dtype=object)
        return np.ascontiguousarray(array.astype(dtype))
    except (TypeError, ValueError) as exc:
        raise PredictionError(f"input {name!r} is not {dtype}: {exc}", hint=_HINT) from None


def batches(inputs: dict[str, np.ndarray], max_batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """The rows in requests of at most ``max_batch_size`` (0: one request, unbatched model)."""
    rows = len(next(iter(inputs.values())))
    step = max_batch_size or rows or 1
    for start in range(0, max(rows, 1), step):
        yield {k: v[start : start + step] for k, v in inputs.items()}


def predictions(chunks: list[dict[str, np.ndarray]]) -> dict[str, list[Any]]:
    """One list per output, a row per input row; a one-column output is a list of values."""
    out: dict[str, list[Any]] = {}
    for name in chunks[0]:
        array = np.concatenate([c[name] for c in chunks])
        if array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        out[name] = array.tolist()
    return out
