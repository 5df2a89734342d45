# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`verifiers` (0.4, `verifiers.v1`) environments in training and evaluation.

A verifiers taskset's episode runs as verifiers runs it (its tasks, harness program, tool servers and `@vf.reward`
functions, unchanged); only the model it talks to is ours: the harness's requests reach a local OpenAI-style endpoint
that asks the episode's client, which is the rollout engine in training and the evaluated endpoint in
`python -m verl.envs.evaluate`. Its rewards become env_reward and env_reward_<name> (`rubric_reward` returns them).

    python -m verl.envs.verifiers_env export --env path/to/taskset.py:MyTaskset --output train.jsonl
"""

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import importlib
import json
import logging
import math
import os
import sys
import time
import types
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from verl.envs.base import EnvRowError
from verl.envs.client_env import ChatClientEnv, EpisodeOver, chat_client, chat_completion, reply_reasoning
from verl.envs.tools import HERMES, ToolCallFormat, assistant_message


TASK_COLUMN = "verifiers_task"
"""The dataset column holding a row's verifiers task data (JSON), written by `export`."""
HARNESS_ID = "verl_local_chat"
"""The harness an episode runs by default: verifiers' `null` chat program, run by this Python (see _harness_module)."""
SEAT_DEFAULTS = {"harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}
OVER_MESSAGE = "This episode's maximum context length is reached"
"""What the harness is told when the episode's turns or response budget are spent (a context-length error)."""
FORWARDED = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "tool_choice")
"""Request fields the harness may set that go on to the episode's client (training applies its own sampling)."""


# ----------------------------------------------------------------------------------------------------------------
# the harness: verifiers' `null` chat program without a uv environment


def _harness_module() -> types.ModuleType:
    """A module exporting LocalChatHarness, importable as HARNESS_ID: verifiers' `null` harness run by this Python,
    which has its packages, instead of a uv environment verifiers would build."""
    from verifiers.v1.errors import HarnessError
    from verifiers.v1.harnesses.null import NullHarness

    class ThisPython:
        """The runtime, except that a PEP 723 script runs with this Python, through a warm Python server
        (warm_python.py; off with VERL_WARM_PYTHON=0) instead of a uv environment."""

        def __init__(self, runtime: Any) -> None:
            self._runtime = runtime

        def __getattr__(self, name: str) -> Any:
            return getattr(self._runtime, name)

        async def prepare_uv_script(self, script: str | bytes, env: Any = None, *, activate: bool = True) -> list:
            data = script.encode() if isinstance(script, str) else script
            path = f".verl-harness-{hashlib.sha256(data).hexdigest()[:16]}.py"
            await self._runtime.write(path, data)
            workdir = getattr(self._runtime, "workdir", None)
            if workdir is None or os.environ.get("VERL_WARM_PYTHON", "1") == "0":
                return [sys.executable, path]
            return await asyncio.to_thread(_warm_python().command, path, str(workdir))

    class LocalChatHarness(NullHarness):
        """verifiers' `null` harness (its chat program and MCP tool client, unchanged) run by this Python."""

        @staticmethod
        def _local(runtime: Any) -> ThisPython:
            if runtime.type != "subprocess":
                raise HarnessError(
                    f"harness {HARNESS_ID!r} runs in the subprocess runtime only (got {runtime.type!r}); use "
                    "verifiers' own harnesses (e.g. null) in containers"
                )
            return ThisPython(runtime)

        async def setup(self, runtime: Any) -> None:
            await super().setup(self._local(runtime))

        async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
            return await super().launch(ctx, trace, self._local(runtime), *args, **kwargs)

    module = types.ModuleType(HARNESS_ID, LocalChatHarness.__doc__)
    module.LocalChatHarness = LocalChatHarness
    module.__all__ = ["LocalChatHarness"]
    return module


@functools.cache
def _warm_python() -> Any:
    """This process's warm Python servers (one per harness program), closed at its exit."""
    import atexit

    from verl.utils.warm_python import WarmPython

    warm = WarmPython()
    atexit.register(warm.close)
    return warm


def register_harness() -> None:
    """Make HARNESS_ID importable (once per process); drop verifiers' warning about the context-length error that
    ends an episode on its budget (expected)."""
    if HARNESS_ID not in sys.modules:
        sys.modules[HARNESS_ID] = _harness_module()
        server_log = logging.getLogger("verifiers.v1.interception.server")
        server_log.addFilter(lambda record: OVER_MESSAGE not in record.getMessage())


# ----------------------------------------------------------------------------------------------------------------
# the local endpoint an episode's harness talks to


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [part.model_dump() if hasattr(part, "model_dump") else part for part in content]
    if all(isinstance(part, dict) and part.get("type") == "text" for part in parts):
        return "".join(part.get("text", "") for part in parts)
    raise NotImplementedError(f"{where} has content parts other than text; verifiers environments run text only.")


REASONING_END = "</think>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(the reasoning, the content) of a model's turn as a reasoning parser (vLLM's `--reasoning-parser`, e.g.
    qwen3, deepseek_r1) separates them: the text up to the first `</think>` (its `<think>` left out, which the chat
    template's generation prompt may have opened instead), and what follows it; (None, text) without one."""
    head, end, tail = text.partition(REASONING_END)
    if not end:
        return None, text
    return head.strip().removeprefix("<think>").strip(), tail.lstrip("\n")


def _error_body(message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


class Bridge:
    """An OpenAI-style chat endpoint on 127.0.0.1 for one episode, relaying the harness's requests to `client`.

    A request's assistant turns are replaced by the client's own, so the conversation repeats exactly (training
    checks it token by token); text tool calls reach the harness as `tool_calls`, as `verl.serve` returns them. On
    EpisodeOver the harness gets a context-length error, ends cleanly and is scored as far as it went; any other
    error is kept in `error` and the request fails.
    """

    def __init__(self, client: Any, tool_format: ToolCallFormat = HERMES, given: int = 0) -> None:
        self.client = client
        self.tool_format = tool_format
        """How the model writes tool calls (read out of a turn's text when the client did not)."""
        self.given = given
        """The assistant messages of the task's prompt (few-shot turns), which requests carry as they are."""
        self.turns: list[dict[str, Any]] = []
        """The assistant messages as the client gave them, one per answered request."""
        self.requests: list[dict[str, Any]] = []
        """The requests the harness sent (their JSON bodies)."""
        self.over: EpisodeOver | None = None
        self.error: BaseException | None = None

    @contextlib.asynccontextmanager
    async def serve(self) -> Any:
        """Yields the endpoint's base URL (".../v1") while it serves."""
        from aiohttp import web

        app = web.Application(client_max_size=1024**3)
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        finally:
            await runner.cleanup()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        self.requests.append(body)
        try:
            raw = await self.ask(body)
        except EpisodeOver as over:
            self.over = over
            return web.json_response(_error_body(f"{OVER_MESSAGE}: {over}", "context_length_exceeded"), status=400)
        except Exception as error:  # the harness gets a 400 (not retried); rollout() raises the error itself
            self.error = error
            return web.json_response(_error_body(f"{type(error).__name__}: {error}"), status=400)
        if not body.get("stream"):
            return web.json_response(raw)
        from verifiers.v1.dialects import ChatDialect

        return web.Response(body=b"".join(ChatDialect().stream_events(raw)), content_type="text/event-stream")

    async def ask(self, body: dict[str, Any]) -> dict[str, Any]:
        """The client's reply to a request `body`, as an OpenAI chat completion dict."""
        messages = self.client_messages(body.get("messages") or [])
        extra = {key: body[key] for key in FORWARDED if body.get(key) is not None}
        if body.get("tools"):
            extra["tools"] = body["tools"]
        if body.get("chat_template_kwargs") is not None:  # the client holds them to the run's
            extra["extra_body"] = {"chat_template_kwargs": body["chat_template_kwargs"]}
        reply = await self.client.chat.completions.create(model=body.get("model"), messages=messages, **extra)
        choice = reply.choices[0]
        text = choice.message.content or ""
        calls = [call.model_dump(exclude_none=True) for call in getattr(choice.message, "tool_calls", None) or []]
        self.turns.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
        # the harness gets the reasoning apart from the content, as from an endpoint with a reasoning parser (which
        # separated it already in evaluation; the engine's text holds the block in training), so that rewards that
        # read the reply (trace.last_reply) score the same in both
        reasoning = reply_reasoning(choice.message)
        content = text
        if not reasoning:
            reasoning, content = split_reasoning(text)
        if calls:  # the endpoint parsed them
            message = {
                "role": "assistant",
                "content": content if text else choice.message.content,
                "tool_calls": calls,
            }
        else:  # text tool calls read as `verl.serve` reads them
            tools = body.get("tools") if body.get("tool_choice") != "none" else None
            message = assistant_message(content, self.tool_format.for_tools(tools) if tools else None)
        if reasoning:
            message["reasoning_content"] = reasoning
        finish = "tool_calls" if "tool_calls" in message and not calls else choice.finish_reason  # as verl.serve
        usage = getattr(reply, "usage", None)
        return {
            "id": getattr(reply, "id", None) or f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": getattr(reply, "created", None) or int(time.time()),
            "model": getattr(reply, "model", None) or body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage.model_dump(exclude_none=True) if usage is not None else None,
        }

    def client_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The request's messages for the client: assistant turns as the client gave them, other contents as text."""
        out, turn, given = [], 0, self.given
        for position, message in enumerate(messages):
            if message.get("role") == "assistant" and given:  # a turn of the prompt's, not the model's
                given -= 1
                out.append({**message, "content": _text(message.get("content"), f"message {position} (a request)")})
            elif message.get("role") == "assistant":
                if turn >= len(self.turns):
                    raise ValueError(
                        f"message {position} of the harness's request is an assistant turn the model did not write; "
                        "the harness must resend the conversation as the model wrote it (no compaction or edits)"
                    )
                out.append(dict(self.turns[turn]))
                turn += 1
            else:
                out.append({**message, "content": _text(message.get("content"), f"message {position} (a request)")})
        return out


# ----------------------------------------------------------------------------------------------------------------
# tasks as dataset rows


def task_messages(data: Any, harness: Any = None) -> list[dict[str, Any]]:
    """The messages `harness` (a verifiers Harness; None: one that, like verifiers' `null` chat program, sends the
    system prompt as a system message) opens a task's episode with, as text: the task's system prompt as a system
    message (where the harness emits it separately, APPENDS_SYSTEM_PROMPT; else it folds it into the user prompt),
    then its prompt: one user message, or its messages (e.g. few-shot turns), the last one the user's."""
    if harness is None:
        system, prompt = data.system_prompt, data.prompt
    else:
        try:
            system, prompt = harness.resolve_prompt(data)
        except TypeError as error:  # a harness that folds the system prompt, and a prompt of messages
            raise NotImplementedError(f"task {data.idx}: {error}") from None
    if prompt is None:
        raise NotImplementedError(
            f"task {data.idx} has no prompt (a user opens it); only prompted tasks are supported."
        )
    messages = [{"role": "system", "content": system}] if system else []  # as the chat program: none when empty
    if isinstance(prompt, str):
        return [*messages, {"role": "user", "content": prompt}]
    from verifiers.v1.dialects.chat import message_to_wire

    for position, message in enumerate(prompt):
        wire = message_to_wire(message)
        wire["content"] = _text(wire.get("content"), f"task {data.idx}'s prompt (message {position})")
        messages.append({key: value for key, value in wire.items() if value is not None or key == "content"})
    roles = [message["role"] for message in messages]
    if not roles or roles[-1] != "user":
        raise NotImplementedError(
            f"task {data.idx}: a prompt of messages {roles} cannot be a dataset prompt (the last message must be the "
            "user's, which the model answers)."
        )
    return messages


def task_row(task: Any, harness: Any = None) -> dict[str, Any]:
    """A task as a JSONL row the trainer reads: `prompt` (task_messages: the user's text where that is all, else the
    chat messages), `answer` (the task data's, if it has one) and TASK_COLUMN (the task data as JSON)."""
    answer = task.data.model_dump(mode="json").get("answer")
    messages = task_messages(task.data, harness)
    return {
        "prompt": messages[0]["content"] if len(messages) == 1 else messages,
        "answer": "" if answer is None else str(answer) if isinstance(answer, (int, float)) else answer,
        TASK_COLUMN: json.dumps(task.data.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False),
    }


def _missing_fields(error: Any) -> list[str]:
    """The fields a pydantic ValidationError says are missing (dotted paths)."""
    return [".".join(map(str, item["loc"])) for item in error.errors() if item.get("type") == "missing"]


# ----------------------------------------------------------------------------------------------------------------
# the environment


async def _probe_reply(*, model: str | None = None, **_: Any) -> Any:
    """The probe episode's answer to every request: an empty final turn."""
    return chat_completion({"role": "assistant", "content": ""}, "stop", model or "probe", 0, 0)


class VerifiersEnv(ChatClientEnv):
    """A verifiers taskset's episodes as a ChatClientEnv (single agent seat).

    `taskset`: an installed taskset's id, a .py file exporting one (its folder goes on the import path and
    PYTHONPATH), or its config block with the id under "id"; `config`: the rest of verifiers' `[env]` block. The
    harness defaults to HARNESS_ID; retries are refused (a retry would restart the model's conversation).
    """

    tool_format: ToolCallFormat = HERMES
    """How the model writes tool calls; the rollout sets it from the chat template (verl.envs.tools.tool_call_format)."""

    def __init__(self, taskset: str | Mapping[str, Any], **config: Any) -> None:
        block = {"id": taskset} if isinstance(taskset, str) else dict(taskset)
        ident = str(block.get("id") or "")
        self.name = f"verifiers taskset {ident!r}"
        given = ident
        try:
            self.vf = vf = importlib.import_module("verifiers.v1")
        except ImportError as error:
            raise ValueError(
                f"{self.name} is a verifiers environment, but the verifiers package cannot be imported ({error}); "
                "install it with `pip install -e '.[verifiers]'`."
            ) from None
        if ident.endswith(".py"):
            block["id"] = ident = self._import_file(ident)
        register_harness()
        raw = {**config, "taskset": block}
        try:
            config_cls = vf.env_config_type(ident, str(raw.get("id") or ""))
            seats = [
                name for name, field in config_cls.model_fields.items() if isinstance(field.default, vf.AgentConfig)
            ]
            if len(seats) != 1:
                raise NotImplementedError(
                    f"{self.name}: its env has {len(seats)} agent seats ({seats}); only single-agent envs are supported."
                )
            self.seat = seats[0]
            seat = raw.get(self.seat) or {}
            raw[self.seat] = {**SEAT_DEFAULTS, **(seat.model_dump() if hasattr(seat, "model_dump") else seat)}
            self.config = vf.resolve_env_config(raw)
            env = vf.load_environment(self.config)
        except (ImportError, AttributeError, TypeError, ValueError) as error:
            raise ValueError(
                f"{self.name}: building its verifiers env failed: {type(error).__name__}: {error}"
            ) from error
        for where, retries in (("", self.config.retries), (f"{self.seat}.", getattr(self.config, self.seat).retries)):
            if retries.max_retries or retries.rules:
                raise ValueError(
                    f"{self.name}: {where}retries are set; a retried rollout would ask the model again from the start, "
                    "which the trainer cannot follow. Leave them unset."
                )
        self.taskset_cls = type(env.taskset)
        self.spec = f"{given}:{self.taskset_cls.__name__}" if given.endswith(".py") else f"verifiers:{given}"
        """How `--env` names this taskset."""
        self._export = f"`python -m verl.envs.verifiers_env export --env {self.spec} --output FILE`" + (
            " (with the same --env-kwargs)" if config or len(block) > 1 else ""
        )
        self.task_cls = self.taskset_cls.task_type()
        self.data_cls = self.task_cls.data_type()
        self.harness = getattr(env, "_harnesses", {}).get(self.seat)
        """The seat's verifiers Harness (how it places the system prompt: task_messages), or None where verifiers
        does not expose it (then as its `null` chat program does)."""
        self._tools: list[dict[str, Any]] | None = None
        self._probed = False
        self._served: dict[int, list[Any]] = {}
        """id(event loop) -> [its shared verifiers env, the exit stack of its serving, the lock that starts it]."""

    def _import_file(self, path: str) -> str:
        """Make the taskset file importable by its name (here and in subprocesses); returns that name."""
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"{self.name}: the file {path} does not exist.")
        folder, name = os.path.dirname(path), os.path.splitext(os.path.basename(path))[0]
        if folder not in sys.path:
            sys.path.insert(0, folder)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if folder not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([folder, *filter(None, paths)])
        module = importlib.import_module(name)
        if os.path.abspath(getattr(module, "__file__", "") or "") != path:
            raise ValueError(
                f"{self.name}: another module named {name!r} ({getattr(module, '__file__', None)}) is imported already; "
                "rename the taskset file."
            )
        return name

    def new_env(self) -> Any:
        """A fresh verifiers env (env.serving() keeps its resources on the env object)."""
        return self.vf.load_environment(self.config)

    async def _serving_env(self) -> Any:
        """The serving verifiers env the running loop's episodes share, so the taskset's shared tool servers start
        once (per-task ones still start per episode); `release` ends it."""
        key = id(asyncio.get_running_loop())
        entry = self._served.setdefault(key, [None, None, asyncio.Lock()])
        async with entry[2]:  # concurrent first episodes: one of them starts the serving
            if entry[0] is None:
                env = self.new_env()
                stack = contextlib.AsyncExitStack()
                await stack.enter_async_context(env.serving())
                entry[0], entry[1] = env, stack
        return entry[0]

    async def release(self) -> None:
        """Stop the running event loop's shared env (its shared tool servers)."""
        entry = self._served.pop(id(asyncio.get_running_loop()), None)
        if entry is not None and entry[1] is not None:
            await entry[1].aclose()

    def tasks(self, limit: int | None = None) -> Iterator[Any]:
        """The taskset's tasks, as verifiers iterates them (idx set, the taskset's system prompt applied)."""
        taskset = self.new_env().taskset
        if limit is not None:
            taskset = taskset.take(limit)
        elif not taskset.bounded:
            raise ValueError(f"{self.name} is infinite: give the number of tasks to take.")
        return iter(taskset)

    def reset(self, row: dict[str, Any]) -> dict[str, Any]:
        """The episode's state: the row and its task data (TASK_COLUMN), which must be valid data of the taskset's
        data class (EnvRowError naming what is wrong and how to write the dataset again)."""
        raw = row.get(TASK_COLUMN)
        if raw is None:
            raise EnvRowError(
                f"{self.name}: the row has no {TASK_COLUMN!r} column (the task's verifiers data); write the dataset "
                f"with {self._export}."
            )
        try:
            task_data = json.loads(raw) if isinstance(raw, str) else raw
            what = "" if isinstance(task_data, Mapping) else f"is {task_data!r:.80}"
        except ValueError as error:
            what = f"is not JSON ({error})"
        if what:  # a corrupt column: the data's fault, not the environment's code
            raise EnvRowError(
                f"{self.name}: the row's {TASK_COLUMN!r} {what}, not the object of a task's data; write the dataset "
                f"again with {self._export}."
            )
        task_data = dict(task_data)
        self.task_data(task_data)
        return {"row": row, "task_data": task_data}

    def task_data(self, task_data: Mapping[str, Any]) -> Any:
        """`task_data` as the taskset's data class (`data_cls`); EnvRowError where it does not validate."""
        from pydantic import ValidationError

        try:
            return self.data_cls.model_validate(dict(task_data))
        except ValidationError as error:
            missing = _missing_fields(error)
            what = f"it has no {', '.join(map(repr, missing))}" if missing else str(error).replace("\n", "; ")
            raise EnvRowError(
                f"{self.name}: the row's {TASK_COLUMN!r} does not match the taskset's data class "
                f"{self.data_cls.__name__}: {what} (a dataset exported from another taskset, or from an older version "
                f"of this one?); write the dataset again with {self._export}."
            ) from None

    def episode_data(self, task_data: Mapping[str, Any], messages: list[dict[str, Any]]) -> Any:
        """The task data an episode of `messages` (the conversation the model is given) runs with: the row's,
        unchanged where they are the messages the harness opens the task with (task_messages), so that its rewards
        read the task as verifiers gives it; else (data.format_prompt rewrote the prompt, or the dataset's prompt is
        not the export's) with its prompt, and its system prompt where that differs, set to them, so that the
        harness sends what the model is given."""
        data = self.task_data(task_data)
        given = []
        for position, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"{self.name}: message {position} of the prompt has no chat role ({role!r}).")
            given.append({**message, "content": _text(message.get("content"), f"message {position} of the prompt")})
        if not given or given[-1]["role"] != "user":
            raise ValueError(f"{self.name}: an episode starts from messages that end with the user's, got {given}.")
        try:
            expected = task_messages(data, self.harness)
        except NotImplementedError:
            expected = None
        pairs = [(message["role"], message["content"]) for message in given]
        if expected is not None and pairs == [(message["role"], message["content"]) for message in expected]:
            return data
        system, rest = data.system_prompt, given
        if system and given[0] == {"role": "system", "content": system}:
            rest = given[1:]  # the task's own system prompt, placed as the harness places it
        else:
            system = None
        single = len(rest) == 1 and isinstance(data.prompt, str)
        return self.task_data({**task_data, "prompt": rest[0]["content"] if single else rest, "system_prompt": system})

    async def run_task(self, client: Any, model: str, data: Any, scored: bool = True) -> tuple[Any, Bridge]:
        """One verifiers episode of the task with data `data` (a `data_cls`), its model requests asked of `client`:
        (the episode, its bridge)."""
        env = await self._serving_env()
        task = self.task_cls(data, env.config.taskset.task)
        if not scored:
            task = task.defer_scoring()
        prompt = data.prompt if isinstance(data.prompt, list) else []
        given = sum(message.role == "assistant" for message in prompt)  # few-shot turns: not the model's
        bridge = Bridge(client, self.tool_format, given)
        async with bridge.serve() as base_url:
            # the eval client relays the harness's requests to the bridge; no key is read (an unset variable)
            endpoint = self.vf.EvalClientConfig(base_url=base_url, api_key_var="VERL_VERIFIERS_BRIDGE_KEY")
            context = self.vf.ModelContext(model=model, client=endpoint)
            episode = await env.run_episode(task, context)
        return episode, bridge

    async def rollout(self, client: Any, model: str, messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
        data = self.episode_data(state["task_data"], messages)
        episode, bridge = await self.run_task(client, model, data)
        if bridge.error is not None:
            raise bridge.error
        if not episode.ok:
            failure = episode.last_error or next((t.last_error for t in episode.traces if not t.ok), None)
            detail = f"{failure.type}: {failure.message}" if failure is not None else "no trace"
            raise RuntimeError(f"{self.name}: the episode of task {state['task_data'].get('idx')} failed: {detail}")
        (trace,) = episode.traces
        info = {"reward": float(trace.reward), "tool_calls": float(len(trace.tool_messages))}
        for name, reward in trace.rewards.items():
            info[f"reward_{name}"] = math.nan if reward is None else float(reward.score)
        for name, value in trace.metrics.items():
            info[f"metric_{name}"] = math.nan if value is None else float(value)
        state["info"] = info
        if bridge.over is not None:
            raise bridge.over  # scored as far as it went; the episode ended on the budget, not on its own

    def episode_info(self, state: dict[str, Any]) -> dict[str, float]:
        """reward (the taskset's weighted sum of its rewards), reward_<name> (each reward's score), metric_<name>
        (each metric) and tool_calls (the tool results the harness got)."""
        return dict(state.get("info", {}))

    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The tools the harness offers the model, found by an unscored probe episode of the first task."""
        if not self._probed:
            self._tools, self._probed = self._probe_tools(), True
        return self._tools

    def _probe_tools(self) -> list[dict[str, Any]] | None:
        env = self.new_env()
        harness = getattr(self.config, self.seat).harness
        toolsets = self.task_cls.toolsets(env.config.taskset.task) or type(env.taskset).toolsets(env.config.taskset)
        if harness is not None and harness.id == HARNESS_ID and not toolsets:
            return None  # the chat program offers the taskset's tools only
        (task,) = list(self.tasks(1))

        async def probe() -> tuple[Any, Bridge]:
            try:
                return await self.run_task(chat_client(_probe_reply), "probe", task.data, scored=False)
            finally:
                await self.release()

        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its own event loop, whoever calls
            episode, bridge = pool.submit(asyncio.run, probe()).result()
        if not bridge.requests:
            error = episode.last_error or next((t.last_error for t in episode.traces if t.last_error), None)
            raise ValueError(f"{self.name}: finding its tools failed: the harness sent no request ({error}).")
        return bridge.requests[0].get("tools") or None


def load_verifiers_environment(
    spec: str, kwargs: Mapping[str, Any] | None = None, class_name: str | None = None
) -> VerifiersEnv:
    """`worker.rollout.env=verifiers:<taskset id>` (or a taskset file's path) with `env_kwargs` = the rest of
    verifiers' [env] block; `class_name`: the taskset class named (`path.py:TasksetClass`), which must be the one
    verifiers loads (the file's `__all__` exports one taskset, and verifiers takes that one)."""
    kwargs = dict(kwargs or {})
    block = kwargs.pop("taskset", None) or {}
    if not isinstance(block, Mapping):
        raise ValueError(f"verifiers:{spec}: env_kwargs.taskset must be the taskset's config block, got {block!r}.")
    env = VerifiersEnv({**block, "id": spec}, **kwargs)
    loaded = env.taskset_cls.__name__
    if class_name is not None and loaded != class_name:
        raise ValueError(
            f"{env.name}: the taskset named is {class_name}, but the file exports {loaded} in its `__all__`, which "
            f"is the taskset verifiers loads from it (one per file); name {loaded}, or export {class_name} in "
            "`__all__` instead."
        )
    return env


# ----------------------------------------------------------------------------------------------------------------
# the reward function and the dataset export


def rubric_reward(sample: dict[str, Any]) -> dict[str, float]:
    """`worker.reward.reward_function=verl/envs/verifiers_env.py:rubric_reward`: the verifiers episode's reward as
    `overall` and each of its rewards by name (their scores)."""
    info = sample["extra_info"]
    if "env_reward" not in info:
        raise ValueError(
            "rubric_reward scores verifiers episodes: the sample has no env_reward (worker.rollout.env must be a "
            "verifiers taskset)."
        )
    prefix = "env_reward_"
    named = {key[len(prefix) :]: float(value) for key, value in info.items() if key.startswith(prefix)}
    return {"overall": float(info["env_reward"]), **named}


def export(env: VerifiersEnv, output: str, limit: int | None = None) -> int:
    """Write the taskset's tasks as the trainer's JSONL (task_row per line); returns the number written. The file is
    replaced only once every task is written (a taskset that fails part-way leaves an earlier export as it was)."""
    from verl.utils.files import atomic_write

    count = 0

    def write(f: Any) -> None:
        nonlocal count
        for task in env.tasks(limit):
            f.write(json.dumps(task_row(task, env.harness), ensure_ascii=False) + "\n")
            count += 1

    atomic_write(output, write, sync=False)
    return count


def main(argv: list[str] | None = None) -> int:
    from verl.utils.cli import positive
    from verl.utils.config import unwritable

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("export", help="write a taskset's tasks as the trainer's JSONL")
    command.add_argument("--env", required=True, help="path/to/taskset.py:TasksetClass or verifiers:<taskset id>")
    command.add_argument("--env-kwargs", default="{}", help="JSON: the rest of verifiers' [env] block")
    command.add_argument("--output", required=True)
    command.add_argument(
        "--limit", type=positive(int), default=None, help="the first N tasks (needed for infinite tasksets)"
    )
    args = parser.parse_args(argv)
    problem = unwritable(args.output, file=True) if args.output else "which is empty; give a file path"
    if problem is not None:
        parser.error(f"--output '{args.output}', {problem}.")
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as error:
        parser.error(f"--env-kwargs is not JSON: {error}.")
    if not isinstance(env_kwargs, dict):
        parser.error(f'--env-kwargs must be a JSON object ({{"key": value}}), got {args.env_kwargs}.')
    spec, class_name = args.env, None
    if spec.startswith("verifiers:"):
        taskset = spec[len("verifiers:") :]
    else:
        path, sep, name = spec.rpartition(":")
        taskset, class_name = (path, name or None) if sep and path.endswith(".py") else (spec, None)
        if not taskset.endswith(".py"):
            raise SystemExit(
                f"export: --env {spec!r} must be path/to/taskset.py:TasksetClass or verifiers:<taskset id>."
            )
        if os.path.isfile(taskset) and os.path.exists(args.output) and os.path.samefile(taskset, args.output):
            parser.error(f"--output '{args.output}' is the --env file: it would be overwritten; write elsewhere.")
    try:
        env = load_verifiers_environment(taskset, env_kwargs, class_name)
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)  # as evaluate's --output
        count = export(env, args.output, args.limit)
    except (ValueError, NotImplementedError) as error:
        raise SystemExit(f"export: {error}") from None
    except OSError as error:
        raise SystemExit(f"export: --output {args.output} cannot be written: {error}.") from None
    print(f"wrote {count} tasks of {env.name} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
