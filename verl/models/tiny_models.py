# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tiny random-init model directories (weights, tokenizer, processor) of every MODEL_KINDS family, built offline.

For tests, the CPU quickstart and benchmarks (nothing can be downloaded); the files are a pure function of the spec.

    python -m verl.models.tiny_models --kind qwen2_5_vl --output /tmp/tiny-vl --seed 0
"""

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from verl.models.config import TEXT_ONLY_VISION_LANGUAGE_TYPES, VISION_LANGUAGE_MODEL_TYPES
from verl.models.transformers_compat import save_model_folder
from verl.utils.hub import safetensors_shapes


if TYPE_CHECKING:  # torch and transformers load lazily: the CLI checks its arguments before the slow imports
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin


ModelKind = Literal[
    "qwen2",
    "llama",
    "qwen3",
    "qwen2_5_vl",
    "qwen2_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen2_rm",
    "qwen3_moe",
    "mixtral",
    "qwen2_moe",
    "olmoe",
    "granitemoe",
    "glm4_moe",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "gemma4",
    "gemma3_text",
    "gemma3",
    "olmo3",
    "falcon_h1",
    "glm4v",
    "glm4v_moe",
    "internvl",
    "llava_onevision",
    "mistral3",
]
MODEL_KINDS: tuple[str, ...] = get_args(ModelKind)
VL_KINDS: tuple[str, ...] = VISION_LANGUAGE_MODEL_TYPES
"""One vision-language kind per model type the trainer supports, named after it."""
HYBRID_KINDS: tuple[str, ...] = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
"""Kinds whose decoder mixes Gated DeltaNet (linear attention) layers with full attention, as Qwen3.5 does."""
PATCH_SIZES: dict[str, int] = {"qwen3_vl": 16, "qwen3_vl_moe": 16, "qwen3_5": 16, "qwen3_5_moe": 16, "gemma4": 16}
"""Vision patch size of a VL kind other than Qwen2(.5)-VL's 14 pixels."""
GLM_KINDS: tuple[str, ...] = ("glm4v", "glm4v_moe", "glm4_moe")
"""GLM-4.1V (dense), GLM-4.5V (mixture of experts) and GLM-4.5 (its text model): GLM's chat format and tokens."""
REWARD_KINDS: tuple[str, ...] = ("qwen2_rm",)
"""Kinds with a one-label score head (sequence classification) instead of an LM head; they get no generation config."""
MOE_EXPERTS, MOE_EXPERTS_PER_TOKEN = 4, 2
"""The mixture-of-experts kinds: routed experts per sparse layer, and experts routed per token."""
LINEAR_HEAD_DIM, LINEAR_KEY_HEADS, LINEAR_VALUE_HEADS = 128, 2, 4
"""HYBRID_KINDS: Gated DeltaNet head dim (128, which vLLM's CPU kernel needs) and key/value heads (grouped path)."""
FULL_ATTENTION_INTERVAL = 4
"""HYBRID_KINDS: every fourth decoder layer is full attention, the others Gated DeltaNet (Qwen3.5's pattern)."""

INTERNVL_TILE = 56
"""internvl: the vision tower's tile side (14-pixel patches, pixel shuffle 0.5: 4 image tokens a tile)."""
INTERNVL_MAX_TILES = 4
"""internvl: most tiles an image is cut into (the processor's max_patches)."""
ONEVISION_TILE = 56
"""llava_onevision: the SigLIP tower's input side (14-pixel patches: 16 tokens a tile)."""
ONEVISION_GRIDS = [[56, 56], [56, 112], [112, 56], [112, 112]]
"""llava_onevision: the anyres resolutions (image_grid_pinpoints, up to 2 x 2 tiles) an image is fitted to."""
MISTRAL3_LONGEST_EDGE = 112
"""mistral3: the longest image side the processor resizes to (a multiple of 28: 14-pixel patches merged 2 x 2)."""
MEDIA_TOKENS: dict[str, dict[str, str]] = {
    "internvl": {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    },
    "llava_onevision": {"image_token": "<image>", "video_token": "<video>"},
    "mistral3": {"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"},
    "gemma4": {
        "image_token": "<|image|>",
        "boi_token": "<|image>",
        "eoi_token": "<image|>",
        "audio_token": "<|audio|>",
        "boa_token": "<|audio>",
        "eoa_token": "<audio|>",
    },
    "gemma3": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
}
"""Named special tokens a kind's processor reads from its tokenizer (`tokenizer.image_token`, ...), appended after
Qwen's in this order (gemma3: after Gemma 3's; gemma4: among GEMMA_SPECIAL_TOKENS). A gemma3 image part renders as its
boi token."""
MEDIA_PLACEHOLDERS: dict[str, tuple[str, str]] = {
    "internvl": ("<IMG_CONTEXT>\n", "<video>\n"),
    "llava_onevision": ("<image>\n", "<video>\n"),
    "mistral3": ("[IMG]", "<|vision_start|><|video_pad|><|vision_end|>"),  # no video
}
"""What a non-Qwen kind's chat template writes for an image and a video part (the processor expands it)."""

# Bump when the output of the builder changes, so cached directories (get_or_build_tiny_model) are rebuilt.
BUILDER_VERSION = 8
SPEC_FILE = "tiny_model_spec.json"

# Qwen2's special tokens, appended after the BPE vocabulary in this order, as in Qwen (151643, 151644, ...).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2-VL-Instruct style: `content` is a string or a list of image/video/text parts, each image/video one pad token
# that the processor expands. `tools` go into the system message; calls are <tool_call> JSON blocks (as in Qwen2.5).
TOOL_CALLS = (
    "{% for call in message['tool_calls'] or [] %}{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ call[\'function\'][\'name\'] }}", "arguments": '
    "{% if call['function']['arguments'] is string %}{{ call['function']['arguments'] }}"
    "{% else %}{{ call['function']['arguments'] | tojson }}{% endif %}}\n</tool_call>{% endfor %}"
)
"""How the Qwen kinds' template writes an assistant's tool_calls: Qwen2.5's Hermes blocks."""
TOOLS_BLOCK = (
    "{% if tools %}\n\nTools you can call, as JSON schemas:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    'Call one by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
    "{% endif %}"
)
"""The tool schemas, at the end of the system message: the default one's, or the conversation's own (as Qwen2.5's
template writes them)."""
DEFAULT_SYSTEM = (
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant." + TOOLS_BLOCK + "<|im_end|>\n"
    "{% endif %}"
)
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}" + DEFAULT_SYSTEM + "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    + TOOL_CALLS
    + "{% if loop.first and message['role'] == 'system' %}"
    + TOOLS_BLOCK
    + "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN3_LAST_QUERY = (
    "{% set query = namespace(last=-1) %}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{% set query.last = loop.index0 %}{% endif %}{% endfor %}"
)
QWEN3_THINKING_GATE = (
    "{% if message['role'] == 'assistant' and loop.last and loop.index0 > query.last %}<think>\n\n</think>\n\n"
    "{% endif %}"
)
"""Qwen3's rendering of the conversation's last assistant turn after the last user message: with its thinking block
(empty here), which Qwen3 drops from earlier turns, so a conversation renders differently once messages follow."""
QWEN3_SYSTEM = (
    "{% if loop.first and message['role'] != 'system' and tools %}<|im_start|>system\n"
    + TOOLS_BLOCK.replace("\n\nTools", "Tools", 1)
    + "<|im_end|>\n{% endif %}"
)
"""Qwen3 writes no default system message: one holds the tools alone where the conversation has none."""
QWEN3_GENERATION_PROMPT = (
    "<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
"""Qwen3's generation prompt: `enable_thinking=False` (data.chat_template_kwargs) opens the answer with an empty
thinking block, as Qwen3's own template does."""

# gemma4: Gemma's special tokens first, as in its vocabulary (<pad> 0): transformers embeds the pad id where vLLM
# embeds token 0 for the per-layer inputs at image positions. The processor expands <|image|> to the soft tokens.
GEMMA_SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<|turn>",
    "<turn|>",
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|video|>",
    "<|audio>",
    "<audio|>",
    "<|audio|>",
)
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}<|image|>"
    "{% elif content['type'] == 'video' or 'video' in content %}<|video|>"
    "{% elif 'text' in content %}{{ content['text'] | trim }}"
    "{% endif %}{% endfor %}{% endif %}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
GEMMA_SLIDING_WINDOW = 32
"""gemma4: tokens a sliding-window layer sees, smaller than an image prompt so the window really cuts."""
GEMMA3_SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% set first = messages[0] if messages else {} %}"
    "{% set system = first['content'] | trim ~ '\n\n' if first['role'] == 'system' else '' %}"
    "{% for message in messages if message['role'] != 'system' %}"
    "{% if (message['role'] == 'user') != (loop.index0 is even) %}"
    "{{ raise_exception('Gemma 3 turns alternate user, model, user, ...') }}{% endif %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if loop.first %}{{ system }}{% endif %}{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] if 'text' in part %}{{ part['text'] | trim }}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""gemma3_text: as Gemma 3-it renders a chat: a system message opens the first user turn, turns must alternate,
the model's turns are `model` and end at <end_of_turn> (which the generation config, not the tokenizer, names)."""
GEMMA3_IMAGE_SIZE, GEMMA3_IMAGE_TOKENS_PER_IMAGE = 56, 4
"""gemma3: the side every image is resized to (14-pixel patches, 4 x 4) and the soft tokens they are pooled to."""
TEXT_SLIDING_WINDOW = 16
"""gemma3_text, olmo3: tokens a sliding-window layer sees, fewer than a test prompt and its response."""
GEMMA_PER_LAYER_INPUT_SIZE = 16
"""gemma4: width of each layer's per-layer input embedding (E2B: 256)."""
GEMMA_MAX_SOFT_TOKENS = 70
"""gemma4: soft tokens per image, the smallest budget Gemma 4's processor offers (it scales every image to it)."""
# GLM-4.1V's special tokens (chat roles, the [gMASK]<sop> prefix, image and video markers), appended after Qwen's.
GLM_SPECIAL_TOKENS: tuple[str, ...] = (
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|image|>",
    "<|video|>",
)
GLM_STOP_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|user|>", "<|observation|>")
"""Where a GLM turn ends (GLM-4.1V's generation config): the model stops by opening the next user or tool turn."""

# GLM-4.1V's chat format, small: `[gMASK]<sop>`, then `<|role|>\n` per message (tools: observation), no end token.
GLM_CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}"
    "<|{{ 'observation' if message['role'] == 'tool' else message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif content['type'] == 'video' or 'video' in content %}<|begin_of_video|><|video|><|end_of_video|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# llama: Llama 3's special tokens and chat format, small (no tools, text only). As Llama 3's tokenizer: encoding adds
# <|begin_of_text|>, there is no pad token (the trainer pads with eos), and an instruct turn ends at <|eot_id|>.
LLAMA_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# Qwen2's pre-tokenizer: contractions, letter runs, single digits, punctuation runs, newlines, spaces.
_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_WORDS = (
    "the of and to in is was for on that with as by at from it an are be this or have has not but what which "
    "number answer question solve find compute sum product difference equal value total how many step think reason "
    "first then therefore final box image picture video shows left right top bottom color red green blue circle "
    "square triangle count system user assistant helpful please let us check so we get"
).split()
_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?()[]{}+-*/=<>\n\"'"


def _synthetic_corpus(num_lines: int = 4000, seed: int = 0) -> Iterator[str]:
    """Word salad, arithmetic in the RL examples' reasoning format and random characters; generated, not read from
    disk, so the tokenizer is the same on every machine."""
    rng = random.Random(seed)
    for _ in range(num_lines):
        pick = rng.random()
        if pick < 0.4:
            yield " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 25))).capitalize() + "."
        elif pick < 0.7:
            a, b = rng.randint(0, 999), rng.randint(0, 999)
            yield f"What is {a} + {b}? <think>{a} plus {b} is {a + b}.</think> The answer is \\boxed{{{a + b}}}."
        else:
            yield "".join(rng.choice(_CHARS) for _ in range(rng.randint(10, 60)))


@functools.lru_cache(maxsize=8)
def _train_bpe(bpe_vocab_size: int) -> tuple[str, str]:
    """Train the byte-level BPE once per size; returns (vocab json, merges json) so the cached value is immutable."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(_synthetic_corpus(), trainer=trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [merge.split(" ") if isinstance(merge, str) else list(merge) for merge in model["merges"]]
    return json.dumps(model["vocab"]), json.dumps(merges)


def _check_vocab_size(vocab_size: int) -> None:
    if vocab_size < 257:
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least 257; e.g. 2048.")


def chat_template(kind: str) -> str:
    """`kind`'s chat template: CHAT_TEMPLATE with the image and video parts written as its processor expects them
    (GLM kinds, the Gemma kinds and llama: their own)."""
    if kind in GLM_KINDS:
        return GLM_CHAT_TEMPLATE
    own = {"gemma4": GEMMA_CHAT_TEMPLATE, "gemma3_text": GEMMA3_CHAT_TEMPLATE, "llama": LLAMA_CHAT_TEMPLATE}
    if kind in own:
        return own[kind]
    if kind == "gemma3":
        text_parts = "{% for part in message['content'] if 'text' in part %}{{ part['text'] | trim }}{% endfor %}"
        parts = (
            "{% for part in message['content'] %}{% if part['type'] == 'image' or 'image' in part %}<start_of_image>"
            "{% elif 'text' in part %}{{ part['text'] | trim }}{% endif %}{% endfor %}"
        )
        return GEMMA3_CHAT_TEMPLATE.replace(text_parts, parts)
    if kind in ("qwen3", "qwen3_moe"):
        opening = "<|im_start|>{{ message['role'] }}\n"  # once in CHAT_TEMPLATE: each message's
        template = CHAT_TEMPLATE.replace(opening, opening + QWEN3_THINKING_GATE).replace(DEFAULT_SYSTEM, QWEN3_SYSTEM)
        return QWEN3_LAST_QUERY + template.replace("<|im_start|>assistant\n{% endif %}", QWEN3_GENERATION_PROMPT)
    if kind in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_next"):
        return CHAT_TEMPLATE.replace(DEFAULT_SYSTEM, QWEN3_SYSTEM)
    if kind not in MEDIA_PLACEHOLDERS:
        return CHAT_TEMPLATE
    image, video = MEDIA_PLACEHOLDERS[kind]
    return CHAT_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", image).replace(
        "<|vision_start|><|video_pad|><|vision_end|>", video
    )


def build_tokenizer(vocab_size: int = 2048, kind: str = "qwen2") -> "PreTrainedTokenizerBase":
    """A Qwen2Tokenizer: a locally trained byte-level BPE of `vocab_size` tokens, Qwen's special tokens, `kind`'s
    MEDIA_TOKENS and chat template (GLM kinds, the Gemma kinds and llama: their own tokens, template and end of
    turn). The BPE is trained once per process; each call returns a new tokenizer, free to modify."""
    from transformers import Qwen2Tokenizer

    _check_vocab_size(vocab_size)
    vocab_json, merges_json = _train_bpe(vocab_size)
    vocab = json.loads(vocab_json)
    if len(vocab) < vocab_size:  # the synthetic corpus ran out of pairs to merge
        raise ValueError(
            f"vocab_size={vocab_size} is more than the synthetic corpus supports ({len(vocab)} tokens); "
            f"use vocab_size <= {len(vocab)}."
        )
    media = MEDIA_TOKENS.get(kind, {})
    if kind.startswith("gemma"):  # Gemma's special tokens first, as in its vocabulary (<pad> 0, <eos> 1, <bos> 2)
        if kind == "gemma4":  # as Gemma-it, eos ends the model's turn
            specials, eos = GEMMA_SPECIAL_TOKENS, "<turn|>"
        else:  # as Gemma 3: eos is <eos>; the model's turn ends at <end_of_turn>
            specials, eos = GEMMA3_SPECIAL_TOKENS + tuple(media.values()), "<eos>"
        shifted = {token: i + len(specials) for token, i in vocab.items()}
        vocab = {**{token: i for i, token in enumerate(specials)}, **shifted}
        named = {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": eos, "pad_token": "<pad>", **media}
        added = specials[3:]
    elif kind == "llama":
        named = {"unk_token": None, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": None}
        added, eos = LLAMA_SPECIAL_TOKENS, "<|eot_id|>"
    else:  # Qwen's special tokens after the BPE vocabulary (then the kind's media or GLM tokens)
        named = {"unk_token": None, "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
        named.update(media)
        added = SPECIAL_TOKENS + (GLM_SPECIAL_TOKENS if kind in GLM_KINDS else tuple(media.values()))
        # as in Qwen-Instruct: generation ends at <|im_end|>, padding uses <|endoftext|>; GLM-4.1V: eos and padding
        # are <|endoftext|> (a turn also ends at the next role token)
        eos = "<|endoftext|>" if kind in GLM_KINDS else "<|im_end|>"
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=[tuple(merge) for merge in json.loads(merges_json)], errors="replace", **named
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(added)})
    tokenizer.eos_token = eos
    tokenizer.add_bos_token = kind in ("llama", "gemma3_text", "gemma3")
    tokenizer.chat_template = chat_template(kind)
    tokenizer.model_max_length = 8192
    return tokenizer


@dataclass(frozen=True)
class TinyModelSpec:
    """Everything that determines a tiny model directory; the same spec always gives the same files."""

    kind: str = "qwen2"
    """Model family (MODEL_KINDS): text qwen2, llama (Llama 3), qwen3, gemma3_text (Gemma 3 1B), olmo3 (OLMo 3, which
    vLLM runs through its Transformers backend), falcon_h1 (Falcon-H1: Mamba-2 mixers beside attention), the
    mixtures of experts qwen3_moe, mixtral, qwen2_moe, olmoe, granitemoe (Granite 3.0 MoE), glm4_moe (GLM-4.5) and
    qwen3_next (hybrid, as Qwen3.5-MoE's decoder), and qwen2_rm (a score head); the rest (gemma3: Gemma 3 4B, on
    text) have a vision tower. qwen3_5 kinds have a hybrid Gated DeltaNet / full-attention decoder; gemma4 is Gemma 4
    E2B's layout."""
    seed: int = 0
    """Seed of the weight initialisation (the tokenizer does not depend on it)."""
    vocab_size: int = 2048
    """Trained BPE vocabulary (257 to about 12800), special tokens excluded; the embedding pads to a multiple of 64."""
    hidden_size: int = 256
    """Width of the language model."""
    num_layers: int = 4
    num_heads: int = 4
    """Attention heads; hidden_size / num_heads is the head dim and must be a multiple of 8 (mrope sections)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention, as in Qwen2)."""
    intermediate_size: int = 512
    vision_hidden_size: int = 64
    """Width of the vision tower; the vision_* fields apply to VL kinds only."""
    vision_depth: int = 2
    vision_num_heads: int = 2
    max_position_embeddings: int = 8192
    """Longest sequence the config admits; vLLM's max_model_len must not exceed it."""
    initializer_range: float = 0.08
    """Std of the random init, above the usual 0.02 so greedy argmax is rarely a near-tie between HF and vLLM."""
    min_pixels: int = 28 * 28 * 4
    """Smallest image area after resizing: at least 4 image tokens."""
    max_pixels: int = 28 * 28 * 64
    """Largest image area after resizing: at most 64 image tokens."""

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"kind={self.kind!r} is not a tiny model kind; use one of {', '.join(MODEL_KINDS)}.")
        sizes = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vision_hidden_size")
        for name in (*sizes, "vision_depth", "vision_num_heads", "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer.")
        _check_vocab_size(self.vocab_size)
        if self.hidden_size % self.num_heads or self.head_dim % 8:
            raise ValueError(
                f"hidden_size={self.hidden_size} / num_heads={self.num_heads} must give a head dim that is a "
                "multiple of 8 (the multimodal rope splits half of it in three); e.g. hidden_size=256, num_heads=4."
            )
        if self.kind in HYBRID_KINDS and self.head_dim % 32:
            raise ValueError(
                f"kind={self.kind}: hidden_size={self.hidden_size} / num_heads={self.num_heads} must give a head dim "
                "that is a multiple of 32 (rope covers a quarter of it, split in three); e.g. 256 / 4."
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}.")
        if self.vision_hidden_size % self.vision_num_heads or (self.vision_hidden_size // self.vision_num_heads) % 4:
            raise ValueError(
                f"vision_hidden_size={self.vision_hidden_size} / vision_num_heads={self.vision_num_heads} must give "
                "a head dim that is a multiple of 4 (2D vision rope); e.g. vision_hidden_size=64, vision_num_heads=2."
            )
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"min_pixels={self.min_pixels} and max_pixels={self.max_pixels} need 0 < min <= max.")
        if not 0 <= self.initializer_range < float("inf"):  # a traceback from torch: "normal expects std >= 0"
            raise ValueError(f"initializer_range={self.initializer_range} must be a finite number >= 0.")

    @property
    def is_vl(self) -> bool:
        """Whether the model has a vision tower (and the directory a processor)."""
        return self.kind in VL_KINDS or self.kind in TEXT_ONLY_VISION_LANGUAGE_TYPES

    @property
    def is_reward_model(self) -> bool:
        """Whether the model scores sequences (one logit at the last token) rather than generating them."""
        return self.kind in REWARD_KINDS

    @property
    def head_dim(self) -> int:
        """Width of one attention head of the language model."""
        return self.hidden_size // self.num_heads

    def to_dict(self) -> dict[str, Any]:
        """The spec as written to tiny_model_spec.json; the builder version marks caches of older builders stale."""
        return {"builder_version": BUILDER_VERSION, **dataclasses.asdict(self)}


def _text_config_kwargs(spec: TinyModelSpec, tokenizer: "PreTrainedTokenizerBase") -> dict[str, Any]:
    """The decoder fields every kind shares; bos, eos and pad as in Qwen-Instruct (Gemma kinds, llama: their own)."""
    ids = tokenizer.get_vocab()
    if spec.kind.startswith("gemma"):
        bos, eos, pad = "<bos>", "<eos>", "<pad>"
    elif spec.kind == "llama":
        bos, eos, pad = "<|begin_of_text|>", "<|eot_id|>", None
    else:
        bos, eos, pad = "<|endoftext|>", "<|im_end|>", "<|endoftext|>"
    return {
        "vocab_size": (len(tokenizer) + 63) // 64 * 64,  # padded like Qwen's embeddings (151936 > 151665 tokens)
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "initializer_range": spec.initializer_range,
        "tie_word_embeddings": True,
        "bos_token_id": ids[bos],
        "eos_token_id": ids[eos],
        "pad_token_id": ids.get(pad),
    }


def _sliding(spec: TinyModelSpec, every: int) -> dict[str, Any]:
    """Sliding-window layers of TEXT_SLIDING_WINDOW tokens, every `every`-th layer full attention instead."""
    layer_types = ["full_attention" if i % every == every - 1 else "sliding_attention" for i in range(spec.num_layers)]
    return {"sliding_window": TEXT_SLIDING_WINDOW, "layer_types": layer_types}


def _experts(spec: TinyModelSpec, count_key: str = "num_experts") -> dict[str, int]:
    """The routed experts of a mixture-of-experts kind (`count_key`: the config's name for their number)."""
    return {
        count_key: MOE_EXPERTS,
        "num_experts_per_tok": MOE_EXPERTS_PER_TOKEN,
        "moe_intermediate_size": spec.intermediate_size // MOE_EXPERTS_PER_TOKEN,
    }


def _text_experts_config(spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any]) -> dict[str, Any]:
    """The text mixture-of-experts kinds, each in its published layout, small; every one but Granite's has an untied
    head."""
    text.update(tie_word_embeddings=False, head_dim=spec.head_dim)
    expert_size = spec.intermediate_size // MOE_EXPERTS_PER_TOKEN
    top_k = {"num_experts_per_tok": MOE_EXPERTS_PER_TOKEN, "intermediate_size": expert_size}  # one expert's size
    if spec.kind == "mixtral":  # Mixtral 8x7B's layout (top-2 of its 8 experts)
        return {**text, "num_local_experts": MOE_EXPERTS, **top_k}
    if spec.kind == "granitemoe":  # Granite 3.0 1B-A400M / 3B-A800M: scaled embeddings, residuals, attention, logits
        scales = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 6.0}
        scales["attention_multiplier"] = 1.0 / spec.head_dim
        return {**text, "num_local_experts": MOE_EXPERTS, **top_k, **scales, "tie_word_embeddings": True}
    if spec.kind == "olmoe":  # OLMoE: q/k norms over the whole projection, top-k probabilities not renormalised
        # its norms' epsilon as published: vLLM's OLMoE hard-codes 1e-5 whatever the config says
        return {**text, "num_experts": MOE_EXPERTS, **top_k, "rms_norm_eps": 1e-5}
    if spec.kind == "qwen2_moe":  # Qwen1.5-MoE / Qwen2-57B-A14B: biased q/k/v, a shared expert behind a sigmoid gate
        extra = {"shared_expert_intermediate_size": spec.intermediate_size, "norm_topk_prob": False}
        return {**text, **_experts(spec), **extra, "decoder_sparse_step": 1, "mlp_only_layers": []}
    # glm4_moe, GLM-4.5 / 4.6 / Air: a dense first layer, then sigmoid-scored routed experts picked with a correction
    # bias and scaled, plus a shared expert; rope on half the head dim, biased q/k/v; a turn ends at the next role
    text["rope_parameters"]["partial_rotary_factor"] = 0.5
    experts = {"n_shared_experts": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True}
    text.update(attention_bias=True, eos_token_id=[ids[token] for token in GLM_STOP_TOKENS])
    return {**text, **_experts(spec, "n_routed_experts"), **experts}


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (time, height, width) as Qwen does: [16, 24, 24] for head dim 128."""
    temporal = head_dim // 8
    height = (head_dim // 2 - temporal) // 2
    return [temporal, height, head_dim // 2 - temporal - height]


def _config_kwargs(spec: TinyModelSpec, tokenizer: "PreTrainedTokenizerBase") -> dict[str, Any]:
    """Keyword arguments of the config class of `spec.kind`'s model class."""
    text = _text_config_kwargs(spec, tokenizer)
    ids = tokenizer.get_vocab()
    if spec.kind == "gemma4":
        return _gemma4_config(spec, ids, text)
    if spec.kind in ("gemma3_text", "gemma3"):  # Gemma 3's decoder, small: sliding-window and full layers alternating
        text.update(_sliding(spec, 2), head_dim=spec.head_dim, query_pre_attn_scalar=spec.head_dim)
        if spec.kind == "gemma3_text":
            return text
        # Gemma 3 4B-27B: a SigLIP tower (no pooling head) whose patches are average-pooled to the soft tokens; the
        # decoder's init a quarter as wide (as gemma4's), else greedy decoding repeats one token
        return dict(
            text_config={**text, "initializer_range": spec.initializer_range / 4},
            vision_config={**_tower(spec, GEMMA3_IMAGE_SIZE), "vision_use_head": False},
            mm_tokens_per_image=GEMMA3_IMAGE_TOKENS_PER_IMAGE,
            boi_token_index=ids["<start_of_image>"],
            eoi_token_index=ids["<end_of_image>"],
            image_token_index=ids["<image_soft_token>"],
            initializer_range=spec.initializer_range,
            tie_word_embeddings=True,
        )
    if spec.kind == "olmo3":  # OLMo 3 7B's layout, small: three sliding-window layers to a full one, an untied head
        return {**text, **_sliding(spec, 4), "tie_word_embeddings": False}
    if spec.kind == "falcon_h1":  # Falcon-H1: attention and a Mamba-2 mixer side by side in every layer
        mamba = {"mamba_d_ssm": spec.hidden_size, "mamba_n_heads": 8, "mamba_d_head": spec.hidden_size // 8}
        return {**text, **mamba, "mamba_d_state": 16, "mamba_chunk_size": 16, "head_dim": spec.head_dim}
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6}
    # Qwen3-30B-A3B's experts, small: every layer sparse. transformers' router always normalises the top-k; vLLM
    # reads the flag.
    qwen3_experts = {**_experts(spec), "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True}
    if spec.kind == "llama":  # Llama 3: its rope scaling, an untied output layer (8B and up)
        rope = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0}
        rope.update(high_freq_factor=4.0, original_max_position_embeddings=spec.max_position_embeddings // 8)
        return {**text, "rope_parameters": rope, "tie_word_embeddings": False}
    if spec.kind in ("qwen2", "qwen2_rm"):
        # qwen2_rm: one label, the scalar reward. pad_token_id is how the HF head finds each row's last token.
        return {**text, "num_labels": 1} if spec.is_reward_model else text
    if spec.kind == "qwen3":  # q/k norms, explicit head_dim, no qkv bias (Qwen3-4B/8B)
        return {**text, "head_dim": spec.head_dim}
    if spec.kind == "qwen3_moe":  # q/k norms, explicit head_dim
        return {**text, **qwen3_experts, "head_dim": spec.head_dim}
    if spec.kind in ("mixtral", "qwen2_moe", "olmoe", "granitemoe", "glm4_moe"):
        return _text_experts_config(spec, ids, text)
    if spec.kind == "qwen3_next":  # Qwen3-Next-80B-A3B: Qwen3.5-MoE's decoder without mrope, text only, untied
        _qwen3_5_text(spec, text)
        del text["rope_parameters"]["mrope_section"], text["rope_parameters"]["mrope_interleaved"]
        return {**text, "tie_word_embeddings": False}
    tiled = {"internvl": _internvl_config, "llava_onevision": _onevision_config, "mistral3": _mistral3_config}
    if spec.kind in tiled:  # a ViT-style tower and a plain 1-D rope decoder
        return tiled[spec.kind](spec, ids, text)
    text["rope_parameters"]["mrope_section"] = _mrope_section(spec.head_dim)
    vision = {
        "depth": spec.vision_depth,
        "num_heads": spec.vision_num_heads,
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": 2 * spec.vision_hidden_size,
        "out_hidden_size": spec.hidden_size,
        "patch_size": PATCH_SIZES.get(spec.kind, 14),
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "initializer_range": spec.initializer_range,
    }
    if spec.kind in GLM_KINDS:
        return _glm4v_config(spec, ids, text, vision)
    if spec.kind in HYBRID_KINDS:
        _qwen3_5_text(spec, text)
        vision["num_position_embeddings"] = 64
    elif spec.kind in ("qwen3_vl", "qwen3_vl_moe"):
        text["head_dim"] = spec.head_dim
        text["rope_parameters"]["mrope_interleaved"] = True  # the three rope sections interleave over the frequencies
        if spec.kind == "qwen3_vl_moe":
            # 3/4 width: a square expert matrix's transposed checkpoint layout would be ambiguous (transformers_compat)
            text.update({**qwen3_experts, "moe_intermediate_size": 3 * spec.hidden_size // 4})
        vision.update(
            num_position_embeddings=64,  # an 8 x 8 grid of learned positions, interpolated to each image's grid
            deepstack_visual_indexes=[0],  # the first block's features also go into the first decoder layer
        )
    elif spec.kind == "qwen2_5_vl":
        vision.update(
            window_size=112,  # 4x4 merged patches per attention window
            fullatt_block_indexes=[spec.vision_depth - 1],
            tokens_per_second=2,
        )
    else:  # Qwen2-VL names the tower's width embed_dim and its output width hidden_size
        del vision["intermediate_size"], vision["out_hidden_size"]
        vision.update(embed_dim=spec.vision_hidden_size, hidden_size=spec.hidden_size, mlp_ratio=2)
    # The top-level VL config does not keep bos/eos/pad: they live in text_config.
    return {
        "text_config": text,
        "vision_config": vision,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": True,
    }


def _tower(spec: TinyModelSpec, image_size: int) -> dict[str, Any]:
    """The vision tower fields the ViT-style towers (InternViT, SigLIP, Pixtral) share: 14-pixel patches."""
    return {
        "hidden_size": spec.vision_hidden_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_num_heads,
        "intermediate_size": 2 * spec.vision_hidden_size,
        "image_size": image_size,
        "patch_size": 14,
    }


def _internvl_config(spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any]) -> dict[str, Any]:
    """InternVL3-hf's layout, small: an InternViT tower on one tile, pixel shuffle (0.5), an MLP projector and a Qwen2
    decoder with plain 1-D rope."""
    vision = {**_tower(spec, INTERNVL_TILE), "initializer_range": spec.initializer_range}
    return dict(
        text_config={"model_type": "qwen2", **text},
        vision_config=vision,
        image_token_id=ids[MEDIA_TOKENS["internvl"]["context_image_token"]],
        image_seq_length=(INTERNVL_TILE // 14) ** 2 // 4,
        downsample_ratio=0.5,
        tie_word_embeddings=True,
    )


def _onevision_config(spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any]) -> dict[str, Any]:
    """LLaVA-OneVision's layout, small: a SigLIP tower, anyres tiling with a newline token per row, an MLP projector
    and a Qwen2 decoder with plain 1-D rope."""
    vision = {
        "model_type": "siglip_vision_model",
        **_tower(spec, ONEVISION_TILE),
        "vision_use_head": False,  # as the published checkpoints: the features come from the last layer, unpooled
    }
    tokens = MEDIA_TOKENS["llava_onevision"]
    return dict(
        text_config={"model_type": "qwen2", **text},
        vision_config=vision,
        image_token_index=ids[tokens["image_token"]],
        video_token_index=ids[tokens["video_token"]],
        image_grid_pinpoints=ONEVISION_GRIDS,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        vision_aspect_ratio="anyres_max_9",
        tie_word_embeddings=True,
    )


def _mistral3_config(spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any]) -> dict[str, Any]:
    """Mistral Small 3.1 / Ministral 3's layout, small: a Pixtral tower (2-D rope over each image's own patch grid,
    any aspect ratio), 2 x 2 patch merging, an untied Mistral decoder with plain 1-D rope."""
    vision = {**_tower(spec, MISTRAL3_LONGEST_EDGE), "initializer_range": spec.initializer_range}
    return dict(
        text_config={"model_type": "mistral", **text, "head_dim": spec.head_dim, "sliding_window": None},
        vision_config=vision,
        image_token_index=ids[MEDIA_TOKENS["mistral3"]["image_token"]],
        spatial_merge_size=2,
        tie_word_embeddings=False,
    )


def _qwen3_5_text(spec: TinyModelSpec, text: dict[str, Any]) -> None:
    """Qwen3.5's decoder, small, into `text`: Gated DeltaNet layers with three of every four full-attention layers
    replaced, rope on a quarter of the head dim (interleaved mrope), gated full attention (its vision tower is
    Qwen3-VL's)."""
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 1e7,
        "partial_rotary_factor": 0.25,  # as Qwen3.5 (64 of its 256)
        "mrope_section": _mrope_section(spec.head_dim // 4),
        "mrope_interleaved": True,
    }
    text.update(
        head_dim=spec.head_dim,
        layer_types=[
            "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
            for i in range(spec.num_layers)
        ],
        linear_conv_kernel_dim=4,
        linear_key_head_dim=LINEAR_HEAD_DIM,
        linear_value_head_dim=LINEAR_HEAD_DIM,
        linear_num_key_heads=LINEAR_KEY_HEADS,
        linear_num_value_heads=LINEAR_VALUE_HEADS,
    )
    if spec.kind in ("qwen3_5_moe", "qwen3_next"):  # every layer sparse, a shared expert, as Qwen3.5-35B-A3B
        text.update(_experts(spec), shared_expert_intermediate_size=spec.intermediate_size // MOE_EXPERTS_PER_TOKEN)
        del text["intermediate_size"]


def _gemma4_config(spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any]) -> dict[str, Any]:
    """Gemma 4 E2B/E4B's layout, small: sliding-window and full-attention (twice the head dim) layers alternating, the
    second half sharing earlier layers' keys and values, per-layer input embeddings, logit soft-capping, a vision
    tower whose 3 x 3 pooled patches are the soft tokens; no audio tower."""
    layer_types = ["full_attention" if i % 2 else "sliding_attention" for i in range(spec.num_layers)]
    layer_types[-1] = "full_attention"  # Gemma 4's last layer is always global
    text.update(
        head_dim=spec.head_dim,
        global_head_dim=2 * spec.head_dim,
        layer_types=layer_types,
        sliding_window=GEMMA_SLIDING_WINDOW,
        num_kv_shared_layers=spec.num_layers // 2 if spec.num_layers >= 4 else 0,
        hidden_size_per_layer_input=GEMMA_PER_LAYER_INPUT_SIZE,
        vocab_size_per_layer_input=text["vocab_size"],
        final_logit_softcapping=30.0,
        # a quarter, else the sqrt(hidden_size)-scaled embedding outweighs the normalised sublayers (greedy repeats)
        initializer_range=spec.initializer_range / 4,
    )
    vision = {
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": 2 * spec.vision_hidden_size,
        "num_hidden_layers": spec.vision_depth,
        "num_attention_heads": spec.vision_num_heads,
        "num_key_value_heads": spec.vision_num_heads,
        "head_dim": spec.vision_hidden_size // spec.vision_num_heads,
        "patch_size": PATCH_SIZES["gemma4"],
        "pooling_kernel_size": 3,
        "position_embedding_size": 256,  # patch rows/columns of the widest image (70 soft tokens in one row: 210)
        "default_output_length": GEMMA_MAX_SOFT_TOKENS,  # vLLM counts an image's tokens with it, as the processor
        "initializer_range": spec.initializer_range,
    }
    return dict(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        image_token_id=ids["<|image|>"],
        boi_token_id=ids["<|image>"],
        eoi_token_id=ids["<image|>"],
        video_token_id=ids["<|video|>"],
        audio_token_id=ids["<|audio|>"],
        boa_token_id=ids["<|audio>"],
        eoa_token_index=ids["<audio|>"],
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
    )


def _glm4v_config(
    spec: TinyModelSpec, ids: dict[str, int], text: dict[str, Any], vision: dict[str, Any]
) -> dict[str, Any]:
    """GLM-4.1V's layout, small (GLM-4.5V's for glm4v_moe): rope on half the head dim, biased q/k/v, an untied
    output head, and GLM's vision tower (learned position embeddings, a convolution that merges 2x2 patches)."""
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": _mrope_section(spec.head_dim // 2),
    }
    # attention_bias: vLLM reads it (transformers' GLM-4.1V hard-codes the bias); head_dim and use_qk_norm: vLLM's
    # GLM-4.5V reads both and transformers' text config does not define them, so they are saved as given.
    text.update(
        attention_bias=True,
        head_dim=spec.head_dim,
        tie_word_embeddings=False,
        eos_token_id=[ids[token] for token in GLM_STOP_TOKENS],
    )
    if spec.kind == "glm4v_moe":  # GLM-4.5V: a dense first layer, then routed experts plus one shared expert
        text.update(
            _experts(spec, "n_routed_experts"),
            use_qk_norm=False,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=1.0,
        )
    return dict(
        text_config=text,
        vision_config={**vision, "image_size": 112},  # an 8 x 8 grid of learned positions, interpolated per image
        image_token_id=ids["<|image|>"],
        video_token_id=ids["<|video|>"],
        image_start_token_id=ids["<|begin_of_image|>"],
        image_end_token_id=ids["<|end_of_image|>"],
        video_start_token_id=ids["<|begin_of_video|>"],
        video_end_token_id=ids["<|end_of_video|>"],
        tie_word_embeddings=False,
    )


def build_model(spec: TinyModelSpec, tokenizer: "PreTrainedTokenizerBase") -> "PreTrainedModel":
    """A randomly initialised float32 model for `spec`; the caller's global torch RNG is left untouched."""
    import torch
    import transformers

    if spec.is_reward_model:  # the base model type's sequence classifier (qwen2_rm: Qwen2's)
        auto_class = transformers.AutoModelForSequenceClassification
    else:
        auto_class = transformers.AutoModelForImageTextToText if spec.is_vl else transformers.AutoModelForCausalLM
    config = transformers.AutoConfig.for_model(spec.kind.removesuffix("_rm"), **_config_kwargs(spec, tokenizer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = auto_class.from_config(config).to(torch.float32)
    if spec.is_reward_model:  # nothing is generated from a reward model: no generation config to write
        return model.eval()
    # Only the stop tokens: sampling defaults here would silently become vLLM's defaults too.
    if spec.kind == "gemma4":  # as Gemma-it: the end of the model's turn or <eos>
        stop_tokens = ("<turn|>", "<eos>")
    elif spec.kind in ("gemma3_text", "gemma3"):
        stop_tokens = ("<eos>", "<end_of_turn>")
    elif spec.kind == "llama":
        stop_tokens = ("<|eot_id|>", "<|end_of_text|>")
    else:
        stop_tokens = GLM_STOP_TOKENS if spec.kind in GLM_KINDS else ("<|im_end|>", "<|endoftext|>")
    text = config.get_text_config()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=text.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids(list(stop_tokens)),
        pad_token_id=text.pad_token_id,
    )
    return model.eval()


def build_processor(spec: TinyModelSpec, tokenizer: "PreTrainedTokenizerBase") -> "ProcessorMixin":
    """The processor AutoProcessor gives `spec.kind`, with the tokenizer's chat template and image and video
    processors sized by spec.min/max_pixels (internvl, llava_onevision: by their tile; gemma4: its image budget)."""
    import transformers as hf
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    size = {"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels}
    patches = {"patch_size": PATCH_SIZES.get(spec.kind, 14), "temporal_patch_size": 2, "merge_size": 2}
    extra: dict[str, Any] = {}
    if spec.kind == "gemma4":  # the smallest image budget, with the default audio feature extractor it requires
        budget = {
            "patch_size": patches["patch_size"],
            "pooling_kernel_size": 3,
            "max_soft_tokens": GEMMA_MAX_SOFT_TOKENS,
        }
        image, video = hf.Gemma4ImageProcessor(**budget), hf.Gemma4VideoProcessor(**budget)
        extra = {"feature_extractor": hf.Gemma4AudioFeatureExtractor(), "image_seq_length": GEMMA_MAX_SOFT_TOKENS}
    elif spec.kind == "gemma3":  # every image resized to one square, pooled to a fixed number of soft tokens
        image = hf.Gemma3ImageProcessor(size={"height": GEMMA3_IMAGE_SIZE, "width": GEMMA3_IMAGE_SIZE})
        return hf.Gemma3Processor(image, tokenizer, tokenizer.chat_template, GEMMA3_IMAGE_TOKENS_PER_IMAGE)
    elif spec.kind == "internvl":
        # an image becomes up to INTERNVL_MAX_TILES tiles by aspect ratio plus a thumbnail (as vLLM crops), each tile
        # image_seq_length context tokens between <img> and </img>
        tile = {"height": INTERNVL_TILE, "width": INTERNVL_TILE}
        image = hf.GotOcr2ImageProcessor(size=tile, crop_to_patches=True, max_patches=INTERNVL_MAX_TILES)
        video = hf.InternVLVideoProcessor(size=tile)
        extra = {"image_seq_length": (INTERNVL_TILE // 14) ** 2 // 4}
    elif spec.kind == "llava_onevision":
        # an image is fitted to the best ONEVISION_GRIDS resolution and cut into tiles, with the whole image resized
        # to one tile first (anyres)
        tile = {"height": ONEVISION_TILE, "width": ONEVISION_TILE}
        image = hf.LlavaOnevisionImageProcessor(size=tile, image_grid_pinpoints=ONEVISION_GRIDS)
        video = hf.LlavaOnevisionVideoProcessor(size=tile)
        extra = {
            "num_image_tokens": (ONEVISION_TILE // 14) ** 2,
            "vision_feature_select_strategy": "full",
            "vision_aspect_ratio": "anyres_max_9",
        }
    elif spec.kind == "mistral3":  # an image keeps its aspect ratio, its longest side at most MISTRAL3_LONGEST_EDGE
        image = hf.PixtralImageProcessor(size={"longest_edge": MISTRAL3_LONGEST_EDGE}, patch_size=14)
        tokens = MEDIA_TOKENS["mistral3"]
        return hf.PixtralProcessor(image, tokenizer, 14, 2, tokenizer.chat_template, **tokens)
    elif spec.kind in GLM_KINDS:
        # GLM's resize counts an image as two frames (its temporal patch) against the budget
        size = {name: 2 * pixels for name, pixels in size.items()}
        image, video = hf.Glm4vImageProcessor(size=size, **patches), hf.Glm4vVideoProcessor(size=size, **patches)
    elif spec.kind in ("qwen3_vl", "qwen3_vl_moe", *HYBRID_KINDS):  # Qwen3.5 ships Qwen3-VL's processor
        image, video = hf.Qwen2VLImageProcessor(size=size, **patches), hf.Qwen3VLVideoProcessor(size=size, **patches)
    else:  # cap_pixels_per_frame: bound a long video's total cost as qwen-vl-utils does
        image = hf.Qwen2VLImageProcessor(size=size, **patches)
        video = hf.Qwen2VLVideoProcessor(size=size, cap_pixels_per_frame=True, **patches)
    return getattr(hf, PROCESSOR_MAPPING_NAMES[spec.kind])(
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        chat_template=tokenizer.chat_template,
        **extra,
    )


def _make_spec(kind: str, seed: int, size: dict[str, Any]) -> TinyModelSpec:
    """TinyModelSpec from keyword options, with an error that lists the valid ones for a misspelt option."""
    options = [field.name for field in dataclasses.fields(TinyModelSpec) if field.name not in ("kind", "seed")]
    unknown = sorted(set(size) - set(options))
    if unknown:
        raise TypeError(f"Unknown tiny model option(s) {', '.join(unknown)}; valid options are: {', '.join(options)}.")
    return TinyModelSpec(kind=kind, seed=seed, **size)


@contextlib.contextmanager
def _progress_bars_disabled():
    """Silence the one-shard "Writing model shards" bar, restoring the caller's setting afterwards."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def build_tiny_model(output_dir: str, kind: ModelKind = "qwen2", seed: int = 0, **size: Any) -> str:
    """Write a complete tiny model directory (weights, configs, tokenizer, processor) and return its path. `size`: any
    TinyModelSpec field. An earlier build's files in it are overwritten."""
    spec = _make_spec(kind, seed, size)
    tokenizer = build_tokenizer(spec.vocab_size, spec.kind)
    model = build_model(spec, tokenizer)
    os.makedirs(output_dir, exist_ok=True)
    with _progress_bars_disabled():
        save_model_folder(model, output_dir)
        tokenizer.save_pretrained(output_dir)
        if spec.is_vl:
            build_processor(spec, tokenizer).save_pretrained(output_dir)
    with open(os.path.join(output_dir, SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump(spec.to_dict(), f, indent=2, sort_keys=True)
    return output_dir


def _read_spec(model_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(model_dir, SPEC_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def get_or_build_tiny_model(kind: ModelKind, cache_root: str, seed: int = 0, **size: Any) -> str:
    """Build a tiny model into `cache_root/<kind>` (other specs: suffixed with a hash of the spec) once and reuse it.
    Builds are renamed into place, so a crash or a concurrent builder never leaves a half-written directory; a
    directory of another builder version is replaced (the hash leaves the version out, so the cache does not grow)."""
    spec = _make_spec(kind, seed, size)
    wanted = spec.to_dict()
    name = kind
    if spec != TinyModelSpec(kind=kind):
        named = {key: value for key, value in wanted.items() if key != "builder_version"}
        name += "-" + hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:12]
    target = os.path.join(cache_root, name)
    if _read_spec(target) == wanted:
        return target
    os.makedirs(cache_root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}-", dir=cache_root)
    try:
        build_tiny_model(staging, kind=kind, seed=seed, **size)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache may be shared
        if _read_spec(target) == wanted:  # a concurrent builder finished first: keep its directory (maybe in use)
            return target
        if os.path.isdir(target):  # stale (other builder version or a leftover): move it away, then swap
            stale = tempfile.mkdtemp(prefix=f".{name}-stale-", dir=cache_root)
            with contextlib.suppress(OSError):  # another process moved or replaced it first
                os.rename(target, os.path.join(stale, "old"))
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(staging, target)
        except OSError:  # another process renamed its finished build into place first
            if _read_spec(target) != wanted:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def count_parameters(model_dir: str) -> dict[str, int]:
    """Parameter counts of a saved tiny model: total and the vision tower's (0 for text models)."""
    towers = ("visual.", "model.visual.", "vision_tower.", "model.vision_tower.", "model.embed_vision.")
    counts = {key: math.prod(shape) for key, shape in safetensors_shapes(model_dir).items()}
    return {"total": sum(counts.values()), "vision": sum(n for key, n in counts.items() if key.startswith(towers))}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (`verl-tiny-model` / `python -m verl.models.tiny_models`)."""
    defaults = TinyModelSpec()
    parser = argparse.ArgumentParser(prog="verl-tiny-model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=MODEL_KINDS, default="qwen2", help="model family (default: qwen2)")
    parser.add_argument("--output", required=True, help="directory to write (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed (default: 0)")
    for name, default in dataclasses.asdict(defaults).items():
        if name not in ("kind", "seed"):
            option = "--" + name.replace("_", "-")
            parser.add_argument(option, type=type(default), default=default, help=f"(default: {default})")
    args = vars(parser.parse_args(argv))
    kind, output, seed = args.pop("kind"), args.pop("output"), args.pop("seed")
    if not output or (os.path.exists(output) and not os.path.isdir(output)):
        parser.error(f"--output {output!r} must be a directory (created if missing).")
    from verl.utils.config import unwritable

    if problem := unwritable(output):  # a file on the way, a folder this user cannot write in
        parser.error(f"--output {output!r}, {problem}.")
    if os.path.isdir(output) and os.listdir(output) and _read_spec(output) is None:  # (a tiny model's is rebuilt)
        parser.error(
            f"--output {output!r} holds files that are not a tiny model's (no {SPEC_FILE}): a build would overwrite "
            "them; choose an empty or new directory."
        )
    start = time.perf_counter()
    try:
        build_tiny_model(output, kind=kind, seed=seed, **args)
    except OSError as error:  # a path the access check passes that cannot be made (root under /proc)
        parser.error(f"--output {output!r} cannot be written ({error.strerror or error}: {error.filename}).")
    except ValueError as error:
        parser.error(str(error))
    counts = count_parameters(output)
    print(
        f"wrote {kind} (seed {seed}, {counts['total']:,} parameters, vision {counts['vision']:,}) to {output} "
        f"in {time.perf_counter() - start:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
