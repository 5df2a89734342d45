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
"""HybridEngine weight resharding: the FSDP2 actor's weights into this process's vLLM engine, before every rollout.

Parameters are gathered one FSDP unit at a time, cast to the engine's dtype, renamed to vLLM's checkpoint names and
streamed into the engine; the unit is resharded before the next is gathered, so the extra memory is about one
gathered layer. On GPU the engine sleeps between rollouts; on the CPU it stays up. With LoRA the engine gets merged
weights, or (`rollout.lora_sync=adapters`) the base weights once and then only the adapters (lora_adapters.py).
"""

import functools
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from verl.models.fsdp import load_fsdp_model, offload_fsdp_model
from verl.models.lora import base_name, is_adapter_param, lora_merge_plan, merge_weight
from verl.utils import device as device_utils
from verl.workers.rollout import vllm_compat
from verl.workers.rollout.vllm_rollout import VLLMRollout, on_gpu
from verl.workers.sharding_manager.engine_layout import EngineCopy, LayoutError
from verl.workers.sharding_manager.lora_adapters import EngineAdapter, adapter_checkpoint_names, peft_config_of


logger = logging.getLogger(__name__)

# Prefixes that wrappers insert into parameter names (activation checkpointing, torch.compile, FSDP1).
_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")
# Fixed probe text for the weight check; any short text that tokenizes to a dozen tokens will do.
_PROBE_TEXT = "What is 12 + 30? Let us think step by step, then write the final answer."


def _strip_wrappers(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def checkpoint_names(module: nn.Module) -> dict[str, str]:
    """Map each parameter name of `module` to the name it has in a saved checkpoint, which is what vLLM loads.

    transformers 5 renames some architectures' modules at load time (Qwen2-VL: `model.layers` is stored but the
    module is `model.language_model.layers`, `visual` becomes `model.visual`) and reverts that on save. The same
    reversal is applied here, one name at a time. A parameter that transformers fused from several checkpoint tensors
    (a mixture-of-experts layer's experts, one tensor per layer) keeps its own name here: the stream splits it into
    the checkpoint's tensors (`fused_parameters`).
    """
    mapping = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if is_adapter_param(name):  # LoRA: merged into its base weight, which keeps the base model's name
            continue
        clean, reverted = _reverted_names(module, name, param)
        mapping[name] = reverted[0] if len(reverted) == 1 else clean
    return mapping


def fused_parameters(module: nn.Module, names: dict[str, str]) -> dict[str, str]:
    """The parameters among `names` that transformers fused from several checkpoint tensors, each with its name as
    transformers' conversion knows it (e.g. `model.layers.0.mlp.experts.gate_up_proj`, from every expert's gate and
    up projections)."""
    fused = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if name in names:
            clean, reverted = _reverted_names(module, name, param)
            if len(reverted) > 1:
                fused[name] = clean
    return fused


def _reverted_names(module: nn.Module, name: str, param: torch.Tensor) -> tuple[str, list[str]]:
    """A parameter's name without wrapper prefixes, and the checkpoint names transformers' reverse conversion gives
    it (one for a renamed parameter, several for a fused one); shapes only, no data."""
    from transformers.core_model_loading import revert_weight_conversion

    clean = base_name(_strip_wrappers(name))
    return clean, list(revert_weight_conversion(module, {clean: torch.empty(param.shape, device="meta")}))


def _full(param: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly FSDP-sharded) parameter: an all-gather over its mesh for a DTensor."""
    if not isinstance(param, DTensor):
        return param
    if on_gpu() and param.device.type == "cpu":  # CPU-offloaded shards: gather over NCCL on the device
        param = DTensor.from_local(
            param.to_local().cuda(),
            param.device_mesh,
            param.placements,
            run_check=False,
            shape=param.shape,  # FSDP shards may be uneven: without the global shape each rank would infer its own
            stride=param.stride(),
        )
    return param.full_tensor()


class _Slot(NamedTuple):
    name: str  # parameter name in the FSDP module
    owner: nn.Module  # the module that registers it: FSDP2 swaps its sharded and gathered tensors there
    leaf: str  # its attribute name on `owner`


class _StreamPlan(NamedTuple):
    units: list[tuple[FSDPModule | None, list[_Slot]]]  # FSDP units (outermost first) and what each gathers
    merge_plan: dict[str, tuple[str, str, float]]  # LoRA: base weight -> (A, B, scaling)
    exact: set[str]  # names that are never taken from a rounded all-gather (LoRA factors and bases)
    fused: dict[str, str]  # parameters sent as several checkpoint tensors (fused_parameters)


def _stream_plan(module: nn.Module, names: dict[str, str]) -> _StreamPlan:
    """Which FSDP unit gathers which of the streamed parameters, found once per module and set of names.

    A parameter belongs to the innermost unit whose module contains it. Names outside every unit (a module that is
    not sharded at all) come last, under None. Parameters are looked up through their owning module at each use,
    so the plan holds no tensor and stays valid when offloading or loading a checkpoint replaces them.
    """
    params = [name for name, _ in module.named_parameters(remove_duplicate=False)]
    merge_plan = lora_merge_plan(module) if any(is_adapter_param(name) for name in params) else {}
    exact = {name for base, (a_name, b_name, _) in merge_plan.items() for name in (base, a_name, b_name)}
    needed = [name for name in params if name in names]
    needed += sorted({name for base in needed if base in merge_plan for name in merge_plan[base][:2]} - set(needed))
    units = [(prefix, unit) for prefix, unit in module.named_modules() if isinstance(unit, FSDPModule)]
    owned: dict[int, list[_Slot]] = {index: [] for index in range(len(units))}
    loose: list[_Slot] = []
    for name in needed:
        owner_name, _, leaf = name.rpartition(".")
        slot = _Slot(name, module.get_submodule(owner_name), leaf)
        owners = [i for i, (prefix, _) in enumerate(units) if not prefix or name.startswith(prefix + ".")]
        (owned[max(owners, key=lambda i: len(units[i][0]))] if owners else loose).append(slot)
    plan: list[tuple[FSDPModule | None, list[_Slot]]] = [(unit, owned[i]) for i, (_, unit) in enumerate(units)]
    return _StreamPlan(
        [(unit, group) for unit, group in plan if group] + ([(None, loose)] if loose else []),
        merge_plan,
        exact,
        fused_parameters(module, names),
    )


_PLANS: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple[tuple[str, str], ...], _StreamPlan]]" = (
    weakref.WeakKeyDictionary()
)


def _cached_stream_plan(module: nn.Module, names: dict[str, str]) -> _StreamPlan:
    key = tuple(names.items())
    cached = _PLANS.get(module)
    if cached is None or cached[0] != key:
        cached = (key, _stream_plan(module, names))
        _PLANS[module] = cached
    return cached[1]


def _unit_tensor(gathered: torch.Tensor, master: torch.Tensor, exact: bool, dtype: torch.dtype) -> torch.Tensor:
    """The full tensor of a parameter while its FSDP unit is unsharded (see `_gathered`): `gathered` is what the
    module holds now, `master` the sharded parameter it held before."""
    if isinstance(gathered, DTensor):  # not part of this unit's all-gather
        return _full(gathered)
    if gathered.dtype == master.dtype or (gathered.dtype == dtype and not exact):
        # `reshard` frees the gathered storage while the engine may still hold the tensor: hand out a copy, unless
        # the cast to `dtype` makes one anyway
        return gathered.detach().clone() if gathered.dtype == dtype else gathered.detach()
    return _full(master)


def _gathered(plan: _StreamPlan, dtype: torch.dtype) -> Iterator[tuple[list[str], Callable[[str], torch.Tensor]]]:
    """(parameter names, name -> full tensor) for one FSDP unit at a time, gathered by one all-gather (`unshard`).

    FSDP2 gathers a unit's parameters in its compute dtype. A gathered tensor is used when that loses nothing: it is
    in the parameter's own dtype, or in the target `dtype` (the same rounding as casting the full tensor) and the
    name is not in `plan.exact` (LoRA factors and bases, merged in float32). Any other parameter is gathered on its
    own, in its own dtype. Each unit is resharded before the next one is gathered, so the extra memory is about one
    gathered unit. Collective: every rank must ask for the same tensors in the same order.
    """
    for unit, group in plan.units:
        slots = {slot.name: slot for slot in group}
        masters = {slot.name: getattr(slot.owner, slot.leaf) for slot in group}  # before the unit is gathered
        if unit is None:
            yield list(slots), functools.partial(_loose_tensor, masters)
            continue
        unit.unshard()
        try:
            yield list(slots), functools.partial(_gathered_tensor, slots, masters, plan.exact, dtype)
        finally:
            unit.reshard()


def _loose_tensor(masters: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return _full(masters[name])


def _gathered_tensor(
    slots: dict[str, _Slot], masters: dict[str, torch.Tensor], exact: set[str], dtype: torch.dtype, name: str
) -> torch.Tensor:
    slot = slots[name]
    return _unit_tensor(getattr(slot.owner, slot.leaf), masters[name], name in exact, dtype)


def _counted(tensor: torch.Tensor, stats: dict[str, float], since: float) -> torch.Tensor:
    """`tensor`, counted into a weight stream's `stats` (tensors, bytes, largest, gather time since `since`)."""
    nbytes = tensor.numel() * tensor.element_size()
    stats["num_params"] += 1
    stats["bytes"] += nbytes
    stats["max_param_bytes"] = max(stats["max_param_bytes"], nbytes)
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - since
    return tensor


def iter_full_weights(
    module: nn.Module, dtype: torch.dtype, names: dict[str, str], stats: dict[str, float], merge_lora: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (checkpoint name, full tensor in `dtype`) one parameter at a time; count bytes into `stats`.

    Parameters are gathered one FSDP unit (a decoder layer, the root) at a time, one all-gather each, rather than one
    collective per parameter. A tied parameter (the embedding reused as lm_head) is sent under each of its names: on
    CPU vLLM keeps a repacked copy of lm_head for its matmul that only a load of `lm_head.weight` refreshes. A LoRA
    layer's weight is sent merged (W + scaling x B @ A, under the base model's name), or with `merge_lora=False` as
    the base weight alone; its adapters are not sent on their own. A parameter transformers fused from several
    checkpoint tensors (mixture-of-experts experts) is sent as those tensors, split by transformers' own reverse
    conversion (what `save_pretrained` writes, the names vLLM loads). The time spent here (gathering, casting,
    merging, splitting) is added to `stats["gather_seconds"]`, so the engine's share of a sync is the rest.
    """
    from transformers.core_model_loading import revert_weight_conversion

    plan = _cached_stream_plan(module, names)
    clock = time.perf_counter()
    for group, full in _gathered(plan, dtype):
        for name in group:
            if name not in names:  # a LoRA factor, merged into its base weight
                continue
            tensor = full(name)
            if merge_lora and name in plan.merge_plan:
                a_name, b_name, scaling = plan.merge_plan[name]
                tensor = merge_weight(tensor, full(a_name), full(b_name), scaling)
            if name in plan.fused:
                pieces = revert_weight_conversion(module, {plan.fused[name]: tensor.detach()}).items()
            else:
                pieces = [(names[name], tensor)]
            for checkpoint_name, piece in pieces:
                yield checkpoint_name, _counted(piece.detach().to(dtype), stats, clock)
                clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock


def iter_adapter_weights(
    module: nn.Module, dtype: torch.dtype, names: dict[str, str], stats: dict[str, float]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (PEFT name, full tensor in `dtype`) for every LoRA factor; `names` maps the factors to their PEFT names
    (lora_adapters.adapter_checkpoint_names). Collective, one all-gather per FSDP unit as `iter_full_weights`.

    The factors are taken from the unit's gather in the compute dtype when that is `dtype`: the engine holds its
    adapters in its own dtype, so this rounds them as loading would.
    """
    plan = _cached_stream_plan(module, names)._replace(exact=set())
    clock = time.perf_counter()
    for group, full in _gathered(plan, dtype):
        for name in group:
            tensor = _counted(full(name).detach().to(dtype), stats, clock)
            yield names[name], tensor
            clock = time.perf_counter()
    stats["gather_seconds"] = stats.get("gather_seconds", 0.0) + time.perf_counter() - clock


def sync_weights(
    fsdp_module: nn.Module,
    llm: Any,
    dtype: torch.dtype = torch.float32,
    names: dict[str, str] | None = None,
    in_place_reload: bool | None = None,
    merge_lora: bool = True,
    caches_empty: bool = False,
    copy: EngineCopy | None = None,
) -> dict[str, float]:
    """Stream the actor's full weights into `llm` (a `vllm.LLM`) and reset its caches; returns sync figures.
    `merge_lora=False` sends a LoRA actor's base weights without its adapters.

    Collective over the FSDP mesh: every rank must call it. `in_place_reload` defaults to True on CPU, where the
    engine's `reload_weights` is the only working path; on GPU the model's `load_weights` runs on the woken engine.
    The cache resets are required: cached KV blocks or vision embeddings of the old weights would otherwise be reused,
    giving silently wrong outputs (see vllm_compat.reset_caches_after_weight_update). `caches_empty=True` skips them
    where nothing ran since the engine's caches were cleared (vLLM's sleep clears them): the prefix-cache reset walks
    every KV block of the cache, the largest single cost of a sync on a GPU (docs/gpu.md). With
    `copy` (rollout.weight_sync=direct) the tensors are copied into the engine's parameters instead of going through
    vLLM's loader.
    """
    names = names if names is not None else checkpoint_names(fsdp_module)
    in_place_reload = (not on_gpu()) if in_place_reload is None else in_place_reload
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0, "gather_seconds": 0.0}
    start = time.perf_counter()
    with torch.no_grad():
        weights = iter_full_weights(fsdp_module, dtype, names, stats, merge_lora)
        if copy is not None:
            copy.copy(weights)
            device_utils.synchronize()  # the copies are queued: the sync's time includes them
        else:
            vllm_compat.load_weights(llm, weights, in_place_reload)
    if not caches_empty:
        vllm_compat.reset_caches_after_weight_update(llm)
    stats["seconds"] = time.perf_counter() - start
    return stats


def engine_copy(fsdp_module: nn.Module, llm: Any, names: dict[str, str]) -> EngineCopy:
    """The direct weight copy (rollout.weight_sync=direct) from `fsdp_module` into `llm`'s parameters; raises
    LayoutError (the engine's layout does not take the actor's tensors by rows) or RuntimeError (the engine runs in
    another process), naming why."""
    shapes = {
        names[name]: tuple(param.shape)
        for name, param in fsdp_module.named_parameters(remove_duplicate=False)
        if name in names
    }
    tied = bool(getattr(getattr(fsdp_module, "config", None), "tie_word_embeddings", False))
    return EngineCopy(lambda: vllm_compat.engine_parameters(llm), vllm_compat.packed_modules(llm), shapes, tied)


def sync_adapters(
    fsdp_module: nn.Module,
    adapter: EngineAdapter,
    dtype: torch.dtype,
    names: dict[str, str],
    caches_empty: bool = False,
) -> dict[str, float]:
    """Gather the actor's LoRA adapters and load them into the engine as a new adapter (`adapter.request`); returns
    sync figures as `sync_weights` does (`caches_empty` as there). Collective over the FSDP mesh: every rank must call
    it."""
    stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0, "gather_seconds": 0.0}
    start = time.perf_counter()
    with torch.no_grad():
        adapter.load(iter_adapter_weights(fsdp_module, dtype, names, stats))
    if not caches_empty:
        vllm_compat.reset_caches_after_weight_update(adapter.llm)
    stats["seconds"] = time.perf_counter() - start
    return stats


def _probe_image() -> Any:
    """A fixed 56x56 gradient image (4 vision tokens after Qwen2-VL's 28-pixel merging)."""
    from PIL import Image

    ramp = torch.arange(56, dtype=torch.uint8) * 4
    pixels = torch.stack([ramp.expand(56, 56), ramp.expand(56, 56).T, 255 - ramp.expand(56, 56)], dim=-1)
    return Image.fromarray(pixels.numpy())


def probe_inputs(rollout: VLLMRollout) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
    """(engine prompt, actor forward kwargs) pairs for the weight check: a text probe, and an image probe for VLMs.

    The image probe exercises the vision tower, which a text-only probe would leave unchecked.
    """
    tokenizer = rollout.tokenizer
    ids = tokenizer.encode(_PROBE_TEXT, add_special_tokens=False)
    probes = [({"prompt_token_ids": ids}, {"input_ids": torch.tensor([ids])})]
    if rollout.multimodal:
        image = _probe_image()
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _PROBE_TEXT}]}]
        text = rollout.processor.apply_chat_template(messages, add_generation_prompt=True)
        actor_inputs = dict(rollout.processor(text=[text], images=[image], return_tensors="pt"))
        raw_ids = tokenizer.encode(text, add_special_tokens=False)
        probes.append(({"prompt_token_ids": raw_ids, "multi_modal_data": {"image": [image]}}, actor_inputs))
    return probes


def probe_log_prob_gap(module: nn.Module, rollout: VLLMRollout) -> tuple[float, float]:
    """(mean, max) abs difference between the engine's and the actor's log-probs of the probe prompts' tokens.

    Both score the same token ids (prompt log-probs, no sampling), so any gap beyond numerics means the engine does
    not hold the actor's weights; with `lora_sync=adapters` the engine scores with the current adapter. The actor
    forward is collective under FSDP: every rank must call this.
    """
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    device = device_utils.get_local_device()  # not the parameters': FSDP's own CPU offload keeps them on the host
    gaps = []
    for engine_input, actor_inputs in probe_inputs(rollout):
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
        with torch.no_grad():
            logits = module(**actor_inputs, use_cache=False).logits[0, :-1].float()
        targets = actor_inputs["input_ids"][0, 1:].unsqueeze(-1)
        actor = F.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1).cpu()
        gaps.append((engine - actor).abs())
    gap = torch.cat(gaps)
    return float(gap.mean()), float(gap.max())


class FSDPVLLMShardingManager:
    """Brings the actor's weights into the rollout engine before generation and puts the engine away after.

    Use `prepare()` / `release()` (each returns metrics) or the manager as a context manager. The RNG states
    (Python, numpy, torch) are saved in `prepare` and restored in `release`, so generation never shifts the
    trainer's random streams.
    """

    def __init__(
        self,
        module: nn.Module,
        rollout: VLLMRollout,
        verify: bool | None = None,
        *,
        offload_params: bool = False,
        device: torch.device | None = None,
    ) -> None:
        self.module = module
        self.rollout = rollout
        self.offload_params = offload_params
        self.device = device if device is not None else device_utils.get_local_device()
        self.verify = rollout.config.verify_weight_sync if verify is None else verify
        self.names = checkpoint_names(module)
        self.freed_bytes = 0
        self._rng_state: dict[str, Any] | None = None
        # lora_sync=adapters: the engine's adapter, and whether it holds the (frozen) base weights yet
        self.adapter: EngineAdapter | None = None
        self._base_synced = False
        if rollout.config.lora_sync == "adapters":
            parameters = [name for name, _ in module.named_parameters(remove_duplicate=False)]
            self.adapter_names = adapter_checkpoint_names(parameters, self.names)
            self.adapter = EngineAdapter(rollout.inference_engine, peft_config_of(module))
        # rollout.weight_sync=direct: the copy into the engine's parameters, checked against the actor once
        self.direct = self._engine_copy() if rollout.config.weight_sync == "direct" else None
        self._direct_checked = False

    def _engine_copy(self) -> EngineCopy | None:
        """The direct copy's placements for this actor and engine, or None (with a warning naming why) where the
        engine does not take the actor's tensors by rows: the sync then uses vLLM's loader."""
        try:
            return engine_copy(self.module, self.rollout.inference_engine, self.names)
        except (LayoutError, RuntimeError) as error:
            logger.warning(
                "worker.rollout.weight_sync=direct: %s The weights go through vLLM's loader instead.", error
            )
            return None

    def prepare(self) -> dict[str, float]:
        """Save the RNG, wake the engine (GPU), sync the weights, optionally verify them; returns metrics.

        With `offload_params` the actor's shards come to the device for the sync (and the check) and go back to CPU
        memory before the KV cache is allocated, so the cache can use the memory they held.
        """
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
        # a debugging aid, and the first direct copy of a run: with offloading the shards come back for the probe
        if self.verify or (self.direct is not None and not self._direct_checked):
            self._direct_checked = True
            if self.offload_params:
                load_fsdp_model(self.module, self.device)
            metrics.update(self.check_weights())
            if self.offload_params:
                offload_fsdp_model(self.module)
        return metrics

    def _sync(self) -> dict[str, float]:
        """The weight sync of `prepare`: every weight (merged with a LoRA actor's adapters), or with
        `lora_sync=adapters` the base weights the first time and the adapters every time (the engine keeps its base
        weights between rollouts: on the GPU it sleeps at level 1 then); its metrics."""
        dtype = self.rollout.torch_dtype
        # with sleep mode the engine slept since its last request, and vLLM's sleep cleared its caches
        empty = self.rollout.sleep_mode
        llm = self.rollout.inference_engine
        if self.adapter is None:
            parts = [sync_weights(self.module, llm, dtype, self.names, caches_empty=empty, copy=self.direct)]
        else:
            parts = []
            if not self._base_synced:
                parts.append(sync_weights(self.module, llm, dtype, self.names, merge_lora=False, caches_empty=empty))
                self._base_synced = True
            parts.append(sync_adapters(self.module, self.adapter, dtype, self.adapter_names, caches_empty=empty))
            self.rollout.lora_request = self.adapter.request
        metrics = {
            "timing_s/sync_weights": sum(part["seconds"] for part in parts),
            "timing_s/sync_weights_gather": sum(part["gather_seconds"] for part in parts),
            "perf/sync_weights_gb": sum(part["bytes"] for part in parts) / 2**30,
            "perf/sync_weights_max_param_mb": max(part["max_param_bytes"] for part in parts) / 2**20,
        }
        if self.adapter is not None:
            metrics["timing_s/sync_adapters"] = parts[-1]["seconds"]
        return metrics

    def check_weights(self) -> dict[str, float]:
        """Compare engine and actor log-probs on a fixed probe; raise RuntimeError when they disagree."""
        mean_gap, max_gap = probe_log_prob_gap(self.module, self.rollout)
        tolerance = 1e-3 if self.rollout.torch_dtype == torch.float32 else 0.1  # 16-bit engines drift ~2e-2 mean
        if not mean_gap <= tolerance:
            raise RuntimeError(
                f"Weight sync check failed: the engine's probe log-probs differ from the actor's by {mean_gap:.3g} on "
                f"average (max {max_gap:.3g}, tolerance {tolerance}); the engine does not hold the actor's weights. "
                "Check the parameter names (fsdp_vllm.checkpoint_names) and vLLM's warnings about weights it failed "
                "to load (with rollout.lora_sync=adapters: the adapter names, lora_adapters.adapter_checkpoint_names; "
                "with rollout.weight_sync=direct: set it to loader)."
            )
        return {"rollout/weight_sync_mean_gap": mean_gap, "rollout/weight_sync_max_gap": max_gap}

    def release(self) -> dict[str, float]:
        """Put the engine to sleep (GPU; reports the freed memory) and restore the RNG states; returns metrics."""
        metrics: dict[str, float] = {}
        if self.rollout.sleep_mode:
            free_before = torch.cuda.mem_get_info()[0]
            self.rollout.inference_engine.sleep(level=self.rollout.sleep_level)
            device_utils.empty_cache()
            self.freed_bytes = torch.cuda.mem_get_info()[0] - free_before
            metrics["perf/vllm_freed_gb"] = self.freed_bytes / 2**30
        if self._rng_state is not None:
            device_utils.set_rng_state(self._rng_state)
            self._rng_state = None
        return metrics

    def __enter__(self) -> "FSDPVLLMShardingManager":
        self.prepare()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
