# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Masked statistics over response tokens and the loss aggregation modes.

Responses are right-padded to a common length, so every reduction over tokens must ignore the padding. The
aggregation in `agg_loss` also decides how each token and each sequence is weighted in the loss, which is where
GRPO, DAPO and Dr.GRPO differ; getting the normaliser wrong silently changes the algorithm.
"""

import functools
from collections.abc import Callable

import torch

from verl.algorithms.user_functions import Kind, Where, add_kind, check_positional, register_if_spec


Count = float | int | torch.Tensor


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is set (over `dim`, or over everything when `dim` is None)."""
    masked = values * mask.to(values.dtype)
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` over the positions where `mask` is set: sum(v * m) / sum(m).

    An all-zero mask gives 0 rather than NaN, because an empty micro-batch or an empty response must not poison the
    metrics or the loss of the rest of the batch.
    """
    mask = mask.to(values.dtype)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=torch.finfo(values.dtype).tiny)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries: sum(m * (v - mean)^2) / (n - 1) with n = sum(m) (or / n if not unbiased).

    With a single unmasked entry the Bessel correction is skipped (the variance is 0 either way).
    """
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
    """Whiten over the masked entries: (v - mean) / sqrt(var + eps), with the unbiased masked variance.

    With `shift_mean=False` the mean is added back, so only the scale changes. Entries outside the mask are
    transformed too; callers multiply by the mask afterwards.
    """
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + eps)
    return whitened if shift_mean else whitened + mean


def loss_token_counts(response_mask: torch.Tensor) -> tuple[float, float]:
    """The (token count, sequence count) of one micro-batch, as `agg_loss` counts them.

    A worker sums these over the micro-batches of a mini-batch and all-reduces them across ranks, then passes the
    totals as `global_token_count` / `global_seq_count`. A sequence counts when it has at least one response token.
    """
    mask = response_mask.to(torch.float32)
    return mask.sum().item(), (mask.sum(dim=-1) > 0).sum().item()


def _check_count(name: str, count: Count | None) -> None:
    if isinstance(count, (int, float)) and count <= 0:
        raise ValueError(
            f"{name} must be positive, got {count}; it is the count over the whole mini-batch, so a mini-batch "
            "without response tokens cannot be normalised."
        )


LossAggFn = Callable[[torch.Tensor, torch.Tensor, Count, Count, int], torch.Tensor]
"""(per-sequence masked token sums (B,), per-sequence token counts (B,), token count N, sequence count S,
max_response_length) -> the aggregated loss."""

_LOSS_AVG_MODES: dict[str, LossAggFn] = {}


def register_loss_avg_mode(name: str) -> Callable[[LossAggFn], LossAggFn]:
    """Register a loss aggregation under `name` (a value of `actor.loss_avg_mode` and `critic.loss_avg_mode`).

    Config validation reads this registry, so a registered mode can be selected without further changes.
    """

    def decorator(fn: LossAggFn) -> LossAggFn:
        if name in _LOSS_AVG_MODES:
            raise ValueError(f"Loss aggregation {name!r} is already registered; pick another name.")
        _LOSS_AVG_MODES[name] = fn
        return fn

    return decorator


def registered_loss_avg_modes() -> tuple[str, ...]:
    """Names of all registered loss aggregations, in registration order."""
    return tuple(_LOSS_AVG_MODES)


@register_loss_avg_mode("token-mean")
def _token_mean(sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int) -> torch.Tensor:
    return sums.sum() / tokens


@register_loss_avg_mode("token-sum")
def _token_sum(sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int) -> torch.Tensor:
    return sums.sum()


@register_loss_avg_mode("seq-mean-token-mean")
def _seq_mean_token_mean(
    sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int
) -> torch.Tensor:
    return (sums / lengths.clamp(min=1.0)).sum() / seqs


@register_loss_avg_mode("seq-mean-token-sum")
def _seq_mean_token_sum(
    sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int
) -> torch.Tensor:
    return sums.sum() / seqs


@register_loss_avg_mode("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(
    sums: torch.Tensor, lengths: torch.Tensor, tokens: Count, seqs: Count, max_len: int
) -> torch.Tensor:
    return (sums / float(max_len)).sum() / seqs


def _divisor(count: Count, like: torch.Tensor) -> Count:
    """A count from this micro-batch (a tensor) may be 0 for an empty micro-batch: clamp it so the loss is 0."""
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

    With token losses l_it, mask m_it, per-sequence token count T_i = sum_t m_it, N tokens and S sequences:

    - "token-mean":              sum_it m_it l_it / N        (DAPO, arXiv 2503.14476: every token weighs the same)
    - "token-sum":               sum_it m_it l_it            (no normaliser: the loss grows with the batch's tokens;
      verl's token-sum)
    - "seq-mean-token-mean":     sum_i (sum_t m_it l_it / T_i) / S   (GRPO, arXiv 2402.03300: every sequence
      weighs the same, so tokens of long responses weigh less)
    - "seq-mean-token-sum":      sum_i sum_t m_it l_it / S
    - "seq-mean-token-sum-norm": sum_it m_it l_it / (S * max_response_length)   (Dr.GRPO, arXiv 2503.20783: a
      constant normaliser removes the length bias of 1/T_i)

    N and S default to the counts of this micro-batch. When a mini-batch is split into micro-batches (and across
    data-parallel ranks), pass the counts of the whole mini-batch as `global_token_count` / `global_seq_count`
    (see `loss_token_counts`): then each micro-batch returns its share, and the sum of the micro-batch losses over
    all micro-batches and ranks equals the loss of the full mini-batch, with the same gradient, however the batch
    was split. (Data-parallel frameworks average gradients over ranks, so a worker multiplies this share by the
    world size before `backward` to turn that average back into the sum.) Sequences must not be split across
    micro-batches for the seq-mean modes.

    `max_response_length` should be the configured maximum (a constant); it defaults to the padded width L, which
    changes with the micro-batch under dynamic batching. More modes can be added with `register_loss_avg_mode`.
    """
    if loss_avg_mode not in _LOSS_AVG_MODES and not register_if_spec("loss_avg_mode", loss_avg_mode):
        modes = ", ".join(_LOSS_AVG_MODES)
        raise ValueError(
            f"Unknown loss_avg_mode {loss_avg_mode!r}; choose one of {modes}, or your own function as 'path/to/file.py:function'."
        )
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
        return where.tensor(function(sums, lengths, tokens, seqs, max_len), "the aggregated loss", ())

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
