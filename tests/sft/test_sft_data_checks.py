# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What SFTDataset checks when it is built (before Ray starts, in `verl.sft.main.build_datasets`) rather than when a
conversation's batch comes up: the length in tokens (image tokens included), unreadable images, empty assistant
turns, and roles that are not one of the four."""

import json

import datasets
import numpy as np
import pytest
from PIL import Image
from sft_testing import VL_PIXELS, data_config, learned_spans

from verl.data.sft_dataset import SFTDataError, SFTDataset
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.rope_index import load_model_config
from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def _turns(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


def _write_jsonl(path, rows: list[dict]) -> str:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def test_an_overlong_conversation_is_found_when_the_dataset_is_built(tmp_path, tokenizer):
    rows = [_turns("Hi", "Hello"), _turns("Hi", "Hello"), _turns("Tell me a story.", "word " * 80)]
    path = _write_jsonl(tmp_path / "chats.jsonl", rows)
    length = len(SFTDataset(path, tokenizer, None, data_config(max_length=512)).encode(2)["input_ids"])
    assert length > 64
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset(path, tokenizer, None, data_config(max_length=64))  # no encode(): the constructor finds it
    assert str(excinfo.value) == (
        f"file '{path}', row 2, key 'messages': the conversation has {length} tokens, more than data.max_length=64; "
        "raise it, or set data.truncation=right."
    )
    # one-turn rows name their prompt column
    one_turn = [{"q": "Hi", "a": "word " * 80}]
    with pytest.raises(SFTDataError, match=r"in-memory rows, row 0, key 'q': the conversation has \d+ tokens"):
        SFTDataset(one_turn, tokenizer, None, data_config(prompt_key="q", response_key="a", max_length=64))


def test_forked_checks_of_a_large_set_find_the_rows_one_process_finds(tmp_path, tokenizer, monkeypatch):
    """The check renders, tokenizes and masks every conversation at start (~1 ms a row in one process): a large set
    is split over one forked process per usable core, as the RL prompt scan is; both name the same bad rows, in row
    order, and stop after REPORTED_ERRORS of them."""
    from verl.data import row_scan, sft_dataset

    rows = [_turns(f"What is {i} + {i}?", f"It is {2 * i}.") for i in range(300)]
    for bad in (7, 150, 299):
        rows[bad] = _turns("Tell me a story.", "word " * 80)
    path = _write_jsonl(tmp_path / "chats.jsonl", rows)
    monkeypatch.setattr(row_scan, "SCAN_CHUNK_ROWS", 16)  # several chunks a worker
    messages = []
    for workers in (1, 2):
        monkeypatch.setattr(sft_dataset, "scan_workers", lambda configured, count, workers=workers: workers)
        assert len(SFTDataset(path, tokenizer, None, data_config(max_length=512))) == 300
        with pytest.raises(SFTDataError) as excinfo:
            SFTDataset(path, tokenizer, None, data_config(max_length=64))
        messages.append(str(excinfo.value))
        with monkeypatch.context() as patch, pytest.raises(SFTDataError) as excinfo:
            patch.setattr(sft_dataset, "REPORTED_ERRORS", 2)
            SFTDataset(path, tokenizer, None, data_config(max_length=64))
        assert "at least 2 rows" in str(excinfo.value) and "row 299" not in str(excinfo.value)
    assert messages[0] == messages[1]
    assert messages[0].startswith("3 rows of the data cannot be trained on")
    assert [f"row {bad}," in messages[0] for bad in (7, 150, 299)] == [True] * 3


def test_truncation_right_keeps_long_rows_but_refuses_one_with_nothing_left_to_learn(tmp_path, tokenizer):
    long_answer = _turns("Hi", "word " * 80)
    long_question = _turns("word " * 80, "Yes.")
    cut = SFTDataset([long_answer], tokenizer, None, data_config(max_length=32, truncation="right"))
    assert sum(cut.encode(0)["loss_mask"]) > 0
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset([long_answer, long_question], tokenizer, None, data_config(max_length=32, truncation="right"))
    message = str(excinfo.value)
    assert message.startswith("in-memory rows, row 1, key 'messages': the conversation has ")
    assert "its first assistant turn starts at token" in message and "would leave nothing to learn from" in message


def test_image_tokens_count_towards_the_length_and_unreadable_images_are_named(tmp_path, models):
    path = models["vl"]
    processor = get_processor(path, **VL_PIXELS)
    model_config = load_model_config(path)
    pixels = np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "big.png")
    row = {**_turns("<image>What is this?", "Noise."), "images": ["big.png"]}
    config = dict(image_dir=str(tmp_path), **VL_PIXELS)
    dataset = SFTDataset([row], processor.tokenizer, processor, data_config(**config), model_config)
    length = len(dataset.encode(0)["input_ids"])
    text_only = len(processor.tokenizer.encode(dataset._render(row["messages"], False), add_special_tokens=False))
    assert length - text_only == 63  # 224 x 224 pixels: 64 image tokens in place of one placeholder
    with pytest.raises(SFTDataError, match=rf"row 0, key 'messages': the conversation has {length} tokens"):
        SFTDataset([row], processor.tokenizer, processor, data_config(max_length=length - 1, **config), model_config)
    assert len(SFTDataset([row], processor.tokenizer, processor, data_config(max_length=length, **config))) == 1
    data = (tmp_path / "big.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    rows = [row, {**row, "images": ["cut.png"]}, {**row, "images": ["gone.png"]}]
    with pytest.raises(SFTDataError, match=r"row 1, key 'images': image 0 cannot be read: 'cut.png': .*truncated"):
        SFTDataset(rows[:2], processor.tokenizer, processor, data_config(**config), model_config)
    with pytest.raises(
        SFTDataError, match=r"row 1, key 'images': image 0 cannot be read: image file '.*gone.png' does not exist"
    ):
        SFTDataset(rows[::2], processor.tokenizer, processor, data_config(**config), model_config)


def test_image_paths_stay_inside_image_dir_unless_allowed(tmp_path, models):
    """SFT read any path a row named (absolute, '..', a symlink out); RL refused them. Now both do, unless allowed."""
    path = models["vl"]
    processor = get_processor(path, **VL_PIXELS)
    model_config = load_model_config(path)
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (56, 56)).save(images / "ok.png")
    Image.new("RGB", (56, 56)).save(tmp_path / "private.png")
    (images / "link.png").symlink_to(tmp_path / "private.png")
    config = dict(image_dir=str(images), **VL_PIXELS)
    good = {**_turns("<image>What is this?", "Black."), "images": ["ok.png"]}
    assert len(SFTDataset([good], processor.tokenizer, processor, data_config(**config), model_config)) == 1
    for escaping in ("../private.png", str(tmp_path / "private.png"), "link.png"):
        rows = [good, {**good, "images": [escaping]}]
        with pytest.raises(SFTDataError, match=r"row 1, key 'images': image 0 path .* leads outside data.image_dir"):
            SFTDataset(rows, processor.tokenizer, processor, data_config(**config), model_config)
        allowed = data_config(allow_paths_outside_image_dir=True, **config)
        assert len(SFTDataset(rows, processor.tokenizer, processor, allowed, model_config)) == 2


@pytest.mark.parametrize("content", ["", "  \n"])
def test_an_empty_assistant_turn_is_refused(tokenizer, content):
    rows = [
        _turns("Hi", "Hello"),
        {"messages": _turns("Hi", "Hello")["messages"] + _turns("More?", content)["messages"]},
    ]
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset(rows, tokenizer, None, data_config())
    assert str(excinfo.value).startswith(
        "in-memory rows, row 1, key 'messages': message 3 (assistant) is empty: it would train the model to answer "
        "with nothing"
    )
    with pytest.raises(
        SFTDataError, match="row 0, key 'a': the response is empty: it would train the model to answer with nothing"
    ):
        SFTDataset([{"q": "Hi", "a": content}], tokenizer, None, data_config(prompt_key="q", response_key="a"))


def test_a_role_typo_shows_the_bad_value(tokenizer):
    rows = [_turns("Hi", "Hello")] * 12 + [
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "assitant", "content": "Anything else?"},
            ]
        }
    ]
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset(rows, tokenizer, None, data_config())
    assert str(excinfo.value) == (
        "in-memory rows, row 12, key 'messages': message 3 needs a role in system, user, assistant, tool; its role "
        "is 'assitant'."
    )
    no_role = {"messages": [{"content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    with pytest.raises(SFTDataError, match="row 0, key 'messages': message 0 needs a role in .*; it has no 'role'"):
        SFTDataset([no_role], tokenizer, None, data_config())
    # ShareGPT's layout (LLaMA-Factory's data) is read as role/content messages
    sharegpt = {"messages": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"}]}
    sharegpt["messages"].append({"from": "gpt", "value": "Hello"})
    plain = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    plain["messages"].append({"role": "assistant", "content": "Hello"})
    converted = SFTDataset([sharegpt], tokenizer, None, data_config()).encode(0)
    expected = SFTDataset([plain], tokenizer, None, data_config()).encode(0)
    assert (converted["input_ids"], converted["loss_mask"]) == (expected["input_ids"], expected["loss_mask"])
    # LLaMA-Factory's tool turns: a function_call's JSON becomes tool_calls (the template writes its call format), an
    # observation a tool message; its tools column is JSON text
    schema = {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}}
    factory = {"messages": sharegpt["messages"][1:2], "tools": json.dumps([schema])}
    factory["messages"] += [
        {"from": "function_call", "value": json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}})},
        {"from": "observation", "value": "5"},
        {"from": "gpt", "value": "It is 5."},
    ]
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    openai = {"messages": [plain["messages"][1], {"role": "assistant", "content": "", "tool_calls": [call]}]}
    openai["messages"] += [{"role": "tool", "content": "5"}, {"role": "assistant", "content": "It is 5."}]
    config = data_config(max_length=512)
    converted = SFTDataset([factory], tokenizer, None, config).encode(0)
    expected = SFTDataset([{**openai, "tools": [schema]}], tokenizer, None, config).encode(0)
    assert (converted["input_ids"], converted["loss_mask"]) == (expected["input_ids"], expected["loss_mask"])
    assert learned_spans(tokenizer, converted)[0].startswith('<tool_call>\n{"name": "add", "arguments": {"a": 2')
    bad_call = {"messages": [*factory["messages"][:1], {"from": "function_call", "value": "add(2, 3)"}]}
    with pytest.raises(SFTDataError, match=r"message 1 \(ShareGPT's 'function_call'\): the call is not JSON"):
        SFTDataset([bad_call], tokenizer, None, data_config())
    sharegpt_roles = {"messages": [{"role": "user", "content": "Hi"}, {"role": "gpt", "content": "Hello"}]}
    with pytest.raises(
        SFTDataError, match=r"message 1 needs .*; its role is 'gpt' \(ShareGPT's name: write 'gpt' as 'assistant'\)"
    ):
        SFTDataset([sharegpt_roles], tokenizer, None, data_config())
    not_a_dict = {"messages": ["Hi", {"role": "assistant", "content": "Hello"}]}
    with pytest.raises(SFTDataError, match="message 0 must be a dict with 'role' and 'content', got str"):
        SFTDataset([not_a_dict], tokenizer, None, data_config())


def test_a_sharegpt_rows_system_column_is_its_system_prompt(tokenizer):
    """LLaMA-Factory's ShareGPT rows carry the system prompt in a `system` column; it was dropped (only alpaca rows
    read it), so the model learned the answers without the prompt they were written for. A system message that
    opens the conversation wins over the column, as in LLaMA-Factory."""

    def encoded(row):
        return SFTDataset([row], tokenizer, None, data_config(messages_key="conversations")).encode(0)

    turns = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]
    pirate = {"from": "system", "value": "You are a pirate."}
    with_column = encoded({"conversations": turns, "system": "You are a pirate."})
    assert with_column == encoded({"conversations": [pirate, *turns]})
    assert "You are a pirate." in tokenizer.decode(with_column["input_ids"])
    assert learned_spans(tokenizer, with_column) == ["Hello.<|im_end|>"]
    knight = {"from": "system", "value": "You are a knight."}
    assert encoded({"conversations": [knight, *turns], "system": "You are a pirate."}) == encoded(
        {"conversations": [knight, *turns]}
    )
    assert encoded({"conversations": turns, "system": ""}) == encoded({"conversations": turns})  # Arrow: "" or null


def test_a_tokenizer_without_chat_template_is_named_with_the_key_that_gives_one(tokenizer):
    """A base model to fine-tune has no chat template: the dataset says so, naming data.override_chat_template."""
    import copy

    base = copy.deepcopy(tokenizer)
    base.chat_template = None
    with pytest.raises(SFTDataError, match=r"has no chat template \(a base model\?\).*data.override_chat_template"):
        SFTDataset([_turns("Hi", "Hello")], base, None, data_config())
    base.chat_template = tokenizer.chat_template  # what get_tokenizer sets from data.override_chat_template
    assert len(SFTDataset([_turns("Hi", "Hello")], base, None, data_config())) == 1


def test_chat_template_kwargs_render_every_conversation_and_an_unread_one_is_named(tokenizer):
    """data.chat_template_kwargs are variables of every rendering (the whole conversation and the prefixes the
    assistant mask comes from); one the template does not read is refused when the dataset is built."""
    import copy

    styled = copy.deepcopy(tokenizer)
    styled.chat_template = (  # as get_tokenizer sets it from data.override_chat_template
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'user' %}{{ asked_by }}: "
        "{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"
    )
    dataset = SFTDataset([_turns("Hi", "Hello")], styled, None, data_config(chat_template_kwargs={"asked_by": "Ann"}))
    example = dataset.encode(0)
    assert styled.decode(example["input_ids"]).startswith("<|im_start|>user\nAnn: Hi<|im_end|>")
    learned = [token for token, kept in zip(example["input_ids"], example["loss_mask"]) if kept]
    assert styled.decode(learned) == "Hello<|im_end|>"
    with pytest.raises(
        SFTDataError, match=r"data.chat_template_kwargs.enable_thinking: the chat template .* does not"
    ):
        SFTDataset([_turns("Hi", "Hello")], tokenizer, None, data_config(chat_template_kwargs={"enable_thinking": 0}))


def test_qwen3s_multi_turn_conversations_learn_each_turn_as_the_whole_renders_it(tmp_path):
    """Qwen3's template drops the thinking block of every assistant turn but the last, and its non-thinking
    generation prompt opens one, so a turn rendered alone is not a prefix of the whole: each earlier turn is learned
    as the whole conversation renders it (from after its opening through its closing), the last as before."""
    from verl.models.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    row = {
        "messages": [
            {"role": "user", "content": "Add 1 and 2."},
            {"role": "assistant", "content": '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'},
            {"role": "tool", "content": "3"},
            {"role": "assistant", "content": "It is 3."},
            {"role": "user", "content": "And 3 and 4?"},
            {"role": "assistant", "content": "7."},
        ]
    }

    def learned(template_kwargs: dict) -> list[str]:
        config = data_config(chat_template_kwargs=template_kwargs)
        return learned_spans(tokenizer, SFTDataset([row], tokenizer, None, config).encode(0))

    call = row["messages"][1]["content"]
    assert learned({}) == [f"{call}<|im_end|>", "It is 3.<|im_end|>", "<think>\n\n</think>\n\n7.<|im_end|>"]
    assert learned({"enable_thinking": False}) == [f"{call}<|im_end|>", "It is 3.<|im_end|>", "7.<|im_end|>"]


def test_truncation_right_finds_the_first_turn_where_the_whole_conversation_renders_it(tmp_path):
    """Qwen3 without thinking: the generation prompt opens an empty thinking block that an earlier turn does not have
    in the whole conversation, and the start-up check placed the first assistant turn 8 tokens late: a row that still
    had tokens to learn under truncation=right was refused ("would leave nothing to learn from")."""
    from verl.models.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    row = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello there friend"},
            {"role": "user", "content": " ".join(f"w{i}" for i in range(40))},
            {"role": "assistant", "content": "ok"},
        ]
    }
    config = {"truncation": "right", "chat_template_kwargs": {"enable_thinking": False}}
    whole = SFTDataset([row], tokenizer, None, data_config(max_length=4096, **config)).encode(0)
    start = whole["loss_mask"].index(1)
    cut = SFTDataset([row], tokenizer, None, data_config(max_length=start + 3, **config)).encode(0)
    assert cut["loss_mask"] == [0] * start + [1] * 3
    assert learned_spans(tokenizer, cut)[0] == tokenizer.decode(whole["input_ids"][start : start + 3])
    with pytest.raises(SFTDataError, match=f"its first assistant turn starts at token {start}, so"):
        SFTDataset([row], tokenizer, None, data_config(max_length=start, **config))


QWEN3_THINKING_DROPPED = (  # Qwen3's template, small: an assistant turn before the last user query loses its thinking
    "{% set query = namespace(last=-1) %}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{% set query.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and loop.index0 < query.last %}{{ m['content'].split('</think>')[-1].lstrip('\n') }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_an_earlier_turn_that_holds_only_thinking_is_refused_where_qwen3_drops_it(tokenizer):
    """The empty-turn check read the raw content, which a thinking block fills; Qwen3's template drops the thinking of
    every turn but the last, so such a turn was learned as an empty answer (`<|im_end|>` alone)."""
    import copy

    qwen3 = copy.deepcopy(tokenizer)
    qwen3.chat_template = QWEN3_THINKING_DROPPED
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nlong reasoning\n</think>\n\n"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "<think>\nshort\n</think>\n\nok"},
    ]
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset([_turns("Hi", "Hello"), {"messages": messages}], qwen3, None, data_config())
    assert str(excinfo.value) == (
        "in-memory rows, row 1, key 'messages': the conversation's assistant turn 0 (from 0) renders empty: the "
        "template drops what it holds (Qwen3 drops the thinking of every turn but the last), so it would train the "
        "model to answer with nothing; write the answer or drop the turn."
    )
    messages[1]["content"] += "A"  # an answer after the thinking: learned as the whole conversation renders it
    example = SFTDataset([{"messages": messages}], qwen3, None, data_config()).encode(0)
    assert learned_spans(qwen3, example) == ["A<|im_end|>", "<think>\nshort\n</think>\n\nok<|im_end|>"]
    last = [*messages[:3], {"role": "assistant", "content": "<think>\nonly thinking\n</think>\n\n"}]
    assert len(SFTDataset([{"messages": last}], qwen3, None, data_config())) == 1  # the last turn keeps its thinking


def test_the_last_turns_reasoning_content_is_refused_where_the_template_drops_it(tokenizer):
    """TRL's and Qwen3's `reasoning_content` beside an answer: a template that reads none (Qwen2.5's) drops it, so the
    model was trained on the answer alone without a word; one that writes it learns it with the answer."""
    import copy

    messages = [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two twos"},
    ]
    with pytest.raises(SFTDataError, match=r"row 0, key 'messages': message 1 has reasoning_content, which the chat"):
        SFTDataset([{"messages": messages}], tokenizer, None, data_config())
    thinking = copy.deepcopy(tokenizer)
    thinking.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['reasoning_content'] is defined and loop.last %}"
        "<think>\n{{ m['reasoning_content'] }}\n</think>\n\n{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    example = SFTDataset([{"messages": messages}], thinking, None, data_config()).encode(0)
    assert learned_spans(thinking, example) == ["<think>\nTwo twos\n</think>\n\n4<|im_end|>"]


QWEN35_LIKE = (  # Qwen3.5's template, small: an empty thinking block in each assistant turn after the last user
    # query, calls as XML, tool results as a user turn, a non-thinking generation prompt that opens and closes one
    "{% set query = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set query.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{% if loop.index0 > query.last %}<think>\n\n</think>\n\n"
    "{% endif %}{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>\n<function={{ c.function.name }}>\n"
    "{% for k, v in c.function.arguments | items %}<parameter={{ k }}>\n{{ v }}\n</parameter>\n{% endfor %}"
    "</function>\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}"
)


def test_tool_calls_in_openai_form_are_learned_as_the_template_writes_them():
    """An assistant message with `tool_calls` (arguments as a JSON string, content None: OpenAI's form) is a turn to
    learn, rendered in the template's own call format (Qwen3.5's XML here); Qwen3.5 writes an empty thinking block in
    every turn after the last user query, so earlier turns are found in the whole conversation. A call without a
    name, or tool_calls on a user message, is named."""
    from verl.models.tiny_models import build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    tokenizer.chat_template = QWEN35_LIKE
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    row = {
        "messages": [
            {"role": "user", "content": "Add 1 and 2."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "3"},
            {"role": "assistant", "content": "It is 3."},
            {"role": "user", "content": "And 3 and 4?"},
            {"role": "assistant", "content": "7."},
        ]
    }
    spans = learned_spans(tokenizer, SFTDataset([row], tokenizer, None, data_config()).encode(0))
    xml = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n"
    assert spans == [f"{xml}</tool_call><|im_end|>", "It is 3.<|im_end|>", "7.<|im_end|>"]
    nameless = {**row, "messages": [row["messages"][0], {"role": "assistant", "tool_calls": [{"function": {}}]}]}
    with pytest.raises(
        SFTDataError, match="row 0, key 'messages': message 1: each of tool_calls needs a function name"
    ):
        SFTDataset([nameless], tokenizer, None, data_config())
    on_user = {"messages": [{"role": "user", "content": "x", "tool_calls": [call]}, row["messages"][3]]}
    with pytest.raises(SFTDataError, match="message 0: tool_calls must be a list, on an assistant message"):
        SFTDataset([on_user], tokenizer, None, data_config())


def test_a_turn_the_template_leaves_open_learns_the_token_that_stops_generation():
    """GLM's template closes no assistant turn: generation stops at the next turn's `<|user|>` (a stop token of its
    generation config) or at EOS. Each turn learns the token that ends it there, so a model fine-tuned here stops;
    turns the template closes with a stop token (Qwen's `<|im_end|>`) are learned as written."""
    from verl.models.tiny_models import build_tokenizer

    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    row["messages"] += [{"role": "user", "content": "Again?"}, {"role": "assistant", "content": "Bye."}]
    glm = build_tokenizer(kind="glm4v")
    stops = {glm.convert_tokens_to_ids(token) for token in ("<|endoftext|>", "<|user|>", "<|observation|>")}
    for stop_ids, learned in ((stops, "Hello.<|user|>Bye.<|endoftext|>"), (None, "Hello.Bye.<|endoftext|>")):
        example = SFTDataset([row], glm, None, data_config(), None, stop_ids).encode(0)
        ids, mask = example["input_ids"], example["loss_mask"]
        assert glm.decode([token for token, bit in zip(ids, mask) if bit]) == learned
        assert glm.decode(ids).endswith("<|assistant|>\nBye.<|endoftext|>")  # the EOS appended to the last turn
    qwen = build_tokenizer(kind="qwen2")
    example = SFTDataset([row], qwen, None, data_config(), None, {qwen.eos_token_id}).encode(0)
    ids, mask = example["input_ids"], example["loss_mask"]
    assert qwen.decode([token for token, bit in zip(ids, mask) if bit]) == "Hello.<|im_end|>Bye.<|im_end|>"
    assert qwen.decode(ids) == qwen.apply_chat_template(row["messages"], tokenize=False)  # nothing appended


def test_videos_are_refused_not_learned_as_a_marker(models, tokenizer):
    """Fine-tuning reads images only: a row with videos, or a video part or marker for a vision-language model, is
    refused naming the row (it trained on the bare `<video>` text before); a text model's `<video>` is plain text."""
    processor = get_processor(models["vl"], **VL_PIXELS)
    video_part = {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}
    rows = [
        ({**_turns("<video>What happens?", "A ball rolls."), "videos": ["clip.mp4"]}, "key 'videos'"),
        ({"messages": [video_part, {"role": "assistant", "content": "A ball rolls."}]}, "key 'messages'"),
        (_turns("<video>What happens?", "A ball rolls."), "key 'messages'"),
    ]
    for row, key in rows:
        with pytest.raises(SFTDataError, match=f"row 0, {key}: videos are not supported in fine-tuning, only images"):
            SFTDataset([row], processor.tokenizer, processor, data_config(**VL_PIXELS))
    text = SFTDataset([_turns("<video>What happens?", "A ball rolls.")], tokenizer, None, data_config()).encode(0)
    assert "<video>What happens?" in tokenizer.decode(text["input_ids"])
    # a video part holding its video was told to go to "the video column (data.video_key)", which fine-tuning has not
    for part in ({"type": "video", "video": "clip.mp4"}, {"type": "video_url", "video_url": {"url": "clip.mp4"}}):
        row = {"messages": [{"role": "user", "content": [part]}, {"role": "assistant", "content": "A ball rolls."}]}
        with pytest.raises(SFTDataError, match="row 0, key 'messages': message 0: videos are not supported in fine-t"):
            SFTDataset([row], processor.tokenizer, processor, data_config(**VL_PIXELS))


def test_an_empty_tool_calls_list_is_no_call(tmp_path, tokenizer):
    """A Parquet export where every message has `tool_calls` holds an empty list on the plain ones: it was read as a
    call, refused on a user message ("tool_calls must be a list, on an assistant message") and under a template that
    writes no calls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = _turns("Hi", "Hello.")
    empty = {"messages": [{**message, "tool_calls": []} for message in plain["messages"]]}
    pq.write_table(pa.Table.from_pylist([empty]), tmp_path / "empty_calls.parquet")
    llama = get_tokenizer(get_or_build_tiny_model("llama", str(tmp_path / "llama")))  # writes no tool_calls
    for chat in (tokenizer, llama):
        expected = SFTDataset([plain], chat, None, data_config()).encode(0)
        assert SFTDataset([empty], chat, None, data_config()).encode(0) == expected
        assert SFTDataset(str(tmp_path / "empty_calls.parquet"), chat, None, data_config()).encode(0) == expected


def test_tools_are_refused_where_the_chat_template_would_drop_them(tokenizer):
    """A row's tool schemas go into the text through the template's `tools`; GLM's tiny template does not read it,
    so they would vanish from what the model learns: the row is refused, naming the column."""
    from verl.models.tiny_models import build_tokenizer

    schema = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    row = {**_turns("Add 2 and 3.", "5"), "tools": [schema]}
    with pytest.raises(SFTDataError, match="row 0, key 'tools': the chat template does not read `tools`"):
        SFTDataset([row], build_tokenizer(kind="glm4v"), None, data_config())
    example = SFTDataset([row], tokenizer, None, data_config()).encode(0)
    assert '"name": "add"' in tokenizer.decode(example["input_ids"])  # Qwen's template renders them


def test_tool_conversations_from_parquet_train_as_in_memory_and_calls_a_template_drops_are_refused(tmp_path, models):
    """Arrow gives every row's tool schemas and call arguments the fields only other rows have, as nulls (a model
    would learn `"a": null` in a weather call); the Parquet rows encode as the rows in memory. A vision-language
    model's conversation keeps its calls too, and a template that does not write `tool_calls` is refused, where it
    would learn an empty turn."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def row(name: str, arguments: dict, result: str, answer: str) -> dict:
        properties = {param: {"type": "integer"} for param in arguments}
        schema = {"type": "function", "function": {"name": name, "parameters": {"properties": properties}}}
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        messages = [
            {"role": "user", "content": f"Use {name}."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": answer},
        ]
        return {"messages": messages, "tools": [schema]}

    rows = [row("get_weather", {"day": 1}, "sunny", "Sunny."), row("add", {"a": 2, "b": 3}, "5", "5")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "tools.parquet")
    tokenizer = get_tokenizer(models["text"])
    config = data_config(max_length=512)
    in_memory = SFTDataset(rows, tokenizer, None, config)
    from_parquet = SFTDataset(str(tmp_path / "tools.parquet"), tokenizer, None, config)
    for index in range(2):
        assert from_parquet.encode(index) == in_memory.encode(index)
    assert "null" not in tokenizer.decode(from_parquet.encode(0)["input_ids"])
    assert learned_spans(tokenizer, in_memory.encode(1)) == [
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>',
        "5<|im_end|>",
    ]
    processor = get_processor(models["vl"], **VL_PIXELS)
    vl = SFTDataset(rows, processor.tokenizer, processor, data_config(max_length=512, **VL_PIXELS)).encode(1)
    assert learned_spans(processor.tokenizer, vl)[0].startswith('<tool_call>\n{"name": "add"')
    llama = get_tokenizer(get_or_build_tiny_model("llama", str(tmp_path / "llama")))
    with pytest.raises(SFTDataError, match="row 0, key 'messages': message 1 has tool_calls, which the chat template"):
        SFTDataset([{"messages": rows[0]["messages"]}], llama, None, config)
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{% for message in messages %}",
        "{% for message in messages %}{% if message.role == 'tool' and message.tool_call_id is not defined %}"
        "{{ raise_exception('a tool result needs its tool_call_id') }}{% endif %}",
    )  # as Mistral's template
    with pytest.raises(
        SFTDataError, match="row 1, key 'messages': the chat template cannot render the conversation: a"
    ):
        SFTDataset([_turns("Hi", "Hello"), rows[1]], tokenizer, None, config)


def test_alpaca_rows_read_as_llama_factory_reads_them(tokenizer):
    """data.prompt_key=instruction, response_key=output: LLaMA-Factory's alpaca layout, whose `input` (appended to the
    instruction on a new line), `system` and `history` ([[query, answer], ...]) were dropped without a word before.
    As there, the history's answers are learned too."""
    alpaca = data_config(prompt_key="instruction", response_key="output")
    rows = [
        {"instruction": "Translate to French.", "input": "Hello", "output": "Bonjour", "system": "", "history": []},
        {
            "instruction": "And goodbye?",
            "input": "",
            "output": "Au revoir",
            "system": "You translate.",
            "history": [["Translate to French.\nHello", "Bonjour"]],
        },
    ]
    first = [{"role": "user", "content": "Translate to French.\nHello"}, {"role": "assistant", "content": "Bonjour"}]
    conversations = [
        {"messages": first},
        {
            "messages": [
                {"role": "system", "content": "You translate."},
                *first,
                {"role": "user", "content": "And goodbye?"},
                {"role": "assistant", "content": "Au revoir"},
            ]
        },
    ]
    read, expected = (
        SFTDataset(rows, tokenizer, None, alpaca),
        SFTDataset(conversations, tokenizer, None, data_config()),
    )
    for index in range(2):
        assert read.encode(index) == expected.encode(index)
    assert learned_spans(tokenizer, read.encode(1)) == ["Bonjour<|im_end|>", "Au revoir<|im_end|>"]
    with pytest.raises(
        SFTDataError, match="row 0, key 'history': each of history's turns must be \\[query, answer\\]"
    ):
        SFTDataset([{**rows[1], "history": ["Hi"]}], tokenizer, None, alpaca)


def test_a_model_trained_on_text_only_refuses_an_image_row(tmp_path):
    """Gemma 3 4B-27B (gemma3): its processor would expand the image, but the trainer does not reproduce its image
    tokens' two-way attention, so an SFT row with an image is refused, naming it."""
    path = get_or_build_tiny_model("gemma3", str(tmp_path / "models"))
    processor = get_processor(path)
    Image.new("RGB", (56, 56)).save(tmp_path / "a.png")
    row = {**_turns("<image>How many?", "One."), "images": ["a.png"]}
    with pytest.raises(SFTDataError, match=r"row 0, key 'images': the model \('gemma3'\) is trained on text only"):
        SFTDataset(
            [row], processor.tokenizer, processor, data_config(image_dir=str(tmp_path)), load_model_config(path)
        )


def test_a_missing_conversation_column_is_named_with_the_columns_there_are(tmp_path, tokenizer):
    """A ShareGPT file read with the default messages_key said only "expected a non-empty list of messages"."""
    row = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}
    path = _write_jsonl(tmp_path / "sharegpt.jsonl", [row])
    with pytest.raises(
        SFTDataError, match=r"key 'messages': there is no such column \(the data has conversations\); "
    ):
        SFTDataset(path, tokenizer, None, data_config())
    with pytest.raises(SFTDataError, match=r"key 'output': there is no such column .*set data.response_key"):
        SFTDataset(
            [{"question": "Hi", "answer": "Hello"}],
            tokenizer,
            None,
            data_config(prompt_key="question", response_key="output"),
        )


def test_a_text_models_image_marker_is_plain_text(tokenizer):
    """A conversation about the HTML tag <image> was refused for want of an image."""
    row = _turns("What does the HTML tag <image> do?", "It embeds a picture.")
    conversation = SFTDataset([row], tokenizer, None, data_config())
    assert "<image>" in tokenizer.decode(conversation.encode(0)["input_ids"])


def test_an_open_last_turn_counts_the_end_of_sequence_token_encode_appends(models):
    """A template that leaves the assistant turn open (GLM's): a row of exactly data.max_length rendered tokens
    passed the check and failed at its batch, after Ray started, once encode appended the end-of-sequence token."""
    from transformers import AutoTokenizer

    open_turns = AutoTokenizer.from_pretrained(models["text"])
    open_turns.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    row = _turns("Hi", "Hello there")
    rendered = len(open_turns.encode(open_turns.apply_chat_template(row["messages"], tokenize=False)))
    dataset = SFTDataset([row], open_turns, None, data_config(max_length=rendered + 1))
    assert len(dataset.encode(0)["input_ids"]) == rendered + 1
    with pytest.raises(SFTDataError, match=rf"the conversation has {rendered + 1} tokens, more than data.max_length"):
        SFTDataset([row], open_turns, None, data_config(max_length=rendered))


def test_truncation_right_never_cuts_a_conversation_in_or_before_an_image(tmp_path, models):
    """A cut inside or before a later turn's image gave its pixels without their tokens: the run failed at the row's
    first batch (a shape mismatch in the rope index, or the model's image-feature check)."""
    path = models["vl"]
    processor = get_processor(path, **VL_PIXELS)
    Image.new("RGB", (56, 56), (200, 10, 10)).save(tmp_path / "red.png")
    messages = [*_turns("Hi there", "Hello")["messages"], *_turns("<image>What is this?", "A red square")["messages"]]
    row = {"messages": messages, "images": ["red.png"]}
    config = dict(image_dir=str(tmp_path), truncation="right", **VL_PIXELS)
    full = SFTDataset([row], processor.tokenizer, processor, data_config(**config), load_model_config(path))
    ids = full.encode(0)["input_ids"]
    image = [position for position, token in enumerate(ids) if token == processor.image_token_id]
    for cut in (image[0] - 1, image[len(image) // 2]):  # before the image, inside it
        with pytest.raises(SFTDataError, match=r"key 'images': data.truncation=right at data.max_length=.* would cut"):
            SFTDataset([row], processor.tokenizer, processor, data_config(max_length=cut, **config))
    # a cut in the last answer keeps the row
    cut = SFTDataset([row], processor.tokenizer, processor, data_config(max_length=len(ids) - 2, **config))
    assert len(cut.encode(0)["input_ids"]) == len(ids) - 2


def test_each_seed_and_epoch_get_their_own_order():
    """seed + epoch seeded the shuffle, so seed 1's epochs 1-3 were seed 2's epochs 0-2: a seed sweep's runs shared
    all but one epoch's order. Each (seed, epoch) is now its own draw; the same pair gives the same order (resume)."""
    from verl.sft.main import epoch_order, next_batch_start

    orders = {(seed, epoch): epoch_order(64, epoch, seed, True) for seed in (1, 2) for epoch in range(4)}
    assert len({str(order) for order in orders.values()}) == 8
    assert epoch_order(64, 2, 1, True) == orders[(1, 2)]
    assert sorted(orders[(1, 0)]) == list(range(64))
    assert epoch_order(20, 0, 1, False) == list(range(20))
    # full batches only: the 4 rows an epoch's 2 batches of 8 leave are dropped, the next batch is the next epoch's
    assert next_batch_start((0, 8), 20, 8) == (0, 8) and next_batch_start((0, 16), 20, 8) == (1, 0)


def test_a_checkpoints_place_in_the_data_is_its_own_or_its_step_over_its_own_batches():
    """Checkpoints record their epoch and its rows drawn; one written before they were kept is placed by its step over
    the batches of the batch size and rows it was saved with, not the resumed run's."""
    from verl.sft.main import saved_position

    assert saved_position({"global_step": 4, "epoch": 2, "epoch_rows": 8, "batch_size": 16}, 48, 8) == (2, 8)
    old = {"global_step": 4, "train_rows": 48, "batch_size": 16}  # 3 batches an epoch: step 4 is epoch 1's first
    assert saved_position(old, 48, 8) == (1, 16)
    assert saved_position(old, 96, 16) == (1, 16)
    assert saved_position({"global_step": 4}, 48, 16) == (1, 16)  # without them: this run's


def test_openai_weight_0_keeps_an_assistant_turn_out_of_the_loss(tmp_path, tokenizer):
    """OpenAI's fine-tuning format marks an assistant turn not to learn with `weight: 0` (a bad answer the user then
    corrects): it is context, rendered but not learned (it was learned, the key ignored); read from JSON Lines, where
    the messages without a weight read back with a null one. A weight other than 0 or 1, one on a user message, or a
    row whose every assistant turn has weight 0 is named."""
    messages = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "5.", "weight": 0},
        {"role": "user", "content": "Are you sure?"},
        {"role": "assistant", "content": "4.", "weight": 1},
    ]
    path = _write_jsonl(tmp_path / "weighted.jsonl", [{"messages": messages}])
    example = SFTDataset(path, tokenizer, None, data_config()).encode(0)
    assert learned_spans(tokenizer, example) == ["4.<|im_end|>"]
    assert "<|im_start|>assistant\n5.<|im_end|>" in tokenizer.decode(example["input_ids"])  # still in the context
    assert "weight" not in tokenizer.decode(example["input_ids"])
    bad = [
        ([messages[0], {**messages[1], "weight": 0.5}], "message 1 has weight 0.5; a weight must be 0"),
        ([{**messages[0], "weight": 1}, messages[3]], "message 0 has weight 1; a weight must be 0 .* on an assistant"),
        (messages[:2], "every assistant message has weight 0, so there is nothing to learn from"),
    ]
    for conversation, message in bad:
        with pytest.raises(SFTDataError, match=f"row 0, key 'messages': {message}"):
            SFTDataset([{"messages": conversation}], tokenizer, None, data_config())


def test_openai_older_function_call_is_learned_as_a_tool_call(tokenizer):
    """OpenAI's older `function_call` (one call per assistant message) is learned as that call in the template's own
    format, as `tool_calls` is (the template writes no `function_call`: the turn was learned as its text alone, the
    call dropped without a word); its `function` role for the result is named with the role to write."""
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    older = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "function_call": function},
        {"role": "tool", "content": "Sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
    current = [*older[:1], {**older[1], "function_call": None, "tool_calls": [{"function": function}]}, *older[2:]]
    example = SFTDataset([{"messages": older}], tokenizer, None, data_config()).encode(0)
    expected = SFTDataset([{"messages": current}], tokenizer, None, data_config()).encode(0)
    assert (example["input_ids"], example["loss_mask"]) == (expected["input_ids"], expected["loss_mask"])
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert learned_spans(tokenizer, example) == [f"Let me check.\n{call}<|im_end|>", "It is sunny.<|im_end|>"]
    with pytest.raises(SFTDataError, match="message 2 needs a role .* write 'function' as 'tool'"):
        SFTDataset(
            [{"messages": [*older[:2], {**older[2], "role": "function"}, older[3]]}], tokenizer, None, data_config()
        )
    both = {**older[1], "tool_calls": [{"function": function}]}
    with pytest.raises(SFTDataError, match="message 1: a message has both function_call and tool_calls"):
        SFTDataset([{"messages": [older[0], both]}], tokenizer, None, data_config())
