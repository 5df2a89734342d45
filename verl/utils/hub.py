# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ModelScope as the hub (EasyR1's `USE_MODELSCOPE_HUB=1`): a model or dataset id that is not a local path is fetched
from ModelScope instead of Hugging Face, when the config is loaded, and the run goes on from the local folder.

The cached snapshot is used where there is one, so a run and the run that resumes it load the same files (delete it
from MODELSCOPE_CACHE to fetch a newer revision)."""

import os


HUB_ENV = "USE_MODELSCOPE_HUB"


def use_modelscope() -> bool:
    """Whether USE_MODELSCOPE_HUB asks for ModelScope (1/true/y/yes; unset, 0/false/n/no do not)."""
    value = os.environ.get(HUB_ENV, "").strip().lower()
    if value in ("", "0", "false", "n", "no"):
        return False
    if value in ("1", "true", "y", "yes"):
        return True
    raise ValueError(f"{HUB_ENV}={os.environ[HUB_ENV]!r} is not a switch; give 1 (fetch from ModelScope) or 0.")


def hub_folder(path: str, what: str, repo_type: str = "model") -> str:
    """`path` itself where it exists locally or USE_MODELSCOPE_HUB is off, else the local folder of ModelScope
    repository `path` (`modelscope_folder`)."""
    if os.path.exists(os.path.expanduser(path)) or not use_modelscope():
        return path
    return modelscope_folder(path, what, repo_type)


def modelscope_folder(repo_id: str, what: str, repo_type: str = "model") -> str:
    """The local folder of ModelScope repository `repo_id` (a "model" or "dataset"): the cached snapshot, else one
    downloaded into the cache. ValueError naming `what` (the config key) without the modelscope package or when the
    download fails."""
    try:
        from modelscope import snapshot_download
        from modelscope.hub.errors import CacheNotFound
    except ImportError:
        raise ValueError(
            f"{what}: {HUB_ENV}=1 fetches '{repo_id}' from ModelScope, which needs the modelscope package "
            "(pip install modelscope)."
        ) from None
    try:
        return snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
    except CacheNotFound:
        pass
    try:
        return snapshot_download(repo_id, repo_type=repo_type)
    except Exception as error:  # the hub's errors (network, unknown repository, permission) are many kinds
        raise ValueError(
            f"{what}: '{repo_id}' could not be fetched from ModelScope ({HUB_ENV}=1): {error}. Check the id at "
            "modelscope.cn, or give a local folder."
        ) from None
