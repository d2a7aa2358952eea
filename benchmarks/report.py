"""Turn raw measurements into the benchmark's numbers, its markdown table and its files."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.locust_bench import to_markdown as locust_markdown
from benchmarks.shim_bench import to_markdown as shim_markdown
from builder.tune.load import Segment


def latency_summary(latencies_ns: np.ndarray, seconds: float) -> dict[str, float]:
    """Count, rate and latency percentiles (ms) of requests completed in ``seconds``."""
    ms = latencies_ns / 1e6
    return {
        "requests": len(ms),
        "throughput_per_s": len(ms) / seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
    }


def triton_point(segments: Sequence[Segment], batching: bool) -> dict[str, Any]:
    """One (model, concurrency) point from its measured segments (the alternating rounds)."""
    first = segments[0]
    seconds = sum(s.seconds for s in segments)
    executions = sum(s.execution_count for s in segments)
    inferences = sum(s.inference_count for s in segments)
    successes = sum(s.success_count for s in segments) or 1
    other_cpu = sum(s.machine_cpu_s - s.client_cpu_s - s.server_cpu_s for s in segments)
    return {
        "model": first.model,
        "dynamic_batching": batching,
        "concurrency": first.concurrency,
        "seconds": seconds,
        **latency_summary(np.concatenate([s.latencies_ns for s in segments]), seconds),
        # Triton's own counters: rows per model execution is the batch the batcher formed.
        "mean_batch_size": inferences / executions if executions else 0.0,
        "server_queue_ms": sum(s.queue_ns for s in segments) / successes / 1e6,
        "server_compute_ms": sum(s.compute_ns for s in segments) / successes / 1e6,
        "client_cores": sum(s.client_cpu_s for s in segments) / seconds,
        "server_cores": sum(s.server_cpu_s for s in segments) / seconds,
        # Everyone else's load in the windows: well above zero means noisier, lower numbers.
        "other_cores": max(0.0, other_cpu) / seconds,
    }


def machine_info(triton_version: str) -> dict[str, Any]:
    """What the numbers were measured on; they mean little without it."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "os": platform.platform(),
        "python": platform.python_version(),
        "triton": triton_version,
    }


def _ms(x: float) -> str:
    return f"{x:.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def to_markdown(report: dict[str, Any]) -> str:
    """The results as markdown: what docs/benchmarks.md includes and what ``make bench`` prints."""
    m = report["machine"]
    lines = [
        f"# Benchmark results ({report['timestamp']})",
        "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores, Python {m['python']}"
        + (
            f", Triton {m['triton']} (embedded, CPU; onnxruntime via the Python-backend shim)."
            if m["triton"] != "not run"
            else "."
        )
        + (f" Model: {report['settings']['model']}." if "settings" in report else ""),
        "",
    ]
    if "triton" in report:
        lines += _triton_markdown(report)
    if "gateway" in report:
        if "points" in report["gateway"]:  # not on --only evidence
            lines += gateway_markdown(report["gateway"])
        if report["gateway"].get("cpu"):
            lines += cpu_markdown(report["gateway"]["cpu"])
        if report["gateway"].get("targets"):
            lines += targets_markdown(report["gateway"]["targets"])
        if report["gateway"].get("drift"):
            lines += drift_markdown(report["gateway"]["drift"])
        if report["gateway"].get("shadow"):
            lines += shadow_markdown(report["gateway"]["shadow"])
        if report["gateway"].get("evidence"):
            lines += evidence_markdown(report["gateway"]["evidence"])
    if "gpu_routes" in report:
        lines += gpu_markdown(report["gpu_routes"])
    if "explain" in report:
        from benchmarks.explain_bench import markdown as explain_markdown

        lines += explain_markdown(report["explain"])
    if "ensemble" in report:
        lines += ensemble_markdown(report["ensemble"])
    if "peer" in report:
        lines += peer_markdown(report["peer"])
    if "shim" in report:
        lines += ["", "## (g) The embedded runtime's onnxruntime shim against its floor (issue 16)", ""]
        lines += [shim_markdown(report["shim"])]
    if "locust" in report:
        lines += ["", "## (h) The load generator's ceiling: one Locust process vs a master and 2 workers", ""]
        lines += [locust_markdown(report["locust"])]
    return "\n".join(lines)


def _triton_markdown(report: dict[str, Any]) -> list[str]:
    s = report["settings"]
    lines = ["## (a) One row per call: native model in-process vs Triton at concurrency 1 (gRPC)", ""]
    rows = [
        [r["mode"], _ms(r["p50_ms"]), _ms(r["p99_ms"]), f"{r['throughput_per_s']:,.0f}"]
        for r in report["per_row"]
    ]
    lines += _table(["path", "p50 ms", "p99 ms", "rows/s"], rows)
    lines += [
        "",
        f"## (b) Dynamic batching on (queue delay {s['max_queue_delay_us']} µs) vs off, "
        f"max_batch_size {s['max_batch_size']}, 1 instance",
        "",
    ]
    ratio = {c["concurrency"]: c["throughput_ratio"] for c in report["batching_ratio"]}
    rows = []
    for p in report["triton"]:
        rows.append(
            [
                p["model"],
                "on" if p["dynamic_batching"] else "off",
                str(p["concurrency"]),
                f"{p['throughput_per_s']:,.0f}",
                _ms(p["p50_ms"]),
                _ms(p["p99_ms"]),
                f"{p['mean_batch_size']:.1f}",
                f"{p['server_queue_ms']:.2f}",
                f"{p['client_cores']:.1f} / {p['server_cores']:.1f} / {p['other_cores']:.1f}",
                f"{ratio[p['concurrency']]:.2f}×" if p["dynamic_batching"] else "",
            ]
        )
    lines += _table(
        [
            "model",
            "batching",
            "concurrency",
            "infer/s",
            "p50 ms",
            "p99 ms",
            "mean batch",
            "queue ms",
            "cores: client / server / other",
            "on/off infer/s",
        ],
        rows,
    )
    lines += ["", *(f"- {n}" for n in report["notes"]), ""]
    return lines


_PATHS = {"triton": "direct Triton gRPC (assembled inputs)", "http": "gateway HTTP", "grpc": "gateway gRPC"}


def _opt_ms(x: float | None) -> str:
    return "" if x is None else _ms(x)


def gateway_markdown(g: dict[str, Any]) -> list[str]:
    """(c): the gateway against direct Triton, the feature read alone, where the time goes."""
    s, aim = g["settings"], g["settings"]["aim"]
    lines = [
        "## (c) Gateway vs direct Triton, same rows, one row per request",
        "",
        f"Model: {s['model']}; {s['rows']} entity rows with fresh online features "
        f"({'Redis' if s.get('online_store') == 'redis' else 'SQLite'} online store). "
        f"Each point: {s['rounds']} windows of {s['duration_s'] / s['rounds']:g} s after {s['warmup_s']:g} s "
        "warm-up, the three paths alternated A B C C B A. Δ = gateway − direct at the same concurrency.",
        "",
    ]
    cmp = {(c["mode"], c["concurrency"]): c for c in g["comparison"]}
    rows = []
    for p in g["points"]:
        c = cmp.get((p["mode"], p["concurrency"]), {})
        rows.append(
            [
                _PATHS[p["mode"]],
                str(p["concurrency"]),
                f"{p['throughput_per_s']:,.0f}",
                _ms(p["p50_ms"]),
                _ms(p["p99_ms"]),
                f"{c['p50_overhead_ms']:+.2f}" if c else "",
                f"{c['p99_overhead_ms']:+.2f}" if c else "",
                f"{c['throughput_ratio']:.2f}×" if c else "",
                str(p["errors"]),
                f"{p['client_cores']:.1f} / {p['gateway_cores']:.1f} / {p['triton_cores']:.1f} / "
                f"{p['other_cores']:.1f}",
                _us_pair(p.get("gateway_us"), p.get("triton_us")),
                c.get("verdict", ""),
            ]
        )
    lines += _table(
        [
            "path",
            "concurrency",
            "req/s",
            "p50 ms",
            "p99 ms",
            "Δp50 ms",
            "Δp99 ms",
            "gateway/direct req/s",
            "errors",
            "cores: client / gateway / Triton / other",
            "CPU µs/req: gateway / Triton",
            f"aim at {aim['concurrency']}",
        ],
        rows,
    )
    lines += [
        "",
        f"Aim (issue 12): at concurrency {aim['concurrency']} the gateway adds at most {aim['p50_ms']:g} ms "
        f"at p50 and {aim['p99_ms']:g} ms at p99, and keeps at least {aim['throughput_ratio']:g}× direct "
        "Triton's throughput.",
        "",
        "### Feature fetch alone, and the gateway's own histograms",
        "",
    ]
    lines += _table(
        ["Feast online read, 1 row, one thread, no server running", "p50 ms", "p99 ms", "mean ms", "reads/s"],
        [
            [
                r["what"],
                _ms(r["p50_ms"]),
                _ms(r["p99_ms"]),
                _ms(r["mean_ms"]),
                f"{r['throughput_per_s']:,.0f}",
            ]
            for r in g["feature_read"]
        ],
    )
    lines.append("")
    rows = []
    for p in g["points"]:
        if p["mode"] == "triton" or p.get("gateway_request_ms") is None:
            continue
        parts = (p["gateway_request_ms"], p["feature_fetch_ms"], p["triton_call_ms"])
        rest = parts[0] - parts[1] - parts[2] if None not in parts else None
        rows.append(
            [_PATHS[p["mode"]], str(p["concurrency"]), _ms(p["mean_ms"]), *map(_opt_ms, parts), _opt_ms(rest)]
        )
    lines += _table(
        [
            "path",
            "concurrency",
            "client mean ms",
            "gateway request ms",
            "feature fetch ms",
            "Triton call ms",
            "rest ms",
        ],
        rows,
    )
    lines += ["", "### Where the gateway's time goes (py-spy)", ""]
    if not g["profiles"]:
        lines += [f"- {g['profile_note']}", ""]
    for p in g["profiles"]:
        lines += [
            f"{p['load']}: {p['throughput_per_s']:,.0f} req/s, p50 {_ms(p['p50_ms'])} ms under the profiler; "
            f"the gateway used {p['gateway_cores']:.2f} cores, held the GIL {p['gil_busy']:.0%} of the time "
            f"({g['profile_note']}; full list in `{g['profile_file']}`).",
            "",
        ]
        lines += _table(
            ["stage (first match on the stack)", "share of GIL samples", "GIL µs / request"],
            [[r["name"], f"{r['share']:.0%}", f"{r['gil_us_per_request']:.0f}"] for r in p["stages"]],
        )
        top = ", ".join(f"`{f['name']}` {f['share']:.0%}" for f in p["top_own"][:6])
        lines += ["", f"Most own time: {top}.", ""]
    lines += [*(f"- {n}" for n in g["notes"]), ""]
    return lines


def _us_pair(gateway: float | None, triton: float | None) -> str:
    return f"{'—' if gateway is None else f'{gateway:,.0f}'} / {'—' if triton is None else f'{triton:,.0f}'}"


def cpu_markdown(c: dict[str, Any]) -> list[str]:
    """(c, CPU): CPU per request per server tree under wrk, idle CPU, memory, the stages, the aims."""
    lines = [
        "",
        "### CPU per request (wrk, HTTP), idle CPU, memory (issue 16)",
        "",
        "wrk drives direct Triton (KServe V2 JSON, one row) and the gateway (one row; a second gateway "
        "on the other online store beside it, `gateway, <store>`) in turn at each concurrency, "
        f"{c.get('rounds', 1)} round(s) with the order reversed each round, the median shown; CPU is each "
        "server's whole process tree from /proc around the measured run (Triton's includes its "
        "Python-backend stubs), per successful request.",
        "",
    ]
    rows = []
    for p in c["points"]:
        failed = p.get("failure")
        rows.append(
            [
                p["path"],
                str(p["concurrency"]),
                f"{p['throughput_rps']:,.0f}",
                "—" if failed else _ms(p["p50_ms"]),
                "—" if failed else _ms(p["p99_ms"]),
                str(p["errors"]),
                _us_pair(p.get("gateway_us"), p.get("triton_us")),
                " / ".join(f"{p.get(k, 0):.2f}" for k in ("gateway_cores", "triton_cores", "other_cores")),
            ]
        )
    lines += _table(
        [
            "path",
            "clients",
            "req/s",
            "p50 ms",
            "p99 ms",
            "failed",
            "CPU µs/req: gateway / Triton",
            "cores: gateway / Triton / other (wrk included)",
        ],
        rows,
    )
    idle = ", ".join(f"{k} {v:.4f}" for k, v in c["idle_cores"].items())
    rss = ", ".join(f"{k} {v:.0f} MiB" for k, v in c["rss_mib"].items())
    lines += ["", f"Idle over {c['idle_seconds']:g} s (cores): {idle}. Resident after the load: {rss}.", ""]
    stages = c["stages"]
    stores = c.get("stage_stores", {})
    names = list(stages["http"])
    columns = [k for k in ("grpc", "http") if k in stages] + [k for k in stages if k not in ("grpc", "http")]

    def title(key: str) -> str:
        over = "Triton over gRPC" if key == "grpc" else "Triton over HTTP"
        return f"{over}, {stores[key]}" if key in stores else over

    srows = [[n, *(f"{stages[k][n]:,.0f}" for k in columns)] for n in names]
    srows.append(["sum", *(f"{sum(stages[k].values()):,.0f}" for k in columns)])
    if c.get("server_and_loop_us") is not None:
        srows.append(
            [
                "HTTP server, event loop, batcher, sockets, the evidence writer (1-client wrk − sum)",
                *("" if k != "http" else f"{c['server_and_loop_us']:,.0f}" for k in columns),
            ]
        )
    reads = c.get("feature_read", {})
    lines += [
        "Where the gateway's CPU goes, µs per one-row request (benchmarks/gateway_stages.py: one thread, "
        "requests one after another, each stage on the thread's CPU clock; the store named after the "
        "Triton client's protocol):",
        "",
        *_table(["stage", *(title(k) for k in columns)], srows),
        "",
    ]
    if reads:
        lines += [
            "The feature read alone, back to back (the gateway's feature client, one row, the demo's two "
            "views, one thread; median and least of the passes): "
            + "; ".join(
                f"{store} {r['median_us']:.1f} µs (least {r['min_us']:.1f})" for store, r in reads.items()
            )
            + ".",
            "",
        ]
    lines += _verdicts("issue 16", c.get("verdicts", []))
    return lines


def _verdicts(issue: str, verdicts: list[dict[str, Any]]) -> list[str]:
    """Each aim's measured figure, its limit and whether it is met, as a table."""
    return _table(
        [f"aim ({issue})", "measured", "limit", "met"],
        [
            [
                v["aim"],
                "—" if v["measured"] is None else f"{v['measured']:,.3g}",
                f"{v['limit']:g}",
                "yes" if v["met"] else "**no**",
            ]
            for v in verdicts
        ],
    )


def targets_markdown(t: dict[str, Any]) -> list[str]:
    """(c, issue 33 #3): gRPC and OIP-gRPC against HTTP, and every must-show aim's verdict."""
    lines = ["", "### The request path's must-show figures (issue 33 #3)", ""]
    grpc = t.get("grpc")
    if grpc:
        rows = []
        for name, g in grpc.items():
            if not isinstance(g, dict):
                continue
            rows.append(
                [
                    name,
                    _opt(g.get("throughput_rps"), ",.0f"),
                    _opt(g.get("gateway_us"), ",.0f"),
                    _opt(g.get("client_cores"), ".2f"),
                    "; ".join(g.get("failures", [])) or str(g.get("errors", 0)),
                ]
            )
        lines += [
            "Gateway CPU per request at 16 clients by transport (benchmarks/gateway_targets.py): the "
            "gateway's HTTP and gRPC under the same Python client, the Open Inference Protocol under "
            "perf_analyzer (median of the windows); HTTP under wrk is in the CPU table above.",
            "",
            *_table(["path", "req/s", "gateway CPU µs/req", "client cores", "failed"], rows),
            "",
        ]
        floor = grpc.get("grpcio alone, no work (Python client)", {}).get("gateway_us")
        same = grpc.get("http (Python client)", {}).get("gateway_us")
        if floor and same:
            lines += [
                f"grpcio alone (benchmarks/grpc_floor.py: the gateway's grpc.aio server that answers "
                f"without any work) costs {floor:,.0f} µs of CPU per call: {floor / same:.2f}x the "
                "gateway's whole HTTP request under the same client. The gRPC / HTTP aim cannot be "
                "met while the gRPC server is grpcio; what the gateway adds over it is the gRPC "
                "row minus this one.",
                "",
            ]
        if not any(k.startswith("OIP") for k in grpc):
            lines += [f"OIP not measured: {grpc.get('perf_analyzer')}.", ""]
    lines += _verdicts("issue 33 #3", t.get("verdicts", []))
    return lines


def drift_markdown(d: dict[str, Any]) -> list[str]:
    """(c, drift): what drift counting costs, the observer alone and the gateway on vs off."""
    lines = ["### Drift counting on vs off (issue 11)", ""]
    if d.get("observer"):
        lines += _table(
            ["observer alone: rows per batch", "µs per batch", "µs per row"],
            [[str(o["rows"]), f"{o['us_per_batch']:.0f}", f"{o['us_per_row']:.1f}"] for o in d["observer"]],
        )
        lines.append("")
    if d.get("on") and d.get("off"):
        aim = d["aim"]
        lines += _table(
            ["gateway HTTP, concurrency " + str(d["concurrency"]), "req/s", "p50 ms", "p99 ms", "errors"],
            [
                [
                    f"drift {name}",
                    f"{p['throughput_per_s']:,.0f}",
                    _ms(p["p50_ms"]),
                    _ms(p["p99_ms"]),
                    str(p["errors"]),
                ]
                for name, p in (("on (sample 1.0)", d["on"]), ("off (sample 0)", d["off"]))
            ],
        )
        lines += [
            "",
            f"On / off: {d['throughput_ratio']:.3f}× req/s, p50 {d['p50_added_ms']:+.3f} ms "
            f"(aim: >= {aim['throughput_ratio']}×, +<= {aim['p50_added_ms']} ms): {d['verdict']}.",
        ]
    return [*lines, ""]


def shadow_markdown(d: dict[str, Any]) -> list[str]:
    """(c, shadow): the champion's rate and latency with and without a 100 % shadow."""
    lines = ["### Shadow traffic, 100 % share vs none (issue 20)", ""]
    rows = [
        [
            name,
            f"{p['throughput_per_s']:,.0f}",
            f"{p['p50_ms']:.2f}",
            f"{p['p99_ms']:.2f}",
            f"{p['gateway_cpu_us_per_request']:.0f}",
            f"{p['triton_cpu_us_per_request']:.0f}",
            str(p["errors"]),
        ]
        for name, p in (("shadow on (share 1.0)", d["on"]), ("shadow off", d["off"]))
    ]
    header = ["gateway HTTP, concurrency " + str(d["concurrency"]), "req/s", "p50 ms", "p99 ms"]
    lines += _table([*header, "gateway CPU µs/req", "Triton CPU µs/req", "errors"], rows)
    s = d["shadow"]
    lines += [
        "",
        f"On / off: {d['throughput_ratio']:.3f}× req/s, p50 {d['p50_added_ms']:+.3f} ms (aim: >= "
        f"{d['aim']['throughput_ratio']}×): {d['verdict']}. The challenger compared {s['rows']} rows "
        f"(dropped {s['dropped_rows']}, failed {s['error_rows']}, agreement {s['agreement']}).",
    ]
    return [*lines, ""]


def _opt(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def evidence_markdown(d: dict[str, Any]) -> list[str]:
    """(c, evidence): the predict path with the shared evidence store on (Redis) vs off, under wrk."""
    aim = d["aim"]
    lines = [
        "### The shared evidence store, on (Redis) vs off",
        "",
        f"On: {d['store']}. Load: {d['load']}, {d['window_s']} s each, after {d['warmup_s']:g} s of "
        "warm-up of each gateway per concurrency. "
        "CPU: utime + stime of each process tree from /proc around each measured run, per successful "
        "request; p50/p99: the mean of the side's windows' wrk percentiles; other cores: the rest of the "
        "machine's use meanwhile (wrk and anyone else; well above 0.1, the deltas are noisy).",
        "",
    ]

    def spread(values: Sequence[float], fmt: str) -> str:
        return " … ".join(format(v, fmt) for v in (min(values), max(values))) if values else "–"

    rows = []
    for p in d["points"]:
        for name in ("on", "off"):
            s = p[name]
            added = name == "on"
            rows.append(
                [
                    f"store {name}",
                    str(p["concurrency"]),
                    f"{s['throughput_per_s']:,.0f}",
                    _opt(s["p50_ms"], ".2f"),
                    _opt(s["p99_ms"], ".2f"),
                    _opt(s["gateway_cpu_us_per_request"], ".0f"),
                    _opt(s["triton_cpu_us_per_request"], ".0f"),
                    _opt(s["redis_cpu_us_per_request"], ".0f") if added else "",
                    _opt(s.get("rows_per_batch"), ".1f") if added else "",
                    str(s["errors"] + len(s["failures"])),
                    _opt(s["other_cores"], ".2f"),
                    _opt(p["cpu_us_added_per_request"], "+.1f") if added else "",
                    _opt(p["p50_added_ms"], "+.3f") if added else "",
                    _opt(p["throughput_ratio"], ".3f") + "×" if added and p["throughput_ratio"] else "",
                ]
            )
    header = ["gateway HTTP", "concurrency", "req/s", "p50 ms", "p99 ms", "gateway CPU µs/req"]
    header += ["Triton CPU µs/req", "redis CPU µs/req", "rows a batch", "errors", "other cores"]
    header += ["Δ gateway CPU µs/req", "Δp50 ms"]
    lines += _table([*header, "on/off req/s"], rows)
    w = d["written"]
    lines += [""]
    for p in d["points"]:
        pairs = p.get("pair_deltas")
        if not pairs:
            continue
        lines.append(
            f"On − off per neighbouring pair of windows at {p['concurrency']}: gateway CPU "
            f"{spread(pairs.get('gateway_cpu_us_per_request', []), '+.0f')} µs/req, p50 "
            f"{spread(pairs.get('p50_ms', []), '+.2f')} ms ({len(pairs.get('p50_ms', []))} pairs)."
        )
    lines += [
        "",
        f"Aim: at most +{aim['cpu_us_added_per_request']:g} µs of gateway CPU per request at "
        f"{aim['cpu_concurrency']} clients and +{aim['p50_added_ms']:g} ms p50 at {aim['p50_concurrency']} "
        f"client: {d['verdict']}.",
        f"Written: gateway_evidence_lost_total {w['evidence_lost_total']:g}; Redis held "
        f"{w['prediction_keys']:,} gateway:p:* keys (DBSIZE {w['redis_dbsize']:,}) for "
        f"{w['requests_answered_measured']:,} requests the 'on' gateway answered in the measured runs "
        "(warm-ups add more)"
        + (
            f", sent in {w['batches']:,} pipelined batches in all ({w['rows_per_batch']:.1f} rows a batch, "
            "each after a SCRIPT EXISTS round trip of redis-py's; per concurrency: column 'rows a batch')."
            if w.get("rows_per_batch")
            else "."
        ),
    ]
    return [*lines, ""]


def gpu_markdown(d: dict[str, Any]) -> list[str]:
    """Part (d): one row per measured route and batch size, then what was not measured and why."""
    s = d["settings"]
    lines = [
        "## (d) Serving routes of a neural network, called directly (no Triton), per batch size",
        "",
        f"{s['model']}; {s['caller']}; {s['seconds']:g} s per point in {s['rounds']} alternating "
        f"rounds; GPU: {s['gpu'] or 'none'}; onnxruntime {s['onnxruntime']}.",
        "",
    ]
    base = {p["batch_size"]: p for r in d["routes"] if r["route"] == d["baseline"] for p in r["points"]}
    rows = []
    for r in d["routes"]:
        for p in r["points"]:
            b = base.get(p["batch_size"])
            ratio = f"{p['rows_per_s'] / b['rows_per_s']:.2f}×" if b else "–"
            rows.append(
                [
                    r["route"],
                    str(p["batch_size"]),
                    f"{p['p50_ms']:.3f}",
                    f"{p['p99_ms']:.3f}",
                    f"{p['rows_per_s']:,.0f}",
                    ratio,
                ]
            )
    lines += _table(["route", "batch", "p50 ms", "p99 ms", "rows/s", f"rows/s vs {d['baseline']}"], rows)
    missing = [r for r in d["routes"] if r["reason"]]
    if missing:
        lines += ["", "Not measured here:", *(f"- {r['route']}: {r['reason']}" for r in missing)]
    return [*lines, ""]


_ENSEMBLE_PATHS = {"bare": "bare model", "steps": "steps ensemble", "fused": "fused graph"}


def ensemble_markdown(e: dict[str, Any]) -> list[str]:
    """Part (e): the bare model against its steps and fused ensembles, and the goals."""
    s, goals = e["settings"], e["settings"]["goals"]
    lat, thr = goals["p50_ratio_max"], goals["throughput_ratio_min"]
    lines = [
        "## (e) What does an ensemble cost? Bare model vs steps ensemble vs fused graph",
        "",
        f"Model: {s['model']}. Served as: "
        + ", ".join(f"{_ENSEMBLE_PATHS[k]} `{v}`" for k, v in s["paths"].items())
        + f"; {s['serving']}. Each point: {s['rounds']} windows of {s['duration_s'] / s['rounds']:g} s "
        f"after {s['warmup_s']:g} s warm-up, the three paths alternated A B C C B A. Ratios: ensemble / "
        "bare at the same concurrency.",
        "",
    ]
    cmp = {(c["path"], c["concurrency"]): c for c in e["comparison"]}
    rows = []
    for p in e["points"]:
        c = cmp.get((p["path"], p["concurrency"]), {})
        rows.append(
            [
                f"{_ENSEMBLE_PATHS[p['path']]} `{s['paths'][p['path']]}`",
                str(p["concurrency"]),
                f"{p['throughput_per_s']:,.0f}",
                _ms(p["p50_ms"]),
                _ms(p["p99_ms"]),
                f"{p['server_queue_ms']:.2f}",
                f"{p['server_compute_ms']:.2f}",
                f"{p['mean_batch_size']:.1f}",
                f"{c['p50_ratio']:.2f}×" if c else "",
                f"{c['throughput_ratio']:.2f}×" if c else "",
                f"{p['client_cores']:.1f} / {p['server_cores']:.1f} / {p['other_cores']:.1f}",
                c.get("aim", ""),
            ]
        )
    lines += _table(
        [
            "path",
            "concurrency",
            "infer/s",
            "p50 ms",
            "p99 ms",
            "queue ms",
            "compute ms",
            "mean batch",
            "p50 / bare",
            "infer/s / bare",
            "cores: client / server / other",
            "aim",
        ],
        rows,
    )
    lines += [
        "",
        f"Aim (issue 12): at concurrency {lat['concurrency']} p50 at most {lat['steps']:g}× the bare model's "
        f"(steps) and {lat['fused']:g}× (fused); at {' and '.join(map(str, thr['concurrency']))} at least "
        f"{thr['steps']:g}× its throughput.",
        "",
    ]
    step_rows = [
        [
            str(p["concurrency"]),
            step,
            f"{v['queue_ms']:.2f}",
            f"{v['compute_ms']:.2f}",
            f"{v['mean_batch_size']:.1f}",
        ]
        for p in e["points"]
        if p["path"] == "steps"
        for step, v in p["steps"].items()
    ]
    lines += _table(
        ["steps ensemble: concurrency", "step", "queue ms", "compute ms", "mean batch"], step_rows
    )
    errors = ", ".join(f"{k} {v:.1g}" for k, v in e["answers_max_abs_error"].items())
    lines += ["", f"- Checked before timing (max abs error in probabilities): {errors}."]
    lines += [*(f"- {n}" for n in e["notes"]), ""]
    return lines


def _peer_failed(p: dict[str, Any]) -> str:
    """A point's failed requests ("0", "12 of 3,400 (8 non-2xx)"), or why it was not measured."""
    if "failure" in p:
        return f"not measured: {p['failure'][:80]}"
    if not p["errors"]:
        return "0"
    detail = ", ".join(
        f"{n} {what}"
        for what, n in (("non-2xx", p.get("non_2xx", 0)), ("socket", p.get("socket_errors", 0)))
        if n
    )
    return f"{p['errors']:,} of {p.get('requests', 0):,}" + (f" ({detail})" if detail else "")


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}×"


def peer_markdown(f: dict[str, Any]) -> list[str]:
    """Part (f): the builder's default export on Triton against MLServer, same models, same wrk;
    failed requests shown per point, never hidden."""
    s = f["settings"]
    t = s["triton_config"]
    models = s.get("models") or {"numeric": s.get("model", "")}
    lines = [
        "## (f) The peer to beat: MLServer vs Triton on the same scikit-learn models",
        "",
        *(f"- Model {name}: {text}." for name, text in models.items()),
        f"- Triton: the builder's default config (max_batch_size {t['max_batch_size']}, "
        f"max_queue_delay_us {t['max_queue_delay_us']}, {t['instances']} instance).",
        f"- {s['mlserver']}.",
        f"- Load: {s['load_generator']}; {s['duration_s']:g} s per point after {s['warmup_s']:g} s warm-up; "
        "req/s counts successful responses only.",
        "",
    ]
    rows = [
        [
            p.get("model", "numeric"),
            f"{p['server']} ({p['config']})",
            str(p["concurrency"]),
            f"{p['throughput_rps']:,.0f}",
            _opt_ms(p["p50_ms"]),
            _opt_ms(p["p99_ms"]),
            _peer_failed(p),
        ]
        for p in f["points"]
    ]
    lines += _table(["model", "server", "concurrency", "req/s", "p50 ms", "p99 ms", "failed"], rows)
    lines.append("")
    cmp_rows = [
        [
            c.get("model", "numeric"),
            str(c["concurrency"]),
            _ratio(c["p50_ratio"]),
            _ratio(c["throughput_ratio"]),
            f"{c.get('triton_failed', 0):,} / {c.get('mlserver_failed', 0):,}",
            c.get("goal", ""),
            ("met" if c["met"] else "missed") if "met" in c else ("not measured" if "goal" in c else ""),
        ]
        for c in f["comparison"]
    ]
    lines += _table(
        [
            "model",
            "concurrency",
            "Triton p50 / MLServer best",
            "Triton req/s / MLServer best",
            "failed (Triton / MLServer)",
            "goal",
            "verdict",
        ],
        cmp_rows,
    )
    return [*lines, ""]


def _rounded(value: Any) -> Any:
    """Floats to 4 decimals: sub-microsecond digits in milliseconds are noise, not data."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def write_results(report: dict[str, Any], results_dir: Path) -> tuple[Path, Path]:
    """``<UTC timestamp>.json`` and ``latest.md``, each written whole or not at all."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = report["timestamp"].replace(":", "").replace("-", "")
    json_path = results_dir / f"{stamp}.json"
    md_path = results_dir / "latest.md"
    texts = ((json_path, json.dumps(_rounded(report), indent=2) + "\n"), (md_path, to_markdown(report)))
    for path, text in texts:
        tmp = path.with_name(path.name + ".tmp")  # *.tmp is git-ignored
        tmp.write_text(text)
        tmp.replace(path)
    return json_path, md_path
