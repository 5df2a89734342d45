# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The routers' load-balancing figures of a mixture-of-experts actor (verl.models.moe), on a tiny Qwen3-MoE and a
tiny Granite 3.0 MoE (whose routers return their top-k ids first)."""

import importlib

import pytest
import torch

from verl.models.moe import RouterStats
from verl.models.tiny_models import MOE_EXPERTS, MOE_EXPERTS_PER_TOKEN, get_or_build_tiny_model


@pytest.fixture(scope="module", params=["qwen3_moe", "granitemoe"])
def moe(request, tmp_path_factory) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    path = get_or_build_tiny_model(request.param, str(tmp_path_factory.mktemp("moe") / "models"))
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_router_stats_count_the_collected_tokens_and_match_transformers_aux_loss(moe) -> None:
    load_balancing_loss_func = importlib.import_module(type(moe).__module__).load_balancing_loss_func
    stats = RouterStats(moe)
    assert len(stats.routers) == moe.config.num_hidden_layers
    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # padded row: the last three positions are padding
    with torch.no_grad():
        moe(input_ids=ids, attention_mask=mask)  # outside collecting(): not counted
        with stats.collecting(mask):
            out = moe(input_ids=ids, attention_mask=mask, output_router_logits=True)
    tokens = int(mask.sum())
    assert [float(c.sum()) for c in stats._counts] == [tokens * MOE_EXPERTS_PER_TOKEN] * len(stats.routers)
    keep = mask.reshape(-1).bool()
    expected = [
        float(load_balancing_loss_func((logits[keep],), MOE_EXPERTS, MOE_EXPERTS_PER_TOKEN))
        for logits in out.router_logits
    ]
    metrics = stats.metrics()
    assert metrics["moe/aux_loss"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert 1.0 <= metrics["moe/load_imbalance/mean"] <= metrics["moe/load_imbalance/max"]
    assert metrics["moe/load_imbalance/max"] <= MOE_EXPERTS / MOE_EXPERTS_PER_TOKEN
    assert 0.0 <= metrics["moe/unused_experts"] < 1.0
    assert stats.metrics() == {}  # started over


def test_experts_that_take_every_token_show(moe) -> None:
    """Every token routed to experts 0 and 1 in every layer (the routers' outputs made so)."""
    stats = RouterStats(moe)
    tokens = 6
    logits = torch.zeros(tokens, MOE_EXPERTS)
    logits[:, :MOE_EXPERTS_PER_TOKEN] = 10.0
    ids = torch.arange(MOE_EXPERTS_PER_TOKEN).expand(tokens, -1)
    with stats.collecting():
        for router in stats.routers:
            for hook in router._forward_hooks.values():
                weights = torch.full((tokens, MOE_EXPERTS_PER_TOKEN), 0.5)
                granite = type(router).__name__.startswith("Granite")  # its routers return the ids first
                hook(router, (), (ids, weights, logits) if granite else (logits, weights, ids))
    metrics = stats.metrics()
    assert metrics["moe/load_imbalance/max"] == pytest.approx(MOE_EXPERTS / MOE_EXPERTS_PER_TOKEN)
    assert metrics["moe/unused_experts"] == pytest.approx((MOE_EXPERTS - MOE_EXPERTS_PER_TOKEN) / MOE_EXPERTS)
    assert metrics["moe/aux_loss"] > MOE_EXPERTS_PER_TOKEN  # above the balanced value


def test_a_dense_model_has_no_routers(tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    dense = AutoModelForCausalLM.from_pretrained(get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
    stats = RouterStats(dense)
    assert not stats and stats.metrics() == {}


def test_a_trimmed_padded_forward_counts_only_real_tokens(moe) -> None:
    """The actor's padded forward runs only the columns with a real token in some row: the mask the router stats get
    is those columns' (the batch's full mask did not match the router's token count and was dropped, so padding was
    counted: 18 tokens for 14)."""
    from verl.protocol import DataProto
    from verl.workers.actor.forward import computed_tokens_mask, forward_response

    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    ids = torch.randint(1, 1000, mask.shape, generator=torch.Generator().manual_seed(0)) * mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    micro = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": positions, "responses": ids[:, 6:]}
    )
    stats = RouterStats(moe)
    computed = computed_tokens_mask(micro, padding_free=False)
    assert computed.shape == (2, 8)  # columns 2..9
    with torch.no_grad(), stats.collecting(computed):
        forward_response(moe, micro, False, lambda logits, labels: {"x": logits[:, 0]})
    assert [float(c.sum()) for c in stats._counts] == [int(mask.sum()) * MOE_EXPERTS_PER_TOKEN] * len(stats.routers)
