"""(c) The gateway against direct Triton, on the same rows; the feature read alone; a profile.

Builds the stack the gateway tests build (tests/gateway/conftest.py), in a temporary folder:
a copy of ``feature_repo/`` with generated data (``feast apply`` + materialize) → the
``fraud-detector`` model (``support.train``: a scikit-learn Pipeline that imputes and scales the
numeric columns and one-hots ``channel`` and ``merchant_category``, then gradient boosting) trained
from its historical features and registered → exported without an ensemble (layout ``columns``:
one ``[1]`` input per column, TYPE_FP32 or TYPE_STRING; docs/serving-contract.md) → the embedded
Triton → ``gateway serve`` as a subprocess (``support.servers``). Then:

1. picks rows whose user and merchant both have fresh online features (others answer 404), each
   with its transaction's request fields (``amount``, ``hour``, ``channel``);
2. times the Feast online read alone, in-process (``get_online_features`` for ``fraud_v1``);
3. reads the served model as the gateway does (``gateway.catalog.spec_from_config`` on Triton's
   config) and assembles the rows' inputs with ``gateway.assemble``: what direct Triton is sent;
4. checks that direct Triton agrees with the sklearn Pipeline, and the gateway's HTTP and gRPC
   scores with direct Triton's, on those rows;
5. at each concurrency drives direct Triton gRPC (the assembled inputs to the model), gateway HTTP
   and gateway gRPC, alternated A B C C B A, in a separate client process (gateway_loadgen.py),
   reading the gateway's ``/metrics`` histograms at the window edges;
6. profiles the gateway with py-spy under a steady HTTP and gRPC load, when py-spy is installed;
7. what drift counting, shadow traffic and the shared evidence store cost, each on vs off
   (drift_bench.py, shadow_bench.py, evidence_bench.py); ``--only evidence`` runs the last alone.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import (
    drift_bench,
    evidence_bench,
    gateway_cpu,
    gateway_profile,
    gateway_targets,
    report,
    shadow_bench,
)
from benchmarks.gateway_loadgen import MODES, Target, Traffic, Window, measure, metric_key
from builder.tune.load import Plan, triton_version

if TYPE_CHECKING:
    from gateway.catalog import ModelSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL = "fraud-detector"  # the gateway's name and the Triton model's: no ensemble in front
AIM = {"concurrency": 16, "p50_ms": 1.0, "p99_ms": 3.0, "throughput_ratio": 0.8}  # issue 12 (issue 3: 0.5x)
VERSIONED = ("feast", "fastapi", "uvicorn", "grpcio", "aiohttp", "py-spy")
PROFILE_RATE_HZ = 100


class GatewayBenchError(Exception):
    """A reason not to report gateway numbers (a wrong answer, a gateway that did not start)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=64, help="distinct entity rows the gateway load cycles")
    parser.add_argument("--feature-seconds", type=float, default=2.0, help="seconds per Feast read timing")
    parser.add_argument(
        "--profile-seconds", type=int, default=5, help="py-spy seconds per transport, 0: none"
    )
    parser.add_argument("--profile-concurrency", type=int, default=16)
    parser.add_argument(
        "--drift-seconds", type=float, default=4.0, help="seconds per side of drift on vs off, 0: none"
    )
    parser.add_argument(
        "--shadow-seconds", type=float, default=4.0, help="seconds per side of shadow on vs off, 0: none"
    )
    parser.add_argument(
        "--evidence-seconds",
        type=float,
        default=2.0,
        help="seconds per wrk window of the evidence store on vs off, at 16 and at 1 client; 0: none",
    )
    parser.add_argument(
        "--evidence-rounds", type=int, default=2, help="on off off on rounds per concurrency (evidence store)"
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=20.0, help="seconds of each server's idle CPU reading"
    )
    parser.add_argument(
        "--cpu-seconds", type=float, default=3.0, help="measured seconds per wrk round (CPU per request)"
    )
    parser.add_argument(
        "--cpu-rounds",
        type=int,
        default=3,
        help="wrk rounds per point, paths alternated; the median is shown",
    )
    parser.add_argument(
        "--targets-seconds",
        type=float,
        default=3.0,
        help="seconds per window of issue 33's gRPC / OIP-gRPC / HTTP comparison at 16 clients; 0: none",
    )
    parser.add_argument("--targets-rounds", type=int, default=2, help="windows per path of that comparison")
    parser.add_argument(
        "--no-other-store",
        dest="other_store",
        action="store_false",
        help="measure the gateway on --online-store only (by default a second gateway on the other "
        "store, SQLite or a redis-server started here, is measured beside it)",
    )
    parser.add_argument(
        "--online-store",
        choices=("sqlite", "redis"),
        default="sqlite",
        help="the gateway's online store: SQLite (the default profile) or a redis-server started here",
    )


def build_stack(root: Path, say: Callable[[str], None]) -> tuple[Any, Any, Path]:
    """Feature store (copied repo, generated data) → trained + registered model → exported repo."""
    import mlflow

    from builder.export import ExportRequest, export_model
    from support.train import prepare_feature_store, train_and_register

    say("gateway: generating feature data, feast apply, materialize (SQLite online store)")
    repo = root / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    store = prepare_feature_store(repo)
    say(f"gateway: training {MODEL} from historical features, registering, exporting it (no ensemble)")
    experiment = mlflow.get_experiment_by_name("bench")  # run.py's throwaway registry
    assert experiment is not None
    trained = train_and_register(store, MODEL, experiment.experiment_id, n_estimators=20)
    model_repo = root / "model_repo"
    # No ensemble: the Pipeline takes typed columns (strings included), one input each.
    export_model(ExportRequest(f"models:/{MODEL}@champion", model_repo))
    # the shadow comparison's challenger: the same graph under its own name (shadow_bench.py)
    export_model(ExportRequest(f"models:/{MODEL}@champion", model_repo, name=shadow_bench.CHALLENGER))
    return store, trained, model_repo


def pick_rows(store: Any, columns: list[str], n: int) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """``n`` transactions whose user and merchant both have every online feature, as gateway rows
    (entity keys + request fields) and their online features (name -> one value per row, as the
    store returned them)."""
    from feast_access.training import load_transactions
    from feature_repo import SERVICE
    from support.train import ENTITY_KEYS, REQUEST_FIELDS, STRING_REQUEST_FIELDS

    tx = load_transactions(store).drop_duplicates(ENTITY_KEYS).sample(frac=1.0, random_state=0)
    tx = tx.head(8 * n)
    keys = [{k: int(r[k]) for k in ENTITY_KEYS} for r in tx.to_dict("records")]
    online = store.get_online_features(
        features=store.get_feature_service(SERVICE), entity_rows=keys
    ).to_dict()
    features = [c for c in columns if c not in REQUEST_FIELDS]
    kinds = {"amount": float, "hour": int, **dict.fromkeys(STRING_REQUEST_FIELDS, str)}
    rows: list[dict[str, Any]] = []
    values: dict[str, list[Any]] = {f: [] for f in features}
    for i, r in enumerate(tx.to_dict("records")):
        if len(rows) == n:
            break
        if all(online[f][i] is not None for f in features):
            rows.append({**keys[i], **{f: kinds[f](r[f]) for f in REQUEST_FIELDS}})
            for f in features:
                values[f].append(online[f][i])
    if len(rows) < min(n, 8):
        raise GatewayBenchError(f"only {len(rows)} of {len(keys)} sampled entities have online features")
    return rows, values


def model_spec(triton_url: str, feature_repo: Path, online_store: str) -> ModelSpec:
    """The served model as the gateway reads it: Triton's config (the parameters ``builder export``
    wrote) and the feature service's join-key types, through the gateway's own code."""
    import tritonclient.grpc as grpcclient

    from gateway.catalog import feature_service_of, spec_from_config
    from gateway.clients.features import OnlineFeatures

    client = grpcclient.InferenceServerClient(triton_url)
    try:
        config = client.get_model_config(MODEL, as_json=True, client_timeout=10)["config"]
        meta = client.get_model_metadata(MODEL, as_json=True, client_timeout=10)
    finally:
        client.close()
    version = str(max(meta.get("versions") or ["1"], key=int))
    features = OnlineFeatures(feature_repo, online_store, timeout_s=10.0)
    key_types = features.entity_key_types(feature_service_of(MODEL, config))
    spec = spec_from_config(MODEL, MODEL, version, config, key_types)
    if spec.kind != "binary" or spec.roles.probabilities is None:
        raise GatewayBenchError(f"{MODEL} is a {spec.kind} model; the benchmark times a binary classifier")
    return spec


def direct_inputs(
    spec: ModelSpec, rows: list[dict[str, Any]], online: dict[str, list[Any]]
) -> dict[str, np.ndarray]:
    """Every row's Triton inputs by name, ``[N, ...]``, assembled as the gateway assembles them
    (``gateway.assemble``; strings are object arrays, sent as BYTES)."""
    from gateway.assemble import assemble_input

    request_values = [{f: r[f] for f in spec.request_fields} for r in rows]
    return assemble_input(spec, request_values, online, len(rows))


def time_feature_read(store: Any, rows: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    """The Feast in-process online read for one row, back to back on this thread: the call alone,
    and with ``to_dict(include_event_timestamps=True)`` as gateway/clients/features.py does it."""
    from feature_repo import SERVICE

    service = store.get_feature_service(SERVICE)
    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in rows]

    def read(key: dict[str, int]) -> Any:
        return store.get_online_features(features=service, entity_rows=[key])

    def read_dict(key: dict[str, int]) -> Any:
        return read(key).to_dict(include_event_timestamps=True)

    results = []
    for what, call in (
        ("Feast get_online_features (fraud_v1, 1 row), in-process", read),
        ("... + to_dict(include_event_timestamps=True), as the gateway reads", read_dict),
    ):
        for key in keys[:8]:  # warm-up
            call(key)
        latencies, end, i = [], time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            call(keys[i % len(keys)])
            latencies.append(time.perf_counter_ns() - t0)
            i += 1
        results.append({"what": what, **report.latency_summary(np.asarray(latencies), seconds)})
    return results


@contextmanager
def online_store(repo: Path, kind: str, root: Path, say: Callable[[str], None]) -> Iterator[dict[str, str]]:
    """The gateway's online-store settings; for ``redis``, a redis-server started here and the
    features materialized into it (the SQLite store is always filled, by build_stack)."""
    if kind == "sqlite":
        yield {}
        return
    from datetime import UTC, datetime

    from feast_access.store import REDIS_ENV, apply, materialize
    from feature_repo.definitions import OBJECTS
    from support import servers

    try:
        with servers.redis_server(root) as redis:
            os.environ[REDIS_ENV] = redis.address
            say(f"gateway: redis-server on {redis.address}; feast apply + materialize into it")
            apply(repo, OBJECTS, profile="redis")
            materialize(repo, end=datetime.now(UTC), profile="redis")
            yield {"GATEWAY_ONLINE_STORE": "redis", "GATEWAY_REDIS_URL": redis.address}
    except servers.ServerStartError as exc:
        raise GatewayBenchError(str(exc)[:2000]) from None


@contextmanager
def gateway(
    workdir: Path, triton_url: str, feature_repo: Path, store_env: dict[str, str], **extra: str
) -> Iterator[Any]:
    """``gateway serve`` as the tests start it, on free ports; stopped (SIGINT, then SIGKILL) on exit.
    ``triton_url`` is the gateway's (``http://host:port``, its default protocol)."""
    from support import servers

    env = {
        "GATEWAY_TRITON_URL": triton_url,
        "GATEWAY_FEATURE_REPO": str(feature_repo),
        "GATEWAY_MODELS": f'["{MODEL}"]',
        "GATEWAY_LOG_LEVEL": "warning",
        "PYTHONPATH": str(REPO_ROOT),  # feature_repo is imported from the checkout, whatever the cwd
        **store_env,
        **extra,
    }
    # Importing Feast here set these (feast/metrics.py); inherited, they would switch the gateway's
    # prometheus_client to its slower multiprocess (mmap) values, which a user's gateway does not use.
    for var in ("PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR"):
        os.environ.pop(var, None)
    try:
        with servers.gateway_process(workdir, env) as gw:
            yield gw
    except servers.ServerStartError as exc:
        raise GatewayBenchError(f"the gateway did not start: {str(exc)[:2000]}") from None


def check_answers(
    target: Target,
    rows: list[dict[str, Any]],
    online: dict[str, list[Any]],
    x: dict[str, np.ndarray],
    trained: Any,
) -> None:
    """Refuse to time paths that disagree: direct Triton must match the sklearn Pipeline on the
    same rows (so the shared assembly is right), gateway HTTP and gRPC must match direct Triton."""
    import grpc
    import requests
    import tritonclient.grpc as grpcclient

    from gateway.clients.triton_grpc import (
        infer_inputs,  # tritonclient's InferInput, shared by grpc and grpc.aio
    )
    from gateway.proto import gateway_pb2_grpc, to_value
    from gateway.proto.gateway_pb2 import PredictRequest, Row

    client = grpcclient.InferenceServerClient(target.triton_url)
    try:
        outputs = [grpcclient.InferRequestedOutput(o) for o in target.outputs]
        result = client.infer(target.triton_model, infer_inputs(x), outputs=outputs, client_timeout=10)
        direct = result.as_numpy(target.score_output)[:, 1].astype(np.float64)
    finally:
        client.close()
    frame = trained.input_frame([{**r, **{f: v[i] for f, v in online.items()}} for i, r in enumerate(rows)])
    native = trained.model.predict_proba(frame)[:, 1]
    error = float(np.abs(direct - native).max())
    if not error <= 1e-4:  # float32 ONNX vs float64 sklearn; also catches NaN
        raise GatewayBenchError(
            f"direct Triton disagrees with the sklearn Pipeline: max abs error {error:.2g}"
        )
    resp = requests.post(
        f"http://{target.gateway_http}/v1/models/{MODEL}/predict", json={"rows": rows}, timeout=10
    )
    if resp.status_code != 200:
        raise GatewayBenchError(f"gateway HTTP answered {resp.status_code}: {resp.text[:300]}")
    http = np.array([p["score"] for p in resp.json()["predictions"]])
    request = PredictRequest(
        model=MODEL, rows=[Row(fields={k: to_value(v) for k, v in r.items()}) for r in rows]
    )
    with grpc.insecure_channel(target.gateway_grpc) as channel:
        reply = gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=10)
    grpc_scores = np.array([p.score for p in reply.predictions])
    for name, got in (("HTTP", http), ("gRPC", grpc_scores)):
        error = float(np.abs(got - direct).max())
        if not error <= 1e-6:  # also catches NaN
            raise GatewayBenchError(f"gateway {name} disagrees with direct Triton: max abs error {error:.2g}")


def _mean_ms(metrics: dict[str, float], name: str, **labels: str) -> float | None:
    count = metrics.get(metric_key(f"{name}_count", **labels), 0.0)
    return metrics[metric_key(f"{name}_sum", **labels)] / count * 1e3 if count else None


def point(windows: list[Window]) -> dict[str, Any]:
    """One (path, concurrency) point from its windows, with the gateway's own means per request."""
    first, seconds = windows[0], sum(w.seconds for w in windows)
    latencies = np.concatenate([w.latencies_ns for w in windows])
    if len(latencies) == 0:
        raise GatewayBenchError(f"{first.mode} at concurrency {first.concurrency}: no request succeeded")
    metrics: dict[str, float] = {}
    for w in windows:
        for key, value in w.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + value
    machine = sum(w.machine_cpu_s - w.client_cpu_s - w.gateway_cpu_s - w.triton_cpu_s for w in windows)
    out: dict[str, Any] = {
        "mode": first.mode,
        "concurrency": first.concurrency,
        "seconds": seconds,
        **report.latency_summary(latencies, seconds),
        "errors": sum(w.errors for w in windows),
        "client_cores": sum(w.client_cpu_s for w in windows) / seconds,
        "gateway_cores": sum(w.gateway_cpu_s for w in windows) / seconds,
        "triton_cores": sum(w.triton_cpu_s for w in windows) / seconds,
        "other_cores": max(0.0, machine) / seconds,
    }
    served = len(latencies)
    out["gateway_us"] = (
        sum(w.gateway_cpu_s for w in windows) / served * 1e6 if first.mode != "triton" else None
    )
    out["triton_us"] = sum(w.triton_cpu_s for w in windows) / served * 1e6
    route = {"http": ("predict", "200"), "grpc": ("grpc_predict", "OK")}.get(first.mode)
    if route is not None:
        out["gateway_request_ms"] = _mean_ms(
            metrics, "gateway_request_seconds", route=route[0], model=MODEL, status=route[1]
        )
        out["feature_fetch_ms"] = _mean_ms(metrics, "gateway_feature_fetch_seconds", model=MODEL)
        out["triton_call_ms"] = _mean_ms(metrics, "gateway_triton_seconds", model=MODEL)
    return out


def grpc_vs_http(points: list[dict[str, Any]]) -> float | None:
    """The gateway's CPU per request over gRPC / over HTTP, same Python client, at the highest
    concurrency both were measured at (where the client's own share matters least to the gateway)."""
    per = {(p["mode"], p["concurrency"]): p["gateway_us"] for p in points if p.get("gateway_us")}
    both = [c for (m, c) in per if m == "grpc" and ("http", c) in per]
    return per[("grpc", max(both))] / per[("http", max(both))] if both else None


def compare(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gateway − direct at p50/p99 and gateway/direct throughput, per transport and concurrency;
    the verdict against the issue's aim where the concurrency is the aim's."""
    direct = {p["concurrency"]: p for p in points if p["mode"] == "triton"}
    rows = []
    for p in points:
        if p["mode"] == "triton":
            continue
        d = direct[p["concurrency"]]
        row = {
            "mode": p["mode"],
            "concurrency": p["concurrency"],
            "p50_overhead_ms": p["p50_ms"] - d["p50_ms"],
            "p99_overhead_ms": p["p99_ms"] - d["p99_ms"],
            "throughput_ratio": p["throughput_per_s"] / d["throughput_per_s"],
        }
        if p["concurrency"] == AIM["concurrency"]:
            missed = [
                what
                for what, ok in (
                    (
                        f"p50 +{row['p50_overhead_ms']:.2f} > {AIM['p50_ms']:g} ms",
                        row["p50_overhead_ms"] <= AIM["p50_ms"],
                    ),
                    (
                        f"p99 +{row['p99_overhead_ms']:.2f} > {AIM['p99_ms']:g} ms",
                        row["p99_overhead_ms"] <= AIM["p99_ms"],
                    ),
                    (
                        f"{row['throughput_ratio']:.2f}× < {AIM['throughput_ratio']:g}× req/s",
                        row["throughput_ratio"] >= AIM["throughput_ratio"],
                    ),
                )
                if not ok
            ]
            row["verdict"] = "meets the aim" if not missed else "misses: " + "; ".join(missed)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Bench:
    """What every timed part of section (c) shares: the client process (spawned once), the
    stack under test, the requests, the command line and the progress line."""

    pool: ProcessPoolExecutor
    target: Target
    traffic: Traffic
    args: argparse.Namespace
    say: Callable[[str], None]


def measure_points(bench: Bench) -> list[dict[str, Any]]:
    pool, target, traffic, args, say = bench.pool, bench.target, bench.traffic, bench.args, bench.say
    window = args.duration / args.rounds
    windows: dict[tuple[str, int], list[Window]] = {}
    for c in args.concurrency:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                say(f"gateway: {mode} at concurrency {c}, window {r + 1}/{args.rounds}")
                job = pool.submit(measure, mode, target, traffic, Plan(c, args.warmup, window))
                windows.setdefault((mode, c), []).append(job.result())
    return [point(windows[(mode, c)]) for c in args.concurrency for mode in MODES]


def profile(bench: Bench, gateway_pid: int, out_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """py-spy on the gateway under a steady load of each transport; ([] , why) when it cannot run."""
    pool, target, args, say = bench.pool, bench.target, bench.args, bench.say
    binary = gateway_profile.py_spy()
    if args.profile_seconds <= 0:
        return [], "profile skipped (--profile-seconds 0)"
    if binary is None:
        return [], "profile skipped: py-spy is not installed (pip install py-spy==0.4.3)"
    profiles = []
    for mode in ("http", "grpc"):
        c, seconds = args.profile_concurrency, args.profile_seconds
        say(f"gateway: profiling the gateway under {mode} load at concurrency {c} for {seconds} s")
        job = pool.submit(measure, mode, target, bench.traffic, Plan(c, 1.0, seconds + 1.0))
        time.sleep(1.5)  # the client is past its warm-up: the window brackets the sampling
        raw = out_dir / f"py-spy-{mode}.txt"
        try:
            gateway_profile.record(binary, gateway_pid, seconds, raw, PROFILE_RATE_HZ)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:  # e.g. ptrace not permitted
            job.result()
            return [], f"profile skipped: py-spy failed ({exc})"
        p = point([job.result()])
        summary = gateway_profile.summarize(
            raw.read_text(), PROFILE_RATE_HZ, seconds, round(p["throughput_per_s"] * seconds)
        )
        load = f"gateway {mode.upper()}, {c} closed-loop clients, one row per request"
        profiles.append(
            {
                "load": load,
                "mode": mode,
                "concurrency": c,
                **summary,
                **{k: p[k] for k in ("throughput_per_s", "p50_ms", "p99_ms")},
                "gateway_cores": p["gateway_cores"],
            }
        )
    return profiles, f"py-spy {metadata.version('py-spy')}, {PROFILE_RATE_HZ} Hz, --gil --nonblocking"


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def notes(points: list[dict[str, Any]], profiles: list[dict[str, Any]], cores: int) -> list[str]:
    """What a reader needs to read section (c) right; the CPU figures are measured."""

    def busy(p: dict[str, Any]) -> float:
        return p["client_cores"] + p["gateway_cores"] + p["triton_cores"] + p["other_cores"]

    top = max((p for p in points if p["mode"] != "triton"), key=lambda p: p["gateway_cores"])
    direct = max((p for p in points if p["mode"] == "triton"), key=busy)
    limit = (
        "the CPUs were saturated, so every process's share came out of the others'."
        if busy(top) >= 0.9 * cores
        else "the limit was the gateway's one Python process, not the machine."
    )
    out = [
        f"Client, gateway and Triton share this machine's {cores} cores (columns 'cores', from /proc over "
        f"each window). The gateway, one Python process, peaked at {top['gateway_cores']:.2f} cores "
        f"({top['mode']} at concurrency {top['concurrency']}) with {busy(top):.1f} of {cores} cores busy in "
        f"all: {limit} Direct Triton at concurrency {direct['concurrency']} had {busy(direct):.1f} cores "
        f"busy, {direct['client_cores']:.2f} of them its client's: where that saturates, the direct rate is "
        "understated and the gateway/direct ratio flattered, not hurt.",
        "Same rows on every path: entities with fresh online features; direct Triton gets the typed inputs "
        "the gateway would assemble (gateway/assemble.py: one [1, 1] input per column, FP32 or BYTES) and "
        "is asked for the same outputs (label, probabilities). Each client decodes the score from the "
        "answer. Closed loop, one row per request, latency client-side (perf_counter_ns).",
        "Gateway request / feature fetch / Triton call are the gateway's own histograms (/metrics), means "
        "per request from _sum/_count deltas over the measured windows; 'rest' = request − fetch − Triton "
        "(validation, input assembly, result building, metrics inside the handler); client mean − gateway "
        "request is time outside the handler: transport, server queueing, client.",
        "The Feast read alone runs in the benchmark's process on one thread before any server starts.",
    ]
    measured = {(p["mode"], p["concurrency"]): p["throughput_per_s"] for p in points}
    for p in profiles:
        key = (p["mode"], p["concurrency"])
        if key in measured:
            out.append(
                f"Under the profiler gateway {p['mode']} at {p['concurrency']} clients ran "
                f"{p['throughput_per_s'] / measured[key]:.0%} of its unprofiled rate."
            )
    return out


def drift_cost(
    bench: Bench, spec: ModelSpec, root: Path, store_env: dict[str, str], gateway_triton: str
) -> dict[str, Any] | None:
    """Drift counting's cost (benchmarks/drift_bench.py): the observer alone per batch, then the
    gateway above (``bench.target``: drift on, every row) against a second one with
    ``GATEWAY_DRIFT_SAMPLE=0``."""
    from dataclasses import replace

    pool, on, args, say = bench.pool, bench.target, bench.args, bench.say

    if args.drift_seconds <= 0 or spec.drift_reference is None:
        return None
    # In the client process, a fresh interpreter: this one imported Feast before prometheus_client
    # (training), and feast.metrics switches prometheus_client into its multiprocess mode, whose
    # metric values the drift observer's imports would then create without a folder.
    cost = pool.submit(drift_bench.observer_cost, spec, bench.traffic.x).result()
    workdir = root / "gateway-drift-off"
    workdir.mkdir(exist_ok=True)
    with gateway(workdir, gateway_triton, root / "feature_repo", store_env, GATEWAY_DRIFT_SAMPLE="0") as gw:
        off = replace(on, gateway_http=gw.http, gateway_grpc=gw.grpc, gateway_pgid=gw.proc.pid)
        return {
            "observer": cost,
            **drift_bench.compare(pool, on, off, bench.traffic, args.drift_seconds * 2, args.warmup, say),
        }


def shadow_cost(
    bench: Bench, root: Path, store_env: dict[str, str], gateway_triton: str
) -> dict[str, Any] | None:
    """Shadow traffic's cost (benchmarks/shadow_bench.py): a second gateway mirroring every
    request to the challenger, against the one above (``bench.target``: no shadow)."""
    from dataclasses import replace

    if bench.args.shadow_seconds <= 0:
        return None
    workdir = root / "gateway-shadow"
    workdir.mkdir(exist_ok=True)
    extra = shadow_bench.settings(MODEL)
    with gateway(workdir, gateway_triton, root / "feature_repo", store_env, **extra) as gw:
        on = replace(bench.target, gateway_http=gw.http, gateway_grpc=gw.grpc, gateway_pgid=gw.proc.pid)
        seconds = bench.args.shadow_seconds * 2
        return shadow_bench.compare(
            bench.pool, (on, bench.target), bench.traffic, seconds, bench.args.warmup, bench.say
        )


def evidence_cost(
    bench: Bench, root: Path, store_env: dict[str, str], gateway_triton: str
) -> dict[str, Any] | None:
    """The shared evidence store's cost (benchmarks/evidence_bench.py): a gateway remembering every
    prediction in Redis (a redis-server started here) against one with the store off, both started
    for the comparison, on the same Triton."""
    from dataclasses import replace

    from support import servers

    args = bench.args
    if args.evidence_seconds <= 0:
        return None
    workdir = root / "gateway-evidence"
    workdir.mkdir(exist_ok=True)
    repo = root / "feature_repo"
    aim = evidence_bench.AIM
    plans = [
        Plan(int(c), args.warmup, args.evidence_seconds)
        for c in (aim["cpu_concurrency"], aim["p50_concurrency"])
    ]
    try:
        with servers.redis_server(workdir) as redis:
            extra = evidence_bench.settings(redis.port)
            with (
                gateway(workdir, gateway_triton, repo, store_env, **extra) as on_gw,
                gateway(workdir, gateway_triton, repo, store_env, **evidence_bench.OFF) as off_gw,
            ):
                on, off = (
                    replace(
                        bench.target, gateway_http=gw.http, gateway_grpc=gw.grpc, gateway_pgid=gw.proc.pid
                    )
                    for gw in (on_gw, off_gw)
                )
                rounds = max(1, args.evidence_rounds)
                return evidence_bench.compare((on, off), bench.traffic, plans, redis, bench.say, rounds)
    except servers.ServerStartError as exc:
        raise GatewayBenchError(str(exc)[:2000]) from None


def other_gateway(
    stack: ExitStack, root: Path, gateway_triton: str, store: str, say: Callable[[str], None]
) -> gateway_cpu.OtherGateway:
    """A second gateway on the same Triton, on the online store ``store`` (a redis-server started
    and materialized into here, or the SQLite store build_stack filled), open until ``stack``
    closes; its answers must equal the first's."""
    repo = root / "feature_repo"
    env = stack.enter_context(online_store(repo, store, root, say))
    workdir = root / f"gateway-{store}"
    workdir.mkdir(exist_ok=True)
    gw = stack.enter_context(gateway(workdir, gateway_triton, repo, env))
    return gateway_cpu.OtherGateway(store, gw.http, gw.proc.pid, env)


def same_answers(first: str, second: str, rows: list[dict[str, Any]]) -> None:
    """The two gateways (``host:port``) score ``rows`` alike: a store read wrongly is not timed."""
    import requests

    scores = []
    for address in (first, second):
        resp = requests.post(f"http://{address}/v1/models/{MODEL}/predict", json={"rows": rows}, timeout=10)
        if resp.status_code != 200:
            raise GatewayBenchError(f"gateway {address} answered {resp.status_code}: {resp.text[:300]}")
        scores.append(np.array([p["score"] for p in resp.json()["predictions"]]))
    error = float(np.abs(scores[0] - scores[1]).max())
    if not error <= 1e-6:
        raise GatewayBenchError(f"the gateways on the two online stores disagree: max abs error {error:.2g}")


def cpu_and_targets(
    bench: Bench, root: Path, store_env: dict[str, str], gateway_triton: str, triton_http: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The CPU part (gateway_cpu.py: wrk, stages, the feature read; with a second gateway on
    the other online store beside ``bench``'s) and issue 33's gRPC figures and verdicts."""
    args, target = bench.args, bench.target
    other_store = "redis" if args.online_store == "sqlite" else "sqlite"
    with ExitStack() as stack:
        other = None
        if args.other_store:
            other = other_gateway(stack, root, gateway_triton, other_store, bench.say)
            same_answers(target.gateway_http, other.http, bench.traffic.rows)
        stack_of = gateway_cpu.Stack(triton_http, root / "feature_repo", args.online_store, store_env, other)
        cpu = gateway_cpu.run(bench.pool, target, bench.traffic, args, bench.say, stack_of)
    grpc = None
    if args.targets_seconds > 0:
        grpc = gateway_targets.grpc_points(
            bench.pool,
            target,
            bench.traffic,
            args.targets_seconds,
            args.warmup,
            args.targets_rounds,
            bench.say,
        )
    targets = {
        "aims": gateway_targets.AIMS,
        "grpc": grpc,
        "verdicts": gateway_targets.verdicts(cpu, grpc),
    }
    return cpu, targets


def cpu_verdicts(
    cpu: dict[str, Any], targets: dict[str, Any], loadgen_ratio: float | None
) -> list[dict[str, Any]]:
    """Issue 16's aims on the CPU part; its gRPC/HTTP ratio from issue 33's same-client windows at
    16 clients when they ran, else from the load generator's points."""
    grpc = targets.get("grpc") or {}
    g = grpc.get("grpc (Python client)", {}).get("gateway_us")
    h = grpc.get("http (Python client)", {}).get("gateway_us")
    ratio = g / h if g and h else loadgen_ratio
    return gateway_cpu.verdicts(cpu["idle_cores"], cpu["points"], cpu["rss_mib"], ratio)


def run(args: argparse.Namespace, runtime: Any, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Everything in the module docstring; returns the ``gateway`` part of the results."""
    root.mkdir(parents=True, exist_ok=True)
    _, trained, model_repo = build_stack(root, say)  # the SQLite store: _run opens the one served
    with online_store(root / "feature_repo", args.online_store, root, say) as store_env:
        return _run(args, runtime, root, say, store_env, trained, model_repo)


def _run(
    args: argparse.Namespace,
    runtime: Any,
    root: Path,
    say: Callable[[str], None],
    store_env: dict[str, str],
    trained: Any,
    model_repo: Path,
) -> dict[str, Any]:
    from builder.runtime.server import ServerOptions, TritonServer
    from feast_access.store import open_store

    store = open_store(root / "feature_repo", args.online_store)  # what the gateway reads
    rows, online = pick_rows(store, trained.columns, args.rows)
    say(f"gateway: {len(rows)} rows with online features; timing the Feast read alone")
    feature_read = time_feature_read(store, rows, args.feature_seconds)
    server = TritonServer(
        model_repo,
        ServerOptions.explicit([p.name for p in model_repo.iterdir() if p.is_dir()]),
        runtime=runtime,
        log_path=root / "tritonserver.log",
    )
    say("gateway: starting tritonserver and gateway serve")
    server.start(timeout=180)
    try:
        assert server.pid is not None
        spec = model_spec(server.grpc_url, root / "feature_repo", args.online_store)
        x = direct_inputs(spec, rows, online)
        gateway_triton = f"http://{server.http_url}"
        with gateway(root, gateway_triton, root / "feature_repo", store_env) as gw:
            assert spec.roles.probabilities is not None  # model_spec checked it
            target = Target(
                triton_url=server.grpc_url,
                triton_model=spec.triton_model,
                outputs=spec.outputs,
                score_output=spec.roles.probabilities,
                gateway_http=gw.http,
                gateway_grpc=gw.grpc,
                model=MODEL,
                triton_pgid=server.pid,
                gateway_pgid=gw.proc.pid,
            )
            check_answers(target, rows, online, x, trained)
            # spawn, not fork: the client must not inherit MLflow, Feast or their threads.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                traffic = Traffic(rows, x)
                if getattr(args, "only", None) == "evidence":  # run.py --only evidence: that alone
                    evidence = evidence_cost(
                        Bench(pool, target, traffic, args, say), root, store_env, gateway_triton
                    )
                    return {
                        "triton_version": triton_version(server.grpc_url),
                        "settings": {"model": MODEL, "rows": len(rows), "online_store": args.online_store},
                        "evidence": evidence,
                    }
                bench = Bench(pool, target, traffic, args, say)
                cpu, targets = cpu_and_targets(bench, root, store_env, gateway_triton, server.http_url)
                if getattr(args, "only", None) == "targets":  # run.py --only targets: that alone
                    return {
                        "triton_version": triton_version(server.grpc_url),
                        "settings": {"model": MODEL, "rows": len(rows), "online_store": args.online_store},
                        "cpu": {**cpu, "verdicts": cpu_verdicts(cpu, targets, None)},
                        "targets": targets,
                    }
                points = measure_points(bench)
                profiles, profile_note = profile(bench, gw.proc.pid, root)
                drift = drift_cost(bench, spec, root, store_env, gateway_triton)
                shadow = shadow_cost(bench, root, store_env, gateway_triton)
                evidence = evidence_cost(bench, root, store_env, gateway_triton)
            version = triton_version(server.grpc_url)
    finally:
        server.stop()
    profile_file = None
    if profiles:
        profile_file = args.results_dir / "gateway-profile.txt"
        args.results_dir.mkdir(parents=True, exist_ok=True)
        tmp = profile_file.with_name(profile_file.name + ".tmp")  # *.tmp is git-ignored
        tmp.write_text(f"Gateway request path, {profile_note}\n\n" + gateway_profile.to_text(profiles))
        tmp.replace(profile_file)
    return {
        "triton_version": version,
        "settings": {
            "model": f"{MODEL} (scikit-learn Pipeline: median-impute + scale the numeric columns, one-hot "
            f"{' and '.join(trained.string_columns)} → GradientBoosting, 20 trees, depth 3), exported "
            f"without an ensemble: layout {spec.layout}, {len(x)} Triton inputs "
            f"({sum(a.dtype == object for a in x.values())} BYTES), outputs {', '.join(spec.outputs)}",
            "features": trained.columns,
            "triton_model": spec.triton_model,
            "inputs": {name: "BYTES" if a.dtype == object else str(a.dtype) for name, a in x.items()},
            "outputs": list(spec.outputs),
            "rows": len(rows),
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "rounds": args.rounds,
            "warmup_s": args.warmup,
            "feature_seconds": args.feature_seconds,
            "online_store": args.online_store,
            "load_generator": "benchmarks/gateway_loadgen.py (tritonclient.grpc.aio / aiohttp / grpc.aio, "
            "closed loop, own process)",
            "aim": AIM,
        },
        "versions": {pkg: _version(pkg) for pkg in VERSIONED},
        "feature_read": feature_read,
        "points": points,
        "comparison": compare(points),
        "profiles": profiles,
        "profile_note": profile_note,
        "profile_file": os.path.relpath(profile_file, REPO_ROOT) if profile_file else None,
        "drift": drift,
        "shadow": shadow,
        "evidence": evidence,
        "targets": targets,
        "cpu": {**cpu, "verdicts": cpu_verdicts(cpu, targets, grpc_vs_http(points))},
        "notes": notes(points, profiles, len(os.sched_getaffinity(0))),
    }
