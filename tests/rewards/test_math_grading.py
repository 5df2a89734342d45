# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.rewards.math_grading: answer extraction, verdicts against math-verify itself, and the worker pool's time limit.

Every row of the table is checked twice: against the verdict written in the table (ours, built on math-verify 0.9.0,
surprises included, so an upgrade that changes a verdict shows here) and against math_verify called directly in
this process; the rows where the two differ must be exactly DIFFERS_FROM_MATH_VERIFY (our normalize_equivalents).
"""

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import math_verify
import pytest

from tests.processes import wait_gone
from verl.rewards import math_grading
from verl.rewards.math_grading import (
    Verdict,
    VerifierPool,
    extract_answer,
    last_boxed,
    normalize_ground_truth,
    strip_math_delimiters,
)


# A real input on which the verifier hangs: sympy tries to evaluate this infinite series in closed form and was still
# at it after 30 s (at under 100 MB), so it stands for any adversarial answer.
SLOW_ANSWER = r"\sum_{n=1}^{\infty} \frac{\sin(n)}{n^{3}+\log(n)}"

C, W, U = Verdict.CORRECT, Verdict.WRONG, Verdict.UNPARSABLE

# (response answer, ground truth, our verdict, why the row is here); math-verify's own is the same except in the rows
# of DIFFERS_FROM_MATH_VERIFY.
TABLE = [
    # fractions and decimals
    (r"\frac{1}{2}", r"\frac{1}{2}", C, "identical"),
    (r"\dfrac12", r"\frac{1}{2}", C, "\\dfrac and brace-less arguments"),
    (r"\tfrac{1}{2}", "0.5", C, "\\tfrac against a decimal"),
    ("0.5", r"\frac{1}{2}", C, "decimal against a fraction"),
    ("1/2", r"\frac{1}{2}", C, "slash"),
    (r"\frac{2}{4}", r"\frac12", C, "unreduced fraction"),
    (r"\frac{1}{2}", r"\frac{1}{3}", W, "different fractions"),
    (r"\frac{1}{3}", "0.3333333", C, "a decimal is rounded to 6 places before comparing"),
    (r"\frac{1}{3}", "0.333", W, "3 places are not enough"),
    (r"1\frac{1}{2}", r"\frac{3}{2}", C, "mixed number"),
    (r"1 \frac{1}{2}", "1.5", C, "mixed number with a space"),
    ("12", "12.0", C, "integer against a float"),
    ("5.", "5", C, "a trailing point ends the number (math-verify: not a number)"),
    ("-5.", "-5", C, "a negative number with a trailing point"),
    (r"5.\%", "0.05", C, "a trailing point before a percent sign"),
    ("5.0", "5", C, "a point with a zero after it"),
    ("1.000", "1000", W, "a point is a decimal point, never a thousands separator"),
    # signs
    ("-3", "-3", C, "negative"),
    ("-3", "3", W, "sign matters"),
    (r"-\frac{1}{2}", r"\frac{-1}{2}", C, "where the minus sits"),
    # intervals, unions, sets, tuples
    ("[1,2)", r"\left[1, 2\right)", C, "\\left and \\right"),
    ("[1,2]", "[1,2)", W, "closed against half-open"),
    ("(1,2]", "(1,2)", W, "half-open against open"),
    (r"(-\infty, 1) \cup (2, \infty)", r"(2,\infty)\cup(-\infty,1)", C, "union in another order"),
    (r"(-\infty,1]\cup[2,\infty)", r"(-\infty, 1) \cup (2, \infty)", W, "union with other endpoints"),
    (r"[1,2)\cup[2,3]", "[1,3]", C, "a union that is one interval"),
    (r"[1,2)\cup(2,3]", "[1,3]", W, "a union missing one point"),
    (r"\{1,2,3\}", r"\{3,2,1\}", C, "sets ignore order"),
    (r"\{1,2\}", r"\{1,2,3\}", W, "a missing element"),
    ("1,2,3", "3,2,1", C, "bare lists are read as sets"),
    ("(1,2,3)", "(1,3,2)", W, "tuples keep order"),
    ("(3,2,1)", r"\{1,2,3\}", C, "a tuple matches a set with the same elements"),
    ("(1,2)", "(2,1)", W, "an open interval (or pair) in the wrong order"),
    ("1 < x < 2", "(1,2)", W, "an inequality answer is not turned into the gold interval"),
    ("(1,2)", "1<x<2", C, "an interval answer matches a gold inequality"),
    (r"x \in [1,2]", "[1,2]", C, "membership"),
    (r"\emptyset", r"\{\}", C, "empty set"),
    (r"\varnothing", r"\emptyset", C, "\\varnothing is the empty set (math-verify: a symbol)"),
    (r"\varnothing", r"\{\}", C, "\\varnothing against empty braces"),
    (r"\varnothing", r"\{1\}", W, "the empty set is not a non-empty one"),
    # roots, pi, constants
    (r"\sqrt{8}", r"2\sqrt{2}", C, "simplified root"),
    (r"\sqrt{8}", r"3\sqrt{2}", W, "wrong root"),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", C, "rationalised denominator"),
    (r"\sqrt{2}", "1.414214", C, "decimal to 6 places"),
    (r"\sqrt{2}", "1.414", W, "decimal to 3 places"),
    (r"2\pi", r"2 \pi", C, "spacing"),
    ("6.283185", r"2\pi", C, "pi to 6 places"),
    ("6.283", r"2\pi", W, "pi to 3 places"),
    (r"\pi", "3.14", W, "3.14 is not pi"),
    (r"e^{i\pi}", "-1", W, "Euler's identity is not evaluated"),
    (r"\log_2 8", "3", C, "logarithm evaluated"),
    (r"\binom{5}{2}", "10", C, "binomial evaluated"),
    ("5!", "120", C, "factorial evaluated"),
    # percent and degrees
    (r"50\%", "0.5", C, "percent against its fraction"),
    (r"50\%", "50", C, "percent against the bare number: the sign is dropped for integers"),
    ("0.5", r"50\%", C, "fraction against a percent gold"),
    ("50", r"50\%", C, "bare number against a percent gold"),
    ("5", "0.05", W, "without a percent sign nothing is scaled"),
    (r"30^\circ", "30", C, "degree sign dropped"),
    ("30", r"30^{\circ}", C, "degree gold, bare answer"),
    (r"\frac{\pi}{6}", r"30^\circ", W, "degrees are not converted to radians"),
    ("30°", "30", C, "a degree sign without a superscript"),
    # Unicode and repeating-decimal spellings (math-verify reads them as symbols or not at all)
    ("√2", r"\sqrt{2}", C, "a Unicode root"),
    ("2√3", r"\sqrt{12}", C, "a Unicode root after its factor"),
    ("√(x+1)", r"\sqrt{x+1}", C, "a Unicode root of a bracketed group"),
    ("∛27", "3", C, "a Unicode cube root"),
    ("√2", r"\sqrt{3}", W, "different roots"),
    ("∞", r"\infty", C, "the Unicode infinity"),
    ("(-∞, 2]", r"(-\infty, 2]", C, "an interval to the Unicode infinity"),
    ("½", "0.5", C, "a Unicode fraction"),
    ("1½", r"\frac{3}{2}", C, "a mixed number with a Unicode fraction"),
    ("⅓", "0.5", W, "a Unicode third is no half"),
    (r"0.\overline{3}", r"\frac{1}{3}", C, "a repeating decimal"),
    (r"0.1\overline{6}", r"\frac{1}{6}", C, "a repeating decimal after a fixed digit"),
    ("0.(3)", "1/3", C, "a repeating decimal in parentheses"),
    (r"0.\overline{3}", "0.3", W, "a repeating decimal is not its first digit"),
    (r"30^\circ", "30°", C, "a degree sign in the ground truth"),
    (r"60°, 120°", r"60^\circ, 120^\circ", C, "degree signs in a list"),
    # equations
    ("x=2", "2", C, "an equation answer is unwrapped to its value"),
    ("2", "x=2", C, "a value matches an assignment gold"),
    ("2", "y = 2", C, "whatever the variable's name"),
    ("x=3", "x=2", W, "wrong value"),
    ("y=2", "x=2", W, "both assignments: the variable must match"),
    ("x=2, y=3", "(2,3)", C, "a system of assignments against a tuple"),
    # thousands separators and scientific notation
    ("1,000", "1000", C, "comma separator"),
    ("1{,}000", "1000", C, "TeX comma separator"),
    ("1,000,000", "10^6", C, "separator against a power"),
    (r"1\,000", "1000", C, "a thin-space separator (math-verify reads a product: 1*0)"),
    (r"1\,234\,567", "1234567", C, "two thin-space separators"),
    (r"1\,000.5", "1000.5", C, "a thin-space separator before a decimal point"),
    ("1000", r"1\,000", C, "a thin-space separator in the ground truth"),
    ("(1,000, 2)", "(1000, 2)", W, "a comma inside a tuple separates elements: (1, 0, 2)"),
    (r"1.5\times10^{3}", "1500", C, "\\times notation"),
    (r"6.02\times10^{23}", r"6.02 \cdot 10^{23}", C, "\\times against \\cdot"),
    (r"2\cdot 10^{-3}", "0.002", C, "negative exponent"),
    ("1.5e3", "1500", W, "e notation is read as 1.5 * e * 3 (Euler's e)"),
    ("0.00001", "1e-05", C, "a float column's small value, as Python writes it, is a number in the ground truth"),
    (r"2.5\times10^{-5}", "2.5e-05", C, "e notation in the ground truth against \\times notation"),
    # text and units
    (r"10\text{ cm}", "10", C, "unit in \\text"),
    (r"10\text{ m}^2", "10", C, "unit with a power"),
    (r"\$10", "10", C, "dollar sign"),
    (r"\text{(B)}", "B", C, "choice letter"),
    ("A", "B", W, "other letter"),
    (r"\text{yes}", r"\text{Yes}", C, "text is compared without case"),
    # matrices and complex numbers
    (r"\begin{pmatrix}1 & 2\\ 3 & 4\end{pmatrix}", r"\begin{bmatrix}1 & 2\\ 3 & 4\end{bmatrix}", C, "matrix"),
    (r"\begin{pmatrix}1 & 2\\ 3 & 4\end{pmatrix}", r"\begin{bmatrix}1 & 2\\ 3 & 5\end{bmatrix}", W, "one entry"),
    (r"\begin{pmatrix}1 \\ 2\end{pmatrix}", "(1,2)", W, "a column vector is not a tuple"),
    ("2+3i", "3i+2", C, "complex number in another order"),
    # symbolic
    ("x+1", "1+x", C, "commutativity"),
    ("2x+2", "2(x+1)", C, "factored form"),
    ("x^2", "x^3", W, "different powers"),
    # nothing to compare, and clear non-answers
    ("", "1", U, "empty answer"),
    (r"\text{}", "1", U, "empty text"),
    ("1", "", U, "empty ground truth"),
    ("hello world", "1", W, "words are parsed as symbols, so the verdict is wrong, not unparsable"),
    (r"\frac{1}{0}", "1", W, "division by zero"),
    # a wrapped ground truth (datasets store both forms)
    ("5", r"\boxed{5}", C, "boxed ground truth"),
    ("5", "$5$", C, "ground truth in $...$"),
    (r"\frac{1}{2}", r"$\boxed{0.5}$", C, "both wrappings"),
]

# The pairs where our verdict is not math-verify's (called directly on both sides boxed): the spellings that
# normalize_equivalents rewrites before math-verify sees them. docs/rewards.md lists them.
DIFFERS_FROM_MATH_VERIFY = {
    ("5.", "5"),
    ("-5.", "-5"),
    (r"5.\%", "0.05"),
    (r"\varnothing", r"\emptyset"),
    (r"\varnothing", r"\{\}"),
    (r"1\,000", "1000"),
    (r"1\,234\,567", "1234567"),
    (r"1\,000.5", "1000.5"),
    ("1000", r"1\,000"),
    ("0.00001", "1e-05"),
    (r"2.5\times10^{-5}", "2.5e-05"),
    ("30°", "30"),
    ("√2", r"\sqrt{2}"),
    ("2√3", r"\sqrt{12}"),
    ("√(x+1)", r"\sqrt{x+1}"),
    ("∛27", "3"),
    ("∞", r"\infty"),
    ("(-∞, 2]", r"(-\infty, 2]"),
    ("½", "0.5"),
    ("1½", r"\frac{3}{2}"),
    (r"0.\overline{3}", r"\frac{1}{3}"),
    (r"0.1\overline{6}", r"\frac{1}{6}"),
    ("0.(3)", "1/3"),
    (r"30^\circ", "30°"),
    (r"60°, 120°", r"60^\circ, 120^\circ"),
}


def reference_verdict(answer: str, ground_truth: str) -> Verdict:
    """math_verify called directly, in this process, on the answer boxed and the ground truth as the dataset has it.

    Its signal-based timeouts are off here too: pytest-timeout may own SIGALRM, and every row is fast.
    """
    gold_text = ground_truth if ground_truth.startswith(("$", "\\boxed")) else f"\\boxed{{{ground_truth}}}"
    gold = math_verify.parse(gold_text, parsing_timeout=None)
    parsed = math_verify.parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not gold or not parsed:
        return Verdict.UNPARSABLE
    return Verdict.CORRECT if math_verify.verify(gold, parsed, timeout_seconds=None) else Verdict.WRONG


@pytest.fixture(scope="module")
def pool() -> Iterator[VerifierPool]:
    """One pool for the module: starting workers (a spawn and the math_verify import) is the main cost."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the reference's "timeout is disabled" notice
    with VerifierPool(max_workers=2) as shared:
        yield shared


def test_table_is_large_enough() -> None:
    assert len(TABLE) >= 40
    assert len({(answer, ground_truth) for answer, ground_truth, _, _ in TABLE}) == len(TABLE)


@pytest.mark.parametrize("answer, ground_truth, expected, why", TABLE, ids=[row[3] for row in TABLE])
def test_verdict_matches_math_verify(
    pool: VerifierPool, answer: str, ground_truth: str, expected: Verdict, why: str
) -> None:
    verdict = pool.verify(answer, ground_truth, timeout_s=30.0)
    assert verdict == expected, why
    differs = (answer, ground_truth) in DIFFERS_FROM_MATH_VERIFY
    assert (verdict != reference_verdict(answer, ground_truth)) == differs, why


def test_whole_table_in_one_batch(pool: VerifierPool) -> None:
    """A batch keeps its order whichever worker finishes first; the rows that differ from math-verify are exactly
    the expected ones (a change on either side shows here)."""
    pairs = [(answer, ground_truth) for answer, ground_truth, _, _ in TABLE]
    verdicts = pool.verify_many(pairs, timeout_s=30.0)
    assert verdicts == [expected for _, _, expected, _ in TABLE]
    differing = {pair for pair, verdict in zip(pairs, verdicts) if verdict != reference_verdict(*pair)}
    assert differing == DIFFERS_FROM_MATH_VERIFY


def test_verdicts_are_strings(pool: VerifierPool) -> None:
    verdict = pool.verify("0.5", r"\frac12")
    assert verdict == "correct" and isinstance(verdict, str)
    assert pool.verify(None, "1") == "unparsable"  # no extracted answer: no worker involved
    assert pool.verify_many([]) == []


def test_hung_verification_ends_only_that_sample(pool: VerifierPool) -> None:
    pool.verify("1", "1")  # workers up, so start-up is not timed below
    timeout_s = 1.5
    pairs = [
        ("1/2", "0.5"),
        (SLOW_ANSWER, "1"),
        ("3", "4"),
        (r"\sqrt{8}", r"2\sqrt{2}"),
        (None, "1"),
        ("x=2", "2"),
    ]
    started = time.monotonic()
    verdicts = pool.verify_many(pairs, timeout_s=timeout_s)
    elapsed = time.monotonic() - started
    assert verdicts == [Verdict.CORRECT, Verdict.TIMEOUT, Verdict.WRONG, Verdict.CORRECT, Verdict.UNPARSABLE, C]
    assert elapsed < timeout_s + 5.0
    # The killed worker was replaced, and the pool goes on grading.
    assert len(pool.worker_pids) == 2
    assert pool.verify_many([(r"\dfrac12", "0.5"), ("2", "3")], timeout_s=10.0) == [C, W]


def test_two_hung_samples_in_one_batch(pool: VerifierPool) -> None:
    """Both workers can be killed within one call; the rest waits for their replacements."""
    pairs = [(SLOW_ANSWER, "1"), (SLOW_ANSWER, "2"), ("1", "1"), ("1", "2")]
    assert pool.verify_many(pairs, timeout_s=1.0) == [Verdict.TIMEOUT, Verdict.TIMEOUT, C, W]


def test_killed_worker_process_is_gone(pool: VerifierPool) -> None:
    before = set(pool.worker_pids)
    assert pool.verify(SLOW_ANSWER, "1", timeout_s=1.0) == Verdict.TIMEOUT
    replaced = before - set(pool.worker_pids)
    assert len(replaced) == 1
    assert wait_gone([replaced.pop()], 5) == []


def test_workers_leave_the_drivers_group_and_one_that_died_idle_is_replaced() -> None:
    """A signal to the launcher's process group (`timeout 24h python -m verl.trainer.main`, a closed terminal) is the
    driver's to handle: it killed the workers, and the next batch failed with BrokenPipeError (reported as the reward
    function's error, the step lost, exit status 1 instead of 143)."""
    import signal

    with VerifierPool(max_workers=1) as pool:  # one worker: it has answered, so it is past its start
        assert pool.verify_many([("1/2", "0.5"), ("2", "2")]) == [C, C]
        assert all(os.getpgid(pid) != os.getpgrp() for pid in pool.worker_pids)
        pids = pool.worker_pids
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        assert wait_gone(pids, 5) == []
        assert pool.verify_many([("1/2", "0.5"), ("2", "2")]) == [C, C]


def test_close_stops_workers_and_refuses_work() -> None:
    with VerifierPool(max_workers=1) as pool:
        assert pool.verify("2", "2") == C
        pids = pool.worker_pids
    assert pool.closed and pool.worker_pids == []
    assert wait_gone(pids, 5) == []
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.verify("2", "2")


def test_no_worker_survives_interpreter_exit() -> None:
    """A script that never closes its pools (its own and the shared one) leaves no worker behind."""
    script = (
        "from verl.rewards import math_grading\n"
        "pool = math_grading.VerifierPool(max_workers=1)\n"
        "assert pool.verify('1/2', '0.5') == 'correct'\n"
        "assert math_grading.verify_many([('2', '2')], max_workers=1) == ['correct']\n"
        "print(*pool.worker_pids, *math_grading.get_shared_pool().worker_pids)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=_repo_root()
    )
    assert result.returncode == 0, result.stderr
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    assert wait_gone(pids, 5) == []


BUSY_SCRIPT = f"""
import os, signal, threading, time
from verl.rewards import math_grading
pool = math_grading.get_shared_pool(max_workers=1)
threading.Thread(target=pool.verify, args=({SLOW_ANSWER!r}, "1", 600.0), daemon=True).start()
while not (pool.worker_pids and pool._workers[0].task is not None):
    time.sleep(0.05)
print(*pool.worker_pids, flush=True)
"""


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_no_hung_worker_survives_its_parent(ending: str) -> None:
    """The parent ends while a worker hangs in sympy: at exit the pool kills it (close() does not wait for the busy
    thread); after a SIGKILL, which runs no exit code, the worker notices its parent is gone and exits itself."""
    script = BUSY_SCRIPT + ("os.kill(os.getpid(), signal.SIGKILL)\n" if ending == "sigkill" else "")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=_repo_root()
    )
    assert time.monotonic() - started < 30.0
    assert result.returncode == (-9 if ending == "sigkill" else 0), result.stderr
    (pid,) = [int(pid) for pid in result.stdout.split()]
    assert wait_gone([pid], 5) == []


def test_shared_pool_is_reused_and_resized() -> None:
    try:
        assert math_grading.verify("0.5", r"\frac{1}{2}") == C
        shared = math_grading.get_shared_pool()
        assert math_grading.verify_many([("1", "1")], max_workers=shared.max_workers) == [C]
        assert math_grading.get_shared_pool() is shared
        assert math_grading.get_shared_pool(max_workers=shared.max_workers + 1) is not shared
        assert shared.closed
    finally:
        math_grading.close_shared_pool()


def test_matches_any_grades_in_the_shared_pool_of_any_size() -> None:
    """math.py and r1v.py (matches_any) beside math_verify.py with max_workers (a route, a rubric part): matches_any
    asked for a pool of the default size, so it closed the other file's pool, killing its workers under a batch it
    was grading in another thread (streamed rewards: "the VerifierPool was closed while it was verifying"), and
    spawned new workers on every switch."""
    try:
        assert math_grading.verify_many([("1", "1")], max_workers=math_grading.DEFAULT_MAX_WORKERS + 1) == [C]
        shared = math_grading.get_shared_pool()
        pids = shared.worker_pids
        assert math_grading.matches_any("0.5", [r"\frac{1}{2}"], grader="mathruler")
        assert math_grading.matches_any("0.5", [" 0.5 "])
        assert math_grading.get_shared_pool() is shared and not shared.closed
        assert shared.worker_pids == pids
    finally:
        math_grading.close_shared_pool()


def test_arguments_are_checked(pool: VerifierPool) -> None:
    with pytest.raises(ValueError, match="max_workers"):
        VerifierPool(max_workers=0)
    with pytest.raises(ValueError, match="start_method"):
        VerifierPool(start_method="fork")
    with pytest.raises(ValueError, match="timeout_s"):
        pool.verify("1", "1", timeout_s=0)


# --------------------------------------------------------------------------------------------------------------------
# Extraction


@pytest.mark.parametrize(
    "response, answer",
    [
        (r"So $x = \boxed{5}$.", "5"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\left\{ x \mid x^{2} > 1 \right\}}", r"\left\{ x \mid x^{2} > 1 \right\}"),  # escaped braces
        (r"First \boxed{3}, then \boxed{4}.", "4"),  # the last box
        (r"\fbox{7}", "7"),
        (r"\boxed {8}", "8"),  # a space before the brace
        (r"\boxed{ 9 }", "9"),
        (r"\boxed{3} and finally \boxed{\frac{1}{", "3"),  # a box cut off by the length limit is skipped
        (r"\boxed{3} \boxed{}", "3"),  # an empty box is skipped
        (r"\boxed{5}" + "\nAnswer: 6", "5"),  # a box wins over an Answer line
        ("Answer: 42", "42"),
        ("**Answer:** 12", "12"),  # markdown bold, around the marker or the whole line
        ("**Answer: 12.**", "12"),
        ("answer:42.", "42"),  # any case, trailing full stop dropped
        (r"Answer: $\frac{3}{4}$.", r"\frac{3}{4}"),  # math delimiters dropped
        ("Answer: 3\nAnswer:", "3"),  # an empty Answer line does not count
        ("Answer: 3\nSo the answer is 4", "4"),  # the last marker
        ("The final answer is: 7", "7"),
        ("Answer: 12\nbecause of the above", "12"),  # only the rest of the line
        ("The answer is **42**.", "42"),  # bold, then the full stop
        ("**Final Answer**: 42", "42"),
        ("Answer: `13`", "13"),  # markdown code: math-verify found no answer in it
        ("Answer: **`$13$`**.", "13"),
        ("Answer:\n7", "7"),  # on the next line, as DAPO's pattern reads it
        ("Answer: 12 dollars", "12"),  # up to the first word of prose: math-verify read "12*d*o*l*l*a*r*s"
        ("Answer: $12$ dollars", "12"),
        ("The answer is 5 because 2+2=4", "5"),  # math-verify took the equation's 4
        (r"Answer: $\frac{1}{2}$ of the pie, since", r"\frac{1}{2}"),
        ("Answer: 1,000 dollars", "1,000"),
        (r"Answer: 3 \text{ dollars}", r"3 \text{ dollars}"),  # a word inside braces is the answer's
        (r"Answer: x \in (1,2)", r"x \in (1,2)"),  # a LaTeX command is no prose
        ("So the answer is x = 3.", "x = 3"),  # one letter is no word
        ("Final Answer: The final answer is $42$. I hope it is correct.", "42"),  # Minerva's format
        ("Answer: 42\n\nI hope this answer is helpful!", "42"),  # "answer is" and a word: prose
        ("The answer is 42. I'm confident this answer is correct.", "42"),
        ("The answer is yes", "yes"),  # ... unless nothing else gives an answer
        ("Answer: 42\n\nI hope this answer is a help.", "42"),  # one letter and a word: prose too ("a" scored 0)
        ("Answer: 42\nThis answer is a bit long, but it is right.", "42"),
        ("The answer is B.", "B"),
        ("Answer: 0.5.", "0.5"),
        ("Answer: 3!", "3!"),
        ("No final answer here.", None),
        ("", None),
        (r"\boxed{", None),
    ],
)
def test_extract_answer(response: str, answer: str | None) -> None:
    assert extract_answer(response) == answer


# One megabyte of boxes that never close (each with unclosed braces inside) after a complete one: the old extraction
# scanned to the end of the text from every box, and was still running after 90 s on this input.
UNCLOSED_BOX = r"\boxed{\frac{1}{" + "{" * 3
HOSTILE_BOXES = r"So \boxed{42}. " + UNCLOSED_BOX * (1_000_000 // len(UNCLOSED_BOX))


@pytest.mark.timeout(30)
def test_extraction_is_linear_on_hostile_responses() -> None:
    """Extraction runs in the trainer's process, outside the pool's time limit, so it must be linear in the length."""
    assert len(HOSTILE_BOXES) > 1_000_000
    assert extract_answer(HOSTILE_BOXES) == "42"
    assert normalize_ground_truth(HOSTILE_BOXES) == "42"
    assert extract_answer(HOSTILE_BOXES[15:]) is None  # only open boxes
    # Boxes nested 150,000 deep, all closed: the innermost is empty, so the one around it is the answer.
    assert last_boxed(r"\boxed{" * 150_000 + "}" * 150_000) == r"\boxed{}"
    assert extract_answer("{" * 1_000_000 + r"\boxed{7}") == "7"
    # 100,000 empty "Answer:" lines after the real one (each used to copy the rest of the text).
    assert extract_answer("Answer: 42\n" + "Answer: .\n" * 100_000) == "42"
    assert extract_answer("answer: " * 200_000) == "answer:"
    separated = "1" + r"\,000" * 200_000
    assert math_grading.normalize_equivalents(separated) == "1" + "000" * 200_000
    assert normalize_ground_truth("1" * 200_000) == "1" * 200_000  # no e notation to write out
    # A long run of spaces inside an answer line (a degenerate response) before a digit, a word or "and 3": the end of
    # the answer and its edges were searched from each of the run's characters, quadratic (16,000 spaces took 6 s).
    started = time.monotonic()
    for tail in ("2", "x1", "and 3"):
        assert extract_answer("Answer: 1" + " " * 50_000 + tail).startswith("1")
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    "answer, normalized",
    [
        (r"1\,000", "1000"),
        ("1{,}000", "1000"),
        (r"-1\,234\,567.5", "-1234567.5"),
        (r"0.123\,456", r"0.123\,456"),  # groups after a decimal point are left alone
        (r"12\,34", r"12\,34"),  # not groups of three
        ("1,000", "1,000"),  # left to math-verify, which reads it by context
        ("5.", "5"),
        ("x = 5.", "x = 5"),
        ("(5., 3.)", "(5, 3)"),
        ("5.5", "5.5"),
        ("5.x", "5.x"),
        (r"0.\overline{3}", r"\frac{1}{3}"),  # a repeating decimal: its exact fraction
        (r"-2.1\overline{42}", r"-\frac{707}{330}"),  # 2.1424242... = 2121 / 990
        ("0.(3)", r"\frac{1}{3}"),
        ("(0.5,(3))", "(0.5,(3))"),  # a bracket after a decimal's digits only, not after a comma
        ("√2/2", r"\sqrt{2}/2"),
        ("∜{16}", r"\sqrt[4]{16}"),
        ("√", "√"),  # no operand: left as written
        ("3¾", r"\frac{15}{4}"),
        ("x ∈ (-∞, ∞)", r"x ∈ (-\infty , \infty )"),
        (r"\varnothing", r"\emptyset"),
        (r"\{\varnothing\}", r"\{\emptyset\}"),
        (r"\varnothingness", r"\varnothingness"),
        ("30°", r"30^{\circ}"),
        ("30 °", r"30^{\circ}"),
        (r"30\degree", r"30^{\circ}"),
        ("30^°", "30^°"),  # a superscript already, as math-verify reads it
        ("30^{°}", "30^{°}"),
    ],
)
def test_normalize_equivalents(answer: str, normalized: str) -> None:
    assert math_grading.normalize_equivalents(answer) == normalized


def test_last_boxed_ignores_other_commands() -> None:
    assert last_boxed(r"\boxedx{1}") is None  # not \boxed followed by a brace
    assert last_boxed(r"\boxed{a{b}c}") == "a{b}c"


@pytest.mark.parametrize(
    "ground_truth, normalized",
    [
        ("5", "5"),
        ("$5$", "5"),
        ("$$5$$", "5"),
        (r"\(x+1\)", "x+1"),
        (r"\[x+1\]", "x+1"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"$\boxed{2}$", "2"),
        ("  7 ", "7"),
        ("$5", "$5"),  # not a pair of delimiters
        ("1e-05", "0.00001"),  # a float answer column's small value (str(1e-05)): not Euler's e minus 5
        ("$-2.5E+3$", "-2500"),
        ("1.5e3x", "1.5e3x"),  # not a number alone
    ],
)
def test_normalize_ground_truth(ground_truth: str, normalized: str) -> None:
    assert normalize_ground_truth(ground_truth) == normalized


def test_strip_math_delimiters_removes_one_pair() -> None:
    assert strip_math_delimiters("$a$ and $b$") == "$a$ and $b$"  # two spans, not one around the whole text
    assert strip_math_delimiters("$$x$$") == "x"
    assert strip_math_delimiters("$") == "$"


# --------------------------------------------------------------------------------------------------------------------


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
