# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Python scripts started fast (verifiers' per-episode harness programs; Ray's worker script, verl/trainer/
warm_workers.py), by a fork server that has imported their modules: a small launcher (warm_launcher.py) hands it its
arguments, environment, cwd, niceness and streams, and it forks a child that runs the script as `python script.py`
would. The launcher stands for the child (its exit status, signals passed to its group, its death kills the group).
Server: `python -m verl.utils.warm_python SOCKET SCRIPT [--import MODULE] [--setup FUNCTION] [--like-first]`.
"""

import ast
import contextlib
import hashlib
import importlib
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
    """Fork servers, each for one script (its modules, and any others named, imported), started on first use;
    `command(path)` is what to run in a script's place. The servers end with this process (or `close`)."""

    def __init__(self) -> None:
        self._servers: dict[tuple, tuple[subprocess.Popen, str]] = {}
        self._ready: dict[tuple, bool] = {}
        self._lock = threading.Lock()
        self._dir: str | None = None

    def command(self, path: str, cwd: str | None = None) -> list[str]:
        """The command running the script at `path` (relative to `cwd`) through the server of its content (copies
        share one): `[python, -S, launcher, socket, path]`, or `[python, path]` where the server did not start."""
        address = self.server(os.path.join(cwd or os.getcwd(), path))
        if address is None or not self.wait(address):
            return [sys.executable, path]
        return [sys.executable, "-S", LAUNCHER, address, path]

    def server(
        self,
        script: str,
        modules: tuple[str, ...] = (),
        env_free: tuple[str, ...] | None = None,
        setup: str | None = None,
    ) -> str | None:
        """The socket of the server for `script` (by content) that also imports `modules`, started now if there is
        none (`wait` for it to be ready); None where it ended. With `env_free` it imports with the environment of
        its first request and forks only for requests whose environment differs from that one in those names alone
        (the launcher runs any other plainly), for scripts whose modules read variables at import. `setup`
        ("package.module.function") runs in the server before its imports, as it would in the script's process."""
        with open(script, "rb") as f:
            key = (hashlib.sha256(f.read()).hexdigest(), tuple(modules), env_free, setup)
        with self._lock:
            if key not in self._servers:
                self._servers[key] = self._start(os.path.abspath(script), modules, env_free, setup)
            process, address = self._servers[key]
        return None if process.poll() is not None else address

    def wait(self, address: str, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Whether the server at `address` is ready (waiting up to `timeout_s` for it); one that does not say so in
        time is stopped (its scripts start plainly)."""
        with self._lock:
            key, (process, _) = next((k, v) for k, v in self._servers.items() if v[1] == address)
            if key not in self._ready:
                ready, _, _ = select.select([process.stdout], [], [], timeout_s)  # it says so after its imports
                self._ready[key] = bool(ready) and process.stdout.readline().strip() == b"ready"
                if not self._ready[key]:
                    logger.warning("The warm Python server for %s did not start; its scripts start plainly.", key)
                    with contextlib.suppress(OSError):
                        process.kill()
                    process.wait()
            return self._ready[key]

    def _start(
        self, path: str, modules: tuple, env_free: tuple | None, setup: str | None
    ) -> tuple[subprocess.Popen, str]:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="verl-warm-")
        address = os.path.join(self._dir, f"{len(self._servers)}.sock")
        options = [arg for name in modules for arg in ("--import", name)]
        if setup:
            options += ["--setup", setup]
        if env_free is not None:
            options += ["--like-first", *(arg for name in env_free for arg in ("--env-free", name))]
        process = subprocess.Popen(
            [sys.executable, "-m", "verl.utils.warm_python", address, path, *options],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        return process, address

    def close(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, {}
            self._ready = {}
        for process, address in servers.values():
            with contextlib.suppress(OSError):
                process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
            with contextlib.suppress(OSError):
                os.unlink(address)
        if self._dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)  # its sockets are gone (a server still binding one keeps it)
            self._dir = None


# ----------------------------------------------------------------------------------------------------------------
# the server


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: a length-prefixed JSON header {"argv", "env", "cwd", "nice"} with the launcher's 3 standard
    streams."""
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


def _adopt(request: dict[str, Any]) -> None:
    """Take the request's working folder, environment and PYTHONPATH entries (where a fresh interpreter puts them)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[1:1] = [entry for entry in extra if entry not in sys.path]


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
    with contextlib.suppress(OSError):  # the launcher's niceness (Ray starts its workers at 15); lowering needs root
        os.nice(request.get("nice", 0) - os.nice(0))
    _adopt(request)
    generator = sys.modules.get("numpy.random")
    if generator is not None:  # a fresh process seeds numpy's global generator from the OS (Python's `random`
        generator.seed()  # reseeds at fork itself); left alone, every fork would draw the server's numbers
    for name, value in _IMPORT_ENV.items():  # what the server's imports set, as they would have in a fresh process
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    argv = request["argv"]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
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


_START_ENV: dict[str, str] = {}
"""The server's environment before its imports."""
_IMPORT_ENV: dict[str, str | None] = {}
"""The variables its imports set (None: removed)."""


def _env_differs(request: dict[str, Any], env_free: frozenset[str]) -> list[str]:
    """The names, outside `env_free`, whose value in the request's environment is not the server's at its start."""
    theirs = request["env"]
    return sorted(
        name
        for name in set(theirs) | set(_START_ENV)
        if name not in env_free and theirs.get(name) != _START_ENV.get(name)
    )


def _threads() -> int:
    """The threads of this process (native ones included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _import(names: list[str], setup: str | None) -> None:
    """Call `setup` ("package.module.function"), then import `names` (those this Python has), noting the variables
    they set."""
    _START_ENV.update(os.environ)
    if setup:
        module, _, function = setup.rpartition(".")
        with contextlib.suppress(Exception):  # as a failed import: the script's own process meets it again
            getattr(importlib.import_module(module), function)()
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    changed = {name: os.environ.get(name) for name in set(os.environ) | set(_START_ENV)}
    _IMPORT_ENV.update({name: value for name, value in changed.items() if value != _START_ENV.get(name)})


def serve(address: str, script: str, modules: list[str], env_free: list[str] | None, setup: str | None) -> None:
    """Import the modules `script` imports and `modules`, then fork a child per launcher connection that runs the
    script. With `env_free`, the imports wait for the first connection and run in its environment and working
    folder, and a child is forked only for a request whose environment differs from that one in `env_free` alone
    (its launcher runs any other plainly): modules that read a variable at import read the child's value. `setup` is
    called before the imports."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for its parent; it ends with the parent
    with open(script, encoding="utf-8") as f:
        names = script_imports(f.read()) + list(modules)
    free = frozenset(env_free) if env_free is not None else None
    if free is None:
        _import(names, setup)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)
    listener.bind(address)
    listener.listen(64)
    print("ready", flush=True)
    listener.settimeout(PARENT_CHECK_S)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the process that started it is gone
                return
            continue
        connection.settimeout(None)
        try:
            request, fds = _receive(connection)
        except (OSError, ValueError, ConnectionError):
            connection.close()
            continue
        if free is not None and not _START_ENV:  # the first request: import as its process would
            with contextlib.suppress(OSError):
                _adopt(request)
            _import(names, setup)
        differs = _env_differs(request, free) if free is not None else []
        if _threads() > 1:  # a fork would hold copies of locks other threads may have held; start it plainly
            differs = [f"{_threads() - 1} threads started by the imports"]
        if differs and os.environ.get("VERL_WARM_PYTHON_DEBUG"):
            print(f"warm_python: {request['argv'][:1]} starts plainly: {differs}", file=sys.stderr)
        if not differs and os.fork() == 0:
            listener.close()
            try:
                _run_child(connection, request, fds)
            finally:
                os._exit(1)
        connection.close()  # a launcher without a child's process id runs its script plainly
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="A fork server for one script (see the module's docstring).")
    parser.add_argument("address")
    parser.add_argument("script")
    parser.add_argument("--import", dest="modules", action="append", default=[], help="a module to import as well")
    parser.add_argument("--setup", help="package.module.function to call before the imports")
    parser.add_argument("--like-first", action="store_true", help="import with the first request's environment")
    parser.add_argument("--env-free", action="append", default=[], help="a variable that may differ (--like-first)")
    arguments = parser.parse_args()
    free = arguments.env_free if arguments.like_first else None
    serve(arguments.address, arguments.script, arguments.modules, free, arguments.setup)
