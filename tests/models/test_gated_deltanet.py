# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5's and Qwen3-Next's Gated DeltaNet layers on packed rows (verl.models.gated_deltanet) against separate
forwards.

A packed row is built as the trainer builds it (verl.workers.actor.forward): the sequences' tokens in one row, text
positions restarting at 0 (mrope: the same positions in all four rows of a text-only (4, 1, T) tensor), the
boundaries as `cu_seq_lens_q/k`, no attention mask, "varlen" attention for the full-attention layers (Qwen3-Next, a
text model: 1-D positions).
"""

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: 2 threads on a shared 2-core box are 3-5x slower

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

from verl.models import gated_deltanet, ulysses
from verl.models.gated_deltanet import (
    PackedGatedDeltaNet,
    linear_attention_is_exact,
    packed_linear_attention_layers,
    use_packed_linear_attention,
)
from verl.models.packed_attention import PACKED_ATTENTION, packed_sequence_kwargs, register_packed_attention
from verl.models.tiny_models import get_or_build_tiny_model


VOCAB = 2000  # ids below the tiny tokenizer's special tokens
LENGTHS = [7, 70, 20]  # the second spans two of the recurrence's 64-token chunks
EXACT = 5e-5  # fp32 logits: packed vs separate differ by ~1e-5 at most (summation order)
LEAK = 1.0  # the stock layer on a packed row: the sequences after the first are off by several logits


@pytest.fixture(scope="module")
def model_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("tiny_models"))


def _load(path: str) -> torch.nn.Module:
    register_packed_attention()
    model_class = AutoModelForCausalLM if "qwen3_next" in path else AutoModelForImageTextToText
    return model_class.from_pretrained(path, attn_implementation=PACKED_ATTENTION).float().eval()


def _sequences(lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=generator) for n in lengths]


def _packed_logits(model: torch.nn.Module, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
    lengths = [len(s) for s in sequences]
    positions = torch.cat([torch.arange(n) for n in lengths]).view(1, 1, -1)
    if model.config.model_type != "qwen3_next":  # mrope: the text positions in all four rows
        positions = positions.expand(4, 1, -1)
    else:
        positions = positions[0]
    logits = model(
        input_ids=torch.cat(sequences)[None],
        position_ids=positions,
        use_cache=False,
        **packed_sequence_kwargs(lengths),
    ).logits[0]
    return list(logits.split(lengths))


def _separate_logits(model: torch.nn.Module, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
    return [model(input_ids=s[None], use_cache=False).logits[0] for s in sequences]


def _gaps(first: list[torch.Tensor], second: list[torch.Tensor]) -> list[float]:
    return [(a - b).abs().max().item() for a, b in zip(first, second)]


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe", "qwen3_next"])
def test_packed_forward_equals_separate_forwards(model_root: str, kind: str) -> None:
    model = _load(get_or_build_tiny_model(kind, model_root))
    sequences = _sequences(LENGTHS)
    with torch.no_grad():
        separate = _separate_logits(model, sequences)
        stock = _gaps(_packed_logits(model, sequences), separate)
        assert use_packed_linear_attention(model) == 3  # layers 0-2 are Gated DeltaNet, layer 3 full attention
        fixed = _gaps(_packed_logits(model, sequences), separate)
        assert _gaps(_separate_logits(model, sequences), separate) == [0.0] * len(LENGTHS)  # unpacked: stock path
    assert stock[0] <= EXACT and min(stock[1:]) > LEAK, f"the stock layer should leak across boundaries: {stock}"
    assert max(fixed) <= EXACT, f"packed vs separate logits, per sequence: {fixed} (stock layer: {stock})"


def _image(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8))


def test_packed_forward_with_images_equals_separate_forwards(model_root: str) -> None:
    """Image and text-only prompts in one row: mrope positions from the model's own get_rope_index per sequence, the
    text positions restarting, the images' features scattered into the packed row."""
    path = get_or_build_tiny_model("qwen3_5", model_root)
    model, processor = _load(path), AutoProcessor.from_pretrained(path)
    samples = [("A picture", _image(64, 96, 0)), ("Only words, no picture at all", None), ("More", _image(128, 64, 1))]
    inputs = []
    for text, image in samples:
        content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs.append(processor(text=[prompt], images=[image] if image else None, return_tensors="pt"))
    lengths = [x["input_ids"].shape[1] for x in inputs]
    rope = [
        model.model.get_rope_index(x["input_ids"], x["mm_token_type_ids"], x.get("image_grid_thw"))[0] for x in inputs
    ]
    text_positions = torch.cat([torch.arange(n) for n in lengths]).view(1, 1, -1)
    with_images = [x for x in inputs if "pixel_values" in x]
    packed_inputs = {
        "input_ids": torch.cat([x["input_ids"][0] for x in inputs])[None],
        "position_ids": torch.cat([text_positions, torch.cat(rope, dim=-1)]),  # (4, 1, T)
        "pixel_values": torch.cat([x["pixel_values"] for x in with_images]),
        "image_grid_thw": torch.cat([x["image_grid_thw"] for x in with_images]),
        **packed_sequence_kwargs(lengths),
    }
    use_packed_linear_attention(model)
    with torch.no_grad():
        separate = [model(input_ids=x["input_ids"], **_image_inputs(x), use_cache=False).logits[0] for x in inputs]
        packed = model(**packed_inputs, use_cache=False).logits[0]
    gaps = _gaps(list(packed.split(lengths)), separate)
    assert max(gaps) <= EXACT, f"packed vs separate logits, per sequence: {gaps}"


def _image_inputs(inputs: dict) -> dict:
    return {key: inputs[key] for key in ("pixel_values", "image_grid_thw", "mm_token_type_ids") if key in inputs}


def test_packed_gradients_equal_separate_gradients(model_root: str) -> None:
    model = _load(get_or_build_tiny_model("qwen3_5", model_root))
    use_packed_linear_attention(model)
    sequences = _sequences([5, 33, 12], seed=1)
    weights = torch.randn(sum(len(s) for s in sequences), generator=torch.Generator().manual_seed(2))

    def grads(logits: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        (torch.cat(logits).logsumexp(-1) * weights).sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    packed, separate = grads(_packed_logits(model, sequences)), grads(_separate_logits(model, sequences))
    assert packed.keys() == separate.keys() and any("linear_attn.A_log" in name for name in packed)
    for name, grad in packed.items():
        scale = separate[name].abs().max().item() + 1e-6  # fp32 summation order: 1.6e-4 of it measured (AVX2)
        assert (grad - separate[name]).abs().max().item() <= 1e-3 * scale, name


def test_padded_batches_and_single_sequences_run_the_stock_forward(model_root: str) -> None:
    path = get_or_build_tiny_model("qwen3_5", model_root)
    stock, packed = _load(path), _load(path)
    use_packed_linear_attention(packed)
    input_ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0  # left padding
    with torch.no_grad():
        for kwargs in ({"attention_mask": attention_mask}, {}):
            expected = stock(input_ids=input_ids, use_cache=False, **kwargs).logits
            assert torch.equal(packed(input_ids=input_ids, use_cache=False, **kwargs).logits, expected)
        one = [input_ids[1]]
        assert torch.allclose(_packed_logits(packed, one)[0], _separate_logits(stock, one)[0], atol=EXACT)


def test_conversion_keeps_the_weights_and_marks_the_model_exact(model_root: str) -> None:
    model = _load(get_or_build_tiny_model("qwen3_5", model_root))
    before = {name: tensor.data_ptr() for name, tensor in model.state_dict().items()}
    assert not linear_attention_is_exact(model) and packed_linear_attention_layers(model) == 0
    assert use_packed_linear_attention(model) == 3
    assert use_packed_linear_attention(model) == 0  # idempotent
    assert linear_attention_is_exact(model) and packed_linear_attention_layers(model) == 3
    after = model.state_dict()
    assert {name: tensor.data_ptr() for name, tensor in after.items()} == before  # the same keys and storage
    layer = model.model.language_model.layers[0].linear_attn
    assert isinstance(layer, PackedGatedDeltaNet) and type(layer).__name__ == "PackedQwen3_5GatedDeltaNet"
    assert type(layer).__mro__[2].__name__ == "Qwen3_5GatedDeltaNet"  # the stock class, still an isinstance


def test_packing_is_exact_needs_the_packed_linear_attention(model_root: str) -> None:
    from verl.workers.actor.forward import packing_is_exact, packing_obstacle

    model = _load(get_or_build_tiny_model("qwen3_5", model_root))
    assert not packing_is_exact(model)  # varlen attention alone: the Gated DeltaNet layers would leak
    assert "token mixers that carry state along the row" in packing_obstacle(model)  # the reason the actor logs
    use_packed_linear_attention(model)
    assert packing_is_exact(model) and packing_obstacle(model) == ""
    model.config._attn_implementation = "sdpa"
    assert packing_obstacle(model).startswith("attention 'sdpa' has no varlen kernel for packed sequences")


def test_bad_boundaries_and_sequence_parallelism_are_refused(model_root: str, monkeypatch) -> None:
    model = _load(get_or_build_tiny_model("qwen3_5", model_root))
    use_packed_linear_attention(model)
    ids = torch.randint(0, VOCAB, (1, 10))
    with pytest.raises(ValueError, match="cu_seq_lens_q=.*packed_sequence_kwargs"):
        model(input_ids=ids, use_cache=False, **packed_sequence_kwargs([4, 4]))
    with pytest.raises(
        ValueError, match=r"actor.ulysses_size=2: the model has linear_attention layers. Ulysses .* Gated DeltaNet"
    ):
        ulysses.check_split(model, 2, padding_free=True, role="actor")  # the worker's check, for hub ids
    monkeypatch.setattr(ulysses, "_GROUP", object())  # as inside ulysses.sequence_parallel(group)
    with pytest.raises(NotImplementedError, match="Ulysses.*ulysses_size=1"):
        model.model.language_model.layers[0].linear_attn(
            torch.zeros(1, 10, model.config.text_config.hidden_size), **packed_sequence_kwargs([4, 6])
        )


def test_sequence_index_marks_each_tokens_sequence() -> None:
    cu_seqlens = torch.tensor([0, 3, 3, 5, 8])  # an empty third sequence
    assert gated_deltanet._sequence_index(cu_seqlens, 8).tolist() == [[0, 0, 0, 2, 2, 3, 3, 3]]


@pytest.mark.skipif(
    not (torch.cuda.is_available() and gated_deltanet._varlen_kernels_installed()),
    reason="needs CUDA with flash-linear-attention and causal-conv1d",
)
def test_cuda_kernels_with_boundaries_equal_the_padded_batch(model_root: str) -> None:
    model = _load(get_or_build_tiny_model("qwen3_5", model_root)).to("cuda", torch.bfloat16)
    use_packed_linear_attention(model)
    layer = model.model.language_model.layers[0].linear_attn
    hidden = torch.randn(1, sum(LENGTHS), model.config.text_config.hidden_size, device="cuda", dtype=torch.bfloat16)
    kwargs = packed_sequence_kwargs(torch.tensor(LENGTHS, device="cuda"))
    with torch.no_grad():
        kernels = layer(hidden, **kwargs).float()
        padded = layer._padded_forward(hidden, kwargs["cu_seq_lens_q"], kwargs).float()
    assert (kernels - padded).abs().max().item() <= 2e-2 * padded.abs().max().item()


@pytest.mark.parametrize("family", ["Lfm2", "FalconH1", "Bamba"])
def test_a_mixer_with_a_convolution_along_the_row_is_not_packed(family: str) -> None:
    """LFM2's short convolutions and Falcon-H1's and Bamba's Mamba mixers (named as neither) carry state along the
    row: packed, the sequences after the first are off, so the trainer runs such a model on padded rows."""
    import transformers

    from verl.workers.actor.forward import packing_is_exact

    register_packed_attention()
    sizes = {"vocab_size": 2048, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
    sizes.update(num_key_value_heads=2, intermediate_size=256, initializer_range=0.08)
    extra = {
        "Lfm2": {"layer_types": ["conv", "full_attention"], "block_ff_dim": 256},
        "FalconH1": {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_chunk_size": 16},
        "Bamba": {"mamba_n_heads": 8, "mamba_d_head": 32, "mamba_chunk_size": 16, "attn_layer_indices": [1]},
    }[family]
    config = getattr(transformers, f"{family}Config")(**sizes, **extra)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = getattr(transformers, f"{family}ForCausalLM")(config).float().eval()
    model.config._attn_implementation = PACKED_ATTENTION
    assert not packing_is_exact(model)
    sequences = _sequences([7, 40, 20])
    with torch.no_grad():
        lengths = [len(s) for s in sequences]
        positions = torch.cat([torch.arange(n) for n in lengths])[None]
        kwargs = packed_sequence_kwargs(lengths)
        packed = model(input_ids=torch.cat(sequences)[None], position_ids=positions, use_cache=False, **kwargs)
        gaps = _gaps(list(packed.logits[0].split(lengths)), _separate_logits(model, sequences))
    assert gaps[0] <= EXACT and min(gaps[1:]) > 0.05, gaps  # what packing would have trained on
