# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""verl.utils.sandbox with real subprocesses: every way a program can end, and that nothing of it survives the run.

The fallbacks (an audit hook instead of a network namespace, a process group instead of a PID namespace) run the
same checks under the plans this machine would fall back to, so they keep working where namespaces are refused.
"""

import os
import socket
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from verl.utils import sandbox
from verl.utils.sandbox import SandboxLimits, SandboxResult, isolation, run_many, run_python


REPO = Path(__file__).resolve().parents[2]

FORK_BOMB = "import os\nwhile True:\n    os.fork()\n"
DAEMON = textwrap.dedent(
    """
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            print("daemon running", flush=True)
            time.sleep(60)
        os._exit(0)
    time.sleep(0.3)
    print("main done")
    """
)


def connect_program(port: int) -> str:
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')\n"


def processes_of(result: SandboxResult) -> list[psutil.Process]:
    """Live processes of the run: carrying its marker, or (with a dedicated uid) of its uid."""
    found = []
    for process in psutil.process_iter(["uids", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if result.uid is not None and process.info["uids"].real == result.uid:
                found.append(process)
            elif process.environ().get(sandbox.MARKER_ENV) == result.sandbox_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


def descendants() -> int:
    return len(psutil.Process().children(recursive=True))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP socket listening on 127.0.0.1 that must never see a connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def assert_never_accepted(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()


def test_limits_are_validated_by_name() -> None:
    for name, value in [("wall_s", 0), ("cpu_s", -1.0), ("memory_mb", 0.5), ("output_kb", True), ("max_processes", 0)]:
        with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be a positive"):
            SandboxLimits(**{name: value})


def test_isolation_is_probed_once_and_named() -> None:
    report = isolation()
    assert report["network"] in ("netns", "userns+netns", "audit-hook")
    assert report["user"] in ("dedicated-uid", "user-namespace", "same-uid")
    assert report["processes"] in ("pid-namespace", "process-group")
    assert sandbox._isolation() is sandbox._isolation()
    if os.geteuid() == 0:
        assert report["user"] == "dedicated-uid", "root must get a dedicated uid on this kind of machine"


def test_stdin_to_stdout_with_a_minimal_environment() -> None:
    code = "import os, sys\nprint(input()[::-1])\nprint(sorted(os.environ))\nprint(sys.flags.isolated)\n"
    result = run_python(code, "hello\n")
    assert (result.status, result.returncode) == ("ok", 0), result.stderr
    reversed_line, environ, isolated = result.stdout.splitlines()
    assert reversed_line == "olleh"
    assert eval(environ) == sorted(["HOME", "LANG", "PATH", "TMPDIR", sandbox.MARKER_ENV])
    assert isolated == "1"
    assert result.wall_s < 5


def test_an_exception_is_an_error_with_the_traceback() -> None:
    result = run_python("def f():\n    return 1 / 0\nf()\n")
    assert (result.status, result.returncode) == ("error", 1)
    assert 'solution.py", line 2, in f' in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "<string>" not in result.stderr, "the bootstrap's own frames are not shown"


def test_exit_codes_and_signals() -> None:
    assert run_python("import os\nos._exit(3)").returncode == 3
    assert run_python("import os\nos._exit(3)").status == "error"
    killed = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert (killed.status, killed.returncode) == ("killed", -15)


def test_a_busy_loop_ends_at_the_wall_limit() -> None:
    started = time.monotonic()
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(wall_s=1.0, cpu_s=5.0))
    assert result.status in ("timeout", "cpu_limit")
    assert time.monotonic() - started < 1.0 + 3.0
    sleeping = run_python("import time\ntime.sleep(60)\n", limits=SandboxLimits(wall_s=1.0))
    assert sleeping.status == "timeout" and 1.0 <= sleeping.wall_s < 3.0


def test_cpu_limit() -> None:
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(wall_s=10.0, cpu_s=1.0))
    assert result.status == "cpu_limit", (result.returncode, result.stderr)
    assert result.wall_s < 4.0 and result.cpu_s >= 0.9


def test_memory_limit() -> None:
    result = run_python("data = bytearray(10 * 2**30)\nprint('allocated')\n")
    assert result.status == "memory_limit", result.stderr
    assert "allocated" not in result.stdout


def test_output_flood_is_capped() -> None:
    result = run_python("while True:\n    print('x' * 100)\n", limits=SandboxLimits(output_kb=64))
    assert result.status == "output_limit", result.stderr
    assert 60 * 1024 < len(result.stdout.encode()) <= 64 * 1024
    assert result.wall_s < 5


def test_a_fork_bomb_ends_and_leaves_nothing() -> None:
    before = descendants()
    result = run_python(FORK_BOMB, limits=SandboxLimits(wall_s=5.0))
    assert result.status in ("process_limit", "timeout")
    assert result.wall_s < 5.0 + 3.0
    assert processes_of(result) == []
    assert descendants() == before


def test_a_daemon_is_killed_after_the_run() -> None:
    result = run_python(DAEMON)
    assert result.status == "ok", result.stderr
    assert "daemon running" in result.stdout  # it did start, and outlived the program
    assert result.wall_s < 5
    assert processes_of(result) == []


def test_no_network(listener: socket.socket) -> None:
    result = run_python(connect_program(listener.getsockname()[1]))
    assert result.status == "error"
    assert "connected" not in result.stdout
    assert_never_accepted(listener)


def test_the_scratch_directory_is_fresh_and_removed() -> None:
    code = "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('left.txt', 'w').write('x')\n"
    first, second = run_python(code), run_python(code)
    for result in (first, second):
        cwd, listing = result.stdout.splitlines()
        assert listing == "[]", "the program's own file is deleted before it runs, and no other file is there"
        assert os.path.basename(cwd).startswith("verl-sandbox-")
        assert not os.path.exists(cwd)
    assert first.stdout.splitlines()[0] != second.stdout.splitlines()[0]


def test_the_program_cannot_write_outside_the_scratch_directory() -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root trainer runs programs as another uid; a non-root one shares its own files")
    owned_by_root = tempfile.mkdtemp()
    os.chmod(owned_by_root, 0o755)
    targets = [os.path.join(owned_by_root, "written.txt"), str(REPO / "sandbox-write-probe.txt")]
    try:
        for target in targets:
            result = run_python(f"open({target!r}, 'w').write('x')\n")
            assert result.status == "error" and "PermissionError" in result.stderr
            assert not os.path.exists(target)
    finally:
        for target in targets:
            if os.path.exists(target):
                os.remove(target)
        os.rmdir(owned_by_root)


def test_run_many_keeps_order_and_runs_in_parallel() -> None:
    jobs = [(f"import time\ntime.sleep(1)\nprint(input() + '{i}')\n", "job") for i in range(4)]
    started = time.monotonic()
    results = run_many(jobs, max_workers=4)
    assert time.monotonic() - started < 3.0
    assert [result.stdout for result in results] == [f"job{i}\n" for i in range(4)]
    assert run_many([]) == []
    with pytest.raises(ValueError, match="max_workers"):
        run_many(jobs, max_workers=0)


def _fallback_plans() -> dict[str, sandbox._Plan]:
    """The plans this machine would fall back to: no network namespace, and no PID namespace."""
    ns, net = sandbox._CLONE_NEWNS, sandbox._CLONE_NEWNET
    if os.geteuid() != 0:
        return {
            "audit-hook": sandbox._Plan(False, (), ()),
            "process-group": sandbox._Plan(False, (), (sandbox._CLONE_NEWUSER | net,)),
        }
    reexpose = sandbox._isolation().plan.reexpose
    mount = ns if reexpose else 0
    return {
        "audit-hook": sandbox._Plan(True, (mount,) if mount else (), (), reexpose),
        "process-group": sandbox._Plan(True, (mount | net,), (), reexpose),
    }


@pytest.mark.parametrize("fallback", ["audit-hook", "process-group"])
def test_fallbacks_still_isolate(fallback: str, listener: socket.socket) -> None:
    plan = _fallback_plans()[fallback]
    report = sandbox._probe(plan)
    if report is None:
        pytest.skip(f"the {fallback} plan cannot run a program on this machine")
    assert report["network" if fallback == "audit-hook" else "processes"] == fallback
    limits = SandboxLimits(wall_s=5.0)
    assert sandbox._run("print(input())", "hi", limits, plan).stdout == "hi\n"

    network = sandbox._run(connect_program(listener.getsockname()[1]), "", limits, plan)
    assert network.status == "error" and "connected" not in network.stdout
    assert_never_accepted(listener)
    if fallback == "audit-hook":
        assert "network access and spawning programs are disabled" in network.stderr
        spawn = sandbox._run("import subprocess\nsubprocess.run(['true'])\n", "", limits, plan)
        assert spawn.status == "error" and "PermissionError" in spawn.stderr

    before = descendants()
    daemon = sandbox._run(DAEMON, "", limits, plan)
    assert "daemon running" in daemon.stdout and processes_of(daemon) == []
    bomb = sandbox._run(FORK_BOMB, "", limits, plan)
    assert bomb.status in ("process_limit", "timeout") and bomb.wall_s < 5.0 + 3.0
    assert processes_of(bomb) == []
    assert descendants() == before
