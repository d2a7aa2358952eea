"""The skew checks: on a sample of scored rows, the batch's answers against a live Triton's for
the same inputs, and against a live gateway's for the same entity and request fields.

Triton gets the very tensors the executors fed the graph (built again from the sample's joined
features, by the same code), for the same model and version: any difference is a different
graph or runtime. The gateway reads its features online, now: its answers equal the batch's
for rows stamped at the time the online store was materialized (a nightly re-score of the
current state); for older rows a difference may be the features' history, not skew.

Values compare as the builder's parity does: labels and ids equal, numbers within
``atol + rtol·|batch|`` (1e-5 each: Triton's onnxruntime may be another release than this one).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from builder.errors import first_line
from builder.parity.compare import DEFAULT_ATOL, DEFAULT_RTOL
from builder.score.answers import answer_columns
from builder.score.executor import ScoringPlan, runner
from builder.score.inputs import feeds, model_inputs
from builder.score.served import ServedVersion

GATEWAY_ROWS = 16  # rows per gateway request: within its default GATEWAY_MAX_BATCH_ROWS
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RowNames:
    """How a problem names a row: its entity keys and timestamp."""

    keys: tuple[str, ...]
    timestamp: str

    def of(self, row: dict[str, Any]) -> str:
        keys = " ".join(f"{k}={row[k]!r}" for k in self.keys)
        at = row[self.timestamp]
        return f"{keys} at {at.isoformat() if hasattr(at, 'isoformat') else at}"


def same(batch: Any, other: Any) -> bool:
    if isinstance(batch, float) and isinstance(other, int | float) and not isinstance(other, bool):
        return math.isclose(batch, other, rel_tol=DEFAULT_RTOL, abs_tol=DEFAULT_ATOL) or (
            math.isnan(batch) and math.isnan(other)
        )
    if isinstance(batch, list) and isinstance(other, list):
        return len(batch) == len(other) and all(same(a, b) for a, b in zip(batch, other, strict=True))
    return bool(batch == other) and type(batch) is type(other)


def differences(batch: dict[str, Any], other: dict[str, Any], names: Sequence[str], who: str) -> list[str]:
    return [
        f"{name} {batch.get(name)!r} (batch) vs {other.get(name)!r} ({who})"
        for name in names
        if not same(batch.get(name), other.get(name))
    ]


def triton_problems(
    url: str, served: ServedVersion, plan: ScoringPlan, sample: pa.Table, rows: RowNames
) -> list[str]:
    """Each sampled row whose Triton answer differs from the batch's, named, with what differs."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    batch = sample.combine_chunks().to_batches()[0] if sample.num_rows else None
    if batch is None:
        return []
    fed = feeds(plan.inputs, batch)
    graph = runner(plan.digest, plan.threads, lambda: served.onnx, plan.answers.outputs())
    picked = np.flatnonzero(fed.scorable)
    tensors = model_inputs(plan.inputs, fed.tensors, picked, graph.matrix_input)
    step = served.max_batch_size or len(picked)
    got: dict[str, list[np.ndarray]] = {name: [] for name in plan.answers.outputs()}
    client = httpclient.InferenceServerClient(url.split("://", 1)[-1], network_timeout=TIMEOUT_S)
    try:
        for start in range(0, len(picked), step):
            inputs = []
            for name, array in tensors.items():
                part = array[start : start + step]
                tensor = httpclient.InferInput(
                    name, list(part.shape), "BYTES" if part.dtype == object else _triton(part)
                )
                tensor.set_data_from_numpy(part, binary_data=True)
                inputs.append(tensor)
            wanted = [httpclient.InferRequestedOutput(o, binary_data=True) for o in got]
            result = client.infer(served.model, inputs, model_version=str(served.version), outputs=wanted)
            for name in got:
                got[name].append(result.as_numpy(name))
    except InferenceServerException as exc:
        return [f"Triton at {url} refused {served.label}: {first_line(Exception(exc.message()))}"]
    except OSError as exc:
        return [f"Triton at {url} does not answer: {first_line(exc)}"]
    finally:
        client.close()
    outputs = {name: np.concatenate(parts) for name, parts in got.items()}
    columns = answer_columns(plan.answers, outputs, np.ones(len(picked), dtype=bool))
    names = [name for name, _, _ in plan.answers.columns()]
    theirs = pa.Table.from_arrays(columns, names=names).to_pylist()
    ours = batch.take(pa.array(picked)).to_pylist()
    return [
        f"{rows.of(row)}: {'; '.join(diff)}"
        for row, answer in zip(ours, theirs, strict=True)
        if (diff := differences(row, answer, names, "Triton"))
    ]


def _triton(array: np.ndarray) -> str:
    return {"float32": "FP32", "int64": "INT64", "bool": "BOOL"}[array.dtype.name]


def gateway_problems(
    url: str, served: ServedVersion, plan: ScoringPlan, sample: pa.Table, rows: RowNames
) -> list[str]:
    """Each sampled row whose gateway answer differs from the batch's (or is refused), named."""
    fields = {c.name: c.dtype for c in plan.inputs.columns if not c.feature}
    names = [name for name, _, _ in plan.answers.columns()]
    ours = [r for r in sample.to_pylist() if r[names[0]] is not None]
    problems: list[str] = []
    for start in range(0, len(ours), GATEWAY_ROWS):
        chunk = ours[start : start + GATEWAY_ROWS]
        body = {"rows": [_request_row(r, rows.keys, fields) for r in chunk]}
        status, answer = _post(f"{url.rstrip('/')}/v1/models/{served.model}/predict", body)
        if status != 200:
            detail = json.dumps(answer)[:300]
            return [*problems, f"the gateway at {url} answered {status} for {rows.of(chunk[0])}…: {detail}"]
        if str(answer.get("version")) != str(served.version):
            return [
                f"the gateway at {url} serves {served.model} v{answer.get('version')}; the batch scored "
                f"v{served.version}"
            ]
        for row, predicted in zip(chunk, answer.get("predictions") or [], strict=False):
            diff = differences(row, predicted, names, "gateway")
            if diff:
                problems.append(f"{rows.of(row)}: {'; '.join(diff)}")
    return problems


def _request_row(row: dict[str, Any], keys: Sequence[str], fields: dict[str, str]) -> dict[str, Any]:
    kinds = {"float32": float, "int64": int, "bool": bool, "string": str}
    out = {k: row[k] for k in keys}
    out.update({f: kinds[dtype](row[f]) for f, dtype in fields.items()})
    return out


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            return int(err.code), json.loads(err.read())
        except ValueError:
            return int(err.code), {}
    except (OSError, ValueError) as exc:
        return 0, {"error": first_line(exc)}
