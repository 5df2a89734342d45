# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl/utils/warm_python.py: a script run through the warm server behaves as `python script.py` does (arguments,
environment, working directory, standard streams, exit status, errors), signals and the runtime's kill of the
launcher's group reach the script and what it started, and without a server the launcher runs the script itself."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.processes import alive, wait_gone
from verl.utils.warm_python import LAUNCHER, WarmPython, script_imports


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import json, os, sys
import json as again
from email import message  # imported by the server beforehand
line = sys.stdin.readline()
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "var": os.environ.get("MY_VAR"), "stdin": line.strip(),
                  "path0": sys.path[0], "name": __name__, "extra": "/tmp/extra-path" in sys.path, "nice": os.nice(0)}))
print("to stderr", file=sys.stderr)
mode = os.environ.get("MODE", "")
if mode == "raise":
    raise KeyError("boom")
if mode == "message":
    sys.exit("a message")
sys.exit(int(os.environ.get("CODE", "0")))
"""

SLEEPER = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""


@pytest.fixture
def warm(tmp_path):
    servers = WarmPython()
    yield servers
    servers.close()


def test_the_imports_of_a_script_are_found_wherever_they_are():
    source = "import os, json as j\nfrom a.b import c\nfrom . import rel\ndef f():\n    import inner\n"
    assert script_imports(source) == ["os", "json", "a.b", "inner"]


@pytest.mark.parametrize("mode", ["", "raise", "message"])
def test_a_script_runs_as_a_plain_python_runs_it(warm, tmp_path, mode):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "script.py").write_text(SCRIPT)
    command = warm.command("script.py", str(tmp_path / "work"))
    assert command[1:3] == ["-S", LAUNCHER]
    pythonpath = os.pathsep.join(filter(None, ["/tmp/extra-path", os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "MY_VAR": "x", "CODE": "3", "MODE": mode, "PYTHONPATH": pythonpath}
    results = []
    for argv in (command, [sys.executable, "script.py"]):
        result = subprocess.run(
            [*argv, "a", "b c"],
            input="hello\n",
            capture_output=True,
            text=True,
            cwd=tmp_path / "work",
            env=env,
            preexec_fn=lambda: os.nice(3),  # as Ray nices its workers; the server's fork takes the launcher's
        )
        results.append(result)
    warm_run, plain = results
    assert warm_run.returncode == plain.returncode == {"": 3, "raise": 1, "message": 1}[mode]
    assert json.loads(warm_run.stdout) == json.loads(plain.stdout)
    assert json.loads(warm_run.stdout)["argv"] == ["script.py", "a", "b c"]
    assert json.loads(warm_run.stdout)["name"] == "__main__" and json.loads(warm_run.stdout)["extra"]
    assert json.loads(warm_run.stdout)["nice"] == os.nice(0) + 3
    if mode == "raise":
        assert "KeyError: 'boom'" in warm_run.stderr and "KeyError: 'boom'" in plain.stderr
    else:
        assert warm_run.stderr == plain.stderr


def _start_sleeper(warm, tmp_path) -> tuple[subprocess.Popen, int, int]:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "pids"
    launcher = subprocess.Popen(
        [*warm.command("sleeper.py", str(tmp_path)), str(pid_file)], cwd=tmp_path, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    script, grandchild = map(int, pid_file.read_text().split())
    assert script != launcher.pid  # the script runs in the server's fork, not in the launcher
    return launcher, script, grandchild


def test_a_terminated_launcher_passes_the_signal_on_and_exits_as_the_script_did(warm, tmp_path):
    launcher, script, grandchild = _start_sleeper(warm, tmp_path)
    launcher.terminate()
    assert launcher.wait(10) == 128 + signal.SIGTERM
    assert wait_gone([script, grandchild]) == []


def test_killing_the_launchers_group_kills_the_script_and_what_it_started(warm, tmp_path):
    """verifiers' subprocess runtime ends a cancelled program with SIGKILL to its process group."""
    launcher, script, grandchild = _start_sleeper(warm, tmp_path)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(10)
    assert wait_gone([script, grandchild]) == []


def test_without_its_server_the_launcher_runs_the_script_itself(warm, tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    command = warm.command("script.py", str(tmp_path))
    warm.close()  # the server is gone; a runtime may still hold the command
    result = subprocess.run([*command, "z"], input="", capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and json.loads(result.stdout)["argv"] == ["script.py", "z"]


def test_a_server_that_drops_the_request_unread_leaves_the_launcher_to_run_the_script(tmp_path):
    """A server ended as its run stops (a signal while the workers start) closes a request it has not read: the
    launcher's read of the child's pid failed with ConnectionResetError, a traceback the raylet printed into the run's
    output. As for a server that closed after reading it, nothing ran: the launcher runs the script itself. The server
    here is a stand-in: a socket that takes the request and closes unread."""
    import socket
    import threading

    (tmp_path / "script.py").write_text(SCRIPT)
    address = str(tmp_path / "server.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(1)

    def drop_unread() -> None:
        connection, _ = server.accept()
        connection.recv(1, socket.MSG_PEEK)  # the request has come
        connection.close()  # unread: the launcher's next read is reset

    thread = threading.Thread(target=drop_unread, daemon=True)
    thread.start()
    command = [sys.executable, "-S", LAUNCHER, address, "script.py", "z"]
    result = subprocess.run(command, input="", capture_output=True, text=True, cwd=tmp_path, timeout=60)
    thread.join(10)
    server.close()
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0 and json.loads(result.stdout)["argv"] == ["script.py", "z"]


def test_forks_of_one_server_draw_their_own_random_numbers(warm, tmp_path):
    """As fresh processes do: numpy's global generator (imported by the server) and Python's `random`."""
    (tmp_path / "draw.py").write_text(
        "import random\nimport numpy.random\nprint(numpy.random.random(), random.random())\n"
    )
    command = warm.command("draw.py", str(tmp_path))
    draws = [subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=True).stdout for _ in "ab"]
    assert "numpy.random" in script_imports((tmp_path / "draw.py").read_text())
    first, second = (draw.split() for draw in draws)
    assert first[0] != second[0] and first[1] != second[1], draws


def test_copies_of_a_script_share_one_server(warm, tmp_path):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "script.py").write_text(SCRIPT)
    first, second = (warm.command("script.py", str(tmp_path / name)) for name in ("one", "two"))
    assert first == second and len(warm._servers) == 1
    folder = os.path.dirname(first[3])
    warm.close()
    assert not os.path.exists(folder)  # the socket's temp folder goes with the servers


def test_a_server_ends_with_the_process_that_started_it(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    starter = (
        "import sys, time\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from verl.utils.warm_python import WarmPython\n"
        "servers = WarmPython()\n"
        f"servers.command('script.py', {str(tmp_path)!r})\n"
        "(process, _), = servers._servers.values()\n"
        "print(process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    server = int(parent.stdout.readline())
    assert alive(server)
    parent.kill()  # as Ray kills a worker: no atexit, no close
    parent.wait()
    assert wait_gone([server]) == []


READS_AT_IMPORT = """
import os, sys
import imported_module  # the server imports it in the first request's environment
print(os.getpid(), imported_module.SEEN, imported_module.SETUP, os.environ.get("FREE"), os.environ.get("OTHER"),
      os.environ.get("SET_BY_IMPORT"))
"""

IMPORTED_MODULE = """
import os
SEEN = os.environ.get("OTHER")  # read once, at import
SETUP = os.environ.get("SET_BY_SETUP")  # the server's setup function ran before its imports
os.environ["SET_BY_IMPORT"] = "yes"
"""

SETUP_MODULE = """
import os
def setup():
    os.environ["SET_BY_SETUP"] = "done"
"""


def test_a_server_like_its_first_request_forks_only_for_requests_with_that_environment(warm, tmp_path):
    """Ray's workers: a module that reads a variable at import sees the value of the process it runs in. The server
    imports in its first request's environment and forks only for requests whose environment differs in the free
    names alone; any other runs plainly (and so imports with its own value)."""
    (tmp_path / "script.py").write_text(READS_AT_IMPORT)
    (tmp_path / "imported_module.py").write_text(IMPORTED_MODULE)
    (tmp_path / "setup_module.py").write_text(SETUP_MODULE)
    address = warm.server(str(tmp_path / "script.py"), ("imported_module",), ("FREE",), "setup_module.setup")
    assert warm.wait(address)
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    base = {**os.environ, "PYTHONPATH": pythonpath, "OTHER": "a"}
    seen = []
    for env in ({**base, "FREE": "1"}, {**base, "FREE": "2"}, {**base, "FREE": "3", "OTHER": "b"}):
        launcher = subprocess.Popen(
            [sys.executable, "-S", LAUNCHER, address, "script.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE
        )
        out, _ = launcher.communicate(timeout=60)
        pid, imported, setup, free, other, set_by_import = out.decode().split()
        seen.append((int(pid) == launcher.pid, imported, setup, free, other, set_by_import))
    assert seen == [
        (False, "a", "done", "1", "a", "yes"),  # forked by the server (which imported with OTHER=a)
        (False, "a", "done", "2", "a", "yes"),  # forked: only FREE differs
        (True, "b", "None", "3", "b", "yes"),  # OTHER differs: the launcher ran the script itself, importing anew
    ]


def test_a_server_whose_imports_started_a_thread_does_not_fork(warm, tmp_path):
    """A fork copies only the forking thread, with any lock another thread held: such a server starts every script
    plainly."""
    (tmp_path / "threaded_module.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    (tmp_path / "script.py").write_text("import os\nimport threaded_module\nprint(os.getpid())\n")
    address = warm.server(str(tmp_path / "script.py"), ("threaded_module",), ())  # imports with the request's path
    assert warm.wait(address)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    launcher = subprocess.Popen(
        [sys.executable, "-S", LAUNCHER, address, "script.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE
    )
    out, _ = launcher.communicate(timeout=60)
    assert int(out) == launcher.pid  # the launcher ran it itself
