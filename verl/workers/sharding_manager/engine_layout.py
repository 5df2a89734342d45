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

The first half of a weight sync that copies into the engine's storage instead of calling vLLM's per-parameter
loader (docs/gpu.md): vLLM fuses some projections into one parameter (its model's `packed_modules_mapping`, e.g.
q/k/v into qkv_proj and gate/up into gate_up_proj), their parts stacked along dim 0 in the mapping's order; every
other parameter keeps its name, and a tied output head has no parameter of its own. Computed once per actor from
names and shapes. Not used by the sync yet: the CPU engine repacks its linear weights (their parameters are empty),
so the copy itself can only be checked on a GPU; text models only (a vision-language model's names also go through
vLLM's `hf_to_vllm_mapper`).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


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
