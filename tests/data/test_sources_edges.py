# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.data.sources that the source tests leave open (found by a mutation audit of verl/data)."""

import json
import logging

import datasets
import pytest

from verl.data.sources import load_source, split_prompt_messages


def _jsonl(path, prompts):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": prompt, "answer": "1"}) + "\n" for prompt in prompts))
    return path


def _prompts(spec):
    source = load_source(str(spec))
    return [source.row(i)["prompt"] for i in range(len(source))]


def test_a_files_first_row_is_named_as_that_files_row_0(tmp_path):
    _jsonl(tmp_path / "data" / "a.jsonl", ["a0", "a1"])
    _jsonl(tmp_path / "data" / "b.jsonl", ["b0", "b1"])
    source = load_source(str(tmp_path / "data"))
    assert [source.where(i) for i in (1, 2, 3)] == [
        f"file '{tmp_path / 'data' / 'a.jsonl'}', row 1",
        f"file '{tmp_path / 'data' / 'b.jsonl'}', row 0",
        f"file '{tmp_path / 'data' / 'b.jsonl'}', row 1",
    ]


def test_hidden_folders_of_a_data_folder_are_left_out(tmp_path):
    _jsonl(tmp_path / "data" / "a.jsonl", ["a"])
    _jsonl(tmp_path / "data" / ".ipynb_checkpoints" / "a-checkpoint.jsonl", ["stale copy"])
    assert _prompts(tmp_path / "data") == ["a"]


def test_a_files_own_split_name_wins_over_its_folders(tmp_path):
    """`eval/train.jsonl`: the nearest name (the file's) carries the split, the folder above it is its config."""
    _jsonl(tmp_path / "data" / "eval" / "train.jsonl", ["t"])
    assert _prompts(f"{tmp_path / 'data'}@train") == ["t"]


def test_an_upper_case_extension_is_read(tmp_path):
    _jsonl(tmp_path / "TRAIN.JSONL", ["upper"])
    assert _prompts(tmp_path / "TRAIN.JSONL") == ["upper"]


def test_a_path_under_the_home_folder_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _jsonl(tmp_path / "rows.jsonl", ["home"])
    assert _prompts("~/rows.jsonl") == ["home"]


def test_a_file_in_a_folder_whose_name_holds_an_at_sign_reads_with_its_split(tmp_path):
    path = _jsonl(tmp_path / "v1@2024" / "rows.jsonl", ["at"])
    assert _prompts(f"{path}@train") == ["at"]


def test_in_memory_rows_have_the_columns_of_every_row():
    source = load_source([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2", "level": 3}])
    assert source.columns == ["prompt", "answer", "level"]


def test_a_folder_of_several_splits_lists_them_train_validation_test(tmp_path):
    for split in ("test", "validation", "train"):
        _jsonl(tmp_path / "data" / f"{split}.jsonl", [split])
    with pytest.raises(ValueError, match=r"its file names carry train, validation, test\); choose one as"):
        load_source(str(tmp_path / "data"))


def test_a_compressed_file_with_an_upper_case_name_is_named_as_left_out(tmp_path, caplog):
    _jsonl(tmp_path / "data" / "a.jsonl", ["a"])
    (tmp_path / "data" / "B.JSONL.GZ").write_bytes(b"\x1f\x8b")
    with caplog.at_level(logging.WARNING, logger="verl.data.sources"):
        assert _prompts(tmp_path / "data") == ["a"]
    assert "1 file(s) in a format not read here are left out" in caplog.text and "B.JSONL.GZ" in caplog.text


def test_a_bad_line_of_json_lines_in_a_json_file_is_named_by_its_line_and_row(tmp_path):
    """datasets reads JSON Lines written to a .json file: its second value is no "Extra data" but the next row."""
    path = tmp_path / "rows.json"
    path.write_text('{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": }\n')
    with pytest.raises(ValueError, match=r"is not valid JSON: line 2 \(row 1\), column 27: Expecting value\.$"):
        load_source(str(path))


def test_a_saved_dataset_of_one_split_takes_its_own_split_name_and_refuses_another(tmp_path):
    """EasyR1 configs name a split (`path@train`), which a file takes; a folder written by Dataset.save_to_disk
    refused it ("write it without '@train'"). Its own split name is taken (`train` for a dataset of none, as a file's
    rows are), another is refused, naming the one it holds."""
    datasets.Dataset.from_list([{"prompt": "a", "answer": "1"}]).save_to_disk(str(tmp_path / "saved"))
    assert _prompts(tmp_path / "saved") == ["a"]
    assert [row["prompt"] for row in load_source(f"{tmp_path / 'saved'}@train").rows] == ["a"]
    with pytest.raises(ValueError, match=r"holds a single split, 'train' \(read whole\); write it without '@test'"):
        load_source(f"{tmp_path / 'saved'}@test")
    datasets.Dataset.from_list([{"prompt": "b", "answer": "2"}], split="test").save_to_disk(str(tmp_path / "test"))
    assert [row["prompt"] for row in load_source(f"{tmp_path / 'test'}@test").rows] == ["b"]
    with pytest.raises(ValueError, match=r"holds a single split, 'test' \(read whole\); write it without '@train'"):
        load_source(f"{tmp_path / 'test'}@train")


def test_an_empty_dataset_path_is_called_empty():
    with pytest.raises(ValueError, match=r"^The dataset path is empty; give a local file or directory"):
        load_source("")


def test_files_of_a_folder_where_one_has_a_column_more_are_read_with_it_missing_in_the_other(tmp_path):
    for folder, columns in (("more_last", ({}, {"level": 3})), ("more_first", ({"level": 3}, {}))):
        for name, extra in zip(("a", "b"), columns):
            path = tmp_path / folder / f"{name}.jsonl"
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps({"prompt": name, "answer": "1", **extra}) + "\n")
        source = load_source(str(tmp_path / folder))
        levels = [source.row(i)["level"] for i in range(len(source))]
        assert levels == ([None, 3] if folder == "more_last" else [3, None]), folder


# ----------------------------------------------------------------------------------------------------------------
# prompts given as chat messages, and tool schemas


def test_blank_or_empty_tools_are_no_tools_and_a_nameless_tool_is_named():
    from verl.data.sources import tool_schemas

    assert tool_schemas("  ") is None and tool_schemas([], template_reads_tools=False) is None
    with pytest.raises(ValueError, match=r"^tool 1 has no name"):
        tool_schemas([{"name": "a"}, {"type": "function", "function": {"description": "adds"}}])


def test_tool_calls_an_empty_list_or_arguments_left_out_are_no_calls_and_no_arguments():
    from verl.data.sources import with_tool_calls

    assert with_tool_calls({"role": "user", "content": "hi", "tool_calls": []}) == {"role": "user", "content": "hi"}
    call = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "now", "arguments": " "}}]}
    assert with_tool_calls(call) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "now", "arguments": {}}}],
    }
    bare = {"role": "assistant", "content": "", "tool_calls": [{"name": "now"}]}
    assert with_tool_calls(bare)["tool_calls"][0]["function"] == {"name": "now", "arguments": {}}
    with pytest.raises(ValueError, match="tool_calls must be a list, on an assistant message"):
        with_tool_calls({"role": "user", "content": "hi", "tool_calls": [{"name": "now"}]})


def test_a_message_with_a_role_keeps_it_beside_sharegpt_like_keys():
    from verl.data.sources import split_prompt_messages

    messages = [
        {"role": "system", "content": "Be brief.", "from": "gpt", "value": "x"},
        {"role": "user", "content": "Hi"},
    ]
    assert split_prompt_messages(messages) == ([{"role": "system", "content": "Be brief."}], "Hi")


def test_a_parquet_file_cut_short_or_without_rows_is_named_and_never_read_as_csv(tmp_path):
    # an interrupted download, or a filter that kept no rows: both failed with a UnicodeDecodeError naming no file
    whole = tmp_path / "whole.parquet"
    datasets.Dataset.from_list([{"prompt": "x" * 100, "answer": "1"}] * 50).to_parquet(str(whole))
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"Could not read dataset file '{cut}': .*Check that it is valid parquet"):
        load_source(str(cut))
    empty = tmp_path / "empty.parquet"
    datasets.Dataset.from_dict({"prompt": [], "answer": []}).to_parquet(str(empty))
    with pytest.raises(ValueError, match=rf"Dataset file '{empty}' has no rows"):
        load_source(str(empty))
    text = tmp_path / "text.parquet"  # CSV under a Parquet name: refused, not read as CSV
    text.write_text("prompt,answer\nhello,1\n")
    with pytest.raises(ValueError, match=rf"Could not read dataset file '{text}'"):
        load_source(str(text))


def test_a_few_shot_turns_older_function_call_is_kept_as_its_tool_call():
    # OpenAI's older `function_call` in an RL prompt's few-shot turn: kept as `tool_calls` (it was dropped, leaving
    # the turn's text alone in the prompt the model saw)
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "function_call": function},
        {"role": "tool", "content": "Sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "And in Rome?"},
    ]
    context, last = split_prompt_messages(messages)
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    assert context[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert last == "And in Rome?"
