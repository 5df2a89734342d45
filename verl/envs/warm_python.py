# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Python scripts (verifiers' per-episode harness programs) started fast, by a fork server that has imported their
modules: a small launcher (warm_launcher.py) hands it its arguments, environment, cwd and streams, and it forks a
child that runs the script as `python script.py` would. The launcher stands for the child (its exit status, signals
passed to its group, its death kills the group). Server: `python -m verl.envs.warm_python SOCKET SCRIPT`.
"""

import ast
import contextlib
import hashlib
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Any


logger = logging.getLogger(__name__)

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_launcher.py")
"""The launcher script (standard library only: it runs with `python -S`)."""
START_TIMEOUT_S = 120.0
"""Longest a server may take to import a script's modules; past it the script starts plainly."""
PARENT_CHECK_S = 1.0
"""How often an idle server checks that the process which started it is still there (it ends with it)."""


def script_imports(source: str) -> list[str]:
    """The absolute modules `source` imports anywhere (top level or inside functions), in order."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return list(dict.fromkeys(names))


class WarmPython:
    """One fork server for one script (its modules imported), started on first use; `command(path)` is what to run
    in its place. The server ends with this process (or `close`)."""

    def __init__(self) -> None:
        self._servers: dict[str, tuple[subprocess.Popen, str]] = {}
        self._lock = threading.Lock()
        self._dir: str | None = None

    def command(self, path: str, cwd: str | None = None) -> list[str]:
        """The command running the script at `path` (relative to `cwd`) through the server of its content (copies
        share one): `[python, -S, launcher, socket, path]`, or `[python, path]` where the server did not start."""
        with open(os.path.join(cwd or os.getcwd(), path), "rb") as f:
            key = hashlib.sha256(f.read()).hexdigest()
        with self._lock:
            if key not in self._servers:
                self._servers[key] = self._start(os.path.abspath(os.path.join(cwd or os.getcwd(), path)))
            process, address = self._servers[key]
        if process.poll() is not None:
            return [sys.executable, path]
        return [sys.executable, "-S", LAUNCHER, address, path]

    def _start(self, path: str) -> tuple[subprocess.Popen, str]:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="verl-warm-")
        address = os.path.join(self._dir, f"{len(self._servers)}.sock")
        process = subprocess.Popen(
            [sys.executable, "-m", "verl.envs.warm_python", address, path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)  # it says so after its imports
        if not ready or process.stdout.readline().strip() != b"ready":
            logger.warning("The warm Python server for %s did not start; its script starts plainly.", path)
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()
        return process, address

    def close(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, {}
        for process, address in servers.values():
            with contextlib.suppress(OSError):
                process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
            with contextlib.suppress(OSError):
                os.unlink(address)


# ----------------------------------------------------------------------------------------------------------------
# the server


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: a length-prefixed JSON header {"argv", "env", "cwd"} with the launcher's 3 standard streams."""
    header, fds, _, _ = socket.recv_fds(connection, 4, 3)
    (size,) = struct.unpack("!I", header)
    body = b""
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the launcher went away")
        body += chunk
    return json.loads(body), fds


def _watch_launcher(connection: socket.socket) -> None:
    """In the child: pass the launcher's signals to this process group; the launcher's end (EOF) kills the group."""
    while True:
        try:
            data = connection.recv(4)
        except OSError:
            data = b""
        if len(data) < 4:
            os.killpg(0, signal.SIGKILL)
            return
        (number,) = struct.unpack("!i", data)
        with contextlib.suppress(OSError):
            os.killpg(0, number)


def _run_child(connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """The forked child: become the script's process, run it, report its exit status, exit."""
    import runpy

    os.setsid()  # a group of its own, which the launcher's signals reach
    for signal_number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(signal_number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    extra = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[1:1] = [entry for entry in extra if entry not in sys.path]  # as a fresh interpreter would put them
    connection.sendall(struct.pack("!i", os.getpid()))
    threading.Thread(target=_watch_launcher, args=(connection,), daemon=True).start()
    code = 0
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:  # as the interpreter exits: None is 0, another non-int is printed and 1
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    import atexit

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # what the script registered, as at a plain interpreter's exit
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        connection.sendall(struct.pack("!i", code & 0xFF))
    os._exit(code & 0xFF)


def serve(address: str, script: str) -> None:
    """Import the modules `script` imports (those this Python has), then fork a child per launcher connection."""
    import importlib

    parent = os.getppid()
    with open(script, encoding="utf-8") as f:
        modules = script_imports(f.read())
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)
    listener.bind(address)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    listener.settimeout(PARENT_CHECK_S)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the trainer process that started it is gone
                return
            continue
        connection.settimeout(None)
        try:
            request, fds = _receive(connection)
        except (OSError, ValueError, ConnectionError):
            connection.close()
            continue
        if os.fork() == 0:
            listener.close()
            try:
                _run_child(connection, request, fds)
            finally:
                os._exit(1)
        connection.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
