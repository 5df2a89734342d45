# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Optimizers and learning-rate schedules built from an OptimConfig: torch's AdamW (fp32 master weights, default) or
`BF16AdamW` for pure-bf16 training. Schedules: linear warmup, then constant or cosine decay to `min_lr_ratio * lr`."""

import math
from dataclasses import dataclass, field

import torch
from torch.optim.lr_scheduler import LambdaLR

from verl.utils.config import ConfigError, require_choice, require_finite, require_non_negative
from verl.utils.device import is_cpu


OPTIMIZER_STRATEGIES: tuple[str, ...] = ("adamw", "adamw_bf16")
LR_SCHEDULER_TYPES: tuple[str, ...] = ("constant", "cosine", "linear")


@dataclass
class OptimConfig:
    lr: float = 1e-6
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas (beta1, beta2)."""
    weight_decay: float = 1e-2
    """AdamW decoupled weight decay."""
    strategy: str = "adamw"
    """adamw (states in the parameters' dtype: fp32 unless fsdp.torch_dtype says otherwise) or adamw_bf16 (bf16
    moments, EasyR1's AnyPrecisionAdamW: half the states' memory; with fsdp.torch_dtype=bf16 the pure-bf16 training
    whose updates are Kahan-compensated)."""
    lr_warmup_ratio: float = 0.0
    """Fraction of the training steps spent in linear warmup, rounded down to whole steps as EasyR1 and verl do (TRL's
    warmup_ratio rounds up: 0.03 of 20 steps warms up 0 steps here, 1 there)."""
    lr_warmup_steps: int | None = None
    """Warmup steps; overrides lr_warmup_ratio when set."""
    min_lr_ratio: float | None = None
    """Floor of the cosine and linear schedules as a fraction of lr (None means 0)."""
    lr_scheduler_type: str = "constant"
    """constant, cosine or linear (after the warmup; linear decays to min_lr_ratio at the last step, the default of
    Hugging Face's Trainer and TRL)."""
    training_steps: int = -1
    """Steps of the lr schedule, one per update call (a trainer step, however many mini-batches it has); set by the
    trainer from trainer.max_steps or total_epochs (the actor's: less trainer.critic_warmup), not by the user."""

    def validate(self, prefix: str) -> None:
        require_choice(self, prefix, "strategy", OPTIMIZER_STRATEGIES)
        require_choice(self, prefix, "lr_scheduler_type", LR_SCHEDULER_TYPES)
        require_non_negative(self, prefix, "lr", "weight_decay", "lr_warmup_steps")
        require_finite(self, prefix, "lr", "weight_decay")
        if len(self.betas) != 2 or not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ConfigError(f"{prefix}betas must be two numbers in [0, 1) (beta1, beta2), got {list(self.betas)}.")
        for name in ("lr_warmup_ratio", "min_lr_ratio"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"{prefix}{name} is a fraction and must lie in [0, 1], got {value}.")

    def inactive(self, prefix: str) -> list[tuple[tuple[str, ...], str]]:
        """(keys, why) of the schedule's settings that this schedule does not read, for `warn_inactive_settings`."""
        unread = []
        if self.lr_scheduler_type == "constant":
            unread.append(((f"{prefix}min_lr_ratio",), f"{prefix}lr_scheduler_type=constant (no decay)"))
        if self.lr_warmup_steps is not None:
            unread.append(((f"{prefix}lr_warmup_ratio",), f"{prefix}lr_warmup_steps is set (it wins)"))
        return unread


_MOMENTS = ("exp_avg", "exp_avg_sq")


class BF16AdamW(torch.optim.Optimizer):
    """AdamW with bf16 moments. A bf16 parameter's updates are Kahan-compensated: the previous step's rounding error
    is added back (a `compensation` buffer), else a weight near 1 cannot move by less than 2^-8 and RL's small steps
    round away; an fp32 parameter needs none. Works on plain tensors and FSDP2 DTensors."""

    def __init__(
        self,
        params,  # noqa: ANN001 - an iterable of tensors or param-group dicts, as for any torch optimizer
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0.0 or eps <= 0.0 or not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"BF16AdamW needs lr >= 0, eps > 0 and betas in [0, 1); got {lr}, {eps}, {betas}.")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 - the torch.optim.Optimizer.step signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                compensated = param.dtype != torch.float32
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state.update({key: torch.zeros_like(param, dtype=torch.bfloat16) for key in _MOMENTS})
                    if compensated:
                        state["compensation"] = torch.zeros_like(param)
                for key in _MOMENTS:  # a loaded state dict comes in the parameter's dtype (torch's load_state_dict)
                    if state[key].dtype != torch.bfloat16:
                        state[key] = state[key].to(torch.bfloat16)
                state["step"] += 1
                step = state["step"].item()
                grad = param.grad.to(torch.bfloat16)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1.0 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                exp_avg = state["exp_avg"].float() / (1.0 - beta1**step)
                denom = (state["exp_avg_sq"].float() / (1.0 - beta2**step)).sqrt_().add_(group["eps"])
                master = param.float()
                update = exp_avg.div_(denom).add_(master, alpha=group["weight_decay"]).mul_(-group["lr"])
                if not compensated:
                    param.add_(update)
                    continue
                update.add_(state["compensation"].float())
                new_param = (master + update).to(param.dtype)
                state["compensation"].copy_(update.sub_(new_param.float() - master))
                param.copy_(new_param)
        return loss


def build_optimizer(module: torch.nn.Module, config: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer named by `config.strategy` over the trainable parameters of `module` (frozen ones get no state)."""
    params = [param for param in module.parameters() if param.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters; check freeze_vision_tower and the model path.")
    betas = tuple(config.betas)
    if len(betas) != 2:
        raise ValueError(f"optim.betas must have two values (beta1, beta2), got {list(config.betas)}.")
    if config.strategy == "adamw":
        # On the CPU the fused kernel is much faster than torch's per-parameter default; CUDA keeps foreach.
        fused = is_cpu() and all(param.device.type == "cpu" for param in params)
        return torch.optim.AdamW(
            params, lr=config.lr, betas=betas, weight_decay=config.weight_decay, fused=True if fused else None
        )
    if config.strategy == "adamw_bf16":
        return BF16AdamW(params, lr=config.lr, betas=betas, weight_decay=config.weight_decay)
    raise ValueError(f"Unknown optim.strategy {config.strategy!r}; choose one of {', '.join(OPTIMIZER_STRATEGIES)}.")


def reset_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Zero every state tensor of `optimizer` in place (moments, step counts, BF16AdamW's compensation), wherever it
    lives (offloaded or not): for the Adam family, the next step is a new optimizer's first. Zeroed rather than
    dropped, so a checkpoint saved now holds the restarted state (saving an empty one would initialise it first)."""
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value.zero_()


class WarmupDecaySchedule:
    """LR multiplier: linear warmup to 1 ((s + 1) / warmup_steps, so the first update moves the weights), then
    constant, or cosine or linear down to `min_lr_ratio` at `training_steps`. A plain object, so LambdaLR's state_dict saves it."""

    def __init__(self, kind: str, warmup_steps: int, training_steps: int, min_lr_ratio: float) -> None:
        self.kind = kind
        self.warmup_steps = warmup_steps
        self.training_steps = training_steps
        self.min_lr_ratio = min_lr_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.training_steps - self.warmup_steps))
        remaining = 1.0 - progress if self.kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * remaining


def build_lr_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig) -> LambdaLR:
    """LambdaLR with the warmup and decay of `config`; call `.step()` once per optimizer update call."""
    if config.lr_scheduler_type not in LR_SCHEDULER_TYPES:
        raise ValueError(
            f"Unknown optim.lr_scheduler_type {config.lr_scheduler_type!r}; choose one of "
            f"{', '.join(LR_SCHEDULER_TYPES)}."
        )
    needs_total = config.lr_scheduler_type != "constant" or (config.lr_warmup_steps is None and config.lr_warmup_ratio)
    if needs_total and config.training_steps <= 0:
        raise ValueError(
            f"optim.training_steps={config.training_steps}: a cosine or linear schedule, or a warmup ratio, needs the total "
            "number of steps; the trainer derives it, or set optim.lr_warmup_steps for a constant schedule."
        )
    warmup = config.lr_warmup_steps
    if warmup is None:
        warmup = int(config.lr_warmup_ratio * max(config.training_steps, 0))
    if warmup < 0:
        raise ValueError(f"optim.lr_warmup_steps={config.lr_warmup_steps} must not be negative.")
    min_lr_ratio = 0.0 if config.min_lr_ratio is None else config.min_lr_ratio
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"optim.min_lr_ratio={config.min_lr_ratio} must be between 0 and 1.")
    schedule = WarmupDecaySchedule(config.lr_scheduler_type, warmup, config.training_steps, min_lr_ratio)
    return LambdaLR(optimizer, schedule)
