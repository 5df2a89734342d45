# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RewardModelWorker: scores (prompt, response) pairs with a sequence-classification reward model (RM) under FSDP2.

Each row is turned back into text and rendered with the RM's own chat template, exactly as
`scripts/train_reward_model.py` does in training. docs/rewards.md has its settings.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoConfig, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedTokenizerBase

from verl.data.tokenizer import defuse_specials, get_tokenizer, special_strings
from verl.models.config import FSDPConfig
from verl.models.fsdp import (
    apply_fsdp2,
    build_device_mesh,
    frozen_param_dtype,
    gathers_once_per_pass,
    load_rank0_weights,
    micro_batch_pass,
)
from verl.models.loading import is_vision_language
from verl.protocol import DataProto
from verl.rewards.manager import decode_responses, user_messages
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils import device as device_utils
from verl.workers.config import RewardModelConfig


RM_ATTN_IMPLEMENTATION = "sdpa"
"""Attention of the reward model: rows are right-padded, so plain sdpa with a padding mask is exact and portable."""

FALLBACK_TEMPLATE = "User: {prompt}\n\nAssistant: {response}"
"""Layout of a conversation for an RM tokenizer without a chat template (e.g. a base LM given to --init-from-lm)."""


# ---------------------------------------------------------------------------------------------- text -> scores
# Shared with scripts/train_reward_model.py: training and scoring must lay the text out identically.


def render_conversation(tokenizer: PreTrainedTokenizerBase, prompt: str, response: str) -> str:
    """The text the RM scores: [user: prompt, assistant: response] through the RM's chat template (or
    FALLBACK_TEMPLATE), without a generation prompt: the score is read after the end-of-turn tokens."""
    if not getattr(tokenizer, "chat_template", None):
        return FALLBACK_TEMPLATE.format(prompt=prompt, response=response)
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    return tokenizer.apply_chat_template(messages, tokenize=False)


def truncate_left(ids: list[int], max_length: int) -> tuple[list[int], bool]:
    """The last `max_length` ids (the score is read at the end), and whether any were dropped."""
    if max_length < 1:
        raise ValueError(f"max_length={max_length} must be positive.")
    return list(ids[-max_length:]), len(ids) > max_length


def tokenize_conversations(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str], max_length: int
) -> tuple[list[list[int]], int]:
    """RM token ids of each rendered (prompt, response), truncated from the left, and the count cut. No special
    tokens are added: the template holds them; those the prompt or response spell stay text."""
    if len(prompts) != len(responses):
        raise ValueError(f"Got {len(prompts)} prompts but {len(responses)} responses; pass one response per prompt.")
    rows, truncated, specials = [], 0, special_strings(tokenizer)
    for prompt, response in zip(prompts, responses):
        # a response spelling `<|im_end|>...` stays text: it cannot end its turn and forge what the RM scores
        text = render_conversation(tokenizer, defuse_specials(prompt, specials), defuse_specials(response, specials))
        ids, cut = truncate_left(tokenizer.encode(text, add_special_tokens=False), max_length)
        if not ids:
            raise ValueError(f"The conversation {text!r} has no tokens; the RM needs at least one to score.")
        rows.append(ids)
        truncated += int(cut)
    return rows, truncated


def pad_right(rows: list[list[int]], pad_token_id: int, device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """input_ids and attention_mask of right-padded rows (default position ids stay right; the last valid token is
    at attention_mask.sum() - 1)."""
    tensors = [torch.tensor(row, dtype=torch.long) for row in rows]
    input_ids = pad_sequence(tensors, batch_first=True, padding_value=pad_token_id)
    attention_mask = pad_sequence([torch.ones_like(row) for row in tensors], batch_first=True)
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def last_token_scores(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Label-0 score (float32, shape (B,)) at each right-padded row's last valid token, differentiable.

    HF's heads pool the rightmost non-pad token, wrong when a turn ends in the pad id. So a hook on the `score` head
    puts the output at attention_mask.sum() - 1 in every position; it still leaves through the model's output, on
    which FSDP2 hooks its backward gathers. A head under another name falls back to HF's pooling.
    """
    last = attention_mask.sum(dim=-1) - 1
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)

    def at_last_token(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if output.dim() != 3 or output.shape[1] != input_ids.shape[1]:
            return None  # not per-token logits: leave the output alone
        return output[rows, last].unsqueeze(1).expand_as(output)

    head = getattr(model, "score", None)
    handle = head.register_forward_hook(at_last_token) if isinstance(head, nn.Module) else None
    try:
        output = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    finally:
        if handle is not None:
            handle.remove()
    return output.logits[:, 0].float()


def score_rows(
    model: nn.Module, rows: list[list[int]], pad_token_id: int, micro_batch_size: int, device: torch.device
) -> torch.Tensor:
    """Scores (float32, CPU) of token-id rows in input order, in length-sorted micro-batches, without gradients.
    Every FSDP rank must run the same number of forwards (each all-gathers), so a rank with fewer micro-batches runs
    one-token dummy forwards."""
    order = sorted(range(len(rows)), key=lambda index: -len(rows[index]))
    batches = [order[start : start + micro_batch_size] for start in range(0, len(order), micro_batch_size)]
    count = len(batches)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        most = torch.tensor([count], dtype=torch.long)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)  # a host tensor: gloo, also beside nccl (device.get_dist_backend)
        count = int(most.item())
    scores = torch.zeros(len(rows), dtype=torch.float32)
    with torch.no_grad():
        for step in range(count):
            if step < len(batches):
                inputs = pad_right([rows[index] for index in batches[step]], pad_token_id, device)
                scores[batches[step]] = last_token_scores(model, **inputs).cpu()
            else:
                last_token_scores(model, **pad_right([[pad_token_id]], pad_token_id, device))
    return scores


# ---------------------------------------------------------------------------------------------- the model


def load_reward_model_config(
    path: str, trust_remote_code: bool = False, from_lm: bool = False, pad_token_id: int | None = None
) -> PretrainedConfig:
    """The RM's config, checked: a one-label sequence-classification text model with a pad token id. `from_lm` gives
    any text model one label (a fresh score head, --init-from-lm); otherwise another architecture is refused, as it
    would silently score with a random head."""
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    if is_vision_language(config) or hasattr(config, "vision_config"):
        raise NotImplementedError(
            f"Reward model '{path}' is a {config.model_type!r} vision-language model; vision-language reward models "
            "are not supported yet: use a text reward model (images are not shown to it)."
        )
    architectures = list(getattr(config, "architectures", None) or [])
    if from_lm:
        config.num_labels = 1
    elif architectures and not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ValueError(
            f"Model '{path}' is a {', '.join(architectures)}, not a sequence-classification reward model; train one "
            "from it with `python scripts/train_reward_model.py --init-from-lm --model PATH ...`."
        )
    elif config.num_labels != 1:
        raise ValueError(
            f"Reward model '{path}' has {config.num_labels} labels; a reward model gives one score (num_labels=1)."
        )
    if pad_token_id is not None and config.get_text_config().pad_token_id is None:
        config.pad_token_id = pad_token_id  # HF's pooling (the fallback of last_token_scores) needs it
    config.use_cache = False
    return config


def build_fsdp_reward_model(
    path: str,
    config: PretrainedConfig,
    fsdp_config: FSDPConfig,
    device: torch.device,
    dtype: torch.dtype,
    trust_remote_code: bool = False,
) -> nn.Module:
    """Load the RM and shard it with FSDP2 over all ranks (verl.models.fsdp). With fsdp.enable_rank0_init only rank 0
    reads the checkpoint (and initialises a missing head); the others get their shards by broadcast."""
    world_size = dist.get_world_size()
    mesh = build_device_mesh(world_size, fsdp_config.fsdp_size, device.type)
    kwargs = {"config": config, "dtype": dtype, "attn_implementation": RM_ATTN_IMPLEMENTATION}
    kwargs["trust_remote_code"] = trust_remote_code
    rank0_init = fsdp_config.enable_rank0_init and world_size > 1
    full_model = None
    if rank0_init:
        if dist.get_rank() == 0:
            full_model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(**kwargs)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    apply_fsdp2(model, mesh, fsdp_config, is_cpu=device.type == "cpu")
    if rank0_init:
        load_rank0_weights(model, full_model, fsdp_config, device)
        del full_model
    return model


# ---------------------------------------------------------------------------------------------- the worker


class RewardModelWorker(Worker):
    """A frozen, FSDP2-sharded sequence-classification RM; `compute_rm_score` gives one score per rollout row."""

    def __init__(self, config: RewardModelConfig, policy_tokenizer_path: str, device: str = "auto") -> None:
        super().__init__()
        if not config.model_path:
            raise ValueError("RewardModelWorker needs worker.reward.model.model_path (a reward model directory).")
        if config.max_length < 2:
            raise ValueError(f"worker.reward.model.max_length={config.max_length} must be at least 2 tokens.")
        if config.micro_batch_size < 1:
            raise ValueError(f"worker.reward.model.micro_batch_size={config.micro_batch_size} must be at least 1.")
        self.config = config
        self.policy_tokenizer_path = policy_tokenizer_path
        self.device_type = device_utils.set_device_type(device)
        device_utils.init_distributed()  # a no-op for the second role of a colocated process
        self.device = device_utils.get_local_device()  # `@register` moves batches here and results back
        self.module: nn.Module | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load both tokenizers and the RM; the RM is sharded, in eval mode and without gradients."""
        config = self.config
        tokenizer_path = config.tokenizer_path or config.model_path
        self.rm_tokenizer = get_tokenizer(tokenizer_path, trust_remote_code=config.trust_remote_code)
        self.policy_tokenizer = get_tokenizer(self.policy_tokenizer_path, trust_remote_code=config.trust_remote_code)
        rm_config = load_reward_model_config(
            config.model_path, config.trust_remote_code, pad_token_id=self.rm_tokenizer.pad_token_id
        )
        dtype = frozen_param_dtype(config.fsdp, self.device_type)
        module = build_fsdp_reward_model(
            config.model_path, rm_config, config.fsdp, self.device, dtype, config.trust_remote_code
        )
        module.requires_grad_(False)
        self.module = module.eval()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """rm_scores (float32, one per row) and meta_info["metrics"] (the truncated share, summed over ranks here as
        the driver keeps only rank 0's meta_info; dispatch's padding rows count too)."""
        if self.module is None:
            raise RuntimeError("RewardModelWorker.compute_rm_score was called before init_model.")
        config = self.config
        rows, truncated = [], 0
        if len(data) > 0:
            rows, truncated = tokenize_conversations(
                self.rm_tokenizer,
                user_messages(data, self.policy_tokenizer),
                decode_responses(data, self.policy_tokenizer, config.strip_reasoning),
                config.max_length,
            )
        gather_once = gathers_once_per_pass(config.fsdp, self.device_type)
        with micro_batch_pass(self.module, gather_once, config.fsdp.enable_full_shard):
            scores = score_rows(
                self.module, rows, self.rm_tokenizer.pad_token_id, config.micro_batch_size, self.device
            )
        totals = torch.tensor([float(truncated), float(len(rows))], dtype=torch.float64)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(totals)
        truncated_total, row_total = totals.tolist()
        metrics = {"reward_model/truncated_ratio": truncated_total / max(row_total, 1.0)}
        return DataProto.from_dict(tensors={"rm_scores": scores}, meta_info={"metrics": metrics})
