"""Several server processes on one port, each with its own ``SO_REUSEPORT`` socket.

uvicorn's ``--workers`` shares one listening socket: the worker whose event loop wakes first accepts a
whole burst of connections, so keep-alive clients pile onto one worker while the others idle (50
clients connecting at once measured 48/2). With one ``SO_REUSEPORT`` socket per process the kernel
spreads connections evenly over the processes.

    python -m klineage.cli.reuseport MODULE:FACTORY --port 8000 --workers 2
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from types import FrameType


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that other processes may bind too (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_one(factory: str, host: str, port: int, log_level: str, access_log: bool) -> None:
    """Serve the ASGI app ``factory()`` (an import string) in this process on its own reuse-port socket."""
    import uvicorn

    config = uvicorn.Config(factory, factory=True, host=host, port=port, log_level=log_level, access_log=access_log)
    uvicorn.Server(config).run(sockets=[listen(host, port)])


def run_workers(factory: str, host: str, port: int, workers: int, log_level: str = "info",
                access_log: bool = True) -> int:
    """Start ``workers`` processes serving ``factory`` on ``host:port`` and wait for them; SIGTERM or SIGINT
    stops them all. Returns the first non-zero exit status (0 when all ended cleanly)."""
    command = [sys.executable, "-m", "klineage.cli.reuseport", factory, "--host", host, "--port", str(port),
               "--log-level", log_level, "--one"]
    if not access_log:
        command.append("--no-access-log")
    children = [subprocess.Popen(command) for _ in range(workers)]

    def stop(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [child.wait() for child in children]
    return next((c for c in codes if c not in (0, -signal.SIGTERM)), 0)


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description="Serve an ASGI app factory from several SO_REUSEPORT processes.")
    parser.add_argument("factory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        serve_one(args.factory, args.host, args.port, args.log_level, not args.no_access_log)
    else:
        sys.exit(run_workers(args.factory, args.host, args.port, args.workers, args.log_level,
                             not args.no_access_log))


if __name__ == "__main__":
    main()
