# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CUDA branch of the "varlen" attention: torch's flash varlen_attn on a packed bf16 row, with GQA, against one
causal sdpa per sequence, forward and backward; and the same kernel reached through a tiny Qwen2 model."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from verl.models import packed_attention
from verl.models.packed_attention import PACKED_ATTENTION, packed_attention_forward, packed_sequence_kwargs
from verl.models.tiny_models import get_or_build_tiny_model
from verl.utils.torch_functional import positions_from_mask, unpad_input


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device: torch.cuda.is_available() is False"
    ),
]

LENGTHS = [37, 1, 256, 100, 513]


@pytest.fixture
def varlen_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Token counts of the calls that reached torch's varlen kernel."""
    calls = []
    varlen_forward = packed_attention._varlen_forward

    def spy(query: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        calls.append(query.shape[2])
        return varlen_forward(query, *args, **kwargs)

    monkeypatch.setattr(packed_attention, "_varlen_forward", spy)
    return calls


def _skip_without_varlen(query: torch.Tensor) -> None:
    if not packed_attention._can_use_varlen(query):
        pytest.skip(
            f"torch {torch.__version__} on {torch.cuda.get_device_name()} has no usable varlen_attn "
            "(needs sm80+ and a varlen_attn with scale); the per-sequence sdpa path is tested on CPU."
        )


class _Attention(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.is_causal = True
        self.num_key_value_groups = groups


def _per_sequence_sdpa(
    leaves: list[torch.Tensor], grad_out: torch.Tensor, scale: float
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Causal sdpa on each packed sequence of (query, key, value) alone: the output (1, T, heads, dim) and the
    gradients of the three inputs for `grad_out`, in the inputs' dtype."""
    query, key, value = (leaf.detach().clone().requires_grad_() for leaf in leaves)
    parts, start = [], 0
    for length in LENGTHS:
        part = slice(start, start + length)
        expected = F.scaled_dot_product_attention(
            query[:, :, part], key[:, :, part], value[:, :, part], is_causal=True, scale=scale, enable_gqa=True
        )
        parts.append(expected.transpose(1, 2))
        start += length
    out = torch.cat(parts, dim=1)
    out.backward(grad_out)
    return out.detach(), [query.grad, key.grad, value.grad]


def _relative_error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return float((got.detach().float() - exact).norm() / exact.norm())


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("boundaries", ["cu_seq_lens_kwargs", "position_ids"])
def test_varlen_kernel_equals_per_sequence_sdpa(varlen_calls: list[int], head_dim: int, boundaries: str) -> None:
    heads, kv_heads, total = 8, 2, sum(LENGTHS)
    generator = torch.Generator(device="cuda").manual_seed(0)
    leaves = [
        torch.randn(1, n, total, head_dim, generator=generator, device="cuda", dtype=torch.bfloat16)
        for n in (heads, kv_heads, kv_heads)
    ]
    _skip_without_varlen(leaves[0])
    grad_out = torch.randn(1, total, heads, head_dim, generator=generator, device="cuda", dtype=torch.bfloat16)
    scale = head_dim**-0.5

    query, key, value = (leaf.clone().requires_grad_() for leaf in leaves)
    if boundaries == "cu_seq_lens_kwargs":
        kwargs = packed_sequence_kwargs(torch.tensor(LENGTHS, device="cuda"))
    else:
        kwargs = {"position_ids": torch.cat([torch.arange(n, device="cuda") for n in LENGTHS]).unsqueeze(0)}
    out, _ = packed_attention_forward(_Attention(heads // kv_heads), query, key, value, None, scaling=scale, **kwargs)
    out.backward(grad_out)
    assert varlen_calls == [total]

    # The exact result: causal sdpa on each sequence alone, in float32 from the same bf16 inputs. The kernel must be as
    # close to it as the same per-sequence sdpa computed in bf16 (a fixed tolerance fails on bf16 rounding alone: the
    # gradients of keys and values sum over up to 513 queries x 4 query heads each).
    exact_out, exact_grads = _per_sequence_sdpa([leaf.float() for leaf in leaves], grad_out.float(), scale)
    bf16_out, bf16_grads = _per_sequence_sdpa(leaves, grad_out, scale)
    assert out.shape == exact_out.shape == (1, total, heads, head_dim) and out.dtype == torch.bfloat16
    errors = {"out": (_relative_error(out, exact_out), _relative_error(bf16_out, exact_out))}
    for name, got, bf16, exact in zip("qkv", (query, key, value), bf16_grads, exact_grads):
        errors[f"d{name}"] = (_relative_error(got.grad, exact), _relative_error(bf16, exact))
    print(f"head_dim {head_dim} {boundaries}: relative error (varlen, bf16 sdpa) against float32 {errors}")
    for name, (varlen_error, sdpa_error) in errors.items():
        assert varlen_error <= 2 * sdpa_error + 1e-3, (name, errors)


def test_tiny_qwen2_bf16_packed_through_varlen(tmp_path, varlen_calls: list[int]) -> None:
    """Through the model: explicit kwargs and derived boundaries give the same bits; both near fp32 padded sdpa."""
    path = get_or_build_tiny_model("qwen2", str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=PACKED_ATTENTION, dtype=torch.bfloat16)
    model = model.cuda().eval()
    reference_model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", dtype=torch.float32)
    reference_model = reference_model.cuda().eval()
    lengths = torch.tensor([40, 7, 120, 64])
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 2000, (len(lengths), int(lengths.max())), generator=generator).cuda()
    attention_mask = (torch.arange(input_ids.shape[1])[None] < lengths[:, None]).long().cuda()
    indices = unpad_input(attention_mask)
    packed_ids = input_ids.reshape(-1)[indices].unsqueeze(0)
    positions = positions_from_mask(attention_mask).reshape(-1)[indices].unsqueeze(0)
    with torch.no_grad():
        derived = model(input_ids=packed_ids, position_ids=positions, use_cache=False).logits[0]
        explicit = model(
            input_ids=packed_ids, position_ids=positions, use_cache=False, **packed_sequence_kwargs(lengths.cuda())
        ).logits[0]
        padded = reference_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            use_cache=False,
        ).logits
    if not varlen_calls:
        pytest.skip("varlen_attn is not usable on this GPU or torch; the per-sequence path is tested on CPU.")
    assert varlen_calls == [len(indices)] * 2 * model.config.num_hidden_layers
    assert torch.equal(derived, explicit)
    log_probs = torch.log_softmax(derived.float(), dim=-1)
    reference = torch.log_softmax(padded[attention_mask.bool()].float(), dim=-1)
    # bf16 weights and activations against fp32: loose, but a cross-sequence leak moves log-probs by whole units
    assert (log_probs - reference).abs().mean() < 5e-2


def _rollout_rows(prompt_lengths: list[int], response_lengths: list[int], width: tuple[int, int]):
    """Left-padded prompts and right-padded responses of random tokens, as a rollout gives them, on CUDA."""
    from verl.protocol import DataProto

    generator = torch.Generator().manual_seed(1)
    prompt_width, response_width = width
    input_ids = torch.randint(0, 2000, (len(prompt_lengths), prompt_width + response_width), generator=generator)
    attention_mask = torch.zeros_like(input_ids)
    for row, (prompt, response) in enumerate(zip(prompt_lengths, response_lengths)):
        attention_mask[row, prompt_width - prompt : prompt_width + response] = 1
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": positions_from_mask(attention_mask),
        "responses": input_ids[:, prompt_width:].clone(),
    }
    return DataProto.from_dict(tensors={key: value.cuda() for key, value in tensors.items()})


def test_dense_micro_batches_run_padded_on_cuda(tmp_path, varlen_calls: list[int], monkeypatch) -> None:
    """With padding_free, a micro-batch without padding runs as padded rows on CUDA (no varlen call) and gives the
    packed path's log-probs to bf16 rounding; one with padding stays packed."""
    from verl.utils import device as device_utils
    from verl.workers.actor import forward

    monkeypatch.setattr(device_utils, "_device_type", "cuda")  # as in a CUDA worker, undone after the test
    path = get_or_build_tiny_model("qwen2", str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=PACKED_ATTENTION, dtype=torch.bfloat16)
    model = model.cuda().eval()

    def head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return {"log_probs": log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)}

    dense = _rollout_rows([30, 30, 30, 30], [50, 50, 50, 50], (40, 50))
    ragged = _rollout_rows([30, 12, 40, 5], [50, 7, 33, 50], (40, 50))
    assert forward.runs_padded(dense, True) and not forward.runs_padded(ragged, True)
    with torch.no_grad():
        padded = forward.forward_response(model, dense, True, head)["log_probs"]
        assert varlen_calls == []
        packed = forward._forward_packed(model, dense, head, {})["log_probs"]
        if not varlen_calls:
            pytest.skip("varlen_attn is not usable on this GPU or torch; the per-sequence path is tested on CPU.")
        varlen_calls.clear()
        forward.forward_response(model, ragged, True, head)
    assert varlen_calls, "a micro-batch with padding must stay packed"
    assert (padded - packed).abs().mean() < 2e-2  # two bf16 kernels: rounding, not a leak across sequences
