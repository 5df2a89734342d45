# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where dataset rows come from: local files, directories, Hugging Face datasets, or Python lists. A `RowSource`
remembers each row's file, so errors name the file and the row's index inside it. `row_value` and
`split_prompt_messages` read verl's row layout (nested answers, prompts as chat messages) for the trainer and the
evaluator alike."""

import bisect
import contextlib
import csv
import itertools
import json
import logging
import math
import os
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl.data.multimodal import marker_text
from verl.utils.hub import hub_folder
from verl.utils.numbers import number_text, plain_number
from verl.utils.quiet import datasets_progress_bars_off
from verl.utils.writable_dirs import cache_error, datasets_cache_dir, unwritable_reason


logger = logging.getLogger(__name__)

DATA_FILE_BUILDERS: dict[str, str] = {
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".csv": "csv",
}

_UNREAD_DATA = re.compile(
    r"\.(jsonl?|ndjson|csv|tsv|parquet|arrow)\.(gz|bz2|xz|zst|zip)$|\.(tsv|arrow|gz|zst|xz|bz2)$"
)
"""File names a data folder may hold that no builder here reads (compressed data, TSV, Arrow): warned about, as a
folder of them would otherwise train on its other files only."""


@dataclass
class RowSource:
    """Rows plus where they came from: `parts[k] = (description, first row index)` in increasing order."""

    rows: Any
    """A datasets.Dataset or a list of dicts."""
    parts: list[tuple[str, int]]
    columns: list[str]

    def __post_init__(self) -> None:
        if not isinstance(self.rows, list):
            self.rows = _media_undecoded(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def row(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def rows_in(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Rows start..stop-1, as `row` gives them, read at once (a datasets.Dataset reads a slice ~10x faster than
        its rows one by one)."""
        if isinstance(self.rows, list):
            return self.rows[start:stop]
        columns = self.rows[start:stop]
        return [dict(zip(columns, values)) for values in zip(*columns.values())]

    def where(self, index: int) -> str:
        """ "file 'a.jsonl', row 3" for the global row `index` (row numbers start at 0 within each file)."""
        starts = [start for _, start in self.parts]
        part = bisect.bisect_right(starts, index) - 1
        description, start = self.parts[part]
        return f"{description}, row {index - start}"

    @property
    def description(self) -> str:
        return self.parts[0][0] if len(self.parts) == 1 else f"{len(self.parts)} files ({self.parts[0][0]}, ...)"


def _undecoded(feature: Any) -> Any:
    """`feature` with its Image and Video features, at any depth, not decoded (`decode=False`)."""
    import dataclasses

    import datasets

    if isinstance(feature, (datasets.Image, datasets.Video)):
        return dataclasses.replace(feature, decode=False)
    if isinstance(feature, dict):
        return type(feature)({name: _undecoded(item) for name, item in feature.items()})
    if isinstance(feature, (datasets.List, datasets.LargeList)):
        return dataclasses.replace(feature, feature=_undecoded(feature.feature))
    return feature


def _media_undecoded(rows: Any) -> Any:
    """A datasets.Dataset whose Image and Video columns (a parquet file or folder written by `datasets`, EasyR1's
    geometry3k) give each picture or video as stored, `{"bytes": ..., "path": ...}`, which the dataset opens itself
    (`multimodal.open_image`): datasets decoded them on every read, opening a path relative to the working directory
    rather than data.image_dir, and a missing file was a traceback naming no row. The data is not copied."""
    import datasets

    features = _undecoded(rows.features)
    if features == rows.features:
        return rows
    if rows._indices is not None:  # a selection of rows (not what the loaders here return): cast, which copies
        return rows.cast(features)
    info = rows.info.copy()
    info.features = features
    return datasets.Dataset(rows.data, info=info, split=rows.split)


def _is_saved_dataset(path: str) -> bool:
    """A directory written by (Dataset|DatasetDict).save_to_disk."""
    marks = [("dataset_dict.json",), ("state.json", "dataset_info.json")]
    return any(all(os.path.isfile(os.path.join(path, name)) for name in names) for names in marks)


def _data_files(directory: str, pattern: Any = None) -> list[str]:
    """The files of `directory` (subfolders too, hidden ones left out) a builder here reads, sorted; with `pattern`,
    those whose lower-case names it matches instead."""
    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if (_builder(name) is not None) if pattern is None else pattern.search(name.lower()):
                files.append(os.path.join(root, name))
    return files


def _listed(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")


_SHARD = re.compile(r"(\w+)-\d{5}-of-\d{5}\b")
"""A shard's file name as the Hugging Face hub writes it: `train-00000-of-00001.parquet`, any split name."""


def _split_named(part: str) -> str | None:
    """The split a file or folder name carries as `datasets` reads a folder's files: a shard's name (`_SHARD`), or a
    word of `datasets.data_files.SPLIT_KEYWORDS` (train, training; validation, valid, dev, val; test, testing, eval,
    evaluation) between its separators (`-._ ` or digits: `train.jsonl`, `gsm8k_test.parquet`, `dev/`)."""
    from datasets.data_files import NON_WORDS_CHARS, SPLIT_KEYWORDS

    shard = _SHARD.match(part)
    if shard is not None:
        return shard.group(1)
    separator = f"[{NON_WORDS_CHARS}]"
    for split, keywords in SPLIT_KEYWORDS.items():
        if any(re.search(f"(^|{separator}){keyword}({separator}|$)", part) for keyword in keywords):
            return str(split)
    return None


def _split_layout(directory: str, files: list[str]) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """({config: {split: files}}, the files whose names carry no split). A file's split is the one its name, or else
    the nearest folder above it, carries (`_split_named`); its config the folder path above that name (`main` for
    `main/train-00000-of-00001.parquet`, "" for `train.jsonl`), as the subfolders of a Hugging Face download hold
    its configs (gsm8k's `main` and `socratic`)."""
    layout: dict[str, dict[str, list[str]]] = {}
    unnamed = []
    for path in files:
        parts = os.path.relpath(path, directory).split(os.sep)
        for depth in range(len(parts) - 1, -1, -1):
            split = _split_named(parts[depth])
            if split is not None:
                config = "/".join(parts[:depth])
                layout.setdefault(config, {}).setdefault(split, []).append(path)
                break
        else:
            unnamed.append(path)
    return layout, unnamed


def _split_order(split: str) -> tuple[int, str]:
    """train, validation, test, then the others by name."""
    known = ("train", "validation", "test")
    return (known.index(split) if split in known else len(known), split)


def _folder_files(directory: str, split: str | None, spec: str, named: str | None = None) -> list[str]:
    """The data files of `directory` that `spec` (the folder, or folder@split) means; `named` is how the spec names
    the folder (a hub id for a ModelScope download), for the spellings an error suggests. A folder whose file names carry
    no split is one split, `train`, as `datasets` reads it: all its files, sorted. Where they carry splits
    (`_split_layout`), splits and configs are never mixed: without @split the files of the one split of one config
    they hold; else a ValueError that lists what there is and how to choose."""
    files = _data_files(directory)
    unread = _data_files(directory, _UNREAD_DATA)
    if unread:  # a folder of .jsonl.gz shards beside one .jsonl trained on that one file
        logger.warning(
            "Dataset directory %r: %d file(s) in a format not read here are left out (%s); decompress or convert "
            "them to %s to train on them.",
            directory,
            len(unread),
            _listed(unread),
            ", ".join(DATA_FILE_BUILDERS),
        )
    layout, unnamed = _split_layout(directory, files)
    named = named or directory
    if not layout:
        if split not in (None, "train"):
            raise ValueError(
                f"Dataset directory {directory!r} has no files named for split {split!r} (its file names carry no "
                f"split, so all of them are one 'train' split, as datasets reads them); write {directory!r} alone."
            )
        return files
    if len(layout) > 1:
        found = ", ".join(
            f"{config or '(top level)'} ({', '.join(sorted(splits, key=_split_order))})"
            for config, splits in layout.items()
        )
        config = next(config for config in layout if config)
        chosen = split if split in layout[config] else min(layout[config], key=_split_order)
        raise ValueError(
            f"Dataset {spec!r} holds several configs, subfolders each with its own splits, which must not be mixed: "
            f"{found}. Name a config and a split, as '{named}/{config}@{chosen}'."
        )
    splits = next(iter(layout.values()))
    if split is None and len(splits) == 1:  # one split of one config: nothing to mix up (files named for none are
        split = next(iter(splits))  # left out below, as datasets leaves them out: a meta.json beside train.jsonl)
        if split != "train":  # a folder whose only named file is a test set: trained on without a word
            raise ValueError(
                f"Dataset directory {directory!r} has files named for split {split!r} only "
                f"({_listed(splits[split])}); write '{named}@{split}' to read them."
            )
    if split is None or split not in splits:
        split_names = sorted(splits, key=_split_order)
        problem = f"has no split {split!r}" if split is not None else "holds several splits, which must not be mixed"
        raise ValueError(
            f"Dataset directory {directory!r} {problem} (its file names carry {', '.join(split_names)}); choose one "
            + "as "
            + " or ".join(f"'{named}@{name}'" for name in split_names)
            + "."
        )
    if unnamed:
        logger.warning(
            "Dataset %r: reading the %d file(s) of split %r; %d file(s) whose names carry no split are left out "
            "(%s), as datasets leaves them out.",
            spec,
            len(splits[split]),
            split,
            len(unnamed),
            _listed(unnamed),
        )
    return splits[split]


def _builder(path: str) -> str | None:
    return DATA_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())


def _load_file(path: str) -> Any:
    import datasets

    builder = _builder(path)
    if builder is None:
        raise ValueError(
            f"Dataset file {path!r} has an unsupported extension; use one of {', '.join(DATA_FILE_BUILDERS)}."
        )
    if _is_blank(path):
        raise ValueError(f"Dataset file {path!r} is empty; give a file with at least one row.")
    if builder in ("json", "csv"):
        _check_utf8(path)
    _check_datasets_cache()
    # its "Failed to load JSON from file ... in row 1" came before the error below, which says where, by line
    json_log = logging.getLogger("datasets.packaged_modules.json.json")
    level = json_log.level
    json_log.setLevel(logging.CRITICAL)
    try:
        with datasets_progress_bars_off():  # a local file parses in moments: its progress bar only adds lines
            loaded = datasets.load_dataset(builder, data_files=path, split="train")
    except Exception as error:
        if "corresponds to no data" in str(error):  # datasets' word for a file that parsed into no rows
            raise ValueError(_NO_ROWS.format(path=path)) from None
        where = _json_error(path) if builder == "json" else None
        if where is not None:
            raise ValueError(f"Dataset file {path!r} is not valid JSON: {where}.") from None
        if builder == "parquet" and _parquet_rows(path) == 0:  # datasets: "BatchSize must be greater than 0"
            raise ValueError(_NO_ROWS.format(path=path)) from None
        # a file of another layout than datasets expects; a Parquet file is binary, never CSV (one cut short by an
        # interrupted download was read as CSV text, failing with a UnicodeDecodeError that named no file)
        readers = {"json": _read_as_written, "csv": _read_csv_as_written}
        loaded = readers[builder](path) if builder in readers else None
        if loaded is None:
            reason = str(error).rstrip(". ") or type(error).__name__
            # datasets' wrapper hides the parser's line ("Expected 2 fields")
            cause = error.__cause__ or error.__context__
            if cause is not None and str(cause) and str(cause) not in reason:
                reason += f" ({type(cause).__name__}: {str(cause).strip()[:300]})"
            raise ValueError(
                f"Could not read dataset file {path!r}: {reason}. Check that it is valid {builder}."
            ) from error
    finally:
        json_log.setLevel(level)
    if len(loaded) == 0:
        raise ValueError(_NO_ROWS.format(path=path))
    if builder == "json":
        loaded = _as_written(loaded, path)
    if builder == "csv":
        loaded = _cells_as_written(loaded, path)
    return loaded


def _parquet_rows(path: str) -> int | None:
    """The rows a Parquet file's footer counts, or None where it has no readable footer (cut short, not Parquet)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:
        return None


def _read_as_written(path: str) -> Any:
    """A valid JSON or JSON Lines file that datasets could not read, with every column of datasets' `Json` type (which
    `_as_written` then fills with the file's values), or None. datasets (5.2) infers a column's type from the file's first 10 MB and looks for columns of
    mixed types (a number answer in one row, text in another) only there, and only where every line parses: a file
    whose answers turn from numbers to text later, or with a blank line (one at its end is common), failed to load.
    The file is read from a copy without blank lines; the copy and the cache live in a temporary folder, the rows in
    memory."""
    import datasets

    names = _json_names(path)
    if not names:
        return None
    features = datasets.Features({name: datasets.Json() for name in names})
    with tempfile.TemporaryDirectory(prefix="verl-json-") as folder:
        copy = os.path.join(folder, os.path.basename(path))
        with open(path, "rb") as source, open(copy, "wb") as target:
            for line in source:
                if line.strip():
                    target.write(line if line.endswith(b"\n") else line + b"\n")
        try:
            with datasets_progress_bars_off():
                return datasets.load_dataset(
                    "json",
                    data_files=copy,
                    split="train",
                    features=features,
                    cache_dir=os.path.join(folder, "cache"),
                    keep_in_memory=True,
                )
        except Exception:
            return None


def _read_csv_as_written(path: str) -> Any:
    """A CSV file that datasets could not read because a column's type changes after its first chunk of rows (pandas
    infers each chunk's: numbers, then "x/2" 10,000 rows on, is "Failed to parse string"), or None for a file that
    is not plain rows under a header. Here every cell is read: a column is integers or floats where each of its
    non-empty cells writes exactly so ("16", "0.5"), else text as written; an empty cell is missing."""
    import datasets

    with open(path, encoding="utf-8-sig", newline="") as f:  # Excel's "CSV UTF-8" starts with a byte-order mark
        reader = csv.DictReader(f)
        rows = list(reader)
        names = reader.fieldnames
    if not names or not rows or any(None in row or None in row.values() for row in rows):
        return None  # a row with more or fewer cells than the header: not this fallback's to read
    columns = {}
    for name in names:
        cells = [row[name] or None for row in rows]
        present = [cell for cell in cells if cell is not None]
        for kind in (int, float):
            try:
                if present and all(str(kind(cell)) == cell for cell in present):
                    if kind is int and any(abs(int(cell)) >= 2**63 for cell in present):
                        break  # past int64: as written
                    cells = [None if cell is None else kind(cell) for cell in cells]
                    break
            except ValueError:
                continue
        columns[name] = cells
    return datasets.Dataset.from_dict(columns)


def _json_names(path: str) -> list[str] | None:
    """The keys of a JSON file's rows (a list of objects, or JSON Lines), in the order they first appear; None for
    another layout or a file that does not parse."""
    names: dict[str, None] = {}
    with open(path, encoding="utf-8-sig", newline="\n") as f:  # lines end at "\n" only, as in _json_columns
        start = f.read(4096).lstrip()
        f.seek(0)
        try:
            rows = json.load(f) if start.startswith("[") else (json.loads(line) for line in f if line.strip())
            for row in rows:
                if not isinstance(row, dict):
                    return None
                names.update(dict.fromkeys(row))
        except json.JSONDecodeError:
            return None
    return list(names)


def _cells_as_written(loaded: Any, path: str) -> Any:
    """`loaded` with the CSV columns whose values do not read back as the cells holding the cells' text: numbers
    ("007" as 7, "1.50" as 1.5), and text that pandas reads as missing ("None", "NA", "nan", "N/A", "null": an answer
    "None" was a missing answer). A column of plain numbers ("3") stays numbers; only an empty cell is missing."""
    import datasets

    with open(path, encoding="utf-8-sig", newline="") as f:  # Excel's "CSV UTF-8" starts with a byte-order mark
        cells = list(csv.DictReader(f))
    if len(cells) != len(loaded):
        return loaded
    for name, feature in loaded.features.items():
        if not isinstance(feature, datasets.Value) or name not in cells[0]:
            continue
        written = [row[name] or None for row in cells]  # an empty cell is missing, as datasets read it
        if any((cell or "") not in _cell_texts(value) for cell, value in zip(written, loaded[name])):
            loaded = loaded.remove_columns(name).add_column(name, written)
    return loaded


def _cell_texts(value: Any) -> tuple[str, ...]:
    """How a CSV cell that datasets read as `value` was written, if it was written plainly (an integer column with an
    empty cell is read as floats: 16.0 was written "16" or "16.0")."""
    missing = value is None or (isinstance(value, float) and value != value)  # an empty cell: None or NaN
    return ("",) if missing else (str(value), str(plain_number(value)))


def _as_written(loaded: Any, path: str) -> Any:
    """`loaded` with its mixed-type columns (a number in one row, text in another: datasets' `Json` type, which reads
    every string that parses as JSON as that value, "007" as 7 and "[1, 2]" as a list) holding the file's values, as
    do its float columns holding an integer beyond float's 53 bits: an integer past int64, or beside a fraction in its
    column, is read as a float, so 12345678901234567891 became 12345678901234567168 (a correct answer scored 0)."""
    import datasets

    mixed = [
        name
        for name, feature in loaded.features.items()
        if isinstance(feature, datasets.Json) or _past_float_integers(loaded, name, feature)
    ]
    columns = _json_columns(path, mixed) if mixed else None
    if columns is None or any(len(values) != len(loaded) for values in columns.values()):
        return loaded
    for name, values in columns.items():
        # added before the old column goes: a file's only column removed first left no rows to add it to
        written = f"__{name}_as_written"
        loaded = loaded.add_column(written, values, feature=datasets.Json()).remove_columns(name)
        loaded = loaded.rename_column(written, name)
    return loaded


def _past_float_integers(loaded: Any, name: str, feature: Any) -> bool:
    """Whether column `name` holds a float of 2**53 or more in size, where floats no longer hold every integer (so
    the file's integer may not be the value read): the column's own values, a list's items or a dict's fields
    (verl's `reward_model.ground_truth`), at any depth."""
    import datasets
    import pyarrow as pa
    import pyarrow.compute as pc

    def past(values: Any) -> bool:
        kind = values.type
        if pa.types.is_floating(kind):
            largest = pc.max(pc.abs(values)).as_py()
            return largest is not None and largest >= 2**53
        if pa.types.is_struct(kind):
            return any(past(pc.struct_field(values, [i])) for i in range(kind.num_fields))
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return past(pc.list_flatten(values))
        return False

    return not isinstance(feature, datasets.Json) and past(loaded.data.column(name))


def _json_columns(path: str, names: list[str]) -> dict[str, list[str]] | None:
    """The named columns of a JSON file (a list of objects) or JSON Lines file, each value JSON-encoded (strings
    included: they decode as written), in row order; None for another layout. JSON Lines is read a line at a time
    (a whole file's rows as Python objects took ~4x the file's size)."""
    columns: dict[str, list[str]] = {name: [] for name in names}

    def add(row: Any) -> bool:
        if not isinstance(row, dict):
            return False
        for name, values in columns.items():
            values.append(json.dumps(row.get(name)))
        return True

    # lines end at "\n" only: a string may hold U+2028, U+0085 or "\r" written raw
    with open(path, encoding="utf-8-sig", newline="\n") as f:  # a byte-order mark, as datasets reads past it
        start = f.read(4096).lstrip()
        f.seek(0)
        try:
            if start.startswith("["):  # one JSON value: the list of rows
                rows = json.load(f)
                return columns if isinstance(rows, list) and all(add(row) for row in rows) else None
            return columns if all(add(json.loads(line)) for line in f if line.strip()) else None
        except json.JSONDecodeError:
            return None


def _json_error(path: str) -> str | None:
    """Where a JSON Lines file (each line one value) or a JSON file (one value, or JSON Lines) does not parse, or
    holds a row that is not an object or repeats a key, as "line 3 (row 1), column 5: <why>"; None where nothing is
    found (`datasets` says only "an error occurred while generating the dataset")."""
    with open(path, encoding="utf-8-sig") as f:
        if not path.lower().endswith((".jsonl", ".ndjson")):
            try:
                value = json.load(f, object_pairs_hook=_unique_keys)
                rows = value if isinstance(value, list) else []
                return next((f"row {i} {why}" for i, row in enumerate(rows) if (why := _not_a_row(row))), None)
            except json.JSONDecodeError as error:
                if error.msg != "Extra data":  # else JSON Lines in a .json file, which datasets reads too
                    return f"line {error.lineno}, column {error.colno}: {error.msg}"
            except _RepeatedKey as error:
                return str(error)
            f.seek(0)
        row = 0
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                problem = _not_a_row(json.loads(line.rstrip("\r\n"), object_pairs_hook=_unique_keys))
            except json.JSONDecodeError as error:
                return f"line {number} (row {row}), column {error.colno}: {error.msg}"
            except _RepeatedKey as error:
                return f"line {number} (row {row}): {error}"
            if problem:
                return f"line {number} (row {row}) {problem}"
            row += 1
    return None


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise _RepeatedKey(f"an object repeats the key(s) {repeated}")
    return dict(pairs)


def _not_a_row(value: Any) -> str | None:
    """Why `value` cannot be a row (a row is an object of columns), or None."""
    return None if isinstance(value, dict) else f"is a JSON {type(value).__name__}, not an object of columns"


def _check_utf8(path: str) -> None:
    """Refuse a non-UTF-8 text file, naming line and row (`datasets` would pass the bytes on and fail later, naming
    neither). Reads blocks that end at a line's end."""
    offset = lines_before = 0
    with open(path, "rb") as f:
        if f.read(2) in (b"\xff\xfe", b"\xfe\xff"):  # PowerShell's `>` and Notepad's "Unicode"
            raise ValueError(
                f"Dataset file {path!r} is UTF-16 (it starts with that byte-order mark); save it as UTF-8, e.g. "
                f"`iconv -f utf-16 -t utf-8 {shlex.quote(path)} > fixed{os.path.splitext(path)[1]}`."
            )
        f.seek(0)
        while block := f.read(1 << 24) + f.readline():
            try:
                block.decode("utf-8")
            except UnicodeDecodeError as error:
                line_start = block.rfind(b"\n", 0, error.start) + 1
                line = lines_before + block.count(b"\n", 0, error.start) + 1
                row = (
                    f" (row {_rows_before(path, offset + line_start)})"
                    if path.lower().endswith((".jsonl", ".ndjson"))
                    else ""
                )
                raise ValueError(
                    f"Dataset file {path!r} is not UTF-8: line {line}{row}, column {error.start - line_start + 1} has "
                    f"the byte 0x{block[error.start]:02x} ({error.reason}; a Latin-1 or Windows-1252 file?). Save it "
                    f"as UTF-8, e.g. `iconv -f latin1 -t utf-8 {shlex.quote(path)} > fixed{os.path.splitext(path)[1]}`."
                ) from None
            offset += len(block)
            lines_before += block.count(b"\n")


def _rows_before(path: str, offset: int) -> int:
    """The rows (non-blank lines) of a JSONL file in its first `offset` bytes."""
    with open(path, "rb") as f:
        return sum(1 for line in f.read(offset).split(b"\n") if line.strip())


def _check_datasets_cache() -> None:
    """Name an unwritable `datasets` cache (it writes every parsed file there) rather than blame the dataset file."""
    import datasets

    directory = datasets.config.HF_DATASETS_CACHE
    reason = unwritable_reason(str(directory))
    if reason is not None:
        variable = datasets_cache_dir()[1] or "HF_DATASETS_CACHE"
        raise ValueError(cache_error(str(directory), variable, reason, "Loading a dataset file"))


_NO_ROWS = "Dataset file {path!r} has no rows (e.g. an empty list, blank lines or a header only); add rows to it."


def _is_blank(path: str) -> bool:
    """Empty or whitespace-only (only small files are read)."""
    if os.path.getsize(path) > 65536:
        return False
    with open(path, "rb") as f:
        return not f.read().strip()


def _files_source(files: list[str], directory: str | None = None) -> RowSource:
    import datasets

    loaded = [_load_file(path) for path in files]
    first = loaded[0].features
    for index, part in enumerate(loaded[1:], 1):  # pandas writes large_string where datasets writes string: one type
        if (
            set(part.column_names) == set(first)
            and part.features != first
            and _only_string_widths(part.features, first)
        ):
            loaded[index] = part.cast(first)  # (no other cast: text "007" read as the int 7 would change the data)
    starts = itertools.accumulate((len(part) for part in loaded), initial=0)
    parts = [(f"file '{path}'", start) for path, start in zip(files, starts)]
    try:
        rows = loaded[0] if len(loaded) == 1 else datasets.concatenate_datasets(loaded)
    except ValueError as error:
        columns = {
            path: {name: _type_name(feature) for name, feature in part.features.items()}
            for path, part in zip(files, loaded)
        }
        raise ValueError(
            f"The files of dataset directory {directory!r} do not share the same columns and types ({columns}): "
            f"{error}. Give them identical columns or point the config at one file."
        ) from error
    return RowSource(rows, parts, list(rows.column_names))


def _only_string_widths(features: Any, other: Any) -> bool:
    """Whether `features` differ from `other` in string columns' offset widths alone (string, large_string)."""
    texts = {"string", "large_string"}
    return all(
        features[name] == other[name] or {_type_name(features[name]), _type_name(other[name])} <= texts
        for name in features
    )


def _type_name(feature: Any) -> str:
    """A column's type as a message shows it (Value('large_string') -> large_string)."""
    return str(getattr(feature, "dtype", None) or type(feature).__name__)


def _load_from_disk(path: str, split: str | None, spec: str) -> RowSource:
    import datasets

    loaded = datasets.load_from_disk(path)
    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            raise ValueError(
                f"Dataset directory {path!r} holds the splits {sorted(loaded)}; choose one as '{path}@<split>'."
            )
        if split not in loaded:
            raise ValueError(f"Dataset {spec!r} has no split {split!r}; its splits are {sorted(loaded)}.")
        loaded = loaded[split]
    elif split is not None and split != str(loaded.split or "train"):  # EasyR1's `path@train`, as for a file
        raise ValueError(
            f"Dataset directory {path!r} holds a single split, {str(loaded.split or 'train')!r} (read whole); write it "
            f"without '@{split}'."
        )
    return RowSource(loaded, [(f"dataset '{spec}'", 0)], list(loaded.column_names))


def _hub_source(name: str, split: str, spec: str) -> RowSource:
    """`name@split` where `name` is a local folder, or a hub id `owner/repo`, or `owner/repo/config` for a dataset
    with several configs (gsm8k's `main` and `socratic`: `openai/gsm8k/main@train`, as a download's folder reads)."""
    import datasets

    repo, config = name, None
    if not os.path.exists(os.path.expanduser(name)) and name.count("/") == 2:  # owner/repo, then a config
        repo, config = name.rsplit("/", 1)
    local = os.path.expanduser(hub_folder(repo, f"Dataset {spec!r}", repo_type="dataset"))
    named = name
    if config is not None and os.path.isdir(local):  # a ModelScope download: the config is its subfolder
        configs = sorted(entry.name for entry in os.scandir(local) if entry.is_dir() and entry.name[0] != ".")
        if config not in configs:
            raise ValueError(f"Dataset {spec!r}: {repo!r} has no config {config!r}; its folders are {configs}.")
        local, config = os.path.join(local, config), None
    if os.path.isdir(local) and _is_saved_dataset(local):
        return _load_from_disk(local, split, spec)
    if os.path.isdir(local) and _data_files(local):  # a folder of data files, a download of a hub dataset too
        return _files_source(_folder_files(local, split, spec, named), directory=local)
    is_local = os.path.exists(local)  # a folder (a ModelScope download too) parses in moments: no progress bars
    try:
        with datasets_progress_bars_off() if is_local else contextlib.nullcontext():
            loaded = datasets.load_dataset(local if is_local else repo, config, split=split)
    except Exception as error:
        call = f"datasets.load_dataset({repo!r}{'' if config is None else f', {config!r}'}, split={split!r})"
        choose = (
            f" Name one of its configs after the id, as '{repo}/CONFIG@{split}'."
            if "Config name is missing" in str(error)
            else ""
        )
        raise ValueError(
            f"Could not load dataset {spec!r} with {call}: {error}.{choose} "
            "Offline, point it at a local dataset directory or a dataset already in the Hugging Face cache."
        ) from error
    return RowSource(loaded, [(f"dataset '{spec}'", 0)], list(loaded.column_names))


def _memory_source(rows: Sequence[Any]) -> RowSource:
    columns: dict[str, None] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"In-memory rows, row {index}: a row must be a dict of column -> value, got {type(row)}.")
        columns.update(dict.fromkeys(row))
    return RowSource(list(rows), [("in-memory rows", 0)], list(columns))


def load_source(spec: str | Sequence[dict[str, Any]]) -> RowSource:
    """Load rows from a file (.jsonl/.json/.parquet/.csv), a directory (every such file, sorted; one split's files
    with `directory@split` where their names carry splits, `_folder_files`; or a saved dataset), `name@split`
    (datasets.load_dataset; `owner/repo/config@split` names a config; `name` may be a ModelScope id with
    USE_MODELSCOPE_HUB=1) or a list of dicts."""
    if not isinstance(spec, str):
        return _memory_source(spec)
    if not spec:
        raise ValueError("The dataset path is empty; give a local file or directory, or a dataset name@split.")
    path = os.path.expanduser(spec)
    if os.path.isfile(path):
        return _files_source([path])
    if os.path.isdir(path):
        if _is_saved_dataset(path):
            return _load_from_disk(path, None, spec)
        if not _data_files(path):
            unread = _data_files(path, _UNREAD_DATA)
            raise ValueError(
                f"Dataset directory {path!r} holds no {', '.join(DATA_FILE_BUILDERS)} files and no saved dataset"
                + (
                    f"; its files {_listed(unread)} are in a format not read here (decompress or convert them)."
                    if unread
                    else "."
                )
            )
        return _files_source(_folder_files(path, None, spec), directory=path)
    if "@" in spec:
        name, split = spec.rsplit("@", 1)
        if name and split and os.path.isfile(os.path.expanduser(name)):  # EasyR1's `file@train`: a file is one split
            if split != "train":
                raise ValueError(
                    f"Dataset {spec!r}: a file holds one split, read whole; write {name!r} alone (or a folder whose "
                    f"file names carry the splits, as 'folder@{split}')."
                )
            return _files_source([os.path.expanduser(name)])
        if name and split:
            return _hub_source(name, split, spec)
    several = "," in spec or any(character in spec for character in "*?[")  # verl's list of files, a glob
    raise FileNotFoundError(
        f"Dataset {spec!r} is neither an existing file or directory nor a dataset written as name@split."
        + (
            " A dataset is one path, not a list or a pattern: to train on several files, put them (or links to "
            "them) in one folder and give the folder, whose files are all read, sorted."
            if several
            else ""
        )
    )


def ground_truth(answer: Any) -> Any:
    """An answer as reward functions get it: a number as its text, an integral float as an int's ("42", not "42.0",
    which an exact match fails: an int column with a missing value, or JSON Lines answers 3, 4, 5.5, are stored as
    floats) and a small one positionally ("0.00001", not Python's "1e-05", which math-verify read as e - 5 and an
    exact match failed), a bool as "True" / "False"; text as it is, a list or dict with its integral floats as ints at
    any depth (the accepted answers [4] beside [3, 0.5] in another row are read as [4.0], which an exact match of "4"
    failed; likewise [[1, 2]] beside [[0.5]], and {"x": 4} beside {"x": 0.5}); None for a missing answer (null, or
    NaN, pandas' missing value). A dict from Parquet or Arrow has every key of its column's struct type, null where
    the row's dict had none or a null (the file cannot tell them apart: they are kept; README)."""
    if isinstance(answer, float) and math.isnan(answer):
        return None
    if isinstance(answer, (list, dict)):
        return _plain_numbers(answer)
    return number_text(answer) if isinstance(answer, (int, float)) else answer


def _plain_numbers(value: Any) -> Any:
    """`value` with every integral float in its lists and dicts, at any depth, as an int (`plain_number`)."""
    if isinstance(value, list):
        return [_plain_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain_numbers(item) for key, item in value.items()}
    return plain_number(value)


def row_value(row: dict[str, Any], key: str) -> Any:
    """The row's `key` column, or a field inside a dict column named with dots (`reward_model.ground_truth`, verl's
    layout); None where it is missing."""
    if key in row or "." not in key:
        return row.get(key)
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def without_nulls(value: Any) -> Any:
    """`value` without the dict entries whose value is null, at any depth. A Parquet or Arrow column has one struct
    type for all its rows, so a key only some rows' dicts have (another tool's parameter, `tool_calls` on a plain
    message) reads back as null in the others, which a chat template would render (`"a": null`) or trip on
    (`'tool_calls' in message`). A null written on purpose is lost too: Arrow cannot tell them apart (write such
    values as JSON text, which is parsed as written)."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [without_nulls(item) for item in value]
    return value


def tool_schemas(value: Any, template_reads_tools: bool = True) -> list[dict[str, Any]] | None:
    """A row's tools column as a chat template takes it (None for none): a list of the tools' JSON schemas (OpenAI's
    `{"type": "function", "function": {...}}` or the bare function), or a JSON string of one, as datasets often store
    them; Arrow's nulls removed (`without_nulls`). ValueError says what is wrong, or that the chat template would
    drop them (`template_reads_tools` false: verl.data.tokenizer.template_reads)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError as error:
            raise ValueError(f"the tools are a string but not valid JSON ({error})") from None
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(tool, dict) for tool in value):
        raise ValueError(
            f"expected a list of the tools' JSON schemas (objects), or a JSON string of one, got {value!r:.200}"
        )
    tools = without_nulls(value)
    for position, tool in enumerate(tools):
        function = tool.get("function", tool)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"tool {position} has no name (its schema's `name`, or `function.name`): {tool!r:.200}")
    if not template_reads_tools:
        raise ValueError(
            "the chat template does not read `tools`, so the row's tool schemas would not be in the text the model "
            "sees; use a template that renders them (data.override_chat_template), or describe the tools in the text"
        )
    return tools


def with_marker_text(position: int, message: Any) -> Any:
    """The message with typed content parts as marker text (`marker_text`); ValueError naming the message."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), (list, tuple)):
        return message
    try:
        return {**message, "content": marker_text(message["content"])}
    except ValueError as error:
        raise ValueError(f"message {position}: {error}") from None


def with_tool_calls(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message with OpenAI-style `tool_calls` as chat templates render them: content "" where empty or
    null, each call's arguments as a mapping (a JSON string is parsed, as vLLM does before rendering). A message
    without calls (`tool_calls` missing, null or an empty list, which a column every message has holds for the
    others) comes back without the key; OpenAI's older `function_call` (one call) is read as that call in
    `tool_calls` (a template writes no `function_call`: the call was dropped without a word). ValueError says what is
    wrong."""
    if message.get("function_call") is not None:
        if message.get("tool_calls"):
            raise ValueError("a message has both function_call and tool_calls; give its calls once, as tool_calls")
        call = {"type": "function", "function": message["function_call"]}
        message = {**{key: value for key, value in message.items() if key != "function_call"}, "tool_calls": [call]}
    calls = message.get("tool_calls")
    if calls is None or (isinstance(calls, (list, tuple)) and not calls):
        return {key: value for key, value in message.items() if key != "tool_calls"}
    if message.get("role") != "assistant" or not isinstance(calls, (list, tuple)):
        raise ValueError("tool_calls must be a list, on an assistant message")
    rendered = []
    for call in calls:
        function = call.get("function", call) if isinstance(call, dict) else None
        arguments = function.get("arguments", {}) if isinstance(function, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                arguments = None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str) and isinstance(arguments, dict)):
            raise ValueError(
                f"each of tool_calls needs a function name and its arguments as an object (or a JSON string of one), "
                f"got {call!r}"
            )
        rendered.append({**call, "type": "function", "function": {**function, "arguments": arguments}})
    return {**message, "content": message.get("content") or "", "tool_calls": rendered}


SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "observation": "tool"}
"""ShareGPT's `from` values (LLaMA-Factory's data) and the roles they become: a `{"from", "value"}` message is read as
`{"role", "content"}`; a function_call turn as an assistant message with `tool_calls` (`sharegpt_message`)."""


def sharegpt_message(sender: str, value: Any) -> dict[str, Any]:
    """A ShareGPT turn (LLaMA-Factory's layout) as a role/content message: `function_call`'s value, one call or a list
    of calls as JSON ({"name", "arguments"}), becomes an assistant message with `tool_calls`, which the chat template
    writes in the model's own call format; `observation` a tool message."""
    if sender != "function_call":
        return {"role": SHAREGPT_ROLES.get(sender, sender), "content": value}
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except ValueError as error:
        raise ValueError(f"the call is not JSON ({error})") from None
    calls = calls if isinstance(calls, list) else [calls]
    tool_calls = [{"type": "function", "function": call} for call in calls]
    return {"role": "assistant", "content": "", "tool_calls": tool_calls}


def split_prompt_messages(messages: Any) -> tuple[list[dict[str, Any]], str]:
    """A prompt given as chat messages (verl's and TRL's layout, or ShareGPT's `{"from", "value"}`: system, few-shot
    user/assistant turns (with their `tool_calls`, and tool messages), then the user's): (the messages before the last,
    the last one's text). The last
    one is where data.format_prompt and the media markers apply; ValueError says what is wrong."""
    if len(messages) == 0:
        raise ValueError("the prompt is an empty list of messages")
    messages = list(messages)
    for position, message in enumerate(messages):  # ShareGPT's layout (LLaMA-Factory's), as SFT reads it
        if isinstance(message, dict) and "role" not in message and {"from", "value"} <= set(message):
            try:
                messages[position] = sharegpt_message(message["from"], message["value"])
            except ValueError as error:
                raise ValueError(
                    f"message {position} of the prompt (ShareGPT's {message['from']!r}): {error}"
                ) from None
    messages = [with_marker_text(position, without_nulls(message)) for position, message in enumerate(messages)]
    for position, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        last = position == len(messages) - 1
        if role not in (("user",) if last else ("system", "user", "assistant", "tool")):
            wanted = "the user's" if last else "a dict with role system, user, assistant or tool"
            raise ValueError(f"message {position} of the prompt must be {wanted}")
        try:
            message = messages[position] = with_tool_calls(message)
        except ValueError as error:
            raise ValueError(f"message {position} of the prompt: {error}") from None
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {position} of the prompt needs text content")
        if not last and any(marker in message["content"] for marker in ("<image>", "<video>")):
            raise ValueError(f"message {position} has a media marker; put them in the last message")
    # templates such as Mistral's read a result's id; those that keep earlier turns' thinking (GLM-4.5's with
    # clear_thinking=false) read an assistant's reasoning, by either name (vLLM's `reasoning`, the older one)
    kept = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "reasoning")
    return [{key: m[key] for key in kept if key in m} for m in messages[:-1]], messages[-1]["content"]
