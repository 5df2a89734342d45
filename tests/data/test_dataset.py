# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import functools
import io
import json
import logging
import os
import pickle
import re

import datasets
import numpy as np
import pytest
import torch
from families import FAMILIES, vl_kinds
from media_files import write_video
from PIL import Image

from verl.data.dataset import DatasetRowError, PromptTooLongError, RLHFDataset
from verl.data.multimodal import load_video, process_media, resize_image, resized_size
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.rope_index import VIDEO_TOKEN, RopeIndex, load_model_config
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto, collate_fn
from verl.trainer.data_loader import MEDIA_LOADER_WORKERS, loader_workers


PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}


# ----------------------------------------------------------------------------------------------------------------
# fixtures: tiny models (built once for the module), small files the tests write


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tiny_models"))
    return {kind: get_or_build_tiny_model(kind, root) for kind in ("qwen2", *vl_kinds("processor"))}


@pytest.fixture(scope="module")
def text_tokenizer(model_dirs):
    return get_tokenizer(model_dirs["qwen2"])


@pytest.fixture(scope="module", params=vl_kinds("processor"))
def vl(request, model_dirs):
    """(kind, tokenizer, processor, model) of a tiny VLM; the model is only used for its own get_rope_index."""
    import transformers

    path = model_dirs[request.param]
    model = getattr(transformers, FAMILIES[request.param].hf_class).from_pretrained(path)
    return request.param, get_tokenizer(path), get_processor(path), model


@pytest.fixture(scope="module")
def vl25(model_dirs):
    path = model_dirs["qwen2_5_vl"]
    return get_tokenizer(path), get_processor(path)


def _image(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> Image.Image:
    return Image.new("RGB", (width, height), color)


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i), "level": i} for i in range(5)]


def _chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ----------------------------------------------------------------------------------------------------------------
# sources


def _answers(dataset: RLHFDataset) -> list[str]:
    return [dataset[i]["ground_truth"] for i in range(len(dataset))]


def test_every_local_file_type_gives_the_same_rows(tmp_path, text_tokenizer):
    table = datasets.Dataset.from_list(ROWS)
    files = {
        "jsonl": _write_jsonl(str(tmp_path / "rows.jsonl"), ROWS),
        "json": str(tmp_path / "rows.json"),
        "parquet": str(tmp_path / "rows.parquet"),
        "csv": str(tmp_path / "rows.csv"),
    }
    with open(files["json"], "w", encoding="utf-8") as f:
        json.dump(ROWS, f)
    table.to_parquet(files["parquet"])
    table.to_csv(files["csv"], index=False)
    expected = [row["answer"] for row in ROWS]
    for kind, path in files.items():
        dataset = RLHFDataset(path, text_tokenizer)
        assert _answers(dataset) == expected, kind
        assert dataset[3]["level"] == 3, kind  # other columns pass through
    assert _answers(RLHFDataset(ROWS, text_tokenizer)) == expected  # in-memory rows


def test_directory_of_files_names_the_file_of_a_bad_row(tmp_path, text_tokenizer):
    directory = tmp_path / "data"
    directory.mkdir()
    _write_jsonl(str(directory / "a.jsonl"), ROWS[:2])
    _write_jsonl(str(directory / "b.jsonl"), ROWS[2:4] + [{"prompt": "", "answer": "0", "level": 9}])
    with pytest.raises(DatasetRowError, match=r"file '.*b\.jsonl', row 2, key 'prompt': the prompt is empty"):
        RLHFDataset(str(directory), text_tokenizer)
    dataset = RLHFDataset(str(directory), text_tokenizer, skip_bad_rows=True)
    assert _answers(dataset) == [row["answer"] for row in ROWS[:4]]


def test_hugging_face_name_at_split_works_offline_from_local_directories(tmp_path, text_tokenizer):
    saved = str(tmp_path / "saved")
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:3]), "test": datasets.Dataset.from_list(ROWS[3:])}
    ).save_to_disk(saved)
    assert _answers(RLHFDataset(f"{saved}@test", text_tokenizer)) == ["6", "8"]
    with pytest.raises(ValueError, match="has no split 'validation'"):
        RLHFDataset(f"{saved}@validation", text_tokenizer)
    with pytest.raises(ValueError, match="holds the splits"):
        RLHFDataset(saved, text_tokenizer)
    single = str(tmp_path / "single")
    datasets.Dataset.from_list(ROWS[:2]).save_to_disk(single)
    assert _answers(RLHFDataset(single, text_tokenizer)) == ["0", "2"]
    repo = tmp_path / "repo"  # a dataset repository as on the Hub: split files named after the split
    repo.mkdir()
    _write_jsonl(str(repo / "train.jsonl"), ROWS[:4])
    _write_jsonl(str(repo / "test.jsonl"), ROWS[4:])
    assert _answers(RLHFDataset(f"{repo}@train", text_tokenizer)) == ["0", "2", "4", "6"]
    assert _answers(RLHFDataset(f"{repo}@test", text_tokenizer)) == ["8"]


def test_source_errors_name_the_source(tmp_path, text_tokenizer):
    with pytest.raises(FileNotFoundError, match="neither an existing file"):
        RLHFDataset(str(tmp_path / "missing.jsonl"), text_tokenizer)
    (tmp_path / "rows.txt").write_text("hello")
    with pytest.raises(ValueError, match="unsupported extension"):
        RLHFDataset(str(tmp_path / "rows.txt"), text_tokenizer)
    with pytest.raises(ValueError, match=r"no column 'question' \(data.prompt_key\)"):
        RLHFDataset(ROWS, text_tokenizer, prompt_key="question")
    with pytest.raises(ValueError, match=r"column\(s\) \['uid'\]"):
        RLHFDataset([{**ROWS[0], "uid": 1}], text_tokenizer)
    with pytest.raises(ValueError, match="No usable prompt"):
        RLHFDataset([{"prompt": "", "answer": "1"}], text_tokenizer, skip_bad_rows=True)


# ----------------------------------------------------------------------------------------------------------------
# text rows


def test_text_row_is_left_padded_with_plain_position_ids(text_tokenizer):
    dataset = RLHFDataset(
        [{"prompt": "What is 3 + 4?", "answer": 7, "level": "easy"}], text_tokenizer, max_prompt_length=64
    )
    example = dataset[0]
    expected_text = text_tokenizer.apply_chat_template(
        _chat("What is 3 + 4?"), add_generation_prompt=True, tokenize=False
    )
    expected_ids = text_tokenizer.encode(expected_text, add_special_tokens=False)
    length, padding = len(expected_ids), 64 - len(expected_ids)
    assert example["prompt_text"] == expected_text
    assert example["input_ids"].tolist() == [text_tokenizer.pad_token_id] * padding + expected_ids
    assert example["attention_mask"].tolist() == [0] * padding + [1] * length
    assert example["position_ids"].tolist() == [0] * padding + list(range(length))
    assert example["raw_prompt_ids"] == expected_ids
    assert example["ground_truth"] == "7" and example["level"] == "easy" and example["multi_modal_data"] is None
    assert dataset.prompt_lengths == [length]
    batch = collate_fn([example, example])
    assert batch.batch["input_ids"].shape == (2, 64) and list(batch.non_tensor_batch["level"]) == ["easy", "easy"]


# Several accepted answers (a list) and a structured label (a dict); rows 0 and 2 hold lists of equal length, which
# np.array(..., dtype=object) would turn into one 2-D array.
STRUCTURED_ROWS = [
    {"prompt": "Name a prime below 5.", "answer": ["2", "3"]},
    {"prompt": "How long is the side?", "answer": {"value": "4", "unit": "cm"}},
    {"prompt": "Name a primary colour.", "answer": ["red", "blue"]},
    {"prompt": "What is 1 + 1?", "answer": 2},
]
STRUCTURED_ANSWERS = [["2", "3"], {"value": "4", "unit": "cm"}, ["red", "blue"], "2"]  # what the function receives
# Scores a response against any of the accepted answers; reports the type it received.
STRUCTURED_REWARD = """
def score(sample):
    truth = sample["ground_truth"]
    accepted = truth if isinstance(truth, list) else [truth["value"]] if isinstance(truth, dict) else [truth]
    kind = {str: 0.0, list: 1.0, dict: 2.0}.get(type(truth), -1.0)
    return {"overall": float(sample["response"] in accepted), "kind": kind}
"""


def _rollout(dataset: RLHFDataset, responses: list[str], n: int) -> DataProto:
    """Collated prompts repeated n times and joined with hand-written responses, as the trainer builds a batch."""
    tokenizer = dataset.tokenizer
    prompts = collate_fn([dataset[i] for i in range(len(dataset))]).repeat(n, interleave=True)
    response_ids = torch.full((len(responses), 8), tokenizer.pad_token_id)
    response_mask = torch.zeros_like(response_ids)
    for row, text in enumerate(responses):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        response_ids[row, : len(ids)], response_mask[row, : len(ids)] = torch.tensor(ids), 1
    prompts.batch["prompts"] = prompts.batch.pop("input_ids")
    prompts.batch["attention_mask"] = torch.cat([prompts.batch["attention_mask"], response_mask], dim=-1)
    prompts.batch["responses"], prompts.batch["response_mask"] = response_ids, response_mask
    return prompts


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_list_and_dict_answers_reach_the_reward_function_unchanged(tmp_path, text_tokenizer, num_cpus):
    from verl.rewards.manager import FunctionRewardManager, build_reward_inputs
    from verl.workers.config import RewardConfig

    dataset = RLHFDataset(STRUCTURED_ROWS, text_tokenizer, max_prompt_length=64)
    assert _answers(dataset) == STRUCTURED_ANSWERS
    batch = _rollout(dataset, ["3", "7", "4", "4", "blue", "green", "2", "3"], n=2)
    column = batch.non_tensor_batch["ground_truth"]
    assert column.shape == (8,) and column.dtype == object
    truths = [sample["ground_truth"] for sample in build_reward_inputs(batch, text_tokenizer)]
    assert truths == [truth for truth in STRUCTURED_ANSWERS for _ in range(2)]
    assert [type(truth) for truth in truths[::2]] == [list, dict, list, str]

    path = tmp_path / "structured_reward.py"
    path.write_text(STRUCTURED_REWARD)
    manager = FunctionRewardManager(RewardConfig(reward_function=f"{path}:score", num_cpus=num_cpus), text_tokenizer)
    try:
        _, metrics = manager.compute_reward(batch)
    finally:
        manager.close()
    assert metrics["kind"] == [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 0.0, 0.0]
    assert metrics["overall"] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]


def test_list_and_dict_answers_from_files(tmp_path, text_tokenizer):
    lists = _write_jsonl(str(tmp_path / "lists.jsonl"), [STRUCTURED_ROWS[0], STRUCTURED_ROWS[2]])
    assert _answers(RLHFDataset(lists, text_tokenizer)) == [["2", "3"], ["red", "blue"]]
    mixed = _write_jsonl(str(tmp_path / "mixed.jsonl"), STRUCTURED_ROWS)  # one column of lists, a dict and a number
    assert _answers(RLHFDataset(mixed, text_tokenizer)) == STRUCTURED_ANSWERS
    dicts = str(tmp_path / "dicts.parquet")
    datasets.Dataset.from_list([STRUCTURED_ROWS[1]]).to_parquet(dicts)
    assert _answers(RLHFDataset(dicts, text_tokenizer)) == [{"value": "4", "unit": "cm"}]


@pytest.mark.parametrize(
    "answer, problem",
    [
        (None, "the answer is missing \\(null or NaN\\)"),
        (float("nan"), "the answer is missing \\(null or NaN\\)"),  # reached reward functions as "nan"
        (b"4", "the answer must be a JSON value .*got bytes"),
    ],
)
def test_answer_that_is_not_a_json_value_names_the_row(text_tokenizer, answer, problem):
    rows = [ROWS[0], {"prompt": "What is 2 + 2?", "answer": answer}]
    with pytest.raises(DatasetRowError, match=f"in-memory rows, row 1, key 'answer': {problem}"):
        RLHFDataset(rows, text_tokenizer)


@pytest.mark.parametrize("cap", [0, 2.5, "16", True])
def test_a_row_response_cap_that_is_no_positive_integer_names_the_row(text_tokenizer, cap):
    """It failed in a rollout worker at the row's first generation."""
    rows = [ROWS[0], {**ROWS[0], "max_response_tokens": cap}]
    with pytest.raises(DatasetRowError, match=r"row 1, key 'max_response_tokens': .* must be a positive integer"):
        RLHFDataset(rows, text_tokenizer)
    assert len(RLHFDataset([{**ROWS[0], "max_response_tokens": 16.0}, ROWS[0]], text_tokenizer)) == 2


def test_int_answers_stored_as_floats_reach_the_reward_as_ints(tmp_path, text_tokenizer):
    """An int column with a missing value is stored as floats (pandas, Arrow), as are JSON Lines answers 3, 4, 5.5:
    they reached reward functions as "42.0", which the exact-match rewards (examples/reward_function) score 0 against
    the model's "42"; the missing value as "nan", and an empty CSV cell as ""."""
    import pandas as pd

    frame = pd.DataFrame({"prompt": ["a", "b", "c"], "answer": [42, None, 7]})
    frame.to_parquet(tmp_path / "gap.parquet")
    dataset = RLHFDataset(str(tmp_path / "gap.parquet"), text_tokenizer, skip_bad_rows=True)
    assert _answers(dataset) == ["42", "7"] and dataset.num_skipped_bad_rows == 1
    with pytest.raises(
        DatasetRowError, match=r"gap.parquet', row 1, key 'answer': the answer is missing \(null or NaN\)"
    ):
        RLHFDataset(str(tmp_path / "gap.parquet"), text_tokenizer)
    rows = [{"prompt": "q", "answer": answer} for answer in (3, 4, 5.5, True)]
    assert _answers(RLHFDataset(_write_jsonl(str(tmp_path / "mixed.jsonl"), rows), text_tokenizer)) == [
        "3",
        "4",
        "5.5",
        "True",  # as Python writes it: JSON's true is no number
    ]
    (tmp_path / "gap.csv").write_text("prompt,answer\na,42\nb,\nc,7.5\n")
    with pytest.raises(DatasetRowError, match=r"gap.csv', row 1, key 'answer': the answer is missing"):
        RLHFDataset(str(tmp_path / "gap.csv"), text_tokenizer)


def test_format_prompt_sees_every_column_and_override_chat_template_replaces_the_template(tmp_path, text_tokenizer):
    template = tmp_path / "format.jinja"
    template.write_text("{{ content | trim }} (level {{ level }}, answer length {{ answer | length }})\n")
    chat = tmp_path / "chat.jinja"
    chat.write_text("{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:")
    dataset = RLHFDataset(
        [{"prompt": " What is 1 + 1? ", "answer": "2", "level": 3}],
        text_tokenizer,
        format_prompt=str(template),
        override_chat_template=str(chat),
    )
    example = dataset[0]
    assert example["prompt_text"] == "Q: What is 1 + 1? (level 3, answer length 1)\nA:"
    assert example["raw_prompt_ids"] == text_tokenizer.encode(example["prompt_text"], add_special_tokens=False)
    copy = pickle.loads(pickle.dumps(dataset))  # for spawn/forkserver loader workers: the template is rebuilt
    assert copy[0]["prompt_text"] == example["prompt_text"]
    uses_missing_column = tmp_path / "missing.jinja"
    uses_missing_column.write_text("{{ content }} {{ source }}")
    with pytest.raises(
        DatasetRowError, match=r"in-memory rows, row 0, key 'prompt': .*'source' is undefined"
    ) as error:
        RLHFDataset(ROWS[:1], text_tokenizer, format_prompt=str(uses_missing_column))
    assert "the dataset's columns are" in str(error.value) and "skip_bad_rows" not in str(error.value)  # every row's
    with pytest.raises(FileNotFoundError, match="data.format_prompt"):
        RLHFDataset(ROWS[:1], text_tokenizer, format_prompt=str(tmp_path / "nope.jinja"))
    dividing = tmp_path / "ratio.jinja"  # any error of the template on a row names the row (it was a bare one)
    dividing.write_text("{{ content }} {{ 1 / level }}")
    rows = [{"prompt": "a", "answer": "1", "level": 2}, {"prompt": "b", "answer": "1", "level": 0}]
    with pytest.raises(DatasetRowError, match=r"row 1, key 'prompt': .*ratio.jinja' failed on this row: ZeroDivision"):
        RLHFDataset(rows, text_tokenizer, format_prompt=str(dividing))
    assert len(RLHFDataset(rows, text_tokenizer, format_prompt=str(dividing), skip_bad_rows=True)) == 1
    unclosed = tmp_path / "unclosed.jinja"
    unclosed.write_text("Solve:\n{{ content \n")
    with pytest.raises(
        ValueError, match=r"unclosed.jinja' is not a valid Jinja template: .*'end of print statement' \(line 2\)\.$"
    ):
        RLHFDataset(ROWS[:1], text_tokenizer, format_prompt=str(unclosed))
    # Python's format syntax is plain text to Jinja: every prompt was the template's text, the question gone
    python_style = tmp_path / "python_style.jinja"
    python_style.write_text("Solve the problem: {content}\nPut the final answer in \\boxed{}.")
    with pytest.raises(ValueError, match=r"writes no variable of the row \(\{content\} is Python's format syntax"):
        RLHFDataset(ROWS[:1], text_tokenizer, format_prompt=str(python_style))
    # a column some JSONL rows lack is None there: it rendered as the text "None"
    hint = tmp_path / "hint.jinja"
    hint.write_text("{{ content }}\nHint: {{ hint }}")
    rows = [{"prompt": "a", "answer": "1", "hint": "think"}, {"prompt": "b", "answer": "1", "hint": None}]
    with pytest.raises(DatasetRowError, match=r"row 1, key 'prompt': .*hint.jinja' failed on this row: a value it"):
        RLHFDataset(rows, text_tokenizer, format_prompt=str(hint))
    guarded = tmp_path / "guarded.jinja"
    guarded.write_text("{{ content }}{% if hint %}\nHint: {{ hint }}{% endif %}")
    texts = [row["prompt_text"] for row in RLHFDataset(rows, text_tokenizer, format_prompt=str(guarded))]
    assert "Hint: think" in texts[0] and "Hint" not in texts[1] and "None" not in texts[1]


def test_a_tokenizer_without_chat_template_is_named_with_the_key_that_gives_one(tmp_path, text_tokenizer):
    """A base model's tokenizer has no chat template: the dataset says so at once, naming data.override_chat_template,
    with which it renders."""
    import copy

    base = copy.deepcopy(text_tokenizer)
    base.chat_template = None
    with pytest.raises(ValueError, match=r"has no chat template \(a base model\?\).*data.override_chat_template"):
        RLHFDataset(ROWS[:1], base)
    chat = tmp_path / "chat.jinja"
    chat.write_text("{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:")
    assert RLHFDataset(ROWS[:1], base, override_chat_template=str(chat))[0]["prompt_text"].endswith("A:")


def test_chat_template_kwargs_reach_the_template_and_a_variable_it_ignores_is_refused(tmp_path, text_tokenizer):
    """data.chat_template_kwargs: Qwen3's enable_thinking=false opens the answer with an empty thinking block (the
    tiny qwen3 template does as Qwen3's); a variable the template does not read, or one of apply_chat_template's own
    arguments, is an error naming the key and the template's variables."""
    qwen3 = get_tokenizer(get_or_build_tiny_model("qwen3", str(tmp_path)))
    thinking = RLHFDataset(ROWS[:1], qwen3)[0]
    quiet = RLHFDataset(ROWS[:1], qwen3, chat_template_kwargs={"enable_thinking": False})[0]
    assert quiet["prompt_text"] == thinking["prompt_text"] + "<think>\n\n</think>\n\n"
    assert quiet["raw_prompt_ids"] == qwen3.encode(quiet["prompt_text"], add_special_tokens=False)
    with pytest.raises(
        ValueError,
        match=r"data.chat_template_kwargs.enable_thinking: the chat template of .*qwen2' does not read a variable "
        r"of that name, so it would change nothing; the template's variables: add_vision_id\.",
    ):
        RLHFDataset(ROWS[:1], text_tokenizer, chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(ValueError, match=r"data.chat_template_kwargs.add_generation_prompt is set by the trainer"):
        RLHFDataset(ROWS[:1], qwen3, chat_template_kwargs={"add_generation_prompt": False})
    chat = tmp_path / "chat.jinja"  # an override template's variables are the ones that count
    chat.write_text("{% for m in messages %}{{ style }}: {{ m['content'] }}\n{% endfor %}A:")
    styled = RLHFDataset(
        ROWS[:1], text_tokenizer, override_chat_template=str(chat), chat_template_kwargs={"style": "Q"}
    )
    assert styled[0]["prompt_text"].startswith("Q: ")


def test_a_prompt_given_as_chat_messages_renders_them_all_and_formats_the_last(tmp_path, text_tokenizer):
    """verl's and TRL's layout: a list of messages (system, few-shot turns, the user's); the answer inside a dict
    column, named with dots."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    row = {"prompt": messages, "reward_model": {"style": "rule", "ground_truth": "4"}, "data_source": "gsm8k"}
    template = tmp_path / "format.jinja"
    template.write_text("{{ content }} ({{ data_source }})")
    dataset = RLHFDataset([row], text_tokenizer, answer_key="reward_model.ground_truth", format_prompt=str(template))
    example = dataset[0]
    formatted = [*messages[:3], {"role": "user", "content": "What is 2 + 2? (gsm8k)"}]
    expected = text_tokenizer.apply_chat_template(formatted, add_generation_prompt=True, tokenize=False)
    assert example["prompt_text"] == expected and "Be brief." in expected
    assert example["ground_truth"] == "4" and example["reward_model"] == row["reward_model"]  # the column stays extra
    assert example["prompt_content"] == formatted  # a client-style environment starts from the whole conversation
    # a typo in the nested path is named with the fields there are (it was "the answer is missing" on every row)
    with pytest.raises(ValueError, match=r"reward_model has no field 'ground_truthh' \(its fields in the first row: "):
        RLHFDataset([row], text_tokenizer, answer_key="reward_model.ground_truthh")
    assert example["prompt_messages"] == messages  # as given (TRL-style reward functions see them)
    plain = RLHFDataset([{"prompt": messages[3:], "answer": "4"}], text_tokenizer)[0]  # one message: as a string
    assert plain["prompt_content"] == "What is 2 + 2?" and plain["prompt_messages"] == messages[3:]
    assert RLHFDataset([{"prompt": "What is 2 + 2?", "answer": "4"}], text_tokenizer)[0]["prompt_messages"] is None
    assert (
        plain["prompt_text"]
        == RLHFDataset([{"prompt": "What is 2 + 2?", "answer": "4"}], text_tokenizer)[0]["prompt_text"]
    )
    no_calls = [{**message, "tool_calls": []} for message in messages]  # a column every message has: no call
    assert (
        RLHFDataset([{"prompt": no_calls, "answer": "4"}], text_tokenizer)[0]["prompt_text"]
        == (RLHFDataset([{"prompt": messages, "answer": "4"}], text_tokenizer)[0]["prompt_text"])
    )
    bad = {
        "the prompt is an empty list of messages": [],
        "message 2 of the prompt must be the user's": messages[:3],
        "message 0 of the prompt must be a dict with role system, user, assistant or tool": [
            {"role": "function", "content": "x"},
            messages[3],
        ],
        "message 0 of the prompt: tool_calls must be a list, on an assistant message": [
            {"role": "user", "content": "x", "tool_calls": [{"function": {"name": "add", "arguments": {}}}]},
            messages[3],
        ],
        "message 0 of the prompt needs text content": [{"role": "user", "content": 3}],
        "message 0 has a media marker; put them in the last message": [
            {"role": "system", "content": [{"type": "image"}]},  # typed parts are read as marker text
            messages[3],
        ],
    }
    for problem, prompt in bad.items():
        with pytest.raises(DatasetRowError, match=f"in-memory rows, row 0, key 'prompt': {re.escape(problem)}"):
            RLHFDataset([{"prompt": prompt, "answer": "4"}], text_tokenizer)
    # an agent's earlier turns in OpenAI's form: a call (arguments as a JSON string, content null) and its result
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}
    turns = [
        messages[1],
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "2", "tool_call_id": "call_1", "name": "add"},  # kept: some templates read them
    ]
    agent = RLHFDataset([{"prompt": [*turns, messages[3]], "answer": "4"}], text_tokenizer)[0]
    assert agent["prompt_messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{**call, "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}],
    }
    assert "<|im_start|>tool\n2<|im_end|>" in agent["prompt_text"] and agent["prompt_messages"][2] == turns[2]
    with pytest.raises(ValueError, match=r"reward_model has no field 'answer' \(its fields in the first row: \['gr"):
        RLHFDataset([row], text_tokenizer, answer_key="reward_model.answer")
    with pytest.raises(ValueError, match="has no column 'label.ground_truth' \\(data.answer_key\\)") as missing:
        RLHFDataset([row], text_tokenizer, answer_key="label.ground_truth")
    # a validation set's other column names are a common cause: the advice says that one key serves both files
    assert str(missing.value).endswith(
        "(one data.answer_key serves data.train_files and data.val_files: their columns must be named alike)."
    )


def test_a_rows_tools_are_described_in_its_prompt_alike_from_memory_json_text_and_parquet(tmp_path, text_tokenizer):
    """data.tools_key: a row's tool schemas go through the chat template into that row's prompt (single-turn
    function calling, scored by the reward). Parquet gives the same prompts as the rows in memory, though Arrow fills
    each schema and message with the fields only other rows have, as nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def schema(name: str, *params: str) -> dict:
        properties = {param: {"type": "integer"} for param in params}
        return {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
        }

    weather, add = schema("get_weather", "day"), schema("add", "a", "b")
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}
    few_shot = [
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "2"},
    ]
    rows = [
        {"prompt": _chat("Weather tomorrow?"), "answer": "x", "tools": [weather]},
        {"prompt": [*few_shot, *_chat("2 + 2?")], "answer": "4", "tools": [add]},
        {"prompt": _chat("No tools."), "answer": "y", "tools": []},
    ]
    in_memory = RLHFDataset(rows, text_tokenizer)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    from_parquet = RLHFDataset(str(tmp_path / "rows.parquet"), text_tokenizer)
    assert (
        datasets.load_dataset("parquet", data_files=str(tmp_path / "rows.parquet"))["train"][0]["tools"][0][
            "function"
        ]["parameters"]["properties"]["a"]
        is None
    )  # what Arrow gives
    texts = [example["prompt_text"] for example in in_memory]
    assert texts == [example["prompt_text"] for example in from_parquet] and "null" not in "".join(texts)
    render = functools.partial(text_tokenizer.apply_chat_template, add_generation_prompt=True, tokenize=False)
    assert texts[0] == render(rows[0]["prompt"], tools=[weather]) and '"name": "get_weather"' in texts[0]
    assert '"name": "add"' in texts[1] and '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 1}}' in texts[1]
    assert texts[2] == render(rows[2]["prompt"]) and "Tools you can call" not in texts[2]
    assert in_memory[0]["tools"] == [weather]  # the column reaches the reward function
    as_text = RLHFDataset([{**rows[0], "tools": json.dumps([weather])}], text_tokenizer)[0]
    assert as_text["prompt_text"] == texts[0]  # tools stored as a JSON string
    assert RLHFDataset(rows[:1], text_tokenizer, tools_key=None)[0]["prompt_text"] == render(rows[0]["prompt"])

    bad = {
        "key 'tools': the tools are a string but not valid JSON": {"tools": "get_weather"},
        "key 'tools': tool 0 has no name": {"tools": [{"type": "function", "function": {"parameters": {}}}]},
        "key 'tools': expected a list of the tools' JSON schemas": {"tools": {"name": "get_weather"}},
        "key 'tools': expected a list of the tools' JSON schemas (objects), or a JSON string of one, got ['search', "
        "'calculator'] (data.tools_key; null leaves the column to the reward function)": {
            "tools": ["search", "calculator"]
        },
    }
    for problem, change in bad.items():
        with pytest.raises(DatasetRowError, match=f"in-memory rows, row 0, {re.escape(problem)}"):
            RLHFDataset([{**rows[0], **change}], text_tokenizer)
    with pytest.raises(ValueError, match="has a tools column 'tools' \\(data.tools_key\\), and worker.rollout.env"):
        RLHFDataset(rows, text_tokenizer, tools=[add])  # a tool environment's own schemas
    glm = get_tokenizer(get_or_build_tiny_model("glm4v", str(tmp_path / "glm")))  # its template reads no `tools`
    with pytest.raises(DatasetRowError, match="row 0, key 'tools': the chat template does not read `tools`"):
        RLHFDataset(rows[:1], glm)
    strict = tmp_path / "strict.jinja"  # as Mistral's: a tool result must name its call
    strict.write_text(
        "{% for m in messages %}{% if m.role == 'tool' and m.tool_call_id is not defined %}"
        "{{ raise_exception('a tool result needs its tool_call_id') }}{% endif %}{{ m.content }}{{ m.tool_calls }}\n{% endfor %}"
    )
    with pytest.raises(
        DatasetRowError, match="row 0, key 'prompt': the chat template cannot render the prompt: a tool result needs"
    ):
        RLHFDataset(rows[1:2], text_tokenizer, override_chat_template=str(strict), tools_key=None)
    llama = get_tokenizer(get_or_build_tiny_model("llama", str(tmp_path / "llama")))  # writes no tool_calls
    with pytest.raises(
        DatasetRowError, match="row 0, key 'prompt': an assistant message of the prompt has tool_calls"
    ):
        RLHFDataset([{**rows[1], "tools": None}], llama)


def test_a_message_prompt_places_the_images_in_its_last_message(vl25):
    tokenizer, processor = vl25
    image = _image(56, 56)
    messages = [{"role": "system", "content": "Count."}, {"role": "user", "content": "How many? <image>"}]
    rows = [{"prompt": messages, "answer": "1", "images": [image]}]
    example = RLHFDataset(rows, tokenizer, processor, max_prompt_length=128, **PIXELS)[0]
    parts = [{"type": "text", "text": "How many? "}, {"type": "image"}]
    expected = processor.apply_chat_template(
        [messages[0], {"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
    )
    assert example["prompt_text"] == expected and expected.index("Count.") < expected.index("<|vision_start|>")
    # the same message in Hugging Face's and TRL's typed parts, with a single image in an `image` column
    typed = [messages[0], {"role": "user", "content": [{"type": "text", "text": "How many? "}, {"type": "image"}]}]
    dataset = RLHFDataset(
        [{"prompt": typed, "answer": "1", "image": image}],
        tokenizer,
        processor,
        max_prompt_length=128,
        image_key="image",
        **PIXELS,
    )
    assert dataset[0]["prompt_text"] == expected
    assert torch.equal(dataset[0]["input_ids"], example["input_ids"])
    # a processor's template variable (Qwen2-VL's add_vision_id) through data.chat_template_kwargs
    labelled = RLHFDataset(
        rows, tokenizer, processor, max_prompt_length=128, chat_template_kwargs={"add_vision_id": True}, **PIXELS
    )
    assert labelled[0]["prompt_text"] == expected.replace("<|vision_start|>", "Picture 1: <|vision_start|>")
    with pytest.raises(ValueError, match=r"chat_template_kwargs.enable_thinking: .* variables: add_vision_id\."):
        RLHFDataset(rows, tokenizer, processor, chat_template_kwargs={"enable_thinking": False}, **PIXELS)
    inline = [{"role": "user", "content": [{"type": "image", "url": "a.png"}, {"type": "text", "text": "How many?"}]}]
    with pytest.raises(
        DatasetRowError, match=r"row 0, key 'prompt': message 0: content part 0 holds its image itself"
    ):
        RLHFDataset([{"prompt": inline, "answer": "1"}], tokenizer, processor, **PIXELS)
    inline[0]["content"][0] = {"type": "video", "url": "a.mp4"}  # a video goes to the video column, not the image one
    with pytest.raises(
        DatasetRowError, match=r"holds its video itself; put the videos in the video column \(data.vid"
    ):
        RLHFDataset([{"prompt": inline, "answer": "1"}], tokenizer, processor, **PIXELS)
    with pytest.raises(DatasetRowError, match=r"message 0: content part 0 must be .*got \{'type': 'audio'\}"):
        RLHFDataset([{"prompt": [{"role": "user", "content": [{"type": "audio"}]}], "answer": "1"}], tokenizer)


# ----------------------------------------------------------------------------------------------------------------
# image and video rows: ids, raw ids and position ids against the model's own processor and get_rope_index


def _model_positions(model, processor, prompt_text, images, videos, example, video_fps=2.0):
    """The model's own rope index for the same prompt: the processor's ids, then model.get_rope_index."""
    kwargs = {}
    if videos:
        kwargs = {
            # the frames are the video resampled at video_fps: frame i is at i / video_fps seconds
            "video_metadata": [
                {"total_num_frames": len(v), "fps": video_fps, "frames_indices": list(range(len(v)))} for v in videos
            ],
            "do_sample_frames": False,
        }
    inputs = processor(text=[prompt_text], images=images or None, videos=videos or None, return_tensors="pt", **kwargs)
    padding = example["input_ids"].shape[-1] - inputs["input_ids"].shape[-1]
    input_ids = torch.nn.functional.pad(inputs["input_ids"], (padding, 0), value=processor.tokenizer.pad_token_id)
    mask = torch.nn.functional.pad(inputs["attention_mask"], (padding, 0), value=0)
    if not hasattr(model.model, "get_rope_index"):  # 1-D rope (Gemma 4, InternVL): 0, 1, 2, ... over the valid tokens
        return input_ids[0], (mask[0].cumsum(-1) - 1).clamp(min=0), inputs
    token_types = torch.nn.functional.pad(inputs["mm_token_type_ids"], (padding, 0), value=0)
    positions, _ = model.model.get_rope_index(
        input_ids,
        mm_token_type_ids=token_types,
        image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"),
        second_per_grid_ts=inputs.get("second_per_grid_ts"),
        attention_mask=mask,
    )
    return input_ids[0], positions[:, 0, :], inputs


def _expand(raw_ids: list[int], token_id: int, expansions: list[list[int]]) -> list[int]:
    """`raw_ids` with the i-th `token_id` replaced by expansions[i]."""
    out, expansions = [], list(expansions)
    for token in raw_ids:
        out += expansions.pop(0) if token == token_id else [token]
    return out


def _expansions(processor, images) -> list[list[int]]:
    """The ids the processor writes for one image placeholder, per image (Qwen: n image pads; InternVL: <img>, n
    context tokens, </img>)."""
    return [
        processor(text=[processor.image_token], images=[image], return_tensors="pt")["input_ids"][0].tolist()
        for image in images
    ]


def test_single_image_row_matches_the_model_processor_and_rope_index(vl):
    kind, tokenizer, processor, model = vl
    image = _image(150, 90)
    resized = resize_image(image, **PIXELS)
    dataset_with_image = RLHFDataset(
        [{"prompt": "What color is <image>?", "answer": "red", "images": [image]}],
        tokenizer,
        processor,
        max_prompt_length=96,
        **PIXELS,
    )
    example = dataset_with_image[0]
    assert example["position_ids"].shape == ((3, 96) if hasattr(model.model, "get_rope_index") else (96,))
    assert example["multi_modal_data"]["images"][0].size == resized.size
    expected_text = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What color is "},
                    {"type": "image"},
                    {"type": "text", "text": "?"},
                ],
            }
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert example["prompt_text"] == expected_text
    input_ids, positions, inputs = _model_positions(model, processor, expected_text, [resized], [], example)
    assert torch.equal(example["input_ids"], input_ids)
    assert torch.equal(example["attention_mask"], (torch.arange(96) >= 96 - inputs["input_ids"].shape[-1]).long())
    assert torch.equal(example["position_ids"], positions)
    # raw prompt ids keep ONE placeholder per image; vLLM expands it as the processor does (Qwen: to
    # grid_t * grid_h * grid_w / merge^2 tokens)
    image_token = processor.image_token_id
    assert example["raw_prompt_ids"].count(image_token) == 1
    unpadded = example["input_ids"][example["attention_mask"].bool()].tolist()
    assert _expand(example["raw_prompt_ids"], image_token, _expansions(processor, [resized])) == unpadded
    assert dataset_with_image.prompt_lengths == [len(unpadded)]


def test_multi_image_row_places_images_at_their_markers(vl):
    kind, tokenizer, processor, model = vl
    images = [_image(60, 60), _image(400, 100, (0, 0, 255)), _image(30, 200)]
    dataset = RLHFDataset(
        [{"prompt": "Compare <image> with <image>, then <image>.", "answer": "a", "images": images}],
        tokenizer,
        processor,
        max_prompt_length=256,
        **PIXELS,
    )
    example = dataset[0]
    placeholder = FAMILIES[kind].image_placeholder
    parts = ("Compare ", "<image>", " with ", "<image>", ", then ", "<image>", ".")
    parts = [placeholder if part == "<image>" else part for part in parts]
    if kind == "gemma4":  # Gemma 4's template strips the text around an image
        parts = [part.strip() for part in parts]
    assert "".join(parts) in example["prompt_text"]
    resized = [resize_image(image, **PIXELS) for image in images]
    assert [image.size for image in example["multi_modal_data"]["images"]] == [image.size for image in resized]
    input_ids, positions, inputs = _model_positions(model, processor, example["prompt_text"], resized, [], example)
    assert torch.equal(example["input_ids"], input_ids)
    assert torch.equal(example["position_ids"], positions)
    expansions = _expansions(processor, resized)
    assert len({len(ids) for ids in expansions}) > 1  # the images really differ in token count
    unpadded = example["input_ids"][example["attention_mask"].bool()].tolist()
    assert _expand(example["raw_prompt_ids"], processor.image_token_id, expansions) == unpadded
    assert dataset.prompt_lengths == [len(unpadded)]  # the header-only count equals the processor's


def test_video_row_is_sampled_at_video_fps_and_matches_the_model_rope_index(tmp_path, vl):
    kind, tokenizer, processor, model = vl
    if not hasattr(model.model, "get_rope_index"):  # InternVL: process_media refuses videos (a clear error)
        pytest.skip(f"{kind}: videos are refused in training for 1-D rope families")
    write_video(str(tmp_path / "clip.mp4"), num_frames=16, rate=8)  # 2 seconds
    make = functools.partial(
        RLHFDataset,
        [{"prompt": "What happens in <video>?", "answer": "fade", "videos": ["clip.mp4"]}],
        tokenizer,
        processor,
        image_dir=str(tmp_path),
        video_fps=4.0,
        max_prompt_length=128,
        **PIXELS,
    )
    if kind == "gemma4":  # refused when the row is read, naming the row and the key
        with pytest.raises(
            DatasetRowError, match="key 'videos': videos are supported for the Qwen-VL and GLM-V families only"
        ):
            make()[0]
        return
    dataset = make()
    example = dataset[0]
    video = example["multi_modal_data"]["videos"][0]
    assert video.dtype == np.uint8 and video.shape[0] == 8 and video.shape[-1] == 3  # 2 s at 4 fps
    assert [round(frame.mean() / 15) for frame in video] == list(range(0, 16, 2))  # frame i is gray 15 * i
    input_ids, positions, inputs = _model_positions(
        model, processor, example["prompt_text"], [], [video], example, video_fps=4.0
    )
    assert torch.equal(example["input_ids"], input_ids)
    # the model's own positions up to the video's end; the text after it starts past the video's largest position
    # (transformers starts it at the video's start + its merged width, behind a video's time positions: Qwen2.5-VL)
    last = int(torch.nonzero(RopeIndex(model.config).mm_token_type_ids(input_ids) == VIDEO_TOKEN).max())
    ours = example["position_ids"]
    assert torch.equal(ours[:, : last + 1], positions[:, : last + 1])
    assert ours[:, last + 1].tolist() == [int(ours[:, : last + 1].max()) + 1] * 3
    shift = int(ours[0, last + 1] - positions[0, last + 1])
    assert torch.equal(ours[:, last + 1 :], positions[:, last + 1 :] + shift)
    assert shift == (2 if kind in ("qwen2_vl", "qwen2_5_vl") else 0)  # 4 temporal patches 1 apart, 2 x 2 merged
    video_tokens = int(inputs["video_grid_thw"][0].prod()) // 4
    assert example["raw_prompt_ids"].count(processor.video_token_id) == 1
    video_token_types = RopeIndex(model.config).mm_token_type_ids(example["input_ids"])  # GLM: frames of image ids
    assert int((video_token_types == VIDEO_TOKEN).sum()) == video_tokens
    assert dataset.prompt_lengths == [int(example["attention_mask"].sum())]
    if kind == "qwen2_5_vl":  # 2 frames per temporal patch at 4 fps = 0.5 s, times tokens_per_second=2
        times = sorted(set(example["position_ids"][0][example["input_ids"] == processor.video_token_id].tolist()))
        assert [later - earlier for earlier, later in zip(times, times[1:])] == [1, 1, 1]


def test_load_video_reads_frames_at_the_requested_rate(tmp_path):
    path = write_video(str(tmp_path / "clip.mp4"), num_frames=12, rate=6, size=(80, 40))
    assert load_video(path, 1.0, None, None).shape == (2, 40, 80, 3)
    assert load_video(path, 6.0, None, None).shape[0] == 12
    assert load_video(path, 2.0, None, 800).shape[1:3] == (20, 40)  # area 3200 -> at most 800, aspect kept
    slow = write_video(str(tmp_path / "slow.mp4"), num_frames=4, rate=2)  # 2 s, slower than the requested rate
    assert [round(frame.mean() / 15) for frame in load_video(slow, 4.0, None, None)] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="no video stream|Invalid data"):
        (tmp_path / "fake.mp4").write_bytes(b"not a video")
        load_video(str(tmp_path / "fake.mp4"), 2.0, None, None)
    assert load_video(path, 6.0, None, None, max_frames=12).shape[0] == 12
    with pytest.raises(ValueError, match=r"longer than data.video_max_frames=11 frames at data.video_fps=6 \(1.8333"):
        load_video(path, 6.0, None, None, max_frames=11)


def test_a_video_given_as_its_frames_is_read_as_sampled_at_video_fps(tmp_path, vl25):
    """EasyR1's (qwen_vl_utils') frame lists: a video may be a list of its frames' image files, at data.video_fps."""
    tokenizer, processor = vl25
    for i, size in enumerate([(64, 48)] * 3 + [(80, 60)]):  # a last frame of another size is scaled to the first's
        Image.new("RGB", size, (15 * i, 15 * i, 15 * i)).save(tmp_path / f"f{i}.png")
    frames = [f"f{i}.png" for i in range(4)]
    rows = [{"prompt": "What happens in <video>?", "answer": "fade", "videos": [frames]}]
    dataset = RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), video_fps=2.0, max_prompt_length=256)
    example = dataset[0]
    video = example["multi_modal_data"]["videos"][0]
    assert video.shape == (4, 48, 64, 3) and [int(frame.mean()) for frame in video] == [0, 15, 30, 45]
    inputs = process_media(example["multi_modal_data"], processor)
    assert inputs["video_grid_thw"][0, 0].item() == 2  # 4 frames in temporal patches of 2
    video_tokens = int((example["input_ids"] == processor.video_token_id).sum())
    assert video_tokens == inputs["video_grid_thw"].prod().item() // 4
    # data.video_max_frames holds for frame lists too (it was applied to video files only)
    with pytest.raises(
        DatasetRowError, match=r"row 0, key 'videos': video 0 .*4 frames, more than .*video_max_frames=3"
    ):
        RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), video_max_frames=3, max_prompt_length=256)
    rows[0]["videos"] = [["f0.png", 3]]
    with pytest.raises(DatasetRowError, match=r"row 0, key 'videos': video 0 must be a path or a list of its frames'"):
        RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path))


def test_a_video_over_video_max_frames_is_a_bad_row_named(tmp_path, vl25):
    tokenizer, processor = vl25
    write_video(str(tmp_path / "clip.mp4"), num_frames=16, rate=8)  # 2 s: 8 frames at 4 fps
    rows = [{"prompt": "What happens in <video>?", "answer": "fade", "videos": ["clip.mp4"]}]
    options = {"image_dir": str(tmp_path), "video_fps": 4.0, "max_prompt_length": 128, **PIXELS}
    assert RLHFDataset(rows, tokenizer, processor, video_max_frames=8, **options)[0]["multi_modal_data"]["videos"]
    with pytest.raises(DatasetRowError, match=r"row 0, key 'videos': video 0 cannot be read: .*video_max_frames=6"):
        RLHFDataset(rows, tokenizer, processor, video_max_frames=6, **options)


@pytest.mark.parametrize("kind", ["qwen3_vl", "glm4v"])
def test_a_video_of_one_frame_is_read_as_one_temporal_patch(tmp_path, model_dirs, kind):
    """A clip of one frame at data.video_fps (under 0.5 s at 2 fps) or a video given as one frame: Qwen3-VL's and
    GLM-4.1V's processors refuse a video shorter than a temporal patch ("t:1 must be larger than temporal_factor:2"),
    so the row was bad; the frame is repeated, as Qwen2-VL's processor pads it, and the prompt's video tokens are the
    features the workers rebuild from multi_modal_data."""
    tokenizer, processor = get_tokenizer(model_dirs[kind]), get_processor(model_dirs[kind])
    write_video(str(tmp_path / "short.mp4"), num_frames=1, rate=4)
    _image(64, 48).save(tmp_path / "frame.png")
    rows = [
        {"prompt": "What happens in <video>?", "answer": "x", "videos": ["short.mp4"]},
        {"prompt": "What happens in <video>?", "answer": "x", "videos": [["frame.png"]]},
    ]
    dataset = RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), max_prompt_length=256, **PIXELS)
    for index in range(len(rows)):
        example = dataset[index]
        video = example["multi_modal_data"]["videos"][0]
        assert video.shape[0] == 2 and np.array_equal(video[0], video[1])
        grid = process_media(example["multi_modal_data"], processor)["video_grid_thw"]
        assert grid[0, 0].item() == 1  # one temporal patch
        token_types = RopeIndex(load_model_config(model_dirs[kind])).mm_token_type_ids(example["input_ids"])
        assert int((token_types == VIDEO_TOKEN).sum()) == grid.prod().item() // 4


def test_a_glm_row_of_two_videos_is_a_bad_row_named_as_vllm_takes_one(tmp_path, model_dirs):
    """GLM-4.1V and GLM-4.5V: vLLM takes one video a prompt. A row of two (or an image and two) was read, and the
    engine refused its prompt at the first rollout ("At most 1 video(s) may be provided in one prompt"), which
    stopped the run; a row of one video beside an image is still read."""
    from vllm.model_executor.models.glm4_1v import Glm4vProcessingInfo

    assert Glm4vProcessingInfo.get_supported_mm_limits(None)["video"] == 1  # when vLLM takes more, the check may go
    tokenizer, processor = get_tokenizer(model_dirs["glm4v"]), get_processor(model_dirs["glm4v"])
    write_video(str(tmp_path / "clip.mp4"), num_frames=4, rate=4)
    _image(56, 56).save(tmp_path / "a.png")
    rows = [
        {"prompt": "Compare <image> with <video>.", "answer": "a", "images": ["a.png"], "videos": ["clip.mp4"]},
        {"prompt": "Compare <video> with <video>.", "answer": "a", "images": [], "videos": ["clip.mp4", "clip.mp4"]},
    ]
    options = {"image_dir": str(tmp_path), "video_fps": 4.0, "max_prompt_length": 256, **PIXELS}
    with pytest.raises(
        DatasetRowError, match=r"row 1, key 'videos': the row has 2 videos but vLLM takes at most one video a prompt"
    ):
        RLHFDataset(rows, tokenizer, processor, **options)
    dataset = RLHFDataset(rows, tokenizer, processor, skip_bad_rows=True, **options)
    assert dataset.indices == [0] and len(dataset[0]["multi_modal_data"]["videos"]) == 1


def test_every_image_form_gives_the_same_tokens(tmp_path, vl25):
    tokenizer, processor = vl25
    image = _image(120, 80, (10, 200, 10))
    image.save(tmp_path / "img.png")
    forms = [
        "img.png",
        str(tmp_path / "img.png"),
        _png_bytes(image),
        {"bytes": _png_bytes(image), "path": None},
        {"bytes": None, "path": "img.png"},
        image,
        Image.open(tmp_path / "img.png").convert("P"),  # palette mode is converted to RGB
    ]
    rows = [{"prompt": "<image> Which color?", "answer": "green", "images": [form]} for form in forms]
    dataset = RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), max_prompt_length=64, **PIXELS)
    examples = [dataset[i] for i in range(len(forms))]
    for example in examples[1:]:
        assert torch.equal(example["input_ids"], examples[0]["input_ids"])
        assert example["multi_modal_data"]["images"][0].mode == "RGB"
    pixels = [np.asarray(example["multi_modal_data"]["images"][0]) for example in examples]
    assert all(np.array_equal(p, pixels[0]) for p in pixels[:-1])


def test_text_and_image_rows_mix_in_one_batch_and_get_loader_workers(vl25):
    tokenizer, processor = vl25
    rows = [
        {"prompt": "Just text.", "answer": "1", "images": []},
        {"prompt": "<image> Picture.", "answer": "2", "images": [_image(56, 56)]},
        {"prompt": "Images first, no markers.", "answer": "3", "images": [_image(56, 56), _image(84, 56)]},
    ]
    dataset = RLHFDataset(rows, tokenizer, processor, max_prompt_length=64, **PIXELS)
    batch = collate_fn([dataset[i] for i in range(3)])
    assert batch.batch["position_ids"].shape == (3, 3, 64)
    text_row = batch.batch["position_ids"][0]
    length = int(batch.batch["attention_mask"][0].sum())
    assert torch.equal(
        text_row, torch.cat([torch.zeros(64 - length, dtype=torch.long), torch.arange(length)]).expand(3, -1)
    )
    assert batch.non_tensor_batch["multi_modal_data"][0] is None
    assert len(batch.non_tensor_batch["multi_modal_data"][2]["images"]) == 2
    assert batch.non_tensor_batch["multi_modal_data"][2]["videos"] == []
    assert dataset.has_media and loader_workers(None, dataset) == MEDIA_LOADER_WORKERS  # images: decode ahead
    assert loader_workers(0, dataset) == 0
    text = RLHFDataset([{"prompt": "Just text.", "answer": "1"}], tokenizer, processor, max_prompt_length=64)
    assert not text.has_media and loader_workers(None, text) == 0 and loader_workers(3, text) == 3
    copy = pickle.loads(pickle.dumps(dataset))  # loader workers started with spawn get a pickled dataset
    assert torch.equal(copy[1]["position_ids"], batch.batch["position_ids"][1])
    user_turn = batch.non_tensor_batch["prompt_text"][2].split("<|im_start|>user\n")[1]
    assert user_turn.startswith("<|vision_start|><|image_pad|><|vision_end|>" * 2 + "Images first")


def test_min_and_max_pixels_bound_the_image_area(vl25):
    assert resized_size(1000, 500, None, 50_000) == (316, 158)
    assert resized_size(10, 40, 3136, None) == (28, 112)
    assert resized_size(100, 100, 3136, 50_000) == (100, 100)
    tokenizer, processor = vl25
    rows = [
        {"prompt": "<image>", "answer": "big", "images": [_image(1000, 1000)]},
        {"prompt": "<image>", "answer": "small", "images": [_image(10, 10)]},
    ]
    dataset = RLHFDataset(rows, tokenizer, processor, max_prompt_length=64, **PIXELS)
    big, small = (dataset[i]["multi_modal_data"]["images"][0] for i in range(2))
    assert big.width * big.height <= PIXELS["max_pixels"] and big.width == big.height
    assert small.width * small.height >= PIXELS["min_pixels"]


# ----------------------------------------------------------------------------------------------------------------
# overlong prompts


def test_overlong_prompts_count_image_tokens_and_are_filtered_or_rejected(vl25, caplog):
    tokenizer, processor = vl25
    rows = [
        {"prompt": "<image> Short.", "answer": "0", "images": [_image(56, 56)]},  # 4 image tokens
        {"prompt": "<image> Short.", "answer": "1", "images": [_image(112, 112)]},  # 16 image tokens
        {"prompt": "Short.", "answer": "2", "images": []},
        {"prompt": "<image> <image> Short.", "answer": "3", "images": [_image(112, 112)] * 2},
    ]
    lengths = [
        RLHFDataset([row], tokenizer, processor, max_prompt_length=512, **PIXELS).prompt_lengths[0] for row in rows
    ]
    assert lengths[1] - lengths[0] == 12  # the text is the same: the difference is image tokens
    limit = lengths[1] - 1  # rows 1 and 3 no longer fit, although their text does
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        dataset = RLHFDataset(rows, tokenizer, processor, max_prompt_length=limit, **PIXELS)
    assert [dataset[i]["ground_truth"] for i in range(len(dataset))] == ["0", "2"]
    assert dataset.num_filtered_overlong == 2
    assert f"Filtered out 2 of 4 prompts of in-memory rows longer than data.max_prompt_length={limit}" in caplog.text
    forked = RLHFDataset(
        rows, tokenizer, processor, max_prompt_length=limit, filter_overlong_prompts_workers=2, **PIXELS
    )
    assert forked.indices == dataset.indices and forked.prompt_lengths == dataset.prompt_lengths
    with pytest.raises(
        PromptTooLongError, match=rf"in-memory rows, row 1, key 'prompt': the prompt is {lengths[1]} tokens"
    ):
        RLHFDataset(rows, tokenizer, processor, max_prompt_length=limit, filter_overlong_prompts=False, **PIXELS)


def test_forked_scan_workers_end_quietly_under_the_runs_signal_handlers(text_tokenizer, capfd):
    """The run installs its preemption handlers before it loads the data; the scan's forked workers must not inherit
    them, or each one that the pool's shutdown sends SIGTERM prints "Stopped by SIGTERM" (it did, in most scans)."""
    from verl.trainer.preemption import RunSignals

    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(64)]
    with RunSignals().installed():
        scans = [
            RLHFDataset(rows, text_tokenizer, max_prompt_length=64, filter_overlong_prompts_workers=2)
            for _ in range(10)
        ]
    assert all(len(scan) == len(rows) for scan in scans)
    assert "Stopped by" not in capfd.readouterr().err


def test_the_scan_reads_rows_in_chunks_and_forks_a_worker_per_core_for_large_data(
    tmp_path, text_tokenizer, monkeypatch
):
    """Measuring every prompt at start took 43 s for 200,000 rows in one process (one worker was the default):
    unset, data.filter_overlong_prompts_workers forks one per 10,000 rows, up to the usable cores and 16; rows are
    read a chunk at a time. Every way of scanning finds the same rows, lengths and bad rows."""
    from verl.data import dataset as dataset_module
    from verl.data import row_scan
    from verl.data.sources import load_source

    monkeypatch.setattr(row_scan.os, "sched_getaffinity", lambda pid: set(range(32)))
    assert [row_scan.scan_workers(None, rows) for rows in (9_999, 10_000, 45_000, 10**6)] == [1, 1, 4, 16]
    assert row_scan.scan_workers(3, 10) == 3
    monkeypatch.setattr(row_scan.os, "sched_getaffinity", lambda pid: {0, 1})
    assert row_scan.scan_workers(None, 10**6) == 2

    rows = [{"prompt": "word " * (i % 40 + 1), "answer": i if i % 3 else str(i), "id": i} for i in range(700)]
    rows[5]["prompt"] = rows[600]["prompt"] = ""  # bad rows
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = load_source(str(path))
    assert source.rows_in(250, 520) == [source.row(i) for i in range(250, 520)]
    assert load_source(rows).rows_in(3, 9) == rows[3:9]

    monkeypatch.setattr(row_scan, "SCAN_CHUNK_ROWS", 64)  # several chunks a worker
    scans = [
        RLHFDataset(str(path), text_tokenizer, max_prompt_length=40, skip_bad_rows=True, **workers)
        for workers in ({"filter_overlong_prompts_workers": 1}, {"filter_overlong_prompts_workers": 2}, {})
    ]
    for scan in scans:
        assert scan.num_skipped_bad_rows == 2 and scan.num_filtered_overlong > 0
        assert (scan.indices, scan.prompt_lengths) == (scans[0].indices, scans[0].prompt_lengths)
    one = RLHFDataset(rows[:1], text_tokenizer, max_prompt_length=40)
    assert scans[0].prompt_lengths[0] == one.prompt_lengths[0]

    # a slice of rows with images decodes them all at once: media rows are read one at a time
    from types import SimpleNamespace

    reads, rows_in = [], type(source).rows_in
    monkeypatch.setattr(type(source), "rows_in", lambda self, a, b: reads.append(b - a) or rows_in(self, a, b))
    for has_media in (False, True):
        reads.clear()
        fake = SimpleNamespace(source=source, has_media=has_media, prompt_length=lambda index, row: len(row["prompt"]))
        assert dataset_module._scan_rows(fake, 1) == [(len(row["prompt"]), None) for row in rows]
        assert set(reads) == ({1} if has_media else {64, 700 % 64})


# ----------------------------------------------------------------------------------------------------------------
# bad rows


def test_each_bad_row_is_an_error_naming_file_row_and_key(tmp_path, vl25, caplog):
    tokenizer, processor = vl25
    _image(56, 56).save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"this is not a png")
    (tmp_path / "broken.mp4").write_bytes(b"this is not a video")
    good = {"prompt": "<image> Good.", "answer": "ok", "images": ["ok.png"]}
    cases = [
        ({"prompt": "<image> x", "answer": "a", "images": ["gone.png"]}, "images", "does not exist"),
        ({"prompt": "<image> x", "answer": "a", "images": ["broken.png"]}, "images", "cannot be read"),
        ({"prompt": "<image> x", "answer": "a", "images": [b"\x00\x01"]}, "images", "cannot be read"),
        ({"prompt": "<image> x", "answer": "a", "images": [3]}, "images", "must be a path, bytes"),
        ({"prompt": "x", "answer": "a", "images": 5}, "images", "expected a list"),
        ({"prompt": "<image> x", "answer": None, "images": ["ok.png"]}, "answer", "answer is missing"),
        ({"prompt": None, "answer": "a", "images": ["ok.png"]}, "prompt", "prompt is missing"),
        (
            {"prompt": ["x"], "answer": "a", "images": ["ok.png"]},
            "prompt",
            "message 0 of the prompt must be the user.s",
        ),
        (
            {"prompt": 3, "answer": "a", "images": ["ok.png"]},
            "prompt",
            "must be a string or a list of messages, got int",
        ),
        ({"prompt": " \n", "answer": "a", "images": ["ok.png"]}, "prompt", "prompt is empty"),
        ({"prompt": "<image> <image>", "answer": "a", "images": ["ok.png"]}, "images", "2 <image> marker"),
        # the processor's own token in the text (a pre-expanded dataset): StopIteration / TypeError in transformers
        (
            {"prompt": "<|vision_start|><|image_pad|><|vision_end|>x", "answer": "a", "images": ["ok.png"]},
            "prompt",
            "holds the processor's own media token '<.image_pad.>'",
        ),
        ({"prompt": "What is <|image_pad|>?", "answer": "a"}, "prompt", "own media token"),
        # already in the chat format: wrapped in the template a second time, with a fake empty assistant turn
        (
            {"prompt": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n", "answer": "4"},
            "prompt",
            "special token '<.im_start.>'",
        ),
        # a message list stored as its JSON text: the model was asked the JSON
        (
            {"prompt": '[{"role": "user", "content": "2+2?"}]', "answer": "4"},
            "prompt",
            "list of messages written as JSON",
        ),
        ({"prompt": "x", "answer": "a", "videos": ["gone.mp4"]}, "videos", "does not exist"),
        ({"prompt": "x", "answer": "a", "videos": ["broken.mp4"]}, "videos", "video 0 cannot be read"),
        ({"prompt": "x", "answer": "a", "videos": [b"raw"]}, "videos", "must be a path"),
    ]
    for bad, key, problem in cases:
        rows = [good, bad]
        with pytest.raises(DatasetRowError, match=rf"in-memory rows, row 1, key '{key}': .*{problem}"):
            RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        dataset = RLHFDataset(
            [good] + [bad for bad, _, _ in cases],
            tokenizer,
            processor,
            image_dir=str(tmp_path),
            skip_bad_rows=True,
            **PIXELS,
        )
    assert len(dataset) == 1 and dataset.num_skipped_bad_rows == len(cases)
    assert f"Skipped {len(cases)} bad row(s) of in-memory rows" in caplog.text
    assert dataset[0]["ground_truth"] == "ok"


def test_rows_beyond_the_engine_image_limit_and_a_missing_image_column_are_named(tmp_path, vl25, caplog):
    tokenizer, processor = vl25
    _image(56, 56).save(tmp_path / "ok.png")
    two = {"prompt": "<image><image> Compare.", "answer": "a", "images": ["ok.png", "ok.png"]}
    one = {"prompt": "<image> Count.", "answer": "b", "images": ["ok.png"]}
    kwargs = {"image_dir": str(tmp_path), **PIXELS}
    with pytest.raises(DatasetRowError, match=r"row 1, key 'images': the row has 2 images but worker.rollout.limit"):
        RLHFDataset([one, two], tokenizer, processor, limit_images=1, **kwargs)
    assert len(RLHFDataset([one, two], tokenizer, processor, limit_images=2, **kwargs)) == 2
    assert len(RLHFDataset([one, two], tokenizer, processor, limit_images=0, **kwargs)) == 2  # 0: no limit
    renamed = [{"prompt": row["prompt"], "answer": row["answer"], "pictures": row["images"]} for row in (one, two)]
    with pytest.raises(
        DatasetRowError, match=r"no column 'images' \(data.image_key\).*'pictures'.*Set data.image_key"
    ):
        RLHFDataset(renamed, tokenizer, processor, **kwargs)
    assert len(RLHFDataset(renamed, tokenizer, processor, image_key="pictures", **kwargs)) == 2
    # prompts without markers trained on their text alone, the pictures column never read, without a word
    unmarked = [{**row, "prompt": row["prompt"].replace("<image>", "")} for row in renamed]
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        assert len(RLHFDataset(unmarked, tokenizer, processor, **kwargs)) == 2
    assert "has no column 'images' (data.image_key) but has ['pictures']" in caplog.text
    assert "Set data.image_key=pictures" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        RLHFDataset(unmarked, tokenizer, processor, image_key="pictures", **kwargs)
    assert "data.image_key" not in caplog.text


def test_media_paths_stay_inside_image_dir_unless_allowed(tmp_path, vl25):
    tokenizer, processor = vl25
    images = tmp_path / "images"
    images.mkdir()
    _image(56, 56).save(images / "ok.png")
    _image(56, 56).save(tmp_path / "private.png")
    (images / "link.png").symlink_to(tmp_path / "private.png")
    kwargs = {"image_dir": str(images), **PIXELS}
    good = {"prompt": "<image> Count.", "answer": "1", "images": ["ok.png"]}
    assert len(RLHFDataset([good], tokenizer, processor, **kwargs)) == 1
    for escaping in ("../private.png", str(tmp_path / "private.png"), "link.png", {"path": "../private.png"}):
        row = {"prompt": "<image> Count.", "answer": "1", "images": [escaping]}
        with pytest.raises(DatasetRowError, match=r"row 1, key 'images': item 0 path .* leads outside data.image_dir"):
            RLHFDataset([good, row], tokenizer, processor, **kwargs)
        allowed = RLHFDataset([good, row], tokenizer, processor, allow_paths_outside_image_dir=True, **kwargs)
        assert len(allowed) == 2


def test_an_image_dir_in_a_hugging_face_cache_snapshot_reads_its_blobs(tmp_path, vl25):
    """A snapshot's files are symlinks into the repository's blobs/: every row was refused as leading outside
    data.image_dir. Its blobs are inside; another repository's blobs and files beside the cache are not."""
    tokenizer, processor = vl25
    repo = tmp_path / "hub" / "datasets--me--pics"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "images").mkdir(parents=True)
    _image(56, 56).save(repo / "blobs" / "f00d.png")
    (repo / "snapshots" / "abc123" / "images" / "one.png").symlink_to(repo / "blobs" / "f00d.png")
    other = tmp_path / "hub" / "datasets--someone--else" / "blobs"
    other.mkdir(parents=True)
    _image(56, 56).save(other / "beef.png")
    (repo / "snapshots" / "abc123" / "images" / "theirs.png").symlink_to(other / "beef.png")
    kwargs = {"image_dir": str(repo / "snapshots" / "abc123"), **PIXELS}
    good = {"prompt": "<image> Count.", "answer": "1", "images": ["images/one.png"]}
    assert len(RLHFDataset([good], tokenizer, processor, **kwargs)) == 1
    theirs = {"prompt": "<image> Count.", "answer": "1", "images": ["images/theirs.png"]}
    with pytest.raises(DatasetRowError, match=r"row 1, key 'images': item 0 path .* leads outside data.image_dir"):
        RLHFDataset([good, theirs], tokenizer, processor, **kwargs)


def test_bad_rows_in_a_file_name_the_file(tmp_path, text_tokenizer, vl25):
    path = _write_jsonl(str(tmp_path / "train.jsonl"), [ROWS[0], {"prompt": "hi", "answer": None, "level": 1}])
    with pytest.raises(DatasetRowError, match=rf"file '{path}', row 1, key 'answer': the answer is missing"):
        RLHFDataset(path, text_tokenizer)
    tokenizer, processor = vl25
    image_rows = _write_jsonl(
        str(tmp_path / "images.jsonl"), [{"prompt": "<image>", "answer": "a", "images": ["x.png"]}]
    )
    with pytest.raises(
        DatasetRowError, match=r"images\.jsonl', row 0, key 'images': image 0 cannot be read: .*x\.png"
    ):
        RLHFDataset(image_rows, tokenizer, processor)
    with pytest.raises(DatasetRowError, match="model is text-only"):
        RLHFDataset(image_rows, text_tokenizer)
    assert os.path.isfile(path)


def test_parquet_with_an_image_feature_column(tmp_path, vl25):
    """The layout of Hub datasets such as geometry3k: a list of `datasets.Image` values stored as bytes in parquet."""
    tokenizer, processor = vl25
    features = datasets.Features(
        {"problem": datasets.Value("string"), "answer": datasets.Value("string"), "images": [datasets.Image()]}
    )
    table = datasets.Dataset.from_dict(
        {
            "problem": ["<image> How many sides?", "No picture here."],
            "answer": ["3", "0"],
            "images": [[{"bytes": _png_bytes(_image(84, 56)), "path": None}], []],
        },
        features=features,
    )
    path = str(tmp_path / "geo.parquet")
    table.to_parquet(path)
    dataset = RLHFDataset(path, tokenizer, processor, prompt_key="problem", max_prompt_length=64, **PIXELS)
    first, second = dataset[0], dataset[1]
    assert first["multi_modal_data"]["images"][0].size == resize_image(_image(84, 56), **PIXELS).size
    assert first["raw_prompt_ids"].count(processor.image_token_id) == 1
    assert second["multi_modal_data"] is None and "problem" not in first


def test_a_model_trained_on_text_only_refuses_an_image_row_naming_it_and_takes_text(tmp_path):
    """Gemma 3 4B-27B (gemma3) has an image processor, but its image tokens attend both ways, which the trainer does
    not reproduce: a row with an image is a data error naming the row, text rows train."""
    path = get_or_build_tiny_model("gemma3", str(tmp_path / "models"))
    tokenizer, processor = get_tokenizer(path), get_processor(path)
    Image.new("RGB", (56, 56)).save(tmp_path / "a.png")
    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "<image>How many?", "answer": "1", "images": ["a.png"]}]
    dataset = RLHFDataset(rows[:1], tokenizer, processor, image_dir=str(tmp_path), max_prompt_length=64)
    assert dataset[0]["multi_modal_data"] is None and dataset[0]["input_ids"][-1] != tokenizer.pad_token_id
    with pytest.raises(DatasetRowError, match=r"row 1, key 'images': the model \('gemma3'\) is trained on text only"):
        RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), max_prompt_length=64)


@pytest.mark.parametrize("column", ["uid", "multi_modal_inputs"])
def test_a_column_named_like_the_trainers_own_data_is_refused(text_tokenizer, column):
    """multi_modal_inputs was not reserved: the dataset's value reached the actor as the processor's inputs."""
    with pytest.raises(ValueError, match=rf"has column\(s\) \['{column}'\], whose names the trainer uses"):
        RLHFDataset([{"prompt": "hi", "answer": "1", column: ["junk"]}], text_tokenizer)


OPEN_ENDED_REWARD = """
def score(reward_inputs):
    assert all(sample["ground_truth"] is None for sample in reward_inputs), reward_inputs
    return [{"overall": float(len(sample["response"]))} for sample in reward_inputs]
"""


def test_open_ended_prompts_without_an_answer_column(tmp_path, text_tokenizer):
    """data.answer_key=null reads prompts that have no reference answer (scored by a reward model, a judge or a
    function that needs none): every sample's ground_truth is None, and the builtin math grading refuses it by name
    instead of grading against the text "None"."""
    from verl.rewards.manager import FunctionRewardManager
    from verl.rewards.math_grading import acceptable_answers
    from verl.trainer.config import PPOConfig, fill_derived
    from verl.utils.config import command_line_sources, merge_config
    from verl.workers.config import RewardConfig

    rows = [{"prompt": "Write a haiku."}, {"prompt": "Describe the sea."}]
    with pytest.raises(ValueError, match="has no column 'answer' \\(data.answer_key\\)"):
        RLHFDataset(rows, text_tokenizer)
    dataset = RLHFDataset(rows, text_tokenizer, answer_key=None)
    assert _answers(dataset) == [None, None]
    batch = _rollout(dataset, ["a", "bb", "ccc", "dddd"], n=2)
    path = tmp_path / "open_reward.py"
    path.write_text(OPEN_ENDED_REWARD)
    manager = FunctionRewardManager(RewardConfig(reward_function=f"{path}:score", answer_key=None), text_tokenizer)
    try:
        _, metrics = manager.compute_reward(batch)
    finally:
        manager.close()
    assert metrics["overall"] == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="no reference answer .*data.answer_key=null"):
        acceptable_answers(None)
    config = fill_derived(merge_config(PPOConfig, command_line_sources(["data.answer_key=null"])))
    assert config.data.answer_key is None and config.worker.reward.answer_key is None
