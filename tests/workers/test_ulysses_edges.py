# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the workers' own Ulysses check (verl.models.ulysses.check_split), which guards models the config loader
cannot read (hub ids): on a config alone, no process group. The module is a stand-in (a namespace with `config`)."""

from types import SimpleNamespace

import pytest
from transformers import Qwen2Config

from verl.models import ulysses


def _model(**config) -> SimpleNamespace:
    return SimpleNamespace(config=Qwen2Config(hidden_size=64, **config))


def test_the_group_must_divide_the_key_value_heads_as_well_as_the_query_heads():
    """8 query heads split over 4 ranks, but 2 key/value heads cannot: each rank needs whole heads of both."""
    model = _model(num_attention_heads=8, num_key_value_heads=2)
    ulysses.check_split(model, 2, padding_free=True, role="actor")  # 8 / 2 and 2 / 2: whole heads
    with pytest.raises(ValueError, match=r"actor.ulysses_size=4 must divide the model's num_key_value_heads=2\."):
        ulysses.check_split(model, 4, padding_free=True, role="actor")
    with pytest.raises(ValueError, match=r"critic.ulysses_size=3 must divide the model's num_attention_heads=8\."):
        ulysses.check_split(model, 3, padding_free=True, role="critic")


def test_padded_rows_are_refused_and_a_group_of_one_is_always_accepted():
    model = _model(num_attention_heads=8, num_key_value_heads=2)
    with pytest.raises(ValueError, match=r"ref.ulysses_size=2 splits packed rows: it needs padding_free=true"):
        ulysses.check_split(model, 2, padding_free=False, role="ref")
    ulysses.check_split(model, 1, padding_free=False, role="ref")  # no split: nothing to check
