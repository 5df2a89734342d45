# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""KL(pi || pi_ref) to the reference policy: per-token estimators (Schulman 2020,
http://joschu.net/blog/kl-approx.html), coefficient controllers, and its two uses: an actor loss term
(`compute_kl_loss`) or a reward penalty (`apply_kl_penalty`)."""

import functools
from collections.abc import Callable

import numpy as np
import torch

from verl.algorithms.masked_ops import Count, agg_loss, masked_mean
from verl.algorithms.user_functions import Kind, Where, add_kind, check_positional, register_once, require_known


KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(log_probs, ref_log_probs) -> per-token estimate of KL(pi || pi_ref)."""

_KL_PENALTIES: dict[str, tuple[KLFn, bool]] = {}
"""name -> (estimator, whether it is the straight-through form "<base>+")."""

KL_CONTROLLER_TYPES: tuple[str, ...] = ("fixed", "adaptive")


def register_kl_penalty(*names: str, straight_through: bool = True) -> Callable[[KLFn], KLFn]:
    """Register a KL estimator under `names` (aliases), and "<name>+" for each unless `straight_through` is False."""

    def decorator(fn: KLFn) -> KLFn:
        variants = [(name, False) for name in names] + [(f"{name}+", True) for name in names if straight_through]
        for name, is_straight_through in variants:
            register_once(_KL_PENALTIES, name, (fn, is_straight_through), "KL estimator")
        return fn

    return decorator


def registered_kl_penalties() -> tuple[str, ...]:
    """Values `algorithm.kl_penalty` accepts: base estimators, then straight-through forms."""
    return tuple(sorted(_KL_PENALTIES, key=lambda name: _KL_PENALTIES[name][1]))  # stable: registration order


register_kl_penalty("kl", "k1")(lambda log_probs, ref_log_probs: log_probs - ref_log_probs)
register_kl_penalty("abs")(lambda log_probs, ref_log_probs: (log_probs - ref_log_probs).abs())


@register_kl_penalty("mse", "k2")
def _k2(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_probs - ref_log_probs).square()


@register_kl_penalty("low_var_kl", "k3")
def _k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    ref_ratio = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
    return (ref_ratio.exp() - ref_ratio - 1).clamp(-10.0, 10.0)


@register_kl_penalty("full", straight_through=False)
def _full(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    if log_probs.dim() < 3:
        raise ValueError(
            "kl_penalty 'full' needs full log-distributions of shape (B, L, vocab), but got per-token log-probs of "
            f"shape {tuple(log_probs.shape)}; use one of kl, abs, mse, low_var_kl instead."
        )
    return (log_probs.exp() * (log_probs - ref_log_probs)).sum(dim=-1)


def compute_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi; x = log pi - log pi_ref.
    - "kl"/"k1": x. Unbiased, high variance. "abs": |x|.
    - "mse"/"k2": x^2 / 2. Biased, low variance; its gradient is an unbiased estimate of the KL's gradient.
    - "low_var_kl"/"k3": exp(-x) - 1 + x. Unbiased, non-negative, low variance; clamped for numerical safety.
    - "full": the exact KL from (B, L, vocab) log-distributions.
    - "<name>+": the value of <name> with the gradient of k2 (Tang and Munos 2025, arXiv 2506.09477): k1 and k3 as
      losses have the wrong gradient."""
    require_known("kl_penalty", _KL_PENALTIES, kl_penalty, "algorithm.kl_penalty", registered_kl_penalties())
    estimator, straight_through = _KL_PENALTIES[kl_penalty]
    log_probs, ref_log_probs = log_probs.float(), ref_log_probs.float()
    value = estimator(log_probs, ref_log_probs)
    if not straight_through:
        return value
    surrogate = _k2(log_probs, ref_log_probs)
    return surrogate - surrogate.detach() + value.detach()


def compute_kl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_penalty: str,
    loss_avg_mode: str,
    global_token_count: Count | None = None,
    global_seq_count: Count | None = None,
    max_response_length: int | None = None,
) -> torch.Tensor:
    """The actor's KL loss term (`use_kl_loss`, as GRPO, usually with k3): `agg_loss(compute_kl(...))`."""
    kld = compute_kl(log_probs, ref_log_probs, kl_penalty)
    return agg_loss(kld, response_mask, loss_avg_mode, global_token_count, global_seq_count, max_response_length)


class KLController:
    """Holds the KL coefficient `value`; subclasses decide how `update` changes it after each batch."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, float]:
        """For checkpoints: an adapted coefficient must survive a resume."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class FixedKLController(KLController):
    def update(self, current_kl: float, n_steps: int) -> None:
        """Fixed: nothing to do."""

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Fixed: the config's algorithm.kl_coef, not a checkpoint's (a resume with another kl_coef, or from an
        adaptive run, kept the saved value)."""


class AdaptiveKLController(KLController):
    """Proportional controller steering the KL towards a target (Ziegler et al. 2019, arXiv 1909.08593).
    beta <- beta * (1 + e * n_steps / horizon) with e = clip(KL / target - 1, -0.2, 0.2); the clip keeps a noisy KL
    from blowing the coefficient up."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(
                f"algorithm.kl_target and algorithm.kl_horizon must be positive for the adaptive KL controller, got "
                f"kl_target={target_kl} and kl_horizon={horizon}."
            )
        super().__init__(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = float(np.clip(current_kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + proportional_error * n_steps / self.horizon


def get_kl_controller(kl_type: str, kl_coef: float, kl_target: float, kl_horizon: float) -> KLController:
    if kl_type == "fixed":
        return FixedKLController(kl_coef)
    if kl_type == "adaptive":
        return AdaptiveKLController(kl_coef, kl_target, kl_horizon)
    raise ValueError(f"Unknown algorithm.kl_type {kl_type!r}; choose one of {', '.join(KL_CONTROLLER_TYPES)}.")


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kl_penalty: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL as a reward penalty (arXiv 1909.08593): r_t = score_t - beta * KL_t, beta = `kl_ctrl.value`.
    The controller is then updated with the batch KL (mean over responses of the token-mean KL; a response without
    tokens has no token mean and is left out, as from the loss's sequence means, rather than counted as KL 0). Returns
    the rewards and metrics `actor/kl_penalty` (batch KL) and `actor/kl_coef` (beta applied)."""
    mask = response_mask.to(torch.float32)
    kld = compute_kl(log_probs, ref_log_probs, kl_penalty) * mask
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * kld.to(token_level_scores.dtype)
    current_kl = masked_mean(masked_mean(kld, mask, dim=-1), mask.sum(-1) > 0).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return token_level_rewards, {"actor/kl_penalty": current_kl, "actor/kl_coef": beta}


def _register_user_kl(spec: str, function: KLFn, where: Where) -> None:
    @functools.wraps(function)
    def checked(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
        return where.tensor(where.call(function, log_probs, ref_log_probs), "the KL", tuple(log_probs.shape))

    register_kl_penalty(spec, straight_through=False)(checked)


add_kind(
    "kl_penalty",
    Kind(
        label="KL estimator",
        key="algorithm.kl_penalty",
        signature="def kl(log_probs, ref_log_probs) -> torch.Tensor, all (B, L) float32: the per-token estimate of "
        "KL(pi || pi_ref)",
        check=check_positional(2),
        register=_register_user_kl,
    ),
)
