# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Math answers graded by math-verify (or mathruler, EasyR1's grader), with a hard time limit per sample.

Sympy can run forever on an adversarial answer (`\\boxed{9**9**9}`) and math-verify's SIGALRM limits work only in a
main thread, so verification runs in persistent spawned workers (`VerifierPool`): one that exceeds `timeout_s` is
killed and replaced, and only its sample is "timeout". docs/rewards.md describes the verdicts.
"""

import atexit
import enum
import json
import logging
import multiprocessing
import re
import threading
import time
import unicodedata
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from multiprocessing.connection import Connection, wait
from typing import Any

from verl.rewards.parallel import exit_with_parent
from verl.utils.child_signals import reset_child_signals, signals_held
from verl.utils.numbers import number_text


logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_WORKERS = 2
START_METHODS = ("spawn", "forkserver")
WORKER_START_TIMEOUT_S = 120.0
"""How long a new worker may take to import math_verify before the pool gives up."""
CLOSE_WAIT_S = 2.0
"""How long close() waits for a verify_many running in another thread before killing its workers anyway."""
INSTALL_HINT = "pip install 'math-verify[antlr4_13_2]>=0.9.0,<0.10'"

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
"""What brace matching looks at: a backslash with the character it escapes (so \\{ is no brace), or a brace."""
_NON_SPACE = re.compile(r"\S")
# "Answer:", "**Final Answer**:", "the answer is:" (labelled: ends in a colon) and "the answer is" (prose).
_ANSWER_MARKER = re.compile(r"answer(?:\*\*)?\s*(?::|is\b(?:\s*:)?)", re.IGNORECASE)
_LABEL_GAP = re.compile(r"\s*")
"""After "Answer:", the answer may stand on the next line (DAPO's own pattern reads it there)."""
_PROSE_GAP = re.compile(r"[ \t]*")
_WORD_FIRST = re.compile(r"\**(?:[A-Za-z]{2,}\b|[A-Za-z][ \t]+[A-Za-z]{2,}\b)")
"""Prose, not an answer, after "answer is": "I hope this answer is helpful", "this answer is not", "this answer is
a bit long" (one letter and a word; "x = 3" and a choice "B." stay answers)."""
_ANSWER_END = re.compile(
    r"\.(?=\s)|(?<![\s,;])[\s,;]+\(?(?!(?:and|or)[ \t]+(?:[-+$\\\d(\[{]|[A-Za-z]\s*(?:[=<>^_,;)\\]|$)))[A-Za-z]{2,}\b"
)
"""Where an answer line's answer ends: the end of its sentence, or the first word of prose after it ("5 because",
"12 dollars"); a LaTeX command ("\\text", "\\in") is no such word, nor "and" / "or" before another value ("2 and 3",
"x = 2 or x = 3": the answers of a problem with two, which math_verify reads as a list). A run of spaces is tried
from its start only: from each of its characters, 10,000 spaces took seconds."""
_LINE_EDGES = re.compile(r"^[\s*`]+|(?<![\s*`.])[\s*`.]+$")
"""Markdown bold or inline code around the answer line, and its final full stop (the end's run tried from its start
only, so a long run of spaces inside the line stays linear)."""
_DISPLAY_OPENERS = {"$$": "$$", "\\[": "\\]"}
_DISPLAY_LIMIT = 4000
"""How far a display-math answer ("$$\n42\n$$" after "the answer is") is searched for its closing delimiter: a
display is short, and a bound keeps many unclosed ones linear."""
_SUBJECT_VERB = re.compile(r"(?:\b(?:is|are|equals)\b|=)[ \t]*")
"""After "Answer:", a sentence: "The area is 12." gives "12"."""
# Digit groups joined by TeX's thin space or braced comma ("1\\,000", "1{,}000"), not after a decimal point.
_TEX_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\\,|\{,\})\d{3})+(?!\d)")
_TEX_SEPARATOR = re.compile(r"\\,|\{,\}")
# A point that ends a number ("5.", "5.\\%"), but not "5.5", "5.x" or "0.\\overline{3}".
_TRAILING_POINT = re.compile(r"(?<=\d)\.(?![\dA-Za-z.]|\\(?:overline|dot))")
_VARNOTHING = re.compile(r"\\varnothing(?![A-Za-z])")
# A degree sign not written as a superscript ("30°", "30 °", "30\\degree"), which math_verify reads only as one.
_BARE_DEGREE = re.compile(r"(?<![\^{\s])\s*(?:°|\\degree(?![A-Za-z]))")
# A repeating decimal: "0.\\overline{3}", "0.1\\overline{6}", "0.\\dot{3}", or "0.(3)" as many countries write it.
# Digits bounded: a number past them is left to math_verify (Python's int() refuses 4,300 digits).
_REPEATING = re.compile(r"(?<!\d)(\d{0,30})\.(\d{0,30})(?:\\overline\{(\d{1,30})\}|\\dot\{(\d)\}|\((\d{1,30})\))")
# Unicode roots of a number, a letter or a bracketed group: "√2", "2√3", "√(x+1)", "∛{27}".
_UNICODE_ROOT = re.compile(r"([√∛∜])\s*(\d+(?:\.\d+)?|[A-Za-z]|\([^()]*\)|\{[^{}]*\})")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}
# Unicode fractions, after a whole part they belong to ("1½" is three halves).
_VULGAR = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒"
_VULGAR_FRACTION = re.compile(f"(?<!\\d)(\\d{{0,30}})([{_VULGAR}])")  # each digit run tried once: linear
# A number in e notation, as Python writes a float column's small values ("1e-05"); only in a ground truth.
_E_NOTATION = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)[eE][-+]?\d{1,3}")
# Math-mode delimiters around a whole answer: "$x$", "$$x$$", "\(x\)", "\[x\]".
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


class Verdict(str, enum.Enum):
    """The outcome of verifying one (answer, ground truth) pair; a str, so `verdict == "correct"` holds."""

    CORRECT = "correct"
    """math_verify.verify(gold, answer) is True."""
    WRONG = "wrong"
    """It is False (math_verify also turns its own errors into False)."""
    TIMEOUT = "timeout"
    """Verification ran longer than timeout_s; the sample is graded as not correct."""
    UNPARSABLE = "unparsable"
    """No answer was extracted, or math_verify found nothing to compare in the answer or in the ground truth."""
    ERROR = "error"
    """The worker process died while verifying, or the grading code raised outside math_verify."""


class VerifierStartError(RuntimeError):
    """A worker could not start (math_verify is not installed, or the machine is too loaded to import it)."""


# ---------------------------------------------------------------------------------------------------------------------
# Answer extraction (in the calling process, without a time limit: everything here is linear in the length)


def _box_spans(text: str) -> list[tuple[int, int] | None]:
    """(start, end) of the content of every \\boxed{...} / \\fbox{...}, in order; None for one never closed. One pass
    with a stack; escaped braces (\\{, \\}) do not count, as in TeX."""
    box_index = {match.end() - 1: index for index, match in enumerate(_BOX_COMMAND.finditer(text))}
    spans: list[tuple[int, int] | None] = [None] * len(box_index)
    open_braces: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        if token.group() == "{":
            open_braces.append(token.start())
        elif token.group() == "}" and open_braces:
            start = open_braces.pop()
            if start in box_index:
                spans[box_index[start]] = (start + 1, token.start())
    return spans


def last_boxed(text: str) -> str | None:
    """The content of the last complete, non-blank \\boxed{...} or \\fbox{...} (an open or empty one is skipped);
    None when there is none."""
    for span in reversed(_box_spans(text)):
        # blank boxes hold no braces, so they never overlap: the searches add up to one pass
        if span is not None and _NON_SPACE.search(text, *span):
            return text[span[0] : span[1]].strip()
    return None


def strip_math_delimiters(text: str) -> str:
    """Remove one pair of "$...$", "$$...$$", "\\(...\\)" or "\\[...\\]" enclosing the whole text ("$a$ and $b$"
    stays), and outer spaces."""
    text = text.strip()
    for opening, closing in _DELIMITERS:
        if len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            inner = text[len(opening) : len(text) - len(closing)]
            if closing not in inner:
                return inner.strip()
    return text


def _answer_line(text: str) -> str | None:
    """The answer after the last "Answer:" / "answer is" that has one: the rest of its line (after "Answer:" the next
    line where its own is blank), up to the end of its sentence or the first word of prose (`_answer_of_line`). An
    "answer is" followed by a word ("I hope this answer is helpful!") is taken only where no other marker gives an
    answer ("The answer is yes"). None if none."""
    wordy = None
    for match in reversed(list(_ANSWER_MARKER.finditer(text))):
        labelled = match.group().endswith(":")
        start = (_LABEL_GAP if labelled else _PROSE_GAP).match(text, match.end()).end()
        display = _display_math(text, _LABEL_GAP.match(text, start).end())
        if display is not None:  # on the marker's line or the next ones: "the answer is\n$$\n42\n$$"
            if display:
                return display
            continue
        if not labelled and _WORD_FIRST.match(text, start) and wordy is not None:
            continue  # only the last such marker is kept, and only it copies its line: this stays one pass
        # Copy only to the end of the line (to the end of the text would be quadratic); a line is reread only for
        # an earlier marker on it, which then is never blank.
        line_end = text.find("\n", start)
        line = text[start : line_end if line_end >= 0 else len(text)]
        if labelled and _WORD_FIRST.match(line):  # "Answer: The area is 12."
            verb = _SUBJECT_VERB.search(line)
            line = line[verb.end() :] if verb else line
        answer = _answer_of_line(line)
        if answer and not labelled and _WORD_FIRST.match(text, start):
            wordy = answer
        elif answer:
            return answer
    return wordy


def _display_math(text: str, start: int) -> str | None:
    """The content of a "$$...$$" or "\\[...\\]" display starting at `start` (lines joined by spaces, "" for an empty
    or unclosed one); None when no display starts there."""
    for opening, closing in _DISPLAY_OPENERS.items():
        if text.startswith(opening, start):
            inner = start + len(opening)
            end = text.find(closing, inner, inner + _DISPLAY_LIMIT)
            return " ".join(text[inner:end].split()) if end >= 0 else ""
    return None


def _answer_of_line(line: str) -> str:
    """The answer at the start of an answer line: up to the end of its sentence or the first word of prose outside
    braces and math ("$12$ dollars" gives "12", "5 because 2+2=4" gives "5"), markdown bold, the final full stop
    and math delimiters dropped; "" for none."""
    line = _LINE_EDGES.sub("", line)
    braces = dollars = position = 0
    for end in _ANSWER_END.finditer(line):
        braces += line.count("{", position, end.start()) - line.count("}", position, end.start())
        dollars += line.count("$", position, end.start()) - line.count("\\$", position, end.start())
        position = end.start()
        if braces == 0 and dollars % 2 == 0 and position > 0:
            line = _LINE_EDGES.sub("", line[:position])
            break
    return strip_math_delimiters(line)


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the last \\boxed{}/\\fbox{}, else the answer after "Answer:" or "answer is"
    (`_answer_line`); None when neither exists."""
    return last_boxed(response) or _answer_line(response)  # a box found is never empty


def acceptable_answers(ground_truth: Any) -> list[str]:
    """The ground truths a response may match: a list, or a JSON list of strings (verl-style datasets such as
    Skywork-OR1-RL-Data store the accepted answers so), gives each of them; anything else is one answer. None (a
    dataset read with data.answer_key=null has no answers) is a ValueError: there is nothing to grade against."""
    if ground_truth is None:
        raise ValueError(
            "the sample has no reference answer (ground_truth is None: data.answer_key=null), and a math answer "
            "needs one; set data.answer_key to the dataset's answer column."
        )
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("["):
        try:
            parsed = json.loads(ground_truth)
        except ValueError:
            parsed = None  # an interval such as "[1, 2)" is not JSON: one answer
        # Only a list of strings: "[1, 2]" is the closed interval, not the answers 1 and 2.
        if isinstance(parsed, list) and parsed and all(isinstance(item, str) for item in parsed):
            ground_truth = parsed
    if isinstance(ground_truth, (list, tuple)):
        return [number_text(item) for item in ground_truth] or [""]
    return [number_text(ground_truth)]


def normalize_ground_truth(ground_truth: str) -> str:
    """The dataset's answer unwrapped: "$\\frac12$", "\\boxed{\\frac12}" and "\\frac12" all give "\\frac12"."""
    text = strip_math_delimiters(str(ground_truth))
    boxed = last_boxed(text)
    text = strip_math_delimiters(boxed) if boxed is not None else text
    # a float answer column's small values come as "1e-05", where math_verify reads e as Euler's number
    return format(Decimal(text), "f") if _E_NOTATION.fullmatch(text) else text


def normalize_equivalents(answer: str) -> str:
    """Rewrite spellings math_verify misreads: "1\\,000" and "1{,}000" -> "1000" (not a product), "5." -> "5",
    "\\varnothing" -> "\\emptyset", "30°" -> "30^{\\circ}", and the Unicode and repeating-decimal spellings it reads as
    symbols or not at all: "√2" -> "\\sqrt{2}", "∞" -> "\\infty", "1½" -> "\\frac{3}{2}", "0.\\overline{3}" and "0.(3)"
    -> "\\frac{1}{3}". A bare "1,000" is left to math_verify, which reads it by context."""
    answer = _REPEATING.sub(_repeating_fraction, answer)
    answer = _VULGAR_FRACTION.sub(_vulgar_fraction, answer)
    answer = _UNICODE_ROOT.sub(_unicode_root, answer).replace("∞", "\\infty ")
    answer = _TEX_THOUSANDS.sub(lambda match: _TEX_SEPARATOR.sub("", match.group()), answer)
    answer = _TRAILING_POINT.sub("", answer)
    answer = _BARE_DEGREE.sub(lambda match: "^{\\circ}", answer)
    return _VARNOTHING.sub(r"\\emptyset", answer)


def _repeating_fraction(match: re.Match) -> str:
    whole, fixed = match.group(1) or "0", match.group(2)
    repeat = next(group for group in match.groups()[2:] if group is not None)
    # x = whole.fixed(repeat)...: (the digits through one period - the digits before it) / (10^fixed * (10^repeat - 1))
    value = Fraction(int(whole + fixed + repeat) - int(whole + fixed), 10 ** len(fixed) * (10 ** len(repeat) - 1))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _vulgar_fraction(match: re.Match) -> str:
    value = Fraction(unicodedata.numeric(match.group(2))).limit_denominator(10) + int(match.group(1) or 0)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _unicode_root(match: re.Match) -> str:
    operand = match.group(2)
    if operand[0] in "({":
        operand = operand[1:-1]
    return f"\\sqrt{_ROOT_INDEX[match.group(1)]}{{{operand}}}"


def as_boxed_latex(answer: str) -> str:
    """What math_verify.parse gets for one side: the normalized answer in \\boxed{}, so it is read whole as LaTeX
    ("[1,2)" an interval) rather than a number picked out of it."""
    return "\\boxed{" + normalize_equivalents(strip_math_delimiters(answer)) + "}"


# ---------------------------------------------------------------------------------------------------------------------
# Grading in the current process (what each worker runs)


def grade_in_process(answer: str, ground_truth: str) -> Verdict:
    """Verify one pair here, without time limits: only in a process someone else kills (a `VerifierPool` worker) or
    on trusted inputs. The ground truth is math_verify's (asymmetric) `gold`: it decides how "x = 2" compares."""
    from math_verify import parse, verify

    gold = parse(as_boxed_latex(normalize_ground_truth(ground_truth)), parsing_timeout=None)
    parsed = parse(as_boxed_latex(answer), parsing_timeout=None)
    if not gold or not parsed:
        return Verdict.UNPARSABLE
    return Verdict.CORRECT if verify(gold, parsed, timeout_seconds=None) else Verdict.WRONG


def grade_with_mathruler(answer: str, ground_truth: str) -> Verdict:
    """mathruler's `grade_answer` (EasyR1's: string normalization, then sympy), without a time limit: in a pool
    worker, as `grade_in_process`."""
    from mathruler.grader import grade_answer

    return Verdict.CORRECT if grade_answer(answer, ground_truth) else Verdict.WRONG


GRADERS = {"math_verify": grade_in_process, "mathruler": grade_with_mathruler}
"""What a pool worker grades a pair with, by name."""


def _worker_main(conn: Connection) -> None:
    """A worker process. The pool sends (grader, answer, ground_truth) tuples (`GRADERS`) or None (stop); the worker
    replies ("ready", "") once math_verify is imported, or ("failed", reason), then a verdict value per task."""
    # a signal to the driver's process group (Ctrl-C, `timeout`, a closed terminal) is the parent's to handle
    reset_child_signals()
    try:
        # silence math_verify's warning that its timeouts are off (on purpose: the pool kills a hung worker)
        for name in ("math_verify", "latex2sympy2_extended"):
            logging.getLogger(name).setLevel(logging.ERROR)
        grade_in_process("\\frac{1}{2}", "0.5")  # imports math_verify and warms its parser caches
    except BaseException as error:  # ImportError above all: report it instead of dying silently
        conn.send(("failed", f"{type(error).__name__}: {error}"))
        conn.close()
        return
    # exit when the parent is gone, even during a hung verification (a busy worker reads no pipe)
    threading.Thread(target=exit_with_parent, daemon=True).start()
    conn.send(("ready", ""))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the pool is gone
            return
        if task is None:
            return
        grader, answer, ground_truth = task
        try:
            verdict = GRADERS[grader](answer, ground_truth)
        except Exception:  # math_verify swallows its own errors; anything else is ours, but must not kill the pool
            verdict = Verdict.ERROR
        conn.send(verdict.value)


# ---------------------------------------------------------------------------------------------------------------------
# The pool


@dataclass
class _Worker:
    """One worker process and the parent's end of its pipe."""

    process: Any
    conn: Connection
    deadline: float
    """When its start-up (until ready) or its current task times out."""
    ready: bool = False
    task: int | None = None
    """Index (in the current verify_many call) of the pair it is verifying, or None when idle."""


@dataclass
class _PoolState:
    """What a pool's finalizer needs: held apart from the pool, so the finalizer does not keep the pool alive."""

    workers: list[_Worker] = field(default_factory=list)
    closed: bool = False


def _stop_worker(worker: _Worker, graceful: bool) -> None:
    """End one worker: ask an idle one to stop, kill a busy or unresponsive one; always close the pipe."""
    if graceful and worker.ready and worker.task is None:
        try:
            worker.conn.send(None)
        except (OSError, ValueError):
            pass
        worker.process.join(timeout=2.0)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=5.0)
    worker.conn.close()


def _shut_down(state: _PoolState) -> None:
    """Mark the pool closed and stop every worker: close(), garbage collection and interpreter exit all end here."""
    state.closed = True
    while state.workers:
        _stop_worker(state.workers.pop(), graceful=True)


class VerifierPool:
    """Persistent math_verify workers grading pairs with a time limit per pair. Close it (or use it as a context
    manager); garbage collection and interpreter exit stop its workers too. Calls are serialized by a lock; workers
    start on the first call."""

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS, start_method: str = "spawn") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}.")
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}.")
        self.max_workers = max_workers
        self.start_method = start_method
        self._context = multiprocessing.get_context(start_method)
        self._state = _PoolState()
        self._workers = self._state.workers
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shut_down, self._state)

    def __enter__(self) -> "VerifierPool":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._state.closed

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring and tests)."""
        return [worker.process.pid for worker in self._workers]

    def close(self) -> None:
        """Stop all workers; idempotent; a closed pool refuses new work. A verify_many in another thread is waited
        for at most CLOSE_WAIT_S (exit must not hang), then its workers are killed and it raises."""
        self._state.closed = True
        acquired = self._lock.acquire(timeout=CLOSE_WAIT_S)
        try:
            self._finalizer()
        finally:
            if acquired:
                self._lock.release()

    def _start_worker(self) -> _Worker:
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main, args=(child_conn,), name="math-verify-worker", daemon=True
        )
        with signals_held():  # until the worker leaves the driver's process group, it holds the group's signals
            process.start()
        child_conn.close()  # the parent keeps only its own end, so a dead worker reads as EOF
        return _Worker(process, parent_conn, deadline=time.monotonic() + WORKER_START_TIMEOUT_S)

    def _replace(self, worker: _Worker) -> None:
        """Kill `worker` and put a freshly started one in its place (none once the pool is closed)."""
        _stop_worker(worker, graceful=False)
        if not self.closed and worker in self._workers:
            self._workers[self._workers.index(worker)] = self._start_worker()

    def _start_failed(self, reason: str) -> None:
        """Stop the whole pool and raise: a worker that cannot start would fail again on every restart."""
        self._finalizer()
        if reason.startswith(("ImportError", "ModuleNotFoundError")):
            hint = f"install the verifier with {INSTALL_HINT} in the environment of the process that grades"
        else:
            hint = (
                "its traceback, if any, is printed above; a script that starts a pool when it is imported needs an "
                "`if __name__ == '__main__':` guard, because spawned workers import the main module"
            )
        raise VerifierStartError(f"a math-verify worker could not start ({reason}); {hint}.")

    def verify(
        self,
        response_answer: str | None,
        ground_truth: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grader: str = "math_verify",
    ) -> Verdict:
        """The verdict for one pair; see verify_many."""
        return self.verify_many([(response_answer, ground_truth)], timeout_s, grader)[0]

    def verify_many(
        self,
        pairs: Iterable[tuple[str | None, str]],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grader: str = "math_verify",
    ) -> list[Verdict]:
        """One verdict per (response answer, ground truth) pair, in order, by `grader` (`GRADERS`); a None answer is
        "unparsable". timeout_s is per pair, from when its worker receives it; a pair over it is "timeout" and its
        worker is replaced."""
        if grader not in GRADERS:
            raise ValueError(f"grader {grader!r} is not one of {', '.join(GRADERS)}.")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}.")
        pairs = list(pairs)
        verdicts: list[Verdict | None] = [Verdict.UNPARSABLE if answer is None else None for answer, _ in pairs]
        pending = deque(index for index, verdict in enumerate(verdicts) if verdict is None)
        if not pending:
            return verdicts  # type: ignore[return-value]
        with self._lock:
            if self.closed:
                raise RuntimeError("this VerifierPool is closed; create a new one.")
            try:
                while len(self._workers) < self.max_workers:
                    self._workers.append(self._start_worker())
                while not self.closed and (pending or any(worker.task is not None for worker in self._workers)):
                    for worker in self._workers:
                        if pending and worker.ready and worker.task is None:
                            index = pending.popleft()
                            answer, ground_truth = pairs[index]
                            try:
                                worker.conn.send((grader, str(answer), str(ground_truth)))
                            except OSError:  # it died while idle (killed, or the OS's memory killer): a fresh one
                                pending.appendleft(index)
                                self._replace(worker)
                                continue
                            worker.task, worker.deadline = index, time.monotonic() + timeout_s
                    self._wait_and_collect(verdicts, timeout_s)
            except (OSError, ValueError):
                if not self.closed:
                    raise
            if self.closed:  # by close() in another thread, or at interpreter exit
                raise RuntimeError("the VerifierPool was closed while it was verifying.")
        return verdicts  # type: ignore[return-value]

    def _wait_and_collect(self, verdicts: list[Verdict | None], timeout_s: float) -> None:
        """Wait for the next message or deadline; record verdicts, finish start-ups, replace timed-out workers."""
        now = time.monotonic()
        deadlines = [worker.deadline for worker in self._workers if worker.task is not None or not worker.ready]
        workers = list(self._workers)  # close() from another thread may empty the list while this waits
        ready = wait([worker.conn for worker in workers], timeout=max(0.0, min(deadlines) - now))
        if self.closed:
            return
        for conn in ready:
            worker = next(worker for worker in workers if worker.conn is conn)
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died: a crash in native code, or the OS killed it
                if not worker.ready:
                    worker.process.join(timeout=5.0)
                    self._start_failed(f"the process exited with code {worker.process.exitcode} before it was ready")
                if worker.task is not None:
                    logger.warning("A math-verify worker died while verifying; the sample is graded as an error.")
                    verdicts[worker.task] = Verdict.ERROR
                self._replace(worker)
                continue
            if not worker.ready:
                if message[0] != "ready":
                    self._start_failed(message[1])
                worker.ready = True
                continue
            verdicts[worker.task] = Verdict(message)
            worker.task = None
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.task is not None and now >= worker.deadline:
                logger.warning(
                    "math-verify took longer than %.1f s on one sample; its worker was restarted and the sample "
                    "graded as a timeout.",
                    timeout_s,
                )
                verdicts[worker.task] = Verdict.TIMEOUT
                self._replace(worker)
            elif not worker.ready and now >= worker.deadline:
                self._start_failed(f"it did not import math_verify within {WORKER_START_TIMEOUT_S:.0f} s")


# ---------------------------------------------------------------------------------------------------------------------
# A shared pool for callers that call once per step (reward functions)

_shared_pool: VerifierPool | None = None
_shared_lock = threading.Lock()


def get_shared_pool(max_workers: int | None = None) -> VerifierPool:
    """The process-wide pool (shared by the train and val reward modules), started on first use; a different
    max_workers replaces it."""
    global _shared_pool
    with _shared_lock:
        pool = _shared_pool
        if pool is not None and not pool.closed and max_workers in (None, pool.max_workers):
            return pool
        if pool is not None:
            pool.close()
        _shared_pool = VerifierPool(max_workers or DEFAULT_MAX_WORKERS)
        return _shared_pool


def close_shared_pool() -> None:
    """Stop the shared pool's workers (also done at interpreter exit)."""
    global _shared_pool
    with _shared_lock:
        if _shared_pool is not None:
            _shared_pool.close()
            _shared_pool = None


atexit.register(close_shared_pool)


def verify(
    response_answer: str | None, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S, grader: str = "math_verify"
) -> Verdict:
    """The verdict for one pair, graded in the shared pool."""
    return get_shared_pool().verify(response_answer, ground_truth, timeout_s, grader)


def verify_many(
    pairs: Iterable[tuple[str | None, str]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_workers: int = DEFAULT_MAX_WORKERS,
    grader: str = "math_verify",
) -> list[Verdict]:
    """One verdict per (response answer, ground truth) pair, graded by `grader` in the shared pool of `max_workers`
    workers."""
    return get_shared_pool(max_workers).verify_many(pairs, timeout_s, grader)


def matches_any(
    answer: str | None, ground_truths: Iterable[str], timeout_s: float = DEFAULT_TIMEOUT_S, grader: str = "math_verify"
) -> bool:
    """Whether `answer` equals one of `ground_truths` (each stripped) by `grader`, in the shared pool as it is (as
    `verify`: of whatever size another reward file in this process gave it, which a size of its own would replace,
    under that file's grading in another thread); False for no answer, or one whose grading ran out of time."""
    if not answer:
        return False
    pairs = [(answer, truth.strip()) for truth in ground_truths]
    return Verdict.CORRECT in get_shared_pool().verify_many(pairs, timeout_s, grader)
