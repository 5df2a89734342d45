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
"""tests/gpu: every test here is marked `gpu` and skipped, with the reason in the summary, where CUDA is absent.

Run them on a CUDA machine with `pytest tests/gpu -rs`; `-m "not gpu"` leaves them out anywhere.
"""

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False on this machine")
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if not torch.cuda.is_available():
            item.add_marker(skip)
