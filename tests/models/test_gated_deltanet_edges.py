# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.models.gated_deltanet: an empty sequence in a packed row, and calls that are not a packed row's
(an attention mask given) going to the layer's own forward."""

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: 2 threads on a shared 2-core box are 3-5x slower

import pytest
import torch
from transformers import AutoModelForImageTextToText

from verl.models.gated_deltanet import use_packed_linear_attention
from verl.models.packed_attention import PACKED_ATTENTION, packed_sequence_kwargs, register_packed_attention
from verl.models.tiny_models import get_or_build_tiny_model


SMALL = {"hidden_size": 128, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128}


@pytest.fixture(scope="module")
def layers(tmp_path_factory):
    """A stock and a packed-exact copy of the tiny Qwen3.5's first Gated DeltaNet layer."""
    register_packed_attention()
    path = get_or_build_tiny_model("qwen3_5", str(tmp_path_factory.mktemp("tiny")), **SMALL)
    model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation=PACKED_ATTENTION).float().eval()
    stock = model.model.language_model.layers[0].linear_attn
    packed_model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation=PACKED_ATTENTION).float()
    assert use_packed_linear_attention(packed_model.eval()) == 3
    return stock, packed_model.model.language_model.layers[0].linear_attn


def test_an_empty_sequence_in_a_packed_row_changes_nothing(layers):
    stock, packed = layers
    hidden = torch.randn(1, 12, SMALL["hidden_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        separate = torch.cat([stock(hidden[:, :5]), stock(hidden[:, 5:])], dim=1)
        for lengths in ([5, 0, 7], [0, 5, 7], [5, 7, 0]):
            got = packed(hidden, **packed_sequence_kwargs(lengths))
            assert (got - separate).abs().max().item() <= 5e-5, lengths


def test_a_call_with_an_attention_mask_is_the_layer_s_own(layers):
    """A padded batch's mask (even with boundaries given) is not a packed row: the stock forward runs, the mask
    zeroing the padding."""
    stock, packed = layers
    hidden = torch.randn(1, 9, SMALL["hidden_size"], generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 9)
    mask[0, :3] = 0
    kwargs = packed_sequence_kwargs([4, 5])
    with torch.no_grad():
        expected = stock(hidden, attention_mask=mask, **kwargs)
        assert torch.equal(packed(hidden, attention_mask=mask, **kwargs), expected)


def test_a_convolution_in_a_media_tower_does_not_forbid_packing():
    """Only the language model's mixers see the packed row: Qwen2-Audio's Whisper tower (1-D convolutions over the
    audio frames) is no reason to fall back to padded rows, its Qwen2 decoder is exact."""
    import transformers

    from verl.models.gated_deltanet import linear_attention_is_exact
    from verl.models.structure import get_language_model

    audio = {"d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32}
    audio.update(num_mel_bins=16, max_source_positions=32)
    text = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 1}
    text.update(num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
    model = transformers.Qwen2AudioForConditionalGeneration(
        transformers.Qwen2AudioConfig(audio_config=audio, text_config=text)
    )
    conv = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Conv1d)]
    assert conv and all("audio_tower" in name for name in conv)  # the decoder has none
    assert get_language_model(model) is not None
    assert linear_attention_is_exact(model)
