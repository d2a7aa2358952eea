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
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class WrkPath:
    """One path wrk drives: its URL, the bodies it cycles, the gateway on it (None: direct Triton)."""

    url: str
    bodies: list[str]
    gateway_pgid: int | None = None


def load_points(
    paths: dict[str, WrkPath],
    triton_pgid: int,
    concurrency: list[int],
    seconds: float,
    warmup_s: float,
    say: Callable[[str], None],
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """wrk at each concurrency against each path, ``rounds`` times, the paths' order reversed
    every round (A B C, C B A, ...): per point the median of its rounds (p50, p99, req/s, CPU µs
    per request of the gateway's process and of Triton's tree), each round kept too."""
    points = []
    for c in concurrency:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
        for r in range(rounds):
            for name in list(paths) if (r + c) % 2 else list(paths)[::-1]:
                say(f"gateway (CPU): wrk on {name} at concurrency {c}, round {r + 1}/{rounds}")
                runs[name].append(_wrk_run(paths[name], triton_pgid, c, seconds, warmup_s))
        points += [{"path": name, "concurrency": c, **_median(runs[name])} for name in paths]
    return points


def _wrk_run(path: WrkPath, triton_pgid: int, c: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    pgids = {"triton": triton_pgid, **({"gateway": path.gateway_pgid} if path.gateway_pgid else {})}

    def sample() -> dict[str, float]:
        return {"machine": machine_cpu_seconds(), **{k: group_cpu_seconds(p) for k, p in pgids.items()}}

    p = run_wrk(path.url, path.bodies, c, seconds, warmup_s, sample)
    ok = p["requests"] - p["errors"]
    if "sample_before" in p:
        before, after = p.pop("sample_before"), p.pop("sample_after")
        if ok > 0:
            p.update({f"{k}_us": (after[k] - before[k]) / ok * 1e6 for k in pgids})
            p.update({f"{k}_cores": (after[k] - before[k]) / seconds for k in pgids})
            # everything else busy meanwhile: wrk itself, and any other work on the machine
            servers = sum(after[k] - before[k] for k in pgids)
            p["other_cores"] = max(0.0, after["machine"] - before["machine"] - servers) / seconds
    return p


_MEDIANS = (
    "p50_ms",
    "p99_ms",
    "throughput_rps",
    "gateway_us",
    "triton_us",
    "gateway_cores",
    "triton_cores",
    "other_cores",
)


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One point from its rounds: the median of each figure over the rounds that measured it;
    failures summed; a point with no measured round is a failed one."""
    measured = [r for r in runs if not r.get("failure")]
    if not measured:
        return {**runs[0], "rounds": runs}
    out: dict[str, Any] = {
        k: statistics.median(r[k] for r in measured if r.get(k) is not None)
        for k in _MEDIANS
        if any(r.get(k) is not None for r in measured)
    }
    for k in ("requests", "errors", "non_2xx", "socket_errors"):
        out[k] = sum(r.get(k, 0) for r in runs)
    out["rounds"] = [
        {k: r.get(k) for k in ("throughput_rps", "p50_ms", "p99_ms", "gateway_us", "triton_us", "failure")}
        for r in runs
    ]
    return out


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


@dataclass(frozen=True)
class OtherGateway:
    """A second gateway on the same Triton and rows, on the other online store."""

    store: str  # "sqlite" or "redis"
    http: str  # host:port
    pgid: int
    env: dict[str, str]  # its GATEWAY_* store settings (the stage harness opens the same)


@dataclass(frozen=True)
class Stack:
    """What the CPU part needs of part (c)'s stack beside its load target: Triton's HTTP address,
    the feature repository, the first gateway's online store and settings, a second gateway."""

    triton_http: str  # host:port
    feature_repo: Path
    store: str = "sqlite"  # the online store of the load target's gateway
    store_env: dict[str, str] = field(default_factory=dict)  # its GATEWAY_* store settings
    other: OtherGateway | None = None  # on the other store, measured beside it


def run(
    pool: ProcessPoolExecutor,
    target: Target,
    traffic: Traffic,
    args: Any,
    say: Callable[[str], None],
    stack: Stack,
) -> dict[str, Any]:
    """Section (c)'s CPU part against the stack ``target`` names (Triton's gRPC and the
    gateway's ports, both process groups) and ``stack`` (Triton's HTTP, the stores; the other
    store's gateway measured beside the first, path ``gateway, <store>``)."""
    triton_http, feature_repo, store, store_env, other = (
        stack.triton_http,
        stack.feature_repo,
        stack.store,
        stack.store_env,
        stack.other,
    )
    triton_grpc, gateway_http, model = target.triton_url, target.gateway_http, target.model
    pgids = {"gateway": target.gateway_pgid, "triton": target.triton_pgid}
    rows, x, outputs = traffic.rows, traffic.x, target.outputs
    say(f"gateway (CPU): both servers idle for {args.idle_seconds:g} s")
    idle = idle_cores(pgids, args.idle_seconds)
    bodies = [json.dumps(r) for r in rows]
    paths = {
        "triton": WrkPath(f"http://{triton_http}/v2/models/{model}/infer", v2_bodies(x, outputs)),
        "gateway": WrkPath(f"http://{gateway_http}/v1/models/{model}/predict", bodies, target.gateway_pgid),
    }
    stores = {"gateway": store}
    if other is not None:
        name = f"gateway, {other.store}"
        paths[name] = WrkPath(f"http://{other.http}/v1/models/{model}/predict", bodies, other.pgid)
        stores[name] = other.store
    rounds = max(1, getattr(args, "cpu_rounds", 1))
    points = load_points(
        paths, target.triton_pgid, args.concurrency, args.cpu_seconds, args.warmup, say, rounds
    )
    rss = {k: rss_mib(p) for k, p in pgids.items()}
    say("gateway (CPU): the gateway's stages, in-process, Triton over HTTP and over gRPC")
    envs = {store: store_env or {}, **({other.store: other.env} if other else {})}
    stages = {
        protocol: pool.submit(
            gateway_stages.measure, url, feature_repo, model, rows, env=envs[store]
        ).result()
        for protocol, url in (("http", f"http://{triton_http}"), ("grpc", f"grpc://{triton_grpc}"))
    }
    if other is not None:
        stages[f"http, {other.store}"] = pool.submit(
            gateway_stages.measure, f"http://{triton_http}", feature_repo, model, rows, env=other.env
        ).result()
    say("gateway (CPU): the feature read alone, back to back, on each store")
    feature_read = {
        s: pool.submit(
            gateway_stages.feature_read, f"http://{triton_http}", feature_repo, model, rows, e
        ).result()
        for s, e in envs.items()
    }
    stage_stores = {"http": store, "grpc": store, **({f"http, {other.store}": other.store} if other else {})}
    one = next((p for p in points if p["path"] == "gateway" and p["concurrency"] == 1), None)
    rest = one["gateway_us"] - sum(stages["http"].values()) if one and "gateway_us" in one else None
    return {
        "idle_seconds": args.idle_seconds,
        "idle_cores": idle,
        "points": points,
        "rounds": rounds,
        "stores": stores,
        "rss_mib": rss,
        "stages": stages,
        "stage_stores": stage_stores,
        "feature_read": feature_read,
        "server_and_loop_us": rest,
        "aims": AIMS,
    }
