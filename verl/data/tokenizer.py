# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Load the tokenizer and (for vision-language models) the processor of a model directory or Hub id.
Unlike the bare Auto classes: a missing local path is an error naming it (not a confusing Hub failure), and the
processor is None only for a model that has none, while a broken processor config raises."""

import functools
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from verl.utils.files import read_text_file


if TYPE_CHECKING:  # the processor classes import the image stack (torchvision, slow): only multimodal models need it
    from transformers import ProcessorMixin


logger = logging.getLogger(__name__)

# A tokenizer directory has at least one of these.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "vocab.txt")
# Any of these means the model has a multimodal processor.
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def _load_error(what: str, path: str, error: Exception) -> OSError:
    """Why the `what` (tokenizer, processor) of `path` did not load: a JSON file of the folder that does not parse
    (a download or copy that stopped; transformers' error named no file), else the library's error with its type."""
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        if name.endswith(".json") and os.path.isfile(os.path.join(path, name)):
            try:
                with open(os.path.join(path, name), encoding="utf-8") as f:
                    json.load(f)
            except (OSError, ValueError) as damaged:
                return OSError(
                    f"Could not load a {what} from {path!r}: {name} is not valid JSON ({damaged}); a download or copy "
                    "that stopped leaves such files: copy or download the model again."
                )
    detail = str(error) if isinstance(error, OSError) else f"{type(error).__name__}: {error}"
    return OSError(f"Could not load a {what} from {path!r}: {detail}")


def _check_template_syntax(template: str | dict[str, str] | None, path: str, override: str | None) -> None:
    """A chat template that is not valid Jinja fails here, naming where it came from, not in a traceback from the
    first prompt rendered (or the dataset's check of which variables it reads)."""
    import jinja2

    if override is None:
        where = f"the chat template of {path!r} (its chat_template.jinja or tokenizer_config.json)"
    else:
        where = (
            f"the chat template in {override!r} (override_chat_template)"
            if os.path.isfile(override)
            else ("the chat template given as override_chat_template's text")
        )
    for name, source in template.items() if isinstance(template, dict) else [("", template)]:
        if not isinstance(source, str):
            continue
        try:
            _parsed_template(source)
        except jinja2.TemplateSyntaxError as error:
            named = f" (the one named {name!r})" if name else ""
            raise ValueError(f"{where}{named} is not valid Jinja: {error.message} (line {error.lineno}).") from None


def _check_model_path(path: str, what: str) -> None:
    """Fail early, naming the path, when a local path does not exist; a Hub id ("org/name") is left to the Hub."""
    if os.path.isdir(path):
        return
    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or os.path.exists(path) or path.count("/") > 1
    if looks_local:
        raise FileNotFoundError(
            f"{what} path {path!r} is not a directory; point it at a model directory (e.g. one written by "
            "`python -m verl.models.tiny_models --output DIR`) or at a Hugging Face Hub id like 'Qwen/Qwen2.5-0.5B'."
        )


def _read_chat_template(override_chat_template: str) -> str:
    """The template read from a file (whatever its extension: .jinja, .j2, .txt), or the template text itself; a
    value without Jinja markup that is no file is an error (a path missing on this node would have become the
    template text, rendering the path itself)."""
    if os.path.isfile(override_chat_template) or "{" not in override_chat_template:
        return read_text_file(override_chat_template, "override_chat_template")
    return override_chat_template


def get_tokenizer(
    path: str,
    trust_remote_code: bool = False,
    override_chat_template: str | None = None,
    warn_no_pad: bool = True,
    **kwargs: Any,
) -> PreTrainedTokenizerBase:
    """AutoTokenizer for `path`, with an optional chat template; a tokenizer without a pad token gets its eos as pad
    (RL batches are padded), with a warning unless `warn_no_pad` is False (a worker loading what the driver did)."""
    _check_model_path(path, "Tokenizer")
    if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, name)) for name in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"Tokenizer directory {path!r} has none of {', '.join(_TOKENIZER_FILES)}; point the tokenizer path at "
            "the model directory that holds the tokenizer files."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as error:  # a Hub id while offline, a damaged tokenizer.json (a bare JSON error, no file named)
        raise _load_error("tokenizer", path, error) from error
    _forget_load_options(tokenizer)
    if override_chat_template is not None:
        tokenizer.chat_template = _read_chat_template(override_chat_template)
    _check_template_syntax(tokenizer.chat_template, path, override_chat_template)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"Tokenizer of {path!r} has neither a pad nor an eos token; add one to its config.")
        log = logger.warning if warn_no_pad else logger.debug
        log("Tokenizer of %s has no pad token; using its eos token %r.", path, tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def vocabulary_difference(tokenizer: Any, other: Any, names: tuple[str, str] = ("first", "second")) -> str | None:
    """None when both tokenizers give every token the same id (special and added tokens included); else the first
    difference, said in words that call them by `names`."""
    ours, theirs = tokenizer.get_vocab(), other.get_vocab()
    if ours == theirs:
        return None
    for token, index in sorted(ours.items(), key=lambda item: item[1]):
        if theirs.get(token) != index:
            where = "is missing" if token not in theirs else f"is id {theirs[token]}"
            return f"token {token!r} is id {index} in the {names[0]} and {where} in the {names[1]}"
    extra = min(set(theirs) - set(ours), key=theirs.__getitem__)
    return f"the {names[1]} has {len(theirs)} tokens, the {names[0]} {len(ours)} (e.g. {extra!r}, id {theirs[extra]})"


LOAD_OPTIONS = ("is_local", "local_files_only")
"""How transformers 5 was asked to load a tokenizer, which it keeps with its settings: a checkpoint's or export's
tokenizer_config.json would carry them (local_files_only=true from an offline run, uploaded with the model)."""


def _forget_load_options(tokenizer: Any) -> None:
    for key in LOAD_OPTIONS:
        getattr(tokenizer, "init_kwargs", {}).pop(key, None)


def special_strings(tokenizer: Any) -> list[str]:
    """The special tokens' strings (<|im_start|>, <|im_end|>, ...)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {})
    return [token.content for token in decoder.values() if token.special]


ZERO_WIDTH_SPACE = "\u200b"


def defuse_specials(text: str, specials: list[str]) -> str:
    """`text` with every special token's string it spells (`<|im_end|>`) broken by a zero-width space after its first
    character: no rendering of it, however a chat template trims or rewrites it, tokenizes as the special token. What a
    policy writes goes to a judge or reward model this way: it cannot close its turn and forge instructions."""
    for token in sorted(specials, key=len, reverse=True):
        if len(token) > 1 and token in text:
            text = text.replace(token, token[0] + ZERO_WIDTH_SPACE + token[1:])
    return text


def encode_rendered(
    tokenizer: Any,
    text: str,
    parts: list[str],
    specials: list[str] | None = None,
    marked: str | None = None,
    stand_ins: list[str] | None = None,
) -> list[int]:
    """The ids of `text`, a chat template's rendering (no special tokens added), where each of `parts` (an
    environment's message text: a tool's output), in order, that spells a special token's string is encoded as plain
    text, character for character: it cannot end its turn or forge another in the model's context. The rest is
    encoded as a whole, as the rendering would be. `marked` is the same rendering with `stand_ins[i]` in place of
    `parts[i]`: it says where each part is (a part the template trimmed is found trimmed). Without it, or where the
    template rewrote a part, each part is searched for in order after the last, which can land on the same string in
    the template's own text before it. Text the policy writes for a judge or reward model, whose templates may
    rewrite an assistant turn, goes through `defuse_specials` before rendering instead."""
    specials = special_strings(tokenizer) if specials is None else specials
    encode = functools.partial(tokenizer.encode, add_special_tokens=False)
    located = _locate(text, parts, marked, stand_ins) if marked is not None and stand_ins else None
    if located is None:  # search for each part in order
        located, cursor = [], 0
        for part in parts:
            if not part or not any(token in part for token in specials):
                continue
            start = text.find(part, cursor)
            if start < 0 and part.strip():  # a template that trims what it renders (Llama 3's, Gemma's)
                part = part.strip()
                start = text.find(part, cursor)
            if start >= 0:
                located.append((start, start + len(part)))
                cursor = start + len(part)
    ids, cursor = [], 0
    for start, end in located:
        ids += encode(text[cursor:start]) + encode(text[start:end], split_special_tokens=True)
        cursor = end
    return ids + encode(text[cursor:])


def _locate(text: str, parts: list[str], marked: str, stand_ins: list[str]) -> list[tuple[int, int]] | None:
    """Where each of `parts` is in `text`, read off `marked` (the rendering with `stand_ins` in their place); None
    where the two renderings differ otherwise (a template that rewrote a part, or its stand-in)."""
    spans, position, cursor = [], 0, 0
    for part, stand_in in zip(parts, stand_ins):
        at = marked.find(stand_in, cursor)
        if at < 0:
            return None
        between = marked[cursor:at]
        if not text.startswith(between, position):
            return None
        position += len(between)
        for rendered in (part, part.strip()):  # as written, or trimmed by the template
            if rendered and text.startswith(rendered, position):
                spans.append((position, position + len(rendered)))
                position += len(rendered)
                break
        else:
            return None
        cursor = at + len(stand_in)
    return spans if text[position:] == marked[cursor:] else None


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, model_path: str) -> set[int]:
    """The tokens generation stops at: the tokenizer's EOS and those of `model_path`'s generation_config.json, or,
    without one, of its config.json, as vLLM reads them (it stops at all; GLM's include `<|user|>`, which opens the
    next turn). ValueError where none defines one."""
    from transformers import AutoConfig, GenerationConfig

    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    try:
        generation_eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json: vLLM derives one from config.json (an export without the file)
        try:
            generation_eos = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path)).eos_token_id
        except (OSError, ValueError):  # no config it can read either (remote code): the tokenizer's alone
            generation_eos = None
    if generation_eos is not None:
        ids.update(generation_eos if isinstance(generation_eos, list) else [generation_eos])
    if not ids:
        raise ValueError(f"Neither the tokenizer nor {model_path}/generation_config.json defines an EOS token.")
    return ids


def turn_end_token_id(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> int | None:
    """The special token the chat template closes an assistant turn with (ChatML's `<|im_end|>`), read off a probe
    conversation; None where the template writes none (GLM's opens the next turn instead) or cannot render it."""
    try:
        text = tokenizer.apply_chat_template(probe_turn(), tokenize=False, **(template_kwargs or {}))
    except Exception:  # noqa: BLE001 (a template that raises on this probe): nothing learned from it
        return None
    if not isinstance(text, str) or TURN_MARKER not in text:
        return None
    closing = text[text.index(TURN_MARKER) + len(TURN_MARKER) :].lstrip()
    for token in sorted(special_strings(tokenizer), key=len, reverse=True):
        if token and closing.startswith(token):
            return int(tokenizer.convert_tokens_to_ids(token))
    return None


def turn_end_stop(
    tokenizer: Any,
    model_path: str,
    template_kwargs: dict[str, Any] | None = None,
    stops: set[int] | None = None,
    warn: bool = True,
) -> int | None:
    """The chat template's end-of-turn token where it is none of the model's stop tokens (`stops`, else
    `eos_token_ids`), else None. A base model's ChatML has EOS `<|endoftext|>` and closes turns with `<|im_end|>`: the
    rollout, the server and the LLM judge all stop there too, or the model went on writing the next turns itself
    (which the trainer trained on and the reward read, and which ran a served reply or a verdict to its budget).
    `warn`: say so once, naming the token."""
    closing = turn_end_token_id(tokenizer, template_kwargs)
    if closing is None:
        return None
    if stops is None:
        try:
            stops = eos_token_ids(tokenizer, model_path)
        except ValueError:  # no EOS anywhere: the closing token is the only stop there is
            stops = set()
    if closing in stops:
        return None
    if warn:
        logger.warning(
            "The chat template of %s closes a turn with %r, which is not among the model's stop tokens (%s): "
            "generation stops there too, as at the end of a turn.",
            model_path,
            tokenizer.convert_ids_to_tokens(closing),
            ", ".join(map(str, tokenizer.convert_ids_to_tokens(sorted(stops)))) or "none",
        )
    return closing


def stop_at_turn_end(generation_config: Any, tokenizer: Any) -> None:
    """Add to an export's `generation_config` (in place) the token `tokenizer`'s chat template closes a turn with,
    where that is none of its stop tokens: the export of a base model whose EOS is `<|endoftext|>`, trained on ChatML
    turns closed by `<|im_end|>`, kept the base's generation_config.json, and vLLM or transformers' generate went on
    past `<|im_end|>` writing the next turns (the rollout and `verl.serve` stop there: `turn_end_stop`). eos_token_id
    becomes a list: the configured stops, then that token (TRL's `setup_chat_format` and the alignment handbook
    likewise make the exported generation config stop where the trained turns end)."""
    if generation_config is None or tokenizer is None:
        return
    closing = turn_end_token_id(tokenizer)
    eos = generation_config.eos_token_id
    stops = list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
    if not stops and tokenizer.eos_token_id is not None:  # none configured: generate stops at the tokenizer's
        stops = [tokenizer.eos_token_id]
    if closing is not None and closing not in stops:
        generation_config.eos_token_id = [*stops, closing]


def media_placeholder_bias(processor: Any, tokenizer: Any) -> dict[int, float] | None:
    """logit_bias -100 on the processor's image, video and audio placeholder tokens, which a model must not generate:
    they would break the rope index, and Gemma 4's trainer embeds an `<|audio|>` as padding where the engine does not
    for a generated one. The rollout and the server both send it, so a served model answers as its rollout did.
    None: a text model, or a processor without such tokens."""
    if processor is None or getattr(processor, "image_processor", None) is None:
        return None
    bias = {}
    for name in ("image_token", "video_token", "audio_token"):
        token = getattr(processor, name, None)
        token_id = tokenizer.convert_tokens_to_ids(token) if token else None
        if token_id is not None and token_id != tokenizer.unk_token_id:
            bias[int(token_id)] = -100.0
    return bias or None


def get_processor(
    path: str,
    trust_remote_code: bool = False,
    override_chat_template: str | None = None,
    **kwargs: Any,
) -> "ProcessorMixin | None":
    """AutoProcessor for a multimodal model, or None for a text-only one (a local directory without processor
    config; one that fails to load raises). Its resize bounds stay the model's: the driver, the workers and vLLM must
    expand an image to the same number of tokens (data.min_pixels / max_pixels resize images before it)."""
    _check_model_path(path, "Processor")
    if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, name)) for name in _PROCESSOR_FILES):
        return None
    from transformers import AutoProcessor, ProcessorMixin

    try:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as error:
        raise _load_error("processor", path, error) from error
    if not isinstance(processor, ProcessorMixin):  # AutoProcessor falls back to the tokenizer for text models
        return None
    _forget_load_options(getattr(processor, "tokenizer", None))
    if override_chat_template is not None:
        processor.chat_template = processor.tokenizer.chat_template = _read_chat_template(override_chat_template)
    _check_template_syntax(processor.chat_template, path, override_chat_template)
    return processor


def _template_variables(template: str | dict[str, str]) -> set[str]:
    """The names a chat template reads from its caller (its undeclared Jinja variables); a tokenizer's named templates
    (a dict) together. transformers' `{% generation %}` tags are dropped first: plain Jinja does not know them."""
    from jinja2 import meta

    names: set[str] = set()
    for source in template.values() if isinstance(template, dict) else [template]:
        names |= meta.find_undeclared_variables(_parsed_template(source))
    return names


@functools.lru_cache(maxsize=16)
def _parsed_template(source: str) -> Any:
    """A chat template's Jinja syntax tree, transformers' `{% generation %}` tags dropped (plain Jinja does not know
    them); parsed once per template for the load's syntax check and the dataset's look at its variables."""
    import re

    import jinja2

    source = re.sub(r"{%-?\s*(end)?generation\s*-?%}", "", source)
    return jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(source)


def no_chat_template_message(tokenizer: Any, renders: str, advice: str = "") -> str:
    """The refusal of a model whose tokenizer has no chat template, which renders each of the data's `renders`."""
    return (
        f"The tokenizer of {getattr(tokenizer, 'name_or_path', 'the model')!r} has no chat template (a base model?), "
        f"which renders each {renders}: set data.override_chat_template to a Jinja template file (an instruct model "
        f"of the same family has one: its chat_template.jinja, or tokenizer_config.json's chat_template){advice}."
    )


def render_chat(
    renderer: Any, messages: list[dict[str, Any]], generation_prompt: bool, tools: Any, **options: Any
) -> str:
    """`messages` as `renderer`'s chat template writes them, with the tools' schemas (if any) and `options`
    (`chat_template`, the variables check_chat_template_kwargs passed) as arguments."""
    tools_variable = {"tools": tools} if tools else {}
    return renderer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=False, **tools_variable, **options
    )


def template_reads(renderer: Any, name: str, chat_template: str | None = None) -> bool:
    """Whether the chat template (`chat_template`, else `renderer`'s) reads the variable `name` (e.g. `tools`: a
    template that does not drops a conversation's tool schemas without a word); True where there is none (rendering
    fails, naming that)."""
    template = chat_template or getattr(renderer, "chat_template", None)
    return not template or name in _template_variables(template)


def renders_tool_calls(renderer: Any, chat_template: str | None = None) -> bool:
    """Whether the chat template (`chat_template`, else `renderer`'s) writes an assistant message's `tool_calls` (one
    that does not drops them without a word: the turn would read as empty); True where it cannot render the probe
    (rendering the data then fails, naming the row)."""
    name = "verl_probe_tool_call"
    call = {"type": "function", "function": {"name": name, "arguments": {}}}
    probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        return name in renderer.apply_chat_template(probe, tokenize=False, chat_template=chat_template)
    except Exception:
        return True


TURN_MARKER = "\u2063verl-turn-end\u2063"
"""Content of a probe assistant turn: where it lands in a rendering shows what the chat template writes around a
turn (multi-turn continuations, SFT masks, the end-of-turn stop token)."""


def probe_turn() -> list[dict[str, Any]]:
    """A user's message and an assistant turn holding TURN_MARKER: the probe conversation every reading of what a
    chat template writes around a turn renders."""
    return [{"role": "user", "content": "x"}, {"role": "assistant", "content": TURN_MARKER}]


_RENDER_ARGUMENTS = frozenset(
    "messages conversation tools documents chat_template add_generation_prompt continue_final_message tokenize "
    "return_dict return_tensors padding truncation max_length return_assistant_tokens_mask".split()
)
"""apply_chat_template's own arguments (a processor's take them as keywords too) and the template's conversation."""


def check_chat_template_kwargs(
    kwargs: dict[str, Any], renderer: Any, chat_template: str | None, key: str = "data.chat_template_kwargs"
) -> dict[str, Any]:
    """`kwargs` as extra variables for `renderer.apply_chat_template`, or ValueError naming `key`: each name must be
    one the chat template (`chat_template`, else the renderer's own) reads, so that a variable the template ignores,
    e.g. Qwen3's `enable_thinking` given to a Qwen2.5 model, is not a silent no-op; and none may be one of
    apply_chat_template's own arguments (messages, tools, add_generation_prompt, ...)."""
    import inspect

    if not kwargs:
        return {}
    reserved = set(inspect.signature(renderer.apply_chat_template).parameters) | _RENDER_ARGUMENTS
    taken = sorted(set(kwargs) & reserved)
    if taken:
        raise ValueError(f"{key}.{taken[0]} is set by the trainer when it renders a conversation; remove it.")
    template = chat_template or getattr(renderer, "chat_template", None)
    if not template:  # rendering fails, naming the missing template
        return dict(kwargs)
    read = _template_variables(template)
    unread = sorted(set(kwargs) - read)
    if unread:
        name = getattr(renderer, "name_or_path", None) or getattr(
            getattr(renderer, "tokenizer", None), "name_or_path", ""
        )
        variables = ", ".join(sorted(read - reserved)) or "none besides the conversation"
        raise ValueError(
            f"{key}.{unread[0]}: the chat template of {name!r} does not read a variable of that name, so it would "
            f"change nothing; the template's variables: {variables}."
        )
    return dict(kwargs)
