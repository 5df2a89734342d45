# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of scripts/model_merger.py that tests/scripts/test_model_merger.py leaves open (found by a mutation audit of
the script)."""

import json
import os
import shutil

import pytest
import torch

from tests.repo_files import load_repo_file


merger = load_repo_file("scripts/model_merger.py", "model_merger_edges")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """An actor checkpoint of a tiny fp32 model, as tests/scripts/test_model_merger.py writes it."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    from verl.models.tiny_models import build_tiny_model
    from verl.utils import quiet

    root = tmp_path_factory.mktemp("merger")
    model_dir = build_tiny_model(
        str(root / "model"), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=128
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    actor = root / "global_step_1" / "actor"
    with quiet.one_process_checkpoint_io():
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(actor), no_dist=True)
    shutil.copytree(model_dir, actor / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    return str(actor)


def test_the_exported_config_declares_the_dtype_written_not_the_checkpoints(checkpoint, tmp_path) -> None:
    """The checkpoint's config.json (fp32) is not copied over the export's: a bf16 export declares bf16."""
    with open(os.path.join(checkpoint, "huggingface", "config.json")) as f:
        assert json.load(f)["dtype"] == "float32"
    target = merger.merge(checkpoint, str(tmp_path / "bf16"))
    with open(os.path.join(target, "config.json")) as f:
        assert json.load(f)["dtype"] == "bfloat16"
