# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""From a rollout batch to rewards: build each sample's input, score it, check it, place it on the tokens.

The function sees the whole sample (RewardInput: response, prompt, ground truth, images, uid and every other column).
`overall` becomes the score at the last valid response token; every returned key becomes a metric.
"""

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto, plain_value
from verl.rewards.function import (
    CONFIG_KEY,
    TRAINER_NAMES,
    RewardFunctionError,
    RewardFunctionLoadError,
    RewardInput,
    RewardNames,
    after_reasoning,
    check_scores,
    load_reward_function,
    opens_reasoning,
    score_batch,
    score_sequential,
    uid_note,
)
from verl.rewards.parallel import SequentialPool


logger = logging.getLogger(__name__)

# Non-tensor columns that have their own field (of the same name) in RewardInput.
_OWN_FIELDS = ("ground_truth", "uid", "multi_modal_data", "prompt_messages")
_PROMPT_TEXT_KEYS = ("prompt_text", "raw_prompt")
# Non-tensor columns the pipeline adds for the model, hidden from reward functions.
_PIPELINE_KEYS = frozenset({"raw_prompt_ids", "multi_modal_inputs", "prompt_content"})


@dataclass(frozen=True)
class RewardSettings:
    """worker.reward's fields of the same names (RewardConfig documents them) as plain values, so they travel to a
    Ray actor without the config classes."""

    reward_function: str | None
    reward_function_kwargs: dict[str, Any] = field(default_factory=dict)
    skip_special_tokens: bool = True
    num_cpus: int = 1
    routes: dict[str, str] = field(default_factory=dict)
    route_key: str = "data_source"
    routes_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    rubric: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer_key: str | None = None
    names: RewardNames = TRAINER_NAMES
    """How errors name the function and its kwargs: the config keys, or a command's flags."""

    @classmethod
    def from_config(cls, config: Any) -> "RewardSettings":
        """Read worker.reward from any object with RewardConfig's attributes."""
        routes = {str(k): v for k, v in (getattr(config, "routes", None) or {}).items()}
        rubric = {str(k): dict(v) for k, v in (getattr(config, "rubric", None) or {}).items()}
        if not getattr(config, "reward_function", None) and not routes and not rubric:
            raise RewardFunctionLoadError(
                f"{CONFIG_KEY} is not set; point it at your scorer, e.g. "
                "examples/reward_function/math.py:compute_score (or give worker.reward.routes for a mixed dataset)."
            )
        return cls(
            reward_function=getattr(config, "reward_function", None) or None,
            reward_function_kwargs=dict(getattr(config, "reward_function_kwargs", None) or {}),
            skip_special_tokens=bool(getattr(config, "skip_special_tokens", True)),
            num_cpus=int(getattr(config, "num_cpus", 1)),
            routes=routes,
            route_key=str(getattr(config, "route_key", "data_source")),
            routes_kwargs={str(k): dict(v) for k, v in (getattr(config, "routes_kwargs", None) or {}).items()},
            rubric=rubric,
            answer_key=getattr(config, "answer_key", None),
        )

    def rubric_parts(self) -> dict[str, tuple[str, dict[str, Any], float]]:
        """name -> (spec, kwargs, weight) of each rubric part, reward_function included as "reward" when set."""
        parts = {
            name: (str(part["function"]), dict(part.get("kwargs") or {}), float(part.get("weight", 1.0)))
            for name, part in self.rubric.items()
        }
        if self.reward_function:
            parts.setdefault("reward", (self.reward_function, self.reward_function_kwargs, 1.0))
        return parts

    def functions(self) -> dict[str | None, tuple[str, dict[str, Any]]]:
        """(spec, kwargs) of every function to load: each route's, and under None the default reward_function."""
        specs: dict[str | None, tuple[str, dict[str, Any]]] = {
            route: (spec, self.routes_kwargs.get(route, {})) for route, spec in self.routes.items()
        }
        if self.reward_function:
            specs[None] = (self.reward_function, self.reward_function_kwargs)
        return specs


def valid_response_mask(data: DataProto) -> torch.Tensor:
    if "response_mask" in data.batch.keys():
        return data.batch["response_mask"].bool()
    response_length = data.batch["responses"].shape[-1]  # batches made before response_mask existed
    return data.batch["attention_mask"][:, -response_length:].bool()


def decode_prompts(data: DataProto, tokenizer: Any, skip_special_tokens: bool) -> list[str]:
    """Each row's left-padded prompt ids, padding dropped, as text."""
    prompts = data.batch["prompts"]
    prompt_mask = data.batch["attention_mask"][:, : prompts.shape[-1]].bool()
    return tokenizer.batch_decode(
        [ids[mask].tolist() for ids, mask in zip(prompts, prompt_mask)], skip_special_tokens=skip_special_tokens
    )


def response_token_ids(data: DataProto) -> list[list[int]]:
    """Each row's valid response tokens: the model's and, in multi-turn episodes, the environment's."""
    responses, tokens = data.batch["responses"], valid_response_mask(data)
    if "attention_mask" in data.batch.keys():  # the environment's tokens: attended, out of the loss
        tokens = tokens | data.batch["attention_mask"][:, -responses.shape[-1] :].bool()
    return [row[mask].tolist() for row, mask in zip(responses, tokens)]


def decode_responses(
    data: DataProto, tokenizer: Any, strip_reasoning: bool = False, skip_special_tokens: bool = True
) -> list[str]:
    """Each row's response as text: every valid token, the model's and, in multi-turn episodes, the environment's
    (a judge reads the tool results the answer rests on); with `strip_reasoning`, only what follows the reasoning
    ("" where it never closed: the response, or the generation prompt, opened it)."""
    texts = tokenizer.batch_decode(response_token_ids(data), skip_special_tokens=skip_special_tokens)
    if not strip_reasoning:
        return texts
    prompts = data.batch["prompts"]
    prompt_mask = data.batch["attention_mask"][:, : prompts.shape[-1]].bool()
    # the generation prompt's last tokens: "<|im_start|>assistant\n<think>\n" where it opens the reasoning
    tails = tokenizer.batch_decode([ids[mask][-8:].tolist() for ids, mask in zip(prompts, prompt_mask)])
    return [(after_reasoning(text, opens_reasoning(tail)) or "").lstrip() for text, tail in zip(texts, tails)]


def _last_user_text(content: Any) -> str | None:
    """The text of a prompt given as text, or of the last user message of one given as messages (a system prompt or
    few-shot turns before it: the dataset formats that last one); None where there is none."""
    if isinstance(content, str) or content is None:
        return content
    items = list(content)
    if items and all(isinstance(item, dict) and "role" not in item for item in items):  # one message's parts
        return _parts_text(items)
    users = [m.get("content") for m in items if isinstance(m, dict) and m.get("role") == "user"]
    return _parts_text(users[-1]) if users else None


def _parts_text(content: Any) -> str | None:
    """A message's content as text: a string, or typed parts (a vision-language prompt's) with an `<image>` /
    `<video>` marker per picture; None where it is neither."""
    from verl.data.multimodal import marker_text

    try:
        text = marker_text(list(content) if not isinstance(content, str) else content)
    except (TypeError, ValueError):
        return None
    return text if isinstance(text, str) else None


def user_messages(data: DataProto, tokenizer: Any) -> list[str]:
    """Each row's user message, for a reward model or judge (which score one user turn and its answer, as the reward
    model script trains them): its `prompt_content` (the dataset's text before the chat template; of a prompt given
    as messages, the last user message's; a vision-language prompt's parts with a marker per picture), else its
    prompt ids decoded without special tokens."""
    contents = [
        _last_user_text(content) for content in data.non_tensor_batch.get("prompt_content", [None] * len(data))
    ]
    if all(isinstance(text, str) for text in contents):
        return contents
    decoded = decode_prompts(data, tokenizer, skip_special_tokens=True)
    return [text if isinstance(text, str) else fallback for text, fallback in zip(contents, decoded)]


def build_reward_inputs(data: DataProto, tokenizer: Any, skip_special_tokens: bool = True) -> list[RewardInput]:
    """One RewardInput per sample of a rollout batch. `response` decodes the whole response (environment turns
    included); `response_length` counts the model's tokens."""
    columns, ids = data.non_tensor_batch, response_token_ids(data)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=skip_special_tokens)
    lengths = valid_response_mask(data).sum(dim=-1).tolist()
    # the column holding the prompt as text, if any (a column of chat messages does not count)
    texts_only = (key for key in _PROMPT_TEXT_KEYS if key in columns and all(isinstance(t, str) for t in columns[key]))
    prompt_key = next(texts_only, None)
    # The prompt text from its dataset column, else decoded with special tokens: they are part of what the model saw
    # (chat markers, image placeholders).
    prompts = list(columns[prompt_key]) if prompt_key else decode_prompts(data, tokenizer, skip_special_tokens=False)
    used = {*_OWN_FIELDS, prompt_key, *_PIPELINE_KEYS}
    extra_keys = [key for key in columns if key not in used]

    def column(key: str, index: int) -> Any:
        return plain_value(columns[key][index]) if key in columns else None

    def own(value: Any) -> Any:
        """The n samples of a prompt share its row's objects: a function that changes its input in place (pops an
        answer from a list) changed the other samples' inputs, and the batch's columns."""
        return copy.deepcopy(value) if isinstance(value, (list, dict, np.ndarray)) else value

    return [
        RewardInput(
            response=texts[i],
            response_length=int(lengths[i]),
            response_ids=ids[i],
            ground_truth=own(column("ground_truth", i)),
            prompt=prompts[i],
            prompt_messages=own(column("prompt_messages", i)),
            multi_modal_data=column("multi_modal_data", i),
            uid=column("uid", i),
            extra_info={key: own(plain_value(columns[key][i])) for key in extra_keys},
        )
        for i in range(len(data))
    ]


def place_scores(overall: list[float], response_mask: torch.Tensor) -> torch.Tensor:
    """A (batch, response_length) float32 tensor with each score at its row's last valid response token (position 0
    for an empty response, so the sum over tokens is still the score)."""
    positions = torch.arange(response_mask.shape[-1], device=response_mask.device)
    last = (response_mask.long() * positions).argmax(dim=-1)
    reward_tensor = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    rows = torch.arange(response_mask.shape[0], device=response_mask.device)
    reward_tensor[rows, last] = torch.tensor(overall, dtype=torch.float32, device=response_mask.device)
    return reward_tensor


class RewardManager:
    """Builds a batch's reward inputs, `score`s them (subclasses) and places each `overall` on its last token. One
    that combines functions keeps a FunctionRewardManager per function (`functions`: key -> (spec, kwargs))."""

    def __init__(
        self,
        settings: RewardSettings,
        tokenizer: Any,
        functions: Mapping[str | None, tuple[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.managers = {
            key: FunctionRewardManager(
                RewardSettings(
                    spec,
                    kwargs,
                    settings.skip_special_tokens,
                    settings.num_cpus,
                    answer_key=settings.answer_key,
                    names=settings.names,
                ),
                tokenizer,
            )
            for key, (spec, kwargs) in (functions or {}).items()
        }

    def score(self, samples: list[Mapping[str, Any]]) -> dict[str, list[float]]:
        """Checked scores of `samples` as columns: key -> one float per sample."""
        raise NotImplementedError

    def compute_reward(self, data: DataProto) -> tuple[torch.Tensor, dict[str, list[float]]]:
        """(token-level scores (batch, response_length) float32, metrics key -> per-sample values, NaN = n/a)."""
        samples = build_reward_inputs(data, self.tokenizer, self.settings.skip_special_tokens)
        metrics = self.score(samples)
        return place_scores(metrics.get("overall", []), valid_response_mask(data)), metrics

    def close(self) -> None:
        """Stop the worker processes scoring started, if any."""
        for manager in self.managers.values():
            manager.close()

    def where(self) -> str:
        """Where the parallel pools' processes are now (their stacks), if any."""
        return "".join(manager.where() for manager in self.managers.values())


class FunctionRewardManager(RewardManager):
    """Scores rollout batches with a user's reward function (sequential ones in parallel over `num_cpus`)."""

    def __init__(self, config: Any, tokenizer: Any) -> None:
        settings = config if isinstance(config, RewardSettings) else RewardSettings.from_config(config)
        super().__init__(settings, tokenizer)
        self.function = load_reward_function(
            settings.reward_function, settings.reward_function_kwargs, settings.answer_key, settings.names
        )
        self._pool: SequentialPool | None = None
        if self.function.reward_type == "sequential" and settings.num_cpus > 1:
            self._pool = SequentialPool(self.function, settings.num_cpus)
        logger.info(
            "Reward function %s (%s: %s; %s).",
            self.function.reward_name,
            self.function.reward_type,
            self.function.reward_type_note,
            f"{settings.num_cpus} processes" if self._pool else "inline",
        )

    def score(self, samples: list[Mapping[str, Any]]) -> dict[str, list[float]]:
        if self.function.reward_type == "batch":
            raw = score_batch(self.function, samples)
        elif self._pool is not None:
            raw = self._pool.score(samples)
        else:
            raw = score_sequential(self.function, samples)
        return check_scores(self.function, raw, samples)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def where(self) -> str:
        return self._pool.where() if self._pool is not None else ""


class RoutedRewardManager(RewardManager):
    """Scores a mixed batch: each row by the function of its route (its `route_key` column). Columns are the union
    of the routes' keys, NaN on rows whose function lacks the key (so means skip them); `<route>/overall` holds each
    route's reward."""

    def __init__(self, settings: RewardSettings, tokenizer: Any) -> None:
        super().__init__(settings, tokenizer, settings.functions())

    def _route_of(self, sample: Mapping[str, Any], index: int) -> str | None:
        value = sample["extra_info"].get(self.settings.route_key)
        route = None if value is None else str(value)
        if route in self.managers:
            return route
        if None in self.managers:
            return None
        raise RewardFunctionError(
            f"Sample {index}{uid_note(sample)} has {self.settings.route_key}={value!r}, which is not a route of "
            f"worker.reward.routes ({sorted(self.settings.routes)}) and no worker.reward.reward_function is set for "
            f"other rows; add the route, set a default reward_function, or fix the row's "
            f"'{self.settings.route_key}' column.",
            sample_index=index,
        )

    def score(self, samples: list[Mapping[str, Any]]) -> dict[str, list[float]]:
        groups: dict[str | None, list[int]] = {}
        for index, sample in enumerate(samples):
            groups.setdefault(self._route_of(sample, index), []).append(index)
        columns: dict[str, list[float]] = {}
        for route, indices in groups.items():
            try:
                scored = self.managers[route].score([samples[i] for i in indices])
            except RewardFunctionError as error:  # it numbers the route's samples: name the batch's
                if error.sample_index is None:
                    raise
                index = indices[error.sample_index]
                raise RewardFunctionError(
                    f"{error} (Route {route!r}'s sample {error.sample_index} is sample {index} of the batch.)",
                    sample_index=index,
                ) from error.__cause__
            if route is not None:
                scored = {**scored, f"{route}/overall": scored["overall"]}
            for key, values in scored.items():
                column = columns.setdefault(key, [float("nan")] * len(samples))
                for index, value in zip(indices, values):
                    column[index] = value
        return columns


class RubricRewardManager(RewardManager):
    """Scores every sample with each rubric part: overall = sum of weight x part overall; each part's keys are
    logged as `<part>/<key>`."""

    def __init__(self, settings: RewardSettings, tokenizer: Any) -> None:
        parts = settings.rubric_parts()
        super().__init__(settings, tokenizer, {name: (spec, kwargs) for name, (spec, kwargs, _) in parts.items()})
        self.weights = {name: weight for name, (_, _, weight) in parts.items()}

    def score(self, samples: list[Mapping[str, Any]]) -> dict[str, list[float]]:
        columns: dict[str, list[float]] = {"overall": [0.0] * len(samples)}
        for name, manager in self.managers.items():
            # each part its own copy: a part that changes its input (strips a tag from `response`) changed the next
            # part's, and only where the samples were not pickled to a pool (num_cpus=1)
            scored = manager.score([_own_copy(sample) for sample in samples])
            for key, values in scored.items():
                columns[f"{name}/{key}"] = list(values)
            columns["overall"] = [
                total + self.weights[name] * value for total, value in zip(columns["overall"], scored["overall"])
            ]
        return columns


def _own_copy(sample: Mapping[str, Any]) -> dict[str, Any]:
    """`sample` deep-copied, its images shared (they are read, and large)."""
    return {key: value if key == "multi_modal_data" else copy.deepcopy(value) for key, value in sample.items()}


def create_reward_manager(settings: RewardSettings, tokenizer: Any) -> RewardManager:
    """The manager for `settings`: a rubric's, routed when worker.reward.routes is set, else the single function's."""
    if settings.rubric:
        return RubricRewardManager(settings, tokenizer)
    return RoutedRewardManager(settings, tokenizer) if settings.routes else FunctionRewardManager(settings, tokenizer)
