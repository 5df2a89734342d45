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
"""scikit-learn stays out of a process that loads transformers' model classes, and scipy.signal is loaded on first use,
unless VERL_LEAN_IMPORTS=0."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from verl.utils.lean_imports import LEAN_IMPORTS_ENV


needs_sklearn = pytest.mark.skipif(
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
    "scipy": "scipy.stats" in sys.modules,  # through scikit-learn
    "sees_sklearn": candidate_generator.is_sklearn_available(),
}))
"""


def probe(lean: str | None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != LEAN_IMPORTS_ENV}
    if lean is not None:
        env[LEAN_IMPORTS_ENV] = lean
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_sklearn
def test_the_worker_setup_keeps_sklearn_out_of_transformers_imports() -> None:
    assert probe(None) == {"sklearn": False, "scipy": False, "sees_sklearn": False}


@needs_sklearn
def test_lean_imports_off_keeps_transformers_own_choice() -> None:
    assert probe("0") == {"sklearn": True, "scipy": True, "sees_sklearn": True}


@needs_sklearn
def test_too_late_once_transformers_generation_is_imported() -> None:
    code = (
        "import transformers.generation.candidate_generator\n"
        "from verl.utils.lean_imports import skip_unused_imports\n"
        "print(skip_unused_imports())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


DEFERRED_PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
import numpy as np
import vllm.multimodal.audio as audio  # imports scipy.signal as a module attribute
before = {"signal": type(sys.modules["scipy.signal"]).__name__, "stats": "scipy.stats" in sys.modules}
resampled = audio.resample_audio_scipy(np.ones(160, dtype=np.float32), orig_sr=16000, target_sr=8000)
import scipy.signal
print(json.dumps({
    "before": before,
    "after": type(sys.modules["scipy.signal"]).__name__,
    "samples": int(resampled.shape[0]),
    "same_module": scipy.signal is sys.modules["scipy.signal"],
}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("scipy") is None or importlib.util.find_spec("vllm") is None,
    reason="needs SciPy and vLLM",
)
@pytest.mark.parametrize("lean", [None, "0"])
def test_scipy_signal_loads_on_first_use(lean) -> None:
    env = {key: value for key, value in os.environ.items() if key != LEAN_IMPORTS_ENV}
    if lean is not None:
        env[LEAN_IMPORTS_ENV] = lean
    out = subprocess.run([sys.executable, "-c", DEFERRED_PROBE], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if lean is None:  # vLLM imported it, but nothing was loaded until the first resampling
        assert result["before"] == {"signal": "DeferredModule", "stats": False}
    else:
        assert result["before"] == {"signal": "module", "stats": True}
    assert result == {**result, "after": "module", "samples": 80, "same_module": True}


def test_a_deferred_module_loads_for_submodules_and_from_imports() -> None:
    code = (
        "import sys, json\n"
        "from verl.utils.lean_imports import defer_import\n"
        "stand_in = defer_import('json.decoder') if 'json.decoder' not in sys.modules else None\n"
        "fresh = defer_import('email.mime')\n"
        "loaded_early = type(sys.modules['email.mime']).__name__\n"
        "import inspect; inspect.getmodule(defer_import)  # scans sys.modules: must not load it\n"
        "scanned = type(sys.modules['email.mime']).__name__\n"
        "from email.mime.text import MIMEText\n"
        "print(json.dumps([loaded_early, scanned, type(sys.modules['email.mime']).__name__,\n"
        "                  fresh.text.MIMEText is MIMEText, defer_import('email.mime') is None]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        "DeferredModule",
        "DeferredModule",
        "module",
        True,
        True,
    ]
