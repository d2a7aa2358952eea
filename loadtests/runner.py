"""Running Locust headless in its own process, with a hard timeout; alone, or as the master of
Locust's own distributed mode.

Locust monkey-patches the process that imports it (gevent), so the gate never imports it: it
runs ``python -m locust`` from the same environment, in its own session (process group) so a
timeout can kill Locust and anything it started. Locust's own exit code on request failures is
turned off (``--exit-code-on-error 0``): the SLA decides about failures; a non-zero exit from
Locust then means Locust itself failed (bad locustfile, bad option, crash).

One Locust process is one core (gevent), and saturates near a thousand requests/s. With
``workers`` the run is Locust's distributed mode: this process is the master (it runs the load
shape, hands users out and aggregates every worker's statistics into the same CSV, JSON and HTML
reports a single process writes, so the gate judges them as it always has), and the load comes
from worker processes: started here, one per core (``Workers.local``), or started elsewhere
(worker pods: ``Workers.remote``) and connecting to the master's address. The master waits for
all of them before any load (``--expect-workers``), at most ``WORKERS_WAIT_S``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from loadtests.errors import LocustFailedError
from loadtests.settings import SHAPE_ENV, LoadOptions

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
STOP_TIMEOUT_S = 2  # lets in-flight requests finish when the run time is up
STARTUP_ALLOWANCE_S = 45  # importing Locust, gevent and tritonclient; generous on a 2-core box
WORKERS_WAIT_S = 60  # for every worker to connect; a worker pod may still be pulling its image
LOCAL_MASTER = ("127.0.0.1", 0)  # local workers: loopback, a free port
_LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class Workers:
    """Locust's distributed mode: ``count`` worker processes, started here (``local``) or
    elsewhere, connecting to the master at ``bind_host:bind_port`` (port 0: a free one)."""

    count: int
    local: bool = True
    bind_host: str = LOCAL_MASTER[0]
    bind_port: int = LOCAL_MASTER[1]

    def with_port(self, port: int) -> Workers:
        return Workers(self.count, self.local, self.bind_host, port)

    @property
    def master_host(self) -> str:
        """Where local workers reach the master (a wildcard bind is reached on loopback)."""
        return "127.0.0.1" if self.bind_host in ("0.0.0.0", "", "*") else self.bind_host


def free_port(host: str = "127.0.0.1") -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
    workers: Workers | None = None  # None: one process, no master

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

    def worker_log_path(self, index: int) -> Path:
        return self.out_dir / f"locust-worker-{index}.log"

    @property
    def timeout_s(self) -> float:
        if self.hard_timeout_s is not None:
            return self.hard_timeout_s
        waiting = WORKERS_WAIT_S if self.workers else 0
        return self.run_time_s + STOP_TIMEOUT_S + STARTUP_ALLOWANCE_S + waiting

    def command(self) -> list[str]:
        return [*self._single_command(), *self._master_args()]

    def _master_args(self) -> list[str]:
        if self.workers is None:
            return []
        return [
            "--master",
            "--master-bind-host",
            self.workers.bind_host,
            "--master-bind-port",
            str(self.workers.bind_port),
            "--expect-workers",
            str(self.workers.count),
            "--expect-workers-max-wait",
            str(WORKERS_WAIT_S),
        ]

    def worker_command(self, master_host: str | None = None) -> list[str]:
        """A worker's command line: the same locustfile, user class and options (the users read
        them from their own process's parsed options), connecting to the master."""
        if self.workers is None:
            raise ValueError("a single-process run has no workers")
        return [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            self.locust_class,
            "--worker",
            "--master-host",
            master_host or self.workers.master_host,
            "--master-port",
            str(self.workers.bind_port),
            *self.options.to_locust_args(),
        ]

    def _single_command(self) -> list[str]:
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


def _start(command: list[str], log: IO[bytes], run: LocustRun) -> subprocess.Popen[bytes]:
    log.write(("$ " + " ".join(command) + "\n").encode())
    log.flush()
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=run.environment(),
        # the report folder as working directory: a ./locust.conf where the gate was started
        # cannot change the run
        cwd=run.out_dir,
        start_new_session=True,
    )


def with_free_port(run: LocustRun) -> LocustRun:
    """The run with its master's port chosen, where it asked for any free one."""
    if run.workers is None or run.workers.bind_port:
        return run
    return replace(run, workers=run.workers.with_port(free_port(run.workers.bind_host or "0.0.0.0")))


def run_locust(run: LocustRun) -> LocustResult:
    """Run Locust to completion (the master and its local workers, in distributed mode);
    LocustFailedError if it fails or outlives its timeout."""
    run = with_free_port(run)
    run.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    workers: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as logs:
        proc = _start(run.command(), logs.enter_context(run.log_path.open("wb")), run)
        try:
            if run.workers is not None and run.workers.local:
                for index in range(run.workers.count):
                    log = logs.enter_context(run.worker_log_path(index).open("wb"))
                    workers.append(_start(run.worker_command(), log, run))
            code = proc.wait(timeout=run.timeout_s)
        except subprocess.TimeoutExpired:
            for group in (proc, *workers):
                _stop_group(group)
            raise LocustFailedError(
                f"Locust did not finish within {run.timeout_s:g} s and was killed",
                hint=f"see {run.log_path}",
            ) from None
        except BaseException:  # Ctrl-C: do not leave a load generator running
            for group in (proc, *workers):
                _stop_group(group)
            raise
        finally:
            # workers quit when their master does; one that did not (it never connected) is stopped
            for worker in workers:
                try:
                    worker.wait(STOP_TIMEOUT_S + 3)
                except subprocess.TimeoutExpired:
                    _stop_group(worker)
    duration = time.monotonic() - start
    if code != 0:
        tail = log_tail(run.log_path)
        hint = "read the log above: a bad option or a locustfile error stops Locust before any load"
        if run.workers is not None:
            hint += f"; in distributed mode, also the workers' logs ({run.out_dir}/locust-worker-*.log)"
        raise LocustFailedError(
            f"Locust exited with code {code}\n--- last lines of {run.log_path} ---\n{tail}", hint=hint
        )
    return LocustResult(code, duration)
