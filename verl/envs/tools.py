# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tool use: the model calls plain Python functions and gets tool messages back. A function's JSON schema (from its
signature and docstring) goes into the prompt via `tool_schemas()`. Calls are read in the format the model's chat
template writes them (`tool_call_format`): Qwen/Hermes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
blocks here, other formats (Qwen3.5's XML, GLM-4.5's) by vLLM's tool parser for them. README.md's "Multi-turn and
tool-use rollouts" covers formats, limits and concurrency.
"""

import asyncio
import contextlib
import inspect
import json
import logging
import math
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from verl.envs.base import EnvStep, MultiTurnEnv
from verl.rewards.sandbox.limits import SandboxUnavailable


logger = logging.getLogger(__name__)


TOOL_CALL = re.compile(
    r"<tool_call>((?:(?!<tool_call>).)*?)</tool_call>|<tool_call>((?:(?!<tool_call>).)*)\Z", re.DOTALL
)
"""A closed `<tool_call>` block, or a final unclosed one (as vLLM's hermes parser reads it); the body is stripped
after the match (whitespace matched in the pattern backtracks cubically on a long unclosed run of it). A block holds
no other `<tool_call>`, as `ToolCallFormat.read` blanks the other formats' calls: a bare opening (one the reasoning
mentions) is no block, and the call after it is read (it made one block up to the real call's end, inside the
reasoning, and the call was lost)."""
THINKING = re.compile(r"<think>.*?(?:</think>|$)|^(?:(?!<think>).)*?</think>", re.DOTALL)
"""A reasoning block (Qwen3, DeepSeek-R1), an unclosed one to the end of the turn, or the turn's text up to a first
`</think>` without an opening (a generation prompt that opens the block: R1 distills, Qwen3.5 thinking): calls
written in it are not made, as vLLM's tool parser reads only what its reasoning parser leaves. Markers inside a
call (code that prints "</think>") are the call's text, not reasoning."""
MAX_RESULT_CHARS = 2000
"""Longest tool message handed back to the model, a result or an error (a longer one is cut, with a note)."""


def parse_tool_calls(text: str) -> list[dict[str, Any] | str]:
    """The tool calls in a model turn: {"name", "arguments"} dicts, or an error string for a malformed block. A last
    call without `</tool_call>` counts when its JSON is complete (a call cut by the response budget is malformed)."""
    return [call for _, call in find_tool_calls(text)]


def find_tool_calls(text: str) -> list[tuple[tuple[int, int], dict[str, Any] | str]]:
    """parse_tool_calls with each block's (start, end) in `text`, for callers that keep the text around the calls.
    Blocks inside a `<think>` block are the model's reasoning, not calls."""
    calls = list(TOOL_CALL.finditer(text))
    pieces, position = [], 0
    for call in calls:  # the calls blanked (same length): a "</think>" in one ends no reasoning
        pieces += [text[position : call.start()], " " * (call.end() - call.start())]
        position = call.end()
    thinking = [match.span() for match in THINKING.finditer("".join([*pieces, text[position:]]))]
    return [
        (match.span(), _read_call((match.group(1) or match.group(2) or "").strip()))
        for match in calls
        if not any(start <= match.start() < end for start, end in thinking)
    ]


def _read_call(body: str) -> dict[str, Any] | str:
    try:
        call = json.loads(body)
    except ValueError as error:
        return f"the tool call is not valid JSON ({error})"
    except RecursionError:
        return "the tool call's JSON is nested too deeply"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return 'a tool call must be a JSON object with a "name" and "arguments"'
    return _checked_call(call["name"], call.get("arguments", {}))


def _checked_call(name: str, arguments: Any) -> dict[str, Any] | str:
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
            if isinstance(arguments, str):  # such a string as vLLM's parsers pass it on: JSON of the string
                arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        return "the tool call's arguments are not a JSON object"
    return {"name": name, "arguments": arguments}


def _read_hermes(text: str) -> tuple[str, list[dict[str, Any] | str]]:
    calls, rest, end = [], [], 0
    for (start, stop), call in find_tool_calls(text):
        calls.append(call)
        if isinstance(call, dict):  # a malformed block stays in the text, as vLLM's hermes parser leaves it
            rest.append(text[end:start])
            end = stop
    return "".join(rest) + text[end:], calls


VLLM_TOOL_PARSERS: tuple[str, ...] = ("qwen3_coder", "glm45", "llama3_json", "mistral", "pythonic", "gemma4")
"""vLLM tool parsers tried, in order, on a chat template whose calls are not Hermes blocks."""
PROBE_QUERY = "verl-tool-probe-query"
PROBE_CALL: tuple[str, dict[str, Any]] = ("verl_probe", {"count": 3, "word": "seven"})
PROBE_SCHEMA: dict[str, Any] = {
    "name": PROBE_CALL[0],
    "description": "A probe of the chat template's call format.",
    "parameters": {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "word": {"type": "string"}},
        "required": ["count", "word"],
    },
}
PROBE_RESULT = "verl-tool-probe-result"


class ToolCallFormat:
    """How a model writes tool calls. "hermes": `<tool_call>` JSON blocks, read here (a malformed block comes back to
    the model as an error). Any other name: vLLM's tool parser of that name (`vllm serve --tool-call-parser`), given
    the tools' schemas; it leaves a malformed call in the text, as vLLM's server does, so where the format opens each
    call with a `marker` (`<tool_call>` in Qwen3.5's and GLM-4.5's), an opening no call was read from is reported as
    a malformed call; where the format also closes each call (`closing`: `</tool_call>`), a final call without it (cut
    by the turn's token limit) is reported as malformed rather than made with the arguments written so far, and the
    calls' text is not reasoning (a `</think>` in an argument ends none), as for Hermes. Calls written inside a
    reasoning block are not made, in either."""

    def __init__(
        self,
        parser: str = "hermes",
        tokenizer: Any = None,
        tools: list[dict[str, Any]] | None = None,
        marker: str | None = None,
        closing: str | None = None,
    ):
        self.parser = parser
        self.marker = marker
        self.closing = closing if marker else None
        self.opening = "<tool_call>" if parser == "hermes" else None
        """Hermes: the text a call starts with (a stream sends the content before it as it comes). Other formats'
        parsers may tidy the content around the calls, so a stream holds it all to the end."""
        self._vllm: Any = None
        self._tokenizer = tokenizer
        if parser != "hermes":
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
            from vllm.tool_parsers import ToolParserManager

            self._vllm = ToolParserManager.get_tool_parser(parser)(tokenizer)
            self._request = ChatCompletionRequest(model="", messages=[], tools=tools or None)
            self._lock = threading.Lock()  # a parser instance is not meant for concurrent calls
            _PARSE_QUIET.install(type(self._vllm).__module__)

    def for_tools(self, tools: list[dict[str, Any]] | None) -> "ToolCallFormat":
        """This format for a request offering `tools` (vLLM's parsers type the arguments by their schemas)."""
        if self._vllm is None:
            return self
        return ToolCallFormat(self.parser, self._tokenizer, tools, self.marker, self.closing)

    def read(self, text: str) -> tuple[str, list[dict[str, Any] | str]]:
        """(the text without its well-formed calls, the calls: {"name", "arguments"} dicts, or an error string for a
        malformed one)."""
        if self._vllm is None:
            return _read_hermes(text)
        blanked, cut = text, ""
        if self.closing:  # the calls blanked (same length): a "</think>" in one ends no reasoning (a bare opening,
            # one the reasoning mentions, blanks nothing)
            marker, closing = re.escape(self.marker), re.escape(self.closing)
            calls = re.compile(rf"{marker}(?:(?!{marker}).)*?(?:{closing}|\Z)", re.DOTALL)
            blanked = calls.sub(lambda match: " " * len(match.group()), text)
        thought = max((match.end() for match in THINKING.finditer(blanked)), default=0)
        rest = text[thought:]
        last = rest.rfind(self.marker) if self.closing else -1
        if last >= 0 and self.closing not in rest[last:]:  # vLLM's parsers read what a cut call has so far
            rest, cut = rest[:last], rest[last:]
        with self._lock, _PARSE_QUIET.reading():
            found = self._vllm.extract_tool_calls(rest, self._request)
        calls = [_checked_call(call.function.name, call.function.arguments) for call in found.tool_calls or []]
        unread = rest.count(self.marker) - len(calls) if self.marker else 0
        calls += [f"the tool call after {self.marker} could not be read in this model's call format"] * unread
        if cut:
            calls.append(f"the tool call after {self.marker} has no {self.closing} (the turn ended inside it)")
        if not found.tools_called:
            return text, calls
        return text[:thought] + (found.content or "") + cut, calls


class _QuietWhileReading(logging.Filter):
    """Drops what a vLLM tool parser logs while `ToolCallFormat.read` runs it on this thread: Llama's JSON parser
    logs an exception's traceback for every turn with a brace that is no call (`\\boxed{5}`), two per final answer
    in a run's log; the reader reports a malformed call to the model itself. What the parser logs elsewhere (vLLM's
    own server) passes."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        self._installed: set[str] = set()

    def install(self, logger_name: str) -> None:
        if logger_name not in self._installed:
            self._installed.add(logger_name)
            logging.getLogger(logger_name).addFilter(self)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self._local, "on", False)


_PARSE_QUIET = _QuietWhileReading()


HERMES = ToolCallFormat()


def tool_call_format(
    tokenizer: Any,
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None = None,
    episodes: bool = True,
) -> ToolCallFormat:
    """The format in which `tokenizer`'s chat template writes an assistant's tool calls: the first reader (Hermes,
    then VLLM_TOOL_PARSERS) that reads a probe call back from the template's rendering of it. A template that does not
    render `tool_calls` gives Hermes, the format the prompt then has to teach. `episodes`: for a tool environment,
    the turn decoded without special tokens (as the rollout decodes a model turn), and the template must show tool
    messages after a model turn on their own (Gemma 4 writes tool results inside the model's turn); else (a server)
    with them, as vLLM reads a reply with tools. Raises NotImplementedError where these do not hold. A vLLM parser's
    format gets its `marker`: the last opening tag before the call that the template writes once per call, and its
    `closing` where the template closes each call with the marker's closing tag."""
    name, arguments = PROBE_CALL
    options = {**({"tools": tools} if tools else {}), **dict(template_kwargs or {})}
    try:
        turn = _probe_turn(tokenizer, 1, options, episodes)
    except Exception as error:  # e.g. a template that raises on `tool_calls`: the prompt has to teach the format
        logger.warning(
            "The chat template cannot render a tool call (%s); tool calls are read as Hermes blocks.", error
        )
        turn = ""
    found = "hermes" if name not in turn else None
    for parser in ("hermes", *VLLM_TOOL_PARSERS) if found is None else ():
        try:
            probe = ToolCallFormat(parser, tokenizer, [{"type": "function", "function": PROBE_SCHEMA}])
            if probe.read(turn)[1] == [{"name": name, "arguments": arguments}]:
                found = parser
                break
        except Exception:  # a parser for another model family (missing special tokens) does not apply
            continue
    if found is None:
        decoded = "decoded without special tokens, as a model turn is" if episodes else "decoded"
        raise NotImplementedError(
            f"The chat template writes a tool call as {turn.strip()!r} ({decoded}), which neither the Hermes reader "
            f"nor vLLM's tool parsers {list(VLLM_TOOL_PARSERS)} read back; tool calls are read in these formats only."
        )
    if episodes:
        query = {"role": "user", "content": PROBE_QUERY}
        followed = [query, {"role": "assistant", "content": name}, {"role": "tool", "content": PROBE_RESULT}]
        shown = tokenizer.apply_chat_template(followed, tokenize=False, add_generation_prompt=True, **options)
        if PROBE_RESULT not in shown[shown.rindex(name) :]:
            raise NotImplementedError(
                "The chat template does not show a tool message after the model's turn (Gemma 4's writes tool "
                "results inside the model's turn, after its calls), so a tool environment's results cannot be "
                "appended to an episode; tool environments are not supported for this model."
            )
    if found == "hermes":
        return HERMES
    try:
        two = _probe_turn(tokenizer, 2, options, episodes)
    except Exception:  # e.g. Llama 3.1's template refuses two calls in one turn: no marker
        two = ""
    openings = re.findall(r"<[^/<>\s][^<>\s]*>|\[[A-Z_]+\]", turn[: turn.index(name)])
    marker = next((tag for tag in reversed(openings) if turn.count(tag) == 1 and two.count(tag) == 2), None)
    closing = f"</{marker[1:]}" if marker and marker.startswith("<") else None
    if closing and not (
        turn.count(closing) == 1 and two.count(closing) == 2 and turn.index(closing) > turn.index(name)
    ):
        closing = None
    return ToolCallFormat(found, tokenizer, tools, marker, closing)


def _probe_turn(tokenizer: Any, calls: int, options: dict[str, Any], episodes: bool) -> str:
    """The assistant turn of `calls` probe calls as the chat template renders it, from the end of the generation
    prompt (what the model writes: a role header's text, Llama's "assistant\n\n" between its header tokens, is not
    the model's and kept a pythonic call from being read), decoded as a model turn is (without special tokens) for
    `episodes`, else with them but without the end-of-turn token (a reply's text stops before its stop token)."""
    name, arguments = PROBE_CALL
    call = {**tool_call(name, ""), "function": {"name": name, "arguments": arguments}}  # a mapping, as templates read
    turn = {"role": "assistant", "content": "", "tool_calls": [call] * calls}
    query = {"role": "user", "content": PROBE_QUERY}
    rendered = tokenizer.apply_chat_template([query, turn], tokenize=False, **options)
    opening = tokenizer.apply_chat_template([query], tokenize=False, add_generation_prompt=True, **options)
    start = len(opening) if rendered.startswith(opening) else rendered.rindex(PROBE_QUERY) + len(PROBE_QUERY)
    text = rendered[start:]
    if not episodes:
        from verl.data.tokenizer import special_strings

        body = text.rstrip()
        end = max(
            (token for token in special_strings(tokenizer) if token and body.endswith(token)), key=len, default=""
        )
        text = body[: len(body) - len(end)] if end else text
    return tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=episodes)


def python_tool(code: str) -> str:
    """Run a Python program and return what it prints (stdout), or its error.

    Args:
        code: the complete program; print the values you need.
    """
    from verl.rewards.sandbox import SandboxLimits, run_python

    result = run_python(code, limits=SandboxLimits(wall_s=5.0, cpu_s=3.0, memory_mb=512, output_kb=64))
    if result.status == "ok":
        return result.stdout
    return f"Error ({result.status}): {result.stderr.strip()[-500:] or 'no output'}"


class ToolEnv(MultiTurnEnv):
    """Calls the model's tools until a turn has no tool call; subclass it with `tools`, or pass them. A tool that
    raises returns "Error: ..."; each call runs in a thread of the worker, reported as timed out after
    `tool_timeout_s` (the thread cannot be stopped: run untrusted work in the sandbox)."""

    tools: tuple[Callable[..., Any], ...] = ()
    tool_timeout_s: float = 30.0
    """A plain tool call that has not returned by then is reported to the model as timed out."""
    max_calls_per_turn: int = 16
    """Calls made of one model turn; the turn's further calls are answered with an error (so one turn's calls, each
    up to `tool_timeout_s`, stay within `worker.rollout.env_step_timeout_s`)."""
    max_running_timed_out: int = 16
    """Timed-out calls whose threads may still run (they cannot be stopped); while that many do, a call is refused
    with an error instead of starting another thread."""
    concurrent_steps: int = 8
    tool_format: ToolCallFormat = HERMES
    """How the model writes calls; the rollout sets it from the chat template (`tool_call_format`)."""

    def __init__(self, tools: list[Callable[..., Any]] | None = None, tool_timeout_s: float | None = None) -> None:
        self.tools = tuple(tools) if tools is not None else tuple(self.tools)
        if tool_timeout_s is not None:
            if not tool_timeout_s > 0:
                raise ValueError(f"ToolEnv: tool_timeout_s={tool_timeout_s} must be positive.")
            self.tool_timeout_s = float(tool_timeout_s)
        names = [tool.__name__ for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"ToolEnv: tool names must be unique, got {names}.")
        self._by_name = dict(zip(names, self.tools))
        self._timed_out: list[threading.Thread] = []
        self._timed_out_lock = threading.Lock()

    def check_setup(self) -> None:
        """Before training: a `python_tool` can run a program here (SandboxUnavailable says what to install)."""
        if python_tool in self.tools:
            from verl.rewards.sandbox import isolation

            isolation("bwrap")

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The JSON schemas of the tools, for the chat template's `tools` argument."""
        from transformers.utils import get_json_schema

        return [get_json_schema(tool) for tool in self.tools]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(result text, failed) of one call; the text is at most MAX_RESULT_CHARS (and a note) long. A tool's own
        result that starts with "Error" counts as failed too (env/tool_errors), as `python_tool`'s failures do."""
        text, failed = self._call(name, arguments)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"
        return text, failed

    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        tool = self._by_name.get(name)
        if tool is None:
            return f"Error: there is no tool named {name[:100]!r}; the tools are {sorted(self._by_name)}.", True
        with self._timed_out_lock:
            self._timed_out = [thread for thread in self._timed_out if thread.is_alive()]
            if len(self._timed_out) >= self.max_running_timed_out:
                return f"Error: {len(self._timed_out)} earlier tool calls that timed out are still running.", True
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:  # the model's call is untrusted input: any failure, a result JSON cannot write too, goes back as text
                result = tool(**arguments)
                if inspect.isawaitable(result):  # an `async def` tool: run to its result in this thread
                    result = asyncio.run(_awaited(result))
                if inspect.isgenerator(result) or inspect.isasyncgen(result):
                    raise TypeError("the tool returned a generator; return its result (text, or what JSON can write)")
                outcome["text"] = result if isinstance(result, str) else json.dumps(result, default=str)
            except BaseException as error:
                outcome["error"] = error

        thread = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
        thread.start()
        thread.join(self.tool_timeout_s if math.isfinite(self.tool_timeout_s) else None)  # (join(inf) overflows)
        if thread.is_alive():
            with self._timed_out_lock:
                self._timed_out.append(thread)
            return f"Error: {name} did not return within {self.tool_timeout_s:g} s.", True
        if "error" in outcome:
            error = outcome["error"]
            if isinstance(error, SandboxUnavailable):  # the machine's failure, not the call's: the run stops, named
                raise error  # (as text to the model, every call failed and it learned to stop calling the tool)
            return f"Error: {name} raised {type(error).__name__}: {error}", True
        return outcome["text"], outcome["text"].startswith("Error")

    def step(self, state: dict[str, Any], response: str) -> EnvStep:
        calls = self.tool_format.read(response)[1]
        if not calls:
            return EnvStep(messages=[], done=True)
        messages, errors = [], 0
        for call in calls[: self.max_calls_per_turn]:
            if isinstance(call, str):
                text, failed = f"Error: {call}.", True
            else:
                text, failed = self.call(call["name"], call["arguments"])
            errors += failed
            messages.append({"role": "tool", "content": text})
        if len(calls) > self.max_calls_per_turn:  # one message for the rest, which were not made
            more = len(calls) - self.max_calls_per_turn
            text = f"Error: at most {self.max_calls_per_turn} tool calls are made of one turn; {more} more were not."
            messages.append({"role": "tool", "content": text})
            errors += more
        return EnvStep(messages=messages, done=False, tool_calls=len(calls), tool_errors=errors)


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI `tool_calls` entry: a fresh `call_<hex>` id, the function's name and its JSON-string arguments."""
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def assistant_message(text: str, tools: ToolCallFormat | None) -> dict[str, Any]:
    """The OpenAI assistant message of a generated `text`. With `tools` (the model's call format), well-formed calls
    become `tool_calls` and the content is the text around them (None if only whitespace); a malformed call stays in
    it, as vLLM's parsers leave it."""
    content, found = tools.read(text) if tools is not None else (text, [])
    calls = [
        tool_call(c["name"], json.dumps(c["arguments"], ensure_ascii=False)) for c in found if isinstance(c, dict)
    ]
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": content if content.strip() else None, "tool_calls": calls}


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
