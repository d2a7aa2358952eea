"""Running Locust headless in its own process, with a hard timeout.

Locust monkey-patches the process that imports it (gevent), so the gate never imports it: it
runs ``python -m locust`` from the same environment, in its own session (process group) so a
timeout can kill Locust and anything it started. Locust's own exit code on request failures is
turned off (``--exit-code-on-error 0``): the SLA decides about failures; a non-zero exit from
Locust then means Locust itself failed (bad locustfile, bad option, crash).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.errors import LocustFailedError
from loadtests.settings import SHAPE_ENV, LoadOptions

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
STOP_TIMEOUT_S = 2  # lets in-flight requests finish when the run time is up
STARTUP_ALLOWANCE_S = 45  # importing Locust, gevent and tritonclient; generous on a 2-core box
_LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class LocustRun:
    """Everything one Locust run needs; ``command()`` is the exact command line."""

    locust_class: str
    host: str
    users: int
    spawn_rate: float
    run_time_s: int
    shape: str
    out_dir: Path
    options: LoadOptions = field(default_factory=LoadOptions)
    hard_timeout_s: float | None = None

    @property
    def csv_prefix(self) -> Path:
        return self.out_dir / "locust"

    @property
    def html_path(self) -> Path:
        return self.out_dir / "locust_report.html"

    @property
    def json_path(self) -> Path:
        return self.out_dir / "locust_stats.json"  # Locust appends ".json" to --json-file

    @property
    def log_path(self) -> Path:
        return self.out_dir / "locust.log"

    @property
    def timeout_s(self) -> float:
        if self.hard_timeout_s is not None:
            return self.hard_timeout_s
        return self.run_time_s + STOP_TIMEOUT_S + STARTUP_ALLOWANCE_S

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            self.locust_class,
            "--headless",
            "--host",
            self.host,
            "--users",
            str(self.users),
            "--spawn-rate",
            f"{self.spawn_rate:g}",
            "--run-time",
            f"{self.run_time_s}s",
            "--stop-timeout",
            str(STOP_TIMEOUT_S),
            "--csv",
            str(self.csv_prefix),
            "--csv-full-history",
            "--html",
            str(self.html_path),
            "--json-file",
            str(self.json_path.with_suffix("")),
            "--only-summary",
            "--exit-code-on-error",
            "0",
            *self.options.to_locust_args(),
        ]

    def environment(self) -> dict[str, str]:
        # The caller's LOCUST_* variables would silently change the run; the command line says all.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
        env[SHAPE_ENV] = self.shape
        return env


@dataclass(frozen=True)
class LocustResult:
    returncode: int
    duration_s: float


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the run's process group, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_locust(run: LocustRun) -> LocustResult:
    """Run Locust to completion; LocustFailedError if it fails or outlives its timeout."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with run.log_path.open("wb") as log:
        log.write(("$ " + " ".join(run.command()) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            run.command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=run.environment(),
            # the report folder as working directory: a ./locust.conf where the gate was started
            # cannot change the run
            cwd=run.out_dir,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=run.timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            raise LocustFailedError(
                f"Locust did not finish within {run.timeout_s:g} s and was killed",
                hint=f"see {run.log_path}",
            ) from None
        except BaseException:  # Ctrl-C: do not leave a load generator running
            _stop_group(proc)
            raise
    duration = time.monotonic() - start
    if code != 0:
        tail = log_tail(run.log_path)
        raise LocustFailedError(
            f"Locust exited with code {code}\n--- last lines of {run.log_path} ---\n{tail}",
            hint="read the log above: a bad option or a locustfile error stops Locust before any load",
        )
    return LocustResult(code, duration)
