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
"""What transformers computes in every process from files that change only when packages are installed, kept in
files under the user's cache directory (`$XDG_CACHE_HOME/verl-compact`, else `~/.cache/verl-compact`).

1. `importlib.metadata.packages_distributions()`: transformers calls it when it is imported, to map import names to
   distribution names. It reads the metadata of every installed distribution, ~0.4-0.5 CPU-seconds in each process
   of a run with this project's dependencies (the driver, every Ray worker, every script).
   `use_cached_packages_distributions` replaces the function with one that keeps its answer in a JSON file named by a
   digest of the installed distributions: the `*.dist-info` and `*.egg-info` entries of every folder on sys.path,
   with their modification times. Installing, upgrading or removing a package changes the digest, and the next
   process computes the mapping again.
2. transformers' import structure of its `models` package: it reads all ~1,600 source files of its ~500 model
   folders for their `__all__` lists (~0.4 CPU-seconds each time), once at `import transformers` and once more when
   `transformers.models` is imported (every process that loads a model class or a tokenizer does).
   `use_cached_import_structure` keeps that structure in a JSON file named by a digest of the files (each path,
   size and modification time), so an upgrade or an edit of transformers computes it again. Listing the files and
   reading the cache cost ~0.1 s: `import transformers` measured 0.65 instead of 0.99 CPU-seconds, and importing a
   model class and a tokenizer after torch 2.4-2.7 instead of 2.7-3.1.

Each write removes the oldest files of its kind beyond the four most recent. Where the cache cannot be written,
each process computes as before. Both are on with the lean imports
(VERL_LEAN_IMPORTS=0 turns them off).
"""

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


logger = logging.getLogger(__name__)


_METADATA_SUFFIXES = (".dist-info", ".egg-info")


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "verl-compact"


def installed_distributions_digest() -> str:
    """A digest of the distributions installed on sys.path: each metadata entry's folder, name and modification
    time. Listing the folders takes milliseconds; reading the metadata is what the cache saves."""
    entries = []
    for folder in sys.path:
        try:
            with os.scandir(folder or ".") as scan:
                for entry in scan:
                    if entry.name.endswith(_METADATA_SUFFIXES):
                        entries.append((folder, entry.name, entry.stat(follow_symlinks=False).st_mtime_ns))
        except OSError:  # a zip file, a missing folder
            continue
    return hashlib.sha256(repr((sys.version, sorted(entries))).encode()).hexdigest()[:24]


KEEP_PER_KIND = 4
"""Cache files kept per kind (the name before the digest): each install or upgrade writes a new one, and the oldest
beyond this many are removed as it is written; a removed one that is still in use is computed and written again."""


def _prune_older(path: Path) -> None:
    """Remove the files of `path`'s kind in its folder beyond the KEEP_PER_KIND most recently written."""
    kind = path.name.rsplit("-", 1)[0] + "-"
    siblings = []
    for sibling in path.parent.glob(f"{kind}*.json"):
        try:
            siblings.append((sibling.stat().st_mtime_ns, sibling))
        except OSError:  # removed by another process meanwhile
            continue
    for _, old in sorted(siblings, reverse=True)[KEEP_PER_KIND:]:
        if old != path:
            old.unlink(missing_ok=True)


def _read_or_compute(path: Path, compute: Callable[[], Any], decode: Callable[[Any], Any]) -> Any:
    """`decode` of the JSON in `path`, or else `compute()`'s JSON value, written to `path` (atomically) and decoded.
    A file that does not decode (corrupt, or from another version of this code) is computed and written again, and
    each write removes the oldest files of its kind beyond KEEP_PER_KIND."""
    try:
        return decode(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        pass
    value = compute()
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            temporary = f.name
            json.dump(value, f)
        os.replace(temporary, path)  # whole or not at all, for processes that start together
        _prune_older(path)
    except OSError:
        if temporary is not None and os.path.exists(temporary):  # a full disk: leave no partial file behind
            os.unlink(temporary)
    return decode(value)


def _mapping(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict) or not all(isinstance(names, list) for names in value.values()):
        raise ValueError("not a mapping of import names to distribution lists")
    return value


def cached_packages_distributions(
    compute: Callable[[], Mapping[str, list[str]]], directory: Path | None = None
) -> dict[str, list[str]]:
    """`compute()`'s mapping, read from the cache file of the installed distributions or computed and written there."""
    path = (directory or cache_dir()) / f"packages_distributions-{installed_distributions_digest()}.json"

    def computed() -> dict[str, list[str]]:
        return {name: list(distributions) for name, distributions in compute().items()}

    return _read_or_compute(path, computed, _mapping)


def use_cached_packages_distributions() -> None:
    """Make `importlib.metadata.packages_distributions` answer from the cache in this process (once)."""
    original = importlib.metadata.packages_distributions
    if getattr(original, "_verl_cached", False):
        return

    def packages_distributions() -> Mapping[str, list[str]]:
        return cached_packages_distributions(original)

    packages_distributions._verl_cached = True  # type: ignore[attr-defined]
    packages_distributions.__doc__ = original.__doc__
    importlib.metadata.packages_distributions = packages_distributions


# ---------------------------------------------------------------------------------------------- import structure
_IMPORT_UTILS = "transformers.utils.import_utils"


def source_tree_digest(folder: str) -> str:
    """A digest of the files under `folder` (each relative path, size and modification time; caches left out)."""
    entries = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        for name in files:
            try:
                stat = os.stat(os.path.join(root, name))
            except OSError:
                continue
            entries.append((os.path.relpath(os.path.join(root, name), folder), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(repr((sys.version, os.path.abspath(folder), sorted(entries))).encode()).hexdigest()[:24]


def encode_structure(value: Any) -> Any:
    """transformers' import structure (dicts keyed by names or frozensets of backends, sets of names) as JSON."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if isinstance(key, str):
                items.append([key, encode_structure(item)])
            elif isinstance(key, frozenset) and all(isinstance(name, str) for name in key):
                items.append([{"backends": sorted(key)}, encode_structure(item)])
            else:
                raise TypeError(f"unexpected import-structure key {key!r}")
        return {"dict": items}
    if isinstance(value, (set, frozenset)) and all(isinstance(name, str) for name in value):
        return {"set": sorted(value)}
    raise TypeError(f"unexpected import-structure value {type(value).__name__}")


def decode_structure(value: Any) -> Any:
    if "set" in value:
        return set(value["set"])
    return {
        (key if isinstance(key, str) else frozenset(key["backends"])): decode_structure(item)
        for key, item in value["dict"]
    }


def cached_import_structure(folder: str, compute: Callable[[str], Any], directory: Path | None = None) -> Any:
    """`compute(folder)` (transformers' create_import_structure_from_path), read from the cache file of `folder`'s
    files or computed and written there. A structure of another shape is computed and returned, not cached."""
    path = (directory or cache_dir()) / f"transformers_models-{source_tree_digest(folder)}.json"
    computed: list[Any] = []

    def compute_encoded() -> Any:
        computed.append(compute(folder))
        return encode_structure(computed[0])

    try:
        return _read_or_compute(path, compute_encoded, decode_structure)
    except TypeError:  # a newer transformers with another structure: keep its own answer
        logger.debug("transformers' import structure of %s is not cached: unexpected shape", folder, exc_info=True)
        return computed[0] if computed else compute(folder)


def _cache_models_structure(import_utils: Any) -> None:
    """Wrap `import_utils.create_import_structure_from_path` so that transformers' `models` folder is read from the
    cache, whether it is named as the folder (transformers' `__init__`) or as a file in it (`models/__init__.py`
    names its own file: transformers takes a file's folder); every other folder (each model's own `__init__`) is
    computed as before."""
    original = getattr(import_utils, "create_import_structure_from_path", None)
    if original is None or getattr(original, "_verl_cached", False):
        return
    models = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(import_utils.__file__))), "models")

    @functools.lru_cache
    def create_import_structure_from_path(module_path: Any) -> Any:
        path = os.path.abspath(str(module_path))
        if (os.path.dirname(path) if os.path.isfile(path) else path) != models:
            return original(module_path)
        return cached_import_structure(models, original)

    create_import_structure_from_path._verl_cached = True  # type: ignore[attr-defined]
    create_import_structure_from_path._verl_original = original  # type: ignore[attr-defined]
    create_import_structure_from_path.__doc__ = original.__doc__
    import_utils.create_import_structure_from_path = create_import_structure_from_path


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds module `name` as the path finder does, and runs `then(module)` right after the module's own code, before
    the import that asked for it goes on (once)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, then = loader.exec_module, self.then

        def exec_then(module: Any) -> None:
            exec_module(module)
            try:
                then(module)
            except Exception:  # the cache is an optimisation: transformers works as before without it
                logger.debug("could not cache transformers' import structure", exc_info=True)

        loader.exec_module = exec_then
        return spec


def use_cached_import_structure() -> None:
    """Cache transformers' import structure of its models (see the module docstring) in this process, from before
    transformers is imported; nothing where transformers is imported already (it has read its files by then)."""
    if _IMPORT_UTILS in sys.modules:
        return
    if any(isinstance(finder, _AfterImport) and finder.name == _IMPORT_UTILS for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _AfterImport(_IMPORT_UTILS, _cache_models_structure))
