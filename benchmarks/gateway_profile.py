"""Where the gateway's time goes: py-spy samples of ``gateway serve`` under load, grouped by stage.

py-spy (``pip install py-spy``) samples the running process from outside, so the gateway runs
unchanged; ``--nonblocking`` keeps it from pausing the process at each sample. Only the thread
holding the GIL is sampled (``--gil``): one asyncio process serves every request through that one
lock, so samples / rate / duration is the share of time the GIL was held, and a stage's samples
per request are the GIL time it costs each request. Native work done without the GIL (SQLite's
own query, socket syscalls, the gRPC core's threads) is not counted; native work done with it
(protobuf, json's C encoder, Cython callbacks) lands on the Python function that called it.

A sample's *stage* is the first of ``STAGES`` with a frame anywhere on its stack: a sample in
``json.dumps`` called from Starlette's response is JSON, one in protobuf code under tritonclient
is the Triton call. A sample whose innermost Python frame is the loop running a callback
(``Handle._run``) is in C or Cython code the loop called: with the gRPC transport mostly the grpc
aio server's request handling. Samples with only asyncio frames are the event loop itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "feature read (Feast SDK + online store, gateway/clients/features.py)",
        ("/feast/", "/sqlite3/", "/redis/", "/gateway/clients/features.py"),
    ),
    (
        "Triton call (tritonclient + grpc aio client)",
        ("/tritonclient/", "/gateway/clients/triton_grpc.py", "/grpc/aio/_call.py", "/grpc/aio/_channel.py"),
    ),
    ("JSON parse / render", ("/json/",)),
    ("metrics (prometheus_client)", ("/prometheus_client/", "/gateway/metrics.py")),
    (
        "gateway core (validate, assemble, results)",
        (
            "/gateway/core.py",
            "/gateway/batching.py",
            "/gateway/request.py",
            "/gateway/values.py",
            "/gateway/catalog.py",
            "/gateway/assemble.py",
            "/gateway/responses.py",
            "/gateway/auth.py",
            "/gateway/errors.py",
        ),
    ),
    (
        "HTTP stack (uvicorn, httptools, Starlette, FastAPI)",
        ("/uvicorn/", "/starlette/", "/fastapi/", "/anyio/", "/gateway/http/"),
    ),
    (
        "gRPC server (grpc aio, protobuf, gateway/grpc/)",
        ("/grpc/", "/gateway/grpc/", "/gateway/proto/"),
    ),
)
CALLBACKS = "C/Cython callbacks run by the loop (grpc aio server, C tasks)"
LOOP = ("event loop (asyncio scheduling, selector, sockets)", ("/asyncio/", "/selectors.py", "/concurrent/"))
OTHER = "other"


def py_spy() -> str | None:
    """The py-spy binary of this environment (or on PATH), or None when it is not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record(binary: str, pid: int, seconds: int, out: Path, rate: int) -> None:
    """Sample ``pid`` for ``seconds`` into ``out`` (py-spy's raw collapsed-stack format)."""
    cmd = [binary, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate)]
    cmd += [
        "--format",
        "raw",
        "--output",
        str(out),
        "--gil",
        "--nonblocking",
        "--nolineno",
        "--full-filenames",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy exited {done.returncode}: {done.stderr.strip()[-300:]}")


def _frame(frame: str) -> tuple[str, str]:
    """``func (path)`` -> (func, path)."""
    func, _, path = frame.rpartition(" (")
    return func, path.rstrip(")")


_CHECKOUT = str(Path(__file__).resolve().parent.parent) + "/"  # the gateway runs from this checkout


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.", _CHECKOUT):
        if marker in path:
            path = path.split(marker, 1)[1]
            return path.split("/", 1)[1] if marker == "/lib/python3." else path
    return path


def stage_of(frames: list[str]) -> str:
    """The stage of one sample (its frames outermost first)."""
    paths = [_frame(f)[1] for f in frames]
    for stage, markers in STAGES:
        if any(m in p for p in paths for m in markers):
            return stage
    if _frame(frames[-1])[0] == "Handle._run":
        return CALLBACKS
    if any(m in p for p in paths for m in LOOP[1]):
        return LOOP[0]
    return OTHER


def summarize(raw: str, rate: int, seconds: float, requests: int, top: int = 20) -> dict[str, Any]:
    """Stage shares, cores and CPU µs per request; and the functions with the most own time."""
    stages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        stages[stage_of(frames)] += int(count)
        func, path = _frame(frames[-1])
        own[f"{func} ({_short(path)})"] += int(count)
    total = sum(stages.values()) or 1
    per_request_us = 1e6 / rate / max(requests, 1)

    def row(name: str, n: int) -> dict[str, Any]:
        return {"name": name, "samples": n, "share": n / total, "gil_us_per_request": n * per_request_us}

    order = [s for s, _ in STAGES] + [CALLBACKS, LOOP[0], OTHER]
    return {
        "samples": sum(stages.values()),
        "rate_hz": rate,
        "seconds": seconds,
        "requests": requests,
        "gil_busy": sum(stages.values()) / rate / seconds,
        "stages": [row(s, stages[s]) for s in order if stages[s]],
        "top_own": [row(name, n) for name, n in own.most_common(top)],
    }


def to_text(profiles: list[dict[str, Any]]) -> str:
    """benchmarks/results/gateway-profile.txt: one block per profiled load."""
    lines = []
    for p in profiles:
        lines += [
            f"== {p['load']} ==",
            f"{p['samples']} samples at {p['rate_hz']} Hz over {p['seconds']:g} s: the GIL was held "
            f"{p['gil_busy']:.0%} of the time (/proc: the gateway used {p['gateway_cores']:.2f} cores); "
            f"{p['requests']} requests answered meanwhile ({p['throughput_per_s']:,.0f}/s, "
            f"p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms under the profiler)",
            "",
            f"{'stage':<62} {'share':>6} {'GIL µs/request':>15}",
        ]
        lines += [f"{s['name']:<62} {s['share']:>6.1%} {s['gil_us_per_request']:>15.0f}" for s in p["stages"]]
        lines += ["", f"{'top functions by own time':<90} {'share':>6} {'µs/req':>7}"]
        lines += [
            f"{f['name'][:90]:<90} {f['share']:>6.1%} {f['gil_us_per_request']:>7.0f}" for f in p["top_own"]
        ]
        lines.append("")
    return "\n".join(lines)
