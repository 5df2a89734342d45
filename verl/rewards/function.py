# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A user's reward function: loaded from `path/to/file.py:function`, called, and its output checked; every error
names the function, file and sample. Nothing heavy is imported: the config validator calls `check_reward_function`
before Ray starts. README.md's "Reward functions" describes `REWARD_TYPE` and how it is inferred.
"""

import asyncio
import collections.abc
import concurrent.futures
import inspect
import logging
import math
import numbers
import os
import socket
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from verl.utils.config import masked
from verl.utils.module_loading import NotPythonFileError, import_file, user_traceback


logger = logging.getLogger(__name__)

REWARD_TYPES: tuple[str, ...] = ("sequential", "batch")
DEFAULT_REWARD_TYPE = "sequential"
DEFAULT_FUNCTION_NAME = "main"
CONFIG_KEY = "worker.reward.reward_function"


@dataclass(frozen=True)
class RewardNames:
    """How a run names the reward function and its keyword arguments in its errors: the trainer's config keys, or a
    command's flags (evaluate's --reward)."""

    function: str = CONFIG_KEY
    kwargs: str = "worker.reward.reward_function_kwargs, a route's routes_kwargs or a rubric part's kwargs"
    remote: bool = True
    """A reward actor on another node may read the file at the same path."""


TRAINER_NAMES = RewardNames()
# How RewardFunction.reward_type was decided.
DECLARED, INFERRED, DEFAULTED = "declared", "inferred", "defaulted"
# First-parameter names that say how a function is called (EasyR1's examples use these).
_PARAMETER_NAMES = {"reward_inputs": "batch", "reward_input": "sequential"}
# Unevaluated annotations (strings): the outermost name, without module or subscript, that says list or dict.
_ANNOTATION_NAMES = {
    **dict.fromkeys(("list", "List", "Sequence", "tuple", "Tuple"), "batch"),
    **dict.fromkeys(("dict", "Dict", "Mapping", "MutableMapping", "RewardInput"), "sequential"),
}


class RewardInput(TypedDict):
    """What a reward function receives for one sample."""

    response: str
    """The decoded response (special tokens skipped unless worker.reward.skip_special_tokens=false)."""
    response_length: int
    """Number of valid response tokens, including the EOS token when generation stopped on it."""
    response_ids: list[int] | None
    """The response's token ids (those `response` decodes, padding left out); None where only text is known
    (verl.envs.evaluate scores an endpoint's replies)."""
    ground_truth: Any
    """The dataset's answer for this prompt."""
    prompt: str
    """The prompt text the model saw (chat template applied)."""
    prompt_messages: list[dict[str, str]] | None
    """The prompt as the row gave it when that was a list of chat messages (system, few-shot turns, the user's; before
    data.format_prompt), else None."""
    multi_modal_data: dict[str, Any] | None
    """The row's raw images/videos as {"images": [...], "videos": [...]}, or None for a text-only row."""
    uid: str | None
    """The group id: every response sampled from the same prompt shares it."""
    extra_info: dict[str, Any]
    """Every other column of the dataset row, under its own name."""


REASONING_OPENING, REASONING_CLOSING = "<think>", "</think>"


def model_turn(reward_input: RewardInput) -> str:
    """`response` as the model's turn reads: after the `<think>` that the chat template's generation prompt opened
    (DeepSeek-R1 distills, QwQ, Qwen3.5 with thinking on: the prompt ends inside a reasoning block, so the response
    tokens hold its text and `</think>` but not its opening), else `response` itself."""
    prompt, response = reward_input.get("prompt") or "", reward_input["response"]
    return prompt[prompt.rfind(REASONING_OPENING) :] + response if opens_reasoning(prompt) else response


def after_reasoning(text: str, opened: bool = False) -> str | None:
    """The text after a model's reasoning block (its last `</think>`); None where the reasoning never closed (the
    text opens `<think>` without closing it, or `opened`: the prompt opened it); the whole text where it has none.
    A judge's verdict and, with strip_reasoning, what a judge or reward model is shown of a response."""
    if REASONING_CLOSING in text:
        return text.rpartition(REASONING_CLOSING)[2]
    return None if opened or REASONING_OPENING in text else text


def opens_reasoning(prompt: str) -> bool:
    """Whether the rendered `prompt` ends inside a reasoning block its generation prompt opened."""
    start = prompt.rfind(REASONING_OPENING)
    return start >= 0 and not prompt[start + len(REASONING_OPENING) :].strip()


class RewardFunctionLoadError(ValueError):
    """The reward function named in the config cannot be loaded."""


class RewardFunctionNotFoundError(RewardFunctionLoadError, FileNotFoundError):
    """The reward function's file does not exist."""


class RewardFunctionError(RuntimeError):
    """The reward function raised, or returned something other than one dict of finite floats per sample. The
    message is whole (where the function raised included), so it reads the same after crossing processes."""

    def __init__(self, message: str, sample_index: int | None = None) -> None:
        super().__init__(message)  # args == (message,), so the error pickles across processes and Ray
        self.sample_index = sample_index


class RewardTimeoutError(TimeoutError):
    """A reward part (the functions, the judge) did not score a batch within worker.reward.timeout_s."""


def parse_reward_function_spec(spec: str, key: str = CONFIG_KEY) -> tuple[str, str]:
    """Split "path/to/file.py:function" into (path, function); the function defaults to `main`. Only a colon before
    an identifier separates them, so a path containing a colon still works. Errors name `key`."""
    if not isinstance(spec, str) or not spec.strip():
        raise RewardFunctionLoadError(
            f"{key} must be a string 'path/to/file.py:function', got {spec!r}; set it to your reward file."
        )
    path, sep, name = spec.strip().rpartition(":")
    if sep and name.isidentifier():
        return path, name
    if sep and not name.endswith(".py") and "/" not in name and os.sep not in name:
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: {name!r} is not a valid Python function name; write 'path/to/file.py:function'."
        )
    return spec.strip(), DEFAULT_FUNCTION_NAME


@dataclass
class RewardFunction:
    """A loaded reward function with its keyword arguments bound; call it with one sample or a list of them."""

    path: str
    """Absolute path of the file the function was loaded from."""
    name: str
    reward_type: str
    """"sequential" (one sample per call) or "batch" (the whole list in one call)."""
    function: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    """worker.reward.reward_function_kwargs, passed as keyword arguments on every call."""
    reward_name: str = ""
    """The file's REWARD_NAME, or the function name when it sets none."""
    reward_type_source: str = DECLARED
    """How reward_type was decided: "declared" (REWARD_TYPE), "inferred" (the signature) or "defaulted"."""
    verl_arguments: tuple[str, ...] = ()
    """For a function in verl's signature (`compute_score(data_source, solution_str, ground_truth, extra_info)`): the
    arguments it takes, given by name from each sample; empty for ours (the sample dict first)."""
    trl: bool = False
    """A function in TRL's signature (`reward(completions, **kwargs) -> list[float]`): one call per batch, with lists
    by name (`_trl_arguments`)."""
    answer_key: str | None = None
    """The dataset's answer column (data.answer_key): a TRL-style function gets the answers under this name."""
    check_setup: Callable[..., Any] | None = None
    """The file's own `check_setup(**kwargs)`, if it defines one (the file's, not the module the function comes from:
    a function imported from a library, a functools.partial or a callable object have other or no globals)."""

    @property
    def spec(self) -> str:
        """The absolute "path:function" spec; worker processes use it to load the same function again."""
        return f"{self.path}:{self.name}"

    @property
    def label(self) -> str:
        """How error messages name the function."""
        return f"reward function {self.name!r} in {self.path}"

    @property
    def reward_type_note(self) -> str:
        """Where reward_type came from, for logs and error messages."""
        if self.reward_type_source == DECLARED:
            return f"REWARD_TYPE = {self.reward_type!r} in the file"
        if self.verl_arguments:
            return f"{self.name} takes verl's arguments ({', '.join(self.verl_arguments)}): one sample per call"
        if self.trl:
            return f"{self.name} takes TRL's arguments (completions, ...): the whole batch per call"
        if self.reward_type_source == INFERRED:
            return f"no REWARD_TYPE in the file; inferred from the first parameter of {self.name}"
        return f"no REWARD_TYPE in the file, so the default {DEFAULT_REWARD_TYPE!r}"

    def batch_hint(self) -> str:
        """A sentence telling to set REWARD_TYPE = "batch", for errors that suggest a batch function."""
        return (
            f'If {self.name} takes a list of samples, set REWARD_TYPE = "batch" in {self.path} '
            f"({self.reward_type_note}; EasyR1's default is batch)."
        )

    @property
    def is_async(self) -> bool:
        """An `async def` function (score_sequential runs a batch's samples concurrently)."""
        call = vars(type(self.function)).get("__call__")  # an object whose class's __call__ is `async def`
        return inspect.iscoroutinefunction(self.function) or inspect.iscoroutinefunction(call)

    def __call__(self, inputs: Any) -> Any:
        """The function's scores for `inputs` (a coroutine of them for an async function)."""
        if self.verl_arguments:
            scores = self.function(**_verl_values(inputs, self.verl_arguments), **self.kwargs)
        elif self.trl:
            scores = self.function(**_trl_arguments(self.function, inputs, self.answer_key, self.kwargs))
        else:
            scores = self.function(inputs, **self.kwargs)
        return self._scores_of(scores) if self.is_async else self._convert(scores)

    def _convert(self, scores: Any) -> Any:
        """verl's and TRL's return values in our form."""
        if self.verl_arguments:
            return _verl_score(scores)
        return _trl_scores(scores) if self.trl else scores

    async def _scores_of(self, pending: Any) -> Any:
        return self._convert(await pending)


def _parameters(function: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters of `function` by name; none for a callable without a signature (some builtins)."""
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}


VERL_ARGUMENTS = ("data_source", "solution_str", "ground_truth", "extra_info")
"""The arguments of verl's reward functions, in its order; a function taking `solution_str` is called verl's way."""


def _verl_arguments(function: Callable[..., Any]) -> tuple[str, ...]:
    """The verl arguments `function` takes by name (all of them with **kwargs), or () unless it takes
    `solution_str`."""
    parameters = _parameters(function)
    if "solution_str" not in parameters:
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return VERL_ARGUMENTS
    return tuple(name for name in VERL_ARGUMENTS if name in parameters)


def _verl_values(sample: Mapping[str, Any], arguments: tuple[str, ...]) -> dict[str, Any]:
    """A sample as verl passes it: the response as `solution_str`, the row's `data_source` column, and its
    `extra_info` column (verl's preprocessed rows have one; {} without)."""
    columns = sample.get("extra_info") or {}
    values = {
        "data_source": columns.get("data_source"),
        "solution_str": sample["response"],
        "ground_truth": sample["ground_truth"],
        "extra_info": columns.get("extra_info") or {},
    }
    return {name: values[name] for name in arguments}


def _verl_score(score: Any) -> Any:
    """verl's return value in our form: a number is `overall`; a dict's `score` is `overall` and its other numeric
    keys stay (verl logs its non-numeric ones, e.g. the extracted answer, as text, which our metrics cannot hold)."""
    if isinstance(score, Mapping) and "score" in score:
        return {
            "overall": score["score"],
            **{k: v for k, v in score.items() if k != "score" and _as_float(v) is not None},
        }
    if _as_float(score) is not None:
        return {"overall": score}
    return score  # anything else: check_scores names it


TRL_UNPASSED = ("trainer_state",)
"""Arguments TRL's GRPOTrainer passes that this trainer has no equivalent of: a function naming one is refused."""


def _trl_arguments(
    function: Callable[..., Any], samples: Sequence[Mapping[str, Any]], answer_key: str | None, kwargs: Mapping
) -> dict[str, Any]:
    """A batch as TRL's GRPOTrainer passes it: `prompts` (the row's messages where its prompt was given as messages,
    else the prompt text), `completions` (for such rows, or a multi-turn episode, the messages after the prompt; else
    the response text), `completion_ids` (each response's token ids, as `completions` spans them), and every other
    dataset column as a list by its own name, the answer under data.answer_key's. A function without **kwargs gets
    only the arguments it names; the configured kwargs win."""
    completions = []
    for sample in samples:
        episode = sample["extra_info"].get("episode_messages")
        if episode is not None:
            completions.append(list(episode))
        elif sample.get("prompt_messages") is not None:
            completions.append([{"role": "assistant", "content": sample["response"]}])
        else:
            completions.append(sample["response"])
    keys = dict.fromkeys(key for sample in samples for key in sample["extra_info"])
    columns = {key: [sample["extra_info"].get(key) for sample in samples] for key in keys}
    if answer_key and answer_key.isidentifier() and answer_key not in columns:
        columns[answer_key] = [sample["ground_truth"] for sample in samples]
    prompts = [sample.get("prompt_messages") or sample["prompt"] for sample in samples]
    values = {**columns, **kwargs, "prompts": prompts, "completions": completions}
    parameters = _parameters(function)
    ids = [sample.get("response_ids") for sample in samples]
    if None not in ids:
        values["completion_ids"] = ids
    elif "completion_ids" in parameters:
        raise RewardFunctionError(
            f"{getattr(function, '__name__', function)} takes TRL's completion_ids, and these samples have text only "
            "(an endpoint's replies, as verl.envs.evaluate scores them): use a function without completion_ids there."
        )
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return values
    return {name: value for name, value in values.items() if name in parameters}


def _trl_scores(scores: Any) -> Any:
    """TRL's return value (one float per sample, None where the function does not apply) in our form: None counts
    0.0, as in TRL's sum over reward functions."""
    if isinstance(scores, np.ndarray):
        scores = scores.tolist()
    if not isinstance(scores, (list, tuple)):
        return scores  # check_scores names it
    return [{"overall": 0.0 if score is None else score} for score in scores]


def _check_kwargs(loaded: RewardFunction, names: RewardNames) -> None:
    """Fail at load time, not at the first training step, when the kwargs do not fit the function's signature."""
    try:
        signature = inspect.signature(loaded.function)
    except (TypeError, ValueError):  # builtins and some C callables have no signature: nothing to check
        return
    kwargs, verl_arguments = loaded.kwargs, loaded.verl_arguments
    try:
        if verl_arguments:
            signature.bind(**dict.fromkeys(verl_arguments), **kwargs)
        elif loaded.trl:  # the dataset's columns fill the rest
            signature.bind_partial(completions=None, **kwargs)
        else:
            signature.bind(None, **kwargs)
    except TypeError as error:
        takes = f"verl's arguments ({', '.join(verl_arguments)})" if verl_arguments else "the sample(s) first"
        takes = "TRL's arguments (completions, prompts and the dataset's columns)" if loaded.trl else takes
        raise RewardFunctionLoadError(
            f"The configured keyword arguments {masked(dict(kwargs))!r} ({names.kwargs}) do not fit the signature "
            f"{signature} of "
            f"{loaded.label}: {error}; the function must take {takes} and accept every configured keyword."
        ) from error


def _annotation_kind(annotation: Any) -> str | None:
    """The reward type an annotation names: batch for a list or sequence, sequential for a dict, else None."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return _ANNOTATION_NAMES.get(annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1])
    origin = typing.get_origin(annotation) or annotation
    if not isinstance(origin, type):
        return None  # a union, a type variable, Any: no single answer
    if issubclass(origin, (dict, collections.abc.Mapping)):  # TypedDicts (RewardInput) are dict subclasses
        return "sequential"
    if issubclass(origin, (list, tuple, collections.abc.Sequence)) and not issubclass(origin, (str, bytes)):
        return "batch"
    return None


def _signature_reward_type(function: Callable[..., Any]) -> str | None:
    """The reward type that the first parameter's name and annotation (evaluated where that is possible) agree on, or
    None when they say nothing or clash."""
    try:
        try:
            signature = inspect.signature(function, eval_str=True)
        except Exception:  # a string annotation naming something undefined: keep the annotations as strings
            signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    parameter = next(iter(signature.parameters.values()), None)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if parameter is None or parameter.kind not in positional:
        return None  # no parameter, or *args or keyword-only first: nothing to read
    kinds = {_PARAMETER_NAMES.get(parameter.name), _annotation_kind(parameter.annotation)} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def _reward_type(module: Any, function: Callable[..., Any], spec: str, path: str, key: str) -> tuple[str, str]:
    """(reward type, how it was decided): the file's REWARD_TYPE, else the signature's, else the default."""
    from_signature = _signature_reward_type(function)
    if not hasattr(module, "REWARD_TYPE"):
        return (from_signature, INFERRED) if from_signature else (DEFAULT_REWARD_TYPE, DEFAULTED)
    reward_type = module.REWARD_TYPE
    if reward_type not in REWARD_TYPES:
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: REWARD_TYPE={reward_type!r} in {path} is not one of {', '.join(REWARD_TYPES)}; "
            "set it to 'sequential' (one sample per call) or 'batch' (a list per call)."
        )
    if from_signature not in (None, reward_type):
        logger.warning(
            "%s sets REWARD_TYPE=%r, but the first parameter of its function looks %s; REWARD_TYPE wins.",
            path,
            reward_type,
            "like a list of samples" if from_signature == "batch" else "like one sample",
        )
    return reward_type, DECLARED


def load_reward_function(
    spec: str,
    kwargs: Mapping[str, Any] | None = None,
    answer_key: str | None = None,
    names: RewardNames = TRAINER_NAMES,
) -> RewardFunction:
    """Load `spec` ("path/to/file.py:function", relative paths from the working directory) and bind `kwargs`;
    `answer_key` names the answers for a function in TRL's signature; errors name the options as `names` does."""
    key = names.function
    raw_path, name = parse_reward_function_spec(spec, key)
    path = os.path.abspath(os.path.expanduser(raw_path))
    if not os.path.isfile(path):
        remote = " (a reward actor on another node reads it at that path too)" if names.remote else ""
        raise RewardFunctionNotFoundError(
            f"{key}={spec!r}: the file {path} does not exist on {socket.gethostname()}{remote}; give a path relative "
            f"to the working directory ({os.getcwd()}) or an absolute one."
        )
    try:  # a fresh module, named after its path, so two reward files (train and val) never replace each other
        module = import_file(path, "verl_reward_")
    except NotPythonFileError:
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: cannot import {path} as Python; the reward function must live in a .py file."
        ) from None
    except (Exception, SystemExit) as error:  # sys.exit() at import would end the run as if it had succeeded
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: importing {path} failed with {type(error).__name__}: {_reason(error)}; fix the "
            "file or install what it imports."
        ) from error
    if not hasattr(module, name):
        defined = sorted(
            attr for attr, value in vars(module).items() if inspect.isfunction(value) and not attr.startswith("_")
        )
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: {path} has no function {name!r} (functions defined there: "
            f"{', '.join(defined) or 'none'}); name one after the colon, as in file.py:compute_score."
        )
    function = getattr(module, name)
    if not callable(function):
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: {name!r} in {path} is a {type(function).__name__}, not a function; point the "
            "spec at a callable."
        )
    verl_arguments, parameters = _verl_arguments(function), _parameters(function)
    # TRL's signature: it takes `completions` or another argument only TRL passes (and not verl's `solution_str`)
    trl = bool({"completions", "completion_ids", *TRL_UNPASSED} & set(parameters)) and "solution_str" not in parameters
    unpassed = [argument for argument in TRL_UNPASSED if argument in parameters] if trl else []
    if unpassed:
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: {name} takes TRL's {', '.join(unpassed)}, which this trainer does not "
            "pass (it passes prompts, completions, completion_ids and the dataset's columns): TRL's trainer "
            "state has no counterpart here."
        )
    if verl_arguments or trl:  # the signature decides: verl's takes one sample per call, TRL's lists of the batch
        reward_type, reward_type_source = "sequential" if verl_arguments else "batch", INFERRED
    else:
        reward_type, reward_type_source = _reward_type(module, function, spec, path, key)
    reward_name = str(getattr(module, "REWARD_NAME", None) or name)
    kwargs = dict(kwargs or {})
    setup = getattr(module, "check_setup", None)
    loaded = RewardFunction(
        path,
        name,
        reward_type,
        function,
        kwargs,
        reward_name,
        reward_type_source,
        verl_arguments,
        trl,
        answer_key,
        setup if callable(setup) else None,
    )
    if getattr(module, "REWARD_TYPE", reward_type) != reward_type:  # only a signature's type can differ
        raise RewardFunctionLoadError(
            f"{key}={spec!r}: {loaded.reward_type_note}, but {path} sets REWARD_TYPE={module.REWARD_TYPE!r}; "
            "remove it."
        )
    _check_kwargs(loaded, names)
    return loaded


def check_reward_function(
    spec: str, kwargs: Mapping[str, Any] | None = None, names: RewardNames = TRAINER_NAMES
) -> None:
    """Raise RewardFunctionLoadError if `spec` cannot be loaded with `kwargs`; for the config validator. Runs the
    file's top-level code once (catching syntax errors and missing packages before Ray starts), then the file's
    optional `check_setup(**kwargs)`, whose exception stops the run with its message."""
    loaded = load_reward_function(spec, kwargs, names=names)
    setup = loaded.check_setup
    if setup is not None:
        try:
            inspect.signature(setup).bind(**loaded.kwargs)
        except TypeError as error:
            raise RewardFunctionLoadError(
                f"{names.function}={spec!r}: check_setup in {loaded.path} cannot take the reward function's kwargs "
                f"({', '.join(loaded.kwargs)}): {error}; give it **kwargs."
            ) from None
        except ValueError:  # no Python signature to check: call it
            pass
        try:
            setup(**loaded.kwargs)
        except (Exception, SystemExit) as error:  # the file's own check: its message is what the user needs
            raise RewardFunctionLoadError(
                f"{names.function}={spec!r}: {loaded.path} cannot run on this machine: {_reason(error)}"
            ) from None


def _run_coroutine(coroutine: Any) -> Any:
    """Run `coroutine` to its end from synchronous code: in this thread, or in a thread of its own where this thread
    already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        return executor.submit(asyncio.run, coroutine).result()


async def _gather(function: RewardFunction, samples: Sequence[Mapping[str, Any]]) -> list[Any]:
    """An async function's scores of every sample, awaited together (exceptions in place of the failed ones)."""
    return await asyncio.gather(*(function(sample) for sample in samples), return_exceptions=True)


def score_sequential(function: RewardFunction, samples: Sequence[Mapping[str, Any]], start: int = 0) -> list[Any]:
    """Call a sequential function on each sample (an async one on all of them concurrently); `start` is the batch
    index of samples[0], for error messages."""
    scores, awaited = [], None
    if function.is_async:
        try:
            awaited = _run_coroutine(_gather(function, samples))
        except SystemExit as error:  # asyncio lets it through gather's return_exceptions
            raise RewardFunctionError(
                f"{function.label} raised SystemExit on one of samples {start}-{start + len(samples) - 1}: "
                f"{_reason(error)}."
            ) from error
    for offset, sample in enumerate(samples):
        try:
            score = function(sample) if awaited is None else awaited[offset]
            if awaited is not None and isinstance(score, BaseException):
                raise score
            scores.append(score)
        except (Exception, SystemExit) as error:  # SystemExit: sys.exit(0) must not end the run as a success
            index = start + offset
            # A batch function handed one dict fails on it like this (iterating it yields its keys).
            looks_batch = function.reward_type_source == DEFAULTED and isinstance(
                error, (TypeError, KeyError, IndexError, AttributeError)
            )
            raise RewardFunctionError(
                f"{function.label} raised {type(error).__name__} on sample {index}{uid_note(sample)}: "
                f"{_reason(error)}. "
                + (f"{function.batch_hint()} Otherwise fix" if looks_batch else "Fix")
                + f" the function; where it raised (most recent call last):\n{user_traceback(error)}",
                sample_index=index,
            ) from error
    return scores


def score_batch(function: RewardFunction, samples: Sequence[Mapping[str, Any]]) -> Any:
    """Call a batch function once on all samples."""
    try:
        scores = function(list(samples))
        return _run_coroutine(scores) if function.is_async else scores
    except (Exception, SystemExit) as error:
        raise RewardFunctionError(
            f"{function.label} (REWARD_TYPE='batch') raised {type(error).__name__} on a batch of {len(samples)} "
            f"samples (which sample is unknown to the caller): {_reason(error)}. Fix the function; where it raised "
            f"(most recent call last):\n{user_traceback(error)}"
        ) from error


def _reason(error: BaseException) -> str:
    """The exception's message; for SystemExit, that the function exited (sys.exit(0) would end the run as success)."""
    if isinstance(error, SystemExit):
        return (
            f"it called sys.exit({error.code!r}) (or exit(), or ran code that did), and a reward function must return "
            "scores, never exit the process"
        )
    return str(error)


def uid_note(sample: Mapping[str, Any]) -> str:
    uid = sample.get("uid") if isinstance(sample, Mapping) else None
    return f" (uid {uid})" if uid is not None else ""


def _as_float(value: Any) -> float | None:
    """A float for Python and NumPy bools, ints and floats (an int past float's range as an infinity of its sign);
    None for anything else (strings, tensors, None)."""
    if not isinstance(value, (bool, np.bool_, numbers.Real)):
        return None
    try:
        return float(value)
    except OverflowError:  # 10**400: float() raised, naming neither the function nor the sample
        return math.inf if value > 0 else -math.inf


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest reward the trainer holds: token-level scores are float32, where a larger one is an infinity."""


def check_scores(
    function: RewardFunction, scores: Any, samples: Sequence[Mapping[str, Any]]
) -> dict[str, list[float]]:
    """Check one dict of finite floats with `overall` per sample (a bare number is `overall` alone, as verl's
    functions return it); return the scores as columns (key -> list). Every sample must return the same keys: each
    becomes a metric aligned with the batch."""
    if not isinstance(scores, (list, tuple)):
        raise RewardFunctionError(
            f"{function.label} returned a {type(scores).__name__} for a batch of {len(samples)} samples; a batch "
            "function must return a list with one dict per sample."
        )
    if len(scores) != len(samples):
        raise RewardFunctionError(
            f"{function.label} returned {len(scores)} scores for {len(samples)} samples; return exactly one dict "
            "per sample, in the order of the input."
        )
    columns: dict[str, list[float]] = {}
    for index, (score, sample) in enumerate(zip(scores, samples)):
        where = f"{function.label} returned for sample {index}{uid_note(sample)}"
        if _as_float(score) is not None:
            score = {"overall": score}
        if not isinstance(score, Mapping):
            hint = ""
            if function.reward_type == "sequential" and isinstance(score, (list, tuple)):
                hint = " " + function.batch_hint()
            raise RewardFunctionError(
                f"{where} a {type(score).__name__} ({score!r:.80}); return a dict such as {{'overall': 1.0}}.{hint}",
                sample_index=index,
            )
        if "overall" not in score:
            raise RewardFunctionError(
                f"{where} keys {sorted(map(str, score))} without 'overall'; add 'overall', the scalar reward.",
                sample_index=index,
            )
        if index > 0 and set(score) != set(columns):
            raise RewardFunctionError(
                f"{where} keys {sorted(map(str, score))}, but sample 0 returned {sorted(columns)}; return the same "
                "keys for every sample (0.0 where one does not apply).",
                sample_index=index,
            )
        for key, value in score.items():
            number = _as_float(value)
            if not isinstance(key, str) or number is None:
                raise RewardFunctionError(
                    f"{where} {key!r}: {value!r:.80} of type {type(value).__name__}; every key must be a string and "
                    "every value a float (or int/bool).",
                    sample_index=index,
                )
            if not abs(number) <= FLOAT32_MAX:  # 1e39 passed as finite, became inf in float32: NaN advantages
                bound = "" if not math.isfinite(number) else f" (beyond float32's range, +-{FLOAT32_MAX:.3g})"
                raise RewardFunctionError(
                    f"{where} {key!r}: {number:.6g}{bound}; rewards must be finite, so guard divisions and logs in the "
                    "function.",
                    sample_index=index,
                )
            columns.setdefault(key, []).append(number)
    return columns
