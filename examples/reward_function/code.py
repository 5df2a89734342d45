# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Code generation: run the response's program against the sample's test cases in the sandbox (verl.rewards.sandbox).

Use:
    worker.reward.reward_function=examples/reward_function/code.py:compute_score
    worker.reward.reward_function_kwargs='{all_or_nothing: false, max_workers: 8, wall_s: 10}'

The program is the last fenced code block of the response tagged python (or py, python3), else its last untagged
one; a block whose closing fence is missing (a truncated response) does not count, one closed on the code's last line
does.

ground_truth is a dict, or a JSON string of one, in one of three forms:
    {"inputs": ["1 2\\n", ...], "outputs": ["3\\n", ...]}
        stdin/stdout pairs: the program reads inputs[i] on stdin and passes when its stdout equals outputs[i],
        ignoring trailing ASCII whitespace on each line and trailing blank lines.
    {"fn_name": "add", "inputs": [[1, 2], ...], "outputs": [3, ...]}
        call-based: inputs[i] is the list of positional arguments, outputs[i] the JSON value add must return
        (a tuple matches a JSON list).
    {"fn_name": "add", "asserts": ["assert add(1, 2) == 3", ...]}
        each assert is split (with `ast`) into the expressions under test and the check around them.
A key whose value is null, and an empty fn_name, count as absent ({"inputs": ..., "outputs": ..., "fn_name": null} is
stdin/stdout, as in APPS and TACO). A ground truth in none of these forms, or an assert that is not one or more assert
statements, raises ValueError naming the sample, before anything runs. In the last two forms the program gets no stdin
and runs as the module `solution`, not `__main__` (as APPS/TACO's grader and HumanEval's harness import it), so an
`if __name__ == "__main__":` block of example calls or input() does not run; stdin/stdout programs run as `__main__`.

The check that decides a case runs in the trainer, on values the sandbox printed, so the program cannot decide its
own verdict (verl/rewards/sandbox/judge.py; docs/rewards.md, "How a case is judged").

The samples of the batch run in parallel through `run_many_cases` (max_workers at a time): a sample's cases share one
sandboxed interpreter, which forks a fresh child per case, so each case still runs alone under the limits (wall_s,
cpu_s, memory_mb, output_kb, max_processes; see verl.rewards.sandbox.run_python_cases) and cannot see what the
others did, without paying an interpreter start per case. All programs together weigh a quarter of one trainer process
for the CPU (their cgroups' folder; where no cgroup can be made, their `nice` of 10 ranks them below the trainer):
beside a busy trainer they take at most that share, and still get enough CPU to finish within their limits.

Scores per sample:
    overall: the pass rate, or with all_or_nothing 1.0 when every case passes and 0.0 otherwise.
    pass_rate, all_passed: the fraction of cases passed, and 1.0 when all did.
    has_code: 1.0 when the response has a program (format); without one every other key is 0.0.
    num_timeout (wall clock or CPU limit), num_memory_limit, num_output_limit (also a value too large to print),
    num_process_limit (a fork bomb), num_runtime_error (exceptions, crashes, nonzero exits, an exception in an
    expression under test), num_wrong_answer (ran to the end but printed the wrong output, a failed check, a value
    that is not plain, or no value printed because the program exited first): how many cases failed in each way.
"""

from typing import Any

from verl.rewards.sandbox import SandboxLimits, run_many_cases
from verl.rewards.sandbox import isolation as isolation_of
from verl.rewards.sandbox.judge import (
    FAILURE_KEYS,
    case_suffix,
    extract_code,
    normalize_output,
    outcome,
    parse_test_cases,
)


__all__ = ["FAILURE_KEYS", "check_setup", "compute_score", "extract_code", "normalize_output", "parse_test_cases"]

REWARD_NAME = "code"
REWARD_TYPE = "batch"


def check_setup(isolation: str = "bwrap", sandbox_endpoint: str = "", **limits: Any) -> None:
    """Before training: the limits and max_workers are valid and the sandbox can run a program here (bubblewrap
    installed and allowed, or the named weaker mode); raises with what to install or set otherwise."""
    max_workers = limits.get("max_workers", 4)
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}.")
    known = ("wall_s", "cpu_s", "memory_mb", "output_kb", "max_processes", "nice", "sample_wall_s", "max_open_files")
    SandboxLimits(**{k: v for k, v in limits.items() if k in known}, isolation=isolation, endpoint=sandbox_endpoint)
    if isolation != "sandbox_fusion":
        isolation_of(isolation)  # probes once: SandboxUnavailable says what is missing


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
    isolation: str = "bwrap",
    sandbox_endpoint: str = "",
    sample_wall_s: float = 20.0,
    max_open_files: int = 64,
) -> list[dict[str, float]]:
    """Score a batch: every case of every sample runs in the sandbox, `max_workers` samples at a time.

    `isolation` is the sandbox's mode ("bwrap", the default; "namespaces", weaker; "sandbox_fusion" with
    `sandbox_endpoint`, a remote service): docs/rewards.md, "Threat model". `sample_wall_s` bounds the wall time of
    all of one sample's cases together (the cases left once it is spent count as timeouts)."""
    limits = SandboxLimits(
        wall_s,
        cpu_s,
        memory_mb,
        output_kb,
        max_processes,
        nice,
        isolation,
        sandbox_endpoint,
        sample_wall_s,
        max_open_files,
    )
    node_budget = max(1024, int(output_kb * 1024) // 4)  # every node prints at least 4 bytes ("null", ",[]")
    cases = [
        parse_test_cases(sample["ground_truth"], f"sample {index} (uid {sample.get('uid')})")
        for index, sample in enumerate(reward_inputs)
    ]
    codes = [extract_code(sample["response"]) for sample in reward_inputs]
    jobs: list[tuple[str, list[tuple[str, str]]]] = []  # (program, [(stdin, code suffix) per case]) per sample
    owners: list[int] = []  # the sample index of each job
    for index, (code, sample_cases) in enumerate(zip(codes, cases)):
        if code is None:
            continue
        jobs.append((code, [(case.stdin, case_suffix(case, node_budget)) for case in sample_cases]))
        owners.append(index)
    results = run_many_cases(jobs, limits, max_workers=max_workers)

    passed = [0] * len(reward_inputs)
    failures: list[dict[str, float]] = [dict.fromkeys(FAILURE_KEYS, 0.0) for _ in reward_inputs]
    for index, sample_results in zip(owners, results):
        for case, result in zip(cases[index], sample_results):
            failure = outcome(case, result)
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
