# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The attacks of the sandbox's threat model (docs/rewards.md), one test per class, under the default isolation
(bubblewrap, with a cgroup per run where one can be made): what a program sees, what it leaves, what it can hold."""

import dataclasses
import errno
import glob
import json
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from repo_files import load_repo_file

from verl.rewards import sandbox
from verl.rewards.sandbox import (
    SandboxLimits,
    SandboxResult,
    bootstrap,
    bwrap,
    cgroups,
    harness,
    judge,
    run_python,
    run_python_cases,
    runner,
)


pytestmark = pytest.mark.skipif(
    bwrap.executable() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)


REPO = Path(__file__).resolve().parents[2]

needs_cgroup = pytest.mark.skipif(
    not cgroups.available(), reason="no writable cgroup here: run totals are not enforced (per-process limits only)"
)


def _sysv_segments() -> set[str]:
    with open("/proc/sysvipc/shm", encoding="ascii") as table:
        return {line.split()[1] for line in table.readlines()[1:]}


def test_the_program_sees_no_dataset_project_home_or_host_process(tmp_path: Path) -> None:
    """The dataset named on the trainer's command line, the project, the home folder and the host's processes (whose
    command lines name the dataset) are all out of sight."""
    dataset = tmp_path / "train.jsonl"
    dataset.write_text(json.dumps({"answer": "SECRET-ANSWER-42"}) + "\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(dataset, 0o644)
    home = os.path.expanduser("~")
    targets = [str(dataset), str(REPO / "pyproject.toml"), home, "/etc/passwd", "/var/tmp"]
    code = textwrap.dedent(
        f"""
        import os
        seen = []
        for path in {targets!r}:
            try:
                if os.path.isdir(path):
                    seen.append((path, sorted(os.listdir(path))))
                else:
                    open(path).read()
                    seen.append(path)
            except OSError:
                pass
        commands = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                commands.append(open(f"/proc/{{pid}}/cmdline", "rb").read())
            except OSError:
                pass
        print("seen", seen)
        print("host processes", sum(b"pytest" in command or b"SECRET" in command for command in commands))
        print("processes", len(commands))
        """
    )
    result = run_python(code)
    assert result.status == "ok", result.stderr
    lines = result.stdout.splitlines()
    # a home folder shows at most the way to the interpreter, when it lives there (pyenv): nothing else of it
    interpreter = os.path.realpath(bwrap.interpreter())
    way = interpreter[len(home) + 1 :].split("/")[0] if interpreter.startswith(home + "/") else None
    assert lines[0] in ("seen []", f"seen [({home!r}, [{way!r}])]"), lines
    assert lines[1] == "host processes 0", lines
    assert int(lines[2].split()[1]) <= 3, lines  # bwrap's init, the program (and its supervisor)


def test_nothing_of_a_run_is_left_in_tmp_dev_shm_or_sysv_shared_memory() -> None:
    before_tmp, before_shm, before_sysv = set(os.listdir("/tmp")), set(os.listdir("/dev/shm")), _sysv_segments()
    code = textwrap.dedent(
        """
        import ctypes, os
        for folder in ("/tmp", "/dev/shm", "/var/tmp"):
            try:
                with open(os.path.join(folder, "left-behind-by-a-program"), "wb") as file:
                    file.write(b"x" * 2**20)
                print("wrote", folder)
            except OSError as error:
                print("refused", folder, type(error).__name__)
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget(0, 2**20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        print("sysv", segment >= 0)
        """
    )
    result = run_python(code)
    assert result.status == "ok", result.stderr
    assert "wrote /tmp" in result.stdout and "wrote /dev/shm" in result.stdout  # private, writable folders
    assert "sysv True" in result.stdout
    assert not {name for name in set(os.listdir("/tmp")) - before_tmp if name.startswith("left-behind")}
    assert not {name for name in set(os.listdir("/dev/shm")) - before_shm if name.startswith("left-behind")}
    assert not glob.glob("/var/tmp/left-behind-by-a-program")
    assert _sysv_segments() - before_sysv == set()  # the run's IPC namespace took its segment with it


@needs_cgroup
def test_memory_is_limited_for_the_run_not_per_process() -> None:
    """Four processes of 200 MB each under a 256 MB limit: each fits RLIMIT_AS, together they do not."""
    code = textwrap.dedent(
        """
        import os, time
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = bytearray(200 * 2**20)
                for offset in range(0, len(block), 4096):
                    block[offset] = 1
                time.sleep(3)
                os._exit(0)
            children.append(pid)
        statuses = [os.waitpid(pid, 0)[1] for pid in children]
        print("all held" if all(status == 0 for status in statuses) else "some killed")
        """
    )
    result = run_python(code, limits=SandboxLimits(memory_mb=256, wall_s=20.0))
    assert "all held" not in result.stdout
    assert result.status in ("memory_limit", "ok"), (result.status, result.stderr)
    if result.status == "ok":
        assert result.stdout.strip() == "some killed"


@needs_cgroup
def test_memory_limit_in_cases_counts_the_case_s_children() -> None:
    code = textwrap.dedent(
        """
        import os, time
        case = input()
        for _ in range(int(case)):
            if os.fork() == 0:
                block = bytearray(150 * 2**20)
                for offset in range(0, len(block), 4096):
                    block[offset] = 1
                time.sleep(2)
                os._exit(0)
        for _ in range(int(case)):
            assert os.wait()[1] == 0
        print("held", case)
        """
    )
    one, four = run_python_cases(code, ["1", "4"], SandboxLimits(memory_mb=256, wall_s=20.0))
    assert (one.status, one.stdout) == ("ok", "held 1\n"), one.stderr
    assert four.status != "ok" and "held" not in four.stdout


@needs_cgroup
def test_the_process_budget_is_the_run_s_whatever_the_uid() -> None:
    code = textwrap.dedent(
        """
        import os, time
        made = 0
        try:
            for _ in range(50):
                if os.fork() == 0:
                    time.sleep(2)
                    os._exit(0)
                made += 1
        except OSError:
            pass
        print("made", made)
        """
    )
    result = run_python(code, limits=SandboxLimits(max_processes=8, wall_s=10.0))
    made = int(result.stdout.split()[1])
    assert made <= 8, made


@needs_cgroup
def test_cpu_is_shared_as_one_core_per_run() -> None:
    """Two busy processes for 1.5 s of wall time get about one core between them, not two."""
    code = textwrap.dedent(
        """
        import os, time
        def spin(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
        if os.fork() == 0:
            spin(1.5)
            os._exit(0)
        spin(1.5)
        os.wait()
        """
    )
    result = run_python(code, limits=SandboxLimits(cpu_s=5.0, wall_s=10.0))
    assert result.status == "ok", result.stderr
    assert 0.0 < result.cpu_s <= 1.5 * 1.25, result.cpu_s


def test_a_program_cannot_see_the_other_cases_or_the_harness_descriptors() -> None:
    """The per-case files of the other cases and the harness's result pipe are out of reach through /proc."""
    code = textwrap.dedent(
        """
        import os
        parent = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("PPid:")))
        reached = []
        for path in (f"/proc/{parent}/fd", f"/proc/{parent}/mem", "/proc/1/fd"):
            try:
                os.listdir(path) if path.endswith("fd") else open(path, "rb").close()
                reached.append(path)
            except OSError:
                pass
        print(reached)
        """
    )
    for result in run_python_cases(code, ["", ""]):
        assert (result.status, result.stdout) == ("ok", "[]\n"), (result.stdout, result.stderr)


def test_the_weaker_mode_is_named_in_the_report() -> None:
    """isolation=namespaces is the opt-in weaker mode: its report says the host's filesystem is visible."""
    assert sandbox.isolation("namespaces")["filesystem"] == "host"
    assert sandbox.isolation()["filesystem"] == "bwrap"


def test_what_a_run_writes_is_capped_in_total_and_never_reaches_the_disk() -> None:
    """Files of up to output_kb each, many of them: the working directory is a tmpfs of memory_mb (counted in the run's
    memory), not the host's disk, and the scratch folder the program starts in is read-only."""
    code = textwrap.dedent(
        """
        written = 0
        try:
            for index in range(200):
                with open(f"part{index}", "wb") as file:
                    file.write(b"x" * 1000 * 1024)
                written += 1
        except OSError as error:
            print("stopped", type(error).__name__)
        print("written", written)
        """
    )
    result = run_python(code, limits=SandboxLimits(memory_mb=64, output_kb=1024, wall_s=20.0))
    lines = result.stdout.splitlines()
    assert lines[0] == "stopped OSError", (result.stdout, result.stderr)
    written = int(lines[1].split()[1])
    assert 0 < written * 1000 * 1024 <= 64 * 2**20, written


# ---------------------------------------------------------------------------------------------------------------
# Round two (issue 45): copying a sibling's or an earlier run's answer, forging the judge, stalling the trainer.


@pytest.fixture(scope="module")
def code_reward() -> ModuleType:
    return load_repo_file("examples/reward_function/code.py", "code_reward_attacks")


def _sample(program: str, ground_truth: dict[str, Any]) -> dict[str, Any]:
    return {"response": f"```python\n{program}\n```", "ground_truth": ground_truth, "uid": "attack", "prompt": ""}


def failures_of(score: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in score.items() if key.startswith("num_") and value}


BIG_SUM = {"inputs": ["123456 654321\n"], "outputs": ["777777\n"]}
HONEST_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
SYSCALL = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"


def test_an_answer_left_in_a_kernel_keyring_is_no_use_to_a_later_or_concurrent_run(code_reward: ModuleType) -> None:
    """An honest run stores its answer in its uid's user keyring (which outlives the run) and in a named session
    keyring (which another uid can join); a run that computes nothing looks in both. Keyring calls are refused."""
    stash = (
        HONEST_SUM
        + SYSCALL
        + textwrap.dedent(
            """
        answer = str(a + b).encode()
        libc.syscall(248, b"user", b"verl-answer", answer, len(answer), ctypes.c_long(-4))  # add_key: user keyring
        libc.syscall(250, 1, b"verl-shared")  # keyctl(KEYCTL_JOIN_SESSION_KEYRING, name)
        libc.syscall(248, b"user", b"verl-answer", answer, len(answer), ctypes.c_long(-3))  # the session keyring
        """
        )
    )
    cheat = SYSCALL + textwrap.dedent(
        """
        found = b""
        buffer = ctypes.create_string_buffer(64)
        for keyring in (-4, -3):  # KEY_SPEC_USER_KEYRING, then KEY_SPEC_SESSION_KEYRING after joining
            if keyring == -3:
                libc.syscall(250, 1, b"verl-shared")
            key = libc.syscall(250, 10, ctypes.c_long(keyring), b"user", b"verl-answer", 0)  # KEYCTL_SEARCH
            if key > 0:
                size = libc.syscall(250, 11, ctypes.c_long(key), buffer, 64)  # KEYCTL_READ
                found = buffer.raw[:size]
        print(found.decode())
        """
    )
    honest, copied = code_reward.compute_score([_sample(stash, BIG_SUM), _sample(cheat, BIG_SUM)], max_workers=1)
    assert honest["overall"] == 1.0
    assert copied["overall"] == 0.0, copied
    both = code_reward.compute_score([_sample(stash, BIG_SUM), _sample(cheat, BIG_SUM)], max_workers=2)
    assert both[1]["overall"] == 0.0, both


def test_locks_on_shared_read_only_files_carry_no_answer_to_a_concurrent_run(code_reward: ModuleType) -> None:
    """The honest run signals each bit of its answer by locking one of 20 stdlib files (the same inodes in every
    run); the concurrent cheat reads the bits back with non-blocking locks. flock and fcntl locks are refused."""
    sender = HONEST_SUM + textwrap.dedent(
        """
        import fcntl, glob, os, time
        files = [open(path, "rb") for path in sorted(glob.glob(os.path.dirname(os.__file__) + "/*.py"))[:20]]
        for bit, file in enumerate(files):
            if (a + b) >> bit & 1:
                try:
                    fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    pass
                try:
                    fcntl.lockf(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    pass
        time.sleep(3)
        """
    )
    receiver = textwrap.dedent(
        """
        import fcntl, glob, os, time
        time.sleep(1)
        files = [open(path, "rb") for path in sorted(glob.glob(os.path.dirname(os.__file__) + "/*.py"))[:20]]
        answer = 0
        for bit, file in enumerate(files):
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(file, fcntl.LOCK_UN)
            except BlockingIOError:
                answer |= 1 << bit
            except OSError:
                pass
        print(answer)
        """
    )
    honest, copied = code_reward.compute_score([_sample(sender, BIG_SUM), _sample(receiver, BIG_SUM)], max_workers=2)
    assert honest["overall"] == 1.0
    assert copied["overall"] == 0.0, copied


def test_the_channels_of_shared_kernel_objects_are_refused_outright() -> None:
    """What the filter refuses, each call on its own: keyrings, flock, fcntl record locks, inotify."""
    program = SYSCALL + textwrap.dedent(
        """
        import errno, fcntl, os
        refused = []
        if libc.syscall(248, b"user", b"k", b"v", 1, ctypes.c_long(-4)) < 0 and ctypes.get_errno() == errno.EPERM:
            refused.append("add_key")
        if libc.syscall(250, 0, -4, 0) < 0 and ctypes.get_errno() == errno.EPERM:
            refused.append("keyctl")
        with open(os.__file__, "rb") as file:
            for name, call in (("flock", lambda: fcntl.flock(file, fcntl.LOCK_SH)),
                               ("lockf", lambda: fcntl.lockf(file, fcntl.LOCK_SH)),
                               ("inotify", lambda: os.close(libc.syscall(294, 0)) if libc.syscall(294, 0) >= 0
                                else (_ for _ in ()).throw(OSError(ctypes.get_errno(), "")))):
                try:
                    call()
                except OSError as error:
                    if error.errno == errno.EPERM:
                        refused.append(name)
        print(" ".join(refused))
        """
    )
    for mode in ("bwrap", "namespaces"):
        result = run_python(program, limits=SandboxLimits(isolation=mode))
        assert (result.status, result.stdout) == ("ok", "add_key keyctl flock lockf inotify\n"), (mode, result.stderr)


NOT_PLAIN_FOUR = textwrap.dedent(
    """
    class Four:  # not a plain value: the judge marks it, whatever its __eq__ says
        def __eq__(self, other):
            return True
    def f(x):
        return Four()
    """
)
FORGED = '\n@verl-values [["int","4"]]\n'


@pytest.mark.parametrize(
    "forgery",
    [
        # write the line, then move stdout's offset back so that the judge's line lands before it
        f"import os\nos.write(1, b'x' * 300 + b{FORGED!r})\ntry:\n    os.lseek(1, 0, os.SEEK_SET)\nexcept OSError:\n"
        "    pass\n",
        # a thread that keeps writing the line, so that one lands after the judge's
        f"import os, threading\ndef spam():\n    while True:\n        os.write(1, b{FORGED!r})\n"
        "threading.Thread(target=spam, daemon=True).start()\n",
    ],
    ids=["seek-back", "thread-after-the-judge"],
)
def test_a_judge_line_the_program_wrote_itself_never_counts(code_reward: ModuleType, forgery: str) -> None:
    asserts = {"fn_name": "f", "asserts": ["assert f(2) == 4"]}
    [score] = code_reward.compute_score([_sample(NOT_PLAIN_FOUR + forgery, asserts)])
    assert score["overall"] == 0.0, score
    [honest] = code_reward.compute_score([_sample("def f(x):\n    return x * 2\n", asserts)])
    assert honest["overall"] == 1.0


def test_a_case_finds_no_other_case_s_input_in_files_or_memory() -> None:
    """Each case's code suffix names a token of its own; a case looks for the other cases' tokens in every file it
    can reach (the harness's manifest under bubblewrap stayed readable) and in its own memory (forked from the
    harness, which held every case's suffix)."""
    program = textwrap.dedent(
        r"""
        import glob, os, re
        own = input().strip()
        pattern = re.compile(rb"zz-secret-([0-9]{6})-zz")
        found = set()
        for path in glob.glob("/tmp/verl-sandbox-*/*") + glob.glob("/tmp/verl-sandbox-*/.*"):
            try:
                found.update(pattern.findall(open(path, "rb").read()))
            except OSError:
                pass
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as memory:
            for line in maps:
                addresses, permissions = line.split()[:2]
                if "r" not in permissions or "[vvar" in line or "[vsyscall" in line:
                    continue
                start, end = (int(part, 16) for part in addresses.split("-"))
                try:
                    memory.seek(start)
                    found.update(pattern.findall(memory.read(end - start)))
                except (OSError, OverflowError, ValueError):
                    pass
        print(sorted(token.decode() for token in found if token.decode() != own))
        """
    )
    tokens = [f"{index:06d}" for index in range(100001, 100005)]
    cases = [(token + "\n", f"_token = 'zz-secret-{token}-zz'\n") for token in tokens]
    for mode in ("bwrap", "namespaces"):
        for result in run_python_cases(program, cases, SandboxLimits(isolation=mode)):
            assert (result.status, result.stdout) == ("ok", "[]\n"), (mode, result.stdout, result.stderr[-2000:])


def test_builtins_in_the_test_are_the_trainer_s_not_the_program_s(code_reward: ModuleType) -> None:
    """MBPP writes `assert set(f(x)) == set((4, 5))`: both calls of set run in the trainer, so a program that
    rebinds set (or sorted, len) computes nothing and scores 0; an honest one still scores 1."""
    asserts = {
        "fn_name": "f",
        "asserts": [
            "assert set(f((4, 5, 4))) == set((4, 5))",
            "assert sorted(f([2, 1])) == sorted([1, 2])",
            "assert len(f('ab')) == len('ab')",
        ],
    }
    cheat = "set = sorted = len = lambda *a: 0\ndef f(x):\n    return None\n"
    honest = "def f(x):\n    return list(x)\n"
    cheated, passed = code_reward.compute_score([_sample(cheat, asserts), _sample(honest, asserts)])
    assert cheated["overall"] == 0.0, cheated
    assert passed["overall"] == 1.0, passed


def test_what_runs_in_the_sandbox_sees_the_builtins_as_they_were_before_the_program(code_reward: ModuleType) -> None:
    """`isinstance(...)` and `pow(2, 10)` run in the program's process: a program's own `isinstance`, one it put into
    builtins, or an `os.write` that rewrites the judge's line does not decide them; a function under test that has a
    builtin's name is still the program's."""
    asserts = {"fn_name": "f", "asserts": ["assert isinstance(f(3), list)", "assert f(2) == pow(2, 10)"]}
    cheats = [
        "def isinstance(*a):\n    return True\npow = lambda *a: 0\ndef f(x):\n    return 0\n",
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.pow = lambda *a: 0\ndef f(x):\n    return 0\n",
        "import os\nw = os.write\nos.write = lambda fd, b: w(fd, b.replace(b'false', b'true'))\ndef f(x):\n    return 0\n",
    ]
    honest = "def f(x):\n    return [0] * (2 ** 10 - 1 if x == 2 else x)\n"
    *cheated, passed = code_reward.compute_score([_sample(cheat, asserts) for cheat in [*cheats, honest]])
    assert [score["overall"] for score in cheated] == [0.0, 0.0, 0.0], cheated
    assert passed["overall"] == 0.5, passed  # f(2) is a list, not 1024
    named = {"fn_name": "pow", "asserts": ["assert pow(2, 10) == 1024", "assert pow(3, 2) == 9"]}
    [own] = code_reward.compute_score([_sample("def pow(a, b):\n    return a ** b + (a == 3)\n", named)])
    assert own["overall"] == 0.5, own


def test_all_and_any_over_constants_are_judged_item_by_item_in_the_trainer(code_reward: ModuleType) -> None:
    """`assert all(f(i) == 2 * i for i in range(5))` is five comparisons in the trainer: an object whose `==` is
    always true, or the program's own `all`, passes none of them; an honest program passes."""
    asserts = {
        "fn_name": "f",
        "asserts": [
            "assert all(f(i) == 2 * i for i in range(5))",
            "assert any([f(x) == 8 for x in (1, 4)])",
            "assert not all(f(i) > 2 for i in [1, 2])",
            "assert all(f(i) for i in [])",
        ],
    }
    always_equal = "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()\n"
    own_all = "def all(*a):\n    return True\ndef any(*a):\n    return True\ndef f(x):\n    return None\n"
    honest = "def f(x):\n    return 2 * x\n"
    scores = code_reward.compute_score([_sample(program, asserts) for program in (always_equal, own_all, honest)])
    assert [score["overall"] for score in scores] == [0.25, 0.25, 1.0], scores  # the empty all() is true for all
    check = judge.parse_assert(asserts["asserts"][0], "f")
    assert check.expressions == tuple(f"f({i})" for i in range(5))


@pytest.mark.timeout(60)  # a hang guard only: the decoder refuses the set before building it
def test_a_set_of_colliding_hashes_is_refused_before_it_is_built(code_reward: ModuleType) -> None:
    """35,000 ints that all hash to 0 (multiples of 2**61 - 1) in the judge's "set" form: the program writes the line
    itself, with a marker the test knows (a case's own is secret). Building that set in the trainer would be quadratic
    (seconds holding the GIL)."""
    program = textwrap.dedent(
        """
        import os
        items = ",".join('["int","%x"]' % (k * (2**61 - 1)) for k in range(35000))
        os.write(1, ('\\n@verl-values known [["set",' + items + ']]\\n').encode())
        os._exit(0)
        """
    )
    asserts = {"fn_name": "f", "asserts": ["assert f() == {1}"]}
    [result] = run_python_cases(program, [("", "")], SandboxLimits(output_kb=2048))
    assert result.status == "ok", result.stderr
    [value] = judge.read_values(result.stdout_bytes, 1, judge.VALUE_MARKER + "known ")
    assert isinstance(value, judge._Failed) and value.key == "num_wrong_answer"
    [score] = code_reward.compute_score([_sample(program, asserts)], output_kb=2048)
    assert failures_of(score) == {"num_wrong_answer": 1.0}, score


def test_a_result_holds_its_output_as_bytes_not_four_times_over() -> None:
    """1 MiB of output with one character outside the BMP: decoded to str it takes 4 bytes a character."""
    result = run_python_cases("import sys\nsys.stdout.write('\\U0001F600' + 'x' * (2**20 - 8))\n", [""])[0]
    assert result.status == "ok", result.stderr
    held = sum(sys.getsizeof(getattr(result, field.name)) for field in dataclasses.fields(result))
    assert held < 2**20 + 64 * 1024, held


@pytest.mark.timeout(20)  # a hang guard only: the extractor is one pass over the response
def test_code_extraction_is_linear_on_unclosed_fences() -> None:
    n = 80_000
    responses = [
        "```" + "a" * n,
        "```" + " " * n,
        "```" + "\t" * n,
        "```" + "x" * (n // 2) + " " * (n // 2),
        "```" + " " * (n // 2) + "py" * (n // 4),
        "  ```" + "+#.-" * (n // 4),
        "Here:\n```" + "python3" * (n // 7),
        "```python\n" + "x = 1\n" * (n // 6),
        "text\n" + "```\n" * (n // 4),
        "```python\n" * (n // 10),  # every line an opening fence naming Python
        "```" * (n // 3) + "\n```python\n",  # thousands of fences on one line
    ]
    assert [judge.extract_code(response) for response in responses] == [None] * len(responses)
    assert judge.extract_code("```python\n" + "x = 1\n" * (n // 6) + "```") == "x = 1\n" * (n // 6)


@needs_cgroup
def test_the_runs_together_weigh_less_than_one_of_the_trainer_s_processes() -> None:
    """The folder of all runs' cgroups weighs a quarter of one nice-0 process, so spinning programs take at most that
    share from a busy trainer (nice only orders a run's own processes: the cgroup is what competes with the trainer)."""
    run_python("pass")  # the layout is made with the first run
    layout = cgroups._layout()
    if layout.version == "v2":
        assert cgroups._read(os.path.join(layout.bases[""], "cpu.weight")).strip() == "25"  # a nice-0 task: 100
    else:
        assert cgroups._read(os.path.join(layout.bases["cpu"], "cpu.shares")).strip() == "256"  # a nice-0 task: 1024


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@needs_cgroup
def test_an_honest_program_finishes_beside_a_trainer_that_keeps_every_core_busy() -> None:
    """One busy process per core stands for a trainer generating while programs are judged: a program of ~0.2 CPU
    seconds still finishes well inside wall_s (at the lowest weight, 1/512 of a process, it got ~1% of a core and
    timed out)."""
    import multiprocessing

    busy = [multiprocessing.Process(target=_spin, args=(60.0,)) for _ in range(os.cpu_count() or 1)]
    for process in busy:
        process.start()
    try:
        time.sleep(0.5)
        result = run_python("x = 0\nfor i in range(2 * 10**6):\n    x += i\nprint(x)", "", SandboxLimits(wall_s=10.0))
    finally:
        for process in busy:
            process.kill()
            process.join()
    assert (result.status, result.stdout) == ("ok", f"{sum(range(2 * 10**6))}\n"), (result.status, result.wall_s)


def test_a_sample_s_cases_share_one_time_budget() -> None:
    """A program that sleeps just under wall_s in every case: once sample_wall_s is spent, the cases left time out
    without running, so the sample costs about sample_wall_s, not cases x wall_s."""
    program = "import time\ntime.sleep(0.9)\nprint('slept')\n"
    limits = SandboxLimits(wall_s=1.0, sample_wall_s=2.5)
    results = run_python_cases(program, [""] * 12, limits)
    statuses = [result.status for result in results]
    assert statuses.count("ok") <= 3 and statuses.count("timeout") >= 9, statuses
    assert all(result.status == "timeout" for result in results[3:]), statuses
    spent = sum(result.wall_s for result in results)
    # the reported wall times add up to the budget, not 12 x 1 s; the budget stretches by the cases' waits for a CPU
    # (at most WAIT_CAP x: 4.78 s was seen beside two busy processes and another test process)
    assert spent <= limits.sample_wall_s * bootstrap.WAIT_CAP + 1.0 < 12 * limits.wall_s, spent


def test_a_sample_s_cases_share_one_time_budget_across_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_many_cases (what the code reward calls) keeps one sample_wall_s for all of a job's cases, however many
    processes they need: it ran each CASES_PER_PROCESS chunk with a budget of its own, so a sample of 70 cases (3
    processes) slept 7.5 s against a 2.5 s budget, and 320 cases cost 10 x sample_wall_s."""
    monkeypatch.setattr(harness, "CASES_PER_PROCESS", 3)  # 12 cases in 4 processes, as 128 cases are at 32
    program = "import time\ntime.sleep(0.9)\nprint('slept')\n"
    limits = SandboxLimits(wall_s=1.0, sample_wall_s=2.5)
    [results] = sandbox.run_many_cases([(program, [""] * 12)], limits, max_workers=4)
    statuses = [result.status for result in results]
    assert len(statuses) == 12 and statuses.count("ok") <= 3, statuses
    assert all(result.status == "timeout" for result in results[3:]), statuses
    spent = sum(result.wall_s for result in results)
    assert spent <= limits.sample_wall_s * bootstrap.WAIT_CAP + 1.0 < 12 * limits.wall_s, spent


# ---------------------------------------------------------------------------------------------------------------
# Round three (issue 55): the case's own text, kernel-wide channels, kernel memory no cgroup charges, the trainer's
# cost per sample.

READS_ITS_CASE = textwrap.dedent(
    """
    import os, re, sys
    text = os.pread(0, 1 << 16, 0).decode("utf-8", "replace")  # the case's stdin file: its suffix comes first
    try:
        text += sys._getframe(1).f_locals.get("suffix", "")  # the suffix, in the frame that runs the program
    except Exception:
        pass
    expected = [found for found in re.findall(r"lambda: \\((.*?)\\n\\)", text) if not found.startswith("f(")]
    def f(x):
        return eval(expected[-1]) if expected else None
    """
)
CONSTANT_ARITHMETIC = {
    "fn_name": "f",
    "asserts": [
        "assert f(3) == 2 ** 10",
        "assert f(5) == 10 ** 9 + 7",
        "assert f(1) == [0] * 4",
        "assert f(2) == 1 / 3",
        "assert f(4) == list(range(3)) and f(4)[::-1] == [2, 1, 0][:3]",
        "assert math.isclose(f(6), math.sqrt(2) * 2)",
    ],
}


def test_an_expected_side_never_runs_in_the_program_s_process(code_reward: ModuleType) -> None:
    """Constant arithmetic on the expected side (`2 ** 10`, `10 ** 9 + 7`, `[0] * 4`, `1 / 3`) is evaluated in the
    trainer: a program that reads its case's suffix (its stdin file from offset 0, the caller's frame) finds only the
    expression under test, while a program that knows the answers still passes."""
    honest = "import math\ndef f(x):\n    return {3: 2**10, 5: 10**9 + 7, 1: [0] * 4, 2: 1 / 3, 4: [0, 1, 2], 6: 2 * 2**0.5}[x]\n"
    for assertion in CONSTANT_ARITHMETIC["asserts"]:
        check = judge.parse_assert(assertion)
        assert all(expression.startswith("f(") for expression in check.expressions), check
    passed, cheated = code_reward.compute_score(
        [_sample(honest, CONSTANT_ARITHMETIC), _sample(READS_ITS_CASE, CONSTANT_ARITHMETIC)], max_workers=2
    )
    assert passed["overall"] == 1.0, passed
    assert cheated["overall"] == 0.0, cheated


HONEST_PROGRAMS = [
    (HONEST_SUM, BIG_SUM),
    (
        "from concurrent.futures import ThreadPoolExecutor\nn = int(input())\n"
        "with ThreadPoolExecutor(4) as pool:\n    print(sum(pool.map(lambda i: i * i, range(n))))\n",
        {"inputs": ["1000\n"], "outputs": ["332833500\n"]},
    ),
    (
        "import multiprocessing as mp\ndef square(i):\n    return i * i\nif __name__ == '__main__':\n"
        "    with mp.get_context('fork').Pool(2) as pool:\n        print(sum(pool.map(square, range(int(input())))))\n",
        {"inputs": ["100\n"], "outputs": ["328350\n"]},
    ),
    (
        "import subprocess, sys\nout = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True)\n"
        "print(out.stdout.decode().strip(), input())\n",
        {"inputs": ["x\n"], "outputs": ["42 x\n"]},
    ),
    (
        "import os, sqlite3, tempfile\ndb = sqlite3.connect(':memory:')\ndb.execute('create table t (x)')\n"
        "db.executemany('insert into t values (?)', [(i,) for i in range(100)])\n"
        "with tempfile.TemporaryFile() as scratch:\n    os.posix_fallocate(scratch.fileno(), 0, 4096)\n"
        "    scratch.write(b'y' * 10)\nprint(db.execute('select sum(x) from t').fetchone()[0])\n"
        "print('\\n'.join('line %d' % i for i in range(20000)))\n",
        {"inputs": [""], "outputs": ["4950\n" + "\n".join(f"line {i}" for i in range(20000)) + "\n"]},
    ),
]


def test_honest_programs_pass_under_the_policy_and_are_not_slowed() -> None:
    """Threads (clone3 answers ENOSYS: glibc falls back to clone), a fork pool, a subprocess, sqlite3 in memory, a
    temporary file with posix_fallocate (emulated once fallocate is refused) and 200 KB of output all pass, in CPU
    seconds of their own (wall time on a shared machine says little: runs weigh a quarter of one process)."""
    cases = [judge.parse_test_cases(truth, "honest")[0] for _, truth in HONEST_PROGRAMS]
    jobs = [(program, [case.stdin]) for (program, _), case in zip(HONEST_PROGRAMS, cases)]
    results = [result for [result] in sandbox.run_many_cases(jobs, SandboxLimits(wall_s=30.0), max_workers=2)]
    assert [judge.outcome(case, result) for case, result in zip(cases, results)] == [None] * len(cases), [
        result.stderr[-300:] for result in results
    ]
    assert all(result.cpu_s < 2.0 for result in results), [result.cpu_s for result in results]


KERNEL_CALLS = SYSCALL + textwrap.dedent(
    """
    import errno, fcntl, os, socket, struct
    took = []
    def attempt(name, call):
        try:
            result = call()
        except OSError:
            return
        if result is None or result >= 0:
            took.append(name)
    def syscall(*args):
        result = libc.syscall(*args)
        if result < 0:
            raise OSError(ctypes.get_errno(), "")
        if result == 0 and args[0] == NR["clone"]:  # the child of a clone that went through
            os._exit(0)
        return result
    """
)
NR = {"x86_64": {"clone": 56, "unshare": 272, "fanotify_init": 300, "io_setup": 206, "io_uring_setup": 425,
                 "fallocate": 285, "userfaultfd": 323, "perf_event_open": 298, "sysinfo": 99, "syslog": 103},
      "aarch64": {"clone": 220, "unshare": 97, "fanotify_init": 262, "io_setup": 0, "io_uring_setup": 425,
                  "fallocate": 47, "userfaultfd": 282, "perf_event_open": 241, "sysinfo": 179, "syslog": 116}}  # fmt: skip


def _kernel_calls(body: str) -> str:
    return f"NR = {NR.get(os.uname().machine, NR['x86_64'])!r}\n" + KERNEL_CALLS + textwrap.dedent(body)


@pytest.mark.skipif(os.uname().machine not in NR, reason="system call numbers known for x86_64 and aarch64 only")
def test_machine_wide_channels_are_closed() -> None:
    """fanotify, dnotify (F_NOTIFY) and leases on the shared read-only files, and the machine-wide counters of
    /proc/sys (AIO events, ptys): a concurrent run's activity could be read from each. All refused or hidden; and no
    pty can be taken (each counts against the machine's limit, which no cgroup charges). Under both isolation
    modes: the weaker one covers /proc/sys and the pty multiplexers in a mount namespace of the run's own."""
    program = _kernel_calls(
        """
        attempt("fanotify_init", lambda: syscall(NR["fanotify_init"], 0, 0))
        directory = os.open(os.path.dirname(os.__file__), os.O_RDONLY)
        attempt("F_NOTIFY", lambda: fcntl.fcntl(directory, 1026, 0x80000001))  # DN_MULTISHOT | DN_ACCESS
        with open(os.__file__, "rb") as shared:
            attempt("F_SETLEASE", lambda: fcntl.fcntl(shared, 1024, fcntl.F_RDLCK))
        for counter in ("/proc/sys/fs/aio-nr", "/proc/sys/kernel/pty/nr", "/proc/sys/fs/inode-nr"):
            attempt(counter, lambda: len(open(counter).read()))
        attempt("listing /proc/sys", lambda: len(os.listdir("/proc/sys")) or -1)
        attempt("openpty", lambda: os.openpty() and None)
        print("took", took)
        """
    )
    for limits in (SandboxLimits(), SandboxLimits(isolation="namespaces")):
        for result in (*run_python_cases(program, ["", ""], limits), run_python(program, limits=limits)):
            assert (result.status, result.stdout) == ("ok", "took []\n"), (limits.isolation, result.stderr)


@pytest.mark.skipif(os.uname().machine not in NR, reason="system call numbers known for x86_64 and aarch64 only")
def test_the_machine_wide_counters_of_sysinfo_are_refused() -> None:
    """sysinfo(2) gives the machine's process count, free memory and load averages whatever the namespaces: the
    counters of the hidden /proc/stat, /proc/meminfo and /proc/loadavg. A run read 277, then 497 processes as the
    host started 300, so a concurrent run's forks or allocations carried bits to it. Refused under both modes."""
    program = _kernel_calls(
        """
        attempt("sysinfo", lambda: syscall(NR["sysinfo"], ctypes.create_string_buffer(256)))
        print("took", took)
        """
    )
    for limits in (SandboxLimits(), SandboxLimits(isolation="namespaces")):
        for result in (*run_python_cases(program, [""], limits), run_python(program, limits=limits)):
            assert (result.status, result.stdout) == ("ok", "took []\n"), (limits.isolation, result.stderr)


@pytest.mark.skipif(os.uname().machine not in NR, reason="system call numbers known for x86_64 and aarch64 only")
@pytest.mark.skipif(os.geteuid() != 0, reason="without CAP_SYSLOG the kernel refuses syslog(2) itself")
def test_the_kernel_log_is_refused_even_to_a_process_that_may_read_it() -> None:
    """syslog(2): the kernel log holds other runs' lines (a crash names its process, whose name a program sets), read
    where kernel.dmesg_restrict is 0, or cleared by a program that has CAP_SYSLOG. A process of the trainer (root, so
    the kernel would allow it) installs the filter as the sandbox does: then the call is refused."""
    code = textwrap.dedent(
        f"""
        import ctypes
        from verl.rewards.sandbox import plans
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def buffer_size():  # SYSLOG_ACTION_SIZE_BUFFER
            size = libc.syscall({NR.get(os.uname().machine, NR["x86_64"])["syslog"]}, 10, None, 0)
            return size if size >= 0 else -ctypes.get_errno()
        before = buffer_size()
        assert plans._PRCTL(plans._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
        assert plans._PRCTL(plans._PR_SET_SECCOMP, plans._SECCOMP_MODE_FILTER, ctypes.addressof(plans._FPROG), 0, 0) == 0
        print(before > 0, buffer_size())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["True", str(-errno.EPERM)], done.stderr


@pytest.mark.skipif(os.uname().machine not in NR, reason="system call numbers known for x86_64 and aarch64 only")
def test_kernel_memory_no_cgroup_charges_is_refused() -> None:
    """A user and network namespace of the program's own (and with it packet sockets, whose ring buffers no cgroup
    charges), loopback TCP buffers (uncharged under cgroup v1), AIO contexts (a machine-wide budget the trainer
    needs too) and io_uring, blocks allocated past the size limit on the trainer's files (fallocate KEEP_SIZE on
    stderr, a write to stdin): all refused, under both isolation modes. AF_UNIX sockets stay, but their buffers
    cannot be raised (8 MiB a descriptor at this machine's wmem_max) and RLIMIT_NOFILE bounds their number: the
    data they can queue, charged to no cgroup where the run has none, is at most ~230 KiB x max_open_files a
    process."""
    program = _kernel_calls(
        """
        attempt("unshare(NEWUSER)", lambda: syscall(NR["unshare"], 0x10000000))
        attempt("unshare(NEWNET)", lambda: syscall(NR["unshare"], 0x40000000))
        attempt("clone(NEWUSER)", lambda: os.waitpid(syscall(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0), 0) and None)
        families = {"AF_PACKET": (17, socket.SOCK_RAW), "AF_INET": (socket.AF_INET, socket.SOCK_STREAM),
                    "AF_INET6": (socket.AF_INET6, socket.SOCK_STREAM), "AF_NETLINK": (16, socket.SOCK_RAW)}
        for name, (family, kind) in families.items():
            attempt(name, lambda: socket.socket(family, kind).close())
        attempt("io_setup", lambda: syscall(NR["io_setup"], 64, ctypes.byref(ctypes.c_ulong(0))))
        attempt("io_uring_setup", lambda: syscall(NR["io_uring_setup"], 8, ctypes.create_string_buffer(128)))
        attempt("fallocate(KEEP_SIZE) on stderr", lambda: syscall(NR["fallocate"], 2, 1, 0, 1 << 30))
        attempt("write to stdin", lambda: os.write(0, b"x"))
        attempt("userfaultfd", lambda: syscall(NR["userfaultfd"], 1))  # UFFD_USER_MODE_ONLY: open to any uid
        counter = ctypes.create_string_buffer(struct.pack("IIQ", 1, 64, 0), 64)  # a software clock, this process
        attempt("perf_event_open", lambda: syscall(NR["perf_event_open"], counter, 0, -1, -1, 0))
        left, right = socket.socketpair()  # AF_UNIX stays (multiprocessing, asyncio)
        for option in ("SO_SNDBUF", "SO_RCVBUF"):
            attempt(option, lambda: left.setsockopt(socket.SOL_SOCKET, getattr(socket, option), 1 << 22))
        pairs = []
        try:
            while len(pairs) < 1000:  # empty pairs: a few MiB of the host's memory even where nothing stops them
                pairs.append(socket.socketpair())
        except OSError:
            pass
        if len(pairs) > 32:  # 64 descriptors at most, three of them stdin, stdout and stderr
            took.append(f"{len(pairs)} socket pairs")
        print("took", took)
        """
    )
    for mode in ("bwrap", "namespaces"):
        result = run_python(program, limits=SandboxLimits(isolation=mode))
        assert (result.status, result.stdout) == ("ok", "took []\n"), (mode, result.stderr)
    [result] = run_python_cases(program, [""])
    assert (result.status, result.stdout) == ("ok", "took []\n"), result.stderr


@needs_cgroup
def test_an_inode_flood_is_charged_to_the_run() -> None:
    """Empty files and directories take no tmpfs blocks, only inodes and dentries: kernel memory the run's cgroup
    is charged for, so a flood ends at memory_mb instead of taking the host's memory."""
    program = "import os\nfor i in range(10 ** 7):\n    os.mkdir('/tmp/d%d' % i)\n"
    result = run_python(program, limits=SandboxLimits(memory_mb=32, wall_s=60.0, cpu_s=60.0))
    assert result.status == "memory_limit", (result.status, result.stderr[-500:])


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root trainer's bwrap sandbox cannot remount its tmpfs")
def test_an_inode_flood_is_bounded_where_the_run_has_no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no cgroup can be made (a root trainer in a container whose cgroup folders are read-only), the bootstrap
    remounts the run's tmpfs with nr_inodes: the flood ends at memory_mb x 64 inodes, not at the host's memory."""
    sandbox.isolation()  # probed with the cgroups this machine has
    monkeypatch.setattr(cgroups, "available", lambda: None)
    program = "import os\nn = 0\ntry:\n    while n < 20000:\n        os.mkdir('/tmp/d%d' % n)\n        n += 1\n"
    program += "except OSError as error:\n    print(error.errno)\nprint(n)\n"
    limits = SandboxLimits(memory_mb=32)
    for result in (run_python(program, limits=limits), *run_python_cases(program, [""], limits)):
        assert result.status == "ok", result.stderr
        assert result.stdout.split() == [str(errno.ENOSPC), str(32 * runner.TMPFS_INODES_PER_MB - 1)]


def test_the_trainer_s_cost_per_sample_is_bounded_by_bytes_not_system_calls() -> None:
    """A program doing 10^5 one-byte writes costs the trainer a read per 4 KiB or per 10 ms, not one per write;
    a 1 MiB non-ASCII output is compared as the bytes it is, never decoded to a str of up to 4 bytes a character."""
    program = "import os\nfor _ in range(100000):\n    os.write(1, b'x')\n"
    started = time.process_time()
    [result] = run_python_cases(program, [""], SandboxLimits(wall_s=60.0))
    assert (result.status, len(result.stdout_bytes)) == ("ok", 100000), result.stderr
    assert time.process_time() - started < 0.5
    wide = SandboxResult("ok", 0, ("\U0001f600" + "x" * (2**20 - 8)).encode(), "", 0.1)
    case = judge.Case(expected_stdout="x")
    tracemalloc.start()
    try:
        assert judge.outcome(case, wide) == "num_wrong_answer"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * 2**20, peak


# ---------------------------------------------------------------------------------------------------------------
# Round four (a helper's audit, F1): asserts whose comparison or expected side still ran in the program's process.

ALWAYS_EQUAL = textwrap.dedent(
    """
    class Equal:
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __hash__ = object.__hash__
    def f(*args):
        return Equal()
    """
)
READS_THE_JUDGE_S_FRAME = textwrap.dedent(
    """
    import sys
    inside = []
    def f(*args):  # the judge's expected side, evaluated from its frame, or the loop's `y`
        frame = sys._getframe(1)
        while frame is not None and not inside:
            found = frame.f_locals
            if "expressions" in found and len(found["expressions"]) > 1:
                inside.append(True)  # once: the expected side may be a call of f too
                try:
                    return found["expressions"][1]()
                finally:
                    inside.pop()
            for name in ("y", "b", "expected", "out"):
                if name in found:
                    return found[name]
            frame = frame.f_back
    """
)
WRONG = "def f(*args):\n    return -12345\n"
HONEST_F = textwrap.dedent(
    """
    def f(x):
        if isinstance(x, str):
            return x.upper()
        if isinstance(x, list):
            return [item * item for item in x]
        return x * x
    """
)
DECIDED_IN_THE_PROGRAM = [  # what scored 1.0 for a wrong program (the audit's table), and the judge's line it forged
    ("assert all(f(i) == i * i for i in range(100))", "[true]"),
    ("assert all(f(x) == y for x, y in [(1, 1), (2, 4), (3, 9)])", None),
    ("assert all(f(x) == y for x, y in zip([1, 2, 3], [1, 4, 9]))", None),
    ("assert all(f(i) == i * i for i in range(5) if i)", None),
    ("assert sum(f(i) == i * i for i in range(5)) == 5", '[["list",true,true,true,true,true]]'),
    ("assert f([0, 1, 2]) == [i * i for i in range(3)]", '[["int","0"],["int","0"]]'),
    ("assert f('ab') == 'ab'.upper()", None),
]


def _forger(line: str) -> str:
    """Writes a judge's line of its own, then points descriptor 1 at /dev/null: the judge's line goes nowhere."""
    return (
        f"import os\ndef f(*args):\n    return 0\nos.write(1, b'\\n@verl-values {line}\\n')\n"
        "os.dup2(os.open('/dev/null', os.O_WRONLY), 1)\n"
    )


def test_comprehensions_and_expected_sides_over_constants_are_judged_in_the_trainer(code_reward: ModuleType) -> None:
    """The audit's table: all()/any() past 64 items, with a tuple target, over zip(), with an `if`, a count of
    comparisons, a comprehension or a str method as the expected side. An always-equal object, a program that reads
    the judge's frame, one that forges the judge's line and a wrong answer all score 0 (the first three scored 1.0
    where the comparison or the expected side ran in the sandbox); an honest program scores 1."""
    samples, names = [], []
    for assertion, forged in DECIDED_IN_THE_PROGRAM:
        truth = {"fn_name": "f", "asserts": [assertion]}
        check = judge.parse_assert(assertion, "f")
        assert all(expression.startswith("f(") for expression in check.expressions), check.expressions
        assert not check.decided_in_sandbox, assertion
        programs = {"always_equal": ALWAYS_EQUAL, "frame": READS_THE_JUDGE_S_FRAME, "wrong": WRONG, "honest": HONEST_F}
        if forged is not None:
            programs["forged"] = _forger(forged)
        for name, program in programs.items():
            samples.append(_sample(program, truth))
            names.append((assertion, name))
    scores = code_reward.compute_score(samples, max_workers=2)
    got = {name: score["overall"] for name, score in zip(names, scores)}
    assert got == {name: 1.0 if name[1] == "honest" else 0.0 for name in names}, got


def test_an_assert_still_decided_in_the_program_s_process_is_logged_and_marked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Forms the trainer cannot take apart (an expected side naming the program, a comparison over data it cannot
    evaluate, a truth value computed in the sandbox, all() past 1024 items) still load, as datasets must, but each
    logs one warning per assert text saying how to write it, and its check is marked; the sound forms are not."""
    unsafe = [
        "assert f(3) == g(4)",
        "assert all(f(x) == y for x, y in data)",
        "assert isinstance(f(3), list)",
        "assert all(f(i) == i for i in range(2000))",
        "assert f(3) == 'ab'.encode('utf-16')",
        "assert sum(f(i) > 0 for i in data) == 2",
    ]
    safe = [
        "assert f(3) == 9",
        "assert f(7)",
        "assert not f(4) and f(5) is None",
        "assert set(f((4, 5, 4))) == set((4, 5))",
        "assert math.isclose(f(1), 0.5)",
        "assert all(f(i) == i * i for i in range(1000))",
        "assert any(f(x) == y for x, y in enumerate('abc') if x % 2)",
        "assert sorted(f(i) for i in (3, 1, 2)) == [1, 4, 9]",
        "assert list(map(f, [1, 2])) == [1, 4]",
        "assert f([3, 1], key=lambda x: x > 2) == [3]",
        "assert {k: f(k) for k in range(3)} == {0: 0, 1: 1, 2: 4}",
    ]
    marker = f"  # {time.monotonic_ns()}"  # texts of this run only: each is logged once per process
    judge.parse_assert.cache_clear()
    with caplog.at_level("WARNING", logger=judge.__name__):
        truth = {"fn_name": "f", "asserts": [text + marker for text in unsafe + safe] * 2}
        cases = judge.parse_test_cases(truth, "sample 0")
        judge.parse_assert.cache_clear()
        judge.parse_test_cases(truth, "sample 0")  # parsed anew: still logged once
    marked = [case.check.source for case in cases if case.check.decided_in_sandbox]
    assert marked == [text + marker for text in unsafe] * 2
    logged = [record.getMessage() for record in caplog.records if record.name == judge.__name__]
    assert len(logged) == len(unsafe), logged
    for text, message in zip(unsafe, logged):
        assert repr(text + marker) in message and "decided in the program's process" in message, message
        assert "assert f(3) == 9" in message  # how to write it instead
    assert "g(4)` does not call f()" in logged[0]
    assert "compares in the program's process" in logged[1]
    assert "the truth of `isinstance(f(3), list)`" in logged[2]
