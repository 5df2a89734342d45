# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the code sandbox's judging (verl/rewards/sandbox/judge.py) that the scores depend on: how outputs compare,
how failures are counted, and the trainer-side checks of asserts, fed with the values the sandbox would print (no
program runs here, except in the last tests)."""

import ast
import contextlib
import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest
from repo_files import load_repo_file

from verl.rewards import sandbox
from verl.rewards.sandbox import (
    SandboxLimits,
    bootstrap,
    bwrap,
    cgroups,
    constants,
    judge,
    run_python,
    run_python_cases,
)
from verl.rewards.sandbox.limits import SandboxResult


REPO = Path(__file__).resolve().parents[2]
needs_bwrap = pytest.mark.skipif(bwrap.executable() is None, reason="bubblewrap (bwrap) is not installed")


def result(stdout: bytes, status: str = "ok") -> SandboxResult:
    return SandboxResult(status, 0 if status == "ok" else 1, stdout, "", 0.1)


def judged(case: judge.Case, *values: Any) -> bytes:
    """The line the sandbox's judge prints for these values (bools, ints and floats) in `case`."""
    tagged = [
        value if type(value) is bool else ["int", f"{value:x}"] if type(value) is int else ["float", float.hex(value)]
        for value in values
    ]
    return ("\n" + judge.judge_marker(case) + json.dumps(tagged, separators=(",", ":")) + "\n").encode("ascii")


def assert_case(assertion: str, fn_name: str = "f") -> judge.Case:
    [case] = judge.parse_test_cases({"fn_name": fn_name, "asserts": [assertion]}, "sample 0")
    return case


def stdio_case(expected: str) -> judge.Case:
    [case] = judge.parse_test_cases({"inputs": [""], "outputs": [expected]}, "sample 0")
    return case


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        (b"3\t\n", "3\n"),  # a trailing tab
        (b"3\r\n4\r\n", "3\n4"),  # CRLF line endings
        (b"3\n4\n", "3\r\n4\r\n"),  # CRLF in the expected output
        (b"a b \t \nc\n\n\n", "a b\nc"),
        (b"3", "3\n\n"),
    ],
)
def test_trailing_whitespace_and_line_endings_do_not_fail_a_correct_output(stdout: bytes, expected: str) -> None:
    assert judge.outcome(stdio_case(expected), result(stdout)) is None


@pytest.mark.parametrize(("stdout", "expected"), [(b" 3\n", "3\n"), (b"3\n\n4\n", "3\n4\n"), (b"3 4\n", "34\n")])
def test_whitespace_that_is_not_trailing_still_counts(stdout: bytes, expected: str) -> None:
    assert judge.outcome(stdio_case(expected), result(stdout)) == "num_wrong_answer"


def test_normalize_output_drops_trailing_whitespace_and_blank_lines() -> None:
    assert judge.normalize_output("a b \t\r\n c\t\n\n\n") == "a b\n c"
    assert judge.normalize_output("x\n\ny  ") == "x\n\ny"


@pytest.mark.parametrize(
    ("status", "key"),
    [
        ("timeout", "num_timeout"),
        ("cpu_limit", "num_timeout"),  # the reward's docs: num_timeout counts the wall clock or CPU limit
        ("memory_limit", "num_memory_limit"),
        ("output_limit", "num_output_limit"),
        ("process_limit", "num_process_limit"),
        ("error", "num_runtime_error"),
        ("killed", "num_runtime_error"),
    ],
)
def test_each_status_counts_under_its_failure(status: str, key: str) -> None:
    assert judge.outcome(stdio_case("3"), result(b"3\n", status)) == key


@pytest.mark.parametrize(
    ("assertion", "passing", "failing"),
    [
        # a chained comparison holds only where every link holds: 0 < 5 but not 5 < 2
        ("assert 0 < f(1) < 2", 1, 5),
        ("assert 1 <= f(1) <= 1", 1, 0),
        # abs() of the difference: a value far below the expected one is as wrong as one far above it
        ("assert abs(f(1) - 1.0) < 0.01", 1.005, 0.5),
        ("assert abs(1.0 - f(1)) < 0.01", 0.995, 1.5),
        # math.isclose's own defaults, rel_tol=1e-09 and abs_tol=0.0
        ("assert math.isclose(f(1), 1.0)", 1.0 + 1e-10, 1.0 + 1e-7),
        ("assert math.isclose(f(1), 0.0)", 0.0, 1e-12),
        ("assert math.isclose(f(1), 1.0, rel_tol=1e-3)", 1.0005, 1.002),
        ("assert f(1) not in (1, 2)", 3, 2),
    ],
)
def test_trainer_side_checks_decide_as_python_would(assertion: str, passing: Any, failing: Any) -> None:
    case = assert_case(assertion)
    assert judge.outcome(case, result(judged(case, passing))) is None
    assert judge.outcome(case, result(judged(case, failing))) == "num_wrong_answer"


def test_a_value_line_that_is_not_the_last_line_or_not_alone_never_counts() -> None:
    case = assert_case("assert f(2) == 4")
    assert judge.outcome(case, result(judged(case, 4))) is None
    assert judge.outcome(case, result(judged(case, 4) + b"after\n")) == "num_wrong_answer"
    assert judge.outcome(case, result(judged(case, 4) + judged(case, 4))) == "num_wrong_answer"
    assert judge.outcome(case, result(judged(case, 4, 4))) == "num_wrong_answer"  # one value per expression under test


def test_the_identity_of_two_computed_values_is_decided_where_they_are_objects() -> None:
    """`x is y` of two values the program computed means something only in its process: once serialised, two equal
    values are two objects. The whole comparison is one expression under test there (and is marked so)."""
    case = assert_case("assert f(1) is f(1)")
    assert case.check.expressions == ("f(1) is f(1)",) and case.check.decided_in_sandbox
    assert judge.outcome(case, result(judged(case, True))) is None
    assert judge.outcome(case, result(judged(case, False))) == "num_wrong_answer"


@pytest.mark.parametrize("tag", ["Python", "PY", "Python3"])
def test_the_python_tag_of_a_fence_is_read_in_any_case(tag: str) -> None:
    response = f"```{tag}\nprint(1)\n```\nExample:\n```\n1\n```"
    assert judge.extract_code(response) == "print(1)\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("0 < 5 < 2", False),
        ("1 < 2 < 3", True),
        ("2 not in (1, 3)", True),
        ("1 not in (1, 3)", False),
        ("'a' if 1 > 2 else 'b'", "b"),
        ("'a' if 2 > 1 else 'b'", "a"),
        ("0 or 3", 3),
        ("2 and 0", 0),
        ("1 and 4", 4),
        ("[i for i in range(5) if 0 < i < 3]", [1, 2]),
    ],
)
def test_expected_sides_compare_and_branch_as_python_does(source: str, expected: Any) -> None:
    """Constant expected values are evaluated in the trainer (constants.py): they must be what Python makes."""
    value = constants.evaluate(ast.parse(source, mode="eval").body)
    assert value == expected and type(value) is type(expected)


@pytest.fixture(scope="module")
def code() -> ModuleType:
    return load_repo_file("examples/reward_function/code.py", "code_reward_edges")


@needs_bwrap
def test_the_reward_s_wall_and_cpu_limits_are_not_swapped(code: ModuleType) -> None:
    """A program that sleeps uses no CPU: only wall_s stops it."""
    sleeper = "```python\nimport time\ntime.sleep(3)\nprint(1)\n```"
    cases = {"inputs": [""], "outputs": ["1"]}
    sample = {"response": sleeper, "ground_truth": cases, "uid": "u0"}
    [score] = code.compute_score([sample], wall_s=1.0, cpu_s=10.0)
    assert score["overall"] == 0.0 and score["num_timeout"] == 1.0, score


@needs_bwrap
def test_the_reward_s_open_file_limit_is_applied(code: ModuleType) -> None:
    opener = "```python\nfiles = [open('/dev/null') for _ in range(20)]\nprint(len(files))\n```"
    sample = {"response": opener, "ground_truth": {"inputs": [""], "outputs": ["20"]}, "uid": "u0"}
    [limited] = code.compute_score([sample], max_open_files=8)
    assert limited["overall"] == 0.0 and limited["num_runtime_error"] == 1.0, limited
    [enough] = code.compute_score([sample], max_open_files=64)
    assert enough["overall"] == 1.0, enough


@needs_bwrap
def test_a_crash_of_the_program_is_a_runtime_error_not_a_kill() -> None:
    result = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert (result.status, result.returncode) == ("error", -11), (result.status, result.stderr[-500:])


@needs_bwrap
def test_the_cpu_limit_stops_a_program_within_a_second_of_its_hard_limit() -> None:
    """cpu_s=1: SIGXCPU at one CPU second, SIGKILL at two; a program ignoring SIGXCPU is still the CPU limit."""
    program = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = run_python(program, limits=SandboxLimits(wall_s=20.0, cpu_s=1.0))
    assert (result.status, result.returncode) == ("cpu_limit", -9), (result.status, result.stderr[-500:])
    assert 1.5 < result.cpu_s < 3.0, result.cpu_s


@needs_bwrap
def test_a_file_the_program_writes_is_capped_at_output_kb() -> None:
    program = "with open('/tmp/big', 'wb') as f:\n    f.write(b'x' * 200 * 1024)\nprint('written')\n"
    result = run_python(program, limits=SandboxLimits(output_kb=64))
    assert result.status == "error" and "File too large" in result.stderr, (result.status, result.stderr[-500:])
    assert "written" not in result.stdout


@needs_bwrap
def test_memory_mb_limits_a_process_where_the_run_has_no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no cgroup can be made, RLIMIT_AS (memory_mb) is the only memory limit."""
    sandbox.isolation()  # probed with the cgroups this machine has
    monkeypatch.setattr(cgroups, "available", lambda: None)
    program = "data = bytearray(600 * 2**20)\nprint('allocated')\n"
    result = run_python(program, limits=SandboxLimits(memory_mb=256))
    assert result.status == "memory_limit" and "allocated" not in result.stdout, (result.status, result.stderr)
    assert run_python("print(len(bytearray(64 * 2**20)))\n", limits=SandboxLimits(memory_mb=256)).status == "ok"


def _guarded(network: bool, kill: bool, code: str) -> str:
    """What `code` prints in a fresh interpreter once the bootstrap's audit hook (the fallback where no namespace
    isolates the network or the trainer's processes) is installed."""
    script = (
        f"import importlib.util\nspec = importlib.util.spec_from_file_location('guard', {bootstrap.__file__!r})\n"
        f"guard = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(guard)\n"
        f"guard._install_guard({network}, {kill})\n{code}"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_the_audit_hook_refuses_a_raw_connect_and_spawning() -> None:
    with socket.socket() as probe:  # a port nothing listens on: refused by the kernel, or by the hook first
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import socket, subprocess\n"
        "for attempt in (lambda: socket.socket().connect(('127.0.0.1', PORT)), lambda: subprocess.run(['true'])):\n"
        "    try:\n        attempt()\n        print('allowed')\n"
        "    except Exception as error:\n        print(type(error).__name__)\n"
    ).replace("PORT", str(port))
    assert _guarded(True, False, code).split() == ["PermissionError", "PermissionError"]
    assert _guarded(False, False, code).split() == ["ConnectionRefusedError", "allowed"]


def test_the_audit_hook_refuses_signalling_the_trainer() -> None:
    code = (
        "import os\n"
        "for target in (os.getppid(), os.getpid()):\n"
        "    try:\n        os.kill(target, 0)\n        print('allowed')\n"
        "    except PermissionError:\n        print('refused')\n"
    )
    assert _guarded(False, True, code).split() == ["refused", "allowed"]


@needs_bwrap
def test_the_program_s_folders_from_the_host_are_read_only_whoever_owns_them() -> None:
    """The scratch folder (on the trainer's disk, owned by the run's uid), the system and the interpreter's prefix
    (which a non-root trainer may own) are bound read-only: writes fail with EROFS, not only by permissions."""
    targets = [bwrap.SCRATCH, "/usr", os.path.dirname(bwrap.interpreter())]
    program = (
        "import os\n"
        "for folder in TARGETS:\n"
        "    try:\n        open(os.path.join(folder, 'verl-probe'), 'w').close()\n        print('written')\n"
        "    except OSError as error:\n        print(error.errno)\n"
    ).replace("TARGETS", repr(targets))
    result = run_python(program)
    assert result.status == "ok", result.stderr
    assert result.stdout.split() == [str(errno.EROFS)] * len(targets), (targets, result.stdout)


@needs_bwrap
def test_the_program_sees_no_installed_package_and_has_no_supplementary_group() -> None:
    program = "import os, sysconfig\nprint(os.listdir(sysconfig.get_paths()['purelib']))\nprint(os.getgroups())\n"
    result = run_python(program)
    assert result.status == "ok", result.stderr
    assert result.stdout.splitlines() == ["[]", "[]"], result.stdout


@needs_bwrap
def test_a_case_s_output_is_kept_up_to_output_kb() -> None:
    [flood] = run_python_cases("import sys\nsys.stdout.write('x' * 200 * 1024)\n", [""], SandboxLimits(output_kb=16))
    assert flood.status == "output_limit" and len(flood.stdout_bytes) == 16 * 1024, (flood.status, flood.stderr)


@pytest.mark.parametrize("source", ["7 ** 2 ** 22", "(1 << 2 ** 21) * (1 << 2 ** 21)", "math.factorial(10 ** 5)"])
def test_an_int_past_a_million_bits_is_refused_before_it_is_computed(source: str) -> None:
    started = time.process_time()
    with pytest.raises(constants.TooLarge):
        constants.evaluate(ast.parse(source, mode="eval").body)
    assert time.process_time() - started < 0.5


@needs_bwrap
def test_a_run_dies_with_a_trainer_that_was_killed(tmp_path: Path) -> None:
    """A trainer killed outright (SIGKILL, the OOM killer) cannot end its runs: they end with it. (Its runs get no
    cgroup here, which it could not remove, and their scratch folders are in tmp_path.)"""
    trainer = (
        "from verl.rewards.sandbox import SandboxLimits, cgroups, run_python\ncgroups.available = lambda: ''\n"
        "print('started', flush=True)\n"
        "run_python('import time\\nprint(1, flush=True)\\ntime.sleep(60)\\n', limits=SandboxLimits(wall_s=60.0))\n"
    )
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-c", trainer],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path, "TMPDIR": str(tmp_path)},
    )
    runs: list[psutil.Process] = []
    try:
        assert process.stdout is not None and process.stdout.readline() == b"started\n"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(runs) < 3:  # bwrap, the interpreter, the program (and its init)
            time.sleep(0.2)
            with contextlib.suppress(psutil.Error):
                runs = psutil.Process(process.pid).children(recursive=True)
        assert runs, "the run did not start"
        process.kill()
        process.wait()
        gone, alive = psutil.wait_procs(runs, timeout=10)
        assert alive == [], alive
    finally:
        process.kill()
        process.wait()
        for run in runs:
            with contextlib.suppress(psutil.Error):
                run.kill()


def test_a_program_cannot_read_its_case_s_suffix_before_the_judge_runs() -> None:
    """The suffix (the judge, with its case's secret) came first in the program's stdin file: reading fd 0 again from
    its start gave it away, so a program could print the judge's line itself and leave. Its source lines hold only
    the program while it runs."""
    program = textwrap.dedent(
        """
        import linecache, os, sys
        seen = os.pread(0, 1 << 16, 0) + "".join(linecache.getlines(__file__)).encode()
        print("SEC" + "RET" in seen.decode(errors="replace"), sys.stdin.read())
        """
    )
    [result] = run_python_cases(program, [("the input", "\nprint('judge')  # SECRET\n")])
    assert result.status == "ok", result.stderr
    assert result.stdout == "False the input\njudge\n"


def test_an_out_of_memory_kill_is_that_case_s_alone() -> None:
    """The cgroup's OOM count was read once for the whole harness process: after one case's kill, a later case's
    plain runtime error counted as memory_limit (num_memory_limit for num_runtime_error)."""
    if cgroups.available() is None:
        pytest.skip("no cgroup here: the memory limit is RLIMIT_AS, which counts no kills")
    program = textwrap.dedent(
        """
        import os, time
        if input() == "mem":
            os.fork()
            os.fork()
            x = bytearray(200 * 2**20)
            for i in range(0, len(x), 4096):
                x[i] = 1
            time.sleep(1)
        raise ValueError("plain bug")
        """
    )
    statuses = [
        result.status for result in run_python_cases(program, ["mem\n", "err\n"], SandboxLimits(memory_mb=256))
    ]
    assert statuses == ["memory_limit", "error"]


VIDEO_THEN_SANDBOX = """
import sys
sys.path.insert(0, {tests!r})
from media_files import write_video
from verl.data.multimodal import load_video
from verl.rewards.sandbox import run_many_cases

load_video(write_video({clip!r}, num_frames=8, rate=4), 2.0, None, None)  # decoded on the main thread
results = run_many_cases([("print(input())", [("7\\n", "7")])] * 3, max_workers=3)  # forks from pool threads
print([case.status for cases in results for case in cases])
"""


def test_the_sandbox_starts_from_a_reward_thread_after_a_video_was_read(tmp_path: Path) -> None:
    """Reading a video left PyAV's converter, with swscale's worker threads, cached on the reading thread; the
    sandbox's fork (it runs Python before its exec) freed that cache in the child, which then waited for threads the
    child does not have: every sandboxed program started from a thread hung for ever (CI's run stopped in the code
    reward's tests). In a process of its own, its output to a file: a hung child would hold a pipe open."""
    from repo_files import REPO

    script = tmp_path / "script.py"
    script.write_text(VIDEO_THEN_SANDBOX.format(tests=str(REPO / "tests"), clip=str(tmp_path / "clip.mp4")))
    output = tmp_path / "output.txt"
    with open(output, "w") as out:
        process = subprocess.Popen(
            [sys.executable, str(script)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(120)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait()
    assert code == 0, f"exit {code} (None: hung for 120 s): {output.read_text()[-2000:]}"
    assert output.read_text().splitlines()[-1] == str(["ok"] * 3)


def test_a_run_that_finds_every_uid_slot_busy_stops_with_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """As root, a run claims a dedicated uid slot; with every slot held (by leaked locks, or uids whose zombies no
    PID 1 reaps) the claim looped for ever and the reward thread hung. It now waits as long as runs with its limits
    may hold a slot (SLOT_WAIT_CAP x WAIT_CAP x the larger wall limit), then raises SandboxUnavailable."""
    import fcntl
    import threading

    from verl.rewards.sandbox import plans, runner, slots

    taken = {uid for uid in range(61000, 61003) if slots._uid_exists(uid)}
    assert not taken, f"uids {taken} exist here; pick another range"
    monkeypatch.setattr(slots, "SLOT_DIRECTORIES", (str(tmp_path / "slots"),))
    monkeypatch.setattr(slots, "UID_BASE", 61000)
    monkeypatch.setattr(slots, "MAX_SLOTS", 2)
    monkeypatch.setattr(runner, "_SLOTS", slots._Slots())
    (tmp_path / "slots").mkdir(mode=0o700)
    held = []  # another trainer's runs hold both slots: a flock on each slot's lock file
    for uid in (61000, 61001):
        held.append(os.open(tmp_path / "slots" / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600))
        fcntl.flock(held[-1], fcntl.LOCK_EX)
    limits = SandboxLimits(wall_s=0.05, sample_wall_s=0.05)
    outcome: list[BaseException | None] = []

    def enter() -> None:
        try:
            with runner._workspace(limits, plans._Plan(dedicated_uid=True)):
                outcome.append(None)
        except BaseException as error:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=enter, daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert not thread.is_alive(), "the claim still waits after 30 s with every slot busy"
        assert isinstance(outcome[0], sandbox.SandboxUnavailable), outcome
        assert "none of the 2 sandbox slots (uids 61000 to 61001) came free" in str(outcome[0])
        assert time.monotonic() - started < 10
    finally:
        for handle in held:
            os.close(handle)
    with runner._workspace(limits, plans._Plan(dedicated_uid=True)):  # a slot given back is claimed again
        pass
