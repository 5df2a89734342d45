# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible endpoint over the rollout engine, for evaluating a trained model with any client.

    python -m verl.serve --model checkpoints/.../global_step_N/actor/huggingface --port 8000

server.py: the FastAPI app and its uvicorn server (`make_server`, `main`); chat.py: chat completions (`ChatEngine`);
completions.py: `/v1/completions`; responses.py: `/v1/responses`; engine_loop.py: the one thread that steps the
engine; request_checks.py: reading requests into vLLM's typed models.
"""

from verl.serve.chat import ChatEngine, ChoiceText, Reply, chat_message, check_request, forced_tool_calls
from verl.serve.request_checks import RequestError
from verl.serve.server import main, make_server


__all__ = [
    "ChatEngine",
    "ChoiceText",
    "Reply",
    "RequestError",
    "chat_message",
    "check_request",
    "forced_tool_calls",
    "main",
    "make_server",
]
