# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rollout correction: importance weights and rejection between the rollout engine's policy and the trainer's.
The engine samples from pi_rollout (its own kernels and precision, maybe older weights); the trainer recomputes the
log-probs as pi_old, so the data is off-policy (Yao et al. 2025, https://fengyao.notion.site/off-policy-rl). With
rho_t = pi_old(y_t) / pi_rollout(y_t), the modes reweight tokens or sequences by rho or reject them outside a band;
each mode names its counterpart in verl 0.9.1 (`rollout_is`, `rollout_rs`) and any difference."""

import inspect
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from verl.algorithms.masked_ops import masked_mean
from verl.algorithms.policy_losses import LOG_RATIO_CLAMP
from verl.algorithms.user_functions import Kind, Where, add_kind, check_keyword_inputs, register_once, require_known


CORRECTION_MODES: tuple[str, ...] = ("none", "bypass", "tis", "icepop", "seq_is", "seq_mis", "geo_rs", "decoupled")

METRIC_PREFIX = "rollout_corr/"


@dataclass
class CorrectionSettings:
    """`algorithm.rollout_correction`; every ratio is pi_old / pi_rollout. The field docstrings are CLI help."""

    mode: str = "none"
    """One of `CORRECTION_MODES`, a mode registered with `register_correction_mode`, or a user's
    "path/to/file.py:function"."""
    is_cap: float = 2.0
    """C: cap of the token (tis) and sequence (seq_is, seq_mis) IS weights; in decoupled, the weight above which a
    token is filtered (AReaL's behav_imp_weight_cap)."""
    mask_low: float = 0.5
    """icepop: tokens with rho_t below this get weight 0."""
    mask_high: float = 5.0
    """icepop: tokens with rho_t above this get weight 0."""
    seq_low: float = 0.5
    """seq_mis: a sequence whose ratio prod_t rho_t is below this is rejected."""
    seq_high: float = 2.0
    """seq_mis: a sequence whose ratio is above this is rejected."""
    geo_low: float = 0.9
    """geo_rs: a sequence whose geometric-mean ratio (prod_t rho_t)^(1/n) is below this is rejected."""
    geo_high: float = 1.1
    """geo_rs: a sequence whose geometric-mean ratio is above this is rejected."""

    def validate(self, prefix: str = "algorithm.rollout_correction") -> None:
        """Raise ValueError naming the key of an unknown mode, a non-positive cap or bound, or a band low >= high."""
        require_known("rollout_correction", _MODES, self.mode, f"{prefix}.mode")
        if not self.is_cap > 0:
            raise ValueError(f"{prefix}.is_cap must be positive, got {self.is_cap}.")
        for low_key, high_key in (("mask_low", "mask_high"), ("seq_low", "seq_high"), ("geo_low", "geo_high")):
            low, high = getattr(self, low_key), getattr(self, high_key)
            if not low > 0:
                raise ValueError(f"{prefix}.{low_key} must be positive (it bounds a probability ratio), got {low}.")
            if not low < high:
                raise ValueError(f"{prefix}.{low_key} must be below {prefix}.{high_key}, got {low} and {high}.")


@dataclass(frozen=True)
class CorrectionResult:
    """What the actor applies: loss_t * weights_t, aggregated over `mask`, plus the metrics to log."""

    weights: torch.Tensor
    """(B, L) float32, detached; 0 on padding and rejected tokens."""
    mask: torch.Tensor
    """(B, L) float32 response mask without the sequences seq_mis / geo_rs rejected. Tokens icepop and decoupled
    filter stay (weight 0): their papers count them in the loss normaliser."""
    metrics: dict[str, float]


@dataclass(frozen=True)
class _LogRatios:
    """log rho of a batch, float32, padding set to 0 before any exp or sum."""

    raw: torch.Tensor
    """(B, L) log pi_old - log pi_rollout, not clamped."""
    token: torch.Tensor
    """`raw` clamped to +-LOG_RATIO_CLAMP."""
    rho: torch.Tensor
    """exp(`token`): the token ratio rho_t (1 on padding)."""
    seq: torch.Tensor
    """(B, 1) S = sum_t of the clamped `token`."""
    n_tokens: torch.Tensor
    """(B, 1) response length."""
    mask: torch.Tensor

    def seq_ratio(self) -> torch.Tensor:
        """exp(S), S clamped, broadcast to (B, L)."""
        return self.seq.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp().expand_as(self.token)


def _log_ratios(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> _LogRatios:
    if not old_log_probs.shape == rollout_log_probs.shape == response_mask.shape or old_log_probs.dim() != 2:
        raise ValueError(
            "old_log_probs, rollout_log_probs and response_mask must all be (batch, response length), got "
            f"{tuple(old_log_probs.shape)}, {tuple(rollout_log_probs.shape)} and {tuple(response_mask.shape)}."
        )
    mask = (response_mask != 0).float()
    raw = torch.where(mask > 0, old_log_probs.float() - rollout_log_probs.float(), 0.0)
    token = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return _LogRatios(raw, token, token.exp(), token.sum(-1, keepdim=True), mask.sum(-1, keepdim=True), mask)


@dataclass(frozen=True)
class _ModeTerms:
    """What a mode decides per token, before padding is masked; all (B, L)."""

    ratio: torch.Tensor
    """The raw ratio the mode acts on (rho_t, or the sequence ratio on every token), for the metrics."""
    weights: torch.Tensor
    truncated: torch.Tensor | None = None
    """Tokens whose weight the cap C held."""
    filtered: torch.Tensor | None = None
    """Weight 0 but kept in the mask (icepop, decoupled)."""
    rejected: torch.Tensor | None = None
    """Removed from the mask with their sequence (seq_mis, geo_rs)."""


_ModeFn = Callable[[_LogRatios, CorrectionSettings], _ModeTerms]
CorrectionFn = Callable[[torch.Tensor, torch.Tensor, CorrectionSettings], tuple[torch.Tensor, torch.Tensor | None]]
"""(log rho (B, L) clamped and 0 on padding, response mask (B, L), settings) -> (weights (B, L), bool mask (B, L) of
the tokens kept in the loss, or None to keep all)."""


def register_correction_mode(name: str) -> Callable[[CorrectionFn], CorrectionFn]:
    """Register an off-policy correction under `name` (a value of `algorithm.rollout_correction.mode`). Weight-0
    tokens stay in the loss normaliser (and `masked_share`); tokens outside the returned mask leave it."""

    def decorator(fn: CorrectionFn) -> CorrectionFn:
        def mode(lr: _LogRatios, s: CorrectionSettings) -> _ModeTerms:
            weights, kept = fn(lr.token, lr.mask, s)
            rejected = None if kept is None else ~kept & (lr.mask > 0)
            return _ModeTerms(lr.rho, weights, filtered=weights == 0, rejected=rejected)

        register_once(_MODES, name, mode, "Correction mode")
        return fn

    return decorator


def _capped(ratio: torch.Tensor, s: CorrectionSettings) -> _ModeTerms:
    """Weight min(ratio, C)."""
    return _ModeTerms(ratio, ratio.clamp(max=s.is_cap), truncated=ratio > s.is_cap)


def _filtered(rho: torch.Tensor, outside: torch.Tensor) -> _ModeTerms:
    """Weight rho_t, but 0 (kept in the mask) where `outside`."""
    return _ModeTerms(rho, torch.where(outside, 0.0, rho), filtered=outside)


def _unweighted(lr: _LogRatios, s: CorrectionSettings) -> _ModeTerms:
    return _ModeTerms(lr.rho, torch.ones_like(lr.token))


def _seq_mis(lr: _LogRatios, s: CorrectionSettings) -> _ModeTerms:
    ratio = lr.seq_ratio()
    low, high = math.log(s.seq_low), math.log(s.seq_high)
    rejected = ((lr.seq < low) | (lr.seq > high)).expand_as(lr.token)
    return _ModeTerms(ratio, ratio.clamp(max=s.is_cap), truncated=(ratio > s.is_cap) & ~rejected, rejected=rejected)


def _geo_rs(lr: _LogRatios, s: CorrectionSettings) -> _ModeTerms:
    mean_log_ratio = lr.seq / lr.n_tokens.clamp(min=1.0)
    low, high = math.log(s.geo_low), math.log(s.geo_high)
    rejected = ((mean_log_ratio < low) | (mean_log_ratio > high)).expand_as(lr.token)
    return _ModeTerms(mean_log_ratio.exp().expand_as(lr.token), torch.ones_like(lr.token), rejected=rejected)


_MODES: dict[str, _ModeFn] = {
    "none": _unweighted,
    "bypass": _unweighted,
    "tis": lambda lr, s: _capped(lr.rho, s),
    "icepop": lambda lr, s: _filtered(lr.rho, (lr.rho < s.mask_low) | (lr.rho > s.mask_high)),
    "seq_is": lambda lr, s: _capped(lr.seq_ratio(), s),
    "seq_mis": _seq_mis,
    "geo_rs": _geo_rs,
    "decoupled": lambda lr, s: _filtered(lr.rho, lr.rho > s.is_cap),
}
"""The built-in modes (`CORRECTION_MODES`) and those registered with `register_correction_mode`."""

CORRECTION_OPTIONS = ("is_cap", "mask_low", "mask_high", "seq_low", "seq_high", "geo_low", "geo_high")
"""The `CorrectionSettings` a mode may read."""
MODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "bypass": (),
    "tis": ("is_cap",),
    "seq_is": ("is_cap",),
    "decoupled": ("is_cap",),
    "seq_mis": ("is_cap", "seq_low", "seq_high"),
    "icepop": ("mask_low", "mask_high"),
    "geo_rs": ("geo_low", "geo_high"),
}
"""The CORRECTION_OPTIONS each built-in mode of `_MODES` reads (the config warns of the others it is given)."""


@torch.no_grad()
def compute_rollout_correction(
    settings: CorrectionSettings,
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
) -> CorrectionResult:
    """Weights and mask that correct the policy loss for the rollout/trainer mismatch, by `settings.mode`.
    Inputs (B, L), padding any value; log rho_t clamped to +-20, S = sum_t log rho_t, n the length, C = is_cap:

    - "none": w_t = 1. "bypass": the caller trains with old := rollout log-probs (verl's `bypass_mode`), so PPO's
      ratio already corrects; w_t = 1, metrics only.
    - "tis": token truncated IS (verl rollout_is="token"): w_t = min(rho_t, C).
    - "icepop": IcePop (arXiv 2510.18855): w_t = rho_t inside [mask_low, mask_high], else 0 (kept in the mask).
    - "seq_is": sequence truncated IS (verl rollout_is="sequence"): w_t = min(exp(S), C).
    - "seq_mis": verl's `decoupled_seq_is_rs`: exp(S) outside [seq_low, seq_high] leaves the mask, the rest get
      min(exp(S), C). verl's k1 bounds "a_b" bound exp(-S): seq_low = 1 / b, seq_high = 1 / a.
    - "geo_rs": verl's Geo-RS (rollout_rs="seq_mean_k1"): rejects g = exp(S / n) outside [geo_low, geo_high]
      (verl's "a_b" bound 1 / g likewise); w_t = 1 on the rest.
    - "decoupled": decoupled PPO (AReaL, arXiv 2505.24298): old_log_probs is the proximal policy, rollout_log_probs
      the behaviour one; w_t = rho_t up to C (`behav_imp_weight_cap`), else 0 and kept in the mask (AReaL filters).

    Bounds are inclusive (as verl, AReaL), sequence bounds compared in log space. Unlike verl: S sums clamped token
    log-ratios; no rollout_is_batch_normalize, k2 / k3 / max rejection or combined criteria. Metrics (0 for an empty
    mask): `rollout_corr/is_ratio_mean`, `is_ratio_max` (of the ratio the mode acts on), `truncated_share`,
    `masked_share` (weight 0) and those of `mismatch_metrics`."""
    settings.validate()
    lr = _log_ratios(old_log_probs, rollout_log_probs, response_mask)
    terms = _MODES[settings.mode](lr, settings)
    no_token = torch.zeros_like(lr.token, dtype=torch.bool)
    truncated, filtered, rejected = (
        no_token if tokens is None else tokens for tokens in (terms.truncated, terms.filtered, terms.rejected)
    )
    mask = torch.where(rejected, 0.0, lr.mask)
    weights = torch.where(mask > 0, terms.weights, 0.0)
    zeroed = filtered | rejected
    ratio = torch.where(lr.mask > 0, terms.ratio, 0.0)  # ratios are > 0, so the max of a non-empty mask ignores this
    stats = torch.stack(
        [
            masked_mean(ratio, lr.mask),
            torch.cat([ratio.flatten(), ratio.new_zeros(1)]).max(),
            masked_mean(truncated.float(), lr.mask),
            masked_mean(zeroed.float(), lr.mask),
        ]
    ).tolist()
    names = ("is_ratio_mean", "is_ratio_max", "truncated_share", "masked_share")
    metrics = {METRIC_PREFIX + name: value for name, value in zip(names, stats)}
    metrics.update(_mismatch_metrics(lr))
    return CorrectionResult(weights=weights, mask=mask, metrics=metrics)


def _mismatch_metrics(lr: _LogRatios) -> dict[str, float]:
    k3 = torch.expm1(lr.token) - lr.token  # r - 1 - log r, accurate for r near 1
    seq_log_ppl_diff = masked_mean(-lr.raw, lr.mask, dim=-1)
    has_tokens = (lr.n_tokens.squeeze(-1) > 0).float()
    log_ppl_diff = (seq_log_ppl_diff * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    k3_kl, log_ppl_diff = torch.stack([masked_mean(k3, lr.mask), log_ppl_diff]).tolist()
    return {METRIC_PREFIX + "k3_kl": k3_kl, METRIC_PREFIX + "log_ppl_diff": log_ppl_diff}


@torch.no_grad()
def mismatch_metrics(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's pi_old is from the rollout policy, over response tokens (0 for an empty mask).
    - `rollout_corr/k3_kl`: token mean of k3 = r - 1 - log r, r = pi_old / pi_rollout: an unbiased, non-negative
      estimate of KL(pi_rollout || pi_old), since tokens come from pi_rollout (verl's, without the clamp).
    - `rollout_corr/log_ppl_diff`: mean over non-empty responses of log(PPL_old / PPL_rollout), verl's sign: positive
      when the trainer finds the tokens less likely than the engine did (verl averages empty ones in as 0)."""
    return _mismatch_metrics(_log_ratios(old_log_probs, rollout_log_probs, response_mask))


# ------------------------------------------------------------------------------------------------ users' corrections

CORRECTION_INPUTS: tuple[str, ...] = ("log_ratio", "response_mask")
"""The tensors a user's correction is passed by name; its options are `CorrectionSettings`' other fields."""


def _register_user_correction(spec: str, function: Callable[..., Any], where: Where) -> None:
    wanted = tuple(inspect.signature(function).parameters)

    def weights_and_kept(
        log_ratio: torch.Tensor, response_mask: torch.Tensor, settings: CorrectionSettings
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        available = {**asdict(settings), "log_ratio": log_ratio, "response_mask": response_mask}
        out = where.call(function, **{name: available[name] for name in wanted if name in available})
        weights, kept = out if isinstance(out, (tuple, list)) and len(out) == 2 else (out, None)
        shape = tuple(log_ratio.shape)
        weights = where.tensor(weights, "the weights", shape)
        if bool((weights < 0).any()):
            raise where.fail("returned negative weights (importance weights are >= 0)")
        if kept is not None:
            is_bool = isinstance(kept, torch.Tensor) and kept.dtype == torch.bool
            kept = where.tensor(kept, "the mask", shape, floating=not is_bool) != 0
        return weights.detach().float(), kept

    register_correction_mode(spec)(weights_and_kept)


def _check_user_correction(signature: inspect.Signature) -> str | None:
    options = tuple(name for name in CorrectionSettings.__dataclass_fields__ if name != "mode")
    return check_keyword_inputs(signature, CORRECTION_INPUTS + options)


add_kind(
    "rollout_correction",
    Kind(
        label="off-policy correction",
        key="algorithm.rollout_correction.mode",
        signature="def correct(log_ratio, response_mask, [is_cap], [mask_low], ...) -> weights | tuple[weights, "
        "mask], taking what it uses by these names (the options are algorithm.rollout_correction's keys); all "
        "(B, L), log_ratio = log pi_old - log pi_rollout clamped to +-20 and 0 on padding",
        check=_check_user_correction,
        register=_register_user_correction,
    ),
)
