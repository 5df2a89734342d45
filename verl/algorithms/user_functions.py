# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An algorithm from the user's own file: `path/to/file.py:function` wherever a registered name is accepted (five
kinds: advantage estimator, policy loss, KL estimator, loss aggregation, off-policy correction; each registry module
declares its kind via `add_kind`). The function is imported once per process, its signature checked, and registered
under the spec itself: the driver at config validation, a Ray worker on its first lookup (`require_known`). Wrappers
check outputs, naming file, function and step (`Where`). Signatures: README.md's "Your own algorithm"."""

import contextlib
import importlib
import inspect
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from verl.utils.module_loading import NotPythonFileError, import_file, user_traceback


class AlgorithmFunctionLoadError(ValueError):
    """The function named in the config cannot be loaded, or its signature does not fit its kind."""


class AlgorithmFunctionNotFoundError(AlgorithmFunctionLoadError, FileNotFoundError):
    """The function's file does not exist."""


class AlgorithmFunctionError(RuntimeError):
    """A user's function returned the wrong shape, dtype or a non-finite value during training."""


@dataclass(frozen=True)
class Kind:
    """One kind of user function, declared by the registry module it registers into (`add_kind`)."""

    label: str
    """How messages name the kind ("advantage estimator")."""
    key: str
    """The config key that selects it (the first, where several do)."""
    signature: str
    """Shown in every error about it."""
    check: Callable[[inspect.Signature], str | None]
    """The problem with a function's signature for this kind, or None."""
    register: Callable[[str, Callable[..., Any], "Where"], None]
    """Register the function, wrapped with its output checks, under the spec."""


KINDS: dict[str, Kind] = {}

_KIND_MODULES: dict[str, str] = {
    "adv_estimator": "verl.algorithms.advantages",
    "policy_loss": "verl.algorithms.policy_losses",
    "kl_penalty": "verl.algorithms.kl",
    "loss_avg_mode": "verl.algorithms.masked_ops",
    "rollout_correction": "verl.algorithms.rollout_correction",
}
"""Imported by name when a spec is registered before its registry module (which imports this one)."""

_REGISTERED: set[tuple[str, str]] = set()
"""(kind, spec) of every function registered in this process."""
_step: int | None = None


def is_user_spec(value: Any) -> bool:
    """Whether a config value names a file ("path/to/file.py:function") rather than a registered name."""
    return isinstance(value, str) and (value.endswith(".py") or ".py:" in value)


def set_training_step(step: int | None) -> None:
    """Record the training step this process works on, for run-time error messages."""
    global _step
    _step = step


@contextlib.contextmanager
def training_step(step: int | None) -> Iterator[None]:
    """`set_training_step` for the duration of a block, restoring the previous step after."""
    previous = _step
    set_training_step(step)
    try:
        yield
    finally:
        set_training_step(previous)


def _parse(kind: Kind, spec: str, key: str) -> tuple[str, str]:
    path, sep, name = spec.strip().rpartition(":")
    if not sep or not path.endswith(".py") or not name.isidentifier():
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: write your {kind.label} as 'path/to/file.py:function' (the function's name after the "
            f"colon); it must be {kind.signature}."
        )
    return os.path.abspath(os.path.expanduser(path)), name


def _import(path: str, spec: str, key: str) -> ModuleType:
    if not os.path.isfile(path):
        raise AlgorithmFunctionNotFoundError(
            f"{key}={spec!r}: the file {path} does not exist on {socket.gethostname()}; give a path relative to the "
            f"working directory ({os.getcwd()}) or an absolute one (on a cluster, every node reads it at that path)."
        )
    try:
        module = import_file(path, "verl_algorithm_")
    except NotPythonFileError:
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: cannot import {path} as Python; the function must live in a .py file."
        ) from None
    except (Exception, SystemExit) as error:  # sys.exit() at import would end the run as if it had succeeded
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: importing {path} failed with {type(error).__name__}: {error}; fix the file or install "
            "what it imports."
        ) from error
    return module


def add_kind(name: str, kind: Kind) -> None:
    KINDS[name] = kind


def _kind(name: str) -> Kind:
    if name not in KINDS:
        importlib.import_module(_KIND_MODULES[name])
    return KINDS[name]


def register_user_function(kind_name: str, spec: str, key: str | None = None) -> None:
    """Load `spec` as a `kind_name` function, its signature checked against the kind, and register it under `spec`
    (once per process); raises AlgorithmFunctionLoadError naming `key` (default: the kind's key) when it cannot be
    loaded or does not fit."""
    if (kind_name, spec) in _REGISTERED:
        return
    kind = _kind(kind_name)
    key = key or kind.key
    path, name = _parse(kind, spec, key)
    module = _import(path, spec, key)
    function = getattr(module, name, None)
    if function is None:
        defined = sorted(a for a, v in vars(module).items() if inspect.isfunction(v) and not a.startswith("_"))
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: {path} has no function {name!r} (functions defined there: {', '.join(defined) or 'none'}"
            "); name one after the colon, as in file.py:my_function."
        )
    if not callable(function):
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: {name!r} in {path} is a {type(function).__name__}, not a function; point the spec at "
            "a callable."
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin (torch.sub) or another callable without a Python signature
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: {name!r} in {path} has no Python signature ({type(function).__name__}); define a Python "
            f"function with the {kind.label}'s arguments: {kind.signature}."
        ) from None
    problem = kind.check(signature)
    if problem:
        raise AlgorithmFunctionLoadError(
            f"{key}={spec!r}: {name} in {path} cannot be used as the {kind.label}: {problem}. Expected signature "
            f"of the {kind.label}: {kind.signature}."
        )
    kind.register(spec, function, Where(kind, key, path, name))
    _REGISTERED.add((kind_name, spec))


def require_known(kind_name: str, registry: Mapping[str, Any], name: str, key: str, names: Any = None) -> None:
    """ValueError naming config `key` (and the choices: `names`, else the registry's) unless `name` is registered or
    is a user's file spec, which it registers now: this is how a Ray worker, which never validated the config, finds
    the user's function."""
    if name in registry:
        return
    if is_user_spec(name):
        register_user_function(kind_name, name)
        return
    choices = ", ".join(registry if names is None else names)
    raise ValueError(
        f"Unknown {key} {name!r}; choose one of {choices}, or your own function as 'path/to/file.py:function'."
    )


def register_once(registry: dict[str, Any], name: str, value: Any, label: str) -> None:
    """registry[name] = value, refusing a name already taken (a user's function may not replace a built-in)."""
    if name in registry:
        raise ValueError(f"{label} {name!r} is already registered; pick another name.")
    registry[name] = value


# ------------------------------------------------------------------------------------------------ signatures


def _variadic(signature: inspect.Signature) -> str | None:
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return f"it takes {parameter}; name each input it uses instead"
    return None


def _required(signature: inspect.Signature) -> list[str]:
    return [name for name, p in signature.parameters.items() if p.default is inspect.Parameter.empty]


def check_keyword_inputs(signature: inspect.Signature, known: tuple[str, ...]) -> str | None:
    """Functions called with keyword inputs: every required parameter must be one of `known`."""
    unknown = [name for name in _required(signature) if name not in known]
    if unknown:
        return f"it requires {', '.join(unknown)}, which the trainer does not pass (it passes {', '.join(known)})"
    return _variadic(signature)


def check_positional(count: int) -> Callable[[inspect.Signature], str | None]:
    """Functions called with `count` positional inputs."""

    def check(signature: inspect.Signature) -> str | None:
        problem = _variadic(signature)
        if problem:
            return problem
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        positional = [parameter for parameter in signature.parameters.values() if parameter.kind in kinds]
        if len(positional) < count or len(_required(signature)) > count:
            return f"it takes ({', '.join(signature.parameters)}), but is called with {count} positional argument(s)"
        return None

    return check


# ------------------------------------------------------------------------------------------------ run-time checks


@dataclass(frozen=True)
class Where:
    """Where a registered function comes from, to name it in run-time errors."""

    kind: Kind
    key: str
    path: str
    name: str

    def fail(self, problem: str, traceback: str = "") -> AlgorithmFunctionError:
        step = f"training step {_step}" if _step is not None else "a call outside a training step"
        return AlgorithmFunctionError(
            f"The {self.kind.label} {self.name} in {self.path} ({self.key}) {problem} at {step}; fix the "
            "function (README.md, 'Your own algorithm', gives what each kind must return)."
            + (f" Where it raised (most recent call last):\n{traceback}" if traceback else "")
        )

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`function(*args, **kwargs)`; what it raises becomes an AlgorithmFunctionError naming it, with its own
        frames (the message crosses Ray whole)."""
        try:
            return function(*args, **kwargs)
        except (Exception, SystemExit) as error:  # sys.exit() would end a worker as if it had crashed
            raise self.fail(f"raised {type(error).__name__} ({error})", user_traceback(error)) from error

    def tensor(self, value: Any, what: str, shape: tuple[int, ...], floating: bool = True) -> torch.Tensor:
        """`value` checked to be a tensor of `shape` (float and finite, or bool when not `floating`)."""
        if not isinstance(value, torch.Tensor):
            raise self.fail(f"returned a {type(value).__name__} as {what}, not a torch.Tensor")
        if tuple(value.shape) != shape:
            raise self.fail(f"returned {what} of shape {tuple(value.shape)}, expected {shape}")
        if not floating:
            if value.dtype != torch.bool:
                raise self.fail(f"returned {what} of dtype {value.dtype}, expected torch.bool")
            return value
        if not value.is_floating_point():
            raise self.fail(f"returned {what} of dtype {value.dtype}, expected a floating-point tensor")
        finite = torch.isfinite(value.detach())
        if not bool(finite.all()):
            bad = int((~finite).sum())
            raise self.fail(
                f"returned {what} with {bad} non-finite value(s) (padding positions count too: multiply by the mask)"
            )
        return value


def require_algorithm(section: Any, prefix: str, name: str, kind_name: str, choices: tuple[str, ...]) -> None:
    """Config validation of a key taking a registered name (one of `choices`) or a user's file (loaded, checked
    against `kind_name` and registered here); raises ConfigError naming `prefix` + `name`."""
    from verl.utils.config import ConfigError, as_config_error

    value, key = getattr(section, name), prefix + name
    if is_user_spec(value):
        with as_config_error(AlgorithmFunctionLoadError):
            register_user_function(kind_name, value, key)
    elif value not in choices:
        raise ConfigError(
            f"Config key '{key}' is '{value}'; choose one of: {', '.join(choices)}, or your own function as "
            f"'path/to/file.py:function' (README.md, 'Your own algorithm')."
        )
