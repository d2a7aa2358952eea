"""Part (f) of ``make bench``: the peer to beat, MLServer, on the same model and load (issue 12).

The bench's scikit-learn model (``tests.models.sklearn_classifier``: GradientBoosting, 20 trees
of depth 3, in a StandardScaler Pipeline, 5 features) is served two ways, on the same machine,
in the same run, over HTTP with the KServe V2 protocol, one row per request:

- **MLServer 1.7.1** (``mlserver-sklearn``, in its own venv built from
  ``requirements/bench-mlserver.lock`` under ``.bench/``), the native Pipeline as ``model.joblib``,
  ``parallel_workers: 0`` (its worker pool crashes on this machine otherwise), asked for
  ``predict_proba``; once as it comes (``fraud``) and once with adaptive batching
  (``fraud_adaptive``: ``max_batch_size`` 64, ``max_batch_time`` 1 ms). Its best of the two at
  each concurrency is the figure to beat;
- **Triton**, the exported model with the builder's default config (``fraud_default``), asked
  for ``probabilities``; beside it the same model at the other queue delays of
  ``TRITON_DELAYS_US`` (for the record of what the default trades; the goals read the default).

Both answer the same row first (the probabilities must agree). The load generator is ``wrk``
(C, closed loop, one connection per client, ``--latency`` percentiles), the same for both, so
neither side's client costs the other's CPU differently. Goals: Triton's p50 at concurrency 1
no worse than MLServer's best; Triton's throughput at 16 and 64 clients >= 3x MLServer's best.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK = REPO_ROOT / "requirements" / "bench-mlserver.lock"
VENV = REPO_ROOT / ".bench" / "mlserver"
MODEL = "fraud"
TRITON_MODEL = "fraud_default"
# Other queue delays, same model, for the record of what the default trades (same run, same wrk).
TRITON_DELAYS_US = (0, 100, 1000)
MLSERVER_MODELS = {"as shipped": "fraud", "adaptive batching": "fraud_adaptive"}
ADAPTIVE = {"max_batch_size": 64, "max_batch_time": 0.001}
GOALS = {"p50_c1_ratio_max": 1.0, "throughput_ratio_min": {"concurrency": (16, 64), "ratio": 3.0}}
PROB_ATOL = 1e-5  # float32 ONNX vs float64 sklearn


class PeerBenchError(Exception):
    """A reason not to report the peer comparison (a server that did not start, wrong answers)."""


def ensure_venv(say: Callable[[str], None]) -> Path:
    """MLServer's own venv (it pins libraries the project's venv must not share), rebuilt when the
    lock changes; returns its ``mlserver`` executable."""
    stamp = VENV / f".installed-{hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]}"
    mlserver = VENV / "bin" / "mlserver"
    if stamp.exists() and mlserver.exists():
        return mlserver
    say(f"building MLServer's venv in {VENV} (once)")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    done = subprocess.run([*pip, "-r", str(LOCK)], capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerBenchError(f"installing MLServer failed: {done.stderr.strip().splitlines()[-1:]}")
    stamp.touch()
    return mlserver


def wrk_path() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise PeerBenchError("wrk is not installed: apt-get install wrk (make bench installs it as root)")
    return found


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_mlserver_repo(root: Path, native: Any) -> tuple[Path, int]:
    """MLServer's model folder: the Pipeline twice (as shipped, adaptive batching)."""
    import joblib

    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    settings = {
        "http_port": port,
        "grpc_port": _free_port(),
        "metrics_port": _free_port(),
        "parallel_workers": 0,
        "debug": False,
    }
    (root / "settings.json").write_text(json.dumps(settings))
    for name in MLSERVER_MODELS.values():
        folder = root / name
        folder.mkdir()
        joblib.dump(native, folder / "model.joblib")
        model_settings: dict[str, Any] = {
            "name": name,
            "implementation": "mlserver_sklearn.SKLearnModel",
            "parameters": {"uri": "./model.joblib", "version": "1"},
        }
        if name == MLSERVER_MODELS["adaptive batching"]:
            model_settings.update(ADAPTIVE)
        (folder / "model-settings.json").write_text(json.dumps(model_settings))
    return root, port


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextmanager
def mlserver(executable: Path, repo: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    # The Pipeline was fitted on a DataFrame and gets arrays: sklearn's feature-name warning
    # would be raised on every request, a cost no real deployment keeps.
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(executable), "start", str(repo)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not _ready(f"http://127.0.0.1:{port}/v2/health/ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-1500:]
                raise PeerBenchError(f"MLServer did not become ready:\n{tail}")
            time.sleep(0.3)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def v2_body(row: list[float], output: str) -> str:
    return json.dumps(
        {
            "inputs": [{"name": "input", "shape": [1, len(row)], "datatype": "FP32", "data": row}],
            "outputs": [{"name": output}],
        }
    )


def probabilities(url: str, body: str) -> list[float]:
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        data = json.loads(answer.read())
    return [float(v) for v in data["outputs"][0]["data"]]


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise PeerBenchError(f"cannot read wrk's latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> dict[str, float]:
    """wrk --latency's p50/p99 (ms), throughput and errors."""
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", output, re.M))
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    if set(pct) != {"50", "99"} or rps is None:
        raise PeerBenchError(f"cannot read wrk's output:\n{output[-800:]}")
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    failed = int(errors.group(1)) if errors else 0
    if socket_errors:
        failed += sum(int(g) for g in socket_errors.groups())
    return {
        "p50_ms": _ms(pct["50"]),
        "p99_ms": _ms(pct["99"]),
        "throughput_rps": float(rps.group(1)),
        "errors": failed,
    }


def _wrk_seconds(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"  # wrk takes whole seconds


def run_wrk(url: str, body: str, concurrency: int, seconds: float, warmup_s: float) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(body)}\n"
        )
    try:
        threads = str(min(2, concurrency))
        base = [wrk_path(), "-t", threads, "-c", str(concurrency), "-s", script.name, "--latency"]
        if warmup_s > 0:
            subprocess.run([*base, "-d", _wrk_seconds(warmup_s), url], capture_output=True, check=True)
        done = subprocess.run(
            [*base, "-d", _wrk_seconds(seconds), "--timeout", "5s", url],
            capture_output=True,
            text=True,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        raise PeerBenchError(f"wrk failed on {url}: {exc.stderr or exc.stdout!r}") from exc
    finally:
        os.unlink(script.name)
    point = parse_wrk(done.stdout)
    if point["errors"]:
        raise PeerBenchError(f"{url}: {point['errors']:.0f} failed requests at concurrency {concurrency}")
    return point


def export_triton(repo: Path) -> dict[str, str]:
    """The registered model with the builder's default serving options, as a user gets it, and
    with the other queue delays of ``TRITON_DELAYS_US``: config label -> Triton model."""
    from builder.config import ServingOptions
    from builder.export import ExportRequest, export_model

    uri = f"models:/{MODEL}@champion"
    default = ServingOptions().max_queue_delay_us
    export_model(ExportRequest(uri, repo, name=TRITON_MODEL))
    models = {f"builder default, queue delay {default} µs": TRITON_MODEL}
    for delay in TRITON_DELAYS_US:
        if delay != default:
            name = f"{MODEL}_q{delay}"
            export_model(
                ExportRequest(uri, repo, name=name, serving=ServingOptions(max_queue_delay_us=delay))
            )
            models[f"queue delay {delay} µs"] = name
    return models


def compare(points: list[dict[str, Any]], concurrency: list[int]) -> list[dict[str, Any]]:
    """Triton against MLServer's best (the better of its two configs) at each concurrency."""
    rows = []
    for c in concurrency:
        at = [p for p in points if p["concurrency"] == c]
        triton = next(p for p in at if p["server"] == "Triton" and p["config"].startswith("builder default"))
        peers = [p for p in at if p["server"] == "MLServer"]
        best_p50 = min(peers, key=lambda p: p["p50_ms"])
        best_rps = max(peers, key=lambda p: p["throughput_rps"])
        row: dict[str, Any] = {
            "concurrency": c,
            "p50_ratio": triton["p50_ms"] / best_p50["p50_ms"],
            "throughput_ratio": triton["throughput_rps"] / best_rps["throughput_rps"],
            "mlserver_best_p50": best_p50["config"],
            "mlserver_best_throughput": best_rps["config"],
        }
        if c == 1:
            row["goal"] = f"p50 <= {GOALS['p50_c1_ratio_max']}x MLServer's best"
            row["met"] = row["p50_ratio"] <= GOALS["p50_c1_ratio_max"]
        elif c in GOALS["throughput_ratio_min"]["concurrency"]:  # type: ignore[index]
            goal = GOALS["throughput_ratio_min"]["ratio"]  # type: ignore[index]
            row["goal"] = f"throughput >= {goal}x MLServer's best"
            row["met"] = row["throughput_ratio"] >= goal
        rows.append(row)
    return rows


def run(args: argparse.Namespace, runtime: Any, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Train and register, export, serve both, check they agree, then measure each with wrk."""
    from builder.config import ServingOptions
    from builder.runtime.server import TritonServer
    from tests import models

    executable = ensure_venv(say)
    wrk_path()
    say("(f) training and registering the peer model")
    registered = models.sklearn_classifier(MODEL)
    repo = root / "model_repo"
    triton_models = export_triton(repo)
    row = [float(v) for v in registered.X.iloc[0].to_numpy(dtype="float32")]
    expected = registered.native.predict_proba(registered.X.iloc[:1])[0].tolist()
    mls_repo, mls_port = write_mlserver_repo(root / "mlserver", registered.native)
    server = TritonServer(
        repo,
        runtime=runtime,
        model_control_mode="explicit",
        load_models=list(triton_models.values()),
        log_path=root / "tritonserver.log",
    )
    targets = {
        **{
            ("Triton", config): (
                f"http://127.0.0.1:{{triton}}/v2/models/{name}/infer",
                v2_body(row, "probabilities"),
            )
            for config, name in triton_models.items()
        },
        **{
            ("MLServer", config): (
                f"http://127.0.0.1:{mls_port}/v2/models/{name}/infer",
                v2_body(row, "predict_proba"),
            )
            for config, name in MLSERVER_MODELS.items()
        },
    }
    points: list[dict[str, Any]] = []
    say("(f) starting tritonserver and MLServer")
    server.start(timeout=180)
    try:
        with mlserver(executable, mls_repo, mls_port, root / "mlserver.log"):
            http_port = server.http_url.rsplit(":", 1)[1]
            urls = {k: (u.replace("{triton}", http_port), b) for k, (u, b) in targets.items()}
            for (who, config), (url, body) in urls.items():
                got = probabilities(url, body)
                if max(abs(g - e) for g, e in zip(got, expected, strict=True)) > PROB_ATOL:
                    raise PeerBenchError(f"{who} ({config}) answers {got}, sklearn {expected}")
            # Alternate the servers at each concurrency so that noise hits both alike.
            for c in args.concurrency:
                for (who, config), (url, body) in urls.items():
                    say(f"(f) {who} ({config}), concurrency {c}")
                    point = run_wrk(url, body, c, args.duration, args.warmup)
                    points.append({"server": who, "config": config, "concurrency": c, **point})
    finally:
        server.stop()
    options = ServingOptions()
    return {
        "settings": {
            "model": "GradientBoosting (20 trees, depth 3) in a StandardScaler Pipeline, 5 features",
            "triton_config": {
                "max_batch_size": options.max_batch_size,
                "max_queue_delay_us": options.max_queue_delay_us,
                "instances": options.instances,
            },
            "mlserver": "MLServer 1.7.1 + mlserver-sklearn 1.7.1, parallel_workers 0; adaptive: "
            f"max_batch_size {ADAPTIVE['max_batch_size']}, max_batch_time {ADAPTIVE['max_batch_time']} s",
            "load_generator": "wrk 4.x, HTTP/1.1 keep-alive, one connection per client, KServe V2 JSON",
            "duration_s": args.duration,
            "warmup_s": args.warmup,
        },
        "points": points,
        "comparison": compare(points, args.concurrency),
    }
