"""A minimal server on the gateway's routes, for the gate's own failure paths only.

The real gateway (real Feast, real Triton) is what the gateway Locust user and a full gate run
are tested against (tests/gateway/test_gateway_release_gate.py). This server exists for what
the real one cannot be made to do on demand: answer ``/readyz`` with 503 while staying up, or
keep a Locust run alive past the gate's hard timeout. It also checks each request body against
the gateway's contract, so a payload test can reuse ``contract_problem``.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

# The demo model's request: entity keys, and the request-time fields amount, hour and channel.
ROW_FIELDS = {"user_id": int, "merchant_id": int, "amount": (int, float), "hour": int, "channel": str}
USER_IDS = range(1, 501)
MERCHANT_IDS = range(1, 101)
_PREDICT = re.compile(r"^/v1/models/([A-Za-z0-9_.-]+)/predict$")


def contract_problem(body: Any) -> str | None:
    """Why ``body`` breaks the predict contract, or None."""
    if not isinstance(body, dict) or set(body) != {"rows"}:
        return "body must be {'rows': [...]}"
    rows = body["rows"]
    if not isinstance(rows, list) or not rows:
        return "rows must be a non-empty list"
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != set(ROW_FIELDS):
            return f"rows[{i}] must have exactly {sorted(ROW_FIELDS)}"
        for key, kind in ROW_FIELDS.items():
            if isinstance(row[key], bool) or not isinstance(row[key], kind):
                return f"rows[{i}].{key} has type {type(row[key]).__name__}"
        if row["user_id"] not in USER_IDS or row["merchant_id"] not in MERCHANT_IDS:
            return f"rows[{i}]: entity ids out of the feature repo's ranges"
        if not 0 <= row["hour"] <= 23 or row["amount"] < 0:
            return f"rows[{i}]: hour or amount out of range"
    return None


class GatewayStandIn:
    """Serves the contract on 127.0.0.1:<free port>; records the rows it accepted."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self.ready = True
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, {"status": "ok"})
                elif self.path == "/readyz":
                    self._send(200 if standin.ready else 503, {"ready": standin.ready})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                match = _PREDICT.match(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not match:
                    self._send(404, {"error": "not found"})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                problem = contract_problem(body)
                with standin._lock:
                    if problem:
                        standin.rejected.append(problem)
                    else:
                        standin.rows += body["rows"]
                if problem:
                    self._send(422, {"error": problem})
                    return
                predictions = [{"score": 0.1, "label": 0} for _ in body["rows"]]
                self._send(200, {"model": match.group(1), "version": "1", "predictions": predictions})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gateway-standin", daemon=True
        )

    def __enter__(self) -> GatewayStandIn:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
