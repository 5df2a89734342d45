# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The launcher of a script run by a warm Python server (warm_python.py): `python -S warm_launcher.py SOCKET SCRIPT
[ARGS...]`, standard library only. It hands the server its arguments, environment, cwd, niceness and standard
streams, passes signals on, and exits with the child's status (128 + N for signal N); without a server it runs the
script itself.
"""

import json
import os
import signal
import socket
import struct
import sys


def _plain(script_and_args: list) -> None:
    os.execv(sys.executable, [sys.executable, *script_and_args])


def _read_int(connection: socket.socket):
    data = b""
    while len(data) < 4:
        chunk = connection.recv(4 - len(data))  # retried after a signal (PEP 475)
        if not chunk:
            return None
        data += chunk
    return struct.unpack("!i", data)[0]


def main() -> None:
    address, script_and_args = sys.argv[1], sys.argv[2:]
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
    except OSError:
        connection.close()
        _plain(script_and_args)
    request = {"argv": script_and_args, "env": dict(os.environ), "cwd": os.getcwd(), "nice": os.nice(0)}
    request = json.dumps(request).encode()
    try:
        socket.send_fds(connection, [struct.pack("!I", len(request))], [0, 1, 2])
        connection.sendall(request)
        pid = _read_int(connection)
    except OSError:  # the server went away with the request unread (ended as its run stops): a traceback before
        pid = None
    if pid is None:  # the server could not start the child: nothing ran yet
        connection.close()
        _plain(script_and_args)

    forwarded = [signal.SIGKILL]

    def forward(number, frame) -> None:
        forwarded[0] = number
        try:
            connection.sendall(struct.pack("!i", number))
        except OSError:
            pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, forward)
    try:
        code = _read_int(connection)
    except OSError:  # the server went away: as a close
        code = None
    if code is None:  # the child ended without a status: a signal killed it (the one passed on, if any)
        code = 128 + forwarded[0]
    sys.exit(code)


if __name__ == "__main__":
    main()
