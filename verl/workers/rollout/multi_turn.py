# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Multi-turn episodes in the request loop (worker.rollout.env), in every mode.

Each sample plays one `Episode`; a request is one model turn. A finished turn's environment step runs on a thread while
the engine steps the others, and its messages become the next environment turn (`EpisodeTurns`; client-style
environments drive their own turns: client_episodes). Model tokens record their policy version, environment tokens -1.
The engine's own token ids and the chat template's rendering of the environment's messages make one sequence for
engine, actor, reference and critic (nothing is re-tokenized). Turn t samples with seed + 7919 t.
"""

import dataclasses
import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

import numpy as np
import torch

from verl.data.rollout_dump import transcript_messages
from verl.data.tokenizer import TURN_MARKER, encode_rendered, probe_turn, special_strings
from verl.envs.base import (
    EPISODE_COUNTERS,
    Environment,
    EnvStep,
    EnvStepTimeoutError,
    checked_step,
    env_code_error,
    release_env,
)
from verl.envs.tools import tool_call
from verl.protocol import to_object_array
from verl.utils import stall_report
from verl.workers.rollout.request_loop import Group, Sample, resume_seed


class ChatContinuation:
    """Token ids the chat template puts between a model turn and the next: the assistant message's closing, the
    environment's messages and the next assistant opening, minus the model's own end-of-turn token (Qwen:
    `<|im_end|>`; GLM's is the next role token, `<|user|>`). They are read off one rendering of a conversation with
    the environment's messages after an assistant turn: what follows that turn's content. A template that renders
    earlier turns anew once more follow (Qwen3 drops the thinking block of every assistant turn but the last) thus
    still gives what it writes after the turn, while the model's own tokens stay as it generated them."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        """The chat template's extra variables (data.chat_template_kwargs), as the dataset renders prompts with."""
        if TURN_MARKER not in self.render(probe_turn(), False):
            raise ValueError("The chat template does not render assistant messages; multi-turn rollouts need one.")
        self.specials = special_strings(tokenizer)
        """The special tokens' strings (<|im_start|>, <|im_end|>, ...): in an environment's text they stay text."""

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool, tools: Any = None) -> str:
        extra = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **extra, **self.template_kwargs
        )

    def ids(self, messages: list[dict[str, Any]], turn_end_text: str, images_before: int = 0) -> list[int]:
        """The ids after a model turn ended by `turn_end_text` (its decoded end-of-turn token), through the next
        assistant opening; `images_before`: the pictures the episode showed before these messages (its prompt's and
        earlier environment turns'), so that a template numbering a conversation's pictures (Qwen2-VL's
        `add_vision_id`: "Picture 2: ") numbers these on from them. The text of an environment's message that spells
        a special token's string (a tool echoing `<|im_end|><|im_start|>assistant`) is encoded as plain text: it
        cannot end its turn or forge another. Such a text is located by a stand-in rendered in its place (searching
        for it could land on the template's own `<|im_end|>` or role header before it, swapping the two)."""
        text = self._after(messages, turn_end_text, images_before)
        parts: list[str] = []
        stand_ins: list[str] = []

        def stand_in(part: str) -> str:
            if not any(token in part for token in self.specials):
                return part
            parts.append(part)
            stand_ins.append(f"{STAND_IN}{len(stand_ins)}{STAND_IN}")
            return stand_ins[-1]

        marked = [_with_texts(message, stand_in) for message in messages]
        if not parts:
            return self.tokenizer.encode(text, add_special_tokens=False)
        return encode_rendered(
            self.tokenizer, text, parts, self.specials, self._after(marked, turn_end_text, images_before), stand_ins
        )

    def _after(self, messages: list[dict[str, Any]], turn_end_text: str, images_before: int = 0) -> str:
        """The rendering after a model turn ended by `turn_end_text`, through the next assistant opening; the probe's
        user message shows `images_before` pictures (placeholders only: what it renders is not kept)."""
        user, turn = probe_turn()
        if images_before:
            user = {
                **user,
                "content": [{"type": "image"}] * images_before + [{"type": "text", "text": user["content"]}],
            }
        try:
            after = self.render([user, turn, *messages], True)
        except Exception as error:  # jinja's TemplateError (a template that raises on a role), or a bad message
            roles = [
                message.get("role") if isinstance(message, dict) else type(message).__name__ for message in messages
            ]
            raise ValueError(
                f"The chat template cannot render the environment's messages (roles {roles}) after a model turn: "
                f"{error}"
            ) from error
        if TURN_MARKER not in after:  # the first is the model turn's (an environment's text may hold one too)
            raise ValueError(
                "The chat template does not render an assistant turn once messages follow it; the environment's "
                "turn cannot be appended token for token."
            )
        # GLM's model ends its turn by opening the next one (<|user|>)
        return after[after.index(TURN_MARKER) + len(TURN_MARKER) :].removeprefix(turn_end_text)


STAND_IN = "\u2063verl-part\u2063"
"""Brackets a stand-in for an environment's text in a second rendering: where the template puts that text."""


def _with_texts(message: Any, replace: Any) -> Any:
    """`message` with its content string, or each of its text parts, replaced by `replace(text)`."""
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": replace(content)}
    if isinstance(content, list):
        parts = [
            {**part, "text": replace(part["text"])}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
        return {**message, "content": parts}
    return message


def with_opened_images(
    messages: list[dict[str, Any]], min_pixels: int | None = None, max_pixels: int | None = None
) -> list[dict[str, Any]]:
    """`messages` with every image as the model is to see it: OpenAI's `image_url` parts (a base64 data URL or a local
    path) become image parts holding the opened image, the form the chat templates and `message_images` read (an
    http(s) URL is refused: training fetches nothing), and each image is upright, RGB and resized into the pixel
    budget (data.min/max_pixels) as the prompts' images are, so the engine and the actor get the same pixels.
    Messages without a list content are returned as they are."""
    from PIL import Image

    from verl.data.multimodal import open_image, resize_image

    def opened(part: Any) -> Any:
        if isinstance(part, dict) and part.get("type") == "image" and isinstance(part.get("image"), Image.Image):
            return {**part, "image": resize_image(part["image"], min_pixels, max_pixels)}
        if not isinstance(part, dict) or part.get("type") != "image_url":
            return part
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str) or url.startswith(("http://", "https://")):
            raise ValueError(
                f"An environment message has an image_url part of {str(url)[:60]!r}: in training give the image as a "
                "base64 data URL (data:image/png;base64,...), a local path, or an image part holding a PIL image."
            )
        try:
            return {"type": "image", "image": resize_image(open_image(url), min_pixels, max_pixels)}
        except (OSError, ValueError) as error:
            raise ValueError(
                f"An environment message's image_url part {url[:60]!r} is not an image: {error}"
            ) from None

    if not any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in messages):
        return messages
    return [
        {**m, "content": [opened(part) for part in m["content"]]} if isinstance(m.get("content"), list) else m
        for m in messages
    ]


def message_images(messages: list[dict[str, Any]]) -> list[Any]:
    """The images of an environment's messages, in order (content parts of type "image" holding a PIL image)."""
    from PIL import Image

    images = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image":
                image = part.get("image")
                if not isinstance(image, Image.Image):
                    raise TypeError(
                        "An environment message has an image part whose 'image' is "
                        f"{type(image).__name__}, not a PIL image; open the file (PIL.Image.open(path).convert('RGB'))."
                    )
                images.append(image)
            elif kind == "video":
                raise NotImplementedError("Videos in environment messages are not supported; send images.")
    return images


class ImageTokens:
    """Expands the image placeholders of an environment turn to the image's patch tokens, as the processor does."""

    def __init__(self, processor: Any, tokenizer: Any) -> None:
        self.image_processor = processor.image_processor
        self.merge_size = int(getattr(self.image_processor, "merge_size", 1))
        self.image_token_id = tokenizer.convert_tokens_to_ids(processor.image_token)

    def expand(self, ids: list[int], images: list[Any]) -> tuple[list[int], dict[str, torch.Tensor]]:
        """(`ids` with each placeholder expanded, the images' model inputs: pixel_values and image_grid_thw)."""
        places = [i for i, token in enumerate(ids) if token == self.image_token_id]
        if len(places) != len(images):
            raise ValueError(
                f"The chat template rendered {len(places)} image placeholders for an environment turn with "
                f"{len(images)} images; give each image its own content part."
            )
        inputs = self.image_processor(images=list(images), return_tensors="pt")
        if "image_grid_thw" not in inputs:
            raise NotImplementedError(
                f"Images returned by an environment are expanded for the Qwen-VL and GLM-4.xV processors only (merged "
                f"patches, 3-D rope), not {type(self.image_processor).__name__}; end the episode's images at the prompt."
            )
        counts = (inputs["image_grid_thw"].prod(-1) // self.merge_size**2).tolist()
        expanded: list[int] = []
        start = 0
        for place, count in zip(places, counts):
            expanded += ids[start:place] + [self.image_token_id] * int(count)
            start = place + 1
        expanded += ids[start:]
        return expanded, {"pixel_values": inputs["pixel_values"], "image_grid_thw": inputs["image_grid_thw"]}


@dataclasses.dataclass
class Episode:
    """One of the n samples of a prompt. It ends when the environment says so, when the model stops without its
    end-of-turn token (truncated), after `max_turns` model turns, or when the response budget (shared by all turns)
    is spent. `engine_ids` has one placeholder per environment image, as the engine takes it; `ids` has them expanded
    to patch tokens, as the actor takes it (the budget counts these)."""

    prompt_input: dict[str, Any]
    state: dict[str, Any]
    seed: int | None
    ids: list[int] = dataclasses.field(default_factory=list)
    """Everything after the prompt: model and environment tokens."""
    engine_ids: list[int] = dataclasses.field(default_factory=list)
    images: list[Any] = dataclasses.field(default_factory=list)
    image_inputs: list[dict[str, torch.Tensor]] = dataclasses.field(default_factory=list)
    """Model inputs (pixel_values, image_grid_thw) of the environment's images, one dict per turn with images."""
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    cut_tool_messages: int = 0
    """Tool results the episode ended before showing to the model (budget or max_turns spent)."""
    truncated: bool = False
    """The episode ended inside a model turn: the budget cut it, or the episode ended after a turn that
    max_tokens_per_turn cut (`end`)."""
    open_turn: bool = False
    """The model's latest turn was cut by max_tokens_per_turn, without an end-of-turn token."""
    done: bool = False
    last_turn: str = ""
    """The decoded text of the model's latest turn (its final answer once the episode is done)."""
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The conversation after the prompt, for the rollout records: model turns as assistant messages, the
    environment's as sent, image parts replaced by {"type": "image", "index": i} (prompt images first); messages
    never shown to the model carry "cut": True."""

    def engine_input(self) -> dict[str, Any]:
        item = {**self.prompt_input, "prompt_token_ids": list(self.prompt_input["prompt_token_ids"]) + self.engine_ids}
        if self.images:
            media = dict(item.get("multi_modal_data") or {})
            media["image"] = list(media.get("image", [])) + self.images
            item["multi_modal_data"] = media
        return item

    def prompt_images(self) -> int:
        return len((self.prompt_input.get("multi_modal_data") or {}).get("image", []))

    def end(self) -> None:
        """The environment (or a client-style episode) ended the episode: truncated if its last model turn was cut."""
        self.done = True
        self.truncated = self.truncated or self.open_turn


@dataclasses.dataclass
class TurnRunner:
    """The token rules of an episode's turns: append a model turn (loss mask 1) or the environment's messages (loss
    mask 0) and end the episode when the budget is spent; used by `EpisodeTurns` and `client_episodes.ClientTurns`."""

    budget: int
    """Tokens after the prompt, all turns together (the rollout's response length)."""
    max_turns: int
    eos_token_ids: set[int]
    continuation: ChatContinuation
    tokenizer: Any
    with_logprobs: bool
    max_tokens_per_turn: int | None = None
    image_tokens: ImageTokens | None = None
    """A VL model's image expansion (needed for images in environment messages)."""
    max_images: int = 0
    """The engine's limit of images per sequence (prompt and environment images together); 0: none."""
    env_step_timeout_s: float = 0.0
    """Longest one environment step (or a client-style episode's work between two model requests) may take before
    the rollout stops with an error; <= 0 waits forever."""
    env_name: str = "the environment"
    min_pixels: int | None = None
    max_pixels: int | None = None
    """The pixel budget of the environment's images (data.min/max_pixels, as the prompts')."""
    tool_format: Any = None
    """A tool environment's call format (verl.envs.tools.ToolCallFormat): each model turn's well-formed calls are
    recorded as its message's `tool_calls` (OpenAI's form), as the environment read them."""

    def env_timeout_error(self, episode_index: int, turns: int, where: str = "") -> EnvStepTimeoutError:
        """The error of a step past env_step_timeout_s; `where`: the step thread's stack, if known."""
        return EnvStepTimeoutError(
            f"{self.env_name}: episode {episode_index} did not finish its environment step after model turn "
            f"{turns} within worker.rollout.env_step_timeout_s={self.env_step_timeout_s:g} s, so the rollout stops "
            "here instead of hanging. Give whatever the step waits on (a subprocess, a remote call) its own timeout, "
            "or raise worker.rollout.env_step_timeout_s (<= 0 waits forever)."
            + (f" Where the step was when the time ran out:\n{where}" if where else "")
        )

    def turn_limit(self, episode: Episode, requested: int | None = None) -> int:
        room = self.budget - len(episode.ids)
        return min([room] + [limit for limit in (self.max_tokens_per_turn, requested) if limit])

    def add_model_tokens(
        self, episode: Episode, new: list[int], logprobs: list[float] | None, limit: int, stopped: bool = False
    ) -> str | None:
        """Append the model's turn (at most `limit` tokens); returns the text that closed it ("" when the turn limit
        cut it), or None when the episode is over: truncated when the budget cut the turn or it was empty, done when
        the engine `stopped` it on a stop token of the request's own (`val_override_config.stop_token_ids`), which
        the chat template never continues from."""
        new = new[:limit]
        cut_by_turn_limit = limit < self.budget - len(episode.ids) and len(new) == limit
        episode.ids += new
        episode.engine_ids += new
        episode.loss_mask += [1] * len(new)
        if self.with_logprobs:
            episode.logprobs += list(logprobs or [])[: len(new)]
        episode.turns += 1
        episode.last_turn = self.tokenizer.decode(new, skip_special_tokens=True)
        message = {"role": "assistant", "content": episode.last_turn}
        calls = self.tool_format.read(episode.last_turn)[1] if self.tool_format is not None else []
        if any(isinstance(call, dict) for call in calls):  # OpenAI's form, as TRL-style reward functions read them
            message["tool_calls"] = [
                tool_call(call["name"], json.dumps(call["arguments"])) for call in calls if isinstance(call, dict)
            ]
        episode.messages.append(message)
        ended = bool(new) and new[-1] in self.eos_token_ids
        episode.open_turn = not ended
        if stopped and new and not ended:  # as a single-turn response that stops there: a finished answer
            episode.open_turn, episode.done = False, True
            return None
        if not (ended or cut_by_turn_limit):
            episode.truncated, episode.done = True, True
            return None
        return self.tokenizer.decode(new[-1:], skip_special_tokens=False) if ended else ""

    def add_environment_turn(self, episode: Episode, messages: list[dict[str, Any]], turn_end: str) -> bool:
        """Append the environment's messages (up to the opening of the next model turn); False, with the episode over
        and truncated, when they leave no room for another model turn."""
        messages = with_opened_images(messages, self.min_pixels, self.max_pixels)
        images = message_images(messages)
        # pictures shown before these messages: a template may number theirs on from them (add_vision_id)
        shown = episode.prompt_images() + len(episode.images) if images else 0
        env_ids = self.continuation.ids(messages, turn_end, shown)
        engine_env_ids, inputs = env_ids, None
        if images:
            _check_images(self.image_tokens, episode, len(images), self.max_images)
            env_ids, inputs = self.image_tokens.expand(env_ids, images)
        if len(env_ids) >= self.budget - len(episode.ids):
            episode.truncated, episode.done = True, True
            record_messages(episode, messages, cut=True)
            return False
        record_messages(episode, messages, cut=False)
        episode.ids += env_ids
        episode.engine_ids += engine_env_ids
        if inputs is not None:
            episode.images += images
            episode.image_inputs.append(inputs)
        episode.loss_mask += [0] * len(env_ids)
        if self.with_logprobs:
            episode.logprobs += [0.0] * len(env_ids)
        return True


def record_messages(episode: Episode, messages: list[dict[str, Any]], cut: bool) -> None:
    """Add the environment's `messages` to the episode's conversation (`cut`: never shown; tool results counted).
    Call before the shown messages' images join `episode.images`."""
    first_image = episode.prompt_images() + len(episode.images)
    episode.messages += transcript_messages(messages, first_image, cut)
    if cut:
        episode.cut_tool_messages += sum(isinstance(m, dict) and m.get("role") == "tool" for m in messages)


def episode_columns(episodes: list[Episode]) -> dict[str, np.ndarray]:
    """The per-episode non-tensor columns besides episode_info's: env_* counters (floats), last_turn (the final
    answer) and episode_messages (see `Episode.messages`)."""
    columns = {
        f"env_{name}": np.array([float(getattr(e, name)) for e in episodes], dtype=np.float64)
        for name in EPISODE_COUNTERS
    }
    columns["last_turn"] = np.array([e.last_turn for e in episodes], dtype=object)
    columns["episode_messages"] = to_object_array([e.messages for e in episodes])
    return columns


def apply_step(runner: TurnRunner, episode: Episode, result: EnvStep, turn_end: str) -> None:
    """Apply the environment's answer: the episode ends (messages kept as cut) when the environment says so or its
    model turns are spent, else they become its next environment turn."""
    episode.tool_calls += result.tool_calls
    episode.tool_errors += result.tool_errors
    if result.done or episode.turns >= runner.max_turns:
        episode.end()
        record_messages(episode, result.messages, cut=True)
        return
    runner.add_environment_turn(episode, result.messages, turn_end)


def _check_images(image_tokens: ImageTokens | None, episode: Episode, count: int, max_images: int) -> None:
    if image_tokens is None:
        raise ValueError(
            "The environment's messages carry images but the model takes none (a text model, or a vision-language one "
            "trained on text only); images in environment turns need a vision-language model (e.g. Qwen2.5-VL)."
        )
    total = episode.prompt_images() + len(episode.images) + count
    if max_images > 0 and total > max_images:
        raise ValueError(
            f"An episode would hold {total} images (prompt and environment turns) but rollout.limit_images="
            f"{max_images}; raise worker.rollout.limit_images."
        )


TURN_SEED_STRIDE = 7919


@dataclasses.dataclass
class _Step:
    group: Group
    sample: Sample
    turn_end: str
    future: Future | None = None
    thread: int | None = None
    """The pool thread running the step, once it started (its stack is shown if the step times out)."""
    started: float | None = None
    """When a pool thread started it (a step queued behind others does not count towards env_step_timeout_s)."""


class TurnHooks:
    """Shared multi-turn hooks of the request loop: a request is the rest of the sample's current model turn.
    Subclasses give the turn's limit (`_turn_limit`) and what follows it (`turn_done`)."""

    def __init__(self, runner: TurnRunner) -> None:
        self.runner = runner
        self._runners: dict[int, TurnRunner] = {}

    def _for(self, group: Group) -> TurnRunner:
        """The runner whose budget is the group's (the step's response length at admission, or the row's cap)."""
        if group.budget not in self._runners:
            self._runners[group.budget] = dataclasses.replace(self.runner, budget=group.budget)
        return self._runners[group.budget]

    def _turn_limit(self, group: Group, sample: Sample) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Stop what runs beside the engine for the episodes (the request loop drops them)."""

    def request(self, group: Group, sample: Sample) -> tuple[dict[str, Any], int, int | None]:
        """(engine input, max tokens, seed) of the sample's next request: its turn, or the rest of a stopped one."""
        episode = sample.episode
        if not sample.tokens:
            sample.turn_limit = self._turn_limit(group, sample)
        prompt = episode.engine_input()
        prompt["prompt_token_ids"] = prompt["prompt_token_ids"] + sample.tokens
        seed = None if episode.seed is None else episode.seed + TURN_SEED_STRIDE * episode.turns
        if sample.tokens:
            seed = resume_seed(seed, len(sample.tokens))
        return prompt, sample.turn_limit - len(sample.tokens), seed

    def _end_model_turn(self, group: Group, sample: Sample) -> str | None:
        """Add the sample's finished turn to its episode (model tokens keep their versions) and clear it."""
        episode = sample.episode
        before = len(episode.ids)
        logprobs = sample.logprobs if self.runner.with_logprobs else None
        runner = self._for(group)
        turn_end = runner.add_model_tokens(episode, sample.tokens, logprobs, sample.turn_limit, not sample.cut)
        sample.episode_versions += sample.versions[: len(episode.ids) - before]
        sample.tokens, sample.logprobs, sample.versions = [], [], []
        return turn_end


class EpisodeTurns(TurnHooks):
    """The step-style hooks: environment steps run on a pool of `env.concurrent_steps` threads meanwhile."""

    def __init__(self, runner: TurnRunner, env: Environment) -> None:
        super().__init__(runner)
        self.env = env
        self.pool = ThreadPoolExecutor(max(1, int(getattr(env, "concurrent_steps", 1))), thread_name_prefix="env-step")
        self.steps: dict[int, _Step] = {}
        """id(sample) -> its environment step in flight."""

    @property
    def pending(self) -> int:
        return len(self.steps)

    def waiting(self, sample: Sample) -> bool:
        return id(sample) in self.steps

    def _turn_limit(self, group: Group, sample: Sample) -> int:
        return self._for(group).turn_limit(sample.episode)

    def turn_done(self, group: Group, sample: Sample) -> bool:
        """Add the finished model turn; True when the episode is over, else its environment step starts."""
        turn_end = self._end_model_turn(group, sample)
        if turn_end is None:
            return True
        episode = sample.episode
        step = _Step(group, sample, turn_end)

        def run() -> EnvStep:
            step.thread, step.started = threading.get_ident(), time.monotonic()
            return checked_step(self.env.step(episode.state, episode.last_turn))

        step.future = self.pool.submit(run)
        self.steps[id(sample)] = step
        return False

    def poll(self) -> tuple[bool, bool]:
        """Apply finished environment steps; (a group became complete, a sample is ready for its next request).
        A step past worker.rollout.env_step_timeout_s raises TimeoutError."""
        completed, ready = False, False
        timeout = self.runner.env_step_timeout_s
        for key, step in list(self.steps.items()):
            if not step.future.done():
                if timeout > 0 and step.started is not None and time.monotonic() - step.started > timeout:
                    where = stall_report.format_stacks([step.thread], user_code_only=True) if step.thread else ""
                    raise self.runner.env_timeout_error(step.sample.index, step.sample.episode.turns, where)
                continue
            del self.steps[key]
            episode = step.sample.episode
            before = len(episode.ids)
            where = f"on episode {step.sample.index} after model turn {episode.turns}"
            try:
                result = step.future.result()
            except (Exception, SystemExit) as error:  # the environment's own code: named, with where it raised
                raise env_code_error(self.runner.env_name, "step", where, error) from error
            try:
                apply_step(self._for(step.group), episode, result, step.turn_end)
            except (TypeError, ValueError, NotImplementedError) as error:  # messages the episode cannot take
                raise env_code_error(self.runner.env_name, "step", f"{where} (its messages)", error) from error
            step.sample.episode_versions += [-1] * (len(episode.ids) - before)  # environment tokens
            if episode.done:
                step.sample.finished = True
                completed = completed or step.group.complete
            else:
                ready = True
        return completed, ready

    def close(self) -> None:
        """Cancel steps not yet started (a running one, a hung tool, cannot be stopped and ends on its own, unread),
        then the environment's `release`."""
        self.steps.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        release_env(self.env, self.runner.env_name)

    def wait(self, timeout_s: float) -> None:
        """Until an environment step finishes (or `timeout_s`)."""
        futures = [step.future for step in self.steps.values()]
        if futures:
            wait_futures(futures, timeout=timeout_s, return_when=FIRST_COMPLETED)
