"""(c) What a prediction costs in CPU: per request, per server process tree, under ``wrk``.

On the stack part (c) built, with the same rows:

- **idle**: each server's CPU over ``--idle-seconds`` with no traffic (cores);
- **load**: ``wrk`` (HTTP, closed loop, one connection per client) at each concurrency against
  direct Triton (KServe V2 JSON, one row per request, the assembled inputs) and the gateway
  (one row per request), alternated; each point's CPU µs per successful request of the gateway's
  and of Triton's process trees (Triton's includes its Python-backend stub processes), read
  from /proc around the measured run;
- **memory**: each server tree's resident set after the load;
- **stages**: where the gateway's CPU goes per request (benchmarks/gateway_stages.py), with its
  Triton call over HTTP (the default) and over gRPC (``grpc://``, the client before issue 16),
  and the rest of the gateway's measured CPU at one client (HTTP server, event loop, batcher,
  kernel socket work) beside them.

The aims are issue 16's (``AIMS``); ``verdicts`` says which are met.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gateway_stages
from benchmarks.gateway_loadgen import Target, Traffic
from benchmarks.wrk import run_wrk
from builder.tune.load import group_cpu_seconds, machine_cpu_seconds, processes

AIMS = {
    "idle_cores": 0.01,
    "c1_p50_overhead_ms": 1.0,
    "c1_gateway_us": 400.0,
    "c16_gateway_us": 250.0,
    "c16_throughput_ratio": 0.9,
    "grpc_vs_http_cpu": 1.2,
    "rss_mib": 200.0,
}
_TRITON_TYPES = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "object": "BYTES"}


def v2_bodies(x: Mapping[str, np.ndarray], outputs: tuple[str, ...]) -> list[str]:
    """One KServe V2 JSON body per row of ``x`` (as a user calls Triton over HTTP)."""
    n = len(next(iter(x.values())))
    bodies = []
    for i in range(n):
        inputs = [
            {
                "name": name,
                "shape": [1, *a.shape[1:]],
                "datatype": _TRITON_TYPES[a.dtype.name],
                "data": a[i].tolist(),
            }
            for name, a in x.items()
        ]
        bodies.append(json.dumps({"inputs": inputs, "outputs": [{"name": o} for o in outputs]}))
    return bodies


def rss_mib(pgid: int) -> float:
    """Resident memory of every process in group ``pgid`` (Linux /proc), MiB."""
    total_kib = 0
    for entry, fields in processes():
        if int(fields[2]) != pgid:
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # exited while we looked
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024


def idle_cores(pgids: dict[str, int], seconds: float) -> dict[str, float]:
    before = {k: group_cpu_seconds(p) for k, p in pgids.items()}
    time.sleep(seconds)
    return {k: (group_cpu_seconds(p) - before[k]) / seconds for k, p in pgids.items()}


def load_points(
    urls: dict[str, str],
    bodies: dict[str, list[str]],
    pgids: dict[str, int],
    concurrency: list[int],
    seconds: float,
    warmup_s: float,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """wrk at each concurrency against each path (alternated), CPU µs per request per tree."""

    def sample() -> dict[str, float]:
        return {"machine": machine_cpu_seconds(), **{k: group_cpu_seconds(p) for k, p in pgids.items()}}

    points = []
    for c in concurrency:
        for path in urls if c % 2 else list(urls)[::-1]:
            say(f"gateway (CPU): wrk on {path} at concurrency {c}")
            p = run_wrk(urls[path], bodies[path], c, seconds, warmup_s, sample)
            ok = p["requests"] - p["errors"]
            cpu = {}
            if "sample_before" in p and ok > 0:
                before, after = p.pop("sample_before"), p.pop("sample_after")
                cpu = {f"{k}_us": (after[k] - before[k]) / ok * 1e6 for k in pgids}
                cpu.update({f"{k}_cores": (after[k] - before[k]) / seconds for k in pgids})
                # everything else busy meanwhile: wrk itself, and any other work on the machine
                servers = sum(after[k] - before[k] for k in pgids)
                cpu["other_cores"] = max(0.0, after["machine"] - before["machine"] - servers) / seconds
            points.append({"path": path, "concurrency": c, **p, **cpu})
    return points


def verdicts(
    idle: dict[str, float],
    points: list[dict[str, Any]],
    rss: dict[str, float],
    grpc_vs_http: float | None,
) -> list[dict[str, Any]]:
    """Each aim: what was measured, and whether it is met."""
    at = {(p["path"], p["concurrency"]): p for p in points}
    out = []

    def aim(what: str, value: float | None, limit: float, higher_is_better: bool = False) -> None:
        met = value is not None and (value >= limit if higher_is_better else value <= limit)
        out.append({"aim": what, "measured": value, "limit": limit, "met": met})

    for server, cores in idle.items():
        aim(f"{server} idle (cores)", cores, AIMS["idle_cores"])
    g1, t1 = at.get(("gateway", 1)), at.get(("triton", 1))
    if g1 and t1 and g1["p50_ms"] is not None and t1["p50_ms"] is not None:
        aim(
            "1 client: gateway p50 − Triton p50 (ms)", g1["p50_ms"] - t1["p50_ms"], AIMS["c1_p50_overhead_ms"]
        )
        aim("1 client: gateway CPU µs/request", g1.get("gateway_us"), AIMS["c1_gateway_us"])
    g16, t16 = at.get(("gateway", 16)), at.get(("triton", 16))
    if g16 and t16:
        aim("16 clients: gateway CPU µs/request", g16.get("gateway_us"), AIMS["c16_gateway_us"])
        ratio = g16["throughput_rps"] / t16["throughput_rps"] if t16["throughput_rps"] else None
        aim("16 clients: gateway/Triton req/s", ratio, AIMS["c16_throughput_ratio"], higher_is_better=True)
    aim("gateway gRPC/HTTP CPU per request (same Python client)", grpc_vs_http, AIMS["grpc_vs_http_cpu"])
    aim("gateway resident memory after the load (MiB)", rss["gateway"], AIMS["rss_mib"])
    return out


def run(
    pool: ProcessPoolExecutor,
    target: Target,
    traffic: Traffic,
    triton_http: str,
    feature_repo: Path,
    args: Any,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Section (c)'s CPU part against the stack ``target`` names (Triton's gRPC and the
    gateway's ports, both process groups), Triton's HTTP at ``triton_http``."""
    triton_grpc, gateway_http, model = target.triton_url, target.gateway_http, target.model
    pgids = {"gateway": target.gateway_pgid, "triton": target.triton_pgid}
    rows, x, outputs = traffic.rows, traffic.x, target.outputs
    say(f"gateway (CPU): both servers idle for {args.idle_seconds:g} s")
    idle = idle_cores(pgids, args.idle_seconds)
    urls = {
        "triton": f"http://{triton_http}/v2/models/{model}/infer",
        "gateway": f"http://{gateway_http}/v1/models/{model}/predict",
    }
    bodies = {"triton": v2_bodies(x, outputs), "gateway": [json.dumps(r) for r in rows]}
    points = load_points(urls, bodies, pgids, args.concurrency, args.cpu_seconds, args.warmup, say)
    rss = {k: rss_mib(p) for k, p in pgids.items()}
    say("gateway (CPU): the gateway's stages, in-process, Triton over HTTP and over gRPC")
    stages = {
        protocol: pool.submit(gateway_stages.measure, url, feature_repo, model, rows).result()
        for protocol, url in (("http", f"http://{triton_http}"), ("grpc", f"grpc://{triton_grpc}"))
    }
    one = next((p for p in points if p["path"] == "gateway" and p["concurrency"] == 1), None)
    rest = one["gateway_us"] - sum(stages["http"].values()) if one and "gateway_us" in one else None
    return {
        "idle_seconds": args.idle_seconds,
        "idle_cores": idle,
        "points": points,
        "rss_mib": rss,
        "stages": stages,
        "server_and_loop_us": rest,
        "aims": AIMS,
    }
