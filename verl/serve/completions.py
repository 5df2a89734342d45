# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""OpenAI's text completions (`POST /v1/completions`) on verl.serve's engine, with no chat template.

Prompts are strings or token ids, one or a list; `echo` returns the prompt first, with its logprobs when asked:
`echo: true, max_tokens: 0, logprobs: k` is how lm-eval's `local-completions` scores a continuation.
"""

import time
import uuid
from collections.abc import Iterator
from typing import Any

from verl.serve.request_checks import (
    ENGINE_FAILED,
    SAMPLING_FIELDS,
    RequestError,
    check_options,
    context_budget,
    parse,
    ranked,
    token_usage,
)
from verl.workers.rollout.vllm_compat import render_prompt


COMPLETION_FIELDS = SAMPLING_FIELDS | {"prompt", "echo"}
"""The completions request fields this server carries out; any other must be absent or its default."""


def check_completion(body: Any, served_name: str) -> tuple[Any, list[str | list[int]]]:
    """(`body` as vLLM's CompletionRequest, its prompts), or a RequestError naming the first bad field."""
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    request = parse(CompletionRequest, body, served_name, COMPLETION_FIELDS)
    prompt = request.prompt
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(item, (str, list)) and item for item in prompt):
        prompts = list(prompt)
    else:
        raise RequestError(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists, got "
            f"{prompt!r}."
        )
    check_options(request)
    if request.max_tokens is not None and request.max_tokens < 0:
        raise RequestError(f"'max_tokens' must be >= 0, got {request.max_tokens}.")
    if request.max_tokens == 0 and not request.echo:
        raise RequestError("'max_tokens' of 0 needs 'echo': true (the reply is then the prompt alone).")
    return request, prompts


def _entries(token_ids: list[int], positions: list[dict[int, Any]], top: int) -> list[tuple[str, float, dict]]:
    """The logprob entries of tokens, from each position's vLLM Logprobs: (its text, its logprob, `top_logprobs`:
    the token and the `top` most likely, by their text; -inf as -9999.0)."""
    entries = []
    for token_id, alternatives in zip(token_ids, positions):
        best = [alternatives[token_id], *(logprob for _, logprob in ranked(alternatives, top))]
        texts = [(logprob.decoded_token or "", max(logprob.logprob, -9999.0)) for logprob in best]
        entries.append((*texts[0], dict(texts)))
    return entries


class CompletionChoice:
    """One choice (a prompt's sample) as the engine extends it: text, tokens and, when asked, logprob entries."""

    def __init__(self, index: int, top: int | None) -> None:
        self.index, self.top = index, top
        self.text, self.tokens, self.entries = "", 0, []
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    def add(self, completion: Any) -> tuple[str, list[tuple[str, float | None, dict | None]]]:
        """Take one step's delta (a vLLM CompletionOutput): (its new text, its new logprob entries)."""
        if completion.finish_reason == "error":  # vLLM: a retryable internal error, which its server makes a 500
            raise RuntimeError(ENGINE_FAILED)
        self.text += completion.text
        self.tokens += len(completion.token_ids)
        self.finish_reason = completion.finish_reason or self.finish_reason
        self.stop_reason = completion.stop_reason if completion.finish_reason else self.stop_reason
        entries = [] if self.top is None else _entries(completion.token_ids, completion.logprobs or [], self.top)
        self.entries += entries
        return completion.text, entries


def logprobs_object(entries: list[tuple[str, float | None, dict | None]], offset: int = 0) -> dict[str, Any]:
    """OpenAI's completions `logprobs`: tokens, token_logprobs, top_logprobs and each token's text_offset."""
    offsets = []
    for token, _, _ in entries:
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": [token for token, _, _ in entries],
        "token_logprobs": [logprob for _, logprob, _ in entries],
        "top_logprobs": [top for _, _, top in entries],
        "text_offset": offsets,
    }


class Completion:
    """A completions request the engine holds: one engine request per prompt, `n` choices each."""

    def __init__(self, prompts: list[tuple[list[int], str, str]], n: int, echo: bool, top: int | None) -> None:
        self.id, self.created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        self.prompts, self.n, self.echo, self.top = prompts, n, echo, top
        self.prompt_entries: list[list[tuple[str, float | None, dict | None]]] = [[] for _ in prompts]
        self.choices = [CompletionChoice(index, top) for index in range(len(prompts) * n)]
        self.generate = True
        """False for max_tokens 0: the engine makes one token, which the reply leaves out."""

    def request_ids(self) -> list[str]:
        return [f"{self.id}-{index}" for index in range(len(self.prompts))]

    def take(self, output: Any) -> Iterator[tuple[CompletionChoice, str, list]]:
        """(choice, text to send, logprob entries to send) of each choice in a vLLM RequestOutput delta; the prompt
        with its entries comes before a choice's first piece when echoed."""
        prompt = int(output.request_id.rsplit("-", 1)[1])
        if output.prompt_logprobs and self.top is not None:
            ids, _, first = self.prompts[prompt]
            later = _entries(ids[1:], output.prompt_logprobs[1:], self.top)
            self.prompt_entries[prompt] = [(first, None, None), *later]
        for completion in output.outputs:
            choice = self.choices[prompt * self.n + completion.index]
            echo = self.echo and not choice.text and not choice.tokens
            yield choice, *self._shown(prompt, *choice.add(completion), echo)

    def _shown(self, prompt: int, text: str, entries: list, echo: bool) -> tuple[str, list]:
        """What a choice shows of its `text` and logprob `entries`: none of them for max_tokens 0, and with `echo`,
        the prompt and its entries first."""
        if not self.generate:
            text, entries = "", []
        return (self.prompts[prompt][1] + text, self.prompt_entries[prompt] + entries) if echo else (text, entries)

    def choice_object(self, choice: CompletionChoice) -> dict[str, Any]:
        text, entries = self._shown(choice.index // self.n, choice.text, choice.entries, self.echo)
        return {
            "index": choice.index,
            "text": text,
            "logprobs": None if self.top is None else logprobs_object(entries),
            "finish_reason": choice.finish_reason,
            "stop_reason": choice.stop_reason,
        }

    def usage(self) -> dict[str, int]:
        return token_usage(sum(len(ids) for ids, _, _ in self.prompts), sum(choice.tokens for choice in self.choices))

    def header(self, model: str) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": model}


def _submit(engine: Any, request: Any, prompts: list[str | list[int]]) -> tuple[list[str], Completion]:
    """Tokenize a checked request's prompts and add them to the engine (on the engine loop's thread)."""
    tokenizer = engine.llm.get_tokenizer()
    rendered = []
    for prompt in prompts:
        ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        text = prompt if isinstance(prompt, str) else tokenizer.decode(ids)
        room = engine.max_model_len - len(ids)
        if room < 1:
            raise RequestError(
                f"This model's maximum context length is {engine.max_model_len} tokens. However, your prompt has "
                f"{len(ids)} tokens. Reduce the length of the prompt."
            )
        wanted = context_budget(request.max_tokens, room, engine.max_model_len, engine.defaults)
        rendered.append((ids, text, tokenizer.decode(ids[:1]), max(wanted, 1)))
    completion = Completion([prompt[:3] for prompt in rendered], request.n, bool(request.echo), request.logprobs)
    completion.generate = request.max_tokens != 0
    ids = completion.request_ids()
    added = []
    try:
        for request_id, (prompt_ids, _, _, max_tokens) in zip(ids, rendered):
            params = engine.sampling_params(request, max_tokens)  # echo with logprobs: prompt_logprobs
            prompt = render_prompt(engine.llm, {"prompt_token_ids": prompt_ids})  # as LLM.generate renders it
            engine.llm.llm_engine.add_request(request_id, prompt, params)
            added.append(request_id)
    except Exception:
        if added:
            engine.llm.llm_engine.abort_request(added)
        raise
    return ids, completion


def _check_characters(engine: Any, prompts: list[str | list[int]]) -> None:
    """Refuse a text prompt longer than the context can be in characters (vLLM's bound: each token at most its
    vocabulary's longest token), before the engine thread, which every request waits on, tokenizes it."""
    per_token = getattr(engine.llm.get_tokenizer(), "max_chars_per_token", None)
    for prompt in prompts:
        if per_token and isinstance(prompt, str) and len(prompt) > engine.max_model_len * per_token:
            raise RequestError(
                f"This model's maximum context length is {engine.max_model_len} tokens. However, your prompt "
                f"contains {len(prompt)} characters (more than {engine.max_model_len * per_token} characters, which "
                f"is the upper bound for {engine.max_model_len} tokens). Reduce the length of the prompt."
            )


def complete(engine: Any, request: Any, prompts: list[str | list[int]]) -> dict[str, Any]:
    """The text_completion object of a non-streamed request."""
    _check_characters(engine, prompts)
    completion, outputs = engine.loop.submit(lambda: _submit(engine, request, prompts))
    for output in outputs:
        for _ in completion.take(output):
            pass
    usage = {**completion.usage(), "prompt_tokens_details": None, "completion_tokens_details": None}
    choices = [completion.choice_object(choice) for choice in completion.choices]
    return {**completion.header(engine.name), "choices": choices, "system_fingerprint": None, "usage": usage}


def stream(engine: Any, request: Any, prompts: list[str | list[int]]) -> Iterator[dict[str, Any]]:
    """The text_completion chunks of a streamed request (the prompt first with echo; the usage last, with
    include_usage). Lazy, as chat's: the server takes the first chunk in a worker thread, so waiting for the engine
    thread to take the request never blocks the event loop (a streamed completion held every other stream and
    /health for an engine step)."""
    _check_characters(engine, prompts)
    completion, outputs = engine.loop.submit(lambda: _submit(engine, request, prompts))
    header = completion.header(engine.name)
    offsets = [0] * len(completion.choices)
    try:
        for output in outputs:
            for choice, text, entries in completion.take(output):
                logprobs = None if completion.top is None else logprobs_object(entries, offsets[choice.index])
                offsets[choice.index] += sum(len(token) for token, _, _ in entries)
                if not text and not entries and choice.finish_reason is None:
                    continue
                piece = {"index": choice.index, "text": text, "logprobs": logprobs}
                piece.update(finish_reason=choice.finish_reason, stop_reason=choice.stop_reason)
                yield {**header, "choices": [piece]}
        if request.stream_options and request.stream_options.include_usage:
            yield {**header, "choices": [], "usage": completion.usage()}
    finally:
        outputs.close()
