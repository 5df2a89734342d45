# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The directories a run writes outside its checkpoint folder, for a home that cannot be written (a read-only pod).

datasets (`~/.cache/huggingface/datasets`), vLLM and Triton (`~/.cache/vllm`, `~/.triton`) and Ray (`~/.ray/auth_token`)
read their place from an environment variable at import, so `use_writable_dirs` runs in the entry points first: an
unwritable default moves under a private temporary folder, with a warning naming the variable; an unwritable place
the user chose is an error naming the variable.
"""

import logging
import os
import secrets
import tempfile


logger = logging.getLogger(__name__)


class UnwritableDirectoryError(OSError):
    """A directory the user chose through an environment variable cannot be written."""


def _cache_home() -> str:
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def datasets_cache_dir() -> tuple[str, str]:
    """Where `datasets` caches parsed files, and the variable that named it (the most specific one set)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return os.environ["HF_DATASETS_CACHE"], "HF_DATASETS_CACHE"
    chosen_by = next((name for name in ("HF_HOME", "XDG_CACHE_HOME") if os.environ.get(name)), "")
    hf_home = os.environ.get("HF_HOME") or os.path.join(_cache_home(), "huggingface")
    return os.path.join(hf_home, "datasets"), chosen_by


def unwritable_reason(directory: str) -> str | None:
    """None when a file can be created in `directory` (made if missing), else the OS's reason."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".verl-write-test-")
        os.close(fd)
        os.remove(probe)
    except OSError as error:
        return error.strerror or str(error)
    return None


def cache_error(directory: str, variable: str, reason: str, what: str) -> str:
    """The message for `what`'s unwritable cache `directory` (named by `variable`, or by default when empty)."""
    chosen = f"set by {variable}" if variable else "the default"
    return (
        f"{what} needs to write to {directory} ({chosen}), which cannot be written ({reason}): "
        f"a read-only home directory? Point {variable or 'it'} at a writable directory."
    )


def _fallback_root() -> str:
    root = os.path.join(tempfile.gettempdir(), f"verl-cache-{os.getuid()}")
    os.makedirs(root, mode=0o700, exist_ok=True)
    return root


def _move_if_unwritable(default: str, variable: str, what: str, subdir: str, also: str = "") -> None:
    """Point `variable` at `subdir` of the fallback root when `default` (its value when unset) cannot be written."""
    if os.environ.get(variable):
        reason = unwritable_reason(os.environ[variable])
        if reason is not None:
            raise UnwritableDirectoryError(cache_error(os.environ[variable], variable, reason, what))
        return
    reason = unwritable_reason(default)
    if reason is None:
        return
    moved = os.path.join(_fallback_root(), subdir)
    os.makedirs(moved, exist_ok=True)
    os.environ[variable] = moved
    logger.warning(
        "%s cannot write to %s (%s; a read-only home directory?): it uses %s for this run. Set %s%s to choose.",
        what,
        default,
        reason,
        moved,
        variable,
        also,
    )


def use_writable_dirs(starts_ray: bool) -> None:
    """Before datasets, vLLM, Triton and Ray are imported: check or move every directory they write by default.
    `starts_ray`: this process starts its own Ray (no RAY_ADDRESS)."""
    datasets_dir, chosen_by = datasets_cache_dir()
    reason = unwritable_reason(datasets_dir) if chosen_by in ("HF_HOME", "XDG_CACHE_HOME") else None
    if reason is not None:  # a place the user chose: an error, not a move
        raise UnwritableDirectoryError(cache_error(datasets_dir, chosen_by, reason, "The datasets library"))
    _move_if_unwritable(datasets_dir, "HF_DATASETS_CACHE", "The datasets library", "datasets", " (or HF_HOME)")
    _move_if_unwritable(os.path.join(_cache_home(), "vllm"), "VLLM_CACHE_ROOT", "vLLM", "vllm", " (or XDG_CACHE_HOME)")
    triton_dir = os.path.join(os.path.expanduser("~"), ".triton", "cache")
    _move_if_unwritable(triton_dir, "TRITON_CACHE_DIR", "Triton", "triton")
    if starts_ray:
        _move_if_unwritable(os.environ.get("TMPDIR") or "/tmp", "RAY_TMPDIR", "Ray", "ray", " (or TMPDIR)")
        _ray_token_path()


def _ray_token_path() -> None:
    """Where ~/.ray/auth_token cannot be written, write Ray's token under the fallback root and name it in
    RAY_AUTH_TOKEN_PATH (authentication stays on)."""
    if any(os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    default = os.path.join(os.path.expanduser("~"), ".ray")
    reason = None if os.path.isfile(os.path.join(default, "auth_token")) else unwritable_reason(default)
    if reason is None:
        return
    path = os.path.join(_fallback_root(), "ray_auth_token")
    if not os.path.isfile(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = path
    logger.warning(
        "Ray cannot save its authentication token in %s (%s; a read-only home directory?): it uses %s for this "
        "run. Set RAY_AUTH_TOKEN_PATH to choose.",
        default,
        reason,
        path,
    )
