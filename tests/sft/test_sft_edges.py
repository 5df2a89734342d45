# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of SFTDataset and the SFT driver that the main SFT tests leave open (found by a mutation audit of verl/sft
and verl/data/sft_dataset.py)."""

import re

import pytest
from PIL import Image
from sft_testing import VL_PIXELS, data_config, learned_spans

from verl.data.sft_dataset import SFTDataError, SFTDataset
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.rope_index import load_model_config


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("images")
    for name in ("a.png", "b.png"):
        Image.new("RGB", (56, 56), "red").save(folder / name)
    return str(folder)


def _turns(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def _refused(rows, tokenizer, message: str, processor=None, model_config=None, **config) -> None:
    with pytest.raises(SFTDataError, match=re.escape(message)):
        SFTDataset(rows, tokenizer, processor, data_config(**config), model_config)


def test_a_conversation_that_opens_with_the_assistant_is_refused(tokenizer):
    messages = [{"role": "assistant", "content": "Welcome."}, *_turns("Hi", "Hello")]
    _refused([{"messages": messages}], tokenizer, "key 'messages': the conversation starts with an assistant message")


def test_more_images_than_markers_is_refused(tokenizer, models, image_dir):
    """An image no <image> marker places: its pixels would be given without their tokens."""
    row = {"messages": _turns("What is this?", "A square."), "images": ["a.png"]}
    _refused([row], tokenizer, "the messages have 0 <image> marker(s) but the row has 1 image(s)")
    processor = get_processor(models["vl"])
    row = {"messages": _turns("<image>What is this?", "A square."), "images": ["a.png", "b.png"]}
    _refused(
        [row],
        processor.tokenizer,
        "key 'images': the messages have 1 <image> marker(s) but the row has 2 image(s)",
        processor,
        load_model_config(models["vl"]),
        image_dir=image_dir,
    )


def test_an_image_in_the_first_response_message_is_refused(models, image_dir):
    """With prompt and response columns, the response's first message is learned: its image's placeholder tokens
    would be trained on."""
    processor = get_processor(models["vl"])
    row = {"q": "Draw a square.", "a": [{"role": "assistant", "content": "<image>Here."}], "images": ["a.png"]}
    _refused(
        [row],
        processor.tokenizer,
        "key 'a': message 0 is a learned assistant turn with an image",
        processor,
        load_model_config(models["vl"]),
        prompt_key="q",
        response_key="a",
        image_dir=image_dir,
    )


def _vl(models, image_dir, rows, **config):
    processor = get_processor(models["vl"], **VL_PIXELS)
    settings = data_config(image_dir=image_dir, truncation="right", **VL_PIXELS, **config)
    return SFTDataset(rows, processor.tokenizer, processor, settings, load_model_config(models["vl"])), processor


def test_truncation_right_may_cut_right_after_the_last_images_turn_but_not_inside_an_earlier_one(models, image_dir):
    """The cut must fall after the turn that shows the conversation's last image (not its first): a cut exactly at
    that turn's end keeps every image with its tokens."""
    messages = [*_turns("<image>What is this?", "word " * 30), *_turns("<image>And this?", "A red square")]
    row = {"messages": messages, "images": ["a.png", "b.png"]}
    full, processor = _vl(models, image_dir, [row])
    ids = full.encode(0)["input_ids"]
    image = [position for position, token in enumerate(ids) if token == processor.image_token_id]
    second = image[len(image) // 2 :]
    assert len(second) == len(image) // 2 and second[0] > image[len(image) // 2 - 1] + 30  # two images, the answer
    with pytest.raises(SFTDataError, match=r"key 'images': data.truncation=right at data.max_length=.* would cut"):
        _vl(models, image_dir, [row], max_length=second[1])  # inside the second image
    last_turn = max(
        position
        for position, token in enumerate(ids)
        if token == processor.tokenizer.convert_tokens_to_ids("<|im_start|>")
    )
    kept, _ = _vl(models, image_dir, [row], max_length=last_turn)  # the last answer's turn cut whole
    assert kept.encode(0)["input_ids"] == ids[:last_turn]


def test_a_template_that_fails_on_one_row_with_a_type_error_is_named_by_that_row(models):
    """A template's TypeError (here: text + number) on one row's messages is that row's error, like a TemplateError."""
    fussy = get_tokenizer(models["text"])
    fussy.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['content'] == 'boom' %}{{ m['content'] + 1 }}{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    rows = [{"messages": _turns("Hi", "Hello")}, {"messages": _turns("boom", "Hello")}]
    _refused(rows, fussy, "row 1, key 'messages': the chat template cannot render the conversation")


def test_an_open_last_turn_followed_by_white_space_still_learns_to_stop(models):
    """A template that leaves the assistant's turn open and writes a newline after each message: the last answer
    learns the end-of-sequence token appended in place of the trailing white space."""
    open_turns = get_tokenizer(models["text"])
    open_turns.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    example = SFTDataset([{"messages": _turns("Hi", "Hello there")}], open_turns, None, data_config()).encode(0)
    assert example["input_ids"][-1] == open_turns.eos_token_id and example["loss_mask"][-1] == 1
    assert learned_spans(open_turns, example) == [f"Hello there{open_turns.eos_token}"]


def test_an_examples_positions_count_from_zero_as_the_rl_actors_do(tokenizer):
    example = SFTDataset([{"messages": _turns("Hi", "Hello")}], tokenizer, None, data_config(max_length=64))[0]
    length = int(example["attention_mask"].sum())
    assert example["position_ids"][:length].tolist() == list(range(length))
    assert example["input_ids"][length:].eq(tokenizer.pad_token_id).all()  # right-padded to data.max_length


def test_the_tokenizers_end_of_sequence_stops_a_turn_beside_the_generation_configs_stop_tokens(tokenizer):
    """stop_ids (the generation config's) add to the tokenizer's EOS: a turn that ends with the EOS is closed, and
    gets no second one appended."""
    messages = _turns("Hi", "Hello")
    other = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert other != tokenizer.eos_token_id
    example = SFTDataset([{"messages": messages}], tokenizer, None, data_config(), None, {other}).encode(0)
    assert (
        example["input_ids"] == tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    )
    assert learned_spans(tokenizer, example) == [f"Hello{tokenizer.eos_token}"]


QWEN3_THINKING_DROPPED = (  # as tests/sft/test_sft_data_checks.py's: an earlier assistant turn loses its thinking
    "{% set query = namespace(last=-1) %}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{% set query.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and loop.index0 < query.last %}"
    "{{ m['content'].split('</think>')[-1].lstrip('\n') }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_an_earlier_turn_the_template_renders_as_white_space_is_refused(models):
    """Thinking followed by a space: the dropped thinking leaves the turn a blank, an answer of nothing."""
    qwen3 = get_tokenizer(models["text"])
    qwen3.chat_template = QWEN3_THINKING_DROPPED
    messages = [*_turns("a", "<think>\nlong reasoning\n</think>\n\n "), *_turns("b", "ok")]
    _refused(
        [{"messages": messages}], qwen3, "key 'messages': the conversation's assistant turn 0 (from 0) renders empty"
    )


def test_an_empty_conversation_and_a_history_turn_of_three_are_refused(tokenizer):
    _refused([{"messages": []}], tokenizer, "row 0, key 'messages': expected a non-empty list of messages")
    alpaca = {"instruction": "And goodbye?", "output": "Au revoir", "history": [["Hello?", "Bonjour", "extra"]]}
    _refused(
        [alpaca],
        tokenizer,
        "row 0, key 'history': each of history's turns must be [query, answer]",
        prompt_key="instruction",
        response_key="output",
    )


def test_an_error_names_the_message_as_the_row_numbers_it_beside_its_system_column(tokenizer):
    """The `system` column's message goes first: an error still counts the row's own messages."""
    row = {"messages": _turns("2 + 2?", "\nThe answer is 4"), "system": "Be brief."}  # "\n" + "\n" merge
    _refused([row], tokenizer, "row 0, key 'messages': message 1 tokenizes differently alone than inside")


def test_trls_vision_rows_whose_image_parts_carry_an_index_are_read(models, image_dir):
    """HuggingFaceH4/llava-instruct-mix-vsft's layout (TRL's vision SFT data, as `datasets` reads it): every part has
    `index`, `text` and `type`, an image part `{"index": 0, "text": None, "type": "image"}`, which is a placeholder for
    the images column, not a part holding its picture (refused as one before)."""
    image = Image.open(f"{image_dir}/a.png")
    user = [{"index": 0, "text": None, "type": "image"}, {"index": None, "text": "Who drew this?", "type": "text"}]
    answer = [{"index": None, "text": "A child.", "type": "text"}]
    row = {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
        "images": [image],
    }
    dataset, processor = _vl(models, image_dir, [row])
    example = dataset.encode(0)
    assert len(example["images"]) == 1 and processor.image_token_id in example["input_ids"]
    assert learned_spans(processor.tokenizer, example) == ["A child.<|im_end|>"]
