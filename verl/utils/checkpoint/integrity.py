# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The integrity record of a checkpoint step: what every file of `global_step_N/` was when the save finished.

A checkpoint damaged afterwards (a truncated copy, a quota hit, a lost file) used to fail deep inside DCP on the
workers, naming neither step nor file. The save writes `integrity.json` last (before the tracker): every file's size,
and a CRC-32 of the small ones (hashing every shard would cost minutes). `damage` checks a step before Ray starts.
"""

import json
import os
import zlib

from verl.utils.files import atomic_write


INTEGRITY_FILE = "integrity.json"
CHECKSUM_MAX_BYTES = 64 * 2**20
"""Files up to this size get a CRC-32 as well as their size."""


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return crc


def write_record(step_path: str, under: str = "", leave_out: tuple[str, ...] = ()) -> None:
    """Record every file of the finished step `step_path` (written with `atomic_write`, flushed to disk). With
    `under` (e.g. "actor/huggingface", where model_merger exports by default), only the files below it are recorded
    anew and the rest of the existing record is kept (nothing is written for a step without one). Files whose names
    end with one of `leave_out` are not recorded (an export's weights: no part of the checkpoint, so removing them
    leaves it intact)."""
    prefix = under.rstrip("/") + os.sep if under else ""
    record_path = os.path.join(step_path, INTEGRITY_FILE)
    files = {}
    if prefix:
        if not os.path.isfile(record_path):
            return
        with open(record_path, encoding="utf-8") as f:
            files = {name: entry for name, entry in json.load(f)["files"].items() if not name.startswith(prefix)}
    for root, dirs, names in os.walk(step_path):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, step_path)
            if relative != INTEGRITY_FILE and relative.startswith(prefix) and not name.endswith(leave_out):
                size = os.path.getsize(path)
                files[relative] = {"size": size, **({"crc32": _crc32(path)} if size <= CHECKSUM_MAX_BYTES else {})}
    atomic_write(record_path, lambda f: json.dump({"version": 1, "files": files}, f, indent=1))


def damage(step_path: str, under: str = "") -> str | None:
    """What is wrong with step `step_path` against its record (only files under `under`, e.g. "actor", if given): a
    missing, truncated, grown or changed file, or an unreadable record; None when it matches or has no record."""
    record_path = os.path.join(step_path, INTEGRITY_FILE)
    if not os.path.isfile(record_path):
        return None
    try:
        with open(record_path, encoding="utf-8") as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"its integrity record {record_path} cannot be read ({error})"
    prefix = under.rstrip("/") + os.sep if under else ""
    for relative, expected in files.items():
        if not relative.startswith(prefix):
            continue
        path = os.path.join(step_path, relative)
        if not os.path.isfile(path):
            return f"{path} is missing"
        size = os.path.getsize(path)
        if size != expected["size"]:
            change = "truncated" if size < expected["size"] else "grown"
            return f"{path} is {size} bytes, {change} from the {expected['size']} bytes the save wrote"
        if "crc32" in expected and _crc32(path) != expected["crc32"]:
            return f"{path} has changed since the save (its CRC-32 differs)"
    return None
