# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The "varlen" attention on packed rows against "sdpa" on the same sequences padded, on tiny Qwen2 and Qwen2.5-VL.

Packed rows are built as the trainer builds them (verl.workers.actor.forward): the valid tokens of every row in one
row, text positions restarting at 0, for mrope a (4, 1, T) tensor with the text positions first, no attention mask.
"""

import os
from types import SimpleNamespace


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: 2 threads on a shared 2-core box are 3-5x slower

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from families import vl_kinds
from PIL import Image
from transformers import (
    AttentionInterface,
    AttentionMaskInterface,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
)
from transformers.masking_utils import create_causal_mask

from verl.data.multimodal import process_media
from verl.models import packed_attention
from verl.models.packed_attention import (
    PACKED_ATTENTION,
    packed_attention_forward,
    packed_attention_mask,
    packed_sequence_kwargs,
    register_packed_attention,
)
from verl.models.tiny_models import get_or_build_tiny_model
from verl.utils.torch_functional import positions_from_mask, unpad_input


VOCAB = 2000  # ids below the tiny tokenizer's special tokens
LENGTH_SETS = ([7], [5, 9, 3], [1, 12, 2, 6])


@pytest.fixture(scope="module")
def model_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("tiny_models"))


def _load(path: str, attn_implementation: str, auto_class: type = AutoModelForCausalLM) -> torch.nn.Module:
    return auto_class.from_pretrained(path, attn_implementation=attn_implementation, dtype=torch.float32).eval()


@pytest.fixture
def packed_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the token count of every call that took the per-sequence path, so a test can tell it ran (a dense
    mask handed to sdpa would give the same numbers)."""
    calls = []
    per_sequence = packed_attention._per_sequence_forward

    def spy(query: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        calls.append(query.shape[2])
        return per_sequence(query, *args, **kwargs)

    monkeypatch.setattr(packed_attention, "_per_sequence_forward", spy)
    return calls


@pytest.fixture(scope="module")
def text_models(model_root: str) -> dict[str, torch.nn.Module]:
    path = get_or_build_tiny_model("qwen2", model_root)
    return {name: _load(path, name) for name in (PACKED_ATTENTION, "sdpa")}


# ---------------------------------------------------------------------------------------------- batches


def _padded_rows(lengths: list[int], seed: int, left_pad: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with padding on both sides (left-padded prompt, right-padded response, as the rollout returns them)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths) + left_pad
    input_ids = torch.full((len(lengths), width), 2048, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        start = row % (left_pad + 1)
        input_ids[row, start : start + length] = torch.randint(0, VOCAB, (length,), generator=generator)
        attention_mask[row, start : start + length] = 1
    return input_ids, attention_mask


def _pack(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed ids (1, T), text positions restarting at 0 (1, T), flat indices of the valid tokens)."""
    indices = unpad_input(attention_mask)
    positions = positions_from_mask(attention_mask).reshape(-1)[indices]
    return input_ids.reshape(-1)[indices].unsqueeze(0), positions.unsqueeze(0), indices


def _next_token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) inside every sequence of a packed (T, V) / (T,) pair, concatenated."""
    log_probs = []
    start = 0
    for length in lengths:
        seq_logits, seq_tokens = logits[start : start + length - 1], tokens[start + 1 : start + length]
        log_probs.append(torch.log_softmax(seq_logits.float(), dim=-1).gather(-1, seq_tokens[:, None])[:, 0])
        start += length
    return torch.cat(log_probs)


def _padded_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, **extra):
    """Reference: the padded forward, valid tokens gathered in row-major (= packed) order."""
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=extra.pop("position_ids", positions_from_mask(attention_mask)),
        use_cache=False,
        **extra,
    ).logits
    valid = attention_mask.bool()
    return _next_token_log_probs(logits[valid], input_ids[valid], attention_mask.sum(-1).tolist())


def _packed_log_probs(model, input_ids, attention_mask, with_kwargs: bool, position_ids=None, **extra):
    packed_ids, positions, _ = _pack(input_ids, attention_mask)
    lengths = attention_mask.sum(-1)
    kwargs = packed_sequence_kwargs(lengths) if with_kwargs else {}
    logits = model(
        input_ids=packed_ids,
        position_ids=positions if position_ids is None else position_ids,
        use_cache=False,
        **kwargs,
        **extra,
    ).logits[0]
    return _next_token_log_probs(logits, packed_ids[0], lengths.tolist())


# ---------------------------------------------------------------------------------------------- text model


def test_registered_under_its_name_and_idempotent() -> None:
    register_packed_attention()
    register_packed_attention()
    assert AttentionInterface()[PACKED_ATTENTION] is packed_attention_forward
    assert AttentionMaskInterface()[PACKED_ATTENTION] is packed_attention_mask


@pytest.mark.parametrize("with_kwargs", [False, True], ids=["from_position_ids", "cu_seq_lens_kwargs"])
@pytest.mark.parametrize("lengths", LENGTH_SETS, ids=lambda lengths: "-".join(map(str, lengths)))
def test_packed_forward_equals_padded_sdpa(
    text_models, packed_calls: list[int], lengths: list[int], with_kwargs: bool
) -> None:
    config = text_models[PACKED_ATTENTION].config
    assert config.num_key_value_heads < config.num_attention_heads  # grouped-query attention is exercised
    input_ids, attention_mask = _padded_rows(lengths, seed=len(lengths))
    with torch.no_grad():
        reference = _padded_log_probs(text_models["sdpa"], input_ids, attention_mask)
        packed = _packed_log_probs(text_models[PACKED_ATTENTION], input_ids, attention_mask, with_kwargs)
    assert packed.shape == reference.shape == (sum(lengths) - len(lengths),)
    assert (packed - reference).abs().max() < 1e-5
    # every layer ran per sequence, except a single sequence without kwargs: plain causal sdpa, no packing to see
    expected_calls = 0 if len(lengths) == 1 and not with_kwargs else config.num_hidden_layers
    assert packed_calls == [sum(lengths)] * expected_calls


def test_packing_without_restarting_positions_differs(text_models) -> None:
    """The check above can fail: positions running on across sequences make one long sequence, not three."""
    lengths = [5, 9, 3]
    input_ids, attention_mask = _padded_rows(lengths, seed=3)
    running = torch.arange(sum(lengths)).unsqueeze(0)
    with torch.no_grad():
        reference = _padded_log_probs(text_models["sdpa"], input_ids, attention_mask)
        wrong = _packed_log_probs(text_models[PACKED_ATTENTION], input_ids, attention_mask, False, running)
    assert (wrong - reference).abs().max() > 1e-2


def test_packed_backward_equals_padded(text_models) -> None:
    lengths = [5, 9, 3, 6]
    input_ids, attention_mask = _padded_rows(lengths, seed=7)
    weights = torch.randn(sum(lengths) - len(lengths), generator=torch.Generator().manual_seed(0))
    grads = {}
    for name, model in text_models.items():
        model.zero_grad(set_to_none=True)
        if name == "sdpa":
            log_probs = _padded_log_probs(model, input_ids, attention_mask)
        else:
            log_probs = _packed_log_probs(model, input_ids, attention_mask, with_kwargs=True)
        (log_probs * weights).sum().backward()
        attention = model.model.layers[0].self_attn
        grads[name] = [attention.q_proj.weight.grad, attention.k_proj.weight.grad, attention.v_proj.weight.grad]
        model.zero_grad(set_to_none=True)
    for packed, padded in zip(grads[PACKED_ATTENTION], grads["sdpa"]):
        assert padded.norm() > 0
        assert (packed - padded).norm() / padded.norm() < 1e-5


def test_padded_batch_through_varlen_is_exactly_sdpa(text_models) -> None:
    """With a padding mask (and without padding) "varlen" is transformers' sdpa, bit for bit."""
    input_ids, attention_mask = _padded_rows([5, 9, 3], seed=11)
    full_mask = torch.ones_like(attention_mask)
    with torch.no_grad():
        for mask in (attention_mask, full_mask):
            outputs = [
                model(
                    input_ids=input_ids, attention_mask=mask, position_ids=positions_from_mask(mask), use_cache=False
                )
                for model in (text_models[PACKED_ATTENTION], text_models["sdpa"])
            ]
            assert torch.equal(outputs[0].logits, outputs[1].logits)


def test_packed_row_gets_no_dense_mask(text_models) -> None:
    """transformers' sdpa builds a (1, 1, T, T) block-diagonal mask for a packed row; varlen builds none."""
    positions = torch.cat([torch.arange(n) for n in (300, 500, 200)]).unsqueeze(0)
    embeds = torch.zeros(1, positions.shape[1], 8)
    masks = {}
    for name in (PACKED_ATTENTION, "sdpa"):
        config = text_models[name].config
        masks[name] = create_causal_mask(config, embeds, None, past_key_values=None, position_ids=positions)
    assert masks[PACKED_ATTENTION] is None
    assert masks["sdpa"].shape == (1, 1, 1000, 1000)
    # A padded batch gets sdpa's mask unchanged.
    padding = torch.ones(2, 1000, dtype=torch.long)
    padding[1, :10] = 0
    padded = {
        name: create_causal_mask(text_models[name].config, embeds.expand(2, -1, -1), padding, past_key_values=None)
        for name in (PACKED_ATTENTION, "sdpa")
    }
    assert torch.equal(padded[PACKED_ATTENTION], padded["sdpa"])


# ---------------------------------------------------------------------------------------------- the attention function


def _qkv(total: int, heads: int = 4, kv_heads: int = 2, head_dim: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(1, n, total, head_dim, generator=generator) for n in (heads, kv_heads, kv_heads)]


class _Attention(torch.nn.Module):
    """The attributes transformers' attention functions read from the calling module."""

    def __init__(self, is_causal: bool = True, groups: int = 2) -> None:
        super().__init__()
        self.is_causal = is_causal
        self.num_key_value_groups = groups


def test_attention_function_equals_per_sequence_sdpa_and_skips_empty_sequences() -> None:
    lengths = [4, 0, 7, 1]
    query, key, value = _qkv(sum(lengths))
    out, weights = packed_attention_forward(
        _Attention(), query, key, value, None, scaling=0.3, **packed_sequence_kwargs(lengths)
    )
    assert weights is None and out.shape == (1, sum(lengths), 4, 16)
    start = 0
    for length in lengths:
        part = slice(start, start + length)
        expected = F.scaled_dot_product_attention(
            query[:, :, part], key[:, :, part], value[:, :, part], is_causal=True, scale=0.3, enable_gqa=True
        )
        torch.testing.assert_close(out[:, part], expected.transpose(1, 2), rtol=0, atol=1e-6)
        start += length


def test_non_causal_call_ignores_text_boundaries() -> None:
    """The Qwen2.5-VL vision tower calls with is_causal=False, once per image; with a transformers that forwards the
    text's kwargs to it, the text's boundaries must not split the image."""
    query, key, value = _qkv(10, kv_heads=4)
    module = _Attention(is_causal=False, groups=1)
    out, _ = packed_attention_forward(
        module, query, key, value, None, is_causal=False, **packed_sequence_kwargs([3, 7])
    )
    expected = F.scaled_dot_product_attention(query, key, value).transpose(1, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_sequence_parallelism_refuses_a_row_it_cannot_split(monkeypatch) -> None:
    """Under Ulysses a layer with a sliding window (or a mask) fell back to sdpa over the exchanged row, with a mask
    built for one rank's slice: wrong log-probs, silently (or a shape error). It is refused; packed rows still run."""
    from transformers import MistralConfig

    from verl.models import ulysses

    monkeypatch.setattr(ulysses, "_GROUP", object())  # as inside ulysses.sequence_parallel(group) ...
    monkeypatch.setattr(ulysses, "exchange", lambda tensor, group: tensor)  # ... of one rank
    query, key, value = _qkv(10)
    with pytest.raises(NotImplementedError, match="_Attention got a sliding window; set ulysses_size=1"):
        packed_attention_forward(
            _Attention(), query, key, value, None, sliding_window=4, **packed_sequence_kwargs([4, 6])
        )
    out, _ = packed_attention_forward(_Attention(), query, key, value, None, **packed_sequence_kwargs([4, 6]))
    assert out.shape == (1, 10, 4, 16)
    with pytest.raises(ValueError, match="actor.ulysses_size=2: the model has sliding-window layers"):
        ulysses.check_split(SimpleNamespace(config=MistralConfig()), 2, padding_free=True, role="actor")


def test_bad_boundaries_name_the_key() -> None:
    query, key, value = _qkv(10)
    with pytest.raises(ValueError, match=r"cu_seq_lens_q=\[0, 3, 8\] does not split the packed row of 10 tokens"):
        packed_attention_forward(_Attention(), query, key, value, None, **packed_sequence_kwargs([3, 5]))
    with pytest.raises(ValueError, match="lengths must be a 1-D integer tensor"):
        packed_sequence_kwargs(torch.ones(2, 3, dtype=torch.long))


def test_packed_sequence_kwargs() -> None:
    kwargs = packed_sequence_kwargs(torch.tensor([3, 0, 5]))
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 3, 3, 8] and kwargs["cu_seq_lens_q"].dtype == torch.int32
    assert kwargs["cu_seq_lens_k"] is kwargs["cu_seq_lens_q"]
    assert kwargs["max_length_q"] == kwargs["max_length_k"] == 5


def test_cuda_branch_glue_with_a_stand_in_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA branch cannot run here: check what it hands torch's varlen_attn (a CPU stand-in with its signature)
    and what it makes of the answer. The kernel itself is checked in tests/gpu/test_packed_attention_gpu.py."""
    from torch.nn.attention import varlen

    assert not packed_attention._can_use_varlen(torch.zeros(1, 4, 8, 16, dtype=torch.bfloat16))  # CPU: guarded
    assert {"scale", "window_size", "enable_gqa"} <= packed_attention._varlen_parameters()  # this torch's keywords
    seen = {}

    def stand_in(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False):
        seen.update(cu=cu_seq_q.tolist(), dtype=cu_seq_q.dtype, max=(max_q, max_k), window=window_size, gqa=enable_gqa)
        bounds = cu_seq_q.tolist()
        parts = [
            F.scaled_dot_product_attention(
                *(t[a:b].transpose(0, 1) for t in (q, k, v)), is_causal=True, scale=scale, enable_gqa=enable_gqa
            ).transpose(0, 1)
            for a, b in zip(bounds[:-1], bounds[1:])
        ]
        return torch.cat(parts)

    monkeypatch.setattr(varlen, "varlen_attn", stand_in)
    monkeypatch.setattr(packed_attention, "_can_use_varlen", lambda query: True)
    lengths = [4, 7, 1]
    query, key, value = _qkv(sum(lengths))
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    expected = packed_attention._per_sequence_forward(query, key, value, *[torch.tensor([0, 4, 11, 12])] * 2, 0.0, 0.3)
    for kwargs in (packed_sequence_kwargs(torch.tensor(lengths)), {"position_ids": positions}):
        seen.clear()
        out, _ = packed_attention_forward(_Attention(), query, key, value, None, scaling=0.3, **kwargs)
        assert seen == {"cu": [0, 4, 11, 12], "dtype": torch.int32, "max": (7, 7), "window": (-1, 0), "gqa": True}
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------- Qwen2.5-VL


def _vl_batch(model: torch.nn.Module, processor, response_len: int = 6):
    """Three rollout rows (two with an image of different sizes, one text-only): left-padded prompts, right-padded
    responses, positions from the model's own get_rope_index (mrope (3, B, L)) or 0, 1, 2, ... (1-D rope, (B, L)),
    and the images' model inputs as the trainer makes them."""
    rng = np.random.default_rng(0)
    rows, images = [], []
    for row, size in enumerate([(56, 84), None, (84, 56)]):
        content = [{"type": "text", "text": "count the circles"}]
        if size is not None:
            images.append(Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)))
            content = [{"type": "image"}, {"type": "text", "text": "what color"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False)
        prompt = processor(
            text=[text], images=[images[-1]] if size else None, add_special_tokens=False, return_tensors="pt"
        )["input_ids"][0]
        response = torch.from_numpy(rng.integers(16, VOCAB, response_len - row))  # above every special token
        rows.append((prompt, response))
    prompt_len = max(len(prompt) for prompt, _ in rows) + 2
    input_ids = torch.full((3, prompt_len + response_len), processor.tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, (prompt, response) in enumerate(rows):
        input_ids[row, prompt_len - len(prompt) : prompt_len + len(response)] = torch.cat([prompt, response])
        attention_mask[row, prompt_len - len(prompt) : prompt_len + len(response)] = 1
    vision = process_media({"images": images}, processor)
    if not hasattr(model.model, "get_rope_index"):
        return input_ids, attention_mask, positions_from_mask(attention_mask), vision
    mm_token_type_ids = (input_ids == model.config.image_token_id).int()
    position_ids, _ = model.model.get_rope_index(
        input_ids, mm_token_type_ids, vision["image_grid_thw"], attention_mask=attention_mask
    )
    return input_ids, attention_mask, position_ids, vision


@pytest.mark.parametrize("kind", vl_kinds("packed"))
def test_vl_packed_forward_equals_padded_sdpa(model_root: str, packed_calls: list[int], kind: str) -> None:
    path = get_or_build_tiny_model(kind, model_root)
    processor = AutoProcessor.from_pretrained(path)
    models = {name: _load(path, name, AutoModelForImageTextToText) for name in (PACKED_ATTENTION, "sdpa")}
    input_ids, attention_mask, position_ids, vision = _vl_batch(models["sdpa"], processor)
    packed_ids, text_positions, indices = _pack(input_ids, attention_mask)
    packed_positions = text_positions
    if position_ids.dim() == 3:  # as the trainer: (4, 1, T) = text positions (they mark the packing) + 3 mrope rows
        packed_positions = torch.cat([text_positions, position_ids.reshape(3, -1)[:, indices]]).unsqueeze(1)
    text_config = models["sdpa"].config.get_text_config()
    # the per-sequence path runs the full-attention layers; sliding-window ones (Gemma 4) take sdpa with their mask
    layer_types = getattr(text_config, "layer_types", None) or ["full_attention"] * text_config.num_hidden_layers
    full_layers = sum(layer == "full_attention" for layer in layer_types)
    with torch.no_grad():
        reference = _padded_log_probs(models["sdpa"], input_ids, attention_mask, position_ids=position_ids, **vision)
        # transformers 5.19's GLM-4.5V hands its layers the mrope rows, not the text positions: its boundaries come
        # from cu_seq_lens alone (which the trainer always passes)
        modes = (True,) if kind == "glm4v_moe" else (False, True)
        for with_kwargs in modes:
            packed = _packed_log_probs(
                models[PACKED_ATTENTION],
                input_ids,
                attention_mask,
                with_kwargs,
                position_ids=packed_positions,
                **vision,
            )
            assert (packed - reference).abs().max() < 1e-5, f"with_kwargs={with_kwargs}"
        assert packed_calls == [len(indices)] * len(modes) * full_layers
        # transformers 5.19 drops the text's boundary kwargs before the vision encoder (accepts_precomputed_kwargs);
        # where they do reach it, its non-causal per-image calls ignore them (test_non_causal_call_ignores_...).
        kwargs = packed_sequence_kwargs(attention_mask.sum(-1))
        features = {
            name: torch.cat(list(model.model.get_image_features(**vision, **kwargs).pooler_output))
            for name, model in models.items()
        }
    assert torch.equal(features[PACKED_ATTENTION], features["sdpa"])
