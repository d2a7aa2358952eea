"""(h) The load generator's own ceiling: one Locust process against Locust's distributed mode.

``loadtests gate`` drives the gateway user at a target that costs next to nothing (HAProxy
answering every request with a canned gateway answer, ``http-request return``), so the figure is
Locust's, not the target's: first as one Locust process (``--workers 0``), then as a master with
``--workers 2`` (one per core here), the same users, run time and SLA, in one run. Reported:
requests/s, p50/p99 as the gate's summary has them, and CPU seconds per 1,000 requests of the
gate's process tree (the gate, the master, the workers: ``RUSAGE_CHILDREN``) and of HAProxy.

On a 2-core machine the target and the master share the workers' cores, so two workers cannot
double one process's figure here; on a release runner or worker pods each worker has its own.

Run: ``.venv/bin/python -m benchmarks.locust_bench [--locust-users 32 --duration 8]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

CANNED = '{"model":"m","version":"1","predictions":[{"score":0.1,"label":0}]}'
SLA = """description: the load generator's ceiling (no latency limit that a saturated Locust misses)
endpoints:
  - name: Aggregated
    p99_ms: 60000
    max_error_rate: 0.0
"""


class LocustBenchError(RuntimeError):
    """A reason not to report the Locust figures."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--locust-users", type=int, default=32, help="simulated users of each run")


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, clock ticks (USER_HZ 100)


def _haproxy(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("haproxy")
    if binary is None:
        raise LocustBenchError("haproxy is not installed (make bench installs it)")
    port = _free_port()
    config = root / "haproxy.cfg"
    config.write_text(
        "\n".join(
            [
                "global",
                "    nbthread 1",
                "defaults",
                "    mode http",
                "    timeout client 30s",
                "frontend fe",
                f"    bind 127.0.0.1:{port}",
                f"    http-request return status 200 content-type application/json string '{CANNED}'",
                "",
            ]
        )
    )
    proc = subprocess.Popen(
        [binary, "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with closing(socket.socket()) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.05)
    proc.kill()
    raise LocustBenchError("haproxy did not listen within 10 s")


def _gate(url: str, sla: Path, out: Path, users: int, seconds: int, workers: int) -> dict[str, Any]:
    command = [
        *(sys.executable, "-c", "from loadtests.cli import main; main()", "gate"),
        *("--target", url, "--sla", str(sla), "--user-class", "gateway", "--model", "m"),
        *("--users", str(users), "--spawn-rate", str(users), "--run-time", f"{seconds}s"),
        *("--channels", "web", "--out", str(out), "--json", "--workers", str(workers)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 180)
    if done.returncode != 0:
        raise LocustBenchError(f"loadtests gate exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return dict(json.loads(done.stdout))


def _point(label: str, summary: dict[str, Any], gate_cpu: float, proxy_cpu: float) -> dict[str, Any]:
    total = next(e for e in summary["endpoints"] if e["name"] == "Aggregated")
    requests = int(total["requests"])
    return {
        "mode": label,
        "requests": requests,
        "rps": round(float(total["rps"]), 1),
        "p50_ms": total["p50_ms"],
        "p99_ms": total["p99_ms"],
        "locust_cpu_s_per_1k": round(1000 * gate_cpu / max(requests, 1), 3),
        "haproxy_cpu_s_per_1k": round(1000 * proxy_cpu / max(requests, 1), 3),
    }


def run(args: argparse.Namespace, root: Path, say: Any = print) -> dict[str, Any]:
    """Both runs, one after the other, against the same HAProxy."""
    root.mkdir(parents=True, exist_ok=True)
    sla = root / "ceiling.yaml"
    sla.write_text(SLA)
    seconds = max(int(args.duration), 4)
    proxy, port = _haproxy(root)
    points = []
    try:
        for label, workers in (("one Locust process", 0), ("master + 2 workers", 2)):
            say(f"locust: {label}, {args.locust_users} users, {seconds} s")
            before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            before_proxy = _cpu_seconds(proxy.pid)
            summary = _gate(
                f"http://127.0.0.1:{port}", sla, root / f"w{workers}", args.locust_users, seconds, workers
            )
            after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            gate_cpu = (after_children.ru_utime + after_children.ru_stime) - (
                before_children.ru_utime + before_children.ru_stime
            )
            points.append(_point(label, summary, gate_cpu, _cpu_seconds(proxy.pid) - before_proxy))
    finally:
        proxy.terminate()
        proxy.wait(10)
    one, two = points
    return {
        "users": args.locust_users,
        "seconds": seconds,
        "points": points,
        "ratio": round(two["rps"] / one["rps"], 2),
    }


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`loadtests gate`, gateway user, {result['users']} users, {result['seconds']} s per run, against "
        "HAProxy answering a canned gateway response (the target costs next to nothing).",
        "",
        "| load generator | requests/s | p50 ms | p99 ms | Locust CPU s / 1k req | HAProxy CPU s / 1k req |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in result["points"]:
        lines.append(
            f"| {p['mode']} | {p['rps']:,.0f} | {p['p50_ms']} | {p['p99_ms']} | "
            f"{p['locust_cpu_s_per_1k']} | {p['haproxy_cpu_s_per_1k']} |"
        )
    lines += ["", f"2 workers / 1 process: {result['ratio']}x requests/s."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8, help="seconds per run")
    add_arguments(parser)
    args = parser.parse_args()
    try:
        with tempfile.TemporaryDirectory(prefix="locust-bench-") as tmp:
            result = run(args, Path(tmp))
    except LocustBenchError as exc:
        print(f"locust bench: error: {exc}", file=sys.stderr)
        return 1
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
