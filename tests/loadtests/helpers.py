"""Helpers of the load tests"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


SMOKE_SCRIPT = Path(__file__).resolve().parent / "smoke_user.py"


MODEL = "lt-fraud"


TYPED_MODEL = "lt-typed"


@dataclass(frozen=True)
class Served:
    """The exported repository and the Triton serving it."""

    repo: Path
    model: str
    http_url: str  # http://127.0.0.1:PORT
    grpc_url: str  # 127.0.0.1:PORT
    typed_model: str = TYPED_MODEL  # "columns" layout: FP32 and BYTES (string) inputs


def typed_classifier(name: str) -> None:
    """The demo's Pipeline (impute/scale numerics, one-hot strings, boosting) on synthetic rows,
    registered as ``name@champion``: what the demo serves, in seconds."""
    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow import MlflowClient

    from support.train import SKOPS_TRUSTED_TYPES, build_pipeline

    rng = np.random.default_rng(0)
    rows = 300
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows),
            "merchant_risk": rng.uniform(0, 1, rows),
            "channel": rng.choice(["web", "app", "pos"], rows).astype(object),
            "merchant_category": rng.choice(["grocery", "travel", "gaming"], rows).astype(object),
        }
    )
    logit = 3 * X.merchant_risk + 1.0 * (X.channel == "web") + 0.8 * (X.merchant_category == "gaming") - 2.5
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-logit))).astype(int)
    model = build_pipeline(["amount", "merchant_risk"], ["channel", "merchant_category"], n_estimators=10)
    model.fit(X, y)
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=SKOPS_TRUSTED_TYPES,
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


def run_cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``loadtests ...`` as a user runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-c", "from loadtests.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


def smoke_user(
    user_class: str, locust_args: list[str], tmp_path: Path, requests: int = 5, timeout: float = 90
) -> dict[str, Any]:
    """Run one Locust user with ``run_single_user`` in a subprocess (Locust patches the process
    it is imported into with gevent; this pytest process must stay unpatched)."""
    out = tmp_path / f"smoke-{user_class}.json"
    proc = subprocess.run(
        [sys.executable, str(SMOKE_SCRIPT), user_class, str(requests), str(out), "--", *locust_args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, f"smoke script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


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


SHADOW: dict[str, Any] = {
    "model": "fraud-detector",
    "window": "1h",
    "window_seconds": 3600,
    "enabled": True,
    "champion": {"model": "fraud-detector", "version": "1"},
    "challenger": {"model": "fraud-detector", "version": "2"},
    "share": 1.0,
    "tolerance": 0.05,
    "rows": 5000,
    "mirrored_rows": 5100,
    "dropped_rows": 50,
    "error_rows": 50,
    "error_rate": 0.0098,
    "agreement": 0.991,
    "difference": {"mean": 0.004, "p99": 0.03, "max": 0.2, "beyond_tolerance": 0.004},
    "score_psi": 0.012,
    "challenger_latency_ms": {"p50": 1.2, "p99": 4.5},
}


QUALITY: dict[str, Any] = {
    "model": "fraud-detector",
    "kind": "binary",
    "window": "1h",
    "window_seconds": 3600,
    "versions": [
        {
            "model": "fraud-detector",
            "version": "1",
            "role": "champion",
            "rows": 480,
            "metrics": {"auc": 0.91, "log_loss": 0.2, "precision": 0.5, "recall": 0.6, "ece": 0.02},
        },
        {
            "model": "fraud-detector",
            "version": "2",
            "role": "challenger",
            "rows": 480,
            "metrics": {"auc": 0.905, "log_loss": 0.21, "precision": 0.5, "recall": 0.6, "ece": 0.02},
        },
    ],
    "feedback": {"accepted": 480, "duplicate": 0, "conflicting": 0, "unknown": 0, "invalid": 0},
}


def changed(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``a.b`` (or ``versions.1.metrics.auc``) set to ``value``."""
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return doc
