"""What the shared evidence store costs the predict path (its aims: at most +30 µs of gateway CPU per
request at 16 clients and +0.2 ms p50 at 1 client, store on vs off).

Inside the gateway section (gateway_bench.py), on the model it serves: two gateways on the same
Triton, one writing every served prediction's compact answer to the production store, Redis
(``GATEWAY_STATE_URL=redis://...``: a redis-server this benchmark starts on a free loopback port,
``support.servers.redis_server``), the other remembering nothing (``GATEWAY_STATE_URL=off``). Both
are driven by ``wrk`` (benchmarks/wrk.py: C, closed loop, one keep-alive connection per client,
the bodies cycling through the benchmark's rows) at 16 clients and at 1: each gateway warmed up
once, then windows alternated on off off on (``--evidence-rounds`` times), so drift in the
machine's load hits both alike. Around each measured run
the CPU of the gateway's process tree, Triton's (server + Python-backend stubs) and redis-server's
is read from /proc: µs per successful request, as the CPU part does it (gateway_cpu.py).

``wrk``, not the Python client of the drift and shadow comparisons (gateway_loadgen.on_off): the aim
is stated under ``wrk``, and a Python client at 16 clients takes much of a core the servers share.

Afterwards the run proves the evidence was written: the "on" gateway's
``gateway_evidence_lost_total`` must be absent or 0, and Redis must hold at least one
``gateway:p:{id}`` key per request the "on" gateway answered in the measured runs (its warm-ups
add more).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from benchmarks.gateway_loadgen import Target, Traffic
from benchmarks.wrk import run_wrk
from builder.tune.load import Plan, clock_ticks, group_cpu_seconds, machine_cpu_seconds

AIM = {"cpu_concurrency": 16, "cpu_us_added_per_request": 30.0, "p50_concurrency": 1, "p50_added_ms": 0.2}
OFF = {"GATEWAY_STATE_URL": "off"}
KEY_PATTERN = "gateway:p:*"  # a remembered prediction (gateway/evidence/redis_store.py)
NOISY_CORES = 0.3  # wrk takes ~0.1-0.2; more than this, someone else shared the cores
FLUSH_WAIT_S = 2.0  # after the load, before counting: the writer's last round trip lands


def settings(redis_port: int) -> dict[str, str]:
    """The remembering gateway's extra environment: the production store, Redis."""
    return {"GATEWAY_STATE_URL": f"redis://127.0.0.1:{redis_port}/0"}


def pid_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (Linux /proc), in seconds; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[-1].split()
    return clock_ticks(int(fields[11]) + int(fields[12]))


Probe = Callable[[], dict[str, float]]


def redis_probe(pid: int, client: Any) -> Probe:
    """redis-server's CPU seconds (``redis``) and the pipelined batches it has been sent
    (``batches``: redis-py sends one SCRIPT EXISTS before each pipeline that runs a script)."""

    def probe() -> dict[str, float]:
        stats = cast(dict[str, dict[str, Any]], client.info("commandstats"))
        batches = stats.get("cmdstat_script|exists", {}).get("calls", 0)
        return {"redis": pid_cpu_seconds(pid), "batches": float(batches)}

    return probe


def _sampler(target: Target, probe: Probe) -> Probe:
    def sample() -> dict[str, float]:
        return {
            "machine": machine_cpu_seconds(),
            "gateway": group_cpu_seconds(target.gateway_pgid),
            "triton": group_cpu_seconds(target.triton_pgid),
            **probe(),
        }

    return sample


def _window(p: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One wrk run: its figures, each tree's CPU seconds and the batches Redis was sent over the
    measured run."""
    if "failure" in p:
        return p
    before, after = p.pop("sample_before"), p.pop("sample_after")
    deltas = {k if k == "batches" else f"{k}_cpu_s": after[k] - before[k] for k in after}
    return {**p, **deltas, "seconds": seconds}


def wrk_on_off(
    targets: tuple[Target, Target],
    bodies: list[str],
    plan: Plan,
    probe: Probe,
    say: Callable[[str], None],
    rounds: int = 1,
) -> dict[str, list[dict[str, Any]]]:
    """``gateway_loadgen.on_off`` under ``wrk``: the two gateways (``targets``: on, off) at
    ``plan``'s concurrency, alternated on off off on (``rounds`` times), each window
    ``plan.seconds`` long; each gateway is warmed up once, ``plan.warmup_s``, before the first."""
    seconds = max(1, round(plan.seconds))  # wrk runs whole seconds
    urls = [f"http://{t.gateway_http}/v1/models/{t.model}/predict" for t in targets]
    if plan.warmup_s > 0:
        say(f"warm-up of both gateways at concurrency {plan.concurrency}, {plan.warmup_s:g} s each")
        for url in urls:
            run_wrk(url, bodies, plan.concurrency, plan.warmup_s, 0)
    windows: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for r in range(rounds):
        for name in ("on", "off", "off", "on"):
            i = 0 if name == "on" else 1
            say(f"{name}, wrk at concurrency {plan.concurrency}, {seconds} s (round {r + 1}/{rounds})")
            p = run_wrk(urls[i], bodies, plan.concurrency, seconds, 0, _sampler(targets[i], probe))
            windows[name].append(_window(p, seconds))
    return windows


def pair_deltas(windows: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """On − off of each neighbouring pair of windows (on off | off on | ...): how much the deltas
    move from one pair to the next, i.e. how far to trust their totals."""
    out: dict[str, list[float]] = {"gateway_cpu_us_per_request": [], "p50_ms": []}
    for on, off in zip(windows["on"], windows["off"], strict=True):  # pair k: the k-th of each
        if "failure" in on or "failure" in off:
            continue
        ok_on, ok_off = on["requests"] - on["errors"], off["requests"] - off["errors"]
        if ok_on and ok_off:
            cpu = on["gateway_cpu_s"] / ok_on - off["gateway_cpu_s"] / ok_off
            out["gateway_cpu_us_per_request"].append(cpu * 1e6)
        out["p50_ms"].append(on["p50_ms"] - off["p50_ms"])
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def side(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """One side at one concurrency from its windows: rate and CPU from the windows' totals, p50
    and p99 the mean of the windows' own (wrk reports percentiles, not latencies)."""
    good = [w for w in windows if "failure" not in w]
    ok = sum(w["requests"] - w["errors"] for w in good)
    seconds = sum(w["seconds"] for w in good)

    def per_request(tree: str) -> float | None:
        return sum(w[f"{tree}_cpu_s"] for w in good) / ok * 1e6 if ok else None

    def cores(tree: str) -> float | None:
        return sum(w[f"{tree}_cpu_s"] for w in good) / seconds if seconds else None

    servers = sum(w["gateway_cpu_s"] + w["triton_cpu_s"] + w["redis_cpu_s"] for w in good)
    batches = sum(w["batches"] for w in good)
    return {
        "requests_ok": ok,
        "throughput_per_s": ok / seconds if seconds else 0.0,
        "p50_ms": _mean([w["p50_ms"] for w in good]),
        "p99_ms": _mean([w["p99_ms"] for w in good]),
        "errors": sum(w["errors"] for w in good),
        "failures": [w["failure"] for w in windows if "failure" in w],
        "gateway_cpu_us_per_request": per_request("gateway"),
        "triton_cpu_us_per_request": per_request("triton"),
        "redis_cpu_us_per_request": per_request("redis"),
        "gateway_cores": cores("gateway"),
        "batches": batches,
        "rows_per_batch": ok / batches if batches else None,
        # everyone else: wrk itself and any other work on the machine
        "other_cores": max(0.0, sum(w["machine_cpu_s"] for w in good) - servers) / seconds
        if seconds
        else None,
        "windows": windows,
    }


def _delta(on: float | None, off: float | None) -> float | None:
    return on - off if on is not None and off is not None else None


def _point(concurrency: int, windows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One concurrency: each side, and on − off."""
    on, off = side(windows["on"]), side(windows["off"])
    return {
        "concurrency": concurrency,
        "on": on,
        "off": off,
        "cpu_us_added_per_request": _delta(
            on["gateway_cpu_us_per_request"], off["gateway_cpu_us_per_request"]
        ),
        "p50_added_ms": _delta(on["p50_ms"], off["p50_ms"]),
        "p99_added_ms": _delta(on["p99_ms"], off["p99_ms"]),
        "throughput_ratio": on["throughput_per_s"] / off["throughput_per_s"]
        if off["throughput_per_s"]
        else None,
        "pair_deltas": pair_deltas(windows),
    }


def verdict(points: dict[int, dict[str, Any]]) -> str:
    """The aims, each met or missed (or not measured)."""
    checks = (
        ("cpu_us_added_per_request", AIM["cpu_concurrency"], "µs of gateway CPU per request"),
        ("p50_added_ms", AIM["p50_concurrency"], "ms p50"),
    )
    missed = []
    for key, c, what in checks:
        value = points.get(int(c), {}).get(key)
        if value is None:
            missed.append(f"{what} at {c} not measured")
        elif value > AIM[key]:
            missed.append(f"+{value:.3g} > +{AIM[key]:g} {what} at {c} client{'s' if c != 1 else ''}")
    return "meets the aim" if not missed else "misses: " + "; ".join(missed)


def compare(
    targets: tuple[Target, Target],
    traffic: Traffic,
    plans: Sequence[Plan],
    redis: Any,
    say: Callable[[str], None],
    rounds: int = 1,
) -> dict[str, Any]:
    """The gateway with the shared store on Redis (``targets[0]``, its store ``redis``, a
    ``support.servers.RedisServer``) vs off (``targets[1]``) at each plan's concurrency, the
    deltas, the verdict, and what the "on" gateway wrote."""
    import redis as redis_py

    bodies = [json.dumps(r) for r in traffic.rows]
    points: dict[int, dict[str, Any]] = {}
    client = redis_py.Redis(host="127.0.0.1", port=redis.port, socket_timeout=10)
    probe = redis_probe(redis.proc.pid, client)

    def log(line: str) -> None:
        say(f"gateway: evidence store {line}")

    try:
        for plan in plans:
            windows = wrk_on_off(targets, bodies, plan, probe, log, rounds)
            points[plan.concurrency] = _point(plan.concurrency, windows)
    finally:
        client.close()
    answered = sum(p["on"]["requests_ok"] for p in points.values())
    written = evidence_written(targets[0], redis.port, answered)
    judged = verdict(points) if written["ok"] else f"{verdict(points)}; {written['why']}"
    others = [p[n]["other_cores"] for p in points.values() for n in ("on", "off")]
    busiest = max((o for o in others if o is not None), default=0.0)
    if busiest > NOISY_CORES:
        judged += f" (others used up to {busiest:.2f} cores meanwhile: noisy, rerun on a quiet machine)"
    return {
        "store": f"Redis (production's store): redis-server on 127.0.0.1:{redis.port}, GATEWAY_STATE_URL="
        f"{settings(redis.port)['GATEWAY_STATE_URL']}; off: GATEWAY_STATE_URL=off",
        "load": "wrk (benchmarks/wrk.py), HTTP, one keep-alive connection per client, windows on off off on"
        + (f" × {rounds}" if rounds > 1 else ""),
        "window_s": max(1, round(plans[0].seconds)) if plans else None,
        "warmup_s": plans[0].warmup_s if plans else None,
        "rounds": rounds,
        "points": [points[p.concurrency] for p in plans],
        "written": written,
        "aim": AIM,
        "other_cores_max": busiest,
        "verdict": judged,
    }


def evidence_written(on: Target, redis_port: int, answered: int) -> dict[str, Any]:
    """Whether the "on" gateway kept every prediction: nothing counted lost, a Redis key per
    request answered in the measured runs."""
    import redis

    time.sleep(FLUSH_WAIT_S)
    with urllib.request.urlopen(f"http://{on.gateway_http}/metrics", timeout=10) as response:
        text = response.read().decode()
    lost = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_evidence_lost_total")
    )
    client = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=10)
    try:
        keys = int(cast(int, client.dbsize()))  # redis-py's sync client: an int
        predictions = sum(1 for _ in client.scan_iter(match=KEY_PATTERN, count=10_000))
        stats = cast(dict[str, dict[str, Any]], client.info("commandstats"))
    finally:
        client.close()
    why = []
    if lost:
        why.append(f"gateway_evidence_lost_total {lost:g}")
    if predictions < answered:
        why.append(f"{predictions} {KEY_PATTERN} keys < {answered} requests answered")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    # redis-py sends SCRIPT EXISTS before each pipeline that runs a script: one per batch written
    batches = calls.get("script|exists", 0)
    return {
        "evidence_lost_total": lost,
        "redis_dbsize": keys,
        "prediction_keys": predictions,
        "redis_calls": calls,
        "batches": batches,
        "rows_per_batch": predictions / batches if batches else None,
        "requests_answered_measured": answered,
        "ok": not why,
        "why": "evidence not all written: " + "; ".join(why) if why else "",
    }
