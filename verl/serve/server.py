# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible endpoint over the rollout engine, for evaluating a trained model with any client.

    python -m verl.serve --model checkpoints/.../global_step_N/actor/huggingface --port 8000

It serves `GET /v1/models`, `GET /health`, `POST /v1/chat/completions` (verl.serve.chat), `POST /v1/completions`
(verl.serve.completions) and `POST /v1/responses` (verl.serve.responses) with the training engine's settings, on
FastAPI and uvicorn (the web stack vLLM's own server runs on). Concurrent requests share the engine's batches
(verl.serve.engine_loop: one thread steps the engine; handlers wait for it in a thread pool). It binds to 127.0.0.1
unless --host says otherwise and has no authentication: do not expose it.
"""

import argparse
import asyncio
import json
import logging
import math
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

from verl.serve import chat, completions, responses
from verl.serve.engine_loop import CLIENT, Client, ClientGone
from verl.serve.request_checks import RequestError
from verl.utils.cli import LOG_FORMAT


logger = logging.getLogger(__name__)

THREADS = 1024
"""Handler threads waiting on the engine at once (anyio's default, 40, would cap the engine's batch)."""


def error_body(error: Exception) -> tuple[int, dict[str, Any]]:
    """HTTP status and OpenAI error object of a failed request; vLLM's validation errors are 400s, as in its server."""
    from vllm.exceptions import VLLMClientError, VLLMNotFoundError, VLLMUnprocessableEntityError

    param = getattr(error, "parameter", None)  # vLLM's validation errors name the field
    if isinstance(error, RequestError):
        status, kind = error.status, error.kind
    elif isinstance(error, VLLMNotFoundError):
        status, kind = 404, "NotFoundError"
    elif isinstance(error, VLLMUnprocessableEntityError):  # e.g. a media URL that answers 404
        status, kind = 422, "invalid_request_error"
    else:  # OverflowError: a token id past the vocabulary's integer type
        invalid = isinstance(error, (ValueError, TypeError, KeyError, OverflowError, VLLMClientError))
        invalid = invalid or "Validation" in type(error).__name__
        status, kind = (400, "invalid_request_error") if invalid else (500, "server_error")
    return status, {"error": {"message": str(error), "type": kind, "param": param, "code": status}}


def _event(body: dict[str, Any], named: bool) -> bytes:
    """One server-sent event; `named` ones carry their type as the event name (the Responses API's)."""
    head = f"event: {body['type']}\n" if named and "type" in body else ""
    return f"{head}data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


async def _watching(receive: Callable, client: Any, func: Callable, *args: Any) -> Any:
    """`func(*args)` in the thread pool (inheriting CLIENT), while waiting for the client to disconnect: then it
    `leave`s, which aborts its engine requests and ends `func` with ClientGone."""
    import anyio
    from starlette.concurrency import run_in_threadpool

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        client.leave()

    result, error = None, None
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            try:
                result = await run_in_threadpool(func, *args)
            except Exception as raised:  # raised here, not as the task group's ExceptionGroup
                error = raised
            group.cancel_scope.cancel()
    except BaseException:  # cancelled (uvicorn's shutdown): the thread would wait on the engine for ever
        client.leave()
        raise
    if error is not None:
        raise error
    return result


async def _stream(receive: Callable, client: Any, events: Iterator[dict[str, Any]], named: bool = False) -> Any:
    """A 200 event stream of `events`; an error before the first event is a plain HTTP error, after it an error
    event (as vLLM's server). Unnamed streams end with `data: [DONE]`; a client leaving aborts its request, however
    the response ends."""
    from starlette.concurrency import iterate_in_threadpool
    from starlette.responses import StreamingResponse

    first = await _watching(receive, client, next, events)

    async def body() -> AsyncIterator[bytes]:
        try:  # the headers are out: any error from here on is an error event (the connection was dropped)
            yield _event(first, named)
            async for event in iterate_in_threadpool(events):
                yield _event(event, named)
        except Exception as error:
            yield _event(error_body(error)[1], False)
        if not named:
            yield b"data: [DONE]\n\n"

    class Response(StreamingResponse):
        async def __call__(self, *args: Any) -> None:
            try:
                await super().__call__(*args)
            finally:  # a thread of the pool may be inside next(events): its requests are aborted, ending it
                client.leave()

    return Response(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def make_app(engine: Any) -> Any:
    """The FastAPI app of `engine` (a chat.ChatEngine)."""
    import anyio
    import vllm.entrypoints.openai.chat_completion.protocol  # noqa: F401 - vLLM's request models take seconds to
    import vllm.entrypoints.openai.completion.protocol  # noqa: F401 - import: here, not in the first request
    import vllm.entrypoints.openai.responses.utils  # noqa: F401
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        yield

    app = FastAPI(title="verl.serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def not_found(request: Request, error: HTTPException) -> JSONResponse:
        message = f"no route {request.method} {request.url.path}" if error.status_code in (404, 405) else error.detail
        body = {"message": message, "type": "not_found", "param": None, "code": error.status_code}
        return JSONResponse({"error": body}, status_code=error.status_code)

    @app.get("/health")
    async def health() -> Response:  # as vLLM's server: 200, no body, while it serves; 503 once its engine cannot
        thread = engine.loop.thread
        core = getattr(getattr(engine.llm.llm_engine, "engine_core", None), "resources", None)  # vLLM's engine process
        dead = thread.error is not None or not thread.thread.is_alive() or getattr(core, "engine_dead", False)
        return Response(status_code=503 if dead else 200)

    created = int(time.time())  # (OpenAI's Model object has it; clients that build one read it)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": engine.name, "object": "model", "created": created, "owned_by": "verl"}
        model["max_model_len"] = engine.max_model_len  # (vLLM's server lists it: clients size requests by it)
        return {"object": "list", "data": [model]}

    def route(check: Callable[..., tuple], complete: Callable, stream: Callable, named: bool = False) -> Callable:
        async def answer(request: Request) -> Any:
            try:
                try:
                    body = json.loads(await request.body() or b"{}")
                except ValueError as error:
                    raise RequestError(f"the request body is not JSON: {error}.") from None
                checked = check(body, engine.name)  # (the typed request, what else its answer takes)
                client = Client()
                CLIENT.set(client)
                if checked[0].stream:
                    return await _stream(request.receive, client, stream(engine, *checked), named)
                return JSONResponse(await _watching(request.receive, client, complete, engine, *checked))
            except (ClientGone, ClientDisconnect):  # left while waiting, or while sending the request
                return Response(status_code=499)  # nobody reads it (nginx's "client closed request")
            except Exception as error:  # say what went wrong, keep serving
                status, body = error_body(error)
                if status >= 500:
                    logger.exception("a request failed")
                elif not isinstance(error, RequestError):
                    logger.info("a request was refused: %s", error)
                return JSONResponse(body, status_code=status)

        return answer

    chat_route = route(lambda b, n: (chat.check_request(b, n),), lambda e, r: e.complete(r), lambda e, r: e.stream(r))
    app.post("/v1/chat/completions")(chat_route)
    app.post("/v1/completions")(route(completions.check_completion, completions.complete, completions.stream))
    app.post("/v1/responses")(route(responses.check_response, responses.complete, responses.stream, named=True))
    return app


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (0: a free port); OSError or OverflowError (a bad port) if it cannot be."""
    bound = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        bound.bind((host, port))
    except BaseException:
        bound.close()
        raise
    return bound


class _CancelledAtShutdown(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" of a request it cancelled 5 s into a shutdown: a 60-line
    traceback of its CancelledError per request, after uvicorn's own line saying how many it cancelled (each is
    aborted: `_watching`, `_stream`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


class Server:
    """uvicorn serving `engine`'s app on a socket bound here, or on `bound` (port 0: a free one, in
    `server_address`)."""

    def __init__(self, engine: Any, host: str, port: int, bound: socket.socket | None = None) -> None:
        import uvicorn

        self.socket = bound or bind(host, port)
        self.server_address = self.socket.getsockname()
        config = uvicorn.Config(make_app(engine), log_level="warning", backlog=2048, timeout_graceful_shutdown=5)
        self.uvicorn = uvicorn.Server(config)
        errors = logging.getLogger("uvicorn.error")  # (configured by the Config above)
        if not any(isinstance(known, _CancelledAtShutdown) for known in errors.filters):
            errors.addFilter(_CancelledAtShutdown())

    def serve_forever(self) -> None:
        """Serve until shutdown() (or SIGINT/SIGTERM, in the main thread)."""
        self.uvicorn.run(sockets=[self.socket])

    def shutdown(self) -> None:
        self.uvicorn.should_exit = True

    def server_close(self) -> None:
        self.socket.close()


def make_server(engine: Any, host: str, port: int, bound: socket.socket | None = None) -> Server:
    """The HTTP server of `engine` on host:port (0 picks a free port) or on the socket `bound` there, not yet
    serving."""
    return Server(engine, host, port, bound)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verl.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help="a Hugging Face model directory (e.g. the merged checkpoint) or hub id"
    )
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: --model)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    parser.add_argument("--max-model-len", type=int, default=4096, help="tokens of prompt + reply (default 4096)")
    parser.add_argument(
        "--kv-cache-mb", type=int, default=None, help="KV cache size (default: 256 MiB on the CPU, vLLM's on a GPU)"
    )
    parser.add_argument(
        "--dtype", default="auto", choices=sorted(chat.DTYPES), help="weights dtype (auto: the model's; fp32 on CPU)"
    )
    run_value = "(default: the training run's value, read from the checkpoint --model is in, else training's default)"
    parser.add_argument(
        "--video-fps",
        type=float,
        default=None,
        help=f"frames per second sampled from video URLs, as training's data.video_fps {run_value}",
    )
    parser.add_argument(
        "--min-pixels",
        type=int,
        default=None,
        help=f"images and video frames smaller than this area are upscaled, as training's data.min_pixels {run_value}",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help=f"images and video frames larger than this area are downscaled, as data.max_pixels {run_value}",
    )
    args = parser.parse_args(argv)
    # checked before the engine starts, whose own errors are tracebacks
    if args.max_model_len < 1 or (args.kv_cache_mb is not None and args.kv_cache_mb < 1):
        parser.error("--max-model-len and --kv-cache-mb must be positive.")
    if args.video_fps is not None and (not math.isfinite(args.video_fps) or args.video_fps <= 0):
        parser.error(f"--video-fps must be a positive number, got {args.video_fps}.")
    for option, value in (("--min-pixels", args.min_pixels), ("--max-pixels", args.max_pixels)):
        if value is not None and value < 1:
            parser.error(f"{option} must be positive, got {value}.")
    from verl.models.config import model_folder_problem

    problem = model_folder_problem(args.model, "--model")  # missing, incomplete or a training checkpoint
    if problem:
        parser.error(problem)
    from verl.utils.hub import offline_unless_reachable

    offline_unless_reachable({"model": args.model})  # before vLLM imports huggingface_hub (the served name is no id)
    if os.environ.get("HF_HUB_OFFLINE") == "1" and not os.path.exists(os.path.expanduser(args.model)):
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(args.model, "config.json"), str):
            parser.error(f"--model '{args.model}' is not in the local Hugging Face cache, and the hub is offline.")
    try:  # bound before the engine starts (minutes), whose error it would otherwise follow
        bound = bind(args.host, args.port)
    except (OSError, OverflowError) as error:
        parser.error(f"--host {args.host} --port {args.port}: cannot listen there ({error}).")
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    from verl.utils import quiet

    quiet.install_worker_filters()  # as the trainer's workers do, before vLLM and transformers are imported
    from verl.workers.rollout.vllm_compat import EngineSettingError

    try:
        media = media_settings(args.model, args.video_fps, args.min_pixels, args.max_pixels)
    except ValueError as error:
        bound.close()
        parser.error(str(error))
    try:
        name = args.served_model_name or args.model
        engine = chat.ChatEngine(args.model, name, args.max_model_len, args.kv_cache_mb, args.dtype, media)
    except EngineSettingError as error:
        bound.close()
        print(f"Error: {error}", file=sys.stderr)
        return 2
    except Exception:  # vLLM's error for weights that do not fit config.json is a tensor's bounds ("start (0) + ...")
        bound.close()
        problem = _weights_problem(args.model)
        if problem is None:
            raise
        advice = "a config.json edited after the weights were saved, or another model's"
        print(f"Error: --model '{args.model}': {problem}; {advice}.", file=sys.stderr)
        return 2
    server = make_server(engine, args.host, args.port, bound)
    host, port = server.server_address[:2]
    host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    print(
        f"Serving {engine.name} at http://{host}:{port}/v1 (OpenAI chat completions, completions and responses)",
        flush=True,
    )
    # uvicorn stops on SIGINT or SIGTERM, then raises the signal again once it has shut down: ours turns that into an
    # exit through the finally below (128 + the signal), so the engine is closed (its process group's file store in
    # /tmp removed; on a GPU its engine process stopped) instead of the process dying at once
    previous = {number: signal.signal(number, _exit_on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.serve_forever()
    finally:
        server.server_close()
        engine.close()
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0


RUN_MEDIA_KEYS = {"video_fps": "data.video_fps", "min_pixels": "data.min_pixels", "max_pixels": "data.max_pixels"}
"""MediaSettings' fields and the training run's settings they come from."""


def media_settings(
    model: str, video_fps: float | None, min_pixels: int | None, max_pixels: int | None
) -> "chat.MediaSettings":
    """How the served model's media are read: each option given, else the value the training run used, from the
    `settings` in the trainer_state.json of the checkpoint that --model is part of (`global_step_N/actor/huggingface`
    or `global_step_N/actor`), else training's default. A model exported elsewhere keeps no run settings: give the
    run's values then. ValueError where the pixel bounds cross."""
    from verl.trainer.checkpointing import read_trainer_state

    given = {"video_fps": video_fps, "min_pixels": min_pixels, "max_pixels": max_pixels}
    saved, source, folder = {}, "training's defaults", os.path.abspath(os.path.expanduser(model))
    for _ in range(3):  # the model folder, its actor folder, the step folder
        state = read_trainer_state(folder)
        if isinstance(state.get("settings"), dict):
            saved, source = state["settings"], f"the run's settings in {os.path.join(folder, 'trainer_state.json')}"
            break
        folder = os.path.dirname(folder)
    values = {name: saved[key] for name, key in RUN_MEDIA_KEYS.items() if key in saved}
    values.update({name: value for name, value in given.items() if value is not None})
    media = chat.MediaSettings(**values)
    if media.min_pixels is not None and media.max_pixels is not None and media.min_pixels > media.max_pixels:
        raise ValueError(
            f"--min-pixels {media.min_pixels} is above --max-pixels {media.max_pixels} (each the option given, else "
            f"from {source})."
        )
    logger.info(
        "Images and video frames are resized within [%s, %s] pixels, videos sampled at %s fps (options given, else "
        "%s).",
        media.min_pixels,
        media.max_pixels,
        media.video_fps,
        source,
    )
    return media


def _weights_problem(model: str) -> str | None:
    """`weights_config_mismatch` of a local model folder whose engine did not start; None where it says nothing."""
    from verl.models.loading import weights_config_mismatch

    try:
        return weights_config_mismatch(model) if os.path.isdir(model) else None
    except Exception:  # the diagnosis must not hide the engine's own error
        return None


def _exit_on_signal(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)
