"""The gateway's own HTTP API, ``/v1``: the predict route (a bare ASGI route, gateway/http/asgi.py
says why) and the model routes on FastAPI: drift, shadow, feedback, quality and the fallback
switch. Both only translate: a body of rows becomes the typed ``PredictRequest``
(gateway/request.py) and an answer's ``to_dict()`` goes back as JSON; the auth check and the
error answers are gateway/http/handling.py's.

A row is a JSON object of scalars: nested values are refused, and so are strings with a lone
surrogate (Feast's keys and Triton's BYTES are UTF-8), each a 422 naming ``rows[i].field``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from gateway.drift.monitor import off_report
from gateway.errors import BadRequest, InvalidInput
from gateway.http.asgi import BareRoute, Target
from gateway.http.bodies import parse_json, read_body, to_json
from gateway.quality.live import parse_feedback
from gateway.request import PredictRequest, Row
from gateway.service import Service
from gateway.shadow.runner import shadow_off
from gateway.stats.counts import window_seconds
from gateway.values import Scalar

_PREFIX, _SUFFIX = "/v1/models/", "/predict"
EXPLAIN = "explain"  # the body's top-level option: reason codes per prediction (gateway/explain.py)


def predict_model(path: str) -> str | None:
    """The model of ``/v1/models/{model}/predict`` (one path segment), else None."""
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    model = path[len(_PREFIX) : -len(_SUFFIX)]
    return model if model and "/" not in model else None


def _valid_text(text: str) -> bool:
    """False for a string with a lone surrogate (a ``\\ud800`` escape): no UTF-8 for it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def rows_of(body: Any) -> tuple[list[Any], Any]:
    """``{"rows": [...]}`` for a batch, or one row object on its own (not yet checked), and the
    body's ``explain`` (None when absent; checked by the core, gateway/explain.py). In a one-row
    body ``explain`` is the option, never a field of the row."""
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object: one row, or {"rows": [...]}')
    explain = body.get(EXPLAIN)
    if "rows" in body:
        if not isinstance(body["rows"], list):
            raise InvalidInput("rows must be a list of row objects", field="rows")
        extra = sorted(set(body) - {"rows", EXPLAIN})
        if extra:
            raise InvalidInput(f"unknown top-level field {extra[0]!r}", field=extra[0])
        return body["rows"], explain
    if EXPLAIN in body:
        body = {k: v for k, v in body.items() if k != EXPLAIN}
    return [body], explain


def _row(i: int, row: Any) -> Row:
    """One JSON row as a typed Row: scalars keep their JSON type; null is no value."""
    if not isinstance(row, dict):
        raise InvalidInput("each row must be an object of entity keys and request fields", field=f"rows[{i}]")
    fields: dict[str, Scalar] = {}
    for key, value in row.items():
        # Feast's keys and Triton's BYTES are UTF-8: a lone surrogate reaches neither
        if not _valid_text(key):  # a name that cannot be echoed as a field path
            raise InvalidInput(f"field {key!a} is not valid Unicode (a lone surrogate)", field=f"rows[{i}]")
        if isinstance(value, str) and not _valid_text(value):
            where = f"rows[{i}].{key}"
            raise InvalidInput(f"field {key!r} is not valid Unicode (a lone surrogate)", field=where)
        if value is None:
            continue
        if not isinstance(value, bool | int | float | str):
            kind = "an array" if isinstance(value, list) else "an object"
            raise InvalidInput(f"field {key!r} must be a single value, not {kind}", field=f"rows[{i}].{key}")
        fields[key] = value
    return Row(fields)


def parse_request(model: str, body: bytes) -> PredictRequest:
    """An HTTP predict body (one row, or ``{"rows": [...]}``) as the typed request."""
    rows, explain = rows_of(parse_json(body))
    if explain is not None and not isinstance(explain, bool | int | float | str):
        kind = "an array" if isinstance(explain, list) else "an object"
        raise InvalidInput(f"explain must be a whole number of reason codes, not {kind}", field=EXPLAIN)
    return PredictRequest(model, tuple(_row(i, r) for i, r in enumerate(rows)), explain)


class PredictRoute(BareRoute):
    """``POST /v1/models/{model}/predict``: one row, or ``{"rows": [...]}``."""

    route = "predict"
    post = "a body of rows"

    def target(self, path: str) -> Target | None:
        model = predict_model(path)
        return None if model is None else (model, "")

    async def answer(self, target: Target, headers: dict[bytes, bytes], body: bytes) -> bytes:
        result = await self.service.predictor.predict(parse_request(target[0], body))
        return to_json(result.to_dict())


def _fallback_command(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or body.get("action") not in ("reset", "engage"):
        raise BadRequest('the body must be {"action": "reset" | "engage", "reason": "..."}')
    reason = body.get("reason", "")
    if not isinstance(reason, str) or set(body) - {"action", "reason"}:
        raise BadRequest('the body must be {"action": "reset" | "engage", "reason": "..."}')
    return str(body["action"]), reason[:500]


def add_routes(app: FastAPI, service: Service, keyed: Any) -> None:
    """The ``/v1`` model routes besides predict, each behind the ``keyed`` auth dependency: their
    reports name the model's features, versions and traffic."""

    def answer(content: Any) -> Response:
        return Response(to_json(content), media_type="application/json")

    @app.get("/v1/models/{model}/drift", dependencies=[keyed])
    async def drift(model: str, window: str = "1h") -> Response:
        seconds = window_seconds(window)  # a bad window is a 400 before any lookup
        spec = await service.predictor.spec(model)
        if service.drift is None:
            return answer(
                off_report(spec, window, seconds, "drift counting is off (GATEWAY_DRIFT_SAMPLE=0)").to_dict()
            )
        return answer(service.drift.report(spec, window).to_dict())

    @app.get("/v1/models/{model}/shadow", dependencies=[keyed])
    async def shadow(model: str, window: str = "1h") -> Response:
        window_seconds(window)  # a bad window is a 400 before any lookup
        spec = await service.predictor.spec(model)
        if service.shadow is None:
            return answer(shadow_off(spec.name, window, "shadow traffic is off (GATEWAY_SHADOW is empty)"))
        return answer(await service.shadow.report(spec, window))

    @app.post("/v1/models/{model}/feedback", dependencies=[keyed])
    async def feedback(model: str, request: Request) -> Response:
        # labels for predictions any replica answered, by the ids it returned (docs/quality.md)
        async with service.labels.turn():  # predictions first: one label batch at a time
            items = parse_feedback(
                parse_json(await read_body(request, service.settings.limits.max_body_bytes))
            )
            spec = await service.predictor.spec(model)
            result = await service.quality_monitor().feedback(spec, items)
        return answer(result.to_dict())

    @app.get("/v1/models/{model}/quality", dependencies=[keyed])
    async def quality(model: str, window: str = "1h") -> Response:
        window_seconds(window)  # a bad window is a 400 before any lookup
        spec = await service.predictor.spec(model)
        # read from the shared store; the metrics are computed off the event loop
        return answer((await service.quality_monitor().report(spec, window)).to_dict())

    @app.get("/v1/models/{model}/fallback", dependencies=[keyed])
    async def fallback_status(model: str) -> Response:
        # the shared decision, the rule and the champion's judged figure (docs/quality.md)
        return answer(await service.fallback_switch(model).status(model))

    @app.post("/v1/models/{model}/fallback", dependencies=[keyed])
    async def fallback_command(model: str, request: Request) -> Response:
        # {"action": "reset" | "engage", "reason": "..."}: every replica follows within a second
        body = parse_json(await read_body(request, service.settings.limits.max_body_bytes))
        action, reason = _fallback_command(body)
        switch = service.fallback_switch(model)
        await switch.command(model, action, reason)
        return answer(await switch.status(model))
