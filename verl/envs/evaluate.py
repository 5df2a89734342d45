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
"""Run an environment's episodes against any OpenAI-compatible chat endpoint, with the same environment class as
training (the trained model served by `python -m verl.serve`, or another model).

    python -m verl.envs.evaluate --env examples/envs/guess_number.py:GuessNumber --data val.jsonl \
        --base-url http://127.0.0.1:8000/v1 [--max-turns 4 --temperature 0]

Prints one JSON line per episode and a last line with the means; `--help` lists the options.
"""

import argparse
import asyncio
import base64
import functools
import io
import json
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

from verl.envs.base import Environment
from verl.envs.client_env import ChatClientEnv, EpisodeOver
from verl.envs.loader import load_environment


IMAGE_MARKER = "<image>"


def prompt_message(prompt: str, images: list[Any]) -> dict[str, Any]:
    """The first user message of an episode: plain text, or content parts with the images at the prompt's `<image>`
    markers (one per image), or before the text when it has none."""
    if not images:
        return {"role": "user", "content": prompt}
    pieces = prompt.split(IMAGE_MARKER)
    if len(pieces) == 1:
        pieces = ["", prompt]
        pieces[1:1] = [""] * (len(images) - 1)
    if len(pieces) != len(images) + 1:
        raise ValueError(
            f"the prompt has {len(pieces) - 1} {IMAGE_MARKER} markers but the row has {len(images)} images; give "
            "one marker per image, or none (then the images come first)."
        )
    parts: list[dict[str, Any]] = []
    for text, image in zip(pieces, [*images, None]):
        if text:
            parts.append({"type": "text", "text": text})
        if image is not None:
            parts.append({"type": "image", "image": image})
    return {"role": "user", "content": parts}


def _data_url(image: Any) -> str:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def to_openai_messages(messages: list[dict[str, Any]], cache: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The messages as an OpenAI-style endpoint takes them: `{"type": "image", "image": <PIL image>}` parts become
    `image_url` parts with PNG data URLs (encoded once per image when `cache` is kept across requests)."""
    from PIL import Image

    cache = {} if cache is None else cache
    wire = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                image = part.get("image") if isinstance(part, dict) and part.get("type") == "image" else None
                if image is None:
                    parts.append(part)
                    continue
                if not isinstance(image, Image.Image):
                    raise TypeError(f"an image part must hold a PIL image, got {type(image).__name__}")
                if id(image) not in cache:
                    cache[id(image)] = _data_url(image)
                parts.append({"type": "image_url", "image_url": {"url": cache[id(image)]}})
            message = {**message, "content": parts}
        wire.append(message)
    return wire


@dataclass(frozen=True)
class EpisodeSetup:
    """What one episode is run with: its dataset row, prompt and images, and the run's model, turns and sampling."""

    row: dict[str, Any]
    """The row the environment is reset with (`ground_truth` taken from --answer-key, the images left out)."""
    prompt: str
    """Text of the first user message."""
    images: list[Any]
    """The row's images (PIL), placed at the prompt's `<image>` markers."""
    model: str
    """Model id at the endpoint."""
    max_turns: int
    """Most model turns (requests) of the episode."""
    sampling: dict[str, Any]
    """Sampling parameters of every request (max_tokens, temperature)."""


def run_episode(env: Environment, setup: EpisodeSetup, client: Any) -> dict[str, Any]:
    """One episode through `client.chat.completions`; returns its counts, episode_info and the conversation."""
    state = env.reset(dict(setup.row))
    messages: list[dict[str, Any]] = [prompt_message(setup.prompt, setup.images)]
    schemas = getattr(env, "tool_schemas", None)
    extra = {"tools": schemas()} if schemas is not None else {}
    result = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "done": False}
    urls: dict[int, str] = {}
    for _ in range(setup.max_turns):
        wire = to_openai_messages(messages, urls)
        reply = client.chat.completions.create(model=setup.model, messages=wire, **setup.sampling, **extra)
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        result["turns"] += 1
        step = env.step(state, text)
        result["tool_calls"] += step.tool_calls
        result["tool_errors"] += step.tool_errors
        if step.done:
            result["done"] = True
            break
        messages.extend(step.messages)
    return {**result, **env.episode_info(state), "messages": messages}


def run_client_episode(env: ChatClientEnv, setup: EpisodeSetup, make_client: Any) -> dict[str, Any]:
    """One episode of a ChatClientEnv: its `rollout` with a client from `make_client()` (an async OpenAI-style
    client, made inside the episode's event loop); requests get `setup.sampling` and count as turns, and after
    `setup.max_turns` of them the next one ends the episode. Text prompts only, as in training; image parts the
    episode itself sends are passed on as data URLs."""
    if setup.images:
        raise NotImplementedError(
            f"{type(env).__name__} is a ChatClientEnv, which runs text prompts only (as in training); this row has "
            f"{len(setup.images)} images."
        )
    state = env.reset(dict(setup.row))
    result = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "done": False}

    async def episode() -> None:
        client = make_client()

        class Completions:
            async def create(self, **request: Any) -> Any:
                if result["turns"] >= setup.max_turns:
                    raise EpisodeOver(f"--max-turns={setup.max_turns} requests were answered")
                result["turns"] += 1
                request = {**request, "messages": to_openai_messages(list(request.get("messages", [])))}
                return await client.chat.completions.create(**{**request, **setup.sampling})

        counting = types.SimpleNamespace(chat=types.SimpleNamespace(completions=Completions()))
        await env.rollout(counting, setup.model, [{"role": "user", "content": setup.prompt}], state)

    try:
        asyncio.run(episode())
        result["done"] = True
    except EpisodeOver:
        pass
    return {**result, **env.episode_info(state)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="path/to/env.py:ClassName")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of the environment's keyword arguments")
    parser.add_argument("--data", required=True, help="a JSONL file of rows")
    parser.add_argument("--prompt-key", default="prompt")
    parser.add_argument("--answer-key", default="answer", help="passed to the environment as ground_truth")
    parser.add_argument("--image-key", default="images", help="a row's list of images (paths), for a VL model")
    parser.add_argument("--image-dir", default=None, help="where relative image paths are (default: --data's folder)")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default=None, help="model id (default: the endpoint's first)")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--limit", type=int, default=None, help="evaluate the first N rows")
    args = parser.parse_args(argv)
    from openai import AsyncOpenAI, OpenAI

    env = load_environment(args.env, json.loads(args.env_kwargs))
    client = OpenAI(base_url=args.base_url, api_key="unused")
    model = args.model or client.models.list().data[0].id
    if isinstance(env, ChatClientEnv):
        client = functools.partial(AsyncOpenAI, base_url=args.base_url, api_key="unused")
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()][: args.limit]
    sampling = {"max_tokens": args.max_tokens, "temperature": args.temperature}
    image_dir = args.image_dir or os.path.dirname(os.path.abspath(args.data))
    totals: dict[str, float] = {}
    for index, row in enumerate(rows):
        fields = {k: v for k, v in row.items() if k != args.image_key}
        fields["ground_truth"] = row.get(args.answer_key)
        images = _row_images(row.get(args.image_key), image_dir, index)
        setup = EpisodeSetup(fields, str(row[args.prompt_key]), images, model, args.max_turns, sampling)
        run = run_client_episode if isinstance(env, ChatClientEnv) else run_episode
        result = run(env, setup, client)
        print(json.dumps({"row": index, **{k: v for k, v in result.items() if k != "messages"}}), flush=True)
        for key, value in result.items():
            if isinstance(value, (int, float)):  # counts, done, episode_info numbers
                totals[key] = totals.get(key, 0.0) + float(value)
    print(json.dumps({"episodes": len(rows), **{f"{k}/mean": v / max(len(rows), 1) for k, v in totals.items()}}))
    return 0


def _row_images(value: Any, image_dir: str, index: int) -> list[Any]:
    """A row's images, decoded as RGB (a path, bytes or {"bytes"/"path"} dict each), or [] without any."""
    from verl.data.multimodal import open_image, resolve_path

    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    images = []
    for position, item in enumerate(values):
        try:
            if isinstance(item, str) and not os.path.isfile(resolve_path(item, image_dir)):
                raise FileNotFoundError(f"image file {resolve_path(item, image_dir)!r} does not exist (--image-dir)")
            images.append(open_image(item, image_dir).convert("RGB"))
        except (OSError, TypeError, ValueError) as error:
            raise ValueError(f"row {index}: image {position} cannot be read: {error}") from None
    return images


if __name__ == "__main__":
    sys.exit(main())
