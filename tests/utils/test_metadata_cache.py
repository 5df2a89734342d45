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
distributions, the same mapping, recomputed when a package comes or goes; transformers' import structure of its
models answered from a file per state of its source files, the same structure, recomputed when a file changes."""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from verl.utils.metadata_cache import (
    KEEP_PER_KIND,
    cached_import_structure,
    cached_packages_distributions,
    installed_distributions_digest,
    source_tree_digest,
)


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


def test_a_write_removes_the_oldest_files_of_its_kind_beyond_the_limit(tmp_path):
    older = []
    for index in range(KEEP_PER_KIND + 2):  # files of earlier package sets, oldest first
        stale = tmp_path / f"packages_distributions-{index:024d}.json"
        stale.write_text("{}")
        os.utime(stale, ns=(10**18 + index, 10**18 + index))
        older.append(stale.name)
    other_kind = tmp_path / "transformers_models-000000000000000000000000.json"
    other_kind.write_text("{}")
    os.utime(other_kind, ns=(1, 1))  # older than all of them, but of another kind
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("mine")
    compute = CountingCompute()
    assert cached_packages_distributions(compute, tmp_path) == importlib.metadata.packages_distributions()
    written = f"packages_distributions-{installed_distributions_digest()}.json"
    kept = sorted(path.name for path in tmp_path.glob("packages_distributions-*.json"))
    assert kept == sorted([written, *older[-(KEEP_PER_KIND - 1) :]])
    assert other_kind.exists() and unrelated.read_text() == "mine"
    assert cached_packages_distributions(compute, tmp_path) and compute.calls == 1  # reading removes nothing
    assert len(list(tmp_path.glob("packages_distributions-*.json"))) == KEEP_PER_KIND


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
import builtins
import transformers
import transformers.utils.import_utils as import_utils
opened, real_open = [], builtins.open
builtins.open = lambda file, *args, **kwargs: opened.append(str(file)) or real_open(file, *args, **kwargs)
import transformers.models  # its __init__ asks for the structure of its own folder, by the path of that file
builtins.open = real_open
folder = os.path.join(os.environ["XDG_CACHE_HOME"], "verl-compact")
files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
structure = import_utils.create_import_structure_from_path
original = getattr(structure, "_verl_original", structure)
models = os.path.join(os.path.dirname(transformers.__file__), "models")
print(json.dumps({"same": import_utils.PACKAGE_DISTRIBUTION_MAPPING == importlib.metadata.packages_distributions(),
                  "cached_structure": structure is not original,
                  "same_structure": structure(models) == original(models),
                  # where the lazy module finds two model classes (without importing them), from that structure
                  "resolves": [transformers._class_to_module.get(name) for name in ("Qwen2ForCausalLM", "Qwen2Config")],
                  "model_sources_read": sum(name.endswith(".py") for name in opened),
                  "files": files, "mtimes": [os.stat(os.path.join(folder, f)).st_mtime_ns for f in files]}))
"""


def _probe(tmp_path, lean: str) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "VERL_LEAN_IMPORTS": lean}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_transformers_reads_the_cached_files_with_the_lean_imports(tmp_path):
    off = _probe(tmp_path, "0")
    assert (off["same"], off["cached_structure"], off["files"]) == (True, False, [])
    assert off["model_sources_read"] > 1000  # transformers reads every model folder's files
    first = _probe(tmp_path, "1")
    assert first["same"] and first["cached_structure"] and first["same_structure"]
    assert first["model_sources_read"] == 0
    assert first["resolves"] == off["resolves"] == ["models.qwen2.modeling_qwen2", "models.qwen2.configuration_qwen2"]
    assert [name.split("-")[0] for name in first["files"]] == ["packages_distributions", "transformers_models"]
    assert _probe(tmp_path, "1") == first  # the second process reads the same files, rewriting neither


def _models_folder() -> str:
    import transformers

    return os.path.join(os.path.dirname(transformers.__file__), "models")


def _original_structure():
    from transformers.utils import import_utils

    function = import_utils.create_import_structure_from_path
    return getattr(function, "_verl_original", function)


def test_the_models_structure_is_transformers_own_and_is_read_back(tmp_path):
    calls = []

    def compute(folder):
        calls.append(folder)
        return _original_structure()(folder)

    models = _models_folder()
    expected = _original_structure()(models)
    first = cached_import_structure(models, compute, tmp_path)
    assert first == expected and calls == [models]
    assert first["qwen2"][frozenset({"torch"})]["modeling_qwen2"] >= {"Qwen2ForCausalLM", "Qwen2Model"}
    (cache_file,) = tmp_path.iterdir()
    assert cache_file.name == f"transformers_models-{source_tree_digest(models)}.json"
    assert cached_import_structure(models, compute, tmp_path) == expected and len(calls) == 1  # read, not computed


def test_an_edited_added_or_removed_source_file_changes_the_digest(tmp_path):
    tree = tmp_path / "models"
    (tree / "tiny").mkdir(parents=True)
    source = tree / "tiny" / "modeling_tiny.py"
    source.write_text('__all__ = ["TinyModel"]\n')
    calls = []

    def compute(folder):
        calls.append(folder)
        return {"tiny": {frozenset({"torch"}): {"modeling_tiny": set(source.read_text().split('"')[1::2])}}}

    digests = [source_tree_digest(str(tree))]
    assert cached_import_structure(str(tree), compute, tmp_path / "cache")["tiny"][frozenset({"torch"})] == {
        "modeling_tiny": {"TinyModel"}
    }
    source.write_text('__all__ = ["TinyModel", "TinyForCausalLM"]\n')  # an edit (another size)
    digests.append(source_tree_digest(str(tree)))
    edited = cached_import_structure(str(tree), compute, tmp_path / "cache")
    assert edited["tiny"][frozenset({"torch"})]["modeling_tiny"] == {"TinyModel", "TinyForCausalLM"}
    (tree / "tiny" / "configuration_tiny.py").write_text("")
    digests.append(source_tree_digest(str(tree)))
    (tree / "tiny" / "configuration_tiny.py").unlink()
    assert len(set(digests)) == 3 and source_tree_digest(str(tree)) == digests[1]
    assert len(calls) == 2  # one computation per state asked for


def test_a_structure_of_another_shape_is_returned_but_not_cached(tmp_path):
    odd = {"tiny": {("torch",): {"modeling_tiny": ["TinyModel"]}}}  # a tuple key: not what transformers builds today
    assert cached_import_structure(str(tmp_path), lambda folder: odd, tmp_path / "cache") is odd
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ZeroDivisionError):  # the computation's own errors are not hidden
        cached_import_structure(str(tmp_path), lambda folder: 1 / 0, tmp_path / "cache")
