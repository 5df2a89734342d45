# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Conversations for supervised fine-tuning: chat template, tokens, and the exact mask of the assistant's tokens.
The loss covers only what the assistant wrote (turn content and end-of-turn token, not template scaffolding); a
template whose prefix renderings are not prefixes of the whole is refused. Examples use the RL actor's batch layout,
so its forward runs unchanged. Every row (messages, images, length) is checked before Ray starts, not hours in."""

import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jinja2 import TemplateError

from verl.data.multimodal import (
    IMAGE_ERRORS,
    OUTSIDE_IMAGE_DIR,
    checked_image_sizes,
    content_parts,
    count_image_tokens,
    load_image,
    path_outside,
    processor_inputs,
    unreadable_image,
)
from verl.data.row_scan import scan_rows, scan_workers
from verl.data.sources import (
    SHAREGPT_ROLES,
    RowSource,
    load_source,
    sharegpt_message,
    tool_schemas,
    with_marker_text,
    with_tool_calls,
    without_nulls,
)
from verl.data.tokenizer import (
    TURN_MARKER,
    check_chat_template_kwargs,
    no_chat_template_message,
    probe_turn,
    render_chat,
    renders_tool_calls,
    template_reads,
)
from verl.models.config import text_only_reason
from verl.models.rope_index import RopeIndex, uses_mrope
from verl.protocol import DataProto


logger = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")
IMAGE_MARKER = "<image>"
REASONING_KEYS = ("reasoning_content", "reasoning")
"""An assistant message's reasoning apart from its content (TRL's and Qwen3's `reasoning_content`, vLLM's
`reasoning`): the last turn's must be in what the chat template renders, or it would not be learned."""
_EMPTY_ANSWER = "it would train the model to answer with nothing; write the answer or drop the turn"
_NO_VIDEOS = (
    "videos are not supported in fine-tuning, only images (the model would see neither the video nor anything but a "
    "<video> marker in the text); leave the videos out of the data"
)


class SFTDataError(ValueError):
    """A conversation that cannot be trained on, named by file, row and key."""

    checkpointed = False
    """Raised in the training loop with a checkpoint to resume from (the step before saved first): the error line is
    followed by where the same command resumes; not at the start, where no step ran."""


@dataclass
class Conversation:
    messages: list[dict[str, Any]]
    images: list[Any]
    tools: list[dict[str, Any]] | None = None
    """Tool JSON schemas the chat template describes (the row's tools_key column)."""
    learned_from: int = 0
    """The first message whose assistant turns are learned: with prompt_key, the response's (a prompt given as
    messages may hold few-shot assistant turns, which are context, as in TRL's prompt-completion rows)."""
    prepended: int = 0
    """Messages put before the row's own (its system column's)."""
    unweighted: frozenset[int] = frozenset()
    """The assistant turns the row gives `weight: 0` (OpenAI's fine-tuning format): context, not learned."""

    def learns(self, turn: int) -> bool:
        """Whether message `turn` is an assistant turn the loss learns."""
        return self.messages[turn]["role"] == "assistant" and turn >= self.learned_from and turn not in self.unweighted


def system_column(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The system message of a row's `system` column (LLaMA-Factory's, in its alpaca and ShareGPT layouts), or none
    where the column is missing or empty."""
    system = row.get("system")
    return [{"role": "system", "content": system}] if isinstance(system, str) and system.strip() else []


def alpaca_context(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages before an alpaca row's instruction: its `system` text, then its `history` ([[query, answer], ...],
    earlier turns whose answers are learned too, as LLaMA-Factory learns them unless told to mask the history)."""
    messages, history = system_column(row), row.get("history") or []
    for turn in history:
        if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(isinstance(t, str) for t in turn)):
            raise ValueError(f"each of history's turns must be [query, answer], got {turn!r:.100}")
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    return messages


REPORTED_ERRORS = 20
"""Bad rows the start-up check names in its one error before it stops."""


def _enough_errors(errors: list["SFTDataError"]) -> bool:
    return len(errors) >= REPORTED_ERRORS


class SFTDataset(torch.utils.data.Dataset):
    """Tokenized conversations with their assistant masks."""

    def __init__(
        self,
        source: Any,
        tokenizer: Any,
        processor: Any,
        config: Any,
        model_config: Any = None,
        stop_ids: set[int] | None = None,
    ) -> None:
        """`stop_ids`: the tokens generation stops at (verl.data.tokenizer.eos_token_ids; default the tokenizer's
        EOS). An assistant turn the template does not end with one learns the one it writes next (GLM opens the next
        turn with `<|user|>`), or, ending the conversation, the tokenizer's EOS appended, so the model learns to stop."""
        try:
            self.source: RowSource = load_source(source)
        except (OSError, ValueError) as error:  # a file that cannot be read as rows: named there (a traceback before)
            raise SFTDataError(str(error)) from None
        self.tokenizer, self.processor, self.config = tokenizer, processor, config
        self.renderer = processor if processor is not None else tokenizer
        self.text_tokenizer = processor.tokenizer if processor is not None else tokenizer
        self.stop_ids = set(stop_ids or ()) | ({tokenizer.eos_token_id} - {None})
        with_mrope = processor is not None and model_config is not None and uses_mrope(model_config)
        self.rope_index = RopeIndex(model_config) if with_mrope else None
        self.text_only = text_only_reason(getattr(model_config, "model_type", None))
        """Why the model takes no images though it may have a processor (TEXT_ONLY_VISION_LANGUAGE_TYPES), else None."""
        self.max_length = config.max_length
        self.rows_key = config.messages_key if config.prompt_key is None else config.prompt_key
        """The column a row's conversation (or prompt) is read from."""
        if getattr(self.renderer, "chat_template", None) is None:
            raise SFTDataError(no_chat_template_message(tokenizer, "conversation"))
        self.reads_tools = template_reads(self.renderer, "tools")
        self.renders_tool_calls = renders_tool_calls(self.renderer)
        try:
            self.template_kwargs = check_chat_template_kwargs(config.chat_template_kwargs, self.renderer, None)
        except ValueError as error:
            raise SFTDataError(str(error)) from None
        if len(self.source) == 0:
            raise SFTDataError(f"{self.source.description} has no rows.")
        self._image_sizes: dict[str, tuple[int, int]] = {}
        """(width, height) by path, for the check: an image rows share is decoded once."""
        self._text_ids = False
        """`encode` is checking: token ids of the text alone."""
        self._check_rows()  # every row, before training starts
        self._image_sizes = {}

    def __len__(self) -> int:
        return len(self.source)

    # ------------------------------------------------------------------------------------------------ reading

    def _check_column(self, index: int, row: dict[str, Any], key: str, option: str) -> None:
        """A column the config names that the data does not have (a ShareGPT file's `conversations` read as
        `messages`): said with the columns there are."""
        if key not in row:
            columns = ", ".join(sorted(row))
            problem = f"there is no such column (the data has {columns}); set data.{option} to the one to read"
            raise self._error(index, key, problem)

    def _place(self, conversation: Conversation, turn: int) -> tuple[str, int]:
        """(column, index in it) of message `turn` of a row's conversation, as the row wrote it."""
        if conversation.learned_from and turn >= conversation.learned_from:
            return self.config.response_key, turn - conversation.learned_from
        return self.rows_key, turn - conversation.prepended

    def _error(self, index: int, key: str, message: str) -> SFTDataError:
        return SFTDataError(f"{self.source.where(index)}, key '{key}': {message}.")

    def _too_long(self, index: int, key: str, length: int) -> SFTDataError:
        return self._error(
            index,
            key,
            f"the conversation has {length} tokens, more than data.max_length={self.max_length}; raise it, or set "
            "data.truncation=right",
        )

    def _conversation(self, index: int) -> Conversation:
        row = self.source.row(index)
        config, key = self.config, self.rows_key
        if config.prompt_key is not None:
            messages, learned_from = self._prompt_and_response(index, row)
        else:
            messages, learned_from = row.get(key), 0
            self._check_column(index, row, key, "messages_key")
            if not isinstance(messages, (list, tuple)) or not messages:
                raise self._error(index, key, "expected a non-empty list of messages")
        messages = [without_nulls(message) for message in messages]  # Arrow's nulls: sources.without_nulls
        unweighted = set()
        for position, message in enumerate(messages):
            in_response = 0 < learned_from <= position
            # errors name the column and the message's place in it
            at, number = (config.response_key, position - learned_from) if in_response else (key, position)
            try:
                message = messages[position] = self._message(message, number)
            except ValueError as error:
                raise self._error(index, at, str(error)) from None
            if in_response and message["role"] == "user":
                raise self._error(index, at, "the response's messages must not hold a user turn")
            if message.pop("weight", 1) == 0:  # checked by _message; a template need not see it
                unweighted.add(position)
            learned = message["role"] == "assistant" and position >= learned_from and position not in unweighted
            if learned and self.processor is not None and IMAGE_MARKER in message["content"]:
                raise self._error(  # its placeholder tokens would be learned, with the picture's features as input
                    index, at, f"message {number} is a learned assistant turn with an image; give images in user turns"
                )
        prepended = 0
        if config.prompt_key is None and messages[0]["role"] != "system":  # a system message wins, as LLaMA-Factory's
            system = system_column(row)
            messages, prepended = [*system, *messages], len(system)
        unweighted = {position + prepended for position in unweighted}
        if messages[0]["role"] == "assistant":
            raise self._error(index, key, "the conversation starts with an assistant message; begin with a user turn")
        if not any(message["role"] == "assistant" for message in messages[learned_from:]):
            where = config.response_key if learned_from else key
            raise self._error(index, where, "the conversation has no assistant message to learn from")
        learned = [turn for turn in range(learned_from, len(messages)) if messages[turn]["role"] == "assistant"]
        if all(turn in unweighted for turn in learned):
            where = config.response_key if learned_from else key
            problem = "every assistant message has weight 0, so there is nothing to learn from; drop the row"
            raise self._error(index, where, problem)
        images = row.get(config.image_key) or []
        images = list(images) if isinstance(images, (list, tuple)) else [images]
        markers = sum(message["content"].count(IMAGE_MARKER) for message in messages)
        if markers != len(images) and (images or self.processor is not None):  # a text model's markers are text
            problem = f"the messages have {markers} {IMAGE_MARKER} marker(s) but the row has {len(images)} image(s)"
            raise self._error(index, config.image_key, problem)
        if images and (self.processor is None or self.text_only):
            problem = self.text_only or "the row has images but the model is text-only"
            raise self._error(index, config.image_key, problem)
        if row.get("videos") or (self.processor is not None and any("<video>" in m["content"] for m in messages)):
            raise self._error(
                index,
                "videos" if row.get("videos") else key,
                _NO_VIDEOS,
            )
        try:
            tools = tool_schemas(row.get(config.tools_key), self.reads_tools) if config.tools_key else None
        except ValueError as error:
            raise self._error(index, config.tools_key, str(error)) from None
        return Conversation(messages, images, tools, learned_from, prepended, frozenset(unweighted))

    def _prompt_and_response(self, index: int, row: dict[str, Any]) -> tuple[list[Any], int]:
        """A prompt_key row's messages (a string each, or messages each: TRL's conversational prompt-completion) and
        the first one whose assistant turns are learned."""
        config = self.config
        parts = []
        for key, role in ((config.prompt_key, "user"), (config.response_key, "assistant")):
            self._check_column(index, row, key, f"{'prompt' if role == 'user' else 'response'}_key")
            value = row.get(key)
            if isinstance(value, str) and role == "assistant" and not value.strip():
                raise self._error(index, key, f"the response is empty: {_EMPTY_ANSWER}")
            if isinstance(value, str):
                value = [{"role": role, "content": value}]
            if not isinstance(value, (list, tuple)) or not value:
                problem = f"expected a string or a non-empty list of messages, got {type(value).__name__}"
                raise self._error(index, key, problem)
            parts.append(list(value))
        prompt, response = parts
        if config.prompt_key != "instruction":
            return prompt + response, len(prompt)
        try:  # LLaMA-Factory's alpaca layout: its other columns join in
            context = alpaca_context(row)
        except ValueError as error:
            raise self._error(index, "history", str(error)) from None
        text, extra = prompt[-1]["content"], row.get("input")  # the instruction, then its `input` on a new line
        if isinstance(text, str) and isinstance(extra, str) and extra.strip():
            text = f"{text}\n{extra}"
        return [*context, *prompt[:-1], {**prompt[-1], "content": text}, *response], 0 if context else len(prompt)

    def _message(self, message: Any, number: int) -> dict[str, Any]:
        """Message `number` in role/content form (a ShareGPT turn read, typed content parts as marker text, tool calls
        as chat templates take them); ValueError says what is wrong with it."""
        if not isinstance(message, dict):
            raise ValueError(
                f"message {number} must be a dict with 'role' and 'content', got {type(message).__name__}"
            )
        if "role" not in message and {"from", "value"} <= set(message):  # ShareGPT's layout
            try:
                message = sharegpt_message(message["from"], message["value"])
            except ValueError as error:
                raise ValueError(f"message {number} (ShareGPT's {message['from']!r}): {error}") from None
        content = message.get("content")
        # a video part holding its video: marker_text's advice (a video column, data.video_key) is RL's
        if any(
            isinstance(part, dict) and part.get("type") in ("video", "video_url") and set(part) - {"type"}
            for part in (content if isinstance(content, (list, tuple)) else ())
        ):
            raise ValueError(f"message {number}: {_NO_VIDEOS}")
        message = with_marker_text(number, message)  # typed parts: text with markers
        role = message.get("role")
        if role not in ROLES:
            problem = f"its role is {role!r}" if "role" in message else "it has no 'role'"
            if role in SHAREGPT_ROLES:
                problem += f" (ShareGPT's name: write {role!r} as {SHAREGPT_ROLES[role]!r})"
            elif role == "function":  # beside `function_call`, OpenAI's older form
                problem += " (OpenAI's older name for a tool's result: write 'function' as 'tool')"
            raise ValueError(f"message {number} needs a role in {', '.join(ROLES)}; {problem}")
        try:
            message = with_tool_calls(message)
        except ValueError as error:
            raise ValueError(f"message {number}: {error}") from None
        if message.get("tool_calls") and not self.renders_tool_calls:
            raise ValueError(
                f"message {number} has tool_calls, which the chat template does not write, so the model would "
                "learn an empty turn; use a template that renders them (data.override_chat_template), or write "
                "the calls in the message's content as the model should produce them"
            )
        if not isinstance(message.get("content"), str):
            hint = ""
            if role == "tool" and isinstance(message.get("content"), (dict, list, tuple, int, float)):
                hint = f" (a tool's result is text: write its {type(message['content']).__name__} as JSON text)"
            raise ValueError(f"message {number} needs string content{hint}")
        weight = message.get("weight", 1)  # OpenAI's fine-tuning format: 0 keeps an assistant turn out of the loss
        if "weight" in message and (role != "assistant" or weight not in (0, 1)):
            raise ValueError(
                f"message {number} has weight {weight!r}; a weight must be 0 (not learned) or 1, on an assistant "
                "message (OpenAI's fine-tuning format)"
            )
        if role == "assistant" and not message["content"].strip() and not message.get("tool_calls"):
            raise ValueError(f"message {number} (assistant) is empty: {_EMPTY_ANSWER}")
        return message

    # ------------------------------------------------------------------------------------------------ checking

    def _check_rows(self) -> None:
        """Check every row's messages, images (decoded in full), assistant mask and token length against
        data.max_length: over it is an error with data.truncation=error, and with right when no assistant token would
        remain. In chunks of rows, over forked processes for a large set (`scan_rows`: one per usable core, at most
        16, per 10,000 rows). One error names the first REPORTED_ERRORS bad rows (the check stops there): a
        fix-and-rerun loop shows them all at once."""
        rows = len(self.source)
        errors = scan_rows(self._check_chunk, rows, scan_workers(None, rows), enough=_enough_errors)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            count = f"{len(errors)} rows" if len(errors) < REPORTED_ERRORS else f"at least {REPORTED_ERRORS} rows"
            lines = "\n".join(f"  {str(error).rstrip('.')}." for error in errors[:REPORTED_ERRORS])
            raise SFTDataError(
                f"{count} of the data cannot be trained on (the check stops at {REPORTED_ERRORS}):\n{lines}"
            )

    def _check_chunk(self, start: int, stop: int) -> list["SFTDataError"]:
        """`_check_rows` on rows [start, stop): their texts tokenized in one call, then each row's checks; the errors
        in row order."""
        errors, rows = [], []
        for index in range(start, stop):
            try:
                conversation = self._conversation(index)
                rows.append((index, conversation, self._full_text(index, conversation)))
            except SFTDataError as error:
                errors.append((index, error))
        texts = [text for *_, text in rows]
        encoded = self.text_tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        self._text_ids = True
        for (index, conversation, text), ids in zip(rows, encoded):
            try:
                self._check_rendered_turns(index, conversation, text)
                self._masked(index, conversation, text, ids, [], check_only=True)  # the assistant mask can be exact
                extra = self._image_tokens(index, conversation, text)
                length = len(ids) + self._appends_eos(ids) + sum(extra)
                if length > self.max_length:
                    self._check_overlong(index, conversation, text, length, extra)
            except SFTDataError as error:
                errors.append((index, error))
        return [error for _, error in sorted(errors, key=lambda pair: pair[0])]

    def _check_rendered_turns(self, index: int, conversation: Conversation, full_text: str) -> None:
        """Refuse a learned assistant turn that the chat template renders empty though its content is not: Qwen3
        drops the thinking block of every turn but the last, so an earlier turn holding only thinking would be
        learned as an empty answer; and a last turn rendered without its content or reasoning (REASONING_KEYS), which
        a template that reads none drops. Read off the whole conversation's text as `encode` masks it
        (`_turn_in_context`), with no other rendering; a template whose turns cannot be told apart there (GLM's) is
        not checked."""
        messages = conversation.messages
        assistants = [turn for turn, message in enumerate(messages) if message["role"] == "assistant"]
        closing = (self._turn_parts or ("", ""))[1]
        for count, turn in enumerate(assistants):
            if not conversation.learns(turn) or messages[turn].get("tool_calls"):
                continue
            span = self._turn_in_context(full_text, count, len(assistants))
            if span is None:
                return
            before, through = span
            rendered = through[len(before) :].removesuffix(closing)
            if not rendered.strip():
                problem = (
                    f"the conversation's assistant turn {count} (from 0) renders empty: the template drops what it holds (Qwen3 "
                    f"drops the thinking of every turn but the last), so {_EMPTY_ANSWER}"
                )
                raise self._error(index, self.rows_key, problem)
            content = messages[turn]["content"]
            last = count == len(assistants) - 1 and isinstance(content, str)
            if last and "".join(content.split()) not in "".join(rendered.split()):
                problem = (
                    "the chat template renders the last assistant turn without part of its content (DeepSeek-R1's "
                    "drops the <think> block of every turn), so the model would not learn it; give a template that "
                    "keeps it (data.override_chat_template)"
                )
                raise self._error(index, self.rows_key, problem)
            for name in REASONING_KEYS if last else ():
                reasoning = messages[turn].get(name)
                if isinstance(reasoning, str) and "".join(reasoning.split()) not in "".join(rendered.split()):
                    key, number = self._place(conversation, turn)
                    problem = (
                        f"message {number} has {name}, which the chat template does not write in the last assistant "
                        "turn (Qwen2.5's and Llama's read no reasoning), so the model would not learn it; give a "
                        "template that renders it (data.override_chat_template), or write the reasoning into the "
                        "content as the model should produce it (<think>...</think> before the answer)"
                    )
                    raise self._error(index, key, problem)

    def _appends_eos(self, ids: list[int]) -> bool:
        """Whether `encode` appends the end-of-sequence token to this rendering: a template that leaves the last turn
        open (GLM's), its last token that is not white space no stop token."""
        if self.tokenizer.eos_token_id is None:
            return False
        for token in reversed(ids):
            if self.tokenizer.decode([token]).strip():
                return token not in self.stop_ids
        return False

    def _full_text(self, index: int, conversation: Conversation) -> str:
        try:
            return self._render(conversation.messages, generation_prompt=False, tools=conversation.tools)
        except (TemplateError, TypeError) as error:  # e.g. a template's raise_exception on this row's messages
            problem = f"the chat template cannot render the conversation: {error}"
            raise self._error(index, self.rows_key, problem) from None

    def _image_tokens(self, index: int, conversation: Conversation, text: str) -> list[int]:
        """Per image, the tokens the processor adds beyond the one placeholder the tokenizer counts."""
        if not conversation.images:
            return []
        config = self.config
        if config.image_dir and not config.allow_paths_outside_image_dir:
            for position, image in enumerate(conversation.images):
                path = path_outside(image, config.image_dir)
                if path is not None:
                    problem = f"image {position} " + OUTSIDE_IMAGE_DIR.format(path=path, dir=config.image_dir)
                    raise self._error(index, config.image_key, problem)
        try:
            sizes = checked_image_sizes(
                conversation.images, config.image_dir, self._image_sizes, config.min_pixels, config.max_pixels
            )
        except ValueError as error:
            raise self._error(index, config.image_key, str(error)) from None
        try:
            counts = count_image_tokens(self.processor, sizes)
        except ValueError as error:  # a size the processor refuses (Qwen-VL: an aspect ratio of 200 or more)
            problem = f"the processor refuses the image sizes {sizes} (after resizing to data.max_pixels): {error}"
            raise self._error(index, config.image_key, problem) from None
        if counts is None:  # a processor that cannot count without pixels: run it once on the real images
            images = self._load_images(index, conversation)
            surplus = len(self._ids(text, images)[0]) - len(self.text_tokenizer.encode(text, add_special_tokens=False))
            return [surplus] + [0] * (len(images) - 1)
        return [count - 1 for count in counts]

    def _check_overlong(
        self, index: int, conversation: Conversation, full_text: str, length: int, extra: list[int]
    ) -> None:
        if self.config.truncation == "error":
            raise self._too_long(index, self.rows_key, length)
        messages = conversation.messages
        first = next(turn for turn in range(len(messages)) if conversation.learns(turn))
        prefix = self._render(messages[:first], generation_prompt=True, tools=conversation.tools)
        if not full_text.startswith(prefix):  # the turn as the whole renders it (Qwen3's empty thinking block)
            count = sum(message["role"] == "assistant" for message in messages[:first])
            assistants = sum(message["role"] == "assistant" for message in messages)
            prefix = (self._turn_in_context(full_text, count, assistants) or (prefix,))[0]
        images_before = sum(message["content"].count(IMAGE_MARKER) for message in messages[:first])
        start = len(self.text_tokenizer.encode(prefix, add_special_tokens=False)) + sum(extra[:images_before])
        if start >= self.max_length:
            raise self._error(
                index,
                self.rows_key,
                f"the conversation has {length} tokens and its first assistant turn starts at token {start}, so "
                f"data.truncation=right at data.max_length={self.max_length} would leave nothing to learn from; "
                "raise data.max_length or shorten the row",
            )
        if conversation.images:  # the cut must not fall in or before an image: its tokens and pixels go together
            last = max(turn for turn, message in enumerate(messages) if IMAGE_MARKER in message["content"])
            shown = self._render(messages[: last + 1], generation_prompt=False, tools=conversation.tools)
            end = len(self.text_tokenizer.encode(shown, add_special_tokens=False)) + sum(extra)
            if end > self.max_length:
                raise self._error(
                    index,
                    self.config.image_key,
                    f"data.truncation=right at data.max_length={self.max_length} would cut the conversation before "
                    f"the end of the turn that shows its last image (token {end}), leaving images without their "
                    "tokens; raise data.max_length or shorten the row",
                )

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool, tools: Any = None) -> str:
        """With a processor, <image> markers become image content parts."""
        if self.processor is not None:
            messages = [{**m, "content": content_parts(m["content"], (IMAGE_MARKER,))} for m in messages]
        return render_chat(self.renderer, messages, generation_prompt, tools, **self.template_kwargs)

    def _load_images(self, index: int, conversation: Conversation) -> list[Any]:
        """Row `index`'s images, decoded; one that cannot be read (changed or removed since the check, when its batch
        is built) is an SFTDataError naming the row and the image (it was a traceback of PIL's error alone)."""
        config, images = self.config, []
        for position, image in enumerate(conversation.images):
            try:
                images.append(load_image(image, config.image_dir, config.min_pixels, config.max_pixels))
            except IMAGE_ERRORS as error:
                raise self._error(index, config.image_key, unreadable_image(position, image, error)) from None
        return images

    @functools.cached_property
    def _turn_parts(self) -> tuple[str, str] | None:
        """(the opening the chat template writes for an assistant turn that others follow, the closing it writes
        after one, stripped), read once off probe conversations; None where the template shows neither in order."""
        *asked, answered = probe_turn()
        head, closed = self._render(asked, False), self._render([*asked, answered], False)
        followed = self._render([*asked, answered, *asked], False)
        if TURN_MARKER not in closed or TURN_MARKER not in followed or not followed.startswith(head):
            return None
        opening = followed[len(head) : followed.index(TURN_MARKER)]
        return opening, closed[closed.index(TURN_MARKER) + len(TURN_MARKER) :].strip()

    def _turn_in_context(self, full_text: str, count: int, assistants: int) -> tuple[str, str] | None:
        """(the text before, the text through) assistant turn number `count` (from 0) of the `assistants` in
        `full_text`, for a template that renders a turn differently once other messages follow it (Qwen3 drops the
        thinking block of every turn but the last, Qwen3.5 writes an empty one in every turn after the last user
        query, and their non-thinking generation prompts open one): the turn starts after the opening the template
        writes for an assistant turn (its `count + 1`-th in the text, which must hold one per assistant turn) and ends
        with the first closing it writes after one (Qwen's `<|im_end|>`). None where that cannot be told (the template
        closes a turn with no text, as GLM's)."""
        opening, closing = self._turn_parts or ("", "")
        if not (opening.strip() and closing) or full_text.count(opening) != assistants:
            return None
        start = -1
        for _ in range(count + 1):
            start = full_text.index(opening, start + 1)
        start += len(opening)
        end = full_text.find(closing, start)
        return (full_text[:start], full_text[: end + len(closing)]) if end >= 0 else None

    def _token_positions(self, text: str, ids: list[int], images: list[Any], cuts: list[int]) -> dict[int, int] | None:
        """{character position: the number of `text`'s tokens before it} for each of `cuts`, read off the token ids of
        the pieces between the cuts, each tokenized once (its own images expanded), where those ids joined are `ids`
        (`text`'s own): then no token spans a cut, and a turn's mask needs no tokenization of each prefix. None where
        a token merges across a cut (the caller tokenizes each prefix to say which turn)."""
        if not cuts:
            return {}
        placeholder = getattr(self.processor, "image_token", "<|image_pad|>") if self.processor is not None else None
        positions, joined, used = {}, [], 0
        for begin, finish in zip([0, *cuts], [*cuts, len(text)]):
            piece = text[begin:finish]
            piece_ids = self._ids(piece, images[used:])[0] if piece else []
            used += piece.count(placeholder) if placeholder else 0
            if joined + piece_ids != ids[: len(joined) + len(piece_ids)]:
                return None
            joined += piece_ids
            positions[finish] = len(joined)
        return positions if joined == ids else None

    def _ids(self, text: str, images: list[Any]) -> tuple[list[int], dict[str, Any]]:
        """Token ids of `text`, image placeholders expanded by the processor (unless `encode` only checks)."""
        if self.processor is None or self._text_ids:
            return self.text_tokenizer.encode(text, add_special_tokens=False), {}
        count = text.count(getattr(self.processor, "image_token", "<|image_pad|>"))
        encoded = processor_inputs(self.processor, text, images[:count] or None)
        return encoded["input_ids"][0].tolist(), encoded

    # ------------------------------------------------------------------------------------------------ encoding

    def encode(self, index: int) -> dict[str, Any]:
        """input_ids, the assistant mask (1 = learned), the images and vision inputs.
        Assistant turn i's mask spans from the end of rendered `messages[:i]` plus generation prompt to the end of
        rendered `messages[:i + 1]`, trailing whitespace excluded; where the template renders the turn otherwise once
        others follow it, the turn as the whole conversation renders it (`_turn_in_context`)."""
        conversation = self._conversation(index)
        self._text_ids = False
        images = self._load_images(index, conversation)
        full_text = self._render(conversation.messages, generation_prompt=False, tools=conversation.tools)
        ids, encoded = self._ids(full_text, images)
        return {**self._masked(index, conversation, full_text, ids, images), "encoded": encoded}

    def _masked(
        self,
        index: int,
        conversation: Conversation,
        full_text: str,
        ids: list[int],
        images: list[Any],
        check_only: bool = False,
    ) -> dict[str, Any]:
        """`encode` from the conversation's text and its token ids on: the assistant mask, the stop token, the
        length. `check_only` (the start-up check, `_text_ids` set): the mask's checks alone, on the text (image
        placeholders unexpanded, which merge with no neighbour), before training: a row they refuse stopped the run
        at its step; then {}."""
        messages, tools = conversation.messages, conversation.tools
        mask = [0] * len(ids)
        spans = []  # (turn, the text before it, the text through it) of each learned assistant turn
        for turn in range(len(messages)):
            if not conversation.learns(turn):
                continue
            prefix = self._render(messages[:turn], generation_prompt=True, tools=tools)
            upto = self._render(messages[: turn + 1], generation_prompt=False, tools=tools).rstrip()
            if not (full_text.startswith(upto) and upto.startswith(prefix)):  # e.g. Qwen3's: see _turn_in_context
                count = sum(m["role"] == "assistant" for m in messages[:turn])
                assistants = sum(m["role"] == "assistant" for m in messages)
                prefix, upto = self._turn_in_context(full_text, count, assistants) or (prefix, upto)
            if not (full_text.startswith(upto) and upto.startswith(prefix)):
                key, number = self._place(conversation, turn)
                problem = (
                    f"the chat template does not render the conversation's prefixes as prefixes of the whole (message "
                    f"{number}); the assistant mask cannot be exact with it. Use data.override_chat_template"
                )
                raise self._error(index, key, problem)
            spans.append((turn, len(prefix), len(upto)))
        cuts = sorted({cut for _, *ends in spans for cut in ends})
        at = self._token_positions(full_text, ids, images, cuts)
        for turn, prefix_chars, upto_chars in spans:
            if at is not None:  # one tokenization of the conversation's pieces (linear in its length)
                start, end = ids[: at[prefix_chars]], ids[: at[upto_chars]]
            else:  # each turn's text before and through it tokenized on its own (quadratic; exact where pieces merge)
                start, _ = self._ids(full_text[:prefix_chars], images)
                end, _ = self._ids(full_text[:upto_chars], images)
            if ids[: len(end)] != end or end[: len(start)] != start:
                key, number = self._place(conversation, turn)
                problem = (
                    f"message {number} tokenizes differently alone than inside the conversation (a token merges "
                    "across the turn boundary); the assistant mask cannot be exact"
                )
                raise self._error(index, key, problem)
            mask[len(start) : len(end)] = [1] * (len(end) - len(start))
            if ids[len(end) - 1] not in self.stop_ids:  # the template leaves the turn open (GLM's)
                if len(end) < len(ids) and ids[len(end)] in self.stop_ids:
                    mask[len(end)] = 1  # the next turn's opening stops generation
                elif self.tokenizer.eos_token_id is not None and not self.tokenizer.decode(ids[len(end) :]).strip():
                    ids, mask = [*ids[: len(end)], self.tokenizer.eos_token_id], [*mask[: len(end)], 1]  # the last
        if check_only:  # the length and what truncation leaves: `_check_overlong`, with the images' tokens
            return {}
        if len(ids) > self.max_length:
            if self.config.truncation == "error":
                raise self._too_long(index, self.rows_key, len(ids))
            ids, mask = ids[: self.max_length], mask[: self.max_length]
        if sum(mask[1:]) == 0:
            raise self._error(index, self.rows_key, "no assistant token is left to learn from")
        return {"input_ids": ids, "loss_mask": mask, "images": images}

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The example in the RL actor's layout (docs/data_flow.md): "prompt" is the first token, "response" the rest
        right-padded to data.max_length - 1, `response_mask` the assistant tokens."""
        example = self.encode(index)
        ids = torch.tensor(example["input_ids"], dtype=torch.long)
        length = len(ids)
        padding = self.max_length - length
        responses = F.pad(ids[1:], (0, padding), value=self.tokenizer.pad_token_id)
        response_mask = F.pad(torch.tensor(example["loss_mask"][1:], dtype=torch.long), (0, padding))
        attention_mask = F.pad(torch.ones(length, dtype=torch.long), (0, padding))
        input_ids = torch.cat([ids[:1], responses])
        if self.rope_index is not None:
            encoded = example["encoded"]
            position_ids = torch.zeros(3, self.max_length, dtype=torch.long)
            position_ids[:, :length] = self.rope_index(
                ids, torch.ones(length, dtype=torch.long), image_grid_thw=encoded.get("image_grid_thw")
            )
        else:
            position_ids = torch.clamp(attention_mask.cumsum(-1) - 1, min=0)
        images = example["images"]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": responses,
            "response_mask": response_mask,
            "multi_modal_data": {"images": images} if images else None,
        }


def collate_sft(examples: list[dict[str, Any]]) -> Any:
    """A DataProto batch of SFT examples (images as a non-tensor column)."""
    tensors = {
        key: torch.stack([example[key] for example in examples]) for key in examples[0] if key != "multi_modal_data"
    }
    column = [example["multi_modal_data"] for example in examples]  # from_dict makes it an object array
    return DataProto.from_dict(tensors=tensors, non_tensors={"multi_modal_data": column})
