# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Helpers for the multi-process FSDP2 tests: gloo rank processes and rollout-shaped batches.

The rank processes of a test module are kept from one test to the next (`spawn`): each imports torch, transformers
and often vLLM (about 8 s of CPU a process on 2 cores), so a module pays that once, not once per test. Ranks import
the test function's module by name (the spawn start method passes sys.path on), so everything a rank runs must be a
top-level function; import this module as `tests.workers.fsdp_testing`, so that one pool registry serves them all.
"""

import atexit
import os
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from verl.protocol import DataProto
from verl.utils.torch_functional import entropy_from_logits, log_probs_from_logits, positions_from_mask


VOCAB = 2000  # ids below the tiny tokenizer's special tokens (2048+)


def free_port() -> int:
    """A port that was free a moment ago: bind port 0 and let the OS choose (fixed ports collide across tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RankPool:
    """`world_size` rank processes that run test functions one after another, each call on every rank at once."""

    def __init__(self, world_size: int) -> None:
        context = mp.get_context("spawn")
        self.world_size = world_size
        self.results = context.Queue()
        self.jobs = [context.SimpleQueue() for _ in range(world_size)]
        self.processes = [
            context.Process(target=_serve, args=(rank, world_size, jobs, self.results), name=f"rank{rank}")
            for rank, jobs in enumerate(self.jobs)
        ]
        for process in self.processes:
            process.start()

    def run(self, fn: Callable[..., None], args: tuple) -> None:
        """fn(rank, world_size, port, *args) on every rank. The first rank to fail (or die) fails the call and closes
        the pool, killing its peers (perhaps blocked in a collective); so does an interrupt or a test timeout."""
        port = free_port()  # a fresh one per call: a test may have destroyed the process group
        for jobs in self.jobs:
            jobs.put((fn, port, args))
        try:
            for _ in range(self.world_size):
                rank, error = self._next_result()
                if error is not None:
                    raise RuntimeError(f"{fn.__name__} failed on rank {rank}:\n{error}")
        except BaseException:
            self.close()
            raise

    def _next_result(self) -> tuple[int, str | None]:
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [process for process in self.processes if not process.is_alive()]
                if dead:
                    raise RuntimeError(f"rank process {dead[0].name} died (exit code {dead[0].exitcode})") from None

    def close(self) -> None:
        for jobs, process in zip(self.jobs, self.processes):
            if process.is_alive():
                process.kill()
            process.join()
            jobs.close()
        self.results.close()
        if _POOLS.get(self.world_size) is self:
            del _POOLS[self.world_size]


def _serve(rank: int, world_size: int, jobs: Any, results: Any) -> None:
    while (job := jobs.get()) is not None:
        fn, port, args = job
        try:
            fn(rank, world_size, port, *args)
        except BaseException:
            results.put((rank, traceback.format_exc()))
        else:
            results.put((rank, None))


_POOLS: dict[int, RankPool] = {}


def spawn(fn: Callable[..., None], world_size: int, *args: Any) -> None:
    """Run fn(rank, world_size, port, *args) on the `world_size` gloo ranks of the pool (started on first use and
    closed at the end of the test module, by tests/conftest.py); a failing rank fails the call."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if world_size not in _POOLS:
        _POOLS[world_size] = RankPool(world_size)
    _POOLS[world_size].run(fn, args)


def close_pools() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


atexit.register(close_pools)


def init_rank(rank: int, world_size: int, port: int) -> None:
    """One thread per rank (2 cores, 2 ranks), CPU device, gloo group with a timeout so a dead peer fails fast."""
    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0"
    )
    from verl.utils import device

    device.set_device_type("cpu")
    device.init_distributed(timeout_seconds=120)


def _layout(prompts: list[list[int]], responses: list[list[int]], prompt_len: int, response_len: int, pad: int):
    """Left-padded prompts ++ right-padded responses, as the rollout returns them."""
    batch_size = len(prompts)
    input_ids = torch.full((batch_size, prompt_len + response_len), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        input_ids[row, prompt_len - len(prompt) : prompt_len] = torch.tensor(prompt)
        attention_mask[row, prompt_len - len(prompt) : prompt_len] = 1
        input_ids[row, prompt_len : prompt_len + len(response)] = torch.tensor(response)
        attention_mask[row, prompt_len : prompt_len + len(response)] = 1
    return input_ids, attention_mask


def _training_columns(batch: dict[str, torch.Tensor], generator: torch.Generator) -> None:
    """Random old/ref log-probs, advantages, values and returns (zero on padding), as later phases add them."""
    mask = batch["response_mask"].float()
    shape = mask.shape
    batch["old_log_probs"] = -torch.rand(shape, generator=generator) * 8 * mask
    batch["ref_log_probs"] = -torch.rand(shape, generator=generator) * 8 * mask
    batch["advantages"] = torch.randn(shape, generator=generator) * mask
    batch["values"] = torch.randn(shape, generator=generator) * mask
    batch["returns"] = torch.randn(shape, generator=generator) * mask


def make_text_batch(
    seed: int,
    batch_size: int = 8,
    prompt_len: int = 12,
    response_len: int = 10,
    pad: int = 2048,
    aligned_prompt_len: int | None = None,
) -> DataProto:
    """A text rollout batch with varied prompt and response lengths (some responses fill the whole width); with
    `aligned_prompt_len`, every prompt has that many tokens and every response fills the width (no padding in the
    columns that some row uses)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, prompt_len + 1, (batch_size,), generator=generator).tolist()
    response_lengths = torch.randint(1, response_len + 1, (batch_size,), generator=generator).tolist()
    response_lengths[0] = response_len
    if aligned_prompt_len is not None:
        lengths, response_lengths = [aligned_prompt_len] * batch_size, [response_len] * batch_size
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in lengths]
    responses = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in response_lengths]
    input_ids, attention_mask = _layout(prompts, responses, prompt_len, response_len, pad)
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": positions_from_mask(attention_mask),
        "responses": input_ids[:, prompt_len:].clone(),
        "response_mask": attention_mask[:, prompt_len:].clone(),
    }
    _training_columns(batch, generator)
    return DataProto.from_dict(tensors=batch)


def make_vl_batch(
    model: torch.nn.Module,
    processor: Any,
    seed: int,
    batch_size: int = 4,
    prompt_len: int = 40,
    response_len: int = 8,
    text_only_rows: tuple[int, ...] = (),
    image_placeholder: str | None = None,
) -> DataProto:
    """A VL rollout batch: one random image per prompt, mrope position_ids (B, 3, L) (1-D rope families: (B, L)),
    raw images; the chat text writes `image_placeholder` for the image (default: the family's, tests/families.py).

    Prompts go through the processor (which expands the image placeholder to the image's token count); the 3-D
    positions come from the model's own get_rope_index over prompt + response, as the rollout would continue them.
    The rows in `text_only_rows` have no image (multi_modal_data None), as in a mixed text and image dataset.
    `prompt_len` grows to the longest prompt (LLaVA-OneVision's tiles cost many tokens).
    """
    from families import FAMILIES
    from PIL import Image

    placeholder = image_placeholder or FAMILIES[model.config.model_type].image_placeholder
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    pad = processor.tokenizer.pad_token_id
    prompts, responses, images = [], [], []
    for row in range(batch_size):
        height, width = 28 * int(rng.integers(2, 5)), 28 * int(rng.integers(2, 5))
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        words = " ".join(rng.choice(["red", "blue", "circle", "count", "the", "image"], size=int(rng.integers(1, 5))))
        if row in text_only_rows:
            image = None
            text = f"<|im_start|>user\n{words}<|im_end|>\n"
        else:
            text = f"<|im_start|>user\n{placeholder}{words}<|im_end|>\n"
        encoded = processor(text=[text], images=None if image is None else [image], return_tensors="pt")
        prompt = encoded["input_ids"][0].tolist()
        length = response_len if row == 0 else int(torch.randint(1, response_len + 1, (1,), generator=generator))
        prompts.append(prompt)
        responses.append(torch.randint(0, VOCAB, (length,), generator=generator).tolist())
        images.append(image)
    prompt_len = max(prompt_len, *(len(prompt) for prompt in prompts))
    input_ids, attention_mask = _layout(prompts, responses, prompt_len, response_len, pad)
    if hasattr(model.model, "get_rope_index"):
        image_token = model.config.image_token_id
        mm_token_type_ids = (input_ids == image_token).int()
        with_image = [image for image in images if image is not None]
        grids = (
            processor.image_processor(images=with_image, return_tensors="pt")["image_grid_thw"] if with_image else None
        )
        position_ids, _ = model.model.get_rope_index(
            input_ids, mm_token_type_ids, grids, attention_mask=attention_mask
        )
        position_ids = position_ids.transpose(0, 1).contiguous()
    else:
        position_ids = positions_from_mask(attention_mask)
    media = [None if image is None else {"images": [image]} for image in images]
    return _rows_batch(input_ids, attention_mask, position_ids, prompt_len, generator, media)


def make_media_batch(
    model: torch.nn.Module, processor: Any, rows: list[list[str]], placeholders: dict[str, str], seed: int = 0
) -> DataProto:
    """A VL rollout batch whose row i holds the images and videos `rows[i]` names, in that order ("image", "video";
    an empty list: a text-only row), each written with `placeholders[kind]`; the prompts and pixels go through the
    processor as the dataset's (`processor_inputs`, videos of 4 random frames at 2 fps), the mrope positions over
    prompt + response come from RopeIndex, as the dataset and the rollout make them."""
    from PIL import Image

    from verl.data.multimodal import processor_inputs
    from verl.models.rope_index import RopeIndex

    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    response_len = 8
    prompts, responses, media, grids = [], [], [], []
    for kinds in rows:
        images, videos = [], []
        for kind in kinds:
            if kind == "image":
                height, width = 28 * int(rng.integers(2, 4)), 28 * int(rng.integers(2, 4))
                images.append(Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)))
            else:
                videos.append(rng.integers(0, 256, (4, 56, 56, 3), dtype=np.uint8))
        words = " ".join(rng.choice(["red", "blue", "circle", "count", "the", "image"], size=int(rng.integers(1, 4))))
        text = "<|im_start|>user\n" + "".join(placeholders[kind] for kind in kinds) + f"{words}<|im_end|>\n"
        encoded = processor_inputs(processor, text, images or None, videos or None, video_fps=2.0)
        prompts.append(encoded["input_ids"][0].tolist())
        grids.append((encoded.get("image_grid_thw"), encoded.get("video_grid_thw")))
        length = int(torch.randint(1, response_len + 1, (1,), generator=generator))
        responses.append(torch.randint(0, VOCAB, (length,), generator=generator).tolist())
        data = {"images": images} if images else {}
        if videos:
            data.update(videos=videos, video_fps=2.0)
        media.append(data or None)
    prompt_len = max(len(prompt) for prompt in prompts)
    input_ids, attention_mask = _layout(prompts, responses, prompt_len, response_len, processor.tokenizer.pad_token_id)
    rope_index = RopeIndex(model.config)
    position_ids = torch.stack(
        [rope_index(ids, mask, *grid) for ids, mask, grid in zip(input_ids, attention_mask, grids)]
    )
    return _rows_batch(input_ids, attention_mask, position_ids, prompt_len, generator, media)


def grad_atol(expected: dict[str, torch.Tensor], key: str) -> float:
    """The fp32 noise allowed in gradient `key`: 1e-5 of its scale (packed attention sums in another order), 3e-5 for
    a mixture-of-experts router (`mlp.gate`: every token's routing weights, through a softmax and the top-k
    renormalisation, sum into it; one element of 1,024 came out at 1.03x the plain allowance on one CPU). A key
    projection's bias has a zero gradient in exact arithmetic (softmax ignores a shift of every score): its noise is
    judged by the scale of the projection's weight."""
    scale_key = key.replace(".bias", ".weight") if key.endswith("k_proj.bias") else key
    share = 3e-5 if key.endswith("mlp.gate.weight") else 1e-5
    return share * expected[scale_key].abs().max().item() + 1e-9


def reference_outputs(model: torch.nn.Module, data: DataProto, temperature: float) -> dict[str, torch.Tensor]:
    """Plain single-process Hugging Face forward on the padded batch: response log-probs and entropy, or values.

    This is the ground truth the sharded, packed and dynamically batched paths must reproduce.
    """
    batch = data.batch
    response_len = batch["responses"].shape[-1]
    position_ids = batch["position_ids"]
    if "multi_modal_inputs" in data.non_tensor_batch:  # row by row, each with its own images
        logits = torch.cat(
            [
                model(
                    input_ids=batch["input_ids"][row : row + 1],
                    attention_mask=batch["attention_mask"][row : row + 1],
                    position_ids=position_ids[row : row + 1].transpose(0, 1)
                    if position_ids.dim() == 3
                    else position_ids[row : row + 1],
                    use_cache=False,
                    **(inputs or {}),
                ).logits
                for row, inputs in enumerate(data.non_tensor_batch["multi_modal_inputs"])
            ]
        )
    else:
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=position_ids,
            use_cache=False,
        ).logits
    logits = logits[:, -response_len - 1 : -1].float()
    valid = batch["attention_mask"][:, -response_len:].float()
    if logits.shape[-1] == 1:  # a value model: its single channel is the value
        return {"values": logits[..., 0] * valid}
    scaled = logits / temperature
    return {
        "log_probs": log_probs_from_logits(scaled, batch["responses"]) * valid,
        "entropy": entropy_from_logits(scaled) * valid,
    }


def accumulate_over_pass(model: torch.nn.Module, micro_batches: list[torch.Tensor], gather_once: bool) -> dict:
    """Gradients (full tensors, cloned) of a toy loss summed over `micro_batches` of token ids, accumulated in one
    `micro_batch_pass` of the FSDP2 `model`. Collective: every rank must call it with as many micro-batches."""
    from verl.models.fsdp import micro_batch_pass

    model.zero_grad(set_to_none=True)
    with micro_batch_pass(model, gather_once, reshard_after_forward=True) as before_backward:
        for index, ids in enumerate(micro_batches):
            loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
            before_backward(index == len(micro_batches) - 1)
            loss.backward()
    return {name: param.grad.full_tensor().clone() for name, param in model.named_parameters()}


def _rows_batch(input_ids, attention_mask, position_ids, prompt_len, generator, media) -> DataProto:
    """The actor's batch of these rows (prompt then response at `prompt_len`), with training columns and media."""
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "responses": input_ids[:, prompt_len:].clone(),
        "response_mask": attention_mask[:, prompt_len:].clone(),
    }
    _training_columns(batch, generator)
    return DataProto.from_dict(tensors=batch, non_tensors={"multi_modal_data": media})
