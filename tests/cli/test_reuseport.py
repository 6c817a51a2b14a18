"""``klineage serve --workers N`` gives each worker its own SO_REUSEPORT socket on the one port."""

from __future__ import annotations

import socket

from klineage.cli.reuseport import listen


def test_several_workers_can_listen_on_one_port() -> None:
    first = listen("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = listen("127.0.0.1", port)
    try:
        assert second.getsockname()[1] == port
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the kernel hands the connection to one of the two listeners
    finally:
        first.close()
        second.close()
