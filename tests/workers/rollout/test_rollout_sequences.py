# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The rollout's pure parts, without an engine: padding, response mask, position ids, seeds, engine arguments,
and the checkpoint names the weight sync sends."""

import dataclasses
import os

import pytest
import torch

from verl.workers.rollout import vllm_compat
from verl.workers.rollout.config import DETOKENIZED_KEYS, OVERRIDE_VALUE_RULES, RolloutConfig
from verl.workers.rollout.sequences import extend_position_ids, pad_rows, response_mask_through_eos
from verl.workers.rollout.vllm_rollout import build_engine_kwargs, request_seeds


EOS, PAD = 9, 0


def test_pad_rows_right_pads_and_cuts() -> None:
    out = pad_rows([[1, 2], [], [3, 4, 5, 6]], 3, PAD, torch.long)
    assert out.tolist() == [[1, 2, 0], [0, 0, 0], [3, 4, 5]]
    floats = pad_rows([[-0.5], [-1.0, -2.0]], 2, 0.0, torch.float32)
    assert floats.dtype == torch.float32 and floats.tolist() == [[-0.5, 0.0], [-1.0, -2.0]]


def test_response_mask_stops_after_first_eos_and_at_padding() -> None:
    responses = torch.tensor(
        [
            [5, 6, EOS, PAD, PAD],  # stopped at EOS: EOS included
            [5, 6, 7, 8, 4],  # ran to the length limit
            [EOS, 5, EOS, 6, 7],  # ignore_eos: everything after the first EOS is cut
            [5, PAD, PAD, PAD, PAD],  # one token generated; the pad id is not an EOS here
            [PAD, PAD, PAD, PAD, PAD],  # nothing generated
        ]
    )
    lengths = torch.tensor([3, 5, 5, 1, 0])
    mask = response_mask_through_eos(responses, lengths, [EOS])
    assert mask.tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 0, 0, 0, 0],
        [1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0],
    ]


def test_response_mask_with_several_eos_ids() -> None:
    responses = torch.tensor([[5, 11, 9, 7], [5, 6, 9, 11]])
    mask = response_mask_through_eos(responses, torch.tensor([4, 4]), {9, 11})
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]


def test_text_position_ids_continue_from_the_last_prompt_position() -> None:
    # Left-padded prompts: the last column is always the last real token.
    position_ids = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    out = extend_position_ids(position_ids, 3)
    assert out.tolist() == [[0, 0, 0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7]]


def test_mrope_position_ids_continue_from_the_largest_row() -> None:
    # Row 0 ends on text (all three rows equal); row 1 ends on an image token whose h/w rows exceed t.
    position_ids = torch.tensor(
        [
            [[0, 1, 2, 6, 7], [0, 1, 2, 6, 7], [0, 1, 2, 6, 7]],
            [[0, 1, 2, 2, 2], [0, 1, 2, 3, 3], [0, 1, 2, 3, 4]],
        ]
    )
    out = extend_position_ids(position_ids, 2)
    assert out.shape == (2, 3, 7)
    assert out[0, :, 5:].tolist() == [[8, 9]] * 3
    assert out[1, :, 5:].tolist() == [[5, 6]] * 3
    assert torch.equal(out[:, :, :5], position_ids)


def test_position_ids_of_unknown_shape_are_rejected() -> None:
    with pytest.raises(ValueError, match="position_ids must have shape"):
        extend_position_ids(torch.zeros(2, 3, 4, 5, dtype=torch.long), 2)


def test_request_seeds_are_reproducible_and_distinct() -> None:
    seeds = request_seeds(7, rank=0, call_index=0, num_requests=64)
    assert seeds == request_seeds(7, rank=0, call_index=0, num_requests=64)
    assert len(set(seeds)) == 64
    assert all(0 <= seed < 2**62 for seed in seeds)
    others = [
        request_seeds(8, 0, 0, 64),
        request_seeds(7, 1, 0, 64),
        request_seeds(7, 0, 1, 64),
    ]
    for other in others:
        assert not set(other) & set(seeds)
    assert request_seeds(7, 0, 0, 4) == seeds[:4]  # a request's seed does not depend on the batch size
    assert request_seeds(7, 0, 0, 4, stream=0) == seeds[:4]
    assert not set(request_seeds(7, 0, 0, 64, stream=1)) & set(seeds)  # validation draws from its own stream
    with pytest.raises(ValueError, match="rollout.seed=-1"):
        request_seeds(-1, 0, 0, 1)


def _config(**overrides) -> RolloutConfig:
    return dataclasses.replace(RolloutConfig(prompt_length=100, response_length=28), **overrides)


def test_cpu_engine_kwargs(monkeypatch) -> None:
    import verl.workers.rollout.vllm_rollout as vllm_rollout

    monkeypatch.setattr(vllm_rollout.dist, "is_initialized", lambda: False)  # an earlier test's group may be left
    kwargs = build_engine_kwargs("/models/x", _config(dtype="bf16"), multimodal=False)
    assert kwargs["model"] == "/models/x"
    assert kwargs["load_format"] == "dummy"
    assert kwargs["dtype"] == "float32" and kwargs["enforce_eager"] and kwargs["tensor_parallel_size"] == 1
    # an explicit tensor-parallel size is honoured on CPU too: it needs the processes' torch.distributed world
    with pytest.raises(ValueError, match=r"rollout.tensor_parallel_size=2 needs torch.distributed"):
        build_engine_kwargs("/models/x", _config(tensor_parallel_size=2), multimodal=False)
    assert kwargs["max_model_len"] == 128
    assert kwargs["kv_cache_memory_bytes"] == 256 * 2**20
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["enable_chunked_prefill"] is False  # seeded requests must not be split on CPU
    assert "limit_mm_per_prompt" not in kwargs and "enable_sleep_mode" not in kwargs
    vl = build_engine_kwargs("/models/x", _config(limit_images=3, kv_cache_memory_mb=64), multimodal=True)
    assert vl["limit_mm_per_prompt"] == {"image": 3}
    assert vl["kv_cache_memory_bytes"] == 64 * 2**20
    assert vl["mm_device_do_normalize"] is False and vl["mm_processor_cache_gb"] == 0


def test_gpu_engine_kwargs_pass_chunked_prefill_only_when_set() -> None:
    """On a GPU rollout.enable_chunked_prefill reaches vLLM as set (EasyR1's configs turn it off); unset leaves
    vLLM's default for the model (the keyword is not passed). The function reads no device."""
    from verl.workers.rollout.vllm_rollout import _gpu_kwargs

    assert "enable_chunked_prefill" not in _gpu_kwargs(_config())
    for value in (True, False):
        assert _gpu_kwargs(_config(enable_chunked_prefill=value))["enable_chunked_prefill"] is value


def test_cpu_engine_kwargs_of_a_hybrid_model(monkeypatch, tmp_path) -> None:
    """A model with Gated DeltaNet layers (Qwen3.5) gets the CPU engine settings vLLM's GDN layers need, whatever
    rollout.dtype says: bf16 and no prefix caching (vllm_compat.cpu_hybrid_engine_kwargs); a dense model keeps
    float32 and vLLM's default prefix caching; a model with Mamba mixers (Falcon-H1: `mamba_*` fields) keeps float32
    without prefix caching, whose "align" mode needs chunked prefill. The family is read from the config."""
    import json

    import verl.workers.rollout.vllm_rollout as vllm_rollout

    monkeypatch.setattr(vllm_rollout.dist, "is_initialized", lambda: False)
    layers = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    hybrid, dense, mamba = tmp_path / "hybrid", tmp_path / "dense", tmp_path / "mamba"
    hybrid.mkdir(), dense.mkdir(), mamba.mkdir()
    (mamba / "config.json").write_text(json.dumps({"model_type": "falcon_h1", "mamba_d_ssm": 1024}))
    (hybrid / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": {"layer_types": layers}}))
    (dense / "config.json").write_text(json.dumps({"model_type": "qwen3", "layer_types": ["full_attention"] * 4}))
    for dtype in ("fp32", "bf16"):
        kwargs = build_engine_kwargs(str(hybrid), _config(dtype=dtype), multimodal=True)
        assert kwargs["dtype"] == "bfloat16" and kwargs["enable_prefix_caching"] is False
        assert kwargs["enable_chunked_prefill"] is False and kwargs["enforce_eager"]
        plain = build_engine_kwargs(str(dense), _config(dtype=dtype), multimodal=False)
        assert plain["dtype"] == "float32" and "enable_prefix_caching" not in plain
        mixers = build_engine_kwargs(str(mamba), _config(dtype=dtype), multimodal=False)
        assert mixers["dtype"] == "float32" and mixers["enable_prefix_caching"] is False


def test_cpu_hybrid_engine_settings_are_what_vllm_needs() -> None:
    """The reasons behind vllm_compat.cpu_hybrid_engine_kwargs, read from the installed vLLM: its CPU Gated DeltaNet
    kernel asserts bf16, and its mamba prefix caching ("align" mode) asserts chunked prefill. A vLLM that drops either
    fails here: then the CPU engine may run hybrid models in float32, or with prefix caching."""
    import inspect

    from vllm.model_executor.layers.mamba.ops.cpu import gdn_attention
    from vllm.model_executor.models.config import MambaModelConfig

    assert 'mixed_qkv.dtype == torch.bfloat16, "CPU GDN attention requires BF16."' in inspect.getsource(
        gdn_attention.cpu_gdn_attention_core
    )
    assert "Chunked prefill is required for mamba cache mode" in inspect.getsource(MambaModelConfig)
    assert vllm_compat.cpu_hybrid_engine_kwargs() == {"dtype": "bfloat16", "enable_prefix_caching": False}


def test_lora_adapter_engine_kwargs() -> None:
    """rollout.lora_sync=adapters: vLLM's LoRA layers for one adapter, max_lora_rank the smallest rank vLLM accepts
    that holds the actor's; merged (the default) leaves LoRA off; adapters without an actor rank is refused."""
    adapters = _config(lora_sync="adapters")
    kwargs = build_engine_kwargs("/models/x", adapters, multimodal=False, lora_rank=64)
    assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"]) == (True, 64, 1)
    assert build_engine_kwargs("/models/x", adapters, multimodal=False, lora_rank=4)["max_lora_rank"] == 8
    assert build_engine_kwargs("/models/x", adapters, multimodal=False, lora_rank=300)["max_lora_rank"] == 320
    assert "enable_lora" not in build_engine_kwargs("/models/x", _config(), multimodal=False, lora_rank=64)
    with pytest.raises(ValueError, match=r"lora.rank=1024 is above the largest LoRA rank vLLM serves \(512\)"):
        build_engine_kwargs("/models/x", adapters, multimodal=False, lora_rank=1024)
    with pytest.raises(ValueError, match="lora_sync=adapters needs an actor with LoRA adapters"):
        build_engine_kwargs("/models/x", adapters, multimodal=False)


def test_engine_concurrency_is_vllms_device_default_unless_set() -> None:
    """Unset, max_num_seqs is left to vLLM (1024 on an H100/H200: a 64 x 8 rollout runs in one wave; a fixed 256 made
    it two and generation 0.56x bare vLLM on an H200); set, it is passed as given."""
    from vllm.engine.arg_utils import EngineArgs

    assert "max_num_seqs" not in build_engine_kwargs("/models/x", _config(), multimodal=False)
    assert EngineArgs.max_num_seqs is None  # vLLM fills in its own default per device
    assert build_engine_kwargs("/models/x", _config(max_num_seqs=64), multimodal=False)["max_num_seqs"] == 64


def test_max_num_batched_tokens_below_vllms_default_max_num_seqs_starts(tmp_path) -> None:
    """worker.rollout.max_num_batched_tokens=128, below vLLM's default max_num_seqs (256 on the CPU, 1024 on an H100):
    with max_num_seqs unset, vLLM 0.32 lowers its default to max_num_batched_tokens (EngineArgs.
    _set_default_max_num_seqs_and_batched_tokens_args) before SchedulerConfig compares the two, so the engine's
    config is built; validation refuses the pair only when both are set."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", str(tmp_path))
    kwargs = build_engine_kwargs(model, _config(max_num_batched_tokens=128), multimodal=False)
    scheduler = EngineArgs(**kwargs).create_engine_config(UsageContext.LLM_CLASS).scheduler_config
    assert scheduler.max_num_batched_tokens == 128 and scheduler.max_num_seqs == 128


def test_engine_kwargs_are_arguments_of_the_installed_vllm() -> None:
    """Every argument the rollout passes exists in this vLLM; one that only newer releases have is left out on older
    ones (mm_device_do_normalize: 0.27 and later; the GPU image of older clusters has 0.26)."""
    from vllm.engine.arg_utils import EngineArgs

    from verl.workers.rollout import vllm_compat

    assert vllm_compat.engine_accepts("mm_device_do_normalize") and not vllm_compat.engine_accepts("no_such_arg")
    arguments = {item.name for item in dataclasses.fields(EngineArgs)}
    for multimodal in (False, True):
        kwargs = build_engine_kwargs("/models/x", _config(limit_images=2), multimodal=multimodal)
        assert set(kwargs) <= arguments, set(kwargs) - arguments
    kwargs = build_engine_kwargs("/models/x", _config(lora_sync="adapters"), multimodal=False, lora_rank=8)
    assert set(kwargs) <= arguments, set(kwargs) - arguments


def test_the_sampling_fields_read_from_vllms_source_are_its_sampling_params_fields() -> None:
    """rollout.val_override_config's keys are checked against vLLM's source when the config loads (importing vLLM
    there costs ~4 s and ~330 MB): the names read must be the class's own."""
    from vllm import SamplingParams

    public = {name for name in SamplingParams.__struct_fields__ if not name.startswith("_")}
    assert vllm_compat.sampling_param_names() == public and {"temperature", "min_p", "n"} <= public


@pytest.mark.parametrize("key", sorted(OVERRIDE_VALUE_RULES))
def test_the_override_values_refused_at_load_are_the_ones_vllm_refuses(key) -> None:
    """rollout.val_override_config's values are checked when the config loads, without vLLM: each rule must agree
    with this vLLM's SamplingParams on values either side of its limits."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    accepts = OVERRIDE_VALUE_RULES[key][0]
    values = {
        "n": [1, 3, 0, -1],
        "min_p": [0.0, 1, 0.5, -0.1, 1.5],
        "presence_penalty": [-2, 2.0, 0.3, -2.5, 2.1],
        "frequency_penalty": [-2, 2.0, 0.3, -2.5, 2.1],
        "repetition_penalty": [0.5, 1.2, 0.0, -1.0, float("inf")],
        "min_tokens": [0, 4, -1],
        "seed": [None, 0, 12345],
        "stop_token_ids": [[], [1, 2], [1.5]],
        "logprobs": [None, 0, 20, 21, -1, -2],
        "prompt_logprobs": [None, 0, 20, 21, -1, -2],
    }[key]
    # the engine refuses more log-probs than its max_logprobs (-1: the whole vocabulary), which the rollout leaves at
    # vLLM's default; SamplingParams alone takes them
    from vllm.config import ModelConfig

    field = ModelConfig.__dataclass_fields__["max_logprobs"].default  # pydantic's FieldInfo, or the value
    most = getattr(field, "default", field)
    assert most == 20
    for value in values:
        try:
            SamplingParams(**{key: value}, max_tokens=8, detokenize=False)
            vllm_accepts = not (key.endswith("logprobs") and value is not None and (value == -1 or value > most))
        except (ValueError, TypeError, VLLMValidationError):
            vllm_accepts = False
        assert accepts(value) == vllm_accepts, (key, value)
    assert set(OVERRIDE_VALUE_RULES) <= vllm_compat.sampling_param_names()


def test_vllm_refuses_text_stops_without_detokenizing() -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="stop"):
        SamplingParams(stop=["\\n"], detokenize=False)
    assert DETOKENIZED_KEYS <= vllm_compat.sampling_param_names()


def test_the_chat_renderer_the_server_uses_is_there() -> None:
    """verl.serve renders requests with LLM._preprocess_chat_one (vllm_compat.render_chat): private, so checked."""
    import inspect

    from vllm import LLM

    parameters = inspect.signature(LLM._preprocess_chat_one).parameters
    assert list(parameters)[:2] == ["self", "conversation"]
    assert {"tools", "chat_template_kwargs"} <= set(parameters)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"response_length": -1}, "response_length=-1"),
        ({"max_model_len": 64}, "max_model_len=64"),
        ({"dtype": "int8"}, "rollout.dtype='int8'"),
        ({"max_num_batched_tokens": 100}, "max_num_batched_tokens=100"),
    ],
)
def test_engine_kwargs_reject_impossible_settings(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_engine_kwargs("/models/x", _config(**overrides), multimodal=False)


@pytest.mark.parametrize("kind", ["qwen2", "qwen2_5_vl"])
def test_checkpoint_names_match_the_saved_checkpoint(kind: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The names the sync sends are exactly the keys vLLM reads from disk (transformers 5 renames VL modules)."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.workers.weight_sync.gather import checkpoint_names

    model_dir = get_or_build_tiny_model(kind, str(tmp_path_factory.mktemp("names")))
    model_class = AutoModelForImageTextToText if kind != "qwen2" else AutoModelForCausalLM
    model = model_class.from_pretrained(model_dir)
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
        saved = set(f.keys())
    names = checkpoint_names(model)
    # Every parameter, tied ones under each name (lm_head shares the embedding and is not saved).
    assert set(names) == {name for name, _ in model.named_parameters(remove_duplicate=False)}
    assert set(names.values()) - saved == {"lm_head.weight"}
    assert saved <= set(names.values())
    if kind != "qwen2":
        assert names["model.language_model.layers.0.mlp.up_proj.weight"] == "model.layers.0.mlp.up_proj.weight"
        assert names["model.visual.blocks.0.attn.qkv.weight"] == "visual.blocks.0.attn.qkv.weight"


def test_only_the_reload_warning_of_layers_with_computed_tensors_alone_is_silenced() -> None:
    import logging

    class Rotary(torch.nn.Module):  # as vLLM's rotary layers and Gemma's models: computed buffers of their own
        def __init__(self, persistent: bool = False) -> None:
            super().__init__()
            self.register_buffer("cos_sin_cache", torch.ones(4), persistent=persistent)

    class Scaled(Rotary):  # a buffer a checkpoint holds (as Gemma 4's layer_scalar)
        def __init__(self) -> None:
            super().__init__(persistent=True)

    model = torch.nn.Sequential(Rotary(), torch.nn.Linear(2, 2), Scaled())
    vllm_compat.quiet_computed_layers(model)
    vllm_compat.quiet_computed_layers(model)  # one filter, whatever the number of reloads
    reload_logger = logging.getLogger(vllm_compat.RELOAD_LOGGER)
    (flt,) = [f for f in reload_logger.filters if isinstance(f, vllm_compat._ComputedLayerFilter)]

    def record(layer: str) -> logging.LogRecord:
        return logging.LogRecord("x", logging.WARNING, __file__, 1, "%s: Failed to load weights", (layer,), None)

    assert not flt.filter(record("Rotary")) and not flt.filter(record("Sequential"))
    assert flt.filter(record("Linear")) and flt.filter(record("Scaled"))  # a tensor that did not arrive still shows
    assert flt.filter(logging.LogRecord("x", logging.WARNING, __file__, 1, "Rotary: another message", (), None))
