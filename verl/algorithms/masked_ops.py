# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Masked statistics over right-padded response tokens, and the loss aggregation modes.
`agg_loss` decides how tokens and sequences are weighted, which is where GRPO, DAPO and Dr.GRPO differ: a wrong
normaliser silently changes the algorithm."""

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from verl.algorithms.user_functions import Kind, Where, add_kind, check_positional, register_once, require_known


Count = float | int | torch.Tensor


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(v * m) / sum(m) over `dim` (everything when None); an all-zero mask gives 0, not NaN, so an empty response
    cannot poison the batch."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=torch.finfo(values.dtype).tiny)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Masked variance, unbiased unless `unbiased` is False (no Bessel correction for a single entry)."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    if count.item() == 0:
        raise ValueError("masked_var needs at least one unmasked element, but the mask is all zeros.")
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased and count.item() > 1:
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(v - mean) / sqrt(var + eps) over the masked entries (`shift_mean=False` adds the mean back).
    Entries outside the mask are transformed too; callers multiply by the mask."""
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + eps)
    return whitened if shift_mean else whitened + mean


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """The float mask (B, L) of the response tokens whose entropy is at or above the (1 - `keep_fraction`) quantile of
    the entropies under `mask` ("Beyond the 80/20 Rule", arXiv 2506.01939; TRL's top_entropy_quantile): 1 keeps every
    token, 0 only the highest-entropy one(s). Ties at the threshold are kept. No token under the mask: all zeros.
    This process's tokens alone; the actor takes the cut-off over every rank (`top_fraction_cutoff`)."""
    mask = mask.bool()
    cutoff = top_fraction_cutoff(entropy.detach()[mask], keep_fraction, group=_ALONE)
    return ((entropy.detach() >= cutoff) & mask).float()


_ALONE = object()
"""`top_fraction_cutoff`'s group for this process's values alone."""


def top_fraction_cutoff(values: torch.Tensor, keep_fraction: float, group: Any = None, copies: int = 1) -> float:
    """The cut-off that keeps the top `keep_fraction` of `values` over every rank of `group` (the values >= it): the
    (1 - keep_fraction) quantile torch.quantile gives, 1 + floor(keep_fraction x (N - 1)) of the N values, ties at
    the cut-off kept; -inf keeps all, inf (no values) none. Each rank of `group` holds its own values, `copies` ranks
    the same ones (a sequence-parallel group; group None: every process); found by bisection on the counts above a
    candidate, so no rank gathers the others' values (a mini-batch's response tokens can be hundreds of millions)."""
    import torch.distributed as dist

    alone = group is _ALONE or not (dist.is_available() and dist.is_initialized())
    spread = not alone and dist.get_world_size(group) > 1  # group None: every process
    local = values.detach().double().flatten().sort().values  # sorted once: each count is a binary search

    def reduced(numbers: list[float] | torch.Tensor, op: Any = None) -> list[float]:
        tensor = torch.as_tensor(numbers, dtype=torch.float64).cpu()  # a few numbers: the host's backend reduces them
        if spread:
            dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=group)
        return tensor.tolist()

    (total,) = reduced([local.numel() / copies])
    if total == 0:
        return math.inf
    if keep_fraction >= 1.0:
        return -math.inf
    need = 1 + math.floor(keep_fraction * (total - 1))
    low, high = (-math.inf, -math.inf) if local.numel() == 0 else (-local[0].item(), local[-1].item())
    max_op = dist.ReduceOp.MAX if spread else None
    low, high = reduced([low, high], max_op)  # the smallest value (negated) and the largest, over the ranks
    low = -low

    def count_from(cutoff: float) -> float:
        above = local.numel() - torch.searchsorted(local, cutoff).item()  # the values >= cutoff
        return reduced([above / copies])[0]

    if count_from(high) >= need:  # the largest value, with its ties, is enough
        return high
    # invariant: count_from(low) >= need > count_from(high); the cut-off is the largest value with count >= need
    for _ in range(100):
        middle = (low + high) / 2
        if middle <= low or middle >= high:
            break
        low, high = (middle, high) if count_from(middle) >= need else (low, middle)
    return low


def loss_token_counts(response_mask: torch.Tensor) -> tuple[float, float]:
    """(token count, sequence count with >= 1 response token) of one micro-batch; a worker sums them over the
    mini-batch and ranks and passes them to `agg_loss` as `global_token_count` / `global_seq_count`."""
    mask = response_mask.to(torch.float32)
    return mask.sum().item(), (mask.sum(dim=-1) > 0).sum().item()


def _check_count(name: str, count: Count | None) -> None:
    if isinstance(count, (int, float)) and count <= 0:
        raise ValueError(
            f"{name} must be positive, got {count}; it is the count over the whole mini-batch, so a mini-batch "
            "without response tokens cannot be normalised."
        )


LossAggFn = Callable[[torch.Tensor, torch.Tensor, Count, Count, int], torch.Tensor]
"""(per-sequence masked token sums (B,), per-sequence token counts (B,), tokens N, sequences S, max_response_length)
-> the aggregated loss."""

_LOSS_AVG_MODES: dict[str, LossAggFn] = {
    "token-mean": lambda sums, lengths, tokens, seqs, max_len: sums.sum() / tokens,
    "token-sum": lambda sums, lengths, tokens, seqs, max_len: sums.sum(),
    "seq-mean-token-mean": lambda sums, lengths, tokens, seqs, max_len: (sums / lengths.clamp(min=1.0)).sum() / seqs,
    "seq-mean-token-sum": lambda sums, lengths, tokens, seqs, max_len: sums.sum() / seqs,
    "seq-mean-token-sum-norm": lambda sums, lengths, tokens, seqs, max_len: (sums / float(max_len)).sum() / seqs,
}
"""The built-in aggregations (formulas in `agg_loss`); `register_loss_avg_mode` adds more."""
BUILT_IN_LOSS_AVG_MODES = frozenset(_LOSS_AVG_MODES)
"""Each sums its rows' shares apart (a row of zero loss adds nothing and changes no other row's share); a user's may
read every row's length (worker.actor.skip_zero_advantage_rows applies to these only)."""


def register_loss_avg_mode(name: str) -> Callable[[LossAggFn], LossAggFn]:
    """Register a loss aggregation under `name` (a value of `actor.loss_avg_mode` / `critic.loss_avg_mode`)."""

    def decorator(fn: LossAggFn) -> LossAggFn:
        register_once(_LOSS_AVG_MODES, name, fn, "Loss aggregation")
        return fn

    return decorator


def registered_loss_avg_modes() -> tuple[str, ...]:
    return tuple(_LOSS_AVG_MODES)


def _divisor(count: Count, like: torch.Tensor) -> Count:
    """A micro-batch's own count (a tensor) may be 0: clamp so an empty micro-batch's loss is 0."""
    if isinstance(count, torch.Tensor):
        return count.to(device=like.device, dtype=like.dtype).clamp(min=1.0)
    return count


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_avg_mode: str,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> torch.Tensor:
    """Reduce a (B, L) per-token loss to a scalar according to `loss_avg_mode`.

    With mask m_it, T_i = sum_t m_it, N tokens and S sequences:

    - "token-mean":              sum m l / N                 (DAPO: every token weighs the same)
    - "token-sum":               sum m l                     (no normaliser)
    - "seq-mean-token-mean":     sum_i (sum_t m l / T_i) / S (GRPO: every sequence weighs the same)
    - "seq-mean-token-sum":      sum m l / S
    - "seq-mean-token-sum-norm": sum m l / (S * max_response_length) (Dr.GRPO: no 1/T_i length bias)

    N and S default to this micro-batch's counts. Pass the whole mini-batch's counts (`loss_token_counts`, summed
    over micro-batches and ranks) so that the micro-batch losses sum to the mini-batch loss however it was split; a
    worker multiplies by the world size before `backward` to undo the DP gradient average. Seq-mean modes need
    sequences unsplit. `max_response_length` should be the configured constant, data.max_response_length (default:
    the padded width L, which is the stage's length under data.response_length_schedule)."""
    require_known("loss_avg_mode", _LOSS_AVG_MODES, loss_avg_mode, "loss_avg_mode")
    _check_count("global_token_count", global_token_count)
    _check_count("global_seq_count", global_seq_count)
    mask = loss_mask.to(loss_mat.dtype)
    token_sums = (loss_mat * mask).sum(dim=-1)
    tokens_per_seq = mask.sum(dim=-1)
    token_count = global_token_count if global_token_count is not None else tokens_per_seq.sum()
    seq_count = global_seq_count if global_seq_count is not None else (tokens_per_seq > 0).sum()
    return _LOSS_AVG_MODES[loss_avg_mode](
        token_sums,
        tokens_per_seq,
        _divisor(token_count, token_sums),
        _divisor(seq_count, token_sums),
        max_response_length or loss_mask.shape[-1],
    )


def _register_user_agg(spec: str, function: LossAggFn, where: Where) -> None:
    @functools.wraps(function)
    def checked(sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int) -> torch.Tensor:
        out = where.call(function, sums, lengths, tokens, seqs, max_len)
        return where.tensor(out, "the aggregated loss", ())

    register_loss_avg_mode(spec)(checked)


add_kind(
    "loss_avg_mode",
    Kind(
        label="loss aggregation",
        key="worker.actor.loss_avg_mode",
        signature="def aggregate(token_sums, token_counts, num_tokens, num_seqs, max_response_length) -> 0-dim "
        "torch.Tensor, with token_sums and token_counts (B,) (per sequence: the masked sum of its token losses, its "
        "response tokens) and num_tokens, num_seqs the whole mini-batch's counts",
        check=check_positional(5),
        register=_register_user_agg,
    ),
)
