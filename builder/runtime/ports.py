"""Free TCP ports for servers the project starts (Triton, test fixtures).

A port picked here is free only at the moment of asking: another process may bind it before
the server does. Callers that can, retry with fresh ports (see ``TritonServer.start``).
"""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that nothing listens on right now.

    All sockets are held open together so the kernel cannot hand out one port twice.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port(host: str = "127.0.0.1") -> int:
    """One port that nothing listens on right now."""
    return free_ports(1, host)[0]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether binding ``host:port`` fails now (someone else holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR; without it a closed server's TIME_WAIT looks like a listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
