# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Training rollouts on disk (trainer.rollout_data_dir) as `step_N.jsonl` plus `images/step_N/`, for
`scripts/rollout_viewer.py` and grepping; README.md's "Seeing the rollouts" lists the fields. Multi-turn samples
also hold `messages`, in the record format `python -m verl.envs.evaluate --output` writes too."""

import json
import logging
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verl.data.multimodal import open_image
from verl.envs.tools import parse_tool_calls
from verl.protocol import plain_value
from verl.utils.files import atomic_write, set_aside


logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # verl.protocol loads torch: `python -m verl.envs.evaluate` imports this module without it
    from verl.protocol import DataProto


REWARD_COLUMN_PREFIX = "reward/"
"""Non-tensor columns `reward/<key>`: the reward function's per-sample values."""
PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA")
"""PIL modes PNG stores as they are; others are converted to RGB."""
MESSAGES_COLUMN = "episode_messages"
"""Non-tensor column of a multi-turn rollout: each episode's messages after the prompt, image parts as
{"type": "image", "index": i} into the sample's images."""
ENV_COLUMN_PREFIX = "env_"
"""Non-tensor columns `env_<name>`: an episode's counts and `episode_info` numbers."""


def decode_texts(batch: "DataProto", tokenizer: Any) -> tuple[list[str], list[str]]:
    """(prompts, responses) as text, special tokens skipped, responses cut to their response_mask. Each distinct
    prompt is decoded once (a group's n rows share it) and the responses in one batched call: decoding row by row
    took 3-4 s a step at 4,096 rows."""
    import torch

    unique, inverse = torch.unique(batch.batch["prompts"], dim=0, return_inverse=True)
    texts = tokenizer.batch_decode(unique, skip_special_tokens=True)
    prompts = [texts[i] for i in inverse.tolist()]
    kept = [ids[mask.bool()].tolist() for ids, mask in zip(batch.batch["responses"], batch.batch["response_mask"])]
    return prompts, tokenizer.batch_decode(kept, skip_special_tokens=True)


def finite_or_none(value: Any) -> float | None:
    """A JSON-safe float: None for None, NaN and infinities."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def write_image(value: Any, out_dir: str, relative: str) -> str:
    """Write an image (PIL, path, bytes) as PNG to `out_dir/relative`; returns `relative`."""
    os.makedirs(os.path.join(out_dir, os.path.dirname(relative)), exist_ok=True)
    image = open_image(value)
    if image.mode not in PNG_MODES:
        image = image.convert("RGB")
    atomic_write(os.path.join(out_dir, relative), lambda f: image.save(f, format="PNG"), binary=True, sync=False)
    return relative


def message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return str(content)


def _tool_calls(message: Mapping[str, Any], text: str) -> list[dict[str, Any]]:
    """An assistant turn's calls: OpenAI-style `tool_calls`, else the `<tool_call>` blocks of its text
    ({"error": ...} for a malformed one)."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, Mapping) else {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass  # kept as the model wrote it
        calls.append({"name": str(function.get("name")), "arguments": arguments})
    if calls:
        return calls
    return [call if isinstance(call, dict) else {"error": call} for call in parse_tool_calls(text)]


def message_record(message: Mapping[str, Any], paths: list[str]) -> dict:
    """A chat message as a record: {"role", "content" (text), "images" (if any), "tool_calls" (an assistant's, if
    any), "cut" (environment messages the episode ended before showing)}; an image part's "index" is its position
    in `paths`, the sample's image files (an image without a file is left out)."""
    content = message.get("content")
    record: dict[str, Any] = {"role": str(message.get("role")), "content": message_text(content)}
    if isinstance(content, list):
        indices = [part.get("index") for part in content if isinstance(part, dict) and part.get("type") == "image"]
        images = [paths[i] for i in indices if isinstance(i, int) and 0 <= i < len(paths)]
        if images:
            record["images"] = images
    if record["role"] == "assistant":
        calls = _tool_calls(message, record["content"])
        if calls:
            record["tool_calls"] = calls
    if message.get("cut"):
        record["cut"] = True
    return record


def transcript_messages(messages: list[Any], first_image: int, cut: bool = False) -> list[dict[str, Any]]:
    """Messages as the episode_messages column holds them: image parts become {"type": "image", "index": i},
    numbered from `first_image`; `cut` messages are marked and their images get no index."""
    position = first_image
    entries = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "image":
                    parts.append({"type": "image", "index": None if cut else position})
                    position += not cut
                else:
                    parts.append(part)
            content = parts
        entry = {"role": message.get("role"), "content": content}
        if message.get("tool_calls"):
            entry["tool_calls"] = message["tool_calls"]
        if cut:
            entry["cut"] = True
        entries.append(entry)
    return entries


def conversation_records(prompt: str, messages: list[Mapping[str, Any]], paths: list[str]) -> list[dict]:
    """A record's "messages": the prompt as the first user message (with its images), then the episode's messages
    as `message_record`s. `paths`: the sample's image files, the prompt's first."""
    records = [message_record(message, paths) for message in messages]
    shown = sum(len(record.get("images", [])) for record in records)
    first: dict[str, Any] = {"role": "user", "content": prompt}
    if len(paths) > shown:
        first["images"] = paths[: len(paths) - shown]
    return [first, *records]


def _write_images(batch: "DataProto", step: int, out_dir: str) -> list[list[str]]:
    """Write every sample's images as PNG; returns their relative paths. A prompt's image, shared by the responses
    of its uid, is written once; environment images are each sample's own."""
    media = batch.non_tensor_batch.get("multi_modal_data")
    uids = batch.non_tensor_batch["uid"]
    groups: dict[Any, int] = {}
    written: dict[Any, int] = {}
    path_of_image: dict[int, str] = {}
    sample_paths = []
    for index, uid in enumerate(uids):
        group = groups.setdefault(uid, len(groups))
        row = media[index] if media is not None else None
        paths = []
        for value in (row or {}).get("images") or []:
            if id(value) not in path_of_image:  # the batch holds every image, so ids are unique here
                position = written[uid] = written.get(uid, -1) + 1
                path_of_image[id(value)] = write_image(
                    value, out_dir, f"images/step_{step}/g{group:04d}_{position}.png"
                )
            paths.append(path_of_image[id(value)])
        sample_paths.append(paths)
    return sample_paths


def rollout_records(batch: "DataProto", step: int, tokenizer: Any, image_paths: list[list[str]]) -> list[dict]:
    """One step's JSON records: {"step", "uid", "prompt", "response", "ground_truth", "reward", "scores",
    "advantage", "response_length", "images"}, plus "messages" and "env" for a multi-turn episode.

    `reward` is the reward function's score (before any KL penalty), `scores` all its keys, `advantage` the mean
    over valid tokens. Image paths are relative to the dump directory; videos are not written."""
    prompts, responses = decode_texts(batch, tokenizer)
    mask = batch.batch["response_mask"].float()
    lengths = mask.sum(-1)
    rewards = batch.batch["token_level_scores"].sum(-1).tolist()
    if "advantages" in batch.batch.keys():
        advantages = ((batch.batch["advantages"] * mask).sum(-1) / lengths.clamp(min=1)).tolist()
    else:
        advantages = [None] * len(batch)
    columns = batch.non_tensor_batch
    score_keys = [key for key in columns if key.startswith(REWARD_COLUMN_PREFIX)]
    truths = columns.get("ground_truth")
    records = [
        {
            "step": step,
            "uid": str(columns["uid"][i]),
            "prompt": prompts[i],
            "response": responses[i],
            "ground_truth": plain_value(truths[i]) if truths is not None else None,
            "reward": finite_or_none(rewards[i]),
            "scores": {key[len(REWARD_COLUMN_PREFIX) :]: finite_or_none(columns[key][i]) for key in score_keys},
            "advantage": finite_or_none(advantages[i]),
            "response_length": int(lengths[i].item()),
            "images": image_paths[i],
        }
        for i in range(len(batch))
    ]
    if MESSAGES_COLUMN in columns:
        contents = columns.get("prompt_content")
        env_keys = [key for key in columns if key.startswith(ENV_COLUMN_PREFIX)]
        for i, record in enumerate(records):
            prompt = contents[i] if contents is not None and isinstance(contents[i], str) else prompts[i]
            record["messages"] = conversation_records(prompt, list(columns[MESSAGES_COLUMN][i] or []), image_paths[i])
            record["env"] = {key[len(ENV_COLUMN_PREFIX) :]: finite_or_none(columns[key][i]) for key in env_keys}
    return records


def set_aside_later_rollouts(out_dir: str, start_step: int) -> str | None:
    """Before a run dumps: the dumps in `out_dir` of steps after `start_step` (every one for a new run, `start_step`
    0) are an earlier run's, which this run starts over or redoes. They are moved, images too, to
    `out_dir/previous_runs/<time>/`, so the folder (and rollout_viewer) shows this run's only; returns that folder."""
    if not os.path.isdir(out_dir):
        return None
    later = []
    for name in sorted(os.listdir(out_dir)):
        match = re.fullmatch(r"step_(\d+)\.jsonl", name)
        if match and int(match.group(1)) > start_step:
            later += [os.path.join(out_dir, name), os.path.join(out_dir, "images", name[: -len(".jsonl")])]
    folder = set_aside(later, out_dir)
    if folder is not None:
        logger.warning(
            "trainer.rollout_data_dir %s held rollouts of an earlier run after step %d; they were moved to %s.",
            out_dir,
            start_step,
            folder,
        )
    return folder


def dump_rollouts(batch: "DataProto", step: int, out_dir: str, tokenizer: Any) -> str | None:
    """Write one step's rollouts to `out_dir/step_{step}.jsonl` (images under `images/step_{step}`); returns the path.
    Needs tensors prompts, responses, response_mask, token_level_scores and the uid column; optional columns are
    written when present. A dump that cannot be written (a full disk, a folder removed) is a warning and None: the
    records are for reading, and training goes on."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        image_paths = _write_images(batch, step, out_dir)
        records = rollout_records(batch, step, tokenizer, image_paths)
        lines = "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records)
        path = os.path.join(out_dir, f"step_{step}.jsonl")
        # last: once the JSONL exists, its images do too
        atomic_write(path, lambda f: f.write(lines.encode("utf-8")), binary=True, sync=False)
    except OSError as error:
        logger.warning(
            "Could not write step %d's rollouts to %s (trainer.rollout_data_dir): %s; training goes on.",
            step,
            out_dir,
            error.strerror or error,
        )
        return None
    return path
