# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.module_loading: a user's file runs once while unchanged and again once changed, and the
error text a person sees comes from the user's own frames and the last error raised."""

import os
import traceback

from torch._utils import ExceptionWrapper

import verl
from verl.utils.module_loading import import_file, user_error_message, user_frames, user_traceback


def test_a_file_runs_once_while_unchanged_and_again_once_changed(tmp_path):
    runs = tmp_path / "runs.txt"
    source = tmp_path / "reward.py"
    body = f"with open({str(runs)!r}, 'a') as f:\n    f.write('x')\n"
    source.write_text(body + "VALUE = 1\n")
    first = import_file(str(source), "edges_test_")
    assert import_file(str(source), "edges_test_") is first and runs.read_text() == "x"
    source.write_text(body + "VALUE = 2\n")
    assert import_file(str(source), "edges_test_").VALUE == 2 and runs.read_text() == "xx"


def test_frames_all_of_this_package_are_kept_whole():
    ours = os.path.dirname(os.path.abspath(verl.__file__))
    frames = traceback.StackSummary.from_list([(os.path.join(ours, "trainer", "x.py"), 3, "f", "pass")])
    assert [frame.filename for frame in user_frames(frames)] == [os.path.join(ours, "trainer", "x.py")]


def test_a_user_traceback_starts_at_the_users_file(tmp_path):
    source = tmp_path / "user_reward.py"
    source.write_text("def score(x):\n    return 1 / x\n")
    module = import_file(str(source), "edges_test_")
    runner = {}  # a caller inside this package, as the reward manager calls a reward function
    code = "def call(function, *args):\n    try:\n        function(*args)\n    except Exception as error:\n        return error\n"
    exec(
        compile(code, os.path.join(os.path.dirname(os.path.abspath(verl.__file__)), "runner_in_test.py"), "exec"),
        runner,
    )
    text = user_traceback(runner["call"](module.score, 0))
    assert text.startswith(f'  File "{source}", line 2, in score') and text.endswith(
        "ZeroDivisionError: division by zero"
    )


def _worker_error(raise_it) -> BaseException:
    """The exception a torch DataLoader worker re-raises in the main process for what `raise_it` raised."""
    try:
        raise_it()
    except ValueError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    try:
        wrapped.reraise()
    except ValueError as error:
        return error
    raise AssertionError("not raised")


def test_a_data_loader_workers_error_is_its_last_errors_own_text():
    def chained():
        try:
            raise ValueError("first")
        except ValueError as error:
            raise ValueError("row 3: the second  ") from error

    def handled():
        try:
            raise ValueError("first")
        except ValueError:
            raise ValueError("row 3: the second")  # noqa: B904 - the context shows in the worker's text

    message = "row 3: the reward function raised ValueError: bad answer"

    def naming_its_type():
        raise ValueError(message)

    assert user_error_message(_worker_error(chained)) == "row 3: the second"
    assert user_error_message(_worker_error(handled)) == "row 3: the second"
    # a message that names its own type again is kept whole
    assert user_error_message(_worker_error(naming_its_type)) == message


def test_an_error_wrapped_by_ray_is_its_cause():
    class TaskError(Exception):
        def __init__(self, cause):
            super().__init__(f"ray.exceptions.RayTaskError: worker stack\n{cause}")
            self.cause = cause

    assert user_error_message(TaskError(ValueError("bad row"))) == "bad row"
