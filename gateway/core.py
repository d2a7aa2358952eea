"""The predict path, free of transports: rows -> online features -> one Triton call -> scores.

HTTP and gRPC adapters translate their requests into ``predict(model, rows)`` and its result
(or a GatewayError) back; nothing here knows about either.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway import metrics
from gateway.batching import Batcher, Pending
from gateway.catalog import ModelSpec, SpecError, spec_from_config
from gateway.errors import EntityNotFound, GatewayError, InvalidInput, ModelNotFound, TooLarge
from gateway.features import OnlineFeatures, age_seconds
from gateway.settings import GatewaySettings
from gateway.triton import TritonClient


@dataclass(frozen=True)
class Prediction:
    score: float
    label: int
    probabilities: tuple[float, ...]
    defaults_used: bool


@dataclass(frozen=True)
class PredictResult:
    model: str
    version: str
    predictions: list[Prediction]
    feature_age_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "predictions": [
                {
                    "score": p.score,
                    "label": p.label,
                    "probabilities": list(p.probabilities),
                    "defaults_used": p.defaults_used,
                }
                for p in self.predictions
            ],
            "feature_age_seconds": self.feature_age_s,
        }


class Predictor:
    """Resolves models once (cached ModelSpec) and serves predictions."""

    def __init__(self, settings: GatewaySettings, triton: TritonClient, features: OnlineFeatures) -> None:
        self.settings = settings
        self.triton = triton
        self.features = features
        self._specs: dict[str, tuple[ModelSpec, float]] = {}
        self._batchers: dict[ModelSpec, Batcher] = {}
        self._lock = asyncio.Lock()

    async def spec(self, model: str) -> ModelSpec:
        """The model's spec, resolved through Triton at most every ``spec_ttl_s`` seconds, so a
        newly loaded version (and its feature list) is picked up without a restart."""
        cached = self._specs.get(model)
        if cached is not None and time.monotonic() - cached[1] < self.settings.spec_ttl_s:
            return cached[0]
        async with self._lock:
            cached = self._specs.get(model)
            if cached is None or time.monotonic() - cached[1] >= self.settings.spec_ttl_s:
                self._specs[model] = (await self._resolve(model), time.monotonic())
        return self._specs[model][0]

    def forget(self, model: str) -> None:
        """Drop a cached spec (after Triton said the model is gone, or reloaded it)."""
        self._specs.pop(model, None)

    async def _resolve(self, model: str) -> ModelSpec:
        if not model.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ModelNotFound(f"unknown model {model!r}")
        for candidate in (f"{model}_ensemble", model):
            version = await self.triton.model_ready_version(candidate)
            if version is None:
                continue
            config = await self.triton.model_config(candidate)
            try:
                return spec_from_config(model, candidate, version, config)
            except SpecError as exc:
                raise ModelNotFound(str(exc)) from exc
        raise ModelNotFound(f"unknown model {model!r}: Triton has no ready {model!r} or {model}_ensemble")

    async def predict(self, model: str, rows: list[dict[str, Any]]) -> PredictResult:
        if not rows:
            raise InvalidInput("no rows to score", field="rows")
        if len(rows) > self.settings.max_batch_rows:
            raise TooLarge(f"{len(rows)} rows exceed the limit of {self.settings.max_batch_rows} per request")
        spec = await self.spec(model)
        entity_rows, request_values = _validate(spec, rows)
        batcher = self._batchers.get(spec)
        if batcher is None:
            batcher = Batcher(
                functools.partial(self._run_batch, spec),
                max_rows=max(self.settings.max_batch_rows, 64),
                max_in_flight=self.settings.batch_in_flight,
            )
            self._batchers[spec] = batcher
        result: PredictResult = await batcher.submit(entity_rows, request_values)
        return result

    async def _run_batch(self, spec: ModelSpec, batch: list[Pending]) -> None:
        """One feature read and one Triton call for every request in ``batch``."""
        entity_rows = [r for p in batch for r in p.entity_rows]
        request_values = [v for p in batch for v in p.request_values]
        start = time.perf_counter()
        try:
            fetched = await self.features.fetch(spec.feature_service, entity_rows)
        finally:
            metrics.FEATURE_SECONDS.labels(spec.name).observe(time.perf_counter() - start)
        x = assemble_input(spec, request_values, fetched.values, len(entity_rows))
        start = time.perf_counter()
        try:
            out = await self.triton.infer(spec.triton_model, spec.input_name, x, spec.outputs)
        except ModelNotFound:
            self.forget(spec.name)  # a reload may have changed it: resolve again next time
            raise
        finally:
            metrics.TRITON_SECONDS.labels(spec.name).observe(time.perf_counter() - start)
        predictions = _predictions(out, [bool(m) for m in fetched.missing])
        reject = self.settings.missing_policy(spec.name) == "reject"
        offset = 0
        for item in batch:
            mine = slice(offset, offset + item.rows)
            offset += item.rows
            if item.future.done():
                continue
            missing = fetched.missing[mine]
            if reject and any(missing):
                i = next(j for j, m in enumerate(missing) if m)
                keys = ", ".join(f"{k}={item.entity_rows[i][k]}" for k in spec.entity_keys)
                item.future.set_exception(
                    EntityNotFound(
                        f"no online features for {keys} (missing: {', '.join(missing[i])})",
                        field=f"rows[{i}]",
                    )
                )
                continue
            item.future.set_result(
                PredictResult(
                    model=spec.name,
                    version=spec.version,
                    predictions=predictions[mine],
                    feature_age_s=age_seconds(fetched.oldest_epoch_s[mine]),
                )
            )


def _validate(spec: ModelSpec, rows: list[Any]) -> tuple[list[dict[str, int]], list[dict[str, float]]]:
    """Each row: exactly the entity keys (integers) and request fields (finite numbers)."""
    allowed = set(spec.entity_keys) | set(spec.request_fields)
    entity_rows, values = [], []
    for i, row in enumerate(rows):
        where = f"rows[{i}]"
        if not isinstance(row, dict):
            raise InvalidInput("each row must be an object of entity keys and request fields", field=where)
        unknown = sorted(set(row) - allowed)
        if unknown:
            raise InvalidInput(
                f"unknown field {unknown[0]!r}; this model takes {', '.join(sorted(allowed))}",
                field=f"{where}.{unknown[0]}",
            )
        keys = {}
        for key in spec.entity_keys:
            value = row.get(key)
            if value is None:
                raise InvalidInput(f"missing entity key {key!r}", field=f"{where}.{key}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"entity key {key!r} must be an integer", field=f"{where}.{key}")
            keys[key] = value
        fields = {}
        for name in spec.request_fields:
            value = row.get(name)
            if value is None:
                raise InvalidInput(f"missing request field {name!r}", field=f"{where}.{name}")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidInput(f"request field {name!r} must be a finite number", field=f"{where}.{name}")
            fields[name] = float(value)
        entity_rows.append(keys)
        values.append(fields)
    return entity_rows, values


def assemble_input(
    spec: ModelSpec, request_values: list[dict[str, float]], online: dict[str, list[Any]], n: int
) -> np.ndarray:
    """The model input, columns in training order; a missing online value is NaN (the
    ensemble's preprocess imputes it with the training value, as it did in training)."""
    x = np.empty((n, len(spec.feature_names)), dtype=np.float32)
    for j, name in enumerate(spec.feature_names):
        if name in spec.request_fields:
            x[:, j] = [r[name] for r in request_values]
        else:
            column = online.get(name)
            if column is None:
                raise GatewayError(f"feature service {spec.feature_service!r} does not provide {name!r}")
            x[:, j] = [np.nan if v is None else v for v in column]
    return x


def _predictions(out: dict[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    probs = out.get("probabilities")
    if "score" in out:
        scores = out["score"][:, 0]
    elif probs is not None:
        scores = probs[:, -1]
    else:
        raise GatewayError("the model returned neither score nor probabilities")
    labels = out["label"][:, 0] if "label" in out else (scores >= 0.5).astype(np.int64)
    return [
        Prediction(
            score=float(scores[i]),
            label=int(labels[i]),
            probabilities=tuple(float(p) for p in probs[i]) if probs is not None else (),
            defaults_used=defaults[i],
        )
        for i in range(len(scores))
    ]
