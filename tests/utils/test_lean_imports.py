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
"""scikit-learn stays out of a process that loads transformers' model classes, unless VERL_LEAN_IMPORTS=0."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from verl.utils.lean_imports import LEAN_IMPORTS_ENV


pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed: nothing to keep out"
)

PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
from transformers import AutoModelForCausalLM  # noqa: F401  (imports transformers.generation)
from transformers.generation import candidate_generator
print(json.dumps({
    "sklearn": "sklearn" in sys.modules,
    "scipy": "scipy" in sys.modules,
    "sees_sklearn": candidate_generator.is_sklearn_available(),
}))
"""


def probe(lean: str | None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != LEAN_IMPORTS_ENV}
    if lean is not None:
        env[LEAN_IMPORTS_ENV] = lean
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_worker_setup_keeps_sklearn_out_of_transformers_imports() -> None:
    assert probe(None) == {"sklearn": False, "scipy": False, "sees_sklearn": False}


def test_lean_imports_off_keeps_transformers_own_choice() -> None:
    assert probe("0") == {"sklearn": True, "scipy": True, "sees_sklearn": True}


def test_too_late_once_transformers_generation_is_imported() -> None:
    code = (
        "import transformers.generation.candidate_generator\n"
        "from verl.utils.lean_imports import skip_unused_imports\n"
        "print(skip_unused_imports())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
