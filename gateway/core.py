"""The predict path, free of transports: a PredictRequest -> online features -> one Triton call.

HTTP and gRPC adapters parse their requests into a ``PredictRequest`` (gateway/request.py) and
turn its ``PredictResult`` (gateway/responses.py), or a GatewayError, back into their wire
format; nothing here knows about either. Inputs are assembled in gateway/assemble.py.

Concurrent requests to one model are served together (gateway/batching.py): one feature read
and one Triton call per batch, cut to the model's ``max_batch_size``; a request of more rows
than that is sent in several calls and its predictions put back in order.

A request's failure is its own. Keys and values are validated before anything is read
(gateway/request.py), and an entity the store lacks is refused alone. When a merged batch
still fails in a way one request's rows may have caused (the store refusing keys, Triton or
the assembly refusing a value), each request is served again alone, so only the culprit
answers with the error. Failures that are nobody's input (the store or Triton unreachable or
late, the model gone) fail the batch at once: serving each alone would only wait longer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from typing import Protocol

import numpy as np

from gateway import metrics
from gateway.assemble import assemble_input, undefaultable
from gateway.batching import Batcher, Pending, join_rows, split_rows
from gateway.catalog import ModelSpec, feature_service_of, spec_from_config
from gateway.clients.features import FeatureClient, age_seconds
from gateway.clients.triton import Triton
from gateway.errors import (
    DeadlineExceeded,
    EntityNotFound,
    GatewayError,
    InvalidInput,
    ModelNotFound,
    OutputMismatch,
    TooLarge,
    Unavailable,
)
from gateway.explain import explain, explain_count
from gateway.observe import Observation, Observer, notify
from gateway.request import PredictRequest, validate
from gateway.responses import Prediction, PredictResult, predictions
from gateway.settings import GatewaySettings

__all__ = ["PredictResult", "Predictor", "assemble_input"]


class Fallback(Protocol):
    """The spec a model's requests are served with (gateway/fallback/switch.py)."""

    async def serving(self, spec: ModelSpec) -> ModelSpec: ...


class Predictor:
    """Resolves models once (cached ModelSpec) and serves predictions."""

    def __init__(
        self,
        settings: GatewaySettings,
        triton: Triton,
        features: FeatureClient,
        observers: tuple[Observer, ...] = (),
    ) -> None:
        self.settings = settings
        self.triton = triton
        self.features = features
        self.observers = observers  # told about every served batch (gateway/observe.py)
        self.fallback: Fallback | None = None  # the CRITICAL switch (gateway/fallback/), if configured
        self._specs: dict[str, tuple[ModelSpec, float]] = {}
        self._batchers: dict[ModelSpec, Batcher] = {}
        self._lock = asyncio.Lock()

    async def spec(self, model: str) -> ModelSpec:
        """The model's spec, resolved through Triton at most every ``spec_ttl_s`` seconds, so a
        newly loaded version (and its feature list) is picked up without a restart."""
        cached = self._specs.get(model)
        if cached is not None and time.monotonic() - cached[1] < self.settings.triton.spec_ttl_s:
            return cached[0]
        async with self._lock:
            cached = self._specs.get(model)
            if cached is None or time.monotonic() - cached[1] >= self.settings.triton.spec_ttl_s:
                self._specs[model] = (await self._resolve(model), time.monotonic())
        return self._specs[model][0]

    def forget(self, model: str) -> None:
        """Drop a cached spec (after Triton said the model is gone, or reloaded it)."""
        self._specs.pop(model, None)

    async def _resolve(self, model: str) -> ModelSpec:
        if not model.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ModelNotFound(f"unknown model {model!r}")
        for candidate in (f"{model}_ensemble", model):
            versions = await self.triton.ready_versions(candidate)
            if not versions:
                continue
            config = await self.triton.model_config(candidate)
            key_types = await self.features.key_types(feature_service_of(model, config))
            spec = spec_from_config(model, candidate, versions[-1], config, key_types)
            if not spec.pinned_version:
                return spec
            if spec.pinned_version not in versions:
                raise ModelNotFound(
                    f"model {model!r} is pinned to version {spec.pinned_version} (serving.champion_version), "
                    f"which Triton does not serve (ready: {', '.join(versions)})"
                )
            return dataclasses.replace(spec, version=spec.pinned_version)
        raise ModelNotFound(f"unknown model {model!r}: Triton has no ready {model!r} or {model}_ensemble")

    async def predict(self, request: PredictRequest) -> PredictResult:
        if not request.rows:
            raise InvalidInput("no rows to score", field="rows")
        limit = self.settings.limits.max_batch_rows
        if len(request.rows) > limit:
            raise TooLarge(f"{len(request.rows)} rows exceed the limit of {limit} per request")
        spec = await self.spec(request.model)
        if self.fallback is not None:
            spec = await self.fallback.serving(spec)
        entity_rows, request_values = validate(spec, request)
        asked = explain_count(spec, request.explain)  # checked here: a bad one fails only its request
        batcher = self._batchers.get(spec)
        if batcher is None:
            batcher = Batcher(
                functools.partial(self._run_batch, spec),
                max_rows=_batch_rows(spec, self.settings),
                max_in_flight=self.settings.limits.batch_in_flight,
                fails_queue=lambda exc: isinstance(exc, Unavailable),
            )
            self._batchers[spec] = batcher
        result: PredictResult = await batcher.submit(entity_rows, request_values, asked)
        return result

    async def _run_batch(self, spec: ModelSpec, batch: list[Pending]) -> None:
        """Serve ``batch``; if it fails in a way one request may have caused, serve each alone."""
        try:
            await self._serve(spec, batch)
        except Exception as exc:
            if len(batch) == 1 or _shared_failure(exc):
                raise
            alone = [item for item in batch if not item.future.done()]
            outcomes = await asyncio.gather(*(self._serve(spec, [i]) for i in alone), return_exceptions=True)
            for item, outcome in zip(alone, outcomes, strict=True):
                if isinstance(outcome, BaseException) and not item.future.done():
                    item.future.set_exception(outcome)

    async def _serve(self, spec: ModelSpec, batch: list[Pending]) -> None:
        """One feature read and one Triton call (split at ``max_batch_size``) for every request in
        ``batch``; a request whose entity cannot be scored gets its 404 and stays out of it."""
        entity_rows = [r for p in batch for r in p.entity_rows]
        start = time.perf_counter()
        try:
            fetched = await self.features.fetch(spec.feature_service, entity_rows)
        finally:
            metrics.per_model(metrics.FEATURE_SECONDS, spec.name).observe(time.perf_counter() - start)
        default = self.settings.features.missing_policy(spec.name) == "default"
        served: list[tuple[Pending, slice]] = []
        rows: list[int] = []  # the batch's rows that go to Triton
        offset = 0
        for item in batch:
            mine = range(offset, offset + item.rows)
            offset += item.rows
            if item.future.done():
                continue
            refusal = _refusal(spec, item, [fetched.missing[i] for i in mine], default)
            if refusal is not None:
                item.future.set_exception(refusal)
                continue
            served.append((item, slice(len(rows), len(rows) + item.rows)))
            rows.extend(mine)
        if not served:
            return
        request_values = [v for p in batch for v in p.request_values]
        online = fetched.values
        if len(rows) < len(entity_rows):
            request_values = [request_values[i] for i in rows]
            online = {k: [v[i] for i in rows] for k, v in online.items()}
        inputs = assemble_input(spec, request_values, online, len(rows))
        asking = [(item, part) for item, part in served if item.explain]  # reason codes: see _explained
        explained: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | BaseException | None = None
        start = time.perf_counter()
        try:
            if asking:
                (out, ran), explained = await self._infer_explained(spec, inputs, asking, len(rows))
            else:
                out, ran = await self._infer(spec, inputs)
        except ModelNotFound:
            self.forget(spec.name)  # a reload may have changed it: resolve again next time
            raise
        finally:
            metrics.per_model(metrics.TRITON_SECONDS, spec.name).observe(time.perf_counter() - start)
        try:
            scored = predictions(spec, out, [bool(fetched.missing[i]) for i in rows])
        except OutputMismatch:
            self.forget(spec.name)  # the export and the model disagree: a reload may fix either
            raise
        if asking:
            scored = _explained(spec, scored, asking, explained)
        oldest = [fetched.oldest_epoch_s[i] for i in rows]
        for item, part in served:
            if item.future.done():  # its caller gave up while Triton answered
                continue
            item.future.set_result(
                PredictResult(
                    model=spec.name,
                    version=ran or spec.version,  # what Triton ran: the spec may lag a swap
                    kind=spec.kind,
                    classes=spec.classes,
                    predictions=scored[part],
                    feature_age_s=age_seconds(oldest[part]),
                    id=item.request_id,
                )
            )
        if self.observers:
            times = fetched.times
            entities = entity_rows
            if len(rows) < len(entity_rows):
                entities = [entity_rows[i] for i in rows]
                times = {k: [v[i] for i in rows] for k, v in times.items()}
            sizes = tuple(item.rows for item, _ in served)
            ids = [i for item, _ in served for i in item.prediction_ids()]
            seen = Observation(
                spec, ran or spec.version, inputs, scored, entities, time.time(), sizes, times, ids
            )
            asyncio.get_running_loop().call_soon(notify, self.observers, seen)

    async def _infer_explained(
        self,
        spec: ModelSpec,
        inputs: dict[str, np.ndarray],
        asking: list[tuple[Pending, slice]],
        rows: int,
    ) -> tuple[
        tuple[dict[str, np.ndarray], str | None],
        tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | BaseException,
    ]:
        """The model's answer for ``inputs`` and, in a call sent at the same time (not after:
        the explanation then costs its own latency only where it is the slower), the
        explainer's for the rows of the requests in ``asking``, with the inputs it got. The
        explainer's failure is returned, not raised: it is only the asking requests'."""
        picked = inputs
        if sum(part.stop - part.start for _, part in asking) < rows:
            index = np.concatenate([np.arange(part.start, part.stop) for _, part in asking])
            picked = {name: array[index] for name, array in inputs.items()}
        predicted, explained = await asyncio.gather(
            self._infer(spec, inputs), self._explainer(spec, picked), return_exceptions=True
        )
        if isinstance(predicted, BaseException):
            raise predicted
        if isinstance(explained, BaseException):
            if not isinstance(explained, Exception):
                raise explained  # cancelled: not the explainer's failure
            return predicted, explained
        return predicted, (explained, picked)

    async def _explainer(self, spec: ModelSpec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The explainer's contributions and base values for ``inputs`` (the model's own), in
        calls of at most the model's ``max_batch_size`` rows (the explainer is exported with it)."""
        explainer = spec.explainer
        assert explainer is not None  # explain_count let only models with one ask
        wanted = (explainer.contributions, explainer.base_value)
        pieces = split_rows(inputs, spec.max_batch_size)
        try:
            answers = await asyncio.gather(*(self.triton.infer(explainer.model, p, wanted) for p in pieces))
        except ModelNotFound as exc:
            raise ModelNotFound(
                f"model {spec.name!r} names the explainer {explainer.model!r}, which Triton does not "
                "serve: load the repository that `builder export --explain` wrote"
            ) from exc
        return join_rows([out for out, _ in answers])

    async def _infer(
        self, spec: ModelSpec, inputs: dict[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], str | None]:
        """Triton's outputs for ``inputs`` and the version that ran them, in calls of at most the
        model's ``max_batch_size`` rows (sent together: Triton's own batcher and instances take
        them in parallel). Calls split across a hot swap report the newest version."""
        pieces = split_rows(inputs, spec.max_batch_size)
        model, outputs, version = spec.triton_model, spec.outputs, spec.pinned_version
        if len(pieces) == 1:
            return await self.triton.infer(model, pieces[0], outputs, version)
        answers = await asyncio.gather(
            *(self.triton.infer(model, p, outputs, version) for p in pieces), return_exceptions=True
        )
        done: list[tuple[dict[str, np.ndarray], str | None]] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            done.append(answer)
        versions = [v for _, v in done if v]
        return join_rows([out for out, _ in done]), max(versions, key=int) if versions else None


def _batch_rows(spec: ModelSpec, settings: GatewaySettings) -> int:
    """Rows one batch may merge: what one Triton call takes, and never more than the gateway's
    own cap on one feature read (``max(GATEWAY_MAX_BATCH_ROWS, 64)``, the bound before models
    said theirs), which also bounds a model without a batch axis (``max_batch_size`` 0)."""
    cap = max(settings.limits.max_batch_rows, 64)
    return min(spec.max_batch_size, cap) if spec.max_batch_size > 0 else cap


def _shared_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is nobody's input: a dependency down or late, or the model gone. Serving
    a batch's requests alone would then fail each the same way, only later."""
    return isinstance(exc, Unavailable | DeadlineExceeded | ModelNotFound)


def _explained(
    spec: ModelSpec,
    scored: list[Prediction],
    asking: list[tuple[Pending, slice]],
    explained: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | BaseException | None,
) -> list[Prediction]:
    """``scored`` with the asking requests' explanations; where the explainer failed (or its
    answer breaks the contract), those requests get the error and the others their scores."""
    try:
        if explained is None or isinstance(explained, BaseException):
            raise explained or GatewayError("the explainer did not answer")
        out, inputs = explained
        index = [i for _, part in asking for i in range(part.start, part.stop)]
        ks = [item.explain for item, part in asking for _ in range(part.start, part.stop)]
        done = explain(spec, out, inputs, [scored[i] for i in index], ks)
    except Exception as exc:
        for item, _ in asking:
            if not item.future.done():
                item.future.set_exception(exc)
        return scored
    scored = list(scored)
    for i, prediction in zip(index, done, strict=True):
        scored[i] = prediction
    return scored


def _refusal(
    spec: ModelSpec, item: Pending, missing: list[list[str]], default: bool
) -> EntityNotFound | None:
    """Why ``item`` cannot be scored: an entity without online features under the ``reject``
    policy, or (under either policy) without a value that has no stand-in (int64, bool)."""
    for i, names in enumerate(missing):
        if not names:
            continue
        keys = ", ".join(f"{k}={item.entity_rows[i][k]}" for k in spec.entity_key_names)
        if not default:
            return EntityNotFound(
                f"no online features for {keys} (missing: {', '.join(names)})", field=f"rows[{i}]"
            )
        required = undefaultable(spec, names)
        if required:
            dtype = spec.dtype(required[0])
            return EntityNotFound(
                f"no online value of {required[0]!r} for {keys}: a {dtype} feature has no missing "
                "value to stand in",
                field=f"rows[{i}]",
            )
    return None
