"""Start and stop the real ``tritonserver`` of the embedded runtime.

Used by ``builder serve`` and by test fixtures. Choices, and why:

* Triton's defaults ``--strict-readiness=true`` and ``--exit-on-error=true`` are kept: "ready"
  means every model loaded at start is ready, and a model that fails to load at start stops
  the server, which ``start()`` reports at once with the log tail instead of serving half a
  repository. Pass ``ServerOptions(extra_args=["--exit-on-error=false"])`` to serve whatever loads. Later
  loads through the repository API (poll/explicit modes) fail as API errors, not exits.
* The server runs in its own session (process group), so ``stop()`` can reach the
  Python-backend stub processes it forks: SIGTERM to the server lets it unload models (the
  stubs exit with them), then SIGKILL to the whole group removes anything left.
* A ``weakref.finalize`` kills the group if the owner forgets ``stop()`` or the interpreter
  exits, and a parent-death signal kills the server if its owner is killed outright, so a
  crashed test run leaves no server or stub behind.
* Readiness is HTTP ``/v2/health/ready`` plus the metrics endpoint answering: Triton binds
  metrics last, and a taken metrics port kills a server that already said "ready".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from builder.errors import RepositoryError, RuntimeSetupError, UsageError
from builder.runtime.paths import RuntimePaths, locate_runtime
from builder.runtime.ports import free_ports, port_in_use

CONTROL_MODES = ("none", "poll", "explicit")
_PORT_TAKEN = re.compile(r"already in use|Address already in use")
_EXIT_TIMEOUT_S = 10  # Triton waits this long for in-flight requests on SIGTERM; < stop()'s 15
_LOG_TAIL_LINES = 40
_PROBE_TIMEOUT_S = 1.0
# tritonserver is started through this exec shim: it asks the kernel to SIGKILL the server if
# the thread that started it dies (PR_SET_PDEATHSIG survives execve), so an owner killed
# outright (SIGKILL'd pytest, crashed `builder serve`) leaves no server behind; the stubs
# watch their parent and exit on their own within seconds.
_EXEC_WITH_PDEATHSIG = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)  # the owner died before prctl\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: fall back to "can we signal the group"
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _kill_group(pgid: int, timeout: float = 5.0) -> None:
    """SIGKILL every process in the group and wait until none is left alive."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _http_status(url: str) -> int | None:
    """Status code of a local HTTP GET, or None when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT_S) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


# Triton's log lines for a model it could not load: "Poll failed for model directory 'm': why",
# "failed to load 'm' version 1: why"
_FAILED_MODEL = re.compile(r"(?:Poll failed for model directory|failed to load) '([^']+)'[^\n]*?: ([^\n\"]*)")


@dataclass(frozen=True)
class ServerOptions:
    """How a ``TritonServer`` runs, apart from where its repository, runtime and log are: one
    value, so ``builder serve``, the tune session, the tests and the benchmarks pass the same
    thing. Ports left as None are picked free at ``start()``."""

    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    model_control_mode: str = "none"
    load_models: Sequence[str] = ()
    log_verbose: int = 0
    extra_args: Sequence[str] = ()
    address: str = "127.0.0.1"

    def __post_init__(self) -> None:
        # Tuples, whatever sequence the caller passed: the options are frozen, and hashable.
        object.__setattr__(self, "load_models", tuple(self.load_models))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))

    @classmethod
    def explicit(cls, models: Sequence[str], **options: Any) -> ServerOptions:
        """Explicit model control, loading ``models`` at start (what tests and benchmarks run)."""
        return cls(model_control_mode="explicit", load_models=models, **options)


class TritonServer:
    """One ``tritonserver`` process serving ``repo`` on local ports.

    Ports left as None are picked free at ``start()``; if one is taken between picking and
    binding, the start is retried with fresh ports (twice). Explicit ports are checked first
    and a taken one fails at once.
    """

    def __init__(
        self,
        repo: Path,
        options: ServerOptions | None = None,
        *,
        runtime: RuntimePaths | None = None,
        log_path: Path | None = None,
    ) -> None:
        options = options or ServerOptions()
        model_control_mode, load_models = options.model_control_mode, options.load_models
        if model_control_mode not in CONTROL_MODES:
            raise UsageError(
                f"unknown model control mode '{model_control_mode}'",
                hint="use one of: " + ", ".join(CONTROL_MODES),
            )
        if load_models and model_control_mode != "explicit":
            raise UsageError(
                "--load-model needs --model-control-mode explicit",
                hint="add --model-control-mode explicit, or drop --load-model to load everything",
            )
        self.repo = Path(repo).expanduser().absolute()
        self.options = options
        self.model_control_mode = model_control_mode
        self.load_models = load_models
        self.log_verbose = options.log_verbose
        self.extra_args = options.extra_args
        self.address = options.address
        self._wanted_ports = {
            "http": options.http_port,
            "grpc": options.grpc_port,
            "metrics": options.metrics_port,
        }
        self.ports: dict[str, int] = {}
        self._runtime = runtime
        self._log_path = log_path
        self._log_is_temp = log_path is None  # created by us in the temp folder: ours to remove
        self._log_handle: IO[str] | None = None
        self._log_offset = 0  # where the current attempt's output starts in the log
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # ---- endpoints -------------------------------------------------------------------------
    @property
    def _client_host(self) -> str:
        return "127.0.0.1" if self.address in ("0.0.0.0", "") else self.address

    def _url(self, kind: str) -> str:
        if kind not in self.ports:
            raise RuntimeSetupError(
                "Triton server not started", hint="call start() or use it as a context manager"
            )
        return f"{self._client_host}:{self.ports[kind]}"

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint, as ``tritonclient.http`` wants it."""
        return self._url("http")

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint, as ``tritonclient.grpc`` wants it."""
        return self._url("grpc")

    @property
    def metrics_url(self) -> str:
        """Full URL of the Prometheus metrics page."""
        return f"http://{self._url('metrics')}/metrics"

    @property
    def log_path(self) -> Path:
        """The file the server's stdout and stderr go to (kept after stop)."""
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        return self._log_path

    def discard_log(self) -> None:
        """Remove the log if it is the temp file this server created (after a clean stop)."""
        if self._log_is_temp and self._log_path is not None and self._proc is None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, n: int = _LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server log."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 256 * 1024))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-n:])

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 120) -> TritonServer:
        """Launch the server and return once it is ready; raise RuntimeSetupError otherwise."""
        if self._proc is not None:
            raise RuntimeSetupError("Triton server already started", hint="call stop() first")
        if not self.repo.is_dir():
            raise RepositoryError(
                f"model repository {self.repo} does not exist",
                hint="pass --repo pointing at a directory of models (see `builder export`)",
            )
        runtime = self._runtime or locate_runtime()
        self._check_explicit_ports()
        deadline = time.monotonic() + timeout
        retries = 2 if None in self._wanted_ports.values() else 0
        for attempt in range(retries + 1):
            self._launch(runtime)
            try:
                self._wait_ready(deadline)
                return self
            except RuntimeSetupError:
                taken = _PORT_TAKEN.search(self._log_since_launch())
                self.stop(timeout=0)  # a server that did not come up is not worth waiting for
                if not taken or attempt == retries:
                    raise
                self._write_log_line("--- a picked port was taken; retrying with fresh ports ---")
        raise AssertionError("unreachable")

    def _check_explicit_ports(self) -> None:
        bind_host = self.address or "0.0.0.0"
        for kind, port in self._wanted_ports.items():
            if port is not None and port_in_use(port, bind_host):
                raise RuntimeSetupError(
                    f"{kind} port {port} is already in use on {bind_host}",
                    hint=f"stop whatever listens there or pass another --{kind}-port",
                )

    def _choose_ports(self) -> dict[str, int]:
        wanted = self._wanted_ports
        fresh = iter(free_ports(sum(p is None for p in wanted.values()), self.address or "0.0.0.0"))
        return {kind: port if port is not None else next(fresh) for kind, port in wanted.items()}

    def command(self, runtime: RuntimePaths) -> list[str]:
        """The tritonserver command line for the current ports (for logs and reproduction)."""
        args = [
            str(runtime.tritonserver),
            f"--model-repository={self.repo}",
            f"--backend-directory={runtime.backends_dir}",
            f"--cache-directory={runtime.caches_dir}",
            f"--model-control-mode={self.model_control_mode}",
            *(f"--load-model={name}" for name in self.load_models),
            f"--exit-timeout-secs={_EXIT_TIMEOUT_S}",
            f"--log-verbose={self.log_verbose}",
        ]
        for kind in ("http", "grpc", "metrics"):
            args += [f"--{kind}-address={self.address}", f"--{kind}-port={self.ports[kind]}"]
        return [*args, *self.extra_args]

    def environment(self, runtime: RuntimePaths) -> dict[str, str]:
        """The server's environment: the model env's python first, libpython + libs loadable."""
        env = dict(os.environ)
        # The stub embeds Python in isolated mode and finds its prefix from `python3` on PATH.
        env["PATH"] = os.pathsep.join([str(runtime.model_env_bin), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(runtime.model_env)
        for leaked in ("PYTHONHOME", "PYTHONPATH"):  # the project env's, wrong for the stub
            env.pop(leaked, None)
        libdir = runtime.python_libdir or Path(str(sysconfig.get_config_var("LIBDIR")))
        # Copied backends and stubs lose their RPATH to nvidia_pytriton.libs.
        ld_path = [str(libdir), str(runtime.libs_dir), env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in ld_path if p)
        return env

    def _write_log_line(self, line: str) -> None:
        with open(self.log_path, "a") as handle:
            handle.write(line + "\n")

    def _log_since_launch(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_offset)
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _launch(self, runtime: RuntimePaths) -> None:
        self.ports = self._choose_ports()
        cmd = self.command(runtime)
        self._write_log_line("$ " + " ".join(cmd))
        self._log_offset = self.log_path.stat().st_size
        self._log_handle = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()
        # The death signal follows the starting *thread*; from any other thread it could kill
        # a server whose owner is still alive, so only the main thread asks for it.
        if sys.platform == "linux" and threading.current_thread() is threading.main_thread():
            cmd = [sys.executable, "-I", "-S", "-c", _EXEC_WITH_PDEATHSIG, str(os.getpid()), *cmd]
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log_handle,
                stderr=subprocess.STDOUT,
                env=self.environment(runtime),
                start_new_session=True,  # own process group: stop() reaches the stubs
            )
        except OSError as exc:
            self._log_handle.close()
            self._log_handle = None
            raise RuntimeSetupError(
                f"cannot run {runtime.tritonserver}: {exc}",
                hint="run `builder runtime install` to repair the runtime",
            ) from exc
        self._finalizer = weakref.finalize(self, _kill_group, self._proc.pid)

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        ready_url = f"http://{self.http_url}/v2/health/ready"
        check_metrics = not any(a.startswith("--allow-metrics=f") for a in self.extra_args)
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self._start_error(f"tritonserver exited during start (exit code {code})")
            if _http_status(ready_url) == 200 and (
                not check_metrics or _http_status(self.metrics_url) == 200
            ):
                if self._proc.poll() is None:
                    return
                continue  # it died right after answering; report that on the next pass
            if time.monotonic() > deadline:
                raise self._start_error("tritonserver not ready before the start timeout")
            time.sleep(0.1)

    def _start_error(self, summary: str) -> RuntimeSetupError:
        tail = self.log_tail()
        errors = [ln for ln in tail.splitlines() if ln.startswith(("E", "error:"))]
        # the models Triton could not load, by name ("failed to load all models" names none)
        models = [f"{m[1]}: {m[2].strip()}" for m in _FAILED_MODEL.finditer(self._log_since_launch())]
        reason = f": {errors[-1].strip()}" if errors else ""
        if models:
            reason += " (model(s) that failed: " + "; ".join(dict.fromkeys(models)) + ")"
        # indented, so the tail's own "error:" lines never read as a second error of ours
        quoted = "\n".join(f"  | {line}" for line in tail.splitlines())
        return RuntimeSetupError(
            f"{summary}{reason}\n--- last lines of {self.log_path} ---\n{quoted}",
            hint="read the log lines above; a model that fails to load stops the server",
        )

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the server exits (or ``timeout``); its exit code, or None if running."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 15) -> None:
        """Stop gracefully (SIGTERM, wait), then SIGKILL the process group; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                # Only the server gets SIGTERM: it unloads models, which ends the stubs cleanly.
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout)
            _kill_group(proc.pid)
            # Bounded: a KeyboardInterrupt that landed inside Popen.poll() (Ctrl-C during start)
            # can leave its wait lock held, and an unbounded wait() would then hang for good.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    # ---- queries ---------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """Whether the server answers ready now."""
        return bool(self.ports) and _http_status(f"http://{self.http_url}/v2/health/ready") == 200

    def models(self) -> list[dict[str, Any]]:
        """The repository index: ``[{"name", "version", "state", "reason"?}, ...]``."""
        url = f"http://{self.http_url}/v2/repository/index"
        request = urllib.request.Request(url, method="POST", data=b"{}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                index = json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise RuntimeSetupError(
                f"cannot read the repository index from {url}: {exc}",
                hint="is the server still running? see its log",
            ) from exc
        return list(index)

    def __enter__(self) -> TritonServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}, http {self.ports.get('http')}" if self._proc else "stopped"
        return f"TritonServer({self.repo}, {state})"
