# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""HybridEngine: the FSDP2 actor's weights into this process's vLLM engine before every rollout, the engine put away
after it (GPU: asleep between rollouts). The sink is picked once: vLLM's loader or the direct copy; with
`lora_sync=adapters` the base goes once, then only the adapters. `check_weights` compares engine and actor log-probs:
on request, and after the first direct copy or the first sync of a mixture-of-experts actor."""

import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from verl.models.config import expert_count, refuse_unchecked_experts
from verl.models.fsdp import load_fsdp_model, offload_fsdp_model
from verl.models.moe import router_choice, router_modules
from verl.utils import device as device_utils
from verl.workers.rollout import vllm_compat
from verl.workers.rollout.vllm_rollout import VLLMRollout
from verl.workers.weight_sync import WeightSink, sync
from verl.workers.weight_sync.gather import checkpoint_names, iter_adapter_weights, iter_full_weights
from verl.workers.weight_sync.opt_in import (
    EngineAdapter,
    EngineCopy,
    LayoutError,
    adapter_checkpoint_names,
    engine_copy,
    peft_config_of,
)
from verl.workers.weight_sync.sinks import EngineLoader


logger = logging.getLogger(__name__)

_PROBE_TEXT = "What is 12 + 30? Let us think step by step, then write the final answer."


def _probe_image() -> Any:
    """A fixed 56x56 gradient image (4 vision tokens after Qwen2-VL's merging)."""
    from PIL import Image

    ramp = torch.arange(56, dtype=torch.uint8) * 4
    pixels = torch.stack([ramp.expand(56, 56), ramp.expand(56, 56).T, 255 - ramp.expand(56, 56)], dim=-1)
    return Image.fromarray(pixels.numpy())


def probe_inputs(rollout: VLLMRollout) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
    """(engine prompt, actor forward kwargs) pairs for the weight check: text (cut to the engine's context), and for
    VLMs an image probe (to check the vision tower) where it fits in the context, else a warning says it is left out."""
    tokenizer = rollout.tokenizer
    room = rollout.max_model_len - 1  # the probe generates one token
    ids = tokenizer.encode(_PROBE_TEXT, add_special_tokens=False)[:room]
    probes = [({"prompt_token_ids": ids}, {"input_ids": torch.tensor([ids])})]
    if rollout.multimodal:
        image = _probe_image()
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _PROBE_TEXT}]}]
        text = rollout.processor.apply_chat_template(messages, add_generation_prompt=True)
        actor_inputs = dict(rollout.processor(text=[text], images=[image], return_tensors="pt"))
        raw_ids = tokenizer.encode(text, add_special_tokens=False)
        length = actor_inputs["input_ids"].shape[1]
        if length <= room:
            probes.append(({"prompt_token_ids": raw_ids, "multi_modal_data": {"image": [image]}}, actor_inputs))
        elif (length, rollout.max_model_len) not in _WARNED:  # once per process
            _WARNED.add((length, rollout.max_model_len))
            logger.warning(
                "The weight sync check leaves the vision tower out: its image probe (%d tokens) does not fit the "
                "engine's max_model_len=%d.",
                length,
                rollout.max_model_len,
            )
    return probes


_WARNED: set[tuple[int, int]] = set()


def probe_log_prob_gap(module: nn.Module, rollout: VLLMRollout) -> tuple[float, float]:
    """(mean, max) abs difference between the engine's and the actor's prompt log-probs of the probe tokens; a gap
    beyond numerics means the engine does not hold the actor's weights. Collective under FSDP: every rank calls it."""
    return probe(module, rollout)[:2]


def probe(module: nn.Module, rollout: VLLMRollout, routing: bool = False) -> tuple[float, float, float | None]:
    """`probe_log_prob_gap`'s (mean, max), and with `routing` for an MoE actor the share of (text token, MoE layer)
    pairs whose top-k experts differ between engine and actor (None: not asked, dense, or unreadable)."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    device = device_utils.get_local_device()  # not the parameters': FSDP's own CPU offload keeps them on the host
    routers = router_modules(module) if routing else []
    gaps, mismatch = [], None
    was_training = module.training
    module.eval()  # as the old log-probs are computed (no dropout); the next update sets training mode again
    for index, (engine_input, actor_inputs) in enumerate(probe_inputs(rollout)):
        watch = bool(routers) and index == 0  # the text probe
        with vllm_compat.engine_router_logits(rollout.inference_engine) if watch else nullcontext([]) as engine_routes:
            output = rollout.inference_engine.generate(
                [engine_input], params, use_tqdm=False, lora_request=rollout.lora_request
            )[0]
        ids = actor_inputs["input_ids"][0].tolist()
        if list(output.prompt_token_ids) != ids:
            raise RuntimeError(
                f"Weight sync check: the engine expanded the probe prompt to {len(output.prompt_token_ids)} tokens "
                f"but the processor to {len(ids)}; the engine and the actor do not see the same input."
            )
        engine = torch.tensor(
            [vllm_compat.sampled_token_logprob(entry, t) for entry, t in zip(output.prompt_logprobs[1:], ids[1:])]
        )
        actor_inputs = {key: value.to(device) for key, value in actor_inputs.items()}
        actor_inputs.setdefault("attention_mask", torch.ones_like(actor_inputs["input_ids"]))
        with torch.no_grad(), _routes(routers if watch else []) as actor_routes:
            logits = module(**actor_inputs, use_cache=False).logits[0, :-1].float()
        if watch:
            mismatch = routing_mismatch(engine_routes, actor_routes, len(ids))
        targets = actor_inputs["input_ids"][0, 1:].unsqueeze(-1)
        actor = F.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1).cpu()
        gaps.append((engine - actor).abs())
    module.train(was_training)
    gap = torch.cat(gaps)
    return float(gap.mean()), float(gap.max()), mismatch


@contextlib.contextmanager
def _routes(routers: list[nn.Module]) -> Iterator[list[list[torch.Tensor]]]:
    """Inside: the expert ids (tokens, top-k) each of `routers` chose, a list per router, one tensor per forward."""
    captured: list[list[torch.Tensor]] = [[] for _ in routers]
    handles = []
    for router, calls in zip(routers, captured):

        def hook(_module: nn.Module, _inputs: Any, output: Any, calls: list[torch.Tensor] = calls) -> None:
            ids = router_choice(output)[1]
            calls.append(ids.detach().reshape(-1, ids.shape[-1]).cpu())

        handles.append(router.register_forward_hook(hook))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def routing_mismatch(
    engine_logits: list[list[torch.Tensor]], actor_ids: list[list[torch.Tensor]], tokens: int
) -> float | None:
    """Share of (token, layer) pairs whose chosen experts differ (engine top-k of its router logits vs the actor's
    ids), for one forward of `tokens` tokens; None where the capture is not exactly that (compiled engine, batched
    requests, prefix-cached tokens)."""
    if not actor_ids or len(engine_logits) != len(actor_ids):
        return None
    differ = []
    for engine_calls, actor_calls in zip(engine_logits, actor_ids):
        if len(engine_calls) != 1 or len(actor_calls) != 1:
            return None
        chosen = actor_calls[0]
        if engine_calls[0].shape[0] != tokens or chosen.shape[0] != tokens:
            return None
        engine = engine_calls[0].topk(chosen.shape[-1], dim=-1).indices.sort(dim=-1).values
        differ.append((engine != chosen.sort(dim=-1).values).any(dim=-1))
    return float(torch.stack(differ).double().mean())


class FSDPVLLMShardingManager:
    """Brings the actor's weights into the rollout engine before generation and puts the engine away after:
    `prepare()` / `release()`, each returning metrics. RNG states are saved and restored around
    generation, so it never shifts the trainer's random streams."""

    def __init__(
        self,
        module: nn.Module,
        rollout: VLLMRollout,
        verify: bool | None = None,
        *,
        offload_params: bool = False,
        device: torch.device | None = None,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        """`compute_dtype`: the dtype the actor's forward runs in (fsdp.torch_dtype, else mp_param_dtype on an
        accelerator): a 16-bit actor is checked with the 16-bit tolerance, as a 16-bit engine is."""
        self.module = module
        self.compute_dtype = compute_dtype
        self.rollout = rollout
        self.offload_params = offload_params
        self.device = device if device is not None else device_utils.get_local_device()
        self.verify = rollout.config.verify_weight_sync if verify is None else verify
        self.names = checkpoint_names(module)
        self._rng_state: dict[str, Any] | None = None
        model_config = getattr(module, "config", None)
        model_config = model_config.to_dict() if model_config is not None else {}
        refuse_unchecked_experts("The actor", model_config)  # a hub id: not checked at validation
        self.mixture_of_experts = expert_count(model_config) is not None
        self.sink = self._pick_sink()
        # checked once: the first direct copy, and the first MoE sync (vLLM's MoE layers reprocess weights per backend)
        self._unchecked = isinstance(self.sink, EngineCopy) or self.mixture_of_experts
        # lora_sync=adapters: the engine's adapter, and whether it holds the frozen base weights yet
        self.adapter: EngineAdapter | None = None
        self._base_synced = False
        if rollout.config.lora_sync == "adapters":
            parameters = [name for name, _ in module.named_parameters(remove_duplicate=False)]
            self.adapter_names = adapter_checkpoint_names(parameters, self.names)
            self.adapter = EngineAdapter(rollout.inference_engine, peft_config_of(module))

    def _pick_sink(self) -> WeightSink:
        """vLLM's loader, or with weight_sync=direct the copy where the engine takes the actor's tensors by rows
        (elsewhere a warning naming why, and the loader)."""
        llm = self.rollout.inference_engine
        if self.rollout.config.weight_sync == "direct":
            try:
                return engine_copy(self.module, llm, self.names)
            except (LayoutError, RuntimeError) as error:
                logger.warning(
                    "worker.rollout.weight_sync=direct: %s The weights go through vLLM's loader instead.", error
                )
        return EngineLoader(llm)

    def prepare(self) -> dict[str, float]:
        """Save the RNG, wake the engine (GPU), sync the weights, optionally verify them; returns metrics. With
        `offload_params` the shards come to the device for the sync and check, and leave before the KV cache is
        allocated."""
        self._rng_state = device_utils.get_rng_state()
        llm = self.rollout.inference_engine
        if self.offload_params:
            load_fsdp_model(self.module, self.device)
        if self.rollout.sleep_mode:
            device_utils.empty_cache()
            llm.wake_up(tags=["weights"])
        metrics = self._sync()
        if self.offload_params:
            offload_fsdp_model(self.module)
            device_utils.empty_cache()
        if self.rollout.sleep_mode:
            llm.wake_up(tags=["kv_cache"])
        if self.verify or self._unchecked:
            self._unchecked = False
            if self.offload_params:
                load_fsdp_model(self.module, self.device)
            metrics.update(self.check_weights())
            if self.offload_params:
                offload_fsdp_model(self.module)
        return metrics

    def _sync(self) -> dict[str, float]:
        """Gather -> sink: every weight (LoRA merged), or with `lora_sync=adapters` the base the first time and the
        adapters every time (the engine keeps its base between rollouts: level-1 sleep on GPU); its metrics."""
        dtype = self.rollout.torch_dtype
        start = time.perf_counter()
        parts = []
        if self.adapter is None or not self._base_synced:
            merge = self.adapter is None
            parts.append(sync(self.sink, iter_full_weights, self.module, dtype, self.names, merge_lora=merge))
            self._base_synced = True
        if self.adapter is not None:
            parts.append(sync(self.adapter, iter_adapter_weights, self.module, dtype, self.adapter_names))
            self.rollout.lora_request = self.adapter.request
        # stale KV blocks or vision embeddings would give silently wrong outputs; a slept engine had them cleared
        if not self.rollout.sleep_mode:
            vllm_compat.reset_caches_after_weight_update(self.rollout.inference_engine)
        metrics = {
            "timing_s/sync_weights": time.perf_counter() - start,
            "timing_s/sync_weights_gather": sum(part["gather_seconds"] for part in parts),
            "perf/sync_weights_gb": sum(part["bytes"] for part in parts) / 2**30,
            "perf/sync_weights_max_param_mb": max(part["max_param_bytes"] for part in parts) / 2**20,
        }
        if self.adapter is not None:
            metrics["timing_s/sync_adapters"] = parts[-1]["seconds"]
        return metrics

    def check_weights(self) -> dict[str, float]:
        """Compare engine and actor log-probs on a fixed probe; raise RuntimeError when they disagree."""
        mean_gap, max_gap, mismatch = probe(self.module, self.rollout, routing=self.mixture_of_experts)
        # 16-bit engines drift further, a mixture of experts most (rounding flips some tokens' experts): a correct sync
        # of the tiny Qwen3.5-MoE into its bf16 CPU engine measured 0.045-0.131 over 6 steps (0.03 dense); an engine
        # that missed the sync is off by nats. A bf16 actor (fsdp.torch_dtype=bf16) against the fp32 CPU engine of
        # its weights: 0.008-0.011 (tiny Qwen3, Qwen3-MoE), which failed the fp32 tolerance
        tolerance = 1e-3 if self.rollout.torch_dtype == torch.float32 == self.compute_dtype else 0.25
        if not mean_gap <= tolerance:
            raise RuntimeError(
                f"Weight sync check failed: the engine's probe log-probs differ from the actor's by {mean_gap:.3g} on "
                f"average (max {max_gap:.3g}, tolerance {tolerance}); the engine does not hold the actor's weights. "
                "Check the parameter names (weight_sync.gather.checkpoint_names) and vLLM's warnings about weights it "
                "failed to load (with rollout.lora_sync=adapters: the adapter names, "
                "weight_sync.opt_in.adapter_checkpoint_names; "
                "with rollout.weight_sync=direct: set it to loader)."
            )
        metrics = {"rollout/weight_sync_mean_gap": mean_gap, "rollout/weight_sync_max_gap": max_gap}
        if mismatch is not None:
            metrics["rollout/weight_sync_routing_mismatch"] = mismatch
        return metrics

    def release(self) -> dict[str, float]:
        """Put the engine to sleep (GPU; reports the freed memory) and restore the RNG states; returns metrics."""
        metrics: dict[str, float] = {}
        if self.rollout.sleep_mode:
            free_before = torch.cuda.mem_get_info()[0]
            self.rollout.inference_engine.sleep(level=self.rollout.sleep_level)
            device_utils.empty_cache()
            metrics["perf/vllm_freed_gb"] = (torch.cuda.mem_get_info()[0] - free_before) / 2**30
        if self._rng_state is not None:
            device_utils.set_rng_state(self._rng_state)
            self._rng_state = None
        return metrics
