# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""WorkerGroup: the driver's handle on N worker processes, with one proxy method per `@register` method.

A call dispatches the arguments (decorator.py), starts the method on every rank (or rank 0) and collects the results.
A backend (Ray: ray/base.py) only implements starting a call on a rank and waiting for the results.
"""

from collections.abc import Callable, Sequence
from typing import Any

from verl.single_controller.base.decorator import Dispatch, RegisterSpec, plan_dispatch, registered_methods


class PeerFailed(RuntimeError):
    """A rank's error that only says another rank of its group failed (the peers of a tensor-parallel engine stop
    with their first process's error): a group call that fails on several ranks reports a rank's own error instead."""


class WorkerGroupFuture:
    """The pending result of a group call started with `submit`; `get()` waits for every rank and collects (once, cached).
    Passed as an argument to another group call, it is resolved first."""

    def __init__(self, handles: list[Any], wait: Callable[[list[Any]], list[Any]], collect: Callable[[list], Any]):
        self.handles = handles
        """Backend handles of the per-rank calls (Ray ObjectRefs for RayWorkerGroup), in rank order."""
        self._wait = wait
        self._collect = collect
        self._done = False
        self._result: Any = None

    def get(self) -> Any:
        if not self._done:
            self._result = self._collect(self._wait(self.handles))
            self._done = True
        return self._result


class WorkerGroup:
    """Backend-independent part of a worker group; subclasses set `_world_size` and implement `_execute_async` and
    `_wait`."""

    _world_size: int = 0
    _method_prefix: str = ""
    """Prepended to method names on the remote side (a colocated role's view calls `{role}_{method}`)."""

    @property
    def world_size(self) -> int:
        return self._world_size

    def _execute_async(self, method_name: str, ranks: Sequence[int], args: list[tuple], kwargs: list[dict]) -> list:
        """Start `method_name(*args[i], **kwargs[i])` on rank `ranks[i]`; return one handle per call."""
        raise NotImplementedError

    def _wait(self, handles: list[Any]) -> list[Any]:
        """Wait for the handles from `_execute_async`; return their results in the same order."""
        raise NotImplementedError

    def _bind_worker_methods(self, worker_cls: type) -> None:
        """Add a proxy for every `@register` method of `worker_cls`, calling `self._method_prefix + name` remotely."""
        for name, spec in registered_methods(worker_cls).items():
            if hasattr(self, name):
                raise AttributeError(
                    f"Cannot bind worker method {worker_cls.__name__}.{name}: the worker group already has an "
                    f"attribute {name!r}; rename the worker method."
                )
            setattr(self, name, self._make_proxy(self._method_prefix + name, spec))
            self._registered = {**getattr(self, "_registered", {}), name: (self._method_prefix + name, spec)}

    def submit(self, method_name: str, *args: Any, **kwargs: Any) -> WorkerGroupFuture:
        """Start a registered method as its proxy would and return its future at once (the proxy waits for it)."""
        registered = getattr(self, "_registered", {})
        if method_name not in registered:
            raise AttributeError(f"{method_name!r} is not a registered method of this worker group's workers.")
        remote_name, spec = registered[method_name]
        return self._call_async(remote_name, spec, *args, **kwargs)

    def _make_proxy(self, remote_name: str, spec: RegisterSpec) -> Callable[..., Any]:
        def proxy(*args: Any, **kwargs: Any) -> Any:
            return self._call_async(remote_name, spec, *args, **kwargs).get()

        proxy.__name__ = remote_name
        proxy.__doc__ = f"Group proxy of worker method {remote_name!r} ({spec.dispatch_mode})."
        return proxy

    def _call_async(self, remote_name: str, spec: RegisterSpec, *args: Any, **kwargs: Any) -> WorkerGroupFuture:
        """Dispatch one call according to `spec`, start it on the ranks, and return its future."""
        args = tuple(value.get() if isinstance(value, WorkerGroupFuture) else value for value in args)
        kwargs = {key: value.get() if isinstance(value, WorkerGroupFuture) else value for key, value in kwargs.items()}
        plan = plan_dispatch(spec.dispatch_mode, self.world_size, args, kwargs)
        handles = self._execute_async(remote_name, range(self.world_size), plan.args, plan.kwargs)
        return WorkerGroupFuture(handles, self._wait, collect=plan.collect)

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call a worker method on every rank with the same arguments; wait for the list of results. Any method of a
        plain worker class works; a colocated role's view reaches only the role's registered methods."""
        return self.execute_all_async(method_name, *args, **kwargs).get()

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> WorkerGroupFuture:
        every_rank = RegisterSpec(Dispatch.ONE_TO_ALL)
        return self._call_async(self._method_prefix + method_name, every_rank, *args, **kwargs)
