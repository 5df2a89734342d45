# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.models.fsdp's dtype names: a name that is not a dtype is refused naming the config key it came
from (FSDPConfig built in code skips the config loader's checks), never a bare KeyError."""

import pytest
import torch

from verl.models.fsdp import to_torch_dtype


def test_a_name_that_is_not_a_dtype_is_refused_naming_its_key():
    with pytest.raises(ValueError, match=r"^mp_param_dtype='bfloat' is not a dtype; use one of .*\bbf16\b"):
        to_torch_dtype("bfloat", "mp_param_dtype")
    with pytest.raises(ValueError, match=r"^dtype='int8' is not a dtype"):
        to_torch_dtype("int8")
    assert to_torch_dtype(torch.float16, "mp_param_dtype") is torch.float16  # a torch dtype passes through
