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
"""verl.utils.metadata_cache: importlib's packages_distributions() answered from a file per set of installed
distributions, the same mapping, recomputed when a package comes or goes."""

import importlib.metadata
import json
import os
import subprocess
import sys

from verl.utils.metadata_cache import cached_packages_distributions, installed_distributions_digest


class CountingCompute:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return importlib.metadata.packages_distributions()


def test_the_cached_mapping_is_importlibs_and_the_second_process_reads_it(tmp_path):
    compute = CountingCompute()
    first = cached_packages_distributions(compute, tmp_path)
    assert first == dict(importlib.metadata.packages_distributions()) and compute.calls == 1
    assert "transformers" in first["transformers"]
    (cache_file,) = tmp_path.iterdir()
    assert cache_file.name == f"packages_distributions-{installed_distributions_digest()}.json"
    assert cached_packages_distributions(compute, tmp_path) == first and compute.calls == 1  # read, not computed


def test_a_new_or_removed_distribution_changes_the_digest(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = installed_distributions_digest()
    info = site / "tinypkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("tinypkg\n")
    added = installed_distributions_digest()
    assert added != before
    compute = CountingCompute()
    assert cached_packages_distributions(compute, tmp_path / "cache")["tinypkg"] == ["tinypkg"]
    info.rename(site / "tinypkg-1.1.dist-info")  # an upgrade
    assert installed_distributions_digest() not in (before, added)
    for entry in (site / "tinypkg-1.1.dist-info").iterdir():
        entry.unlink()
    (site / "tinypkg-1.1.dist-info").rmdir()
    assert installed_distributions_digest() == before
    assert "tinypkg" not in cached_packages_distributions(compute, tmp_path / "cache") and compute.calls == 2


def test_a_corrupt_or_unwritable_cache_is_computed_again(tmp_path):
    compute = CountingCompute()
    cache_file = tmp_path / f"packages_distributions-{installed_distributions_digest()}.json"
    cache_file.write_text('{"torch": ["tor')
    expected = dict(importlib.metadata.packages_distributions())
    assert cached_packages_distributions(compute, tmp_path) == expected and compute.calls == 1
    assert json.loads(cache_file.read_text()) == expected  # rewritten whole
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    assert cached_packages_distributions(compute, blocker) == expected and compute.calls == 2


PROBE = """
import importlib.metadata, json, os
from verl.utils.lean_imports import skip_unused_imports
skip_unused_imports()
import transformers.utils.import_utils as import_utils
folder = os.path.join(os.environ["XDG_CACHE_HOME"], "verl-compact")
files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
print(json.dumps({"same": import_utils.PACKAGE_DISTRIBUTION_MAPPING == importlib.metadata.packages_distributions(),
                  "files": files}))
"""


def _probe(tmp_path, lean: str) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "VERL_LEAN_IMPORTS": lean}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_transformers_reads_the_cached_mapping_with_the_lean_imports(tmp_path):
    assert _probe(tmp_path, "0") == {"same": True, "files": []}
    first = _probe(tmp_path, "1")
    assert first["same"] and len(first["files"]) == 1 and first["files"][0].startswith("packages_distributions-")
    assert _probe(tmp_path, "1") == first  # the second process reads the same file
