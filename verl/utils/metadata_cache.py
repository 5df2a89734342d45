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
"""`importlib.metadata.packages_distributions()`, computed once per set of installed packages.

transformers calls it when it is imported, to map import names to distribution names: it reads the metadata of
every installed distribution, ~0.4-0.5 CPU-seconds in each process of a run with this project's dependencies (the
driver, every Ray worker, every script). `use_cached_packages_distributions` replaces the function with one that
keeps its answer in a JSON file under the user's cache directory (`$XDG_CACHE_HOME/verl-compact`, else
`~/.cache/verl-compact`), named by a digest of the installed distributions: the `*.dist-info` and `*.egg-info`
entries of every folder on sys.path, with their modification times. Installing, upgrading or removing a package
changes the digest, and the next process computes the mapping again. Where the cache cannot be written, each
process computes it as before. It is on with the lean imports (VERL_LEAN_IMPORTS=0 turns both off).
"""

import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path


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


def cached_packages_distributions(
    compute: Callable[[], Mapping[str, list[str]]], directory: Path | None = None
) -> dict[str, list[str]]:
    """`compute()`'s mapping, read from the cache file of the installed distributions or computed and written there."""
    path = (directory or cache_dir()) / f"packages_distributions-{installed_distributions_digest()}.json"
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(mapping, dict) and all(isinstance(names, list) for names in mapping.values()):
            return mapping
    except (OSError, ValueError):
        pass
    mapping = {name: list(distributions) for name, distributions in compute().items()}
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            temporary = f.name
            json.dump(mapping, f)
        os.replace(temporary, path)  # whole or not at all, for processes that start together
    except OSError:
        if temporary is not None and os.path.exists(temporary):  # a full disk: leave no partial file behind
            os.unlink(temporary)
    return mapping


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
