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

_SAMPLING_FIELDS = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "n": "n"}


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
        self.lock = threading.Lock()

    def close(self) -> None:
        """Stop the engine (on a GPU vLLM runs its engine core in a child process that would outlive us)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams

        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list of {role, content} objects.")
        options = {
            ours: request[theirs] for theirs, ours in _SAMPLING_FIELDS.items() if request.get(theirs) is not None
        }
        options.setdefault("max_tokens", 256)
        if request.get("seed") is not None:
            options["seed"] = int(request["seed"])
        if request.get("stop"):
            options["stop"] = [request["stop"]] if isinstance(request["stop"], str) else list(request["stop"])
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
                request = json.loads(self.rfile.read(length) or b"{}")
                if request.get("stream"):
                    raise ValueError("streaming responses are not supported; send stream=false.")
                self._send(200, engine.complete(request))
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
