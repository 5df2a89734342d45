# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""An OpenAI-compatible chat endpoint over the rollout engine, for evaluating a trained model with any client.

    python -m verl.serve --model checkpoints/.../global_step_N/actor/huggingface --port 8000

It serves `GET /v1/models` and `POST /v1/chat/completions` with the training engine's settings, one request at a
time. It binds to 127.0.0.1 unless --host says otherwise and has no authentication: do not expose it.
"""

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256
"""Completion tokens of a request that sets no max_tokens (fewer where the context has less room)."""


class RequestError(ValueError):
    """A request the server refuses: HTTP `status` with a one-line message, as vLLM's OpenAI server answers it."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def _number(request: dict[str, Any], key: str, integer: bool, low: float, high: float | None = None) -> Any:
    value = request.get(key)
    if value is None:
        return None
    wanted = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted):
        raise RequestError(f"'{key}' must be {'an integer' if integer else 'a number'}, got {value!r}.")
    if value < low or (high is not None and value > high):
        bounds = f">= {low:g}" if high is None else f"between {low:g} and {high:g}"
        raise RequestError(f"'{key}' must be {bounds}, got {value!r}.")
    return value


def check_request(request: Any, served_name: str) -> dict[str, Any]:
    """The sampling options of a chat-completions request, or a RequestError naming the first bad field: an
    unknown `model` is a 404 naming the served one, as vLLM's server answers."""
    if not isinstance(request, dict):
        raise RequestError("the request body must be a JSON object.")
    model = request.get("model")
    if model != served_name:
        raise RequestError(
            f"The model {model!r} does not exist; this server serves {served_name!r}.", 404, "NotFoundError"
        )
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"'messages[{index}]' must be an object with a string 'role'.")
    if request.get("stream"):
        raise RequestError("streaming responses are not supported; send stream=false.")
    max_tokens = _number(request, "max_completion_tokens", True, 1)
    options = {
        "max_tokens": _number(request, "max_tokens", True, 1) if max_tokens is None else max_tokens,
        "temperature": _number(request, "temperature", False, 0.0, 2.0),
        "top_p": _number(request, "top_p", False, 0.0, 1.0),
        "n": _number(request, "n", True, 1),
        "seed": _number(request, "seed", True, -(2**63)),
    }
    stop = request.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
            raise RequestError(f"'stop' must be a string or a list of strings, got {request['stop']!r}.")
        options["stop"] = stop
    return {key: value for key, value in options.items() if value is not None}


class ChatEngine:
    """A vLLM engine answering chat completion requests (one at a time)."""

    def __init__(self, model: str, name: str, max_model_len: int, kv_cache_mb: int | None, dtype: str) -> None:
        from verl.utils import device

        on_cpu = device.get_device_type() == "cpu"
        if on_cpu:
            # The engine lives in this process, as in training: vLLM's default on the CPU is an engine-core process
            # and a worker process besides this one, each importing vLLM and torch again (slower to start, and 3
            # copies of the libraries in memory; docs/performance.md). Requests are answered one at a time anyway.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        kwargs: dict[str, Any] = {"model": model, "max_model_len": max_model_len, "seed": 0}
        if on_cpu:
            kwargs.update(dtype="float32" if dtype == "auto" else dtype, enforce_eager=True)
            kwargs["kv_cache_memory_bytes"] = (kv_cache_mb or 256) * 2**20
        else:
            kwargs["dtype"] = dtype
        self.llm = LLM(**kwargs)
        self.name = name
        self.max_model_len = max_model_len
        self.lock = threading.Lock()

    def close(self) -> None:
        """Stop the engine (on a GPU vLLM runs its engine core in a child process that would outlive us)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams

        options = check_request(request, self.name)
        messages = request["messages"]
        prompt_tokens = self._prompt_tokens(messages, request.get("tools"))
        room = None if prompt_tokens is None else self.max_model_len - prompt_tokens
        wanted = options.setdefault(
            "max_tokens", DEFAULT_MAX_TOKENS if room is None else max(1, min(DEFAULT_MAX_TOKENS, room))
        )
        if room is not None and wanted > room:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + wanted} tokens ({prompt_tokens} in the messages, {wanted} in the completion). "
                "Reduce the length of the messages or completion."
            )
        params = SamplingParams(**options)
        with self.lock:
            output = self.llm.chat(messages, params, use_tqdm=False, tools=request.get("tools"))[0]
        choices = [
            {
                "index": index,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": completion.finish_reason or "stop",
            }
            for index, completion in enumerate(output.outputs)
        ]
        completion_tokens = sum(len(completion.token_ids) for completion in output.outputs)
        prompt_tokens = len(output.prompt_token_ids or [])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _prompt_tokens(self, messages: list[dict[str, Any]], tools: Any) -> int | None:
        """Tokens of the rendered chat prompt, for the context-length check; None for messages with pictures (their
        tokens depend on the processor: vLLM itself refuses a prompt longer than the context)."""
        if not all(isinstance(message.get("content"), str | None) for message in messages):
            return None
        tokenizer = self.llm.get_tokenizer()
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if isinstance(ids, dict) else ids)


def make_handler(engine: ChatEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's method name
            if self.path.rstrip("/") == "/v1/models":
                self._send(
                    200, {"object": "list", "data": [{"id": engine.name, "object": "model", "owned_by": "verl"}]}
                )
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's method name
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError as error:
                    raise RequestError(f"the request body is not JSON: {error}.") from None
                self._send(200, engine.complete(request))
            except RequestError as error:
                self._send(error.status, {"error": {"message": str(error), "type": error.kind}})
            except Exception as error:  # never drop the connection: say what went wrong, keep serving
                invalid = isinstance(error, (ValueError, TypeError, KeyError)) or "Validation" in type(error).__name__
                kind = "invalid_request_error" if invalid else "server_error"
                self._send(400 if invalid else 500, {"error": {"message": str(error), "type": kind}})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            logger.debug("%s " + format, self.address_string(), *args)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory (e.g. the merged checkpoint)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--kv-cache-mb", type=int, default=None, help="KV cache on the CPU (default 256 MiB)")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from verl.utils import quiet

    quiet.install_worker_filters()  # as the trainer's workers do, before vLLM and transformers are imported
    engine = ChatEngine(
        args.model, args.served_model_name or args.model, args.max_model_len, args.kv_cache_mb, args.dtype
    )
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine))
    host, port = server.server_address[:2]
    print(f"Serving {engine.name} at http://{host}:{port}/v1 (OpenAI chat completions)", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a plain SIGTERM would leave the engine's process behind
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        engine.close()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
