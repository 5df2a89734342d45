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
"""Checkpoint bookkeeping of the driver: where the latest and best checkpoints are, and which to delete.

Layout under trainer.save_checkpoint_path:

    global_step_N/actor/...        written by the workers (verl/utils/checkpoint), complete before it is renamed
    global_step_N/critic/...
    global_step_N/dataloader.pt    the StatefulDataLoader state
    global_step_N/trainer_state.json
    checkpoint_tracker.json        {"last_global_step", "best_global_step", "best_val_score", "history"}

The tracker is replaced atomically and written last, so a crash during a save never names a half-written
checkpoint as the latest.
"""

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field


TRACKER_FILE = "checkpoint_tracker.json"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


@dataclass
class CheckpointTracker:
    last_global_step: int = 0
    best_global_step: int | None = None
    best_val_score: float | None = None
    val_scores: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, save_root: str) -> "CheckpointTracker | None":
        path = os.path.join(save_root, TRACKER_FILE)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"Checkpoint tracker '{path}' is corrupt ({err}); delete it or set "
                    "trainer.load_checkpoint_path to a global_step_N directory."
                ) from None
        return cls(**data)

    def save(self, save_root: str) -> None:
        os.makedirs(save_root, exist_ok=True)
        tmp = os.path.join(save_root, f".{TRACKER_FILE}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(save_root, TRACKER_FILE))

    def record(self, step: int, val_score: float | None) -> None:
        self.last_global_step = step
        if val_score is not None:
            self.val_scores[str(step)] = val_score
            if self.best_val_score is None or val_score > self.best_val_score:
                self.best_val_score, self.best_global_step = val_score, step


def step_dir(save_root: str, step: int) -> str:
    return os.path.join(save_root, f"global_step_{step}")


def saved_steps(save_root: str) -> list[int]:
    if not os.path.isdir(save_root):
        return []
    return sorted(int(m.group(1)) for name in os.listdir(save_root) if (m := STEP_DIR.match(name)))


def find_last_checkpoint(save_root: str) -> str | None:
    """The checkpoint the tracker names as latest, if it exists on disk."""
    tracker = CheckpointTracker.load(save_root)
    if tracker is None or tracker.last_global_step <= 0:
        return None
    path = step_dir(save_root, tracker.last_global_step)
    return path if os.path.isdir(path) else None


def step_of(path: str) -> int:
    match = STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise ValueError(f"Checkpoint path '{path}' must end with global_step_N.")
    return int(match.group(1))


def remove_obsolete_checkpoints(save_root: str, save_limit: int, tracker: CheckpointTracker) -> list[int]:
    """Keep the newest `save_limit` checkpoints plus the best by validation score; return the removed steps."""
    if save_limit <= 0:
        return []
    steps = saved_steps(save_root)
    keep = set(steps[-save_limit:])
    if tracker.best_global_step is not None:
        keep.add(tracker.best_global_step)
    removed = [step for step in steps if step not in keep]
    for step in removed:
        shutil.rmtree(step_dir(save_root, step), ignore_errors=True)
    return removed
