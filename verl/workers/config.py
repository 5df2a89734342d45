# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The worker configuration tree: actor, critic, reference model, reward and rollout.

Each section checks its own values in `validate(prefix)` and, where it names files, loads or reads them in
`check_files(prefix)` (reward functions, the reward model's config.json); WorkerConfig runs its sections' checks.
Rules that tie the workers to the data, the algorithm or the cluster are `verl.trainer.config`'s.
"""

import logging
import math
from dataclasses import dataclass, field, fields
from typing import Any

from verl.models.config import (
    FSDPConfig,
    OffloadConfig,
    check_offload,
    read_model_config,
    require_model_files,
    trained_positions,
)
from verl.rewards.function import RewardFunctionLoadError, RewardNames, check_reward_function
from verl.rewards.llm_judge import JudgeConfig
from verl.utils.config import (
    ConfigError,
    as_config_error,
    require_choice,
    require_finite,
    require_non_negative,
    require_path,
    require_positive,
)
from verl.workers.actor.config import ActorConfig
from verl.workers.critic.config import CriticConfig
from verl.workers.rollout.config import RolloutConfig


logger = logging.getLogger(__name__)


RUN_IN: tuple[str, ...] = ("driver", "actor")
"""Values of reward.run_in."""


@dataclass
class RefConfig:
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """FSDP2 sharding of the frozen reference model. With LoRA (worker.actor.model.lora.rank > 0) the reference is
    the actor's base model with its adapters off: it is sharded and offloaded as the actor, and these keys and
    offload.* do not apply."""
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """Offloading of the reference model's parameters between phases (offload_params; it has no optimizer)."""
    micro_batch_size_per_device_for_experience: int = 16
    """Derived from worker.actor.micro_batch_size_per_device_for_experience."""
    padding_free: bool = True
    """Derived from worker.actor.padding_free."""
    dynamic_batching: bool = True
    """Derived from worker.actor.dynamic_batching."""
    ulysses_size: int = 1
    """Derived from worker.actor.ulysses_size."""

    def validate(self, prefix: str) -> None:
        self.fsdp.validate(f"{prefix}fsdp.")
        check_offload(prefix, self.fsdp, self.offload)
        if self.offload.offload_optimizer:
            raise ConfigError(
                f"{prefix}offload.offload_optimizer: the reference model is frozen and has no optimizer; remove the "
                f"key ({prefix}offload.offload_params offloads its parameters)."
            )


@dataclass
class RewardModelConfig:
    model_path: str | None = None
    """Sequence-classification reward model (local directory or hub id, as the actor's) with one label, e.g. one
    written by scripts/train_reward_model.py; None means no reward model."""
    tokenizer_path: str | None = None
    """Tokenizer of the reward model (its chat template renders the conversation); defaults to model_path."""
    trust_remote_code: bool = False
    """Allow model and tokenizer code from the reward model's directory or hub repository (also used for the policy
    tokenizer)."""
    max_length: int = 2048
    """Tokens of the rendered prompt + response given to the reward model; longer conversations keep their end (the
    response, where the score is read) and are counted in reward_model/truncated_ratio."""
    strip_reasoning: bool = False
    """Score only each response's final answer, the text after its reasoning (its last `</think>`); a response
    whose reasoning never closed (cut at max_response_length) is scored as an empty answer. The reasoning is then not
    scored, as DeepSeek-R1's helpfulness reward, and a long one cannot push the prompt out of max_length. False: the
    whole response."""
    micro_batch_size: int = 8
    """Conversations per reward-model forward on each device."""
    weight: float = 1.0
    """Factor of the reward model's score (rm_scores) in the overall reward."""
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    """Sharding of the reward model; it is frozen, so unless fsdp.torch_dtype is set it is stored in fp32 on the CPU
    and in fsdp.mp_param_dtype (bf16) on GPUs."""
    n_gpus_per_node: int = 0
    """Devices (on CPU: processes) per node of the reward model's own resource pool, apart from the actor's; 0 puts
    it beside the actor instead: a role of every actor process, its shards next to the actor's (no devices of its
    own)."""
    nnodes: int = 1
    """Nodes of the reward model's own resource pool (with n_gpus_per_node > 0)."""

    def validate(self, prefix: str) -> None:
        require_non_negative(self, prefix, "n_gpus_per_node")
        require_positive(self, prefix, "nnodes")
        require_finite(self, prefix, "weight")
        if not self.model_path:  # settings of a reward model, set without one, would do nothing
            unset = RewardModelConfig()
            changed = [f"{prefix}{f.name}" for f in fields(self) if getattr(self, f.name) != getattr(unset, f.name)]
            if changed:
                raise ConfigError(
                    f"{', '.join(changed)} set(s) the reward model, and {prefix}model_path is unset (no reward "
                    f"model): set {prefix}model_path, or remove them."
                )
            return
        require_positive(self, prefix, "max_length", "micro_batch_size")
        if self.max_length < 2:  # the worker's own rule: a prompt token and a response token at least
            raise ConfigError(f"{prefix}max_length={self.max_length} must be at least 2 tokens.")
        self.fsdp.validate(f"{prefix}fsdp.")

    def check_files(self, prefix: str) -> None:
        """A local checkpoint must be a one-label sequence classifier: the worker refuses anything else too, but only
        after Ray and the actor have started."""
        require_path(self, prefix, "model_path", "directory", allow_hub=True)
        require_path(self, prefix, "tokenizer_path", "directory", allow_hub=True)
        key = f"{prefix}model_path"
        require_model_files(key, self.model_path)
        model_config = read_model_config(key, self.model_path)
        if model_config is None:
            return  # a hub id: the worker checks it when it loads
        if "vision_config" in model_config:
            raise NotImplementedError(
                f"{key}='{self.model_path}' is a vision-language model; reward models are text models (images are "
                "not shown to them)."
            )
        architectures = model_config.get("architectures") or []
        if architectures and not any(name.endswith("ForSequenceClassification") for name in architectures):
            raise ConfigError(
                f"{key}='{self.model_path}' is a {', '.join(architectures)}, not a sequence-classification reward "
                "model; train one from it with `python scripts/train_reward_model.py --init-from-lm --model PATH ...`."
            )
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        model_type = model_config.get("model_type")
        if model_type and model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:  # BERT, DeBERTa, RoBERTa, ...
            raise NotImplementedError(
                f"{key}='{self.model_path}' is a {model_type} model, an encoder: the reward model worker reads the "
                "score at the last token of a decoder's conversation rendered by its chat template (an encoder "
                "reads it at its first, [CLS], token, which left truncation can cut). Use a decoder reward model "
                "(e.g. a Qwen2ForSequenceClassification), or score with this one in a reward function."
            )
        positions = model_config.get("n_positions")  # learned positions (GPT-2's family): no RoPE to extend them
        if isinstance(positions, int) and self.max_length > positions:
            raise ConfigError(
                f"{prefix}max_length={self.max_length} is longer than the {positions} positions {key}="
                f"'{self.model_path}' has (n_positions, learned): its forward would fail on a longer conversation. "
                f"Set {prefix}max_length={positions} (conversations keep their last tokens)."
            )
        positions = trained_positions(model_config)
        if positions is not None and self.max_length > positions:
            logger.warning(
                "%smax_length=%d is longer than the %d positions %s='%s' was trained for (max_position_embeddings, "
                "with its RoPE scaling): conversations longer than that are scored past its context, where scores are "
                "unreliable. Set %smax_length=%d (conversations keep their last tokens) unless it handles more.",
                prefix, self.max_length, positions, key, self.model_path, prefix, positions,
            )  # fmt: skip
        labels = len(model_config.get("id2label") or {}) or model_config.get("num_labels", 2)
        if labels != 1:
            raise ConfigError(
                f"{key}='{self.model_path}' has {labels} labels; a reward model gives one score (num_labels=1)."
            )


@dataclass
class RewardConfig:
    reward_function: str | None = None
    """Python file and function that score a response: path/to/file.py:function (function defaults to main)."""
    reward_function_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed to the reward function."""
    routes: dict[str, str] = field(default_factory=dict)
    """Mixed datasets: {value of the row's route_key column: "path/to/file.py:function"}, e.g. {math: ...math_verify.py:
    compute_score, code: ...code.py:compute_score}. Each row is scored by its route's function; rows whose value is
    not a route go to reward_function (an error if it is unset). Keys that only some routes return are averaged
    over the rows that have them; `<route>/overall` is logged per route."""
    route_key: str = "data_source"
    """Dataset column whose value picks the route of a row."""
    routes_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Keyword arguments of each route's function: {route: {name: value}}."""
    rubric: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Several reward functions, each scoring every sample, combined by weight: {name: {function: "path/to/file.py:
    function", weight: 1.0, kwargs: {...}}}. overall = sum of weight x each function's overall; every key a function
    returns is logged as reward/<name>/<key>. With reward_function also set, it is one more part, named "reward",
    of weight 1. Not combined with routes."""
    rule_weight: float = 1.0
    """Weight of the rule-based functions' overall when a reward model or a judge is added:
    overall = rule_weight x rule + model.weight x rm_score + judge.weight x judge_score."""
    model: RewardModelConfig = field(default_factory=RewardModelConfig)
    """A sequence-classification reward model, FSDP2-sharded in the worker processes (colocated with the actor)."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    """An LLM judge in its own Ray actor and vLLM engine, grading each response with a Jinja template."""
    skip_special_tokens: bool = True
    """Decode responses without special tokens before the reward functions score them (the reward model and the
    judge always get them without, in their own chat template)."""
    run_in: str = "driver"
    """Where the rule-based functions run: "driver", a thread of the trainer's process (no process of its own, ~0.4 GB
    and several CPU-seconds of start-up less; batches are still scored while the workers compute log-probs and
    values), or "actor", a Ray actor of its own that reserves num_cpus CPUs (for reward code that should not share
    the trainer's process: native code that may crash it, large memory, or long pure-Python scoring at num_cpus=1,
    which would hold the trainer's GIL)."""
    num_cpus: int = 1
    """Processes over which a sequential function scores a batch in parallel (1: in the scoring thread itself);
    with run_in=actor also the CPUs the reward actor reserves."""
    timeout_s: float = 1800.0
    """Longest the rule-based functions' or the judge's scoring of a batch may take; past it the run stops with an
    error naming the reward function or the judge (a hung function never hangs the run). The reward model scores in
    the workers and is not timed (trainer.stall_report_s reports a call that seems stuck). <= 0 waits forever."""
    stream: bool | None = None
    """worker.rollout.mode=colocated or disaggregated: score each group as soon as its n samples are complete, while
    the engines generate the rest (docs/async.md), with every part of the reward: rule functions, a judge, and a
    reward model on a pool of its own (model.n_gpus_per_node > 0) or, in mode=disaggregated, in the trainer's
    processes. Unset: on unless a rule function is a batch function (it then still gets the step's whole batch) or
    a reward model shares the engines' processes (mode=colocated with model.n_gpus_per_node=0). true: also for batch
    functions, which then get the groups completed together (a few groups, not a step); refused at validation where
    a reward model shares the engines' processes. false: whole batches in the step, as the other modes do."""
    answer_key: str | None = "answer"
    """Set from data.answer_key: the name under which a function in TRL's signature gets the answers."""

    def validate(self, prefix: str) -> None:
        require_positive(self, prefix, "num_cpus")
        require_choice(self, prefix, "run_in", RUN_IN)
        require_finite(self, prefix, "rule_weight")
        self.model.validate(f"{prefix}model.")
        if self.rule_weight != 1.0 and not (self.model.model_path or self.judge.enabled):
            raise ConfigError(
                f"{prefix}rule_weight={self.rule_weight} weighs the rule-based functions against a reward model or a "
                f"judge, and this run has neither: remove the key (scale the reward in your function instead)."
            )
        unknown = sorted(set(self.routes_kwargs) - set(self.routes))
        if unknown:
            raise ConfigError(
                f"{prefix}routes_kwargs has route(s) {unknown} that are not in {prefix}routes ({sorted(self.routes)})."
            )

    def check_files(self, prefix: str) -> None:
        """Load every reward function once (no torch, no Ray): a missing file, function, package or bad kwargs is
        named now; the judge's model path (or hub id) and template are checked and there must be some reward."""
        if self.reward_function:
            with as_config_error(RewardFunctionLoadError):
                check_reward_function(self.reward_function, self.reward_function_kwargs)
        require_path(self.judge, f"{prefix}judge.", "model_path", "directory", allow_hub=True)
        require_model_files(f"{prefix}judge.model_path", self.judge.model_path)
        with as_config_error():
            self.judge.check()
            self.judge.template_kwargs()
        self.check_rubric(prefix)
        if not (self.reward_function or self.routes or self.rubric or self.judge.enabled or self.model.model_path):
            raise ConfigError(
                f"No reward: set {prefix}reward_function (or {prefix}routes), a reward model "
                f"({prefix}model.model_path) or a judge ({prefix}judge.model_path)."
            )
        for route, spec in self.routes.items():
            names = RewardNames(f"{prefix}routes.{route}", f"{prefix}routes_kwargs.{route}")
            with as_config_error(RewardFunctionLoadError):
                check_reward_function(spec, self.routes_kwargs.get(route, {}), names)
        self.model.check_files(f"{prefix}model.")

    def check_rubric(self, prefix: str, remote: bool = True) -> None:
        """Each part names a loadable function with a numeric weight; a rubric is not combined with routes (also
        verl.envs.evaluate's --rubric, with prefix "--", where no reward actor runs on another node: `remote`)."""
        if not self.rubric:
            return
        if self.routes:
            raise ConfigError(f"{prefix}rubric and {prefix}routes cannot be combined; use one of them.")
        if self.reward_function and "reward" in self.rubric:
            raise ConfigError(
                f'{prefix}rubric.reward: with {prefix}reward_function set, the rubric\'s part "reward" is that '
                "function (with reward_function_kwargs, weight 1); rename the part, or put the function in it and "
                f"unset {prefix}reward_function."
            )
        for name, part in self.rubric.items():
            key = f"{prefix}rubric.{name}"
            if not isinstance(part, dict) or not isinstance(part.get("function"), str):
                raise ConfigError(
                    f'{key} must be {{function: "path/to/file.py:function", weight: 1.0, kwargs: {{}}}}.'
                )
            unknown = sorted(set(part) - {"function", "weight", "kwargs"})
            if unknown:
                raise ConfigError(f"{key} has unknown key(s) {unknown}; the keys are function, weight and kwargs.")
            weight = part.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ConfigError(f"{key}.weight must be a finite number, got {weight!r}.")
            names = RewardNames(f"{key}.function", f"{key}.kwargs", remote)
            with as_config_error(RewardFunctionLoadError):
                check_reward_function(part["function"], dict(part.get("kwargs") or {}), names)


@dataclass(frozen=True)
class UpdateRequest:
    """What the driver tells the workers' update of one step (`update_actor`, `update_critic`)."""

    global_step: int
    """The training step, named in a user function's errors."""
    entropy_coeff: float | None = None
    """Adaptive entropy control's coefficient for this step (algorithm.entropy_control); None: actor.entropy_coeff."""


@dataclass
class WorkerConfig:
    hybrid_engine: bool = True
    """EasyR1's switch for the engines' placement, kept for its configs: true only. Where the engines run is
    worker.rollout.mode (sync and colocated: in the actor's processes; disaggregated: a pool of their own)."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """The policy being trained."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value model (used by gae)."""
    ref: RefConfig = field(default_factory=RefConfig)
    """The frozen reference policy for the KL term."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The reward function."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The vLLM generation engine."""
    override_chat_template: str | None = None
    """Derived from data.override_chat_template: the workers' tokenizers carry it, so environment turns of multi-turn
    rollouts are rendered as the prompts were, and checkpoints save it."""

    def validate(self, prefix: str) -> None:
        if not self.hybrid_engine:
            raise ConfigError(
                f"{prefix}hybrid_engine=false: the engines' placement is worker.rollout.mode here. For rollout "
                "engines on GPUs of their own, set worker.rollout.mode=disaggregated (with worker.rollout.nnodes and "
                f"n_gpus_per_node) and leave {prefix}hybrid_engine=true."
            )
        for name in ("actor", "critic", "ref", "reward", "rollout"):
            getattr(self, name).validate(f"{prefix}{name}.")

    def check_files(self, prefix: str) -> None:
        for name in ("actor", "critic", "reward", "rollout"):
            getattr(self, name).check_files(f"{prefix}{name}.")
