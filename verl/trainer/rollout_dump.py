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
"""Training rollouts on disk (trainer.rollout_data_dir), for `scripts/rollout_viewer.py` and for grepping.

Each dumped step is `step_N.jsonl`, one line per sample, with images under `images/step_N/`; README.md's "Seeing the
rollouts" lists the fields.
"""

import io
import json
import math
import os
from typing import Any

import numpy as np

from verl.data.multimodal import open_image
from verl.protocol import DataProto
from verl.trainer.checkpointing import atomic_write


REWARD_COLUMN_PREFIX = "reward/"
"""Non-tensor columns `reward/<key>` hold the reward function's per-sample values for the dump."""
PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA")
"""PIL modes PNG stores as they are; other images are converted to RGB."""


def decode_texts(batch: DataProto, tokenizer: Any) -> tuple[list[str], list[str]]:
    """(prompts, responses) of a rollout batch as text: special and padding tokens skipped, responses cut to
    their valid tokens (response_mask)."""
    prompts = tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
    responses = [
        tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
        for ids, mask in zip(batch.batch["responses"], batch.batch["response_mask"])
    ]
    return prompts, responses


def _number(value: Any) -> float | None:
    """A JSON-safe float: None for NaN and infinities (JSON has no spelling for them)."""
    value = float(value)
    return value if math.isfinite(value) else None


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _write_atomic(path: str, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data), binary=True, sync=False)


def _png_bytes(value: Any) -> bytes:
    image = open_image(value)
    if image.mode not in PNG_MODES:
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _write_images(batch: DataProto, step: int, out_dir: str) -> list[list[str]]:
    """Every sample's images as PNG files; returns their relative paths. An image shared by several samples (a
    prompt's picture, shared by the responses of its uid) is written once; a multi-turn environment's images, which
    follow the prompt's in a sample's list, are each sample's own."""
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
                relative = f"images/step_{step}/g{group:04d}_{position}.png"
                os.makedirs(os.path.join(out_dir, os.path.dirname(relative)), exist_ok=True)
                _write_atomic(os.path.join(out_dir, relative), _png_bytes(value))
                path_of_image[id(value)] = relative
            paths.append(path_of_image[id(value)])
        sample_paths.append(paths)
    return sample_paths


def rollout_records(batch: DataProto, step: int, tokenizer: Any, image_paths: list[list[str]]) -> list[dict]:
    """The JSON records of one step's samples: {"step", "uid", "prompt", "response", "ground_truth", "reward",
    "scores", "advantage", "response_length", "images"}.

    `reward` is the reward function's score (the sum of token_level_scores, before any KL penalty); `scores` holds
    every key the reward function returned; `advantage` is the mean advantage over the response's valid tokens.
    Image paths are relative to the dump directory; the responses to one prompt (one uid) share its image files.
    Videos are not written.
    """
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
    return [
        {
            "step": step,
            "uid": str(columns["uid"][i]),
            "prompt": prompts[i],
            "response": responses[i],
            "ground_truth": _plain(truths[i]) if truths is not None else None,
            "reward": _number(rewards[i]),
            "scores": {key[len(REWARD_COLUMN_PREFIX) :]: _number(columns[key][i]) for key in score_keys},
            "advantage": None if advantages[i] is None else _number(advantages[i]),
            "response_length": int(lengths[i].item()),
            "images": image_paths[i],
        }
        for i in range(len(batch))
    ]


def dump_rollouts(batch: DataProto, step: int, out_dir: str, tokenizer: Any) -> str:
    """Write one training step's rollouts to `out_dir/step_{step}.jsonl` (images under `out_dir/images/step_{step}`)
    and return the JSONL path.

    The batch needs the tensors prompts, responses, response_mask and token_level_scores, and the non-tensor uid;
    advantages, ground_truth, multi_modal_data and the `reward/<key>` columns are written when present.
    """
    os.makedirs(out_dir, exist_ok=True)
    image_paths = _write_images(batch, step, out_dir)
    records = rollout_records(batch, step, tokenizer, image_paths)
    lines = "".join(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in records)
    path = os.path.join(out_dir, f"step_{step}.jsonl")
    _write_atomic(path, lines.encode("utf-8"))  # last: once the JSONL exists, its images do too
    return path
