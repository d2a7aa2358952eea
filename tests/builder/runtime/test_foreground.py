"""Serving in the foreground: SIGINT and SIGTERM stop the wait cleanly, at any moment.

Each case runs in its own Python process (signals go to that process, not to the test worker),
around a real child process standing in for tritonserver's Popen.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import os, random, signal, subprocess, sys, threading, time
    from builder.runtime.foreground import wait_for_stop

    class Server:  # TritonServer.wait's contract: the exit code, or None while it runs
        def __init__(self, *command):
            self.proc = subprocess.Popen(command)
        def wait(self, timeout=None):
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

    sig = getattr(signal, sys.argv[1])
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)  # inherited: may be SIG_IGN
    for i in range(int(sys.argv[2])):
        server = Server("sleep", "30")
        # the signal lands at a random moment of the wait loop, often inside Popen.wait itself
        threading.Timer(random.uniform(0.0, 0.05), os.kill, (os.getpid(), sig)).start()
        began = time.monotonic()
        code = wait_for_stop(server)
        assert code is None, code
        assert time.monotonic() - began < 2, "the stop was noticed late"
        server.proc.kill()
        assert server.proc.wait(5) == -signal.SIGKILL  # the Popen's own wait lock is still usable
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # restored
    exited = Server("sh", "-c", "sleep 0.2; exit 3")
    assert wait_for_stop(exited) == 3  # a server that exits on its own: its code, not a stop
    print("ok")
    """
)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_at_any_moment_ends_the_wait_and_leaves_the_process_waitable(signal_name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, signal_name, "8"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
