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

The driver calls it before it imports the trainer, every Ray worker through the workers' setup hook
(`verl.utils.worker_setup`). Set VERL_LEAN_IMPORTS=0 to keep every import as the libraries make it.
"""

import importlib
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Any


LEAN_IMPORTS_ENV = "VERL_LEAN_IMPORTS"
"""Environment variable: 0 keeps every optional import of the third-party libraries."""

_CANDIDATE_GENERATOR = "transformers.generation.candidate_generator"


def lean_imports_enabled() -> bool:
    return os.environ.get(LEAN_IMPORTS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


_DEFERRED_MODULES = ("scipy.signal",)
"""Modules that libraries import eagerly and a training process does not use: imported on first use instead."""


class DeferredModule(ModuleType):
    """Stands in for module `name` in sys.modules until one of its attributes is read, then imports the real module
    (which replaces it in sys.modules and in its parent package) and delegates every attribute read to it.

    `__name__`, `__file__`, `__spec__` and `__loader__` are its own, so scanning sys.modules loads nothing.
    """

    def __init__(self, name: str, spec: Any) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        self.__file__ = spec.origin
        self.__dict__["_real"] = None
        self.__dict__["_lock"] = threading.Lock()

    def __getattr__(self, attr: str) -> Any:  # only called for names the stand-in does not have
        return getattr(self.load(), attr)

    def load(self) -> ModuleType:
        """The real module, imported on the first call."""
        with self.__dict__["_lock"]:
            if self.__dict__["_real"] is None:
                name = self.__name__
                if sys.modules.get(name) is self:
                    del sys.modules[name]
                self.__dict__["_real"] = importlib.import_module(name)  # also sets the parent package's attribute
            return self.__dict__["_real"]


def defer_import(name: str) -> DeferredModule | None:
    """Put a DeferredModule for `name` in sys.modules (importing its parent packages now), or None and change
    nothing if `name` is imported already or not installed."""
    if name in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    module = DeferredModule(name, spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def skip_unused_imports() -> bool:
    """Make transformers see scikit-learn as not installed, and defer the imports of `_DEFERRED_MODULES` (see the
    module docstring); True if the scikit-learn part took effect.

    It cannot act once transformers' generation module is imported (it has then decided), nor where transformers is
    not installed; both are left as they are. A module imported already is not deferred.
    """
    if not lean_imports_enabled():
        return False
    for name in _DEFERRED_MODULES:
        defer_import(name)
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
