# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Dataset files that hold no rows (empty, blank, `[]`, a CSV header only) are named as such, not as a parse error
with an empty reason."""

import json
import logging
import os
import re
import subprocess
import sys

import datasets
import pytest

from verl.data.sources import load_source


@pytest.mark.parametrize("name", ["train.jsonl", "train.json", "train.parquet", "train.csv"])
@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_file_is_called_empty(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError) as excinfo:
        load_source(str(path))
    assert str(excinfo.value) == f"Dataset file '{path}' is empty; give a file with at least one row."


@pytest.mark.parametrize(("name", "content"), [("train.json", "[]"), ("train.csv", "prompt,answer\n")])
def test_a_file_with_no_rows_says_so(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"^Dataset file '{path}' has no rows .*; add rows to it\.$"):
        load_source(str(path))


def test_an_empty_file_in_a_directory_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text(json.dumps({"prompt": "hi", "answer": "1"}) + "\n")
    (data / "b.jsonl").write_text("")
    with pytest.raises(ValueError, match=rf"^Dataset file '{data / 'b.jsonl'}' is empty"):
        load_source(str(data))
    (data / "b.jsonl").write_text(json.dumps({"prompt": "ho", "answer": "2"}) + "\n")
    assert len(load_source(str(data))) == 2


def test_a_file_that_is_not_valid_json_names_the_line(tmp_path):
    """datasets says only "An error occurred while generating the dataset": one bad line of a large file was not
    found."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "hi", "answer": "1"}\n\n{"prompt": "hi", "answer": \n{"prompt": "ho"}\n')
    message = rf"^Dataset file '{path}' is not valid JSON: line 3 \(row 1\), column 28: Expecting value\.$"
    with pytest.raises(ValueError, match=message):
        load_source(str(path))
    # datasets' own log line came first ("Failed to load JSON from file ... in row 1"), in a process of its own
    path.write_text('{"prompt": "hi", "answer": "1"}\n{"prompt": "x"\n')
    code = (
        f"from verl.data.sources import load_source\ntry: load_source({str(path)!r})\nexcept ValueError as e: print(e)"
    )
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=repo)
    assert "is not valid JSON: line 2 (row 1), column 15: Expecting ','" in proc.stdout, proc.stderr[-2000:]
    assert "Failed to load JSON" not in proc.stderr
    path = tmp_path / "train.json"
    path.write_text('[{"prompt": "hi", "answer": "1"},\n {"prompt": "hi" "answer": "2"}]')
    with pytest.raises(
        ValueError, match=rf"^Dataset file '{path}' is not valid JSON: line 2, column 18: Expecting ','"
    ):
        load_source(str(path))
    # valid JSON that is no row of columns: datasets said only "An error occurred while generating the dataset"
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "hi", "answer": "1"}\n["hi", "2"]\n')
    with pytest.raises(ValueError, match=r"line 2 \(row 1\) is a JSON list, not an object of columns\.$"):
        load_source(str(path))
    path.write_text('{"prompt": "hi", "answer": "1"}\n{"prompt": "a", "answer": "1", "prompt": "b"}\n')
    with pytest.raises(ValueError, match=r"line 2 \(row 1\): an object repeats the key\(s\) \['prompt'\]\.$"):
        load_source(str(path))
    path = tmp_path / "train.csv"  # other formats: datasets' reason
    path.write_text('prompt,answer\n"hi,1\n')
    with pytest.raises(
        ValueError, match=rf"^Could not read dataset file '{path}': .+\. Check that it is valid csv\.$"
    ):
        load_source(str(path))


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("train.jsonl", b'{"prompt": "a", "answer": "1"}\n\n{"prompt": "caf\xe9", "answer": "2"}\n', "line 3 (row 1)"),
        ("train.json", b'[{"prompt": "a", "answer": "1"},\n {"prompt": "caf\xe9", "answer": "2"}]', "line 2"),
        ("train.csv", b"prompt,answer\na,1\ncaf\xe9,2\n", "line 3"),
    ],
)
def test_a_byte_that_is_not_utf8_names_the_file_and_the_line(tmp_path, name, content, where):
    path = tmp_path / name
    path.write_bytes(content)  # one Latin-1 'e acute'
    with pytest.raises(
        ValueError, match=rf"^Dataset file '{path}' is not UTF-8: {re.escape(where)}, column \d+ has the byte 0xe9"
    ) as error:
        rows = load_source(str(path))
        [rows.row(i) for i in range(len(rows))]  # today the bytes load, and reading the row fails
    assert "iconv -f latin1 -t utf-8" in str(error.value)


def test_a_utf16_file_and_a_ragged_csv_row_are_named_with_what_fixes_them(tmp_path):
    """A UTF-16 file (PowerShell's `>`) was called Latin-1, whose iconv advice gave garbage; a CSV row with an extra
    field said only "Check that it is valid csv", its line in a log line above."""
    utf16 = tmp_path / "train.jsonl"
    utf16.write_bytes('{"prompt": "a", "answer": "1"}\n'.encode("utf-16"))
    with pytest.raises(ValueError, match=r"is UTF-16 \(it starts with that byte-order mark\).*iconv -f utf-16"):
        load_source(str(utf16))
    ragged = tmp_path / "train.csv"
    ragged.write_text("prompt,answer\nWhat is 1 + 1?,2\nWhat is 2,000 + 1?,2001\n")
    with pytest.raises(ValueError, match=r"Could not read dataset file .*Expected 2 fields in line 3, saw 3"):
        rows = load_source(str(ragged))
        [rows.row(i) for i in range(len(rows))]


def test_a_local_file_with_easyr1s_train_split_loads_and_another_split_is_named(tmp_path):
    """`data.jsonl@train` (EasyR1's configs) went to the hub loader: "Couldn't find any data file" for a file that
    exists."""
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n')
    assert load_source(f"{path}@train").row(0)["prompt"] == "a"
    with pytest.raises(ValueError, match=r"a file holds one split, read whole; write .*data.jsonl' alone"):
        load_source(f"{path}@test")


def test_utf8_text_and_a_byte_order_mark_load(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(
        "\ufeff".encode() + json.dumps({"prompt": "café ∑", "answer": "1"}, ensure_ascii=False).encode() + b"\n"
    )
    assert load_source(str(path)).row(0)["prompt"] == "café ∑"


def test_answers_reach_the_trainer_as_the_file_wrote_them(tmp_path):
    """A JSON column with a number in one row and text in others (datasets' Json type) read every string that parses
    as JSON as that value: "[1, 2]" became a list (an interval graded as either endpoint), "007" became 7. CSV cells
    are text: "1.50" stayed 1.5 as a float before."""
    rows = [{"prompt": "a", "answer": "[1, 2]"}, {"prompt": "b", "answer": "007"}, {"prompt": "c", "answer": 2}]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "mixed.json").write_text(json.dumps(rows + [{"prompt": "d", "answer": "null"}]))
    (tmp_path / "cells.csv").write_text("prompt,answer\na,007\nb,1.50\n")
    for name, expected in (
        ("mixed.jsonl", ["[1, 2]", "007", 2]),
        ("mixed.json", ["[1, 2]", "007", 2, "null"]),
        ("cells.csv", ["007", "1.50"]),
    ):
        source = load_source(str(tmp_path / name))
        assert [source.row(i)["answer"] for i in range(len(source))] == expected, name
    # the same with a byte-order mark (Excel's "CSV UTF-8"; 007 read as 7 there), and a raw U+2028 in a JSON Lines
    # string (a bare JSONDecodeError: the file's lines were split at it)
    (tmp_path / "bom.csv").write_bytes("\ufeffanswer,prompt\n007,a\n1.50,b\n".encode())
    (tmp_path / "bom.jsonl").write_bytes(("\ufeff" + (tmp_path / "mixed.jsonl").read_text()).encode())
    raw = [{"prompt": "line\u2028sep\rx", "answer": "007"}, {"prompt": "b", "answer": 2}]
    (tmp_path / "raw.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in raw))
    (tmp_path / "crlf.jsonl").write_bytes((tmp_path / "mixed.jsonl").read_bytes().replace(b"\n", b"\r\n"))
    (tmp_path / "bom.json").write_bytes(("\ufeff" + (tmp_path / "mixed.json").read_text()).encode())
    for name, expected in (
        ("bom.csv", ["007", "1.50"]),
        ("bom.jsonl", ["[1, 2]", "007", 2]),
        ("raw.jsonl", ["007", 2]),
        ("crlf.jsonl", ["[1, 2]", "007", 2]),
        ("bom.json", ["[1, 2]", "007", 2, "null"]),
    ):
        source = load_source(str(tmp_path / name))
        assert [source.row(i)["answer"] for i in range(len(source))] == expected, name
    # a file whose only column is mixed (a traceback from pyarrow: "Failed to concatenate on axis=1")
    only = [{"messages": [{"role": "user", "content": "a"}]}, {"messages": "hello"}]
    (tmp_path / "only.jsonl").write_text("".join(json.dumps(row) + "\n" for row in only))
    source = load_source(str(tmp_path / "only.jsonl"))
    assert [source.row(i)["messages"] for i in range(len(source))] == [only[0]["messages"], "hello"]


def test_numeric_answers_reach_the_reward_as_written(tmp_path):
    """An integer past int64, or past 2**53 beside a fraction in its column, was read as a float: the answer
    12345678901234567891 reached the reward as "12345678901234567168" and a correct response scored 0."""
    from verl.data.sources import ground_truth, row_value

    (tmp_path / "big.jsonl").write_text('{"a": 12345678901234567891, "b": 9007199254740993}\n{"a": 3, "b": 0.5}\n')
    (tmp_path / "big.json").write_text('[{"a": 9007199254740993, "b": 1}, {"a": -0.25, "b": 2}]')
    expected = {"big.jsonl": [("12345678901234567891", "9007199254740993"), ("3", "0.5")]}
    expected["big.json"] = [("9007199254740993", "1"), ("-0.25", "2")]
    for name, rows in expected.items():
        source = load_source(str(tmp_path / name))
        got = [(ground_truth(source.row(i)["a"]), ground_truth(source.row(i)["b"])) for i in range(len(source))]
        assert got == rows, name
    # lists of accepted answers: [4] beside [3, 0.5] was read as [4.0], and "Answer: 4" scored -1 in dapo.py
    (tmp_path / "lists.jsonl").write_text('{"a": [3, 0.5]}\n{"a": [4]}\n')
    source = load_source(str(tmp_path / "lists.jsonl"))
    answers = [ground_truth(source.row(i)["a"]) for i in range(len(source))]
    assert [[str(item) for item in answer] for answer in answers] == [["3", "0.5"], ["4"]]
    # ... in a dict's field (verl's reward_model.ground_truth) or a list
    (tmp_path / "nested.jsonl").write_text(
        '{"reward_model": {"ground_truth": 12345678901234567891}, "a": [9007199254740993]}\n'
        '{"reward_model": {"ground_truth": 0.5}, "a": [0.5]}\n'
    )
    source = load_source(str(tmp_path / "nested.jsonl"))
    assert ground_truth(row_value(source.row(0), "reward_model.ground_truth")) == "12345678901234567891"
    assert [str(item) for item in ground_truth(source.row(0)["a"])] == ["9007199254740993"]
    assert ground_truth(row_value(source.row(1), "reward_model.ground_truth")) == "0.5"
    # a float column of plain sizes keeps datasets' own type
    (tmp_path / "small.jsonl").write_text('{"a": 3}\n{"a": 0.5}\n')
    assert load_source(str(tmp_path / "small.jsonl")).row(0)["a"] == 3.0
    # a small answer as it is written, not as Python writes its float ("1e-05": math-verify read it as e - 5, and an
    # exact match of "0.00001" failed)
    (tmp_path / "tiny.jsonl").write_text('{"a": 0.00001}\n{"a": -0.000025}\n{"a": 0.5}\n')
    source = load_source(str(tmp_path / "tiny.jsonl"))
    assert [ground_truth(source.row(i)["a"]) for i in range(len(source))] == ["0.00001", "-0.000025", "0.5"]


def test_several_files_or_a_pattern_are_refused_with_how_to_train_on_several_files(tmp_path):
    """verl's list of files and a glob were refused as a path that does not exist, which says nothing of a folder."""
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"prompt": "q", "answer": "1"}\n')
    for spec in (f"{tmp_path}/a.jsonl,{tmp_path}/b.jsonl", f"{tmp_path}/*.jsonl"):
        with pytest.raises(FileNotFoundError, match="put them .* in one folder and give the folder"):
            load_source(spec)


def test_integral_answers_inside_nested_lists_and_dicts_reach_the_reward_as_ints(tmp_path):
    """A column's type is one for all rows: [[1, 2]] beside [[0.5]], or {"x": 4} beside {"x": 0.5}, was read with
    floats, and the reward got [[1.0, 2.0]] and {"x": 4.0} (str() of them failed an exact match of "4")."""
    from verl.data.sources import ground_truth

    (tmp_path / "nested.jsonl").write_text(
        '{"a": [[1, 2], [3]], "b": {"x": 4, "y": [2]}}\n{"a": [[0.5]], "b": {"x": 0.5, "y": [0.25]}}\n'
    )
    source = load_source(str(tmp_path / "nested.jsonl"))
    answers = [(ground_truth(source.row(i)["a"]), ground_truth(source.row(i)["b"])) for i in range(len(source))]
    assert repr(answers) == repr([([[1, 2], [3]], {"x": 4, "y": [2]}), ([[0.5]], {"x": 0.5, "y": [0.25]})])


def test_csv_text_that_pandas_reads_as_missing_is_read_as_written(tmp_path):
    """pandas (datasets' CSV reader) reads the cells None, NA, nan, N/A and null as missing: a row whose answer is
    "None" was a row without an answer (refused). Only an empty cell is missing now; a number column stays numbers."""
    (tmp_path / "na.csv").write_text(
        "prompt,answer,level\na,None,1\nb,NA,2\nc,nan,3\nd,N/A,4\ne,null,5\nf,,6\ng,x,7\n"
    )
    source = load_source(str(tmp_path / "na.csv"))
    assert [source.row(i)["answer"] for i in range(len(source))] == ["None", "NA", "nan", "N/A", "null", None, "x"]
    assert [source.row(i)["level"] for i in range(len(source))] == [1, 2, 3, 4, 5, 6, 7]


def test_a_csv_number_column_with_an_empty_cell_stays_numbers(tmp_path):
    """An empty cell (missing) was compared as None with "" and every cell of its column was read as text: a row's
    response cap "16", a score "0.5". An integer column with a gap is read as floats (16.0, written "16")."""
    (tmp_path / "gaps.csv").write_text("prompt,answer,max_response_tokens,score\na,1,16,0.5\nb,2,,\nc,3,8.0,1.5\n")
    source = load_source(str(tmp_path / "gaps.csv"))
    rows = [source.row(i) for i in range(len(source))]
    assert [row["score"] for row in rows] == [0.5, None, 1.5]
    assert [row["max_response_tokens"] for row in rows] == [16, None, 8]
    assert all(isinstance(row["max_response_tokens"], (float, type(None))) for row in rows)
    # text beside a gap stays as written
    (tmp_path / "text.csv").write_text("prompt,answer\na,007\nb,\nc,1.50\n")
    source = load_source(str(tmp_path / "text.csv"))
    assert [source.row(i)["answer"] for i in range(len(source))] == ["007", None, "1.50"]


def test_json_lines_with_blank_lines_or_a_late_mixed_column_are_read(tmp_path):
    """datasets looks for columns of mixed types only in a file's first 10 MB and only where every line parses: a file
    with a blank line (one at its end is common) and answers that are numbers in some rows and text in others did not
    load ("changed from string to number ... Check that it is valid json"), nor a larger file whose answers turn to
    text after its first 10 MB ("Failed to parse string: '"x/2"' as a scalar of type int64")."""
    late = tmp_path / "late.jsonl"
    late.write_text(
        "".join(json.dumps({"prompt": "p" * 2000, "answer": i}) + "\n" for i in range(5300))
        + json.dumps({"prompt": "last", "answer": "x/2", "level": "007"})
        + "\n"
    )
    assert late.stat().st_size > 10 << 20
    source = load_source(str(late))
    assert len(source) == 5301 and source.row(3) == {"prompt": "p" * 2000, "answer": 3, "level": None}
    assert source.row(5300) == {"prompt": "last", "answer": "x/2", "level": "007"}
    # a CSV file's chunks of 10,000 rows each get their own types: numbers, then text, did not load
    rows = [f"q{i},{i},{i % 7 or ''},0.5" for i in range(12000)] + ["last,x/2,3,1.25"]
    (tmp_path / "late.csv").write_text("prompt,answer,cap,score\n" + "\n".join(rows) + "\n")
    source = load_source(str(tmp_path / "late.csv"))
    assert len(source) == 12001
    assert source.row(3) == {"prompt": "q3", "answer": "3", "cap": 3, "score": 0.5}
    assert source.row(7)["cap"] is None and source.row(12000) == {
        "prompt": "last",
        "answer": "x/2",
        "cap": 3,
        "score": 1.25,
    }
    text = '{"prompt": "a", "answer": "x/2"}\n\n{"prompt": "b", "answer": 2}\n'
    for name, content in (
        ("inside.jsonl", text),
        ("end.jsonl", text.replace("\n\n", "\n") + "\n"),
        ("crlf.json", text),
    ):
        (tmp_path / name).write_bytes(content.replace("\n", "\r\n" if name == "crlf.json" else "\n").encode())
        source = load_source(str(tmp_path / name))
        assert [source.row(i) for i in range(len(source))] == [
            {"prompt": "a", "answer": "x/2"},
            {"prompt": "b", "answer": 2},
        ], name
    # a file that is not valid JSON Lines is still named as such
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "answer": "x"}\n\n{"prompt": "b", "answer": 2\n')
    with pytest.raises(ValueError, match=r"is not valid JSON: line 3 \(row 1\)"):
        load_source(str(tmp_path / "bad.jsonl"))


def test_ndjson_is_read_and_unread_formats_in_a_folder_are_named(tmp_path, caplog):
    """`.ndjson` is JSON Lines; a folder's compressed shards were skipped without a word (1 of 3 files trained on)."""
    import gzip

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    (folder / "b.ndjson").write_text(json.dumps({"prompt": "b", "answer": "2"}) + "\n")
    (folder / "c.jsonl.gz").write_bytes(gzip.compress(json.dumps({"prompt": "c", "answer": "3"}).encode()))
    (folder / "README.md").write_text("# not data\n")
    with caplog.at_level(logging.WARNING, logger="verl.data.sources"):
        source = load_source(str(folder))
    assert [source.row(i)["prompt"] for i in range(len(source))] == ["a", "b"]
    warning = " ".join(record.getMessage() for record in caplog.records)
    assert "1 file(s) in a format not read here" in warning and "c.jsonl.gz" in warning and "README" not in warning
    only = tmp_path / "only"
    only.mkdir()
    (only / "c.jsonl.gz").write_bytes((folder / "c.jsonl.gz").read_bytes())
    with pytest.raises(ValueError, match=r"holds no .*c\.jsonl\.gz are in a format not read here"):
        load_source(str(only))


def _write_rows(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def _questions(spec):
    source = load_source(str(spec))
    return [source.row(i)["question"] for i in range(len(source))]


def test_a_hub_download_folder_never_mixes_splits_or_configs(tmp_path):
    """A folder as the hub lays out gsm8k (a subfolder per config, each with train and test shards, a README naming
    the configs) was read whole: the test split trained on, the two configs mixed, with an INFO line only."""
    folder = tmp_path / "gsm8k"
    for config in ("main", "socratic"):
        for split, count in (("train", 3), ("test", 2)):
            rows = [{"question": f"{config}-{split}-{i}", "answer": str(i)} for i in range(count)]
            _write_rows(folder / config / f"{split}-00000-of-00001.parquet", rows)
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files: main/train-*\n---\n")
    for spec in (folder, f"{folder}@train"):
        with pytest.raises(ValueError) as error:
            load_source(str(spec))
        assert str(error.value) == (
            f"Dataset '{spec}' holds several configs, subfolders each with its own splits, which must not be mixed: "
            f"main (train, test), socratic (train, test). Name a config and a split, as '{folder}/main@train'."
        )
    with pytest.raises(ValueError) as error:
        load_source(str(folder / "main"))
    assert str(error.value) == (
        f"Dataset directory '{folder}/main' holds several splits, which must not be mixed (its file names carry "
        f"train, test); choose one as '{folder}/main@train' or '{folder}/main@test'."
    )
    with pytest.raises(ValueError, match=r"has no split 'validation' \(its file names carry train, test\)"):
        load_source(f"{folder}/main@validation")
    assert _questions(f"{folder}/main@train") == ["main-train-0", "main-train-1", "main-train-2"]
    assert _questions(f"{folder}/socratic@test") == ["socratic-test-0", "socratic-test-1"]


def test_split_names_in_file_and_folder_names_pick_the_split(tmp_path):
    """`datasets`' split words (train, validation/dev/val, test/eval, ...) in a file's or a folder's name."""
    flat, nested = tmp_path / "flat", tmp_path / "nested"
    _write_rows(flat / "gsm8k_train.parquet", [{"question": "t"}])
    _write_rows(flat / "gsm8k_dev.parquet", [{"question": "v"}])
    _write_rows(nested / "train" / "part1.parquet", [{"question": "t1"}])
    _write_rows(nested / "train" / "part2.parquet", [{"question": "t2"}])
    _write_rows(nested / "eval" / "part1.parquet", [{"question": "e"}])
    assert _questions(f"{flat}@validation") == ["v"]
    assert _questions(f"{nested}@train") == ["t1", "t2"]
    assert _questions(f"{nested}@test") == ["e"]
    with pytest.raises(ValueError, match="holds several splits"):
        load_source(str(nested))
    _write_rows(tmp_path / "shards" / "train-00000-of-00002.parquet", [{"question": "a"}])  # one split only
    _write_rows(tmp_path / "shards" / "train-00001-of-00002.parquet", [{"question": "b"}])
    assert _questions(tmp_path / "shards") == ["a", "b"]


def test_a_folder_without_split_names_is_read_whole(tmp_path):
    for name in ("b.parquet", "a.parquet", "more/c.parquet"):
        _write_rows(tmp_path / "data" / name, [{"question": name[-9]}])
    assert _questions(tmp_path / "data") == ["a", "b", "c"]
    assert _questions(f"{tmp_path / 'data'}@train") == ["a", "b", "c"]  # as datasets reads it: one train split
    with pytest.raises(ValueError, match="has no files named for split 'test'"):
        load_source(f"{tmp_path / 'data'}@test")


def test_a_hub_id_names_a_config_as_a_third_part(tmp_path, monkeypatch):
    """`owner/repo/config@split` loads that config (gsm8k needs `main` or `socratic`); `owner/repo@split` of a dataset
    with several configs says how to name one. The hub is played by a local copy of the repository (a subfolder
    per config, a README listing them), which the real datasets.load_dataset reads in place of the id."""
    snapshot = tmp_path / "acme-gsm"
    for config in ("main", "socratic"):
        for split in ("train", "test"):
            rows = [{"question": f"{config}-{split}-{i}"} for i in range(2)]
            _write_rows(snapshot / config / f"{split}-00000-of-00001.parquet", rows)
    configs = "".join(
        f"- config_name: {config}\n  data_files:\n"
        + "".join(f"  - split: {split}\n    path: {config}/{split}-*\n" for split in ("train", "test"))
        for config in ("main", "socratic")
    )
    (snapshot / "README.md").write_text(f"---\nconfigs:\n{configs}---\n")
    calls, load_dataset = [], datasets.load_dataset

    def from_the_copy(path, name=None, **kwargs):
        calls.append((path, name, kwargs["split"]))
        return load_dataset(str(snapshot) if path == "acme/gsm" else path, name, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", from_the_copy)
    assert _questions("acme/gsm/socratic@test") == ["socratic-test-0", "socratic-test-1"]
    assert calls == [("acme/gsm", "socratic", "test")]
    with pytest.raises(
        ValueError, match=re.escape("Name one of its configs after the id, as 'acme/gsm/CONFIG@train'")
    ):
        load_source("acme/gsm@train")


def test_a_prompt_in_sharegpts_layout_is_read_as_sft_reads_it():
    """LLaMA-Factory's {"from", "value"} messages: SFT read them, RL refused them as "message 0 of the prompt must be
    the user's"."""
    from verl.data.sources import split_prompt_messages

    sharegpt = [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "2 + 2?"}]
    assert split_prompt_messages(sharegpt) == ([{"role": "system", "content": "Be brief."}], "2 + 2?")
    calls = [{"from": "human", "value": "Add."}, {"from": "function_call", "value": "{not json"}]
    with pytest.raises(ValueError, match=r"message 1 of the prompt \(ShareGPT's 'function_call'\): the call is not"):
        split_prompt_messages([*calls, {"from": "human", "value": "Go on."}])


def test_shards_whose_columns_are_typed_apart_are_read_as_one(tmp_path):
    """pandas writes strings as large_string, datasets as string: a folder of both was refused with a message that
    listed the same columns twice. Types that do not convert are named."""
    import pandas as pd

    (tmp_path / "data").mkdir()
    pd.DataFrame({"question": ["p"], "answer": ["1"]}).to_parquet(tmp_path / "data" / "part-0.parquet")
    _write_rows(tmp_path / "data" / "part-1.parquet", [{"question": "d", "answer": "2"}])
    assert _questions(tmp_path / "data") == ["p", "d"]
    _write_rows(tmp_path / "apart" / "a.parquet", [{"question": "a", "answer": "1"}])
    _write_rows(tmp_path / "apart" / "b.parquet", [{"question": "b", "answer": [1, 2]}])
    with pytest.raises(ValueError, match=r"'answer': 'string'.*'answer': 'List'"):
        load_source(str(tmp_path / "apart"))


def test_a_folder_of_one_split_leaves_out_files_named_for_none(tmp_path, caplog):
    """train.jsonl beside a meta.json: without @split the meta.json was read as rows (its fields as a bad prompt), as
    with @train it is left out, as datasets leaves it out."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    (folder / "meta.json").write_text(json.dumps({"source": "somewhere", "rows": 1}))
    with caplog.at_level(logging.WARNING, logger="verl.data.sources"):
        assert _questions(folder) == ["q"]
    assert "1 file(s) whose names carry no split are left out" in caplog.text


def test_a_folder_whose_only_named_split_is_not_train_asks_for_it(tmp_path):
    """A folder holding `aime_test.jsonl` (and files named for no split) trained on the test set without a word."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "aime_test.jsonl").write_text(json.dumps({"question": "t"}) + "\n")
    (folder / "notes.json").write_text(json.dumps({"question": "n"}))
    with pytest.raises(ValueError, match=r"has files named for split 'test' only .* write '.*data@test' to read"):
        load_source(str(folder))
    assert _questions(f"{folder}@test") == ["t"]


def test_shards_are_never_cast_across_kinds(tmp_path):
    """Only string widths are unified: a shard's text "007" beside another's integers stays a named mismatch (a cast
    read it as 7)."""
    _write_rows(tmp_path / "mixed" / "a.parquet", [{"question": "a", "answer": 7}])
    _write_rows(tmp_path / "mixed" / "b.parquet", [{"question": "b", "answer": "007"}])
    with pytest.raises(ValueError, match=r"'answer': 'int64'.*'answer': 'string'"):
        load_source(str(tmp_path / "mixed"))


def test_a_selection_of_a_datasets_image_column_keeps_its_rows_undecoded():
    """Image columns are read as stored by rebuilding the dataset on its table with decoding off, which reads the
    `datasets` library's private indices mapping: a selection of rows (`Dataset.select`) must keep its rows, so this
    fails if that library changes where it keeps the mapping."""
    from verl.data.sources import RowSource

    pictures = [{"bytes": None, "path": f"{name}.png"} for name in "abc"]
    features = datasets.Features({"prompt": datasets.Value("string"), "images": datasets.List(datasets.Image())})
    rows = datasets.Dataset.from_list(
        [{"prompt": name, "images": [picture]} for name, picture in zip("abc", pictures)], features=features
    )
    for chosen in (rows, rows.select([2, 0])):
        source = RowSource(chosen, [("rows", 0)], ["prompt", "images"])
        names = [row["prompt"] for row in chosen.select_columns(["prompt"])]
        assert [source.row(i)["prompt"] for i in range(len(source))] == names
        assert [source.row(i)["images"] for i in range(len(source))] == [
            [{"bytes": None, "path": f"{n}.png"}] for n in names
        ]
