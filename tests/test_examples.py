# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The example configs and recipes resolve and validate (what `--dry-run` checks), run from the repository root."""

import glob
import os
import shlex

import pytest

from verl.trainer.config import load_config
from verl.utils.config import ConfigError


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(REPO, "examples", "recipes", "*.sh")))


def recipe_args(path: str) -> list[str]:
    """The arguments a recipe passes to `python3 -m verl.trainer.main` (line continuations joined)."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if "verl.trainer.main" in line]
    words = shlex.split(line)
    return [word for word in words[words.index("verl.trainer.main") + 1 :] if word != "$@"]


def test_there_are_recipes_for_every_algorithm():
    names = " ".join(os.path.basename(path) for path in RECIPES)
    for algorithm in ("grpo", "dapo", "gspo", "cispo", "sapo", "reinforce_pp", "rloo", "ppo_gae", "multi_image"):
        assert algorithm in names, algorithm


@pytest.mark.parametrize("recipe", RECIPES, ids=os.path.basename)
def test_recipe_config_is_valid(recipe, monkeypatch):
    monkeypatch.chdir(REPO)
    args = recipe_args(recipe)
    if "multi_image" in recipe:  # needs the user's own data directory, which the check names
        with pytest.raises(ConfigError, match="data.train_files"):
            load_config(args)
        return
    config = load_config(args)
    assert config.worker.reward.reward_function.startswith(REPO)
    assert config.data.format_prompt is None or os.path.isfile(config.data.format_prompt)
