"""The feature-read stage alone (issue 33: at most 30 µs for the demo's two views): microseconds
per one-row read of the demo's feature service (``fraud_v1``: ``user_stats`` and
``merchant_stats``, six features), on SQLite and on a real Redis, three ways:

- **SDK**: ``FeatureStore.get_online_features(service, [row]).to_dict()``;
- **plan**: the gateway's read today (``gateway/clients/online_read.py``: the service resolved
  once, then Feast's ``online_read`` per view and its ValueProtos decoded);
- **direct**: ``feast_access.online`` (the compiled spec; Feast's layout read without Feast).

Each read's CPU (the thread's clock: waiting on Redis costs nothing, as in the gateway's stage
table) and wall time, the median of ``--repeats`` runs of ``--reads`` reads over distinct
demo entities. Redis is read both blocking (``read``) and on an event loop (``read_async``,
the gateway's path for Redis, on uvloop as the gateway runs it; one client, and 16 at once).
Also the ValueProto decoding choice (docs/feature-reads.md): the hand decoder against
protobuf's parser (the Feast module's ``Value``, the same upb runtime a generated module of
ours would use), per value.

A script, not a timed test: ``.venv/bin/python benchmarks/feature_read.py [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

GOAL_US = 30.0


def _measure(
    read: Callable[[dict[str, Any]], Any], rows: list[dict[str, Any]], repeats: int
) -> dict[str, float]:
    """CPU and wall µs per read: the median over ``repeats`` passes over ``rows``."""
    for row in rows[:50]:  # warm: connections, caches, statements
        read(row)
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        for row in rows:
            read(row)
        cpu.append((time.thread_time_ns() - c0) / len(rows) / 1000)
        wall.append((time.perf_counter_ns() - w0) / len(rows) / 1000)
    return {"cpu_us": round(statistics.median(cpu), 2), "wall_us": round(statistics.median(wall), 2)}


def _measure_async(
    read: Callable[[dict[str, Any]], Awaitable[Any]],
    rows: list[dict[str, Any]],
    repeats: int,
    clients: int = 1,
) -> dict[str, float]:
    """As ``_measure``, on uvloop (the gateway's loop), its turns included: ``clients`` readers
    at once, each one read after another (16: reads pipeline on the connection, as under load)."""
    import uvloop

    async def client(part: list[dict[str, Any]]) -> None:
        for row in part:
            await read(row)

    async def run() -> dict[str, float]:
        await client(rows[:50])
        cpu, wall = [], []
        for _ in range(repeats):
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            await asyncio.gather(*(client(rows[k::clients]) for k in range(clients)))
            cpu.append((time.thread_time_ns() - c0) / len(rows) / 1000)
            wall.append((time.perf_counter_ns() - w0) / len(rows) / 1000)
        return {"cpu_us": round(statistics.median(cpu), 2), "wall_us": round(statistics.median(wall), 2)}

    return uvloop.run(run())


def _plan_for() -> Any:
    try:  # the gateway is being restructured: its read plan's module moved under clients/
        from gateway.clients.online_read import plan_for
    except ImportError:
        from gateway.online_read import plan_for  # type: ignore[no-redef]
    return plan_for


def bench_store(store: Any, profile: str, rows: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    from feast_access.online.compile import compile_service
    from feast_access.online.reader import open_reader
    from feature_repo import SERVICE

    service = store.get_feature_service(SERVICE)
    plan = _plan_for()(store, service)
    spec = compile_service(store, SERVICE)
    direct = open_reader(spec)
    # the three must agree before any of them is timed
    sdk_answer = store.get_online_features(features=service, entity_rows=rows[:1]).to_dict()
    for name in spec.outputs:
        assert direct.read(rows[:1]).values[name] == sdk_answer[name] == plan.read(rows[:1]).values[name], (
            name
        )
    out: dict[str, Any] = {
        "sdk": _measure(
            lambda r: store.get_online_features(features=service, entity_rows=[r]).to_dict(), rows, repeats
        ),
        "plan": _measure(lambda r: plan.read([r]), rows, repeats),
        "direct": _measure(lambda r: direct.read([r]), rows, repeats),
    }
    if profile == "redis":
        reader: Any = direct

        async def direct_async(r: dict[str, Any]) -> Any:
            return await reader.read_async([r])

        for clients in (1, 16):
            label = f"(async, {clients} client{'s' if clients > 1 else ''})"
            out[f"plan {label}"] = _measure_async(lambda r: plan.read_async([r]), rows, repeats, clients)
            out[f"direct {label}"] = _measure_async(direct_async, rows, repeats, clients)
            asyncio.run(reader.aclose())  # its connection belonged to that run's loop
            plan.online_store._client_async = None  # Feast's async client, likewise
    direct.close()
    return out


def bench_decoding(n: int = 200_000) -> dict[str, dict[str, float]]:
    """µs per value: the hand decoder for the feature's type, against protobuf's parser + oneof."""
    from feast.protos.feast.types.Value_pb2 import Value

    from feast_access.online.values import decoder_for

    def protobuf(raw: bytes) -> Any:
        value = Value.FromString(raw)
        kind = value.WhichOneof("val")
        return None if kind is None else getattr(value, kind)

    out = {}
    for label, value, value_type in [
        ("double 25.28", Value(double_val=25.28), "DOUBLE"),
        ("int64 641", Value(int64_val=641), "INT64"),
        ("string 'digital_goods'", Value(string_val="digital_goods"), "STRING"),
    ]:
        raw = value.SerializeToString()
        hand = decoder_for(value_type)
        timings = {}
        for name, fn in (("hand", hand), ("protobuf", protobuf)):
            start = time.perf_counter_ns()
            for _ in range(n):
                fn(raw)
            timings[name] = round((time.perf_counter_ns() - start) / n / 1000, 3)
        out[label] = timings
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=2000, help="reads per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the median is reported")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # Feast's deprecations, not ours to time
    from feast_access.store import REDIS_ENV, apply, materialize
    from feature_repo import REPO_PATH
    from feature_repo.definitions import OBJECTS
    from support import servers
    from support.train import prepare_feature_store

    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "goal_us": GOAL_US}
    with tempfile.TemporaryDirectory(prefix="feature-read-") as tmp:
        repo = Path(tmp) / "feature_repo"
        shutil.copytree(REPO_PATH, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
        print("demo feature repository: generate, apply, materialize into SQLite ...", file=sys.stderr)
        store = prepare_feature_store(repo)
        rows = [{"user_id": 1 + i % 500, "merchant_id": 1 + (i * 7) % 100} for i in range(args.reads)]
        results["sqlite"] = bench_store(store, "sqlite", rows, args.repeats)
        with servers.redis_server(Path(tmp)) as redis:
            import os

            os.environ[REDIS_ENV] = redis.address  # the Redis profile's ${REDIS_CONNECTION_STRING}
            print(f"redis-server on {redis.address}: apply, materialize ...", file=sys.stderr)
            apply(repo, OBJECTS, profile="redis")
            redis_store = materialize(repo, profile="redis")
            results["redis"] = bench_store(redis_store, "redis", rows, args.repeats)
    results["decoding_us_per_value"] = bench_decoding()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def table(results: dict[str, Any]) -> str:
    lines = [
        f"feature read, demo service (2 views, 6 features), one row; goal <= {GOAL_US:g} µs CPU",
        "",
        "| store | read | CPU µs/read | wall µs/read |",
        "|---|---|---:|---:|",
    ]
    for store in ("sqlite", "redis"):
        for name, m in results[store].items():
            lines.append(f"| {store} | {name} | {m['cpu_us']:.1f} | {m['wall_us']:.1f} |")
    lines += ["", "| value | hand decoder µs | protobuf µs |", "|---|---:|---:|"]
    for label, m in results["decoding_us_per_value"].items():
        lines.append(f"| {label} | {m['hand']:.3f} | {m['protobuf']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
