# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The config tests' shared fixture (test_config.py, test_config_edges.py; a module's own `files` fixture wins)."""

import pytest

from tests.model_folders import config_only_model


@pytest.fixture()
def files(tmp_path):
    """A minimal valid setup: data file, model directory, reward file, prompt template."""
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    config_only_model(tmp_path / "model")
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    (tmp_path / "fmt.jinja").write_text("{{ content }}")
    return tmp_path
