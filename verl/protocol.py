# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DataProto: the one container between the Ray driver and its workers: ``batch`` (a TensorDict of row-aligned
tensors), ``non_tensor_batch`` (numpy object arrays, same rows) and ``meta_info`` (batch-level settings). Row
operations apply to tensors and non-tensors alike."""

import copy
import os
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict


__all__ = [
    "DataProto",
    "DataProtoItem",
    "collate_fn",
    "pad_dataproto_to_divisor",
    "plain_value",
    "to_object_array",
    "unpad_dataproto",
]

Index = int | np.integer | slice | Sequence[int] | Sequence[bool] | np.ndarray | torch.Tensor


def to_object_array(values: np.ndarray | Sequence[Any]) -> np.ndarray:
    """A 1-row-per-element numpy object array, filled element by element (``np.array(lists, dtype=object)`` would
    make equal-length lists 2-D)."""
    if isinstance(values, np.ndarray):
        return values if values.dtype == object else values.astype(object)
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def plain_value(value: Any) -> Any:
    """A NumPy scalar read from an object column as the Python scalar (user code compares it with == and json)."""
    return value.item() if isinstance(value, np.generic) else value


def _values_equal(a: Any, b: Any) -> bool:
    """Equality for tensors, arrays, containers of them and plain objects (``union``'s conflict check)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())  # torch.equal compares the shapes too
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return all(_values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # objects whose == is elementwise or undefined
        return False


def _normalize_index(item: Index, length: int) -> slice | np.ndarray:
    """Turn any supported row index into a slice or an int64 array of row positions (bool masks become positions)."""
    if isinstance(item, slice):
        if item.step is not None and item.step < 0:  # torch tensors cannot take negative-step slices
            return np.ascontiguousarray(np.arange(length)[item])
        return item
    if isinstance(item, torch.Tensor):
        item = item.detach().cpu().numpy()
    elif isinstance(item, (list, tuple)):
        item = np.asarray(item) if len(item) > 0 else np.zeros(0, dtype=np.int64)
    if not isinstance(item, np.ndarray):
        raise TypeError(
            f"DataProto cannot be indexed by {type(item).__name__}; use an int, a slice, a list of ints, "
            "or a numpy array / torch tensor of ints or bools."
        )
    if item.ndim != 1:
        raise IndexError(f"DataProto row index must be 1-D, got shape {tuple(item.shape)}; flatten it first.")
    if item.dtype == np.bool_:
        if item.shape[0] != length:
            raise IndexError(
                f"Boolean mask has {item.shape[0]} entries but the DataProto has {length} rows; "
                "build the mask from this batch."
            )
        return np.flatnonzero(item)
    if not np.issubdtype(item.dtype, np.integer):
        raise IndexError(f"DataProto row index must hold ints or bools, got dtype {item.dtype}; cast it first.")
    if item.size > 0 and (item.max() >= length or item.min() < -length):
        raise IndexError(f"Row index out of range for a DataProto with {length} rows (index {item.tolist()}).")
    return np.ascontiguousarray(item, dtype=np.int64)  # torch.from_numpy rejects negative strides


def _tensor_to_state(tensor: torch.Tensor) -> Any:
    """Encode a tensor so that pickling it stays zero-copy: a pickled tensor ships its whole storage in-band (a chunk
    would ship the entire batch), a numpy view of its rows goes out-of-band (pickle 5) into Ray's object store.
    bfloat16 travels as int16 bits; tensors numpy cannot hold (GPU, autograd) pickle as they are."""
    if tensor.device.type != "cpu" or tensor.requires_grad:
        return tensor
    if tensor.dtype == torch.bfloat16:
        return ("numpy", tensor.view(torch.int16).numpy(), torch.bfloat16)
    try:
        return ("numpy", tensor.numpy(), tensor.dtype)
    except TypeError:  # dtypes numpy lacks (float8, complex32...)
        return tensor


def _tensor_from_state(state: Any) -> torch.Tensor:
    """Decode what ``_tensor_to_state`` produced; read-only (Ray shared-memory) arrays are copied once first."""
    if isinstance(state, torch.Tensor):
        return state
    _, array, dtype = state
    if not array.flags.writeable:
        array = array.copy()
    tensor = torch.from_numpy(array)
    return tensor.view(dtype) if dtype == torch.bfloat16 else tensor


_SAVE_FORMAT = "verl.DataProto/1"
"""Marker of the pickle-free file layout written by DataProto.save_to_disk."""


def _is_plain(value: Any) -> bool:
    """Whether `value` is made only of str, numbers, bool, None, lists, tuples and str-keyed dicts."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_plain(item) for key, item in value.items())
    return False


@dataclass(repr=False, eq=False)
class DataProtoItem:
    """One row of a DataProto (``dp[i]`` for an int ``i``): tensors without the row dimension, each non-tensor's row
    object, and the parent's ``meta_info`` (shared, not copied)."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


@dataclass(repr=False, eq=False)
class DataProto:
    """Rows of tensors and non-tensors that move together, plus batch-level ``meta_info``; build with ``from_dict``,
    ``from_single_dict`` or ``collate_fn``. ``dp[slice]``, ``chunk`` and ``split`` return views; int-array and mask
    indexing, ``repeat``, ``concat`` and padding copy; ``union``, ``pop``, ``reorder``, ``rename`` and ``to`` change
    ``self`` in place."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, np.ndarray | list] | None = None,
        meta_info: dict[str, Any] | None = None,
    ) -> "DataProto":
        """Build a DataProto from separate tensor and non-tensor dicts; lists become object arrays."""
        batch = None
        if tensors:
            first_key = next(iter(tensors))  # checked first, so its rows are known when the others are checked
            for key, value in tensors.items():
                if not isinstance(value, torch.Tensor) or value.ndim == 0:
                    raise ValueError(
                        f"Tensor '{key}' must be a torch.Tensor with a row dimension, got "
                        f"{type(value).__name__} {getattr(value, 'shape', '')}; pass lists as non_tensors."
                    )
                if len(value) != len(tensors[first_key]):
                    raise ValueError(
                        f"Tensor '{key}' has {len(value)} rows but '{first_key}' has {len(tensors[first_key])}; "
                        "all tensors must share the first dimension."
                    )
            batch = TensorDict(dict(tensors), batch_size=[len(tensors[first_key])])
        non_tensor_batch = {key: to_object_array(value) for key, value in (non_tensors or {}).items()}
        return cls(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=dict(meta_info or {}))

    @classmethod
    def from_single_dict(cls, data: dict[str, Any], meta_info: dict[str, Any] | None = None) -> "DataProto":
        """Build a DataProto from one mixed dict: tensors go to ``batch``, lists and arrays to ``non_tensor_batch``."""
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, (np.ndarray, list, tuple)):
                non_tensors[key] = value
            else:
                raise TypeError(
                    f"Value for '{key}' is a {type(value).__name__}; a DataProto column must be a tensor, "
                    "a numpy array or a list with one entry per row. Put batch-level values in meta_info."
                )
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)

    # ------------------------------------------------------------------ validation and introspection

    def check_consistency(self) -> None:
        """Check that every column has one entry per row and non-tensors are numpy object arrays (run after every
        change, so a bad column fails where it was added)."""
        if self.batch is not None:
            if not isinstance(self.batch, TensorDict):
                raise ValueError(f"DataProto.batch must be a TensorDict or None, got {type(self.batch).__name__}.")
            if len(self.batch.batch_size) != 1:
                raise ValueError(
                    f"DataProto.batch must have exactly one batch dimension, got batch_size "
                    f"{list(self.batch.batch_size)}; build it with TensorDict(..., batch_size=[num_rows])."
                )
        batch_size = len(self)
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray) or value.dtype != object:
                kind = f"np.ndarray of dtype {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
                raise ValueError(
                    f"Non-tensor '{key}' must be a numpy array of dtype object, got {kind}; "
                    "convert it with verl.protocol.to_object_array."
                )
            if value.ndim == 0 or value.shape[0] != batch_size:
                length = value.shape[0] if value.ndim > 0 else "no"
                raise ValueError(
                    f"Non-tensor '{key}' has {length} rows but the batch size is {batch_size}; "
                    "every column needs one entry per row."
                )

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        for value in self.non_tensor_batch.values():
            return int(value.shape[0])
        return 0

    def _batch_keys(self) -> list[str]:
        return [] if self.batch is None else list(self.batch.keys())

    def __repr__(self) -> str:
        tensors = {key: f"{tuple(self.batch[key].shape)} {self.batch[key].dtype}" for key in self._batch_keys()}
        return (
            f"DataProto(len={len(self)}, batch={tensors}, non_tensor_batch={list(self.non_tensor_batch)}, "
            f"meta_info={list(self.meta_info)})"
        )

    # ------------------------------------------------------------------ indexing

    def __getitem__(self, item: Index) -> "DataProto | DataProtoItem":
        """Rows by position: an int gives a DataProtoItem, anything else (slice, ints, bool mask) a DataProto."""
        length = len(self)
        if (
            isinstance(item, torch.Tensor)
            and item.ndim == 0
            and not (item.is_floating_point() or item.dtype == torch.bool)
        ):
            item = int(item)
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            row = int(item)
            if not -length <= row < length:
                raise IndexError(f"Row {row} is out of range for a DataProto with {length} rows.")
            return DataProtoItem(
                batch=None if self.batch is None else self.batch[row],
                non_tensor_batch={key: value[row] for key, value in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        index = _normalize_index(item, length)
        batch_index = index if isinstance(index, slice) else torch.from_numpy(index)
        return DataProto(
            batch=None if self.batch is None else self.batch[batch_index],
            non_tensor_batch={key: value[index] for key, value in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    def __iter__(self) -> Iterator[DataProtoItem]:
        for row in range(len(self)):
            yield self[row]

    # ------------------------------------------------------------------ column operations

    def _check_keys(self, batch_keys: list[str], non_tensor_batch_keys: list[str], meta_info_keys: list[str]) -> None:
        for keys, available, where in (
            (batch_keys, self._batch_keys(), "batch"),
            (non_tensor_batch_keys, list(self.non_tensor_batch), "non_tensor_batch"),
            (meta_info_keys, list(self.meta_info), "meta_info"),
        ):
            for key in keys:
                if key not in available:
                    raise KeyError(f"Key '{key}' is not in {where}; available keys: {available}.")

    def select(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
        deepcopy: bool = False,
    ) -> "DataProto":
        """A new DataProto with a subset of keys (``None``: all of that kind); shared columns unless ``deepcopy``."""
        batch_keys = self._batch_keys() if batch_keys is None else list(batch_keys)
        non_tensor_batch_keys = list(self.non_tensor_batch) if non_tensor_batch_keys is None else non_tensor_batch_keys
        meta_info_keys = list(self.meta_info) if meta_info_keys is None else list(meta_info_keys)
        self._check_keys(batch_keys, non_tensor_batch_keys, meta_info_keys)
        batch = None if self.batch is None else self.batch.select(*batch_keys)
        non_tensor_batch = {key: self.non_tensor_batch[key] for key in non_tensor_batch_keys}
        meta_info = {key: self.meta_info[key] for key in meta_info_keys}
        if deepcopy:
            batch = None if batch is None else batch.clone()
            non_tensor_batch = copy.deepcopy(non_tensor_batch)
            meta_info = copy.deepcopy(meta_info)
        return DataProto(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)

    def pop(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
    ) -> "DataProto":
        """Remove the given keys (all checked first) and return them as a new DataProto with the same rows, carrying the
        remaining ``meta_info`` plus the popped meta keys (``None`` pops nothing)."""
        batch_keys, non_tensor_batch_keys = list(batch_keys or []), list(non_tensor_batch_keys or [])
        meta_info_keys = list(meta_info_keys or [])
        self._check_keys(batch_keys, non_tensor_batch_keys, meta_info_keys)
        batch = None
        if self.batch is not None:
            popped = {key: self.batch.pop(key) for key in batch_keys}
            batch = TensorDict(popped, batch_size=self.batch.batch_size, device=self.batch.device)
        non_tensor_batch = {key: self.non_tensor_batch.pop(key) for key in non_tensor_batch_keys}
        popped_meta = {key: self.meta_info.pop(key) for key in meta_info_keys}
        self.check_consistency()
        return DataProto(batch=batch, non_tensor_batch=non_tensor_batch, meta_info={**self.meta_info, **popped_meta})

    def union(self, other: "DataProto") -> "DataProto":
        """Add ``other``'s columns and meta_info (same rows) to ``self`` in place and return it; a key on both sides
        must hold identical values, else ValueError naming it."""
        if len(self) != len(other):
            raise ValueError(
                f"Cannot union DataProtos with {len(self)} and {len(other)} rows; both must have the same rows."
            )
        conflicts = []
        if self.batch is not None and other.batch is not None:
            shared = set(self.batch.keys()) & set(other.batch.keys())
            conflicts += [f"Tensor '{k}'" for k in sorted(shared) if not _values_equal(self.batch[k], other.batch[k])]
        conflicts += [
            f"Non-tensor '{key}'"
            for key, value in other.non_tensor_batch.items()
            if key in self.non_tensor_batch and not _values_equal(self.non_tensor_batch[key], value)
        ]
        conflicts += [
            f"meta_info '{key}' ({self.meta_info[key]!r} vs {value!r})"
            for key, value in other.meta_info.items()
            if key in self.meta_info and not _values_equal(self.meta_info[key], value)
        ]
        if conflicts:  # checked before any change, so a failed union leaves self untouched
            raise ValueError(f"{', '.join(conflicts)} differs between the two DataProtos; rename or pop one side.")
        if other.batch is not None:
            if self.batch is None:
                self.batch = other.batch.copy()  # shallow: shares tensors, not the container
            else:
                self.batch.update(other.batch)
        self.non_tensor_batch.update(other.non_tensor_batch)
        self.meta_info.update(other.meta_info)
        self.check_consistency()
        return self

    def rename(self, old_keys: str | list[str], new_keys: str | list[str]) -> "DataProto":
        """Rename tensor or non-tensor columns in place and return ``self``."""
        old_keys = [old_keys] if isinstance(old_keys, str) else list(old_keys)
        new_keys = [new_keys] if isinstance(new_keys, str) else list(new_keys)
        if len(old_keys) != len(new_keys):
            raise ValueError(f"rename got {len(old_keys)} old keys but {len(new_keys)} new keys; pass one per key.")
        existing = set(self._batch_keys()) | set(self.non_tensor_batch)
        for old, new in zip(old_keys, new_keys):
            if old not in existing:
                raise KeyError(f"Cannot rename '{old}': no such column; available columns: {sorted(existing)}.")
            if new in existing and new not in old_keys:
                raise ValueError(f"Cannot rename '{old}' to '{new}': '{new}' already exists; pop it first.")
        # Take every column out before putting any back, so swaps like (a, b) -> (b, a) work.
        moved = {new: self._pop_column(old) for old, new in zip(old_keys, new_keys)}
        for new, value in moved.items():
            if isinstance(value, torch.Tensor):
                self.batch[new] = value
            else:
                self.non_tensor_batch[new] = value
        self.check_consistency()
        return self

    def _pop_column(self, key: str) -> torch.Tensor | np.ndarray:
        if self.batch is not None and key in self.batch.keys():
            return self.batch.pop(key)
        return self.non_tensor_batch.pop(key)

    # ------------------------------------------------------------------ row operations

    @staticmethod
    def concat(data: list["DataProto"]) -> "DataProto":
        """Stack DataProtos row-wise; meta_info comes from the first. Keyless (empty) pieces are skipped; the others
        must have the same keys, except non-tensor columns of floats, which are NaN in a piece without them (numbers
        some rows report and others not, such as an environment's episode_info, each worker's for its own episodes)."""
        if len(data) == 0:
            raise ValueError("DataProto.concat got an empty list; pass at least one DataProto.")
        meta_info = dict(data[0].meta_info)
        pieces = [piece for piece in data if piece.batch is not None or piece.non_tensor_batch]
        if not pieces:
            return DataProto(meta_info=meta_info)
        floats: set[str] = set()  # looked for only where the pieces' columns differ (each step's usual concat: never)
        if any(set(piece.non_tensor_batch) != set(pieces[0].non_tensor_batch) for piece in pieces):
            floats = {
                key
                for piece in pieces
                for key, column in piece.non_tensor_batch.items()
                if len(column) and all(isinstance(value, (float, np.floating)) for value in column)
            }
        first = pieces[0]
        for position, piece in enumerate(pieces[1:], start=1):
            if (piece.batch is None) != (first.batch is None) or set(piece._batch_keys()) != set(first._batch_keys()):
                raise ValueError(
                    f"Cannot concat: non-empty piece {position} has tensor keys {sorted(piece._batch_keys())} but "
                    f"piece 0 has {sorted(first._batch_keys())}; select the same keys first."
                )
            if set(piece.non_tensor_batch) - floats != set(first.non_tensor_batch) - floats:
                raise ValueError(
                    f"Cannot concat: non-empty piece {position} has non-tensor keys {sorted(piece.non_tensor_batch)} "
                    f"but piece 0 has {sorted(first.non_tensor_batch)}; select the same keys first."
                )
        batch = None if first.batch is None else torch.cat([piece.batch for piece in pieces], dim=0)
        non_tensor_batch = {
            key: np.concatenate(
                [piece.non_tensor_batch.get(key, to_object_array([np.nan] * len(piece))) for piece in pieces]
            )
            for key in {**first.non_tensor_batch, **dict.fromkeys(sorted(floats))}
        }
        return DataProto(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)

    def chunk(self, chunks: int) -> list["DataProto"]:
        """Split into ``chunks`` equal pieces (views), one per worker; the length must divide evenly."""
        if not isinstance(chunks, int) or chunks <= 0:
            raise ValueError(f"chunk needs a positive number of chunks, got {chunks!r}.")
        if len(self) % chunks != 0:
            raise ValueError(
                f"Cannot chunk a DataProto of {len(self)} rows into {chunks} equal chunks; "
                "pad it with pad_dataproto_to_divisor first or change the batch size."
            )
        size = len(self) // chunks
        return [self[i * size : (i + 1) * size] for i in range(chunks)]

    def split(self, split_size: int) -> list["DataProto"]:
        """Split into pieces (views) of ``split_size`` rows, the last maybe smaller; empty gives one empty piece."""
        if not isinstance(split_size, int) or split_size <= 0:
            raise ValueError(f"split needs a positive split_size, got {split_size!r}.")
        if len(self) == 0:
            return [self[0:0]]
        return [self[start : start + split_size] for start in range(0, len(self), split_size)]

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> "DataProto":
        """Repeat every row: interleaved (a a b b), e.g. n samples per prompt, or tiled (a b a b)."""
        if not isinstance(repeat_times, int) or repeat_times <= 0:
            raise ValueError(f"repeat needs a positive repeat_times, got {repeat_times!r}.")
        rows = np.arange(len(self))
        index = np.repeat(rows, repeat_times) if interleave else np.tile(rows, repeat_times)
        return self[index]

    def reorder(self, indices: torch.Tensor | np.ndarray | list[int]) -> None:
        """Permute the rows in place (``self[i] = old[indices[i]]``); used to balance tokens across ranks."""
        index = _normalize_index(indices, len(self))
        if isinstance(index, slice) or not np.array_equal(np.sort(index % max(len(self), 1)), np.arange(len(self))):
            raise ValueError(
                f"reorder needs a permutation of range({len(self)}), got {np.asarray(indices).tolist()}; "
                "use indexing to select or repeat rows."
            )
        if self.batch is not None:
            self.batch = self.batch[torch.from_numpy(index)]
        self.non_tensor_batch = {key: value[index] for key, value in self.non_tensor_batch.items()}
        self.check_consistency()

    def pad_to_divisor(self, divisor: int) -> tuple["DataProto", int]:
        """Pad with rows cycled from the start until the length divides ``divisor``; return (data, pad_size).
        Undo with ``unpad_dataproto``."""
        if not isinstance(divisor, int) or divisor <= 0:
            raise ValueError(f"pad_to_divisor needs a positive divisor, got {divisor!r}.")
        pad_size = -len(self) % divisor
        if pad_size == 0:
            return self, 0
        padding = self[np.arange(pad_size) % len(self)]
        return DataProto.concat([self, padding]), pad_size

    def to(self, device: str | torch.device) -> "DataProto":
        """Move the tensors to ``device`` in place and return ``self``; non-tensors stay where they are."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    # ------------------------------------------------------------------ persistence and transport

    def save_to_disk(self, path: str | os.PathLike) -> None:
        """Write to ``path`` so that ``torch.load(weights_only=True)`` reads it (no code runs on load): non-tensors and
        meta_info as plain values. A batch holding other objects (PIL images, arrays in a column) is pickled whole,
        and loading it needs ``trusted=True``."""
        columns = {
            key: {"values": value.reshape(-1).tolist(), "shape": list(value.shape)}
            for key, value in self.non_tensor_batch.items()
        }
        if _is_plain(columns) and _is_plain(self.meta_info):
            tensors = dict(self.batch.items()) if self.batch is not None else {}
            torch.save(
                {"format": _SAVE_FORMAT, "tensors": tensors, "non_tensors": columns, "meta": self.meta_info}, path
            )
        else:
            torch.save(self, path)

    @staticmethod
    def load_from_disk(
        path: str | os.PathLike, map_location: str | torch.device | None = None, trusted: bool = False
    ) -> "DataProto":
        """Read a file written by ``save_to_disk`` (``map_location``: e.g. "cpu"); one holding objects beyond tensors
        and plain values could run code when unpickled, so it is refused unless ``trusted``."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"No DataProto file at {os.fspath(path)!r}; check the path.")
        try:
            data = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError:
            if not trusted:
                raise ValueError(
                    f"{os.fspath(path)!r} holds Python objects beyond tensors and plain values (e.g. images in a "
                    "non-tensor column); unpickling them can run code from the file. Pass trusted=True only for a "
                    "file you wrote or trust."
                ) from None
            data = torch.load(path, map_location=map_location, weights_only=False)
        if isinstance(data, dict) and data.get("format") == _SAVE_FORMAT:
            non_tensors = {
                key: to_object_array(state["values"]).reshape(state["shape"])
                for key, state in data["non_tensors"].items()
            }
            tensors = DataProto.from_dict(tensors=data["tensors"]).batch
            return DataProto(batch=tensors, non_tensor_batch=non_tensors, meta_info=data["meta"])
        if not isinstance(data, DataProto):
            raise TypeError(f"{os.fspath(path)!r} holds a {type(data).__name__}, not a DataProto.")
        return data

    def __getstate__(self) -> dict[str, Any]:
        """Plain state for pickling: tensors as numpy views (out-of-band, see ``_tensor_to_state``) plus batch size."""
        batch_state = None
        if self.batch is not None:
            batch_state = {
                "tensors": {key: _tensor_to_state(value) for key, value in self.batch.items()},
                "batch_size": list(self.batch.batch_size),
                "device": None if self.batch.device is None else str(self.batch.device),
            }
        return {"batch": batch_state, "non_tensor_batch": self.non_tensor_batch, "meta_info": self.meta_info}

    def __setstate__(self, state: dict[str, Any]) -> None:
        batch_state = state["batch"]
        self.batch = None
        if batch_state is not None:
            tensors = {key: _tensor_from_state(value) for key, value in batch_state["tensors"].items()}
            self.batch = TensorDict(tensors, batch_size=batch_state["batch_size"], device=batch_state["device"])
        self.non_tensor_batch = state["non_tensor_batch"]
        self.meta_info = state["meta_info"]
        self.check_consistency()


pad_dataproto_to_divisor = DataProto.pad_to_divisor
"""Module-level form of ``DataProto.pad_to_divisor``: returns (padded data, pad_size)."""


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the ``pad_size`` rows that ``pad_dataproto_to_divisor`` appended."""
    if not isinstance(pad_size, int) or not 0 <= pad_size <= len(data):
        raise ValueError(
            f"pad_size must be an int in [0, {len(data)}] for a DataProto of that length, got {pad_size!r}."
        )
    return data[: len(data) - pad_size] if pad_size else data


def collate_fn(features: list[dict[str, Any]]) -> DataProto:
    """The data loader's ``collate_fn``: tensor columns are stacked (same shape: pad in the dataset), everything else
    becomes an object array."""
    if len(features) == 0:
        raise ValueError("collate_fn got no rows; the data loader must yield at least one row per batch.")
    keys = list(features[0])
    tensors, non_tensors = {}, {}
    for row, feature in enumerate(features):
        if set(feature) != set(keys):
            raise ValueError(f"Row {row} has keys {sorted(feature)} but row 0 has {sorted(keys)}; rows must agree.")
    for key in keys:
        values = [feature[key] for feature in features]
        is_tensor = [isinstance(value, torch.Tensor) for value in values]
        if all(is_tensor):
            shapes = {tuple(value.shape) for value in values}
            if len(shapes) > 1:
                raise ValueError(f"Column '{key}' has tensors of different shapes {sorted(shapes)}; pad them first.")
            tensors[key] = torch.stack(values, dim=0)
        elif any(is_tensor):
            row = is_tensor.index(False)
            raise TypeError(f"Column '{key}' mixes tensors and non-tensors (row {row}); make every row the same type.")
        else:
            non_tensors[key] = values
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
