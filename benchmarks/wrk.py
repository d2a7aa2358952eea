"""``wrk`` as ``make bench``'s HTTP load: a C client, closed loop, one connection per client, so the
client takes little of the 2 cores the servers share (a Python load generator saturates first).

A point's requests cycle through the bodies given (a Lua ``request`` function), so a server sees
different rows, not one cached one. Failed requests are counted in the point (non-2xx answers
and socket errors), and a run wrk could not measure at all is a ``failed_point``: one side's
failures never drop a comparison. ``sample``, when given, is read right before and right after
the measured run (not the warm-up): part (c) passes the servers' CPU clocks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from typing import Any


class WrkError(Exception):
    """wrk is missing, or printed what this module cannot read."""


def wrk_path() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise WrkError("wrk is not installed: apt-get install wrk (make bench installs it as root)")
    return found


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise WrkError(f"cannot read wrk's latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> dict[str, float]:
    """wrk --latency's p50/p99 (ms), successful responses per second and failures.

    wrk's own Requests/sec counts every response, errors included: ``throughput_rps`` keeps the
    successful ones only. ``errors`` = non-2xx/3xx responses + socket errors (connect, read,
    write, timeout), each also reported on its own."""
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", output, re.M))
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    total = re.search(r"^\s*(\d+) requests in ", output, re.M)
    if set(pct) != {"50", "99"} or rps is None or total is None:
        raise WrkError(f"cannot read wrk's output:\n{output[-800:]}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    requests = int(total.group(1))
    bad = int(non_2xx.group(1)) if non_2xx else 0
    socket_errors = sum(int(g) for g in sockets.groups()) if sockets else 0
    ok_share = (requests - bad) / requests if requests else 0.0
    return {
        "p50_ms": _ms(pct["50"]),
        "p99_ms": _ms(pct["99"]),
        "throughput_rps": float(rps.group(1)) * ok_share,
        "requests": requests,
        "errors": bad + socket_errors,
        "non_2xx": bad,
        "socket_errors": socket_errors,
    }


def failed_point(reason: str) -> dict[str, Any]:
    """A point wrk could not measure (the server gone, wrk's output unreadable): shown as failed,
    no latency, no throughput."""
    return {
        "p50_ms": None,
        "p99_ms": None,
        "throughput_rps": 0.0,
        "requests": 0,
        "errors": 0,
        "non_2xx": 0,
        "socket_errors": 0,
        "failure": reason,
    }


def _wrk_seconds(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"  # wrk takes whole seconds


def lua_script(bodies: Sequence[str]) -> str:
    """POST each body in turn, as JSON."""
    quoted = ",\n".join(f"  {json.dumps(b)}" for b in bodies)
    return (
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"local bodies = {{\n{quoted}\n}}\nlocal i = 0\n"
        "request = function()\n  i = i % #bodies + 1\n  return wrk.format(nil, nil, nil, bodies[i])\nend\n"
    )


def run_wrk(
    url: str,
    body: str | Sequence[str],
    concurrency: int,
    seconds: float,
    warmup_s: float,
    sample: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """One point; with ``sample``, also ``sample_before`` and ``sample_after`` (its readings
    around the measured run)."""
    bodies = [body] if isinstance(body, str) else list(body)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua_script(bodies))
    try:
        threads = str(min(2, concurrency))
        base = [wrk_path(), "-t", threads, "-c", str(concurrency), "-s", script.name, "--latency"]
        if warmup_s > 0:
            subprocess.run([*base, "-d", _wrk_seconds(warmup_s), url], capture_output=True)
        before = sample() if sample else None
        done = subprocess.run(
            [*base, "-d", _wrk_seconds(seconds), "--timeout", "5s", url], capture_output=True, text=True
        )
        after = sample() if sample else None
    finally:
        os.unlink(script.name)
    if done.returncode != 0:
        return failed_point(f"wrk exited {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
    try:
        point: dict[str, Any] = parse_wrk(done.stdout)
    except WrkError as exc:
        return failed_point(str(exc)[:300])
    if sample:
        point["sample_before"], point["sample_after"] = before, after
    return point
