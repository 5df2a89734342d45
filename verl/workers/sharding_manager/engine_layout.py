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
"""Where each of the actor's (Hugging Face) parameters lands among the vLLM engine's own parameters.

`worker.rollout.weight_sync=direct` copies the actor's tensors into the engine's own parameters instead of calling
vLLM's per-parameter loader (docs/gpu.md): vLLM fuses some projections into one parameter (its model's
`packed_modules_mapping`, e.g. q/k/v into qkv_proj and gate/up into gate_up_proj), their parts stacked along dim 0
in the mapping's order; every other parameter keeps its name, and a tied output head has no parameter of its own.
The placements are computed once per actor from names and shapes (`EngineCopy`); each sync then copies every tensor
into its rows. The CPU engine repacks its linear weights (their parameters are empty), so there the layout is
refused and the copy is checked on a GPU; text models with one engine per process (tensor_parallel_size=1) only (a
vision-language model's names also go through vLLM's `hf_to_vllm_mapper`).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Placement:
    """Rows [offset, offset + rows) of the engine parameter `engine_name` hold one actor parameter."""

    engine_name: str
    offset: int
    rows: int


def engine_placements(
    actor_shapes: Mapping[str, Sequence[int]],
    engine_names: Iterable[str],
    packed: Mapping[str, Sequence[str]],
    tied_head: bool,
) -> dict[str, Placement]:
    """The placement of every actor parameter (a tied `lm_head.weight` has none and is left out).

    Raises KeyError naming an actor parameter that lands on no engine parameter: a model the mapping does not know,
    for which the sync must keep vLLM's loader.
    """
    names = set(engine_names)
    part_of = {part: (fused, list(parts)) for fused, parts in packed.items() for part in parts}
    placements: dict[str, Placement] = {}
    for name, shape in actor_shapes.items():
        module, _, leaf = name.rpartition(".")
        parent, _, projection = module.rpartition(".")
        if projection in part_of:
            fused, parts = part_of[projection]
            before = parts[: parts.index(projection)]
            offset = sum(int(actor_shapes[f"{parent}.{part}.{leaf}"][0]) for part in before)
            placement = Placement(f"{parent}.{fused}.{leaf}", offset, int(shape[0]))
        else:
            placement = Placement(name, 0, int(shape[0]) if len(shape) else 1)
        if placement.engine_name not in names:
            if tied_head and name.endswith("lm_head.weight"):
                continue
            raise KeyError(
                f"The actor's parameter {name} lands on no parameter of the engine ({placement.engine_name}); "
                "this model's layout is not known to the direct weight copy: vLLM's loader must sync it."
            )
        placements[name] = placement
    return placements


def layout_gaps(placements: Mapping[str, Placement], engine_shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Engine parameters the placements do not fill exactly: none of the actor's lands there, or (where the engine
    parameter has rows, unlike the CPU engine's repacked linear weights) the parts do not tile its rows."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for placement in placements.values():
        rows.setdefault(placement.engine_name, []).append((placement.offset, placement.rows))
    gaps = []
    for name, shape in engine_shapes.items():
        parts = sorted(rows.get(name, []))
        if not parts:
            gaps.append(f"{name}: no actor parameter")
            continue
        if not shape or int(shape[0]) == 0:
            continue
        ends = [offset + count for offset, count in parts]
        tiles = parts[0][0] == 0 and all(end == nxt for end, (nxt, _) in zip(ends, parts[1:]))
        if not tiles or ends[-1] != int(shape[0]):
            gaps.append(f"{name}: rows {parts} do not tile its {int(shape[0])} rows")
    return gaps


class LayoutError(KeyError):
    """The engine's parameters do not take the actor's tensors by rows: the sync must use vLLM's loader."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _check_rows(
    placements: Mapping[str, Placement], actor_shapes: Mapping[str, Sequence[int]], engine: Mapping
) -> None:
    for name, placement in placements.items():
        target = tuple(engine[placement.engine_name].shape)
        shape = tuple(int(size) for size in actor_shapes[name])
        if not target or target[1:] != shape[1:] or placement.offset + placement.rows > target[0]:
            raise LayoutError(
                f"The engine parameter {placement.engine_name} (shape {list(target)}) cannot take the actor's {name} "
                f"(shape {list(shape)}) at rows {placement.offset}..{placement.offset + placement.rows}: the engine "
                "keeps it in another layout (the CPU engine repacks its linear weights)."
            )


class EngineCopy:
    """The direct weight copy into one engine's parameters (see the module docstring).

    `parameters` returns the engine model's live parameters by name (looked up at each sync: cheap, and never stale
    across the engine's sleep and wake); `packed` is its `packed_modules_mapping`. Raises LayoutError, naming the
    parameter, where the actor's tensors do not fit the engine's by rows.
    """

    def __init__(
        self,
        parameters: Any,
        packed: Mapping[str, Sequence[str]],
        actor_shapes: Mapping[str, Sequence[int]],
        tied_head: bool,
    ) -> None:
        self.parameters = parameters
        engine = parameters()
        try:
            self.placements = engine_placements(actor_shapes, engine.keys(), packed, tied_head)
        except KeyError as error:
            raise LayoutError(error.args[0]) from None
        gaps = layout_gaps(self.placements, {name: tuple(param.shape) for name, param in engine.items()})
        if gaps:
            raise LayoutError(f"The actor's tensors do not fill the engine's parameters: {'; '.join(gaps[:3])}.")
        _check_rows(self.placements, actor_shapes, engine)
        self.skipped = {name for name in actor_shapes if name not in self.placements}  # a tied head

    @torch.no_grad()
    def copy(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy each (actor name, full tensor) into its rows of the engine's parameters; returns the engine
        parameters written. Asynchronous on the device (the copies are queued on the current stream)."""
        engine = self.parameters()
        written = set()
        for name, tensor in weights:
            if name in self.skipped:
                continue
            placement = self.placements[name]
            target = engine[placement.engine_name].data
            target = target.narrow(0, placement.offset, placement.rows) if target.dim() else target
            target.copy_(tensor.view(target.shape), non_blocking=True)
            written.add(placement.engine_name)
        return written
