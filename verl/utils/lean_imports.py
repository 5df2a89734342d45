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
"""Third-party imports that a training process never uses, kept out of it.

Every process of a run (the driver, each worker, a reward actor) imports transformers' model classes, and with
them `transformers.generation.candidate_generator`, which imports scikit-learn (and through it SciPy) whenever it
is installed, only for the confidence-threshold tuning of assisted generation (`roc_curve`). A run never does
assisted generation, yet the import costs each process about 1 CPU-second and a hundred MB of memory; with
scikit-learn installed (mlflow and many GPU images bring it) that is several seconds of a run's start-up on a small
machine. `skip_unused_imports` makes transformers treat scikit-learn as absent in this process, before any
transformers model module is imported; transformers then behaves exactly as it does without scikit-learn (assisted
generation keeps working, without its threshold tuning).

vLLM imports `scipy.signal` (and through it `scipy.stats`) whenever SciPy is installed, only to resample audio
inputs: ~0.9 CPU-seconds and ~64 MB of every worker. `skip_unused_imports` puts a stand-in for `scipy.signal` in
sys.modules, which imports the real module on the first use of one of its names, so a process that never resamples
audio never loads it. (importlib's LazyLoader would not do: `inspect.getmodule`, which torch calls while it registers
custom ops, reads `__file__` of every module in sys.modules, and any attribute read loads a LazyLoader module.)

It does the same for PyAV (`av`) and OpenCV (`cv2`), which vLLM imports to decode audio and video files: ~0.5
CPU-seconds and ~30 MB (two thirds of it shared libraries) of every worker, for media a run passes as decoded
frames or not at all.

transformers' model classes import its object-detection losses, which import `scipy.optimize` (and through it
scipy.sparse, scipy.linalg and scipy.special) for the Hungarian matching of DETR-style models: ~0.5 CPU-seconds and
~35 MB of every process that loads a model class. Its stand-in hands out `linear_sum_assignment` as a function that
imports the real module when it is first called, so `from scipy.optimize import linear_sum_assignment` loads nothing.

Triton, the GPU kernel compiler, is installed with xgrammar (a vLLM dependency) even on a CPU machine, and torch
and vLLM import it whenever it is there, only to find that it has no CPU backend and leave it unused: ~75 MB and
~0.5 CPU-seconds of every worker. In a process of a CPU-only run (`skip_unused_imports(cpu_only=True)`, or the
environment variable VERL_CPU_ONLY_PROCESS=1, which the trainer sets for its Ray workers when the run's device is
the CPU) Triton is marked as not installed, so each library takes its own no-Triton path. A GPU run keeps it.

transformers' own import reads the metadata of every installed package (`importlib.metadata.packages_distributions`,
~0.4 CPU-seconds) and the source files of all its model folders (~0.35 CPU-seconds); `skip_unused_imports` makes
both answers come from cache files (`verl.utils.metadata_cache`).

The driver calls it before it imports the trainer, every Ray worker through the workers' setup hook
(`verl.utils.worker_setup`). Set VERL_LEAN_IMPORTS=0 to keep every import as the libraries make it.
"""

import dis
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .metadata_cache import use_cached_import_structure, use_cached_packages_distributions


LEAN_IMPORTS_ENV = "VERL_LEAN_IMPORTS"
"""Environment variable: 0 keeps every optional import of the third-party libraries."""

_CANDIDATE_GENERATOR = "transformers.generation.candidate_generator"


CPU_ONLY_ENV = "VERL_CPU_ONLY_PROCESS"
"""Environment variable: 1 in the processes of a run on the CPU, which then keep GPU-only packages out (Triton)."""

_GPU_ONLY_PACKAGES = ("triton",)
"""Packages that torch and vLLM import when installed but only use on a GPU: marked as absent in a CPU-only process."""


def lean_imports_enabled() -> bool:
    return os.environ.get(LEAN_IMPORTS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


_DEFERRED_MODULES: dict[str, tuple[str, ...]] = {
    "scipy.signal": (),
    "scipy.optimize": ("linear_sum_assignment",),
    "av": (),
    "cv2": (),
}
"""Modules that libraries import eagerly and a training process does not use: imported on first use instead. Each
maps to the functions that libraries take from it with `from module import name` at import time: reading one of
those gives a function that imports the module only when it is called."""


class DeferredModule(ModuleType):
    """Stands in for module `name` in sys.modules until one of its attributes is read, then imports the real module
    (which replaces it in sys.modules and in its parent package) and delegates every attribute read to it.

    `__name__`, `__file__`, `__spec__` and `__loader__` are its own, so scanning sys.modules loads nothing. Reading
    one of `functions` before the module is loaded gives a stand-in function that loads it when called. So that
    `from module import function` can read it, a stand-in with `functions` answers the import statement's own
    question for `__path__` (is this a package whose submodule it might be?) with no; every other read of
    `__path__`, such as the import system's when it imports a submodule, loads the real package. A submodule that
    such a `from` import names is then imported when it is read.
    """

    def __init__(self, name: str, spec: Any, functions: tuple[str, ...] = ()) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        self.__file__ = spec.origin
        self.__dict__["_real"] = None
        self.__dict__["_lock"] = threading.RLock()  # the real module's own imports may read the stand-in
        self.__dict__["_functions"] = frozenset(functions)

    def __getattr__(self, attr: str) -> Any:  # only called for names the stand-in does not have
        functions = self.__dict__["_functions"]
        if self.__dict__["_real"] is None and functions:
            if attr in functions:
                return self._deferred_function(attr)
            if attr == "__path__" and _read_by_an_import_statement():
                raise AttributeError(attr)
        real = self.load()
        try:
            return getattr(real, attr)
        except AttributeError:
            if not functions or not hasattr(real, "__path__"):
                raise
        # `from package import submodule`, which the import statement left to this read: import the submodule
        try:
            return importlib.import_module(f"{self.__name__}.{attr}")
        except ModuleNotFoundError as err:
            if err.name != f"{self.__name__}.{attr}":
                raise
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None

    def _deferred_function(self, attr: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(self.load(), attr)(*args, **kwargs)

        call.__name__ = call.__qualname__ = attr
        call.__module__ = self.__name__
        call.__doc__ = f"{self.__name__}.{attr}, imported on the first call."
        return call

    def load(self) -> ModuleType:
        """The real module, imported on the first call."""
        with self.__dict__["_lock"]:
            if self.__dict__["_real"] is None:
                name = self.__name__
                if sys.modules.get(name) is self:
                    del sys.modules[name]
                self.__dict__["_real"] = importlib.import_module(name)  # also sets the parent package's attribute
            return self.__dict__["_real"]


_IMPORT_NAME = dis.opmap["IMPORT_NAME"]


def _read_by_an_import_statement() -> bool:
    """Whether the caller of DeferredModule.__getattr__ is executing an import statement (reading `__path__` to
    handle its `from` list), as opposed to calling a function such as importlib's."""
    frame = sys._getframe(2)  # 0: this function, 1: __getattr__, 2: the code that read the attribute
    return frame.f_code.co_code[frame.f_lasti] == _IMPORT_NAME


def defer_import(name: str, functions: tuple[str, ...] = ()) -> DeferredModule | None:
    """Put a DeferredModule for `name` (with deferred `functions`) in sys.modules, importing its parent packages now;
    or return None and change nothing if `name` is imported already or not installed."""
    if name in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    module = DeferredModule(name, spec, functions)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def skip_unused_imports(cpu_only: bool | None = None) -> bool:
    """Make transformers see scikit-learn as not installed, defer the imports of `_DEFERRED_MODULES`, cache the
    package metadata and the models' import structure that transformers reads and, in a `cpu_only` process
    (default: VERL_CPU_ONLY_PROCESS=1), mark `_GPU_ONLY_PACKAGES` as absent (see the module docstring); True if the
    scikit-learn part took effect.

    It cannot act once transformers' generation module is imported (it has then decided), nor where transformers is
    not installed; both are left as they are. A module imported already is neither deferred nor marked absent.
    """
    if not lean_imports_enabled():
        return False
    use_cached_packages_distributions()  # before transformers is imported (below, or by the caller)
    use_cached_import_structure()
    if cpu_only is None:
        cpu_only = os.environ.get(CPU_ONLY_ENV, "").strip() == "1"
    if cpu_only:
        for name in _GPU_ONLY_PACKAGES:
            # None in sys.modules makes `import name` raise ImportError and importlib.util.find_spec return None,
            # the two ways libraries test for an optional package
            sys.modules.setdefault(name, None)
    for name, functions in _DEFERRED_MODULES.items():
        defer_import(name, functions)
    if _CANDIDATE_GENERATOR in sys.modules:
        return False
    try:
        import transformers.utils as transformers_utils
        import transformers.utils.import_utils as import_utils
    except ImportError:
        return False
    if not hasattr(transformers_utils, "is_sklearn_available"):  # a transformers without the check
        return False

    def sklearn_not_used() -> bool:
        return False

    transformers_utils.is_sklearn_available = sklearn_not_used
    import_utils.is_sklearn_available = sklearn_not_used
    return True
