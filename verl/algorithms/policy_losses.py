# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Policy-gradient losses, selected by `actor.loss_type` through a registry.
A loss maps log(pi / pi_old), advantages and clip settings to a (B, L) per-token loss plus masks of the tokens a bound
held; `compute_policy_loss` aggregates it and derives the clip-fraction metrics (docs/metrics.md)."""

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from verl.algorithms.masked_ops import Count, agg_loss, masked_mean
from verl.algorithms.user_functions import Kind, Where, add_kind, check_positional, register_once, require_known


LOG_RATIO_CLAMP = 20.0
"""|log(pi / pi_old)| clamp before exp: one far off-policy token must not give inf or NaN gradients."""

GSPO_LOG_RATIO_MAX = 10.0
"""Upper clamp of GSPO's sequence log-ratio (verl's bound); above it the ratio has no gradient."""


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss sees: float32 (B, L) tensors and the actor's clip settings."""

    log_probs: torch.Tensor
    """log pi of the sampled tokens, with gradient."""
    log_ratio: torch.Tensor
    """log(pi / pi_old) per token, not clamped."""
    advantages: torch.Tensor
    mask: torch.Tensor
    """1 on the response tokens that take part, 0 on padding and on tokens whose weight is 0 (masked by a rollout
    correction or by top_entropy_quantile): a sequence-level statistic (GSPO's ratio, GMPO's mean) leaves them out,
    so they get no gradient through it."""
    clip_ratio_low: float
    """eps_l: the ratio is clipped at 1 - eps_l."""
    clip_ratio_high: float
    """eps_h: the ratio is clipped at 1 + eps_h."""
    clip_ratio_dual: float
    """Dual-clip constant C (A < 0)."""
    tau_positive: float
    """SAPO gate temperature for A > 0 (`tau_negative` for the rest)."""
    tau_negative: float


@dataclass(frozen=True)
class PolicyLossTerms:
    """A policy loss's (B, L) per-token loss and boolean masks of the tokens its bounds held (None: none)."""

    loss_mat: torch.Tensor
    """Per-token loss, aggregated by `agg_loss`."""
    clipped_higher: torch.Tensor | None = None
    """Tokens held at the upper bound 1 + eps_h."""
    clipped_lower: torch.Tensor | None = None
    """Tokens held at the lower bound 1 - eps_l."""
    clipped_dual: torch.Tensor | None = None
    """Negative-advantage tokens held by the dual clip C."""


PolicyLossFn = Callable[[PolicyLossInputs], PolicyLossTerms]

_POLICY_LOSSES: dict[str, PolicyLossFn] = {}
_POLICY_LOSS_AVG_MODES: dict[str, str] = {}
_POLICY_LOSS_OPTIONS: dict[str, tuple[str, ...]] = {}

POLICY_LOSS_OPTIONS: tuple[str, ...] = (
    "clip_ratio_low",
    "clip_ratio_high",
    "clip_ratio_dual",
    "tau_positive",
    "tau_negative",
)
"""The actor keys a policy loss may read (the `PolicyLossInputs` settings)."""

_CLIP = ("clip_ratio_low", "clip_ratio_high")


def register_policy_loss(
    name: str, *, loss_avg_mode: str | None = None, options: tuple[str, ...] = POLICY_LOSS_OPTIONS
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under `name` (a value of `actor.loss_type`).
    `loss_avg_mode`, if the loss is defined with one, becomes its default `actor.loss_avg_mode` (another one logs a
    warning at validation). `options`: the POLICY_LOSS_OPTIONS it reads (all, unless told): another one set away
    from its default is refused at validation, as it would be dropped silently."""

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        register_once(_POLICY_LOSSES, name, fn, "Policy loss")
        _POLICY_LOSS_OPTIONS[name] = options
        if loss_avg_mode is not None:
            _POLICY_LOSS_AVG_MODES[name] = loss_avg_mode
        return fn

    return decorator


def policy_loss_options(loss_type: str) -> tuple[str, ...]:
    """The POLICY_LOSS_OPTIONS the registered loss `loss_type` reads."""
    return _POLICY_LOSS_OPTIONS.get(loss_type, POLICY_LOSS_OPTIONS)


def registered_policy_losses() -> tuple[str, ...]:
    return tuple(_POLICY_LOSSES)


def policy_loss_avg_mode(loss_type: str) -> str | None:
    """The aggregation the loss is defined with, or None."""
    return _POLICY_LOSS_AVG_MODES.get(loss_type)


def default_loss_avg_mode(loss_type: str) -> str:
    """`actor.loss_avg_mode` when unset: the loss's own aggregation, else token-mean."""
    return _POLICY_LOSS_AVG_MODES.get(loss_type, "token-mean")


def _token_ratio(x: PolicyLossInputs) -> torch.Tensor:
    return torch.exp(x.log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def _clipped_surrogate(ratio: torch.Tensor, x: PolicyLossInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """max(-A r, -A clip(r, 1 - eps_l, 1 + eps_h)) and the masks of tokens held at the upper / lower bound."""
    low, high = 1.0 - x.clip_ratio_low, 1.0 + x.clip_ratio_high
    loss_mat = torch.maximum(-x.advantages * ratio, -x.advantages * ratio.clamp(low, high))
    return loss_mat, (x.advantages > 0) & (ratio > high), (x.advantages < 0) & (ratio < low)


@register_policy_loss("default", options=(*_CLIP, "clip_ratio_dual"))
def _ppo_loss(x: PolicyLossInputs) -> PolicyLossTerms:
    """PPO clip with clip-higher, plus the dual clip min(l, -A C) where A < 0."""
    ratio = _token_ratio(x)
    loss_mat, higher, lower = _clipped_surrogate(ratio, x)
    dual = (x.advantages < 0) & (ratio > x.clip_ratio_dual)
    loss_mat = torch.where(dual, -x.advantages * x.clip_ratio_dual, loss_mat)
    return PolicyLossTerms(loss_mat, higher, lower, dual)


def _gspo_loss(x: PolicyLossInputs, per_token_gradient: bool) -> PolicyLossTerms:
    """The clipped surrogate on GSPO's sequence ratio s_i = exp(mean_t log(pi / pi_old)), broadcast over its tokens.
    "gspo" differentiates through s_i; "gspo_token" uses sg(s_i) * pi / sg(pi), same value but a per-token gradient
    (allowing per-token advantages)."""
    seq_log_ratio = masked_mean(x.log_ratio, x.mask, dim=-1).unsqueeze(-1)
    if per_token_gradient:
        log_ratio = seq_log_ratio.detach() + x.log_probs - x.log_probs.detach()
    else:
        log_ratio = seq_log_ratio.expand_as(x.log_ratio)
    return PolicyLossTerms(*_clipped_surrogate(torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, GSPO_LOG_RATIO_MAX)), x))


# the paper's objective averages each sequence's tokens, then the sequences (verl forces this aggregation too)
register_policy_loss("gspo", loss_avg_mode="seq-mean-token-mean", options=_CLIP)(
    functools.partial(_gspo_loss, per_token_gradient=False)
)
register_policy_loss("gspo_token", loss_avg_mode="seq-mean-token-mean", options=_CLIP)(
    functools.partial(_gspo_loss, per_token_gradient=True)
)


@register_policy_loss("cispo", options=_CLIP)
def _cispo_loss(x: PolicyLossInputs) -> PolicyLossTerms:
    ratio = _token_ratio(x)
    low, high = 1.0 - x.clip_ratio_low, 1.0 + x.clip_ratio_high
    loss_mat = -x.advantages * ratio.clamp(low, high).detach() * x.log_probs
    return PolicyLossTerms(loss_mat, ratio > high, ratio < low)


@register_policy_loss("gpg", options=())
def _gpg_loss(x: PolicyLossInputs) -> PolicyLossTerms:
    """GPG (arXiv 2504.02546; verl's loss_mode=gpg): the plain policy gradient -A log pi, no ratio and no clip (with
    adv_estimator=gpg; the same as the PPO loss only when every update is on-policy)."""
    return PolicyLossTerms(-x.advantages * x.log_probs)


@register_policy_loss("sapo", loss_avg_mode="seq-mean-token-mean", options=("tau_positive", "tau_negative"))
def _sapo_loss(x: PolicyLossInputs) -> PolicyLossTerms:
    tau = torch.where(x.advantages > 0, x.tau_positive, x.tau_negative)
    return PolicyLossTerms(-x.advantages * (4.0 / tau) * torch.sigmoid(tau * (_token_ratio(x) - 1.0)))


@register_policy_loss("geo_mean", loss_avg_mode="seq-mean-token-mean", options=_CLIP)
def _geo_mean_loss(x: PolicyLossInputs) -> PolicyLossTerms:
    """GMPO (arXiv 2507.20673; verl's geo_mean): -A s, with s the geometric mean of the sequence's token ratios, each
    log-ratio clipped to [-eps_l, eps_h] on the pessimistic side for its advantage's sign, broadcast over the
    sequence's tokens (A: the sequence's mean advantage). The clip bounds are in log space: GMPO uses 0.4 for both."""
    log_ratio = x.log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    sign = torch.sign(x.advantages)
    clipped = log_ratio.clamp(-x.clip_ratio_low, x.clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)
    seq_ratio = torch.exp(masked_mean(pessimistic, x.mask, dim=-1))
    seq_advantage = masked_mean(x.advantages, x.mask, dim=-1)
    loss_mat = (-seq_advantage * seq_ratio).unsqueeze(-1).expand_as(log_ratio)
    higher = (x.advantages > 0) & (log_ratio > x.clip_ratio_high)
    lower = (x.advantages < 0) & (log_ratio < -x.clip_ratio_low)
    return PolicyLossTerms(loss_mat, higher, lower)


_BUILT_IN_LOSSES = frozenset(_POLICY_LOSSES)
"""The losses this module registers (each the advantage times a function of the ratio: `scales_with_advantage`)."""


def check_clip_ratios(
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float,
    prefix: str = "actor.",
    loss_type: str = "default",
) -> None:
    """The config check (`prefix`: where the keys are) and the loss's own. cispo takes a clip_ratio_low of 1 or more:
    its importance weights then have no floor (MiniMax-M1 sets none; a ratio is never negative)."""
    lowest_ok = clip_ratio_low >= 0.0 if loss_type == "cispo" else 0.0 <= clip_ratio_low < 1.0
    if not lowest_ok or clip_ratio_high < 0.0:
        low = "[0, inf) for cispo" if loss_type == "cispo" else "[0, 1)"
        raise ValueError(
            f"{prefix}clip_ratio_low must be in {low} and {prefix}clip_ratio_high >= 0, got {clip_ratio_low} and "
            f"{clip_ratio_high}."
        )
    if clip_ratio_dual <= 1.0:
        raise ValueError(
            f"{prefix}clip_ratio_dual must be greater than 1, got {clip_ratio_dual}; use .inf to turn the dual clip "
            "off."
        )


def scales_with_advantage(loss_type: str) -> bool:
    """Whether `loss_type`'s per-token loss is its advantage times a function of the ratio (every built-in loss), so
    a row whose advantage is 0 on every token has no gradient; a user's loss may not be."""
    return loss_type in _BUILT_IN_LOSSES


def compute_policy_loss(
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: str,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float,
    loss_avg_mode: str,
    tau_positive: float = 1.0,
    tau_negative: float = 1.05,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy-gradient loss of one micro-batch, aggregated with `agg_loss` (see there for the global counts).

    `token_weights` (B, L), detached, scale the per-token loss (off-policy importance weights from
    `verl.algorithms.rollout_correction`, top_entropy_quantile's mask); a token of weight 0 gets no gradient, also
    through a sequence-level ratio (gspo, geo_mean). With r = pi / pi_old (log clamped), advantage A, the per-token loss:

    - "default": PPO (arXiv 1707.06347) with clip-higher (DAPO, arXiv 2503.14476) and dual clip (arXiv 1912.09729):
      l = max(-A r, -A clip(r, 1 - eps_l, 1 + eps_h)), and l = min(l, -A C) for A < 0, C = clip_ratio_dual.
    - "gspo" / "gspo_token" (arXiv 2507.18071): the same surrogate, no dual clip, on the sequence ratio
      (`_gspo_loss`); defined with seq-mean-token-mean.
    - "cispo" (MiniMax-M1, arXiv 2506.13585): l = -sg(clip(r, 1 - eps_l, 1 + eps_h)) A log pi, so clipped tokens
      still get a gradient.
    - "sapo" (arXiv 2511.20347): l = -A (4 / tau) sigmoid(tau (r - 1)), tau = tau_positive for A > 0 else
      tau_negative: a smooth gate instead of a hard clip; defined with seq-mean-token-mean.
    - "geo_mean" (GMPO, arXiv 2507.20673): -A exp(mean_t clip(log r_t)), the geometric mean of the sequence's
      ratios with each log-ratio clipped to [-eps_l, eps_h] where that is pessimistic; defined with seq-mean-token-mean.
      `token_weights` scale its broadcast loss token by token, so a sequence is weighed by its tokens' arithmetic mean
      weight (verl's takes their geometric mean, in which one icepop-masked token zeroes the whole sequence).

    Metrics (verl's names, detached 0-dim tensors on the device so callers sum them without a host sync):
    `pg_clipfrac` (either bound), `pg_clipfrac_higher`, `pg_clipfrac_lower` (dual clip C), and `ppo_kl` (k1 estimate
    of KL(pi_old || pi)), over the tokens that take part (weight 0 leaves a token out), and their count,
    `loss_tokens`, by which a token mean over micro-batches weighs each."""
    require_known("policy_loss", _POLICY_LOSSES, loss_type, "actor.loss_type")
    check_clip_ratios(clip_ratio_low, clip_ratio_high, clip_ratio_dual, loss_type=loss_type)
    log_probs, mask = log_probs.float(), response_mask.float()
    log_ratio = log_probs - old_log_probs.float()
    weights = None if token_weights is None else token_weights.detach().float()
    inputs = PolicyLossInputs(
        log_probs=log_probs,
        log_ratio=log_ratio,
        advantages=advantages.float(),
        mask=mask if weights is None else mask * (weights != 0),
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_dual=clip_ratio_dual,
        tau_positive=tau_positive,
        tau_negative=tau_negative,
    )
    terms = _POLICY_LOSSES[loss_type](inputs)
    loss_mat = terms.loss_mat if weights is None else terms.loss_mat * weights
    pg_loss = agg_loss(loss_mat, mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length)
    no_clip = torch.zeros_like(mask, dtype=torch.bool)
    higher, lower, dual = (
        clipped if clipped is not None else no_clip
        for clipped in (terms.clipped_higher, terms.clipped_lower, terms.clipped_dual)
    )
    per_token = torch.stack([(higher | lower).float(), higher.float(), dual.float(), -log_ratio.detach()])
    taking_part = inputs.mask  # a token of weight 0 (icepop, top_entropy_quantile) is neither clipped nor not
    stats = (per_token * taking_part).sum(dim=(1, 2)) / taking_part.sum().clamp(min=1.0)
    names = ("pg_clipfrac", "pg_clipfrac_higher", "pg_clipfrac_lower", "ppo_kl")
    metrics = {**dict(zip(names, stats.unbind())), "loss_tokens": taking_part.sum()}
    return pg_loss, metrics  # 0-dim tensors on the loss's device: no host sync here


def _register_user_loss(spec: str, function: Callable[..., PolicyLossTerms | torch.Tensor], where: Where) -> None:
    @functools.wraps(function)
    def checked(x: PolicyLossInputs) -> PolicyLossTerms:
        out = where.call(function, x)
        terms = PolicyLossTerms(out) if isinstance(out, torch.Tensor) else out
        if not isinstance(terms, PolicyLossTerms):
            raise where.fail(f"returned a {type(out).__name__}, not a PolicyLossTerms or a (B, L) tensor")
        shape = tuple(x.mask.shape)
        where.tensor(terms.loss_mat, "the loss", shape)
        if x.log_probs.requires_grad and not terms.loss_mat.requires_grad:
            raise where.fail("returned a loss without gradient (compute it from x.log_probs or x.log_ratio)")
        for name in ("clipped_higher", "clipped_lower", "clipped_dual"):
            if getattr(terms, name) is not None:
                where.tensor(getattr(terms, name), name, shape, floating=False)
        return terms

    register_policy_loss(spec)(checked)


add_kind(
    "policy_loss",
    Kind(
        label="policy loss",
        key="worker.actor.loss_type",
        signature="def loss(x: PolicyLossInputs) -> PolicyLossTerms | torch.Tensor, the (B, L) per-token loss "
        "(verl.algorithms.policy_losses)",
        check=check_positional(1),
        register=_register_user_loss,
    ),
)
