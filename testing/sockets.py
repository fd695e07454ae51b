"""Socket probes shared by the slow-client tests of the listener and the webhook."""

from __future__ import annotations

import socket
import ssl
import time


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``within`` seconds; any
    answer bytes before the close are read and ignored."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except TimeoutError:
            return False
    return False
