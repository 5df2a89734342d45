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

Every process of a run (the driver, each worker, the reward actor) imports transformers' model classes, and with
them `transformers.generation.candidate_generator`, which imports scikit-learn (and through it SciPy) whenever it
is installed, only for the confidence-threshold tuning of assisted generation (`roc_curve`). A run never does
assisted generation, yet the import costs each process about 1 CPU-second and a hundred MB of memory; with
scikit-learn installed (mlflow and many GPU images bring it) that is several seconds of a run's start-up on a small
machine. `skip_unused_imports` makes transformers treat scikit-learn as absent in this process, before any
transformers model module is imported; transformers then behaves exactly as it does without scikit-learn (assisted
generation keeps working, without its threshold tuning).

The driver calls it before it imports the trainer, every Ray worker through the workers' setup hook
(`verl.utils.quiet.install_worker_filters`). Set VERL_LEAN_IMPORTS=0 to keep transformers' own choice.
"""

import os
import sys


LEAN_IMPORTS_ENV = "VERL_LEAN_IMPORTS"
"""Environment variable: 0 keeps every optional import of the third-party libraries."""

_CANDIDATE_GENERATOR = "transformers.generation.candidate_generator"


def lean_imports_enabled() -> bool:
    return os.environ.get(LEAN_IMPORTS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def skip_unused_imports() -> bool:
    """Make transformers see scikit-learn as not installed (see the module docstring); True if it took effect.

    It cannot act once transformers' generation module is imported (it has then decided), nor where
    transformers is not installed; both are left as they are.
    """
    if not lean_imports_enabled() or _CANDIDATE_GENERATOR in sys.modules:
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
