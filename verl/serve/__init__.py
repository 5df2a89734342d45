# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible endpoint over the rollout engine: `python -m verl.serve --model DIR --port 8000`.

server.py: the FastAPI app and uvicorn server; chat.py, completions.py, responses.py: the endpoints; engine_loop.py:
the thread that steps the engine; request_checks.py: requests read into vLLM's typed models.
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
