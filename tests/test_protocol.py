# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import math
import os
import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.protocol import (
    DataProto,
    DataProtoItem,
    collate_fn,
    pad_dataproto_to_divisor,
    to_object_array,
    unpad_dataproto,
)


def make_dp(num_rows: int = 4, **meta_info) -> DataProto:
    """Row i has x = [3i, 3i+1, 3i+2], mask = i is even, uid = "u{i}", gt = [i, i] (equal-length lists)."""
    return DataProto.from_dict(
        tensors={
            "x": torch.arange(num_rows * 3).reshape(num_rows, 3),
            "mask": torch.arange(num_rows) % 2 == 0,
        },
        non_tensors={"uid": [f"u{i}" for i in range(num_rows)], "gt": [[i, i] for i in range(num_rows)]},
        meta_info=meta_info or {"temperature": 1.0},
    )


def rows(dp: DataProto) -> list[int]:
    """Original row ids, read from the tensor and checked against the non-tensor column."""
    ids = (dp.batch["x"][:, 0] // 3).tolist()
    assert list(dp.non_tensor_batch["uid"]) == [f"u{i}" for i in ids]
    assert [g[0] for g in dp.non_tensor_batch["gt"]] == ids
    return ids


# ---------------------------------------------------------------- construction and consistency


def test_from_dict_builds_object_arrays_and_keeps_meta():
    dp = make_dp(4, temperature=0.7)
    assert len(dp) == 4
    assert set(dp.batch.keys()) == {"x", "mask"}
    gt = dp.non_tensor_batch["gt"]
    assert gt.dtype == object and gt.shape == (4,)  # equal-length lists stay one object per row
    assert gt[2] == [2, 2]
    assert dp.meta_info == {"temperature": 0.7}


def test_from_dict_non_tensor_only_and_numeric_numpy():
    dp = DataProto.from_dict(non_tensors={"score": np.array([1.0, 2.0])})
    assert dp.batch is None and len(dp) == 2
    assert dp.non_tensor_batch["score"].dtype == object


def test_from_dict_rejects_mismatched_tensor_lengths():
    with pytest.raises(ValueError, match=r"'y' has 2 rows but 'x' has 3"):
        DataProto.from_dict(tensors={"x": torch.zeros(3), "y": torch.zeros(2)})
    with pytest.raises(ValueError, match="'s'"):
        DataProto.from_dict(tensors={"s": torch.tensor(1.0)})


def test_constructor_checks_non_tensors():
    batch = TensorDict({"x": torch.zeros(3)}, batch_size=[3])
    with pytest.raises(ValueError, match=r"Non-tensor 'uid' has 2 rows but the batch size is 3"):
        DataProto(batch=batch, non_tensor_batch={"uid": to_object_array(["a", "b"])})
    with pytest.raises(ValueError, match=r"'uid' must be a numpy array of dtype object.*int64"):
        DataProto(batch=batch, non_tensor_batch={"uid": np.array([1, 2, 3])})
    with pytest.raises(ValueError, match=r"'uid' must be a numpy array of dtype object.*list"):
        DataProto(batch=batch, non_tensor_batch={"uid": ["a", "b", "c"]})
    with pytest.raises(ValueError, match="one batch dimension"):
        DataProto(batch=TensorDict({"x": torch.zeros(3, 2)}, batch_size=[3, 2]))


def test_check_consistency_catches_later_mutation():
    dp = make_dp(3)
    dp.non_tensor_batch["extra"] = to_object_array([1])
    with pytest.raises(ValueError, match=r"'extra' has 1 rows but the batch size is 3"):
        dp.check_consistency()


def test_from_single_dict_splits_values():
    dp = DataProto.from_single_dict(
        {"ids": torch.ones(2, 5), "prompt": ["a", "b"], "images": np.array([None, None])}, meta_info={"k": 1}
    )
    assert list(dp.batch.keys()) == ["ids"]
    assert set(dp.non_tensor_batch) == {"prompt", "images"}
    assert dp.non_tensor_batch["prompt"].dtype == object and dp.meta_info == {"k": 1}
    with pytest.raises(TypeError, match="'lr'.*meta_info"):
        DataProto.from_single_dict({"ids": torch.ones(2), "lr": 0.1})


def test_empty_dataproto():
    dp = DataProto()
    assert len(dp) == 0 and dp.batch is None and dp.non_tensor_batch == {} and dp.meta_info == {}
    chunks = dp.chunk(3)
    assert len(chunks) == 3 and all(len(c) == 0 for c in chunks)
    assert [len(p) for p in dp.split(2)] == [0]
    assert len(dp.repeat(4)) == 0
    assert dp.pad_to_divisor(4) == (dp, 0)
    assert len(DataProto.concat(chunks)) == 0
    with pytest.raises(IndexError, match="out of range"):
        dp[0]
    assert list(dp) == []


def test_empty_rows_with_keys():
    dp = make_dp(4)[0:0]
    assert len(dp) == 0 and set(dp.batch.keys()) == {"x", "mask"}
    assert [len(c) for c in dp.chunk(2)] == [0, 0]
    assert len(dp.repeat(3)) == 0
    assert len(DataProto.concat(dp.split(5))) == 0


def test_repr_is_compact():
    text = repr(make_dp(2))
    assert "len=2" in text and "'x': '(2, 3) torch.int64'" in text and "uid" in text


# ---------------------------------------------------------------- indexing


def test_int_index_returns_item():
    dp = make_dp(4)
    item = dp[1]
    assert isinstance(item, DataProtoItem)
    assert item.batch["x"].tolist() == [3, 4, 5] and item.batch.batch_size == torch.Size([])
    assert item.non_tensor_batch == {"uid": "u1", "gt": [1, 1]}
    assert item.meta_info == {"temperature": 1.0}
    assert dp[-1].non_tensor_batch["uid"] == "u3"
    assert dp[np.int64(2)].non_tensor_batch["uid"] == "u2"
    assert dp[torch.tensor(0)].non_tensor_batch["uid"] == "u0"
    with pytest.raises(IndexError, match="Row 4 is out of range for a DataProto with 4 rows"):
        dp[4]
    assert [item.non_tensor_batch["uid"] for item in dp] == ["u0", "u1", "u2", "u3"]


def test_slice_is_a_view_with_copied_meta():
    dp = make_dp(6)
    part = dp[1:4]
    assert rows(part) == [1, 2, 3]
    part.batch["x"][0, 0] = 100
    assert dp.batch["x"][1, 0] == 100  # slices share memory with the parent
    part.meta_info["new"] = 1
    assert "new" not in dp.meta_info and part.meta_info["temperature"] == 1.0
    assert rows(dp[::2]) == [0, 2, 4]


def test_negative_step_slice():
    assert rows(make_dp(4)[::-1]) == [3, 2, 1, 0]


@pytest.mark.parametrize(
    "index",
    [
        [2, 0, 2],
        np.array([2, 0, 2]),
        torch.tensor([2, 0, 2]),
        torch.tensor([-2, 0, -2]),
    ],
)
def test_integer_array_index(index):
    dp = make_dp(4)
    picked = dp[index]
    assert rows(picked) == [2, 0, 2]
    assert picked.meta_info == dp.meta_info
    picked.batch["x"][0, 0] = -1
    assert dp.batch["x"][2, 0] == 6  # gathered rows are copies


@pytest.mark.parametrize(
    "mask",
    [
        np.array([True, False, False, True]),
        torch.tensor([True, False, False, True]),
        [True, False, False, True],
    ],
)
def test_bool_mask_index(mask):
    assert rows(make_dp(4)[mask]) == [0, 3]


def test_bad_indices():
    dp = make_dp(4)
    with pytest.raises(IndexError, match="mask has 3 entries but the DataProto has 4 rows"):
        dp[np.array([True, False, True])]
    with pytest.raises(IndexError, match="out of range"):
        dp[[0, 7]]
    with pytest.raises(IndexError, match="dtype float"):
        dp[np.array([0.0, 1.0])]
    with pytest.raises(TypeError, match="cannot be indexed by str"):
        dp["x"]
    assert len(dp[[]]) == 0


# ---------------------------------------------------------------- select / pop / union / rename


def test_select_shares_unless_deepcopy():
    dp = make_dp(3, temperature=1.0, n=2)
    sub = dp.select(batch_keys=["x"], non_tensor_batch_keys=["uid"], meta_info_keys=["n"])
    assert list(sub.batch.keys()) == ["x"] and list(sub.non_tensor_batch) == ["uid"] and sub.meta_info == {"n": 2}
    sub.batch["x"][0, 0] = 50
    assert dp.batch["x"][0, 0] == 50
    everything = dp.select()
    assert set(everything.batch.keys()) == {"x", "mask"} and set(everything.non_tensor_batch) == {"uid", "gt"}
    deep = dp.select(deepcopy=True)
    deep.batch["x"][0, 0] = -5
    deep.non_tensor_batch["gt"][0].append(99)
    assert dp.batch["x"][0, 0] == 50 and dp.non_tensor_batch["gt"][0] == [0, 0]
    with pytest.raises(KeyError, match="'y' is not in batch"):
        dp.select(batch_keys=["y"])


def test_pop_removes_and_returns():
    dp = make_dp(3, temperature=1.0, n=2)
    popped = dp.pop(batch_keys=["x"], non_tensor_batch_keys=["uid"], meta_info_keys=["n"])
    assert list(popped.batch.keys()) == ["x"] and list(popped.non_tensor_batch) == ["uid"]
    assert popped.meta_info == {"temperature": 1.0, "n": 2}
    assert list(dp.batch.keys()) == ["mask"] and list(dp.non_tensor_batch) == ["gt"]
    assert dp.meta_info == {"temperature": 1.0} and len(dp) == 3 and len(popped) == 3
    nothing = dp.pop()
    assert len(nothing) == 3 and list(nothing.batch.keys()) == [] and list(dp.batch.keys()) == ["mask"]


def test_pop_missing_key_leaves_self_untouched():
    dp = make_dp(3)
    with pytest.raises(KeyError, match="'nope' is not in non_tensor_batch"):
        dp.pop(batch_keys=["x"], non_tensor_batch_keys=["nope"])
    assert set(dp.batch.keys()) == {"x", "mask"}


def test_union_adds_columns_in_place():
    dp = make_dp(3)
    popped = dp.pop(batch_keys=["mask"], non_tensor_batch_keys=["gt"])
    other = DataProto.from_dict(tensors={"score": torch.ones(3)}, meta_info={"step": 5})
    result = dp.union(popped).union(other)
    assert result is dp
    assert set(dp.batch.keys()) == {"x", "mask", "score"} and set(dp.non_tensor_batch) == {"uid", "gt"}
    assert dp.meta_info == {"temperature": 1.0, "step": 5}
    rows(dp)


def test_union_identical_values_are_fine():
    dp = make_dp(3)
    same = make_dp(3)  # equal but separate tensors, object arrays holding lists, same meta
    dp.union(same)
    assert len(dp) == 3


def test_union_into_non_tensor_only():
    dp = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    other = DataProto.from_dict(tensors={"x": torch.zeros(2)})
    dp.union(other)
    assert list(dp.batch.keys()) == ["x"]
    dp.batch["y"] = torch.ones(2)
    assert "y" not in other.batch.keys()  # self got its own container


def test_union_conflicts():
    dp = make_dp(3)
    bad_tensor = make_dp(3)
    bad_tensor.batch["x"][1, 1] = 0
    with pytest.raises(ValueError, match="Tensor 'x' differs"):
        dp.union(bad_tensor)
    bad_dtype = DataProto.from_dict(tensors={"x": dp.batch["x"].float()})
    with pytest.raises(ValueError, match="Tensor 'x' differs"):
        dp.union(bad_dtype)
    bad_obj = DataProto.from_dict(non_tensors={"gt": [[0, 0], [1, 9], [2, 2]]})
    with pytest.raises(ValueError, match="Non-tensor 'gt' differs"):
        dp.union(bad_obj)
    bad_meta = DataProto.from_dict(non_tensors={"new": ["a", "b", "c"]}, meta_info={"temperature": 0.5})
    with pytest.raises(ValueError, match=r"meta_info 'temperature' \(1.0 vs 0.5\) differs"):
        dp.union(bad_meta)
    assert "new" not in dp.non_tensor_batch  # a failed union changes nothing
    with pytest.raises(ValueError, match="3 and 2 rows"):
        dp.union(make_dp(2))


def test_rename():
    dp = make_dp(2)
    assert dp.rename(["x", "uid"], ["input_ids", "id"]) is dp
    assert set(dp.batch.keys()) == {"input_ids", "mask"} and set(dp.non_tensor_batch) == {"id", "gt"}
    dp.rename("input_ids", "x")
    assert dp.batch["x"][1].tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match="'mask' already exists"):
        dp.rename("x", "mask")
    with pytest.raises(KeyError, match="no such column"):
        dp.rename("missing", "y")
    with pytest.raises(ValueError, match="2 old keys but 1 new keys"):
        dp.rename(["x", "gt"], ["y"])
    dp.rename(["x", "mask"], ["mask", "x"])  # a swap is allowed
    assert dp.batch["mask"].dtype == torch.int64


# ---------------------------------------------------------------- row operations


def test_concat_keeps_first_meta_and_order():
    a, b = make_dp(4, step=1)[:2], make_dp(4, step=2)[2:]
    merged = DataProto.concat([a, b])
    assert rows(merged) == [0, 1, 2, 3] and merged.meta_info == {"step": 1}
    assert rows(DataProto.concat([DataProto(), a, DataProto()])) == [0, 1]  # empty accumulators are skipped


def test_concat_fills_a_float_column_a_piece_lacks_with_nan():
    """An environment's episode_info numbers: each worker has the keys its own episodes reported."""
    a, b = make_dp(2), make_dp(2)
    a.non_tensor_batch["env_solved"] = np.array([1.0, 0.0], dtype=object)
    merged = DataProto.concat([a, b])
    np.testing.assert_array_equal(merged.non_tensor_batch["env_solved"].astype(float), [1.0, 0.0, np.nan, np.nan])
    assert "env_solved" not in b.non_tensor_batch  # the pieces are left as they were
    b.non_tensor_batch["note"] = np.array(["x", "y"], dtype=object)
    with pytest.raises(ValueError, match=r"non-tensor keys"):  # other columns must match
        DataProto.concat([a, b])


def test_concat_errors():
    with pytest.raises(ValueError, match="empty list"):
        DataProto.concat([])
    with pytest.raises(ValueError, match=r"piece 1 has tensor keys \['x'\] but piece 0 has \['mask', 'x'\]"):
        DataProto.concat([make_dp(2), make_dp(2).select(batch_keys=["x"])])
    with pytest.raises(ValueError, match=r"non-tensor keys \['gt'\]"):
        DataProto.concat([make_dp(2), make_dp(2).select(non_tensor_batch_keys=["gt"])])


def test_chunk():
    dp = make_dp(6, step=3)
    chunks = dp.chunk(3)
    assert [rows(c) for c in chunks] == [[0, 1], [2, 3], [4, 5]]
    assert all(c.meta_info == {"step": 3} for c in chunks)
    with pytest.raises(ValueError, match="DataProto of 6 rows into 4 equal chunks"):
        dp.chunk(4)
    with pytest.raises(ValueError, match="positive"):
        dp.chunk(0)


def test_split_last_piece_smaller_and_round_trip():
    dp = make_dp(5)
    pieces = dp.split(2)
    assert [rows(p) for p in pieces] == [[0, 1], [2, 3], [4]]
    assert rows(DataProto.concat(pieces)) == [0, 1, 2, 3, 4]
    assert [len(p) for p in dp.split(10)] == [5]


def test_repeat_interleave_and_tile():
    dp = make_dp(2, n=2)
    assert rows(dp.repeat(3)) == [0, 0, 0, 1, 1, 1]
    tiled = dp.repeat(2, interleave=False)
    assert rows(tiled) == [0, 1, 0, 1] and tiled.meta_info == {"n": 2}
    with pytest.raises(ValueError, match="positive repeat_times"):
        dp.repeat(0)


def test_reorder_in_place():
    dp = make_dp(4)
    dp.reorder(torch.tensor([3, 1, 0, 2]))
    assert rows(dp) == [3, 1, 0, 2]
    with pytest.raises(ValueError, match="permutation of range"):
        dp.reorder(torch.tensor([0, 0, 1, 2]))
    with pytest.raises(ValueError, match="permutation of range"):
        dp.reorder(torch.tensor([0, 1]))


def test_pad_and_unpad():
    dp = make_dp(5, step=1)
    padded, pad_size = pad_dataproto_to_divisor(dp, 4)
    assert pad_size == 3 and rows(padded) == [0, 1, 2, 3, 4, 0, 1, 2] and padded.meta_info == {"step": 1}
    assert rows(unpad_dataproto(padded, pad_size)) == [0, 1, 2, 3, 4]
    same, zero = dp.pad_to_divisor(5)
    assert same is dp and zero == 0 and unpad_dataproto(dp, 0) is dp
    with pytest.raises(ValueError, match=r"pad_size must be an int in \[0, 5\]"):
        unpad_dataproto(dp, 6)


def test_pad_bigger_than_length_cycles_rows():
    padded, pad_size = make_dp(2).pad_to_divisor(7)
    assert pad_size == 5 and rows(padded) == [0, 1, 0, 1, 0, 1, 0]
    assert len(padded.chunk(7)) == 7


def test_to_device_moves_tensors_only():
    dp = make_dp(2)
    assert dp.to("meta") is dp
    assert dp.batch["x"].device.type == "meta" and dp.non_tensor_batch["uid"][0] == "u0"


# ---------------------------------------------------------------- persistence and transport


def make_mixed_dtype_dp() -> DataProto:
    dp = make_dp(4, temperature=0.5)
    dp.batch["logp"] = torch.linspace(-1, 1, 8, dtype=torch.bfloat16).reshape(4, 2)
    dp.batch["flag"] = torch.tensor([True, False, True, True])
    return dp


def assert_same(a: DataProto, b: DataProto) -> None:
    assert set(a.batch.keys()) == set(b.batch.keys())
    for key in a.batch.keys():
        assert a.batch[key].dtype == b.batch[key].dtype and torch.equal(a.batch[key], b.batch[key]), key
    assert set(a.non_tensor_batch) == set(b.non_tensor_batch)
    for key, value in a.non_tensor_batch.items():
        assert list(value) == list(b.non_tensor_batch[key]), key
    assert a.meta_info == b.meta_info


def test_save_and_load(tmp_path):
    dp = make_mixed_dtype_dp()
    path = tmp_path / "batch.pt"
    dp.save_to_disk(path)
    assert_same(dp, DataProto.load_from_disk(path, map_location="cpu"))
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        DataProto.load_from_disk(tmp_path / "missing.pt")
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(TypeError, match="holds a dict, not a DataProto"):
        DataProto.load_from_disk(tmp_path / "other.pt")


def test_saved_batch_loads_without_unpickling_code(tmp_path):
    """Plain columns (strings, lists, dicts, numbers) and meta_info load with weights_only=True; lists stay one
    element per row."""
    dp = make_mixed_dtype_dp()
    dp.non_tensor_batch["answers"] = np.array([["a", "b"], ["c"]] + [[]] * (len(dp) - 2), dtype=object)
    dp.non_tensor_batch["score"] = np.arange(len(dp)).astype(object)
    dp.meta_info["temperature"] = 0.7
    path = tmp_path / "batch.pt"
    dp.save_to_disk(path)
    torch.load(path, weights_only=True)  # raises if the file needed arbitrary unpickling
    back = DataProto.load_from_disk(path)
    assert_same(dp, back)
    assert back.non_tensor_batch["answers"][0] == ["a", "b"] and back.non_tensor_batch["score"][3] == 3
    assert back.meta_info["temperature"] == 0.7


class _Payload:
    def __reduce__(self):
        return (os.mkdir, (self.target,))

    def __init__(self, target: str) -> None:
        self.target = target


def test_files_with_objects_need_trusted(tmp_path):
    dp = DataProto.from_dict(
        tensors={"x": torch.zeros(2, 1)}, non_tensors={"arrays": [np.zeros(2), np.ones(2)]}
    )  # numpy arrays inside a column: not plain values
    path = tmp_path / "objects.pt"
    dp.save_to_disk(path)
    with pytest.raises(ValueError, match="trusted=True"):
        DataProto.load_from_disk(path)
    assert (DataProto.load_from_disk(path, trusted=True).non_tensor_batch["arrays"][1] == 1).all()

    target = tmp_path / "pwned"
    torch.save(_Payload(str(target)), tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="can run code"):
        DataProto.load_from_disk(tmp_path / "evil.pt")
    assert not target.exists()


def test_pickle_round_trip_is_writable():
    dp = make_mixed_dtype_dp()
    back = pickle.loads(pickle.dumps(dp))
    assert_same(dp, back)
    back.batch["x"].add_(1)  # received tensors own writable memory
    assert back.batch["x"][0, 0] == 1 and dp.batch["x"][0, 0] == 0


def test_pickle_uses_out_of_band_buffers_and_only_the_view():
    big = DataProto.from_dict(tensors={"h": torch.zeros(1000, 256)})
    buffers = []
    payload = pickle.dumps(big[:10], protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 2000  # tensor bytes are not in the pickle stream
    assert sum(memoryview(b).nbytes for b in buffers) == 10 * 256 * 4  # just the 10 rows, not the whole storage
    back = pickle.loads(payload, buffers=buffers)
    assert back.batch["h"].shape == (10, 256)


def test_pickle_empty_and_non_tensor_only():
    assert len(pickle.loads(pickle.dumps(DataProto(meta_info={"a": 1})))) == 0
    back = pickle.loads(pickle.dumps(DataProto.from_dict(non_tensors={"uid": ["a"]})))
    assert back.batch is None and list(back.non_tensor_batch["uid"]) == ["a"]


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_round_trip(ray_local):
    def double_x_and_tag(data: DataProto) -> DataProto:
        """Runs in a Ray worker (nested so cloudpickle ships it by value; workers cannot import test modules)."""
        data.batch["x"].mul_(2)  # in-place writes to received tensors must be safe
        data.non_tensor_batch["tag"] = to_object_array(["done"] * len(data))
        data.meta_info["worker"] = True
        return data

    dp = make_mixed_dtype_dp()
    assert_same(dp, ray_local.get(ray_local.put(dp)))
    remote_fn = ray_local.remote(double_x_and_tag)
    out = ray_local.get(remote_fn.remote(dp[1:3]))
    assert out.batch["x"].tolist() == [[6, 8, 10], [12, 14, 16]]
    assert list(out.non_tensor_batch["tag"]) == ["done", "done"] and list(out.non_tensor_batch["uid"]) == ["u1", "u2"]
    assert out.meta_info == {"temperature": 0.5, "worker": True}
    assert torch.equal(out.batch["logp"], dp.batch["logp"][1:3])
    out.batch["x"].add_(1)  # the driver's copy is writable too
    assert dp.batch["x"][1].tolist() == [3, 4, 5]  # the worker changed its copy, not ours


# ---------------------------------------------------------------- collate_fn


def test_collate_fn():
    features = [
        {"input_ids": torch.tensor([1, 2]), "prompt": "a", "gt": [1, 2]},
        {"input_ids": torch.tensor([3, 4]), "prompt": "b", "gt": [3, 4]},
    ]
    dp = collate_fn(features)
    assert dp.batch["input_ids"].tolist() == [[1, 2], [3, 4]]
    assert dp.non_tensor_batch["prompt"].dtype == object and list(dp.non_tensor_batch["prompt"]) == ["a", "b"]
    assert dp.non_tensor_batch["gt"].shape == (2,) and dp.non_tensor_batch["gt"][1] == [3, 4]


def test_collate_fn_errors():
    with pytest.raises(ValueError, match="no rows"):
        collate_fn([])
    with pytest.raises(ValueError, match="Row 1 has keys"):
        collate_fn([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="'ids' has tensors of different shapes"):
        collate_fn([{"ids": torch.zeros(2)}, {"ids": torch.zeros(3)}])
    with pytest.raises(TypeError, match="'ids' mixes tensors and non-tensors \\(row 1\\)"):
        collate_fn([{"ids": torch.zeros(2)}, {"ids": [0, 0]}])


# Edges a mutation audit found unpinned: indices, meta_info in unions and selects, concat's fill, pickling.


def rows_dp(num_rows=4, **meta):
    return DataProto.from_dict(
        tensors={"x": torch.arange(num_rows * 3).reshape(num_rows, 3)},
        non_tensors={"uid": [f"u{i}" for i in range(num_rows)]},
        meta_info=meta or {"temperature": 1.0},
    )


def test_a_union_with_its_own_nan_column_is_no_conflict():
    dp = DataProto.from_dict(non_tensors={"reward/pass_rate": [float("nan"), 1.0]})
    dp.union(dp.select())  # the same column (NaN where a route lacks the key) on both sides is no conflict
    assert len(dp) == 2


def test_a_union_refuses_meta_dicts_that_differ():
    with pytest.raises(ValueError, match="meta_info 'cfg'"):
        rows_dp(2, cfg={"a": 1}).union(rows_dp(2, cfg={"a": 1, "b": 2}))


def test_a_union_refuses_a_list_against_a_tuple():
    with pytest.raises(ValueError, match="meta_info 'ids'"):
        rows_dp(2, ids=[1, 2]).union(rows_dp(2, ids=(1, 2)))


def test_a_union_refuses_lists_of_another_length():
    with pytest.raises(ValueError, match="meta_info 'ids'"):
        rows_dp(2, ids=[1]).union(rows_dp(2, ids=[1, 2]))


def test_an_index_past_the_rows_is_refused():
    with pytest.raises(IndexError, match="out of range"):
        rows_dp(4)[[0, 4]]


def test_negative_indices_in_a_list_count_from_the_end():
    assert rows_dp(4)[[-4]].non_tensor_batch["uid"].tolist() == ["u0"]


def test_a_tensor_that_requires_grad_survives_pickling():
    dp = DataProto.from_dict(tensors={"w": torch.ones(2, 2, requires_grad=True)})
    back = pickle.loads(pickle.dumps(dp))
    assert back.batch["w"].requires_grad and torch.equal(back.batch["w"], torch.ones(2, 2))


def test_bf16_rows_go_out_of_band():
    big = DataProto.from_dict(tensors={"h": torch.zeros(100, 256, dtype=torch.bfloat16)})
    buffers = []
    payload = pickle.dumps(big[:10], protocol=5, buffer_callback=buffers.append)
    assert sum(memoryview(b).nbytes for b in buffers) == 10 * 256 * 2  # bf16 rows go out of band too
    assert pickle.loads(payload, buffers=buffers).batch["h"].dtype == torch.bfloat16


def test_a_zero_dimensional_column_is_refused():
    from tensordict import TensorDict

    with pytest.raises(ValueError, match="'u' has no rows"):
        DataProto(
            batch=TensorDict({"x": torch.zeros(2)}, batch_size=[2]),
            non_tensor_batch={"u": np.array(None, dtype=object)},
        )


def test_a_float_tensor_index_is_refused():
    with pytest.raises(IndexError):
        rows_dp(4)[torch.tensor(1.0)]


def test_a_bool_index_is_refused():
    with pytest.raises(TypeError):
        rows_dp(4)[True]


def test_a_negative_int_index_counts_from_the_end():
    assert rows_dp(4)[-4].non_tensor_batch["uid"] == "u0"


def test_a_rows_meta_info_is_the_batchs():
    dp = rows_dp(2)
    assert dp[0].meta_info is dp.meta_info


def test_select_keeps_every_meta_key():
    dp = rows_dp(2, temperature=1.0, n=2)
    assert dp.select(batch_keys=["x"]).meta_info == {"temperature": 1.0, "n": 2}


def test_select_with_deepcopy_copies_nested_meta():
    dp = rows_dp(2, cfg={"a": 1})
    dp.select(deepcopy=True).meta_info["cfg"]["a"] = 2
    assert dp.meta_info["cfg"] == {"a": 1}


def test_concat_refuses_other_non_tensor_keys_even_after_an_empty_piece():
    a = rows_dp(2)[0:0]
    a.non_tensor_batch["note"] = to_object_array([])
    b = rows_dp(2)
    b.non_tensor_batch["other"] = to_object_array([1.0, 2.0])
    with pytest.raises(ValueError, match="non-tensor keys"):
        DataProto.concat([a, b])


def test_concat_fills_a_column_of_numpy_floats_with_nan():
    a, b = rows_dp(2), rows_dp(2)
    a.non_tensor_batch["env_solved"] = np.array([np.float32(1.0), np.float32(0.0)], dtype=object)
    merged = DataProto.concat([a, b])
    np.testing.assert_array_equal(merged.non_tensor_batch["env_solved"].astype(float), [1.0, 0.0, np.nan, np.nan])


def test_concat_fills_a_column_the_first_piece_lacks():
    a, b = rows_dp(2), rows_dp(2)
    a.non_tensor_batch["env_solved"] = np.array([1.0, 0.0], dtype=object)
    merged = DataProto.concat([b, a])  # the first piece lacks the column
    np.testing.assert_array_equal(merged.non_tensor_batch["env_solved"].astype(float), [np.nan, np.nan, 1.0, 0.0])


def test_repeat_doubles_by_default():
    assert len(rows_dp(3).repeat()) == 6


def test_reorder_takes_negative_indices():
    dp = rows_dp(4)
    dp.reorder([-1, 0, 1, 2])
    assert dp.non_tensor_batch["uid"].tolist() == ["u3", "u0", "u1", "u2"]


def test_pad_to_divisor_refuses_zero():
    with pytest.raises(ValueError, match="positive divisor"):
        rows_dp(2).pad_to_divisor(0)


def test_unpadding_an_empty_batch_leaves_it_empty():
    empty = rows_dp(2)[0:0]
    padded, pad_size = empty.pad_to_divisor(4)
    assert pad_size == 0 and len(unpad_dataproto(padded, pad_size)) == 0
    padded, pad_size = rows_dp(1).pad_to_divisor(2)
    assert len(unpad_dataproto(padded[1:], 1)) == 0


def test_from_dict_copies_the_callers_meta():
    meta = {"temperature": 1.0}
    dp = DataProto.from_dict(tensors={"x": torch.zeros(2)}, meta_info=meta)
    dp.meta_info["step"] = 3
    assert meta == {"temperature": 1.0}


def test_a_receiver_writes_to_its_own_copy_of_shared_buffers():
    big = DataProto.from_dict(tensors={"h": torch.zeros(10, 4)})
    buffers = []
    payload = pickle.dumps(big, protocol=5, buffer_callback=buffers.append)
    shared = [bytes(b.raw()) for b in buffers]  # read-only memory, as Ray's object store hands it over
    back = pickle.loads(payload, buffers=shared)
    back.batch["h"].add_(1)
    assert shared[0] == bytes(10 * 4 * 4)  # the receiver wrote to its own copy


def test_concat_fills_with_a_float_nan_not_none():
    a, b = rows_dp(2), rows_dp(2)
    a.non_tensor_batch["env_solved"] = np.array([1.0, 0.0], dtype=object)
    merged = DataProto.concat([a, b]).non_tensor_batch["env_solved"]
    assert isinstance(merged[2], float) and math.isnan(merged[2])


def test_plain_value_gives_python_numbers():
    from verl.protocol import plain_value

    assert type(plain_value(np.float64(1.5))) is float and type(plain_value(np.int64(3))) is int
