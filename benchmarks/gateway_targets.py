"""(c) Issue 33 #3's must-show figures, side by side in one run, each judged against its aim.

The request path, measured stage by stage and end to end (benchmarks/gateway_cpu.py runs the
``wrk`` part and the stage harness; this module adds the gRPC side and the verdicts):

- **gateway CPU per request** at 1 and 16 clients, HTTP (``wrk``, one row per request, the
  demo's typed model), on the SQLite and the Redis online store (a gateway each, same Triton,
  same rows): at most 300 µs at 1 client, 100 µs at 16;
- **gRPC and OIP-gRPC** at most 1.5x HTTP's gateway CPU per request at 16 clients. The
  gateway's own gRPC (``gateway.v1.Gateway/Predict``) has no C load generator here, so it and
  HTTP are driven by the same Python client (``gateway_loadgen.py``: grpc.aio and aiohttp, one
  process), beside grpcio's own floor (benchmarks/grpc_floor.py: a grpc.aio server built as the
  gateway's that answers without any work); the Open Inference Protocol over gRPC and over HTTP
  by ``perf_analyzer`` (C++,
  ``make perf-analyzer``; skipped with the reason when it is absent), against HTTP under
  ``wrk``. Windows alternated, the median of ``--targets-rounds``;
- **latency against direct Triton** (KServe V2 JSON under the same ``wrk``): p50 at 1 client at
  most +0.5 ms, p99 at 64 clients at most 1.5x direct Triton's;
- **the feature read alone** at most 30 µs for the demo's two views: the gateway's feature
  client back to back (``gateway_stages.feature_read``) and, inside the sequence of a request's
  stages, the stage table's ``feature read``, on each store.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import grpc_floor
from benchmarks.gateway_loadgen import Target, Traffic, Window, measure
from builder.runtime.ports import free_port
from builder.tune.load import Plan, group_cpu_seconds

REPO_ROOT = Path(__file__).resolve().parent.parent
PERF_ANALYZER_DIR = REPO_ROOT / ".runtime" / "perf-analyzer"
AIMS = {
    "c1_gateway_us": 300.0,
    "c16_gateway_us": 100.0,
    "grpc_vs_http_cpu": 1.5,
    "c1_p50_overhead_ms": 0.5,
    "c64_p99_ratio": 1.5,
    "feature_read_us": 30.0,
}
CONCURRENCY = 16  # where the gRPC/HTTP ratio is judged


def perf_analyzer() -> tuple[str, dict[str, str]] | str:
    """The binary and its environment, or why there is none ($PERF_ANALYZER, PATH, then
    ``.runtime/perf-analyzer/``, where ``make perf-analyzer`` puts it)."""
    binary = os.environ.get("PERF_ANALYZER") or shutil.which("perf_analyzer")
    local = PERF_ANALYZER_DIR / "perf_analyzer"
    if binary is None and local.exists():
        binary = str(local)
    if binary is None:
        return "perf_analyzer not found ($PERF_ANALYZER, PATH, .runtime/perf-analyzer/): make perf-analyzer"
    lib = PERF_ANALYZER_DIR / "lib"
    return binary, {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def _requests(gateway_http: str, route: str) -> float:
    """The gateway's count of ``route``'s requests so far (``gateway_request_seconds_count``)."""
    with urllib.request.urlopen(f"http://{gateway_http}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gateway_request_seconds_count{") and f'route="{route}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _input_data(gateway_http: str, model: str, rows: list[dict[str, Any]], folder: Path) -> Path:
    """perf_analyzer's ``--input-data``: one ``[1]`` tensor per input and row, numbers of the
    input's datatype (``13.0`` for FP32), from the gateway's own model metadata."""
    with urllib.request.urlopen(f"http://{gateway_http}/v2/models/{model}", timeout=10) as resp:
        meta = json.loads(resp.read())
    types = {t["name"]: t["datatype"] for t in meta["inputs"]}
    data = [{k: [float(r[k]) if types[k].startswith("FP") else r[k]] for k in types} for r in rows]
    path = folder / "rows.json"
    path.write_text(json.dumps({"data": data}))
    return path


def _perf_analyzer_run(
    found: tuple[str, dict[str, str]], protocol: str, target: Target, data: Path, seconds: float
) -> dict[str, Any]:
    """One perf_analyzer window at ``CONCURRENCY`` on the gateway's OIP ``protocol``: its
    throughput and p50/p99 (client side), and the gateway's CPU per request it answered."""
    binary, env = found
    url = target.gateway_http if protocol == "http" else target.gateway_grpc
    route = "oip_infer" if protocol == "http" else "oip_grpc_infer"
    argv = [binary, "-m", target.model, "-u", url, "-i", protocol, "--input-data", str(data)]
    argv += ["--concurrency-range", str(CONCURRENCY), "--measurement-interval", str(int(seconds * 1000))]
    argv += ["--max-trials", "3", "--stability-percentage", "999", "--percentile", "99"]
    cpu0, n0 = group_cpu_seconds(target.gateway_pgid), _requests(target.gateway_http, route)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds * 4 + 120)
    cpu1, n1 = group_cpu_seconds(target.gateway_pgid), _requests(target.gateway_http, route)
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", done.stdout)
    if done.returncode != 0 or throughput is None or n1 <= n0:
        tail = (done.stdout + done.stderr).strip()[-300:]
        return {"failure": f"perf_analyzer exited {done.returncode}: {tail}"}
    p99 = re.search(r"p99 latency: (\d+) usec", done.stdout)
    return {
        "throughput_rps": float(throughput.group(1)),
        "p99_ms": int(p99.group(1)) / 1000 if p99 else None,
        "gateway_us": (cpu1 - cpu0) / (n1 - n0) * 1e6,
        "requests": int(n1 - n0),
    }


def _median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


FLOOR = "grpcio alone, no work"  # benchmarks/grpc_floor.py


def _one_answer(target: Target, traffic: Traffic) -> bytes:
    """The gateway's own ``PredictResponse`` to the first row, serialized: what the floor
    server answers to every call."""
    import grpc

    from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value

    row = gateway_pb2.Row(fields={k: to_value(v) for k, v in traffic.rows[0].items()})
    with grpc.insecure_channel(target.gateway_grpc) as channel:
        reply = gateway_pb2_grpc.GatewayStub(channel).Predict(
            gateway_pb2.PredictRequest(model=target.model, rows=[row]), timeout=10
        )
    return bytes(reply.SerializeToString())


def _window(w: Window) -> dict[str, Any]:
    served = len(w.latencies_ns)
    return {
        "throughput_rps": served / w.seconds,
        "gateway_us": w.gateway_cpu_s / served * 1e6 if served else None,
        "client_cores": w.client_cpu_s / w.seconds,
        "errors": w.errors,
    }


def grpc_points(
    pool: ProcessPoolExecutor,
    target: Target,
    traffic: Traffic,
    seconds: float,
    warmup_s: float,
    rounds: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Gateway CPU per request at ``CONCURRENCY`` clients: HTTP, gRPC and grpcio's floor (a
    server that only answers, benchmarks/grpc_floor.py) under the same Python client (alternated
    H G F F G H ...), OIP over gRPC and over HTTP under perf_analyzer."""
    windows: dict[str, list[dict[str, Any]]] = {"http": [], "grpc": [], FLOOR: []}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        port = free_port()
        with grpc_floor.floor_server(port, _one_answer(target, traffic), Path(tmp)) as floor:
            # The floor server under the gateway's gRPC client mode: same method, same bytes.
            targets = {
                "http": target,
                "grpc": target,
                FLOOR: replace(target, gateway_grpc=f"127.0.0.1:{port}", gateway_pgid=floor.pid),
            }
            for r in range(rounds):
                for mode in ("http", "grpc", FLOOR) if r % 2 == 0 else (FLOOR, "grpc", "http"):
                    say(f"gateway (issue 33): {mode}, Python client, {CONCURRENCY} clients, {r + 1}/{rounds}")
                    plan = Plan(CONCURRENCY, warmup_s, seconds)
                    w = pool.submit(measure, mode if mode != FLOOR else "grpc", targets[mode], traffic, plan)
                    windows[mode].append(_window(w.result()))
    out: dict[str, Any] = {
        f"{mode} (Python client)": {
            "gateway_us": _median_of(ws, "gateway_us"),
            "throughput_rps": _median_of(ws, "throughput_rps"),
            "client_cores": _median_of(ws, "client_cores"),
            "errors": sum(w["errors"] for w in ws),
            "rounds": ws,
        }
        for mode, ws in windows.items()
    }
    found = perf_analyzer()
    if isinstance(found, str):
        out["perf_analyzer"] = found
        return out
    with tempfile.TemporaryDirectory(prefix="bench-pa-") as tmp:
        data = _input_data(target.gateway_http, target.model, traffic.rows, Path(tmp))
        runs: dict[str, list[dict[str, Any]]] = {"grpc": [], "http": []}
        for r in range(rounds):
            for protocol in ("grpc", "http") if r % 2 == 0 else ("http", "grpc"):
                say(f"gateway (issue 33): OIP {protocol}, perf_analyzer, {CONCURRENCY} clients")
                runs[protocol].append(_perf_analyzer_run(found, protocol, target, data, seconds))
    for protocol, rs in runs.items():
        failures = [r["failure"] for r in rs if "failure" in r]
        out[f"OIP {protocol} (perf_analyzer)"] = {
            "gateway_us": _median_of(rs, "gateway_us"),
            "throughput_rps": _median_of(rs, "throughput_rps"),
            "p99_ms": _median_of(rs, "p99_ms"),
            "failures": failures,
            "rounds": rs,
        }
    out["perf_analyzer"] = found[0]
    return out


def verdicts(cpu: dict[str, Any], grpc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each of issue 33 #3's aims, per store where it is one: what was measured, and whether
    it is met (None measured: not measured, and not met)."""
    at = {(p["path"], p["concurrency"]): p for p in cpu["points"]}
    out: list[dict[str, Any]] = []

    def aim(what: str, value: float | None, limit: float) -> None:
        out.append(
            {"aim": what, "measured": value, "limit": limit, "met": value is not None and value <= limit}
        )

    for path, store in cpu.get("stores", {"gateway": "sqlite"}).items():
        for c, key in ((1, "c1_gateway_us"), (16, "c16_gateway_us")):
            point = at.get((path, c))
            aim(
                f"{c} client{'s' if c > 1 else ''}, {store}: gateway CPU µs/request (wrk)",
                point.get("gateway_us") if point else None,
                AIMS[key],
            )
    http = at.get(("gateway", CONCURRENCY), {}).get("gateway_us")
    if grpc is not None:
        same = grpc.get("http (Python client)", {}).get("gateway_us")
        g = grpc.get("grpc (Python client)", {}).get("gateway_us")
        aim(
            f"{CONCURRENCY} clients: gRPC / HTTP gateway CPU (same Python client)",
            g / same if g and same else None,
            AIMS["grpc_vs_http_cpu"],
        )
        oip = grpc.get("OIP grpc (perf_analyzer)", {}).get("gateway_us")
        aim(
            f"{CONCURRENCY} clients: OIP-gRPC (perf_analyzer) / HTTP (wrk) gateway CPU",
            oip / http if oip and http else None,
            AIMS["grpc_vs_http_cpu"],
        )
    t1, g1 = at.get(("triton", 1)), at.get(("gateway", 1))
    if t1 and g1 and t1.get("p50_ms") is not None and g1.get("p50_ms") is not None:
        aim(
            "1 client: gateway p50 − direct Triton p50 (ms, wrk)",
            g1["p50_ms"] - t1["p50_ms"],
            AIMS["c1_p50_overhead_ms"],
        )
    t64, g64 = at.get(("triton", 64)), at.get(("gateway", 64))
    if t64 and g64 and t64.get("p99_ms") and g64.get("p99_ms") is not None:
        aim(
            "64 clients: gateway p99 / direct Triton p99 (wrk)",
            g64["p99_ms"] / t64["p99_ms"],
            AIMS["c64_p99_ratio"],
        )
    for store, read in cpu.get("feature_read", {}).items():
        aim(f"feature read alone, {store}, back to back (µs)", read["median_us"], AIMS["feature_read_us"])
    for name, stages in cpu.get("stages", {}).items():
        if name == "grpc":  # the Triton call over gRPC: the same read as "http"
            continue
        store = cpu.get("stage_stores", {}).get(name, "sqlite")
        aim(
            f"feature read in the stage sequence, {store} (µs)",
            stages.get("feature read"),
            AIMS["feature_read_us"],
        )
    return out
