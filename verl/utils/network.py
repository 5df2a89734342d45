# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Whether a service answers before a run relies on it (the model hub, a logging service)."""

import socket
import threading
from urllib.parse import urlparse


REACH_TIMEOUT_S = 5.0
"""How long `unreachable` waits for a logging service (name lookup and TCP connection)."""


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
"""Where one is set, `unreachable`'s direct connection says nothing of what the client libraries reach."""


def unreachable(url: str, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """None when a TCP connection to `url`'s host opens within `timeout_s`; else why not. The lookup runs in a daemon
    thread: without a name server getaddrinfo can block far longer than any socket timeout."""
    parsed = urlparse(url)
    host, port = parsed.hostname or url, parsed.port or (80 if parsed.scheme == "http" else 443)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(str(error.strerror or error))

    thread = threading.Thread(target=connect, name=f"reach-{host}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return f"{host}:{port} did not answer within {timeout_s:.0f} s"
    return None if outcome[0] is None else f"{host}:{port} cannot be reached ({outcome[0]})"
