# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""verl.rewards.math_grading: behaviour a mutation audit found unpinned by test_math_grading.py.

Extraction edge cases a model writes (a stray closing brace, an aside in parentheses, an escaped dollar, prose after
"answer is"), the separators normalize_equivalents must leave alone, and the pool's refusals and its verdict for a
worker that dies mid-verification.
"""

import os
import signal
import threading
import time

import pytest

from tests.processes import wait_gone
from verl.rewards.math_grading import Verdict, VerifierPool, acceptable_answers, extract_answer, normalize_equivalents


# An infinite series sympy tries to sum in closed form for far longer than any test waits (see test_math_grading).
SLOW_ANSWER = r"\sum_{n=1}^{\infty} \frac{\sin(n)}{n^{3}+\log(n)}"


@pytest.mark.parametrize(
    "response, answer",
    [
        (r"So \frac{1}{2}} is off by a brace, and \boxed{3}", "3"),  # a stray "}" before the box: no IndexError
        (r"\boxed{\left\{ x \mid x > 1 \right.}", r"\left\{ x \mid x > 1 \right."),  # an escaped brace left open
        ("Answer: 4 (since 2+2)", "4"),  # an aside in parentheses is prose
        ("Answer: 12, since 3 * 4 = 12", "12"),  # the comma before the prose is not the answer's
        ("Answer: **12** dollars", "12"),  # bold around the answer, then prose: the bold goes too
        (r"Answer: \$5 per ticket", r"\$5"),  # an escaped dollar opens no math, so " per" ends the answer
        ("Answer: $x = 1 or x = -1$", "x = 1 or x = -1"),  # a word inside math is the answer's
        ("Answer: 42\n\nI hope this answer is **helpful**!", "42"),  # bold prose after "answer is" is prose
        ("Answer: 3 x^2 + 1", "3 x^2 + 1"),  # a one-letter word is a variable, not prose
        ("Answer: $ 12 $", "12"),  # spaces inside the math delimiters
        ("Answer: $$", None),  # an empty math span is no answer
        ("The answer isn't 12.", None),  # "answer is" must end its word
        ("Checking 13 first, the answer is 13.\nAnswer: no", "no"),  # a labelled word answer is no prose
        # a sentence after the label: its subject was the answer ("The")
        ("Answer: The area is 12.", "12"),
        ("Answer: The total is $15$ dollars.", "15"),
        ("Answer: This is 7", "7"),  # "is" a word, not inside "This"
        ("Answer: Area = 12", "12"),
        ("Answer: x = 3", "x = 3"),  # a variable, not a sentence
        # "and" / "or" before another value joins the answers of a problem with two (the roots of a quadratic): the
        # answer was cut at it, "2" against "2, 3"
        ("Answer: 2 and 3", "2 and 3"),
        ("Answer: x = 2 or x = -3", "x = 2 or x = -3"),
        ("The answer is $2$ and $3$.", "$2$ and $3$"),
        ("Answer: a and b", "a and b"),
        ("Answer: 5 and I am sure", "5"),  # before a word it is prose
        ("Answer: 5 or a bit more", "5"),
        ("Answer: 12 or so", "12"),
        # display math on the lines after the marker was no answer (prose) or "$$" (labelled)
        ("Therefore, the answer is\n$$\n42\n$$", "42"),
        ("So the answer is\n\n$$\\frac{1}{2}$$ and that is all.", r"\frac{1}{2}"),
        ("Answer:\n\\[ 7 \\]", "7"),
        ("Answer:\n$$\n\n$$", None),  # an empty display is no answer
        ("Answer: 5\nI hope this answer is\n$$", "5"),  # an unclosed one neither
        ("Answer: " + "\\[" * 5000, None),  # nor many (each searched a bounded way: this stays linear)
    ],
)
def test_extract_answer_edge_cases(response: str, answer: str | None) -> None:
    assert extract_answer(response) == answer


def test_a_json_list_of_answers_may_start_with_white_space() -> None:
    assert acceptable_answers(' ["3", "4"]') == ["3", "4"]
    assert acceptable_answers(" [1, 2)") == [" [1, 2)"]  # an interval stays one answer


@pytest.mark.parametrize(
    "answer, normalized",
    [
        (r"1\,2345", r"1\,2345"),  # the last group has four digits: no thousands separator
        (r"1234\,567", r"1234\,567"),  # the first group has four digits
        (r"5.\overline{AB}", r"5.\overline{AB}"),  # an overline that is no period keeps the point before it
        ("3...", "3..."),  # an ellipsis is no final point
    ],
)
def test_normalize_equivalents_leaves_what_is_no_separator_or_final_point(answer: str, normalized: str) -> None:
    assert normalize_equivalents(answer) == normalized


def test_an_unknown_grader_is_refused_before_any_worker_starts() -> None:
    pool = VerifierPool(max_workers=1)
    try:
        with pytest.raises(ValueError, match="grader 'sympy' is not one of math_verify, mathruler"):
            pool.verify("1", "1", grader="sympy")
        assert pool.worker_pids == []
    finally:
        pool.close()


def test_a_closed_pool_starts_no_worker() -> None:
    pool = VerifierPool(max_workers=1)
    pool.close()
    with pytest.raises(RuntimeError, match="this VerifierPool is closed; create a new one"):
        pool.verify("1", "1")
    assert pool.worker_pids == []


def test_a_worker_that_dies_while_verifying_gives_an_error_and_is_replaced() -> None:
    """The OS's memory killer or a crash in native code ends a busy worker: its sample is "error", not "wrong", the
    batch goes on in a fresh worker, and the call returns."""
    with VerifierPool(max_workers=1) as pool:
        assert pool.verify("1", "1") == Verdict.CORRECT  # started, so the kill below hits a verification
        (pid,) = pool.worker_pids
        result: dict[str, list[Verdict]] = {}

        def grade() -> None:
            result["verdicts"] = pool.verify_many([(SLOW_ANSWER, "1"), ("2", "2")], timeout_s=120.0)

        thread = threading.Thread(target=grade, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while pool._workers[0].task is None and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        thread.join(timeout=60)
        assert not thread.is_alive(), "verify_many never returned after its worker died"
        assert result["verdicts"] == [Verdict.ERROR, Verdict.CORRECT]
        assert len(pool.worker_pids) == 1 and pid not in pool.worker_pids
    assert wait_gone([pid], 5) == []
