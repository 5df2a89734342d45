# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""RLHFDataset: prompt rows (text, images, videos) turned into left-padded token ids for rollout and training.
Every row is checked (every image fully decoded once, since a truncated file has a valid header) when the dataset is
built, so bad rows fail before training, naming file, row and key; data.skip_bad_rows=true skips them instead, then
and at load time. docs/data_flow.md lists the keys of a row."""

import functools
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jinja2 import StrictUndefined, TemplateError, meta
from jinja2.sandbox import ImmutableSandboxedEnvironment
from PIL import Image
from torch.utils.data import Dataset

from verl.data.multimodal import (
    DEFAULT_VIDEO_FPS,
    IMAGE_ERRORS,
    OUTSIDE_IMAGE_DIR,
    checked_image_sizes,
    content_parts,
    count_image_tokens,
    load_frames,
    load_image,
    load_video,
    path_outside,
    processor_inputs,
    unreadable_image,
    with_frames_at_least,
)
from verl.data.row_scan import scan_rows, scan_workers
from verl.data.sources import (
    RowSource,
    ground_truth,
    load_source,
    row_value,
    split_prompt_messages,
    tool_schemas,
)
from verl.data.tokenizer import (
    check_chat_template_kwargs,
    no_chat_template_message,
    render_chat,
    renders_tool_calls,
    special_strings,
    template_reads,
)
from verl.models.config import text_only_reason
from verl.models.glm_video import ONE_VIDEO_A_PROMPT
from verl.models.rope_index import RopeIndex, load_model_config, uses_mrope
from verl.utils.files import read_text_file


logger = logging.getLogger(__name__)

# Keys the dataset produces (and `uid`, added by the driver): a column with one of these names would clash.
RESERVED_COLUMNS = tuple(
    "input_ids attention_mask position_ids raw_prompt_ids multi_modal_data multi_modal_inputs ground_truth "
    "prompt_text prompt_content prompt_messages uid".split()
)
_SKIP_HINT = "fix the row, or set data.skip_bad_rows=true to skip bad rows"


RESPONSE_BUDGET_COLUMN = "max_response_tokens"
"""A dataset column that caps each row's responses below data.max_response_length (the padded width stays)."""


class DatasetRowError(ValueError):
    """A row that cannot become a prompt; the message names the file, the row index and the key."""


class PromptTooLongError(DatasetRowError):
    """Longer than max_prompt_length (image tokens included) while filter_overlong_prompts is off."""


def compile_format_prompt(source: str | None, path: str, key: str = "data.format_prompt") -> Any:
    """The format_prompt Jinja template (`source`, read from `path`; None without one): it renders a row's prompt text
    from `content` and the row's other columns. ValueError naming `key` and the file for one that does not parse."""
    if source is None:
        return None
    environment = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, keep_trailing_newline=False, finalize=_refuse_none
    )
    try:
        reads = meta.find_undeclared_variables(environment.parse(source))
        template = environment.from_string(source)
    except TemplateError as error:
        raise ValueError(
            f"{key} {path!r} is not a valid Jinja template: {str(error).rstrip('.')} "
            f"(line {getattr(error, 'lineno', '?')})."
        ) from None
    single = re.search(r"(?<!\{)\{content\}(?!\})", source)  # Python's format syntax: plain text to Jinja
    if not reads or (single is not None and "content" not in reads):
        hint = " ({content} is Python's format syntax; Jinja's is {{ content }})" if single else ""
        raise ValueError(
            f"{key} {path!r} writes no variable of the row{hint}: every prompt would be the same text. Write "
            "{{ content }} where the row's prompt goes (other columns by their names)."
        )
    return template


def _refuse_none(value: Any) -> Any:
    """What a format_prompt writes: None is a column this row does not have (JSONL rows without the key), which
    rendered as the text "None"."""
    if value is None:
        raise ValueError("a value it writes is None (a column this row lacks: guard it with {% if name %})")
    return value


@dataclass
class _Prompt:
    """A row after validation and rendering, before pixels are decoded."""

    row: dict[str, Any]
    text: str
    """The rendered chat prompt (one placeholder per image/video)."""
    images: list[Any]
    """Raw image values as stored (paths, bytes, dicts or PIL images)."""
    videos: list[str]
    ground_truth: str | list[Any] | dict[str, Any]
    """The answer column (`sources.ground_truth`): a number becomes a string, "42" for 42.0; string, list or dict pass
    unchanged."""
    content: str | list[dict[str, str]] = ""
    """The user message after data.format_prompt, before the chat template (for reward models and judges); a prompt
    given as several messages keeps them, the last one formatted."""
    messages: list[dict[str, str]] | None = None
    """The prompt as the row gave it when that was a list of messages (before data.format_prompt), else None."""


class RLHFDataset(Dataset):
    """Prompts for RL (output: docs/data_flow.md). Per row:

    1. the prompt is rendered through the `format_prompt` Jinja template (sees `content` and every other column);
    2. `<image>` / `<video>` markers split it into content parts (media without markers go in front of the text);
    3. the chat template (tokenizer's, processor's, or `override_chat_template`) renders the conversation, with
       `chat_template_kwargs` as extra variables;
    4. the processor or tokenizer makes ids, image placeholders expanded; left-padded to max_prompt_length, never
       truncated (overlong prompts, image tokens counted, are filtered or rejected);
    5. position ids: the 3-D rope index for Qwen2-VL-style models, else 0, 1, 2, ... over real tokens.

    `data_source`: a file, a directory, a `name@split` dataset or a list of dicts. `model_config` (for the rope
    index) defaults to the one in the processor's directory."""

    def __init__(
        self,
        data_source: str | list[dict[str, Any]],
        tokenizer: Any,
        processor: Any | None = None,
        *,
        prompt_key: str = "prompt",
        answer_key: str | None = "answer",
        image_key: str = "images",
        video_key: str = "videos",
        tools_key: str | None = "tools",
        image_dir: str | None = None,
        video_fps: float = DEFAULT_VIDEO_FPS,
        video_max_frames: int = 0,
        max_prompt_length: int = 512,
        format_prompt: str | None = None,
        override_chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        filter_overlong_prompts: bool = True,
        filter_overlong_prompts_workers: int | None = None,
        skip_bad_rows: bool = False,
        model_config: Any | None = None,
        limit_images: int = 0,
        allow_paths_outside_image_dir: bool = False,
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        self.tokenizer, self.processor = tokenizer, processor
        self.renderer = processor if processor is not None else tokenizer
        """What renders the chat template: the processor of a vision-language model, else the tokenizer."""
        self.tools = tools
        """Tool JSON schemas the chat template renders into every prompt (a tool environment's)."""
        self.tools_key = tools_key
        self.prompt_key, self.answer_key, self.image_key, self.video_key = prompt_key, answer_key, image_key, video_key
        self.image_dir = os.path.expanduser(image_dir) if image_dir else None
        self.video_fps, self.max_prompt_length, self.skip_bad_rows = video_fps, max_prompt_length, skip_bad_rows
        self.video_max_frames = video_max_frames
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self._image_sizes: dict[str, tuple[int, int]] = {}
        """(width, height) by path, from the scan: an image many rows share is decoded once."""
        self._failed_rows: set[int] = set()
        """Rows that passed the scan but failed when loaded (skip_bad_rows on; this process only)."""
        self.limit_images, self.allow_paths_outside_image_dir = limit_images, allow_paths_outside_image_dir
        if image_dir and not os.path.isdir(self.image_dir):
            raise FileNotFoundError(f"data.image_dir {image_dir!r} is not a directory; give an existing directory.")
        self.format_prompt_path = format_prompt
        self.format_source = read_text_file(format_prompt, "data.format_prompt").strip() if format_prompt else None
        self.format_template = compile_format_prompt(self.format_source, self.format_prompt_path)
        self.chat_template = (
            read_text_file(override_chat_template, "data.override_chat_template") if override_chat_template else None
        )
        if self.chat_template is None and getattr(self.renderer, "chat_template", None) is None:
            raise ValueError(no_chat_template_message(tokenizer, "prompt", ", or train from an instruct model"))
        self.chat_template_kwargs = check_chat_template_kwargs(
            chat_template_kwargs or {}, self.renderer, self.chat_template
        )
        self.reads_tools = template_reads(self.renderer, "tools", self.chat_template)
        self.renders_tool_calls = renders_tool_calls(self.renderer, self.chat_template)
        self.rope_index = None
        self.model_type: str | None = None
        """The vision-language model's model_type (None for a text model)."""
        self.text_only: str | None = None
        """Why the model takes no media though it has a processor (TEXT_ONLY_VISION_LANGUAGE_TYPES), else None."""
        if processor is not None:
            if model_config is None:
                model_config = load_model_config(processor.tokenizer.name_or_path)
            if uses_mrope(model_config):
                self.rope_index = RopeIndex(model_config)
            self.model_type = getattr(model_config, "model_type", None)
            self.text_only = text_only_reason(self.model_type)

        self.source: RowSource = load_source(data_source)
        self._check_columns()
        self.extra_columns = [
            column for column in self.source.columns if column not in (prompt_key, answer_key, image_key, video_key)
        ]
        self.indices, self.prompt_lengths = self._scan(filter_overlong_prompts, filter_overlong_prompts_workers)
        self._image_sizes = {}  # only the scan needs them: loader workers need not get a copy

    @property
    def has_media(self) -> bool:
        """Whether the data has an image or video column."""
        return self.image_key in self.source.columns or self.video_key in self.source.columns

    def __getstate__(self) -> dict[str, Any]:
        """A compiled Jinja template does not pickle (spawn/forkserver loader workers): it is recompiled there."""
        return {**self.__dict__, "format_template": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.format_template = compile_format_prompt(self.format_source, self.format_prompt_path)

    # ------------------------------------------------------------------------------------------------------------
    # construction-time checks

    def _warn_unread_media_columns(self) -> None:
        """A vision-language dataset whose media column is not data.image_key (or video_key): its prompts without
        markers trained on the text alone, without a word (rows with markers are refused, naming the key)."""
        for key, config_key, words in (
            (self.image_key, "data.image_key", ("image", "img", "picture", "photo")),
            (self.video_key, "data.video_key", ("video", "frames")),
        ):
            named = [column for column in self.source.columns if any(word in column.lower() for word in words)]
            if key not in self.source.columns and named:
                logger.warning(
                    "%s has no column %r (%s) but has %s: the model sees no media from them (they reach the reward "
                    "function only). Set %s=%s to show them to the model.",
                    self.source.description,
                    key,
                    config_key,
                    named,
                    config_key,
                    named[0],
                )

    def _check_columns(self) -> None:
        columns = self.source.columns
        for key, name in ((self.prompt_key, "data.prompt_key"), (self.answer_key, "data.answer_key")):
            if key is None:  # data.answer_key=null: open-ended prompts, no reference answers
                continue
            if key not in columns and not (name == "data.answer_key" and key.split(".")[0] in columns):
                raise ValueError(
                    f"{self.source.description} has no column {key!r} ({name}); its columns are {columns}. "
                    f"Set {name} to the right column (one {name} serves data.train_files and data.val_files: their "
                    "columns must be named alike)."
                )
        if (
            self.answer_key is not None and self.answer_key not in columns
        ):  # a nested path (reward_model.ground_truth): its fields, in the first row
            value: Any = self.source.row(0)
            parts = self.answer_key.split(".")
            for depth, part in enumerate(parts):
                if not isinstance(value, dict):
                    break
                if part not in value:
                    raise ValueError(
                        f"{self.source.description}: data.answer_key={self.answer_key!r}, but "
                        f"{'.'.join(parts[:depth])} has no field {part!r} (its fields in the first row: {sorted(value)}); "
                        "set data.answer_key to the right path."
                    )
                value = value[part]
        if self.tools and self.tools_key in columns:
            raise ValueError(
                f"{self.source.description} has a tools column {self.tools_key!r} (data.tools_key), and "
                "worker.rollout.env describes its own tools in every prompt; set data.tools_key=null to leave the "
                "column to the environment and the reward function."
            )
        if self.processor is not None and self.text_only is None:
            self._warn_unread_media_columns()
        reserved = [column for column in columns if column in RESERVED_COLUMNS]
        if reserved:
            raise ValueError(
                f"{self.source.description} has column(s) {reserved}, whose names the trainer uses for its own "
                "data; rename them in the dataset."
            )

    def agent_loop_fields(self) -> list[str]:
        """The fields of verl's agent loop the first row sets (`agent_name`, `extra_info.tools_kwargs`,
        `extra_info.interaction_kwargs`): verl runs tools and interactions from them, this trainer from
        worker.rollout.env, so without one they would go unused."""
        row = self.source.row(0)
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        fields = ["agent_name"] if row.get("agent_name") else []
        return fields + [f"extra_info.{key}" for key in ("tools_kwargs", "interaction_kwargs") if extra.get(key)]

    def _scan(self, filter_overlong: bool, workers: int | None) -> tuple[list[int], list[int]]:
        """Validate and measure every row; return the kept row indices and their prompt lengths."""
        results = _scan_rows(self, scan_workers(workers, len(self.source)))
        kept, lengths, bad, overlong = [], [], [], []
        for index, (length, error) in enumerate(results):
            if error is not None:
                if not self.skip_bad_rows:
                    raise DatasetRowError(error)
                bad.append(error)
            elif length > self.max_prompt_length:
                if not filter_overlong:
                    raise PromptTooLongError(self._too_long_message(index, length))
                overlong.append(length)
            else:
                kept.append(index)
                lengths.append(length)
        self.num_skipped_bad_rows = len(bad)
        self.num_filtered_overlong = len(overlong)
        if bad:
            logger.warning(
                "Skipped %d bad row(s) of %s (data.skip_bad_rows=true); the first: %s",
                len(bad),
                self.source.description,
                bad[0],
            )
        if overlong:
            logger.warning(
                "Filtered out %d of %d prompts of %s longer than data.max_prompt_length=%d tokens (image tokens "
                "included; the longest has %d).",
                len(overlong),
                len(self.source),
                self.source.description,
                self.max_prompt_length,
                max(overlong),
            )
        logger.info("Loaded %d prompts from %s.", len(kept), self.source.description)
        if not kept:
            raise ValueError(
                f"No usable prompt is left in {self.source.description} ({len(bad)} bad, {len(overlong)} longer than "
                f"data.max_prompt_length={self.max_prompt_length})."
            )
        return kept, lengths

    def _too_long_message(self, index: int, length: int) -> str:
        return (
            f"{self.source.where(index)}, key '{self.prompt_key}': the prompt is {length} tokens (image tokens "
            f"included), more than data.max_prompt_length={self.max_prompt_length}, and prompts are never truncated. "
            "Raise data.max_prompt_length, lower data.max_pixels, or set data.filter_overlong_prompts=true to drop "
            "such prompts."
        )

    def prompt_length(self, index: int, row: dict[str, Any] | None = None) -> int:
        """Prompt tokens of row `index` (read already: `row`) after image-token expansion (image headers only where
        possible)."""
        prompt = self._prepare(index, row)
        raw_ids = self.tokenizer.encode(prompt.text, add_special_tokens=False)
        if not prompt.images and not prompt.videos:
            return len(raw_ids)
        if not prompt.videos:
            counts = self._count_image_tokens(index, prompt.images)
            image_token_id = getattr(self.processor, "image_token_id", None)
            if counts is not None and raw_ids.count(image_token_id) == len(counts):
                return len(raw_ids) + sum(count - 1 for count in counts)
        return len(self._encode(index, prompt)["input_ids"])

    def _count_image_tokens(self, index: int, images: list[Any]) -> list[int] | None:
        """The processor's image tokens per image, from the sizes after resizing (`checked_image_sizes`); a size it
        refuses (Qwen-VL: aspect ratio >= 200) is a row error."""
        try:
            sizes = checked_image_sizes(images, self.image_dir, self._image_sizes, self.min_pixels, self.max_pixels)
        except ValueError as error:
            raise self._error(index, self.image_key, str(error)) from None
        counts: list[int] = []
        for position, (width, height) in enumerate(sizes):
            try:
                count = count_image_tokens(self.processor, [(width, height)])
            except ValueError as error:
                problem = f"the processor refuses image {position} ({width}x{height} pixels after resizing to data.max_pixels): {error}"
                raise self._error(index, self.image_key, problem) from None
            if count is None:
                return None
            counts += count
        return counts

    # ------------------------------------------------------------------------------------------------------------
    # one row

    def _error(self, index: int, key: str, problem: str, every_row: bool = False) -> DatasetRowError:
        """The error of row `index` (`every_row`: a setting that fails on every row, which skipping cannot help)."""
        problem = problem.rstrip(". ")
        # with skip_bad_rows the row is skipped and this is logged
        hint = "" if self.skip_bad_rows or every_row else f"; {_SKIP_HINT}"
        return DatasetRowError(f"{self.source.where(index)}, key '{key}': {problem}{hint}.")

    def _check_confined(self, index: int, key: str, position: int, value: Any) -> None:
        """A media path must stay inside data.image_dir (`path_outside`) unless the user allows more."""
        if self.image_dir is None or self.allow_paths_outside_image_dir:
            return
        path = path_outside(value, self.image_dir)
        if path is not None:
            raise self._error(
                index, key, f"item {position} " + OUTSIDE_IMAGE_DIR.format(path=path, dir=self.image_dir)
            )

    def _media_list(self, index: int, row: dict[str, Any], key: str) -> list[Any]:
        value = row.get(key)
        if value is None:
            return []
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, (str, bytes, dict, Image.Image) if key == self.image_key else str) or _stored_path(value):
            return [value]  # a single image or video
        raise self._error(index, key, f"expected a list, got {type(value).__name__}")

    def _media(self, index: int, row: dict[str, Any]) -> tuple[list[Any], list[str]]:
        """The row's images and video paths, checked."""
        images = self._media_list(index, row, self.image_key)
        if 0 < self.limit_images < len(images):
            problem = (
                f"the row has {len(images)} images but worker.rollout.limit_images={self.limit_images}; raise it to "
                "the most images a prompt has (0 for no limit)"
            )
            raise self._error(index, self.image_key, problem)
        videos = self._media_list(index, row, self.video_key)
        # a `datasets` Video column's {"bytes": None, "path": ...} (sources._media_undecoded): the file it names
        videos = [video["path"] if _stored_path(video) else video for video in videos]
        for position, video in enumerate(videos):
            frames = isinstance(video, (list, tuple, np.ndarray)) and len(video) > 0
            if not isinstance(video, str) and not (frames and all(isinstance(frame, str) for frame in video)):
                got = type(video).__name__
                if isinstance(video, dict) and video.get("bytes") is not None:  # a Hub upload embeds the files
                    got = "its bytes (a `datasets` Video column's); write the videos to files and give their paths"
                problem = f"video {position} must be a path or a list of its frames' paths, got {got}"
                raise self._error(index, self.video_key, problem)
        if len(videos) > 1 and self.model_type in ONE_VIDEO_A_PROMPT:
            problem = (
                f"the row has {len(videos)} videos but vLLM takes at most one video a prompt for {self.model_type} "
                "models; give each video a row of its own"
            )
            raise self._error(index, self.video_key, problem)
        for key, values in ((self.image_key, images), (self.video_key, videos)):
            for position, value in enumerate(values):
                for item in [value] if isinstance(value, str) or key == self.image_key else value:
                    self._check_confined(index, key, position, item)
        if (images or videos) and (self.processor is None or self.text_only):
            key = self.image_key if images else self.video_key
            problem = self.text_only or "the row has images or videos but the model is text-only (no processor)"
            raise self._error(index, key, problem)
        return images, videos

    def _check_not_rendered(self, index: int, prompt: str, given_as_messages: bool) -> None:
        """A prompt already in the chat format (the template's markers written in it) was wrapped in the template a
        second time; a message list stored as its JSON text was the model's question as JSON."""
        marker = next((token for token in self._chat_markers if token in prompt), None)
        if marker is not None:
            problem = (
                f"the prompt holds the special token {marker!r}: it is already in the chat format, and the chat "
                "template would wrap it again; give the plain question (or a list of messages)"
            )
            raise self._error(index, self.prompt_key, problem)
        if not given_as_messages and prompt.lstrip().startswith("[{"):
            try:
                parsed = json.loads(prompt)
            except ValueError:
                return
            if isinstance(parsed, list) and parsed and all(isinstance(m, dict) and "role" in m for m in parsed):
                problem = (
                    "the prompt is a list of messages written as JSON text; store it as a list (a JSON array in the "
                    "file, not a string), and the chat template renders it"
                )
                raise self._error(index, self.prompt_key, problem)

    @functools.cached_property
    def _chat_markers(self) -> list[str]:
        """The tokenizer's special tokens but the media placeholders (their own checks say what is wrong there)."""
        media = {getattr(self.processor, name, None) for name in ("image_token", "video_token")}
        return [token for token in special_strings(self.tokenizer) if token not in media]

    def _prepare(self, index: int, row: dict[str, Any] | None = None) -> _Prompt:
        """Validate row `index` (read already: `row`) and render its chat prompt (no pixels decoded)."""
        row = self.source.row(index) if row is None else row
        prompt = row.get(self.prompt_key)
        if prompt is None:
            raise self._error(index, self.prompt_key, "the prompt is missing (null)")
        earlier: list[dict[str, str]] = []
        given_as_messages = isinstance(prompt, (list, tuple))
        if given_as_messages:
            try:
                earlier, prompt = split_prompt_messages(prompt)
            except ValueError as error:
                raise self._error(index, self.prompt_key, str(error)) from None
        if not isinstance(prompt, str):
            problem = f"the prompt must be a string or a list of messages, got {type(prompt).__name__}"
            raise self._error(index, self.prompt_key, problem)
        if not prompt.strip():
            raise self._error(index, self.prompt_key, "the prompt is empty")
        answer = None if self.answer_key is None else ground_truth(row_value(row, self.answer_key))
        if answer is None and self.answer_key is not None:
            raise self._error(index, self.answer_key, "the answer is missing (null or NaN)")
        # Lists and dicts (several answers, structured labels) reach the reward function as they are.
        if answer is not None and not isinstance(answer, (str, list, dict)):
            problem = f"the answer must be a JSON value (string, number, list or dict), got {type(answer).__name__}"
            raise self._error(index, self.answer_key, problem)
        budget = row.get(RESPONSE_BUDGET_COLUMN)  # a row's own response cap: checked here, not in a worker
        if budget is not None and not (isinstance(budget, float) and np.isnan(budget)):
            number = isinstance(budget, (int, float, np.integer, np.floating)) and not isinstance(budget, bool)
            if not number or budget < 1 or budget % 1:
                problem = f"a row's response cap must be a positive integer (or null), got {budget!r}"
                raise self._error(index, RESPONSE_BUDGET_COLUMN, problem)
        images, videos = self._media(index, row)
        content = self._format(index, row, prompt)
        messages = [*earlier, {"role": "user", "content": self._content(index, content, len(images), len(videos))}]
        self._check_not_rendered(index, prompt, given_as_messages)  # after the media tokens' own check
        if earlier:  # the conversation before the model's turn, as text (a client-style environment starts from it)
            content = [*earlier, {"role": "user", "content": content}]
        try:
            row_tools = tool_schemas(row.get(self.tools_key), self.reads_tools) if self.tools_key else None
        except ValueError as error:  # a column of that name may hold something else: data.tools_key=null
            problem = f"{error} (data.tools_key; null leaves the column to the reward function)"
            raise self._error(index, self.tools_key, problem) from None
        if not self.renders_tool_calls and any(message.get("tool_calls") for message in earlier):
            problem = (
                "an assistant message of the prompt has tool_calls, which the chat template does not write; use a "
                "template that renders them (data.override_chat_template), or write the calls in its content"
            )
            raise self._error(index, self.prompt_key, problem)
        tools = row_tools or self.tools
        try:
            text = render_chat(
                self.renderer, messages, True, tools, chat_template=self.chat_template, **self.chat_template_kwargs
            )
        except (TemplateError, TypeError) as error:  # e.g. a template's raise_exception on this row's messages
            raise self._error(index, self.prompt_key, f"the chat template cannot render the prompt: {error}") from None
        given = [*earlier, {"role": "user", "content": prompt}] if given_as_messages else None
        return _Prompt(
            row=row, text=text, images=images, videos=videos, ground_truth=answer, content=content, messages=given
        )

    def _format(self, index: int, row: dict[str, Any], prompt: str) -> str:
        if self.format_template is None:
            return prompt
        try:
            return self.format_template.render({**row, "content": prompt})
        except Exception as error:  # e.g. a column the row does not have, or {{ a / b }} with b = 0
            said = error if isinstance(error, TemplateError | TypeError | ValueError) else repr(error)
            problem = f"data.format_prompt {self.format_prompt_path!r} failed on this row: {said}"
            unknown = re.fullmatch(r"'(\w+)' is undefined", str(error))  # a column no row has: the template's error
            every_row = unknown is not None and unknown.group(1) not in self.source.columns
            if every_row:
                problem += f" (the dataset's columns are {self.source.columns})"
            raise self._error(index, self.prompt_key, problem, every_row) from None

    def _content(self, index: int, text: str, num_images: int, num_videos: int) -> str | list[dict[str, Any]]:
        """The user content: the text, or text and media parts placed by the markers."""
        if self.processor is None:
            return text  # a text model: markers are plain text
        for token in (getattr(self.processor, name, None) for name in ("image_token", "video_token")):
            # its count would not match the media's (LLaVA's token is the <image> marker itself)
            if isinstance(token, str) and token not in ("", "<image>", "<video>") and token in text:
                raise self._error(
                    index,
                    self.prompt_key,
                    f"the prompt's text holds the processor's own media token {token!r}; mark images with <image> "
                    "and videos with <video> (the chat template and processor expand them)",
                )
        markers = {"<image>": (self.image_key, num_images), "<video>": (self.video_key, num_videos)}
        prefix = []
        for marker, (key, count) in markers.items():
            found = text.count(marker)
            if found == 0 and count > 0:
                prefix += [{"type": marker[1:-1]}] * count
            elif found != count and count == 0 and key not in self.source.columns:
                config_key = "data.image_key" if marker == "<image>" else "data.video_key"
                raise self._error(
                    index,
                    key,
                    f"the prompt has {found} {marker} marker(s) but the dataset has no column {key!r} ({config_key}); "
                    f"its columns are {self.source.columns}. Set {config_key} to the column that holds them",
                    every_row=True,
                )
            elif found != count:
                problem = f"the prompt has {found} {marker} marker(s) but the row has {count} item(s) under {key!r}"
                raise self._error(index, key, problem)
        if not prefix and num_images == 0 and num_videos == 0:
            return text
        return prefix + content_parts(text, markers)

    def _load_media(self, index: int, prompt: _Prompt) -> tuple[list[Image.Image], list[Any]]:
        images, videos = [], []
        # a video is at least one temporal patch (2 frames for the Qwen-VL and GLM processors)
        patch = getattr(getattr(self.processor, "video_processor", None), "temporal_patch_size", None)
        min_frames = patch if isinstance(patch, int) else 1
        for position, value in enumerate(prompt.images):
            try:
                images.append(load_image(value, self.image_dir, self.min_pixels, self.max_pixels))
            except IMAGE_ERRORS as error:
                raise self._error(index, self.image_key, unreadable_image(position, value, error)) from None
        for position, path in enumerate(prompt.videos):
            try:
                if not isinstance(path, str):  # its frames, sampled at data.video_fps
                    frames = list(path)
                    if 0 < self.video_max_frames < len(frames):  # refused before they are opened, as a file's
                        raise ValueError(
                            f"it has {len(frames)} frames, more than data.video_max_frames={self.video_max_frames}; "
                            "raise data.video_max_frames or give fewer frames"
                        )
                    video = load_frames(frames, self.min_pixels, self.max_pixels, self.image_dir)
                else:
                    video = load_video(
                        path, self.video_fps, self.min_pixels, self.max_pixels, self.image_dir, self.video_max_frames
                    )
                videos.append(with_frames_at_least(video, min_frames))
            except IMAGE_ERRORS as error:  # av.error.FFmpegError is an OSError / ValueError
                raise self._error(index, self.video_key, f"video {position} cannot be read: {error}") from None
        return images, videos

    def _encode(
        self, index: int, prompt: _Prompt, media: tuple[list[Image.Image], list[Any]] | None = None
    ) -> dict[str, Any]:
        """Unpadded ids (image tokens expanded), mask, and the grids the rope index needs."""
        images, videos = media if media is not None else self._load_media(index, prompt)
        if not images and not videos:
            ids = self.tokenizer.encode(prompt.text, add_special_tokens=False)
            return {
                "input_ids": torch.tensor(ids, dtype=torch.long),
                "attention_mask": torch.ones(len(ids), dtype=torch.long),
            }
        try:
            inputs = processor_inputs(self.processor, prompt.text, images, videos, self.video_fps)
        except ValueError as error:  # e.g. an aspect ratio the processor refuses
            key = self.image_key if images else self.video_key
            raise self._error(index, key, f"the processor refused the row's media: {error}") from None
        if videos and inputs.get("video_grid_thw") is None:
            processor = type(self.processor).__name__
            problem = (
                f"videos are supported for the Qwen-VL and GLM-V families only (video grids), not with {processor}"
            )
            raise self._error(index, self.video_key, problem)
        encoded = {"input_ids": inputs["input_ids"][0], "attention_mask": inputs["attention_mask"][0]}
        for key in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
            if inputs.get(key) is not None:
                encoded[key] = inputs[key]
        return encoded

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Example `index`; with skip_bad_rows, a row that fails now (changed since the scan) is skipped with a
        warning and the next good row takes its place, so the batch stays full."""
        if not self.skip_bad_rows:
            return self._example(self.indices[index])
        for offset in range(len(self.indices)):
            row_index = self.indices[(index + offset) % len(self.indices)]
            if row_index in self._failed_rows:
                continue
            try:
                return self._example(row_index)
            except PromptTooLongError:
                raise  # the scan measured it: a processor that disagrees is no bad row
            except DatasetRowError as error:
                self._failed_rows.add(row_index)
                logger.warning(
                    "Skipped a bad row of %s when loading it (data.skip_bad_rows=true); the next row takes its "
                    "place: %s",
                    self.source.description,
                    error,
                )
        raise DatasetRowError(
            f"Every row of {self.source.description} failed when loaded (data.skip_bad_rows=true skipped them); "
            "the warnings above name each row."
        )

    def _example(self, row_index: int) -> dict[str, Any]:
        prompt = self._prepare(row_index)
        images, videos = self._load_media(row_index, prompt)
        encoded = self._encode(row_index, prompt, (images, videos))
        length = len(encoded["input_ids"])
        if length > self.max_prompt_length:  # the scan measured it; this guards a processor that disagrees
            raise PromptTooLongError(self._too_long_message(row_index, length))
        padding = self.max_prompt_length - length
        input_ids = F.pad(encoded["input_ids"], (padding, 0), value=self.tokenizer.pad_token_id)
        attention_mask = F.pad(encoded["attention_mask"], (padding, 0), value=0)
        if self.rope_index is not None:
            grids = {key: value for key, value in encoded.items() if key not in ("input_ids", "attention_mask")}
            position_ids = self.rope_index(input_ids, attention_mask, **grids)
        else:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        # Both keys whenever the row has media (docs/data_flow.md), plus the video rate; None for text-only rows.
        multi_modal_data = None
        if images or videos:
            multi_modal_data = {"images": images, "videos": videos}
            if videos:
                multi_modal_data["video_fps"] = self.video_fps
        example = {column: prompt.row.get(column) for column in self.extra_columns}
        example.update(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            # a text prompt's ids are the encoding's (encoded once); with media the placeholders stay unexpanded
            raw_prompt_ids=(
                encoded["input_ids"].tolist()
                if not (images or videos)
                else self.tokenizer.encode(prompt.text, add_special_tokens=False)
            ),
            multi_modal_data=multi_modal_data,
            ground_truth=prompt.ground_truth,
            prompt_text=prompt.text,
            prompt_content=prompt.content,
            prompt_messages=prompt.messages,
        )
        return example


def _stored_path(value: Any) -> bool:
    """Whether `value` is a media file as a `datasets` Image or Video column stores it by its path alone."""
    return isinstance(value, dict) and value.get("bytes") is None and isinstance(value.get("path"), str)


def _scan_rows(dataset: RLHFDataset, workers: int) -> list[tuple[int | None, str | None]]:
    """(prompt length, error) per row (`scan_rows`: in chunks, over forked workers where workers > 1); rows with media
    one at a time (a `datasets` slice decodes all its images at once)."""

    def scan(start: int, stop: int) -> list[tuple[int | None, str | None]]:
        results: list[tuple[int | None, str | None]] = []
        for index, row in enumerate(dataset.source.rows_in(start, stop), start):
            try:
                results.append((dataset.prompt_length(index, row), None))
            except DatasetRowError as error:
                results.append((None, str(error)))
        return results

    setting = " data.filter_overlong_prompts_workers sets how many."
    return scan_rows(scan, len(dataset.source), workers, one_at_a_time=dataset.has_media, setting=setting)
