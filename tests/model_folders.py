# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model folders for config tests: what the config check reads (config.json) and looks for (a weights file), with
nothing to load; tests that load a model build a tiny one (verl.models.tiny_models)."""

import json
from pathlib import Path
from typing import Any

from safetensors.numpy import save_file


def config_only_model(path: Path, config: dict[str, Any] | None = None) -> Path:
    """`path` made a model folder as the config check sees it: `config` as its config.json ({} if None) and a weights
    file without tensors."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or {}))
    no_tensors(path / "model.safetensors")
    return path


def no_tensors(path: Path) -> None:
    """A safetensors file that holds no tensor: it opens, as the config check opens every weights file."""
    save_file({}, str(path))
