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
"""Code generation: run the response's program against the sample's test cases in the sandbox (verl.rewards.sandbox).

Use:
    worker.reward.reward_function=examples/reward_function/code.py:compute_score
    worker.reward.reward_function_kwargs='{all_or_nothing: false, max_workers: 8, wall_s: 10}'

The program is the last fenced code block of the response, tagged python (or py, python3) or untagged; a block
whose closing fence is missing (a truncated response) does not count, one closed on the code's last line does.

ground_truth is a dict, or a JSON string of one, in one of two forms:
    {"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}
        stdin/stdout pairs: the program reads inputs[i] on stdin and passes when its stdout equals outputs[i],
        ignoring trailing whitespace on each line and trailing blank lines.
    {"fn_name": "add", "asserts": ["assert add(1, 2) == 3", ...]}
        each assert runs in its own (forked) process, after the program, and is followed by a line printing a
        random per-run nonce: the case passes only when that line is printed, so a program that exits early with
        status 0 (`os._exit(0)`, `sys.exit()`) fails instead of passing every assert unseen. A program that reads
        stdin at import (an `if __name__ == "__main__":` block calling input()) fails these cases: it gets no input.
A ground truth in neither form raises ValueError naming the sample, before anything runs.

The samples of the batch run in parallel through `run_many_cases` (max_workers at a time): a sample's cases share one
sandboxed interpreter, which forks a fresh child per case, so each case still runs alone under the limits (wall_s,
cpu_s, memory_mb, output_kb, max_processes; see verl.rewards.sandbox.run_python_cases) and cannot see what the
others did, without paying an interpreter start per case. The programs run at a lower priority (`nice`, 10 by
default), so they use the CPU the trainer's processes leave idle rather than slow them.

Scores per sample:
    overall: the pass rate, or with all_or_nothing 1.0 when every case passes and 0.0 otherwise.
    pass_rate, all_passed: the fraction of cases passed, and 1.0 when all did.
    has_code: 1.0 when the response has a program (format); without one every other key is 0.0.
    num_timeout (wall clock or CPU limit), num_memory_limit, num_output_limit, num_process_limit (a fork bomb),
    num_runtime_error (exceptions, crashes, nonzero exits), num_wrong_answer (ran to the end but printed the wrong
    output, or a failed assert): how many cases failed in each way.
"""

import json
import re
import secrets
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verl.rewards.sandbox import SandboxLimits, SandboxResult, run_many_cases


REWARD_NAME = "code"
REWARD_TYPE = "batch"

PYTHON_TAGS = frozenset({"", "python", "py", "python3"})
FAILURE_KEYS = (
    "num_timeout",
    "num_memory_limit",
    "num_output_limit",
    "num_process_limit",
    "num_runtime_error",
    "num_wrong_answer",
)

# The opening fence starts a line (indented, as inside a list, is fine) and names the language; the block ends at the
# next fence, even one that follows code on the same line, as small models often write it.
_FENCED_BLOCK = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", flags=re.MULTILINE | re.DOTALL)
_FAILURES = {
    "timeout": "num_timeout",
    "cpu_limit": "num_timeout",
    "memory_limit": "num_memory_limit",
    "output_limit": "num_output_limit",
    "process_limit": "num_process_limit",
}


@dataclass(frozen=True)
class Case:
    """One run of the program: what it reads on stdin and what makes it pass."""

    stdin: str = ""
    expected_stdout: str | None = None
    """The stdin/stdout form's expected output."""
    assertion: str | None = None
    """The assert form's statement, appended after the program."""


def extract_code(response: str) -> str | None:
    """The last fenced Python (or untagged) code block of the response, dedented; None if there is none."""
    blocks = [match for match in _FENCED_BLOCK.finditer(response) if match.group(1).lower() in PYTHON_TAGS]
    if not blocks:
        return None
    code = textwrap.dedent(blocks[-1].group(2))
    return code if code.strip() else None


def normalize_output(text: str) -> str:
    """Output as compared: trailing whitespace of each line and trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{where}: ground_truth[{key!r}] must be a non-empty list of strings, got {value!r:.200}.")
    return value


def parse_test_cases(ground_truth: Any, where: str) -> list[Case]:
    """The test cases of one sample's ground truth; ValueError naming `where` (the sample) when it is malformed."""
    forms = (
        'either {"inputs": [...], "outputs": [...]} (stdin/stdout pairs) or {"fn_name": "f", "asserts": '
        '["assert f(1) == 2", ...]}'
    )
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{where}: ground_truth is a string but not JSON ({error}); it must be {forms}."
            ) from None
    if not isinstance(ground_truth, Mapping):
        raise ValueError(f"{where}: ground_truth is a {type(ground_truth).__name__}; it must be {forms}.")
    if "asserts" in ground_truth:
        fn_name = ground_truth.get("fn_name")
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise ValueError(f"{where}: ground_truth['fn_name'] must name a Python function, got {fn_name!r}.")
        asserts = _string_list(ground_truth["asserts"], "asserts", where)
        return [Case(assertion=assertion) for assertion in asserts]
    if "inputs" in ground_truth or "outputs" in ground_truth:
        if "fn_name" in ground_truth:
            raise ValueError(
                f"{where}: ground_truth has 'fn_name' with 'inputs'/'outputs' (call-based tests); only stdin/stdout "
                f"pairs and asserts are supported, so it must be {forms}."
            )
        inputs = _string_list(ground_truth.get("inputs"), "inputs", where)
        outputs = _string_list(ground_truth.get("outputs"), "outputs", where)
        if len(inputs) != len(outputs):
            raise ValueError(f"{where}: ground_truth has {len(inputs)} inputs but {len(outputs)} outputs.")
        return [Case(stdin=stdin, expected_stdout=stdout) for stdin, stdout in zip(inputs, outputs)]
    raise ValueError(f"{where}: ground_truth has keys {sorted(map(str, ground_truth))}; it must be {forms}.")


def _suffix(case: Case, nonce: str) -> str:
    """What runs after the program in this case: nothing, or the assert and the line printing the nonce."""
    if case.assertion is None:
        return ""
    return f"\n\n{case.assertion}\nprint({nonce!r})\n"


def _outcome(case: Case, result: SandboxResult, nonce: str) -> str | None:
    """None when the case passed, else the failure key it counts under."""
    if result.status == "ok":
        if case.assertion is None:
            passed = normalize_output(result.stdout) == normalize_output(case.expected_stdout or "")
        else:
            passed = nonce in result.stdout.splitlines()
        return None if passed else "num_wrong_answer"
    if result.status in _FAILURES:
        return _FAILURES[result.status]
    last_line = result.stderr.strip().rsplit("\n", 1)[-1]
    if case.assertion is not None and result.status == "error" and last_line.startswith("AssertionError"):
        return "num_wrong_answer"
    return "num_runtime_error"


def compute_score(
    reward_inputs: list[dict[str, Any]],
    all_or_nothing: bool = False,
    max_workers: int = 4,
    wall_s: float = 10.0,
    cpu_s: float = 5.0,
    memory_mb: int = 1024,
    output_kb: int = 1024,
    max_processes: int = 16,
    nice: int = 10,
) -> list[dict[str, float]]:
    """Score a batch: every case of every sample runs in the sandbox, `max_workers` samples at a time."""
    limits = SandboxLimits(wall_s, cpu_s, memory_mb, output_kb, max_processes, nice)
    cases = [
        parse_test_cases(sample["ground_truth"], f"sample {index} (uid {sample.get('uid')})")
        for index, sample in enumerate(reward_inputs)
    ]
    codes = [extract_code(sample["response"]) for sample in reward_inputs]
    jobs: list[tuple[str, list[tuple[str, str]]]] = []  # (program, [(stdin, code suffix) per case]) per sample
    owners: list[tuple[int, list[tuple[Case, str]]]] = []  # (sample index, [(case, nonce) per case]) per job
    for index, (code, sample_cases) in enumerate(zip(codes, cases)):
        if code is None:
            continue
        nonces = [secrets.token_hex(16) for _ in sample_cases]
        jobs.append((code, [(case.stdin, _suffix(case, nonce)) for case, nonce in zip(sample_cases, nonces)]))
        owners.append((index, list(zip(sample_cases, nonces))))
    results = run_many_cases(jobs, limits, max_workers=max_workers)

    passed = [0] * len(reward_inputs)
    failures: list[dict[str, float]] = [dict.fromkeys(FAILURE_KEYS, 0.0) for _ in reward_inputs]
    for (index, sample_cases), sample_results in zip(owners, results):
        for (case, nonce), result in zip(sample_cases, sample_results):
            failure = _outcome(case, result, nonce)
            if failure is None:
                passed[index] += 1
            else:
                failures[index][failure] += 1.0
    scores = []
    for index, (code, sample_cases) in enumerate(zip(codes, cases)):
        pass_rate = passed[index] / len(sample_cases)
        all_passed = 1.0 if passed[index] == len(sample_cases) else 0.0
        scores.append(
            {
                "overall": all_passed if all_or_nothing else pass_rate,
                "pass_rate": pass_rate,
                "all_passed": all_passed,
                "has_code": 0.0 if code is None else 1.0,
                **failures[index],
            }
        )
    return scores
