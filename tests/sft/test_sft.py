# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning: the assistant-only mask token by token, data and config errors, and real runs (Ray, two
FSDP2 gloo workers, tiny models) that lower the loss, resume exactly and export a model the RL trainer loads."""

import json
import logging
import os
import pathlib
import random
import re
import shutil
import signal
import sys

import numpy as np
import pytest
import torch
from processes import finished_stderr, start_run_in_a_group

from tests.model_folders import config_only_model
from tests.repo_files import export_checkpoint
from tests.sft.sft_testing import data_config
from verl.data.sft_dataset import SFTDataError, SFTDataset, collate_sft
from verl.models.tiny_models import get_or_build_tiny_model
from verl.utils.config import ConfigError


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = str(tmp_path_factory.mktemp("sft_models"))
    return {
        "text": get_or_build_tiny_model("qwen2", root),
        "vl": get_or_build_tiny_model("qwen2_5_vl", root, min_pixels=3136, max_pixels=3136),
    }


def masked_spans(ids: list[int], mask: list[int], decode) -> list[str]:
    spans, current = [], []
    for token, learn in zip(ids, mask):
        if learn:
            current.append(token)
        elif current:
            spans.append(decode(current))
            current = []
    if current:
        spans.append(decode(current))
    return spans


def test_the_loss_mask_is_exactly_the_assistant_turns(models) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4"},
    ]
    dataset = SFTDataset([{"messages": messages}], tokenizer, None, data_config())
    example = dataset.encode(0)
    ids, mask = example["input_ids"], example["loss_mask"]
    assert ids == tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    assert masked_spans(ids, mask, tokenizer.decode) == ["Hello! How can I help?<|im_end|>", "4<|im_end|>"]
    # the actor layout: first token as the prompt, the rest as the response, response_mask = the mask shifted
    batch = collate_sft([dataset[0]])
    assert batch.batch["input_ids"].shape == (1, 256) and batch.batch["responses"].shape == (1, 255)
    assert batch.batch["response_mask"][0].tolist()[: len(ids) - 1] == mask[1:]
    assert int(batch.batch["attention_mask"].sum()) == len(ids)
    # one-turn rows from two columns
    one_turn = SFTDataset(
        [{"q": "Hi", "a": "Hello"}], tokenizer, None, data_config(prompt_key="q", response_key="a")
    ).encode(0)
    assert masked_spans(one_turn["input_ids"], one_turn["loss_mask"], tokenizer.decode) == ["Hello<|im_end|>"]
    # TRL's conversational prompt-completion rows: the prompt's messages (a few-shot answer among them) are context,
    # only the completion is learned
    prompt_completion = data_config(prompt_key="prompt", response_key="completion")
    row = {"prompt": messages[:4], "completion": messages[4:]}
    example = SFTDataset([row], tokenizer, None, prompt_completion).encode(0)
    assert example["input_ids"] == ids
    assert masked_spans(example["input_ids"], example["loss_mask"], tokenizer.decode) == ["4<|im_end|>"]
    for completion, message in (
        ([messages[3]], "key 'completion': the response's messages must not hold a user turn"),
        ([{"from": "human", "value": "x"}], "key 'completion': the response's messages must not hold a user turn"),
        ([{"role": "assistant", "content": 4}], "key 'completion': message 0 needs string content"),
        (
            [{"role": "tool", "content": {"temperature": 20}}, {"role": "assistant", "content": "20"}],
            "message 0 needs string content (a tool's result is text: write its dict as JSON text)",
        ),
        ([{"role": "tool", "content": "x"}], "key 'completion': the conversation has no assistant message to learn"),
        ([], "key 'completion': expected a string or a non-empty list of messages, got list"),
    ):
        with pytest.raises(SFTDataError, match=re.escape(message)):
            SFTDataset([{"prompt": messages[:4], "completion": completion}], tokenizer, None, prompt_completion)


def test_a_long_conversations_mask_comes_from_one_tokenization_of_its_pieces(models, tmp_path, monkeypatch) -> None:
    """Each assistant turn's mask once tokenized the text before and through the turn on its own: quadratic in the
    turns (80 turns of 63k tokens took 3.3 s an example). The pieces between the turns' ends are tokenized once; the
    ids and masks equal the per-turn way's, for text and for images in several turns."""
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    messages = [{"role": "system", "content": "Be brief."}]
    for turn in range(12):
        messages += [
            {"role": "user", "content": f"<image>Question {turn}: what is {turn} + {turn}?"},
            {"role": "assistant", "content": f"It is {2 * turn}.\n\nAnything else?" if turn % 3 else " spaced "},
        ]
    Image.fromarray(np.full((56, 56, 3), 90, dtype=np.uint8)).save(tmp_path / "a.png")
    text_row = {"messages": [{**m, "content": m["content"].replace("<image>", "")} for m in messages]}
    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    processor = AutoProcessor.from_pretrained(models["vl"])
    datasets = [
        SFTDataset([text_row], tokenizer, None, data_config(max_length=2048)),
        SFTDataset(
            [{"messages": messages, "images": ["a.png"] * 12}],
            processor.tokenizer,
            processor,
            data_config(max_length=2048, image_dir=str(tmp_path)),
            AutoConfig.from_pretrained(models["vl"]),
        ),
    ]
    calls = []
    for dataset in datasets:
        positions = dataset._token_positions
        monkeypatch.setattr(
            dataset, "_token_positions", lambda *args, f=positions: calls.append(f(*args)) or calls[-1]
        )
        fast = dataset.encode(0)
        monkeypatch.setattr(dataset, "_token_positions", lambda *args: None)  # each turn's prefixes tokenized
        slow = dataset.encode(0)
        assert fast["input_ids"] == slow["input_ids"] and fast["loss_mask"] == slow["loss_mask"]
        assert len(masked_spans(fast["input_ids"], fast["loss_mask"], tokenizer.decode)) == 12
    assert [len(found) for found in calls] == [25, 25]  # both read off the pieces: 12 turns' starts and ends, the end


def test_tool_conversations_render_the_tools_and_learn_only_the_assistant(models) -> None:
    """A row's `tools` schemas are rendered as the RL prompts of a ToolEnv render them; tool results stay unlearned."""
    from transformers import AutoTokenizer

    from verl.envs import ToolEnv

    def multiply(a: float, b: float) -> float:
        """Multiply two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return a * b

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    tools = ToolEnv([multiply]).tool_schemas()
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'
    messages = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    config = data_config(max_length=512)
    example = SFTDataset([{"messages": messages, "tools": tools}], tokenizer, None, config).encode(0)
    ids, mask = example["input_ids"], example["loss_mask"]
    prompt = tokenizer.apply_chat_template(messages[:1], tools=tools, add_generation_prompt=True, tokenize=False)
    assert '"name": "multiply"' in prompt  # the schema is in the system turn, as in an RL prompt
    assert ids[: len(tokenizer.encode(prompt))] == tokenizer.encode(prompt)
    assert masked_spans(ids, mask, tokenizer.decode) == [call + "<|im_end|>", "42<|im_end|>"]
    as_text = SFTDataset([{"messages": messages, "tools": json.dumps(tools)}], tokenizer, None, config).encode(0)
    assert as_text["input_ids"] == ids  # tools stored as a JSON string, as datasets often keep them
    with pytest.raises(SFTDataError, match="key 'tools': the tools are a string but not valid JSON"):
        SFTDataset([{"messages": messages, "tools": "multiply"}], tokenizer, None, config)


def test_images_expand_in_place_and_stay_out_of_the_mask(models, tmp_path) -> None:
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    processor = AutoProcessor.from_pretrained(models["vl"])
    Image.fromarray(np.full((56, 56, 3), 200, dtype=np.uint8)).save(tmp_path / "a.png")
    row = {
        "messages": [
            {"role": "user", "content": "<image>How many squares?"},
            {"role": "assistant", "content": "3"},
        ],
        "images": ["a.png"],
    }
    config = data_config(image_dir=str(tmp_path))
    dataset = SFTDataset([row], processor.tokenizer, processor, config, AutoConfig.from_pretrained(models["vl"]))
    example = dataset.encode(0)
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert example["input_ids"].count(image_id) == 4  # 56x56 pixels: 4 vision tokens after merging
    assert masked_spans(example["input_ids"], example["loss_mask"], processor.tokenizer.decode) == ["3<|im_end|>"]
    item = dataset[0]
    assert item["position_ids"].shape == (3, 256) and item["multi_modal_data"]["images"][0].size == (56, 56)
    typed = [{"type": "image"}, {"type": "text", "text": "How many squares?"}]  # Hugging Face's and TRL's parts
    row["messages"] = [
        {"role": "user", "content": typed},
        {"role": "assistant", "content": [{"type": "text", "text": "3"}]},
    ]
    again = SFTDataset([row], processor.tokenizer, processor, config, AutoConfig.from_pretrained(models["vl"]))
    assert (
        again.encode(0)["input_ids"] == example["input_ids"] and again.encode(0)["loss_mask"] == example["loss_mask"]
    )
    # a VL model's marker without its image (a text model's is plain text: test_sft_data_checks)
    row = {"messages": [{"role": "user", "content": "<image>Hi"}, {"role": "assistant", "content": "x"}]}
    with pytest.raises(SFTDataError, match=r"row 0, key 'images': the messages have 1 <image> marker\(s\) but"):
        SFTDataset([row], processor.tokenizer, processor, config, AutoConfig.from_pretrained(models["vl"]))
    # an image in a learned assistant turn: its placeholder tokens were learned (or, in the last turn, the row was
    # refused as a template that drops content)
    drawn = [{"role": "user", "content": "Draw."}, {"role": "assistant", "content": "Here: <image>"}]
    row = {"messages": [*drawn, {"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Welcome."}]}
    row["images"] = ["a.png"]
    with pytest.raises(SFTDataError, match=r"row 0, key 'messages': message 1 is a learned assistant turn with an im"):
        SFTDataset([row], processor.tokenizer, processor, config, AutoConfig.from_pretrained(models["vl"]))


def test_an_image_changed_after_the_check_is_named_with_its_row_when_its_batch_is_built(models, tmp_path) -> None:
    """The check decodes every image before training; one removed or damaged since (a sync, a cleanup) failed at the
    step that drew it with PIL's or the file system's error alone, and the run's traceback."""
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    processor = AutoProcessor.from_pretrained(models["vl"])
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((56, 56, 3), 200, dtype=np.uint8)).save(tmp_path / name)
    row = {"messages": [{"role": "user", "content": "<image>Squares?"}, {"role": "assistant", "content": "3"}]}
    rows = [{**row, "images": ["a.png"]}, {**row, "images": ["b.png"]}]
    config = data_config(image_dir=str(tmp_path))
    dataset = SFTDataset(rows, processor.tokenizer, processor, config, AutoConfig.from_pretrained(models["vl"]))
    os.remove(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes((tmp_path / "b.png").read_bytes()[:60])  # cut short
    with pytest.raises(SFTDataError, match=r"row 0, key 'images': image 0 cannot be read: image file .*a\.png"):
        dataset[0]
    with pytest.raises(SFTDataError, match=r"row 1, key 'images': image 0 cannot be read: 'b\.png'"):
        dataset[1]


@pytest.mark.parametrize(
    ("row", "overrides", "message"),
    [
        ({"messages": [{"role": "user", "content": "Hi"}]}, {}, "no assistant message"),
        ({"messages": [{"role": "bot", "content": "Hi"}]}, {}, "message 0 needs a role"),
        ({"messages": "Hi"}, {}, "expected a non-empty list of messages"),
        ({"q": 3, "a": "x"}, {"prompt_key": "q", "response_key": "a"}, "key 'q': expected a string"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}]},
            {},
            "message 0: content part 0 holds its image itself; put the images in the image column",
        ),
        (  # "\n" + "\n" is one token across the turn's start: found at the step that drew the row, after Ray started
            {
                "messages": [
                    {"role": "user", "content": "2 + 2?"},
                    {"role": "assistant", "content": "\nThe answer is 4"},
                ]
            },
            {},
            "row 0, key 'messages': message 1 tokenizes differently alone than inside the conversation",
        ),
        (  # the same as prompt and completion: the completion's column is named (it said 'messages', turn 1)
            {"prompt": "2 + 2?", "completion": "\nThe answer is 4"},
            {"prompt_key": "prompt", "response_key": "completion"},
            "row 0, key 'completion': message 0 tokenizes differently alone than inside the conversation",
        ),
    ],
)
def test_bad_rows_are_named(models, row, overrides, message) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    with pytest.raises(SFTDataError, match="row 0") as excinfo:
        SFTDataset([row], tokenizer, None, data_config(**overrides))
    assert message in str(excinfo.value)


def test_the_check_names_every_bad_row_up_to_its_limit(models, monkeypatch) -> None:
    """Each run named the first bad row only: on a large set every fix cost a whole check (1.3 ms a row) to find the
    next one."""
    from transformers import AutoTokenizer

    from verl.data import sft_dataset

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    good = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]}
    empty = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": " "}]}
    merged = {"messages": [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "\n4"}]}
    rows = [good, empty, good, merged, {"messages": "hello"}, good]
    with pytest.raises(SFTDataError) as excinfo:
        SFTDataset(rows, tokenizer, None, data_config())
    lines = str(excinfo.value).splitlines()
    assert lines[0] == "3 rows of the data cannot be trained on (the check stops at 20):"
    assert [line.split(", ")[1] for line in lines[1:]] == ["row 1", "row 3", "row 4"]  # in row order
    monkeypatch.setattr(sft_dataset, "REPORTED_ERRORS", 2)
    with pytest.raises(SFTDataError, match=r"^at least 2 rows of the data .*\n.*, row 1, .*\n.*, row 3, [^\n]*$"):
        SFTDataset(rows, tokenizer, None, data_config())


def test_a_template_that_drops_the_last_turns_thinking_is_refused(models) -> None:
    """DeepSeek-R1's template keeps what follows </think> in every assistant turn: the reasoning an SFT set teaches
    was masked out without a word (the answer alone learned)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'user' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n"
        "{% else %}<|im_start|>assistant\n{{ m['content'].split('</think>')[-1] | trim }}<|im_end|>\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    question = {"role": "user", "content": "2 + 2?"}
    thinking = {"messages": [question, {"role": "assistant", "content": "<think>\n2 and 2\n</think>\n\n4"}]}
    with pytest.raises(SFTDataError, match=r"row 0.*renders the last assistant turn without part of its content"):
        SFTDataset([thinking], tokenizer, None, data_config())
    plain = {"messages": [question, {"role": "assistant", "content": "  4 "}]}  # trimmed: the same content
    assert SFTDataset([plain], tokenizer, None, data_config()).encode(0)["loss_mask"].count(1) > 0


def test_too_long_conversations_error_or_are_cut(models) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "word " * 80}]}
    with pytest.raises(SFTDataError, match="more than data.max_length=32; raise it, or set data.truncation=right"):
        SFTDataset([row], tokenizer, None, data_config(max_length=32)).encode(0)
    cut = SFTDataset([row], tokenizer, None, data_config(max_length=32, truncation="right")).encode(0)
    assert len(cut["input_ids"]) == 32 and cut["loss_mask"][-1] == 1


def test_sft_settings_it_does_not_read_are_warned_about(tmp_path, caplog) -> None:
    """A messages column beside prompt/response columns, a constant schedule's floor, mixed precision on the CPU."""
    from verl.sft.config import load_sft_config

    (tmp_path / "train.jsonl").write_text("{}\n")
    base = [f"data.train_files={tmp_path / 'train.jsonl'}", "worker.model.model_path=Qwen/Qwen2-0.5B"]
    unread = ["data.prompt_key=q", "data.response_key=a", "data.messages_key=chat", "worker.optim.min_lr_ratio=0.1"]
    with caplog.at_level(logging.WARNING, logger="verl.utils.config"):
        load_sft_config([*base, *unread, "trainer.device=cpu", "worker.fsdp.mp_reduce_dtype=bf16"])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "data.prompt_key is set (prompt and response columns): data.messages_key=chat has no effect in this run.",
        "worker.optim.lr_scheduler_type=constant (no decay): worker.optim.min_lr_ratio=0.1 has no effect in this run.",
        "on the CPU (FSDP computes and reduces in the weights' dtype): worker.fsdp.mp_reduce_dtype=bf16 has no effect "
        "in this run.",
    ]


def test_config_errors_name_the_key(tmp_path) -> None:
    from verl.sft.config import load_sft_config

    (tmp_path / "train.jsonl").write_text("{}\n")
    base = [f"data.train_files={tmp_path / 'train.jsonl'}", "worker.model.model_path=Qwen/Qwen2-0.5B"]
    assert load_sft_config(base).data.batch_size == 32
    with pytest.raises(ConfigError, match="data.truncation is 'left'"):
        load_sft_config([*base, "data.truncation=left"])
    with pytest.raises(ConfigError, match="data.batch_size=3 must split evenly"):
        load_sft_config([*base, "data.batch_size=3", "trainer.n_gpus_per_node=2"])
    with pytest.raises(ConfigError, match="data.prompt_key and data.response_key go together"):
        load_sft_config([*base, "data.prompt_key=q"])
    assert load_sft_config([*base, "worker.model.lora.rank=8"]).worker.model.lora.rank == 8
    with pytest.raises(ConfigError, match="rank must be >= 0"):
        load_sft_config([*base, "worker.model.lora.rank=-1"])
    with pytest.raises(ConfigError, match="Unknown|unknown"):
        load_sft_config([*base, "data.batchsize=3"])
    with pytest.raises(ConfigError, match="worker.fsdp.torch_dtype=bf16 with worker.optim.strategy=adamw"):
        load_sft_config([*base, "worker.fsdp.torch_dtype=bf16"])
    with pytest.raises(ConfigError, match="'worker.optim.training_steps' is derived from trainer.max_steps"):
        load_sft_config([*base, "worker.optim.training_steps=5"])
    with pytest.raises(ConfigError, match=r"'data.seed' is a seed, which must lie in \[0, 2\*\*63\)"):
        load_sft_config([*base, "data.seed=-1"])
    with pytest.raises(ConfigError, match="data.min_pixels=5000 is above data.max_pixels=4000"):
        load_sft_config([*base, "data.min_pixels=5000", "data.max_pixels=4000"])
    with pytest.raises(ConfigError, match="worker.fsdp.fsdp_size=3 must divide the 4 devices"):
        load_sft_config([*base, "worker.fsdp.fsdp_size=3", "trainer.n_gpus_per_node=4"])
    moe = config_only_model(tmp_path / "moe", {"model_type": "qwen3_moe", "num_experts": 4})
    assert load_sft_config([*base, f"worker.model.model_path={moe}"]).worker.model.model_path == str(moe)
    with pytest.raises(
        NotImplementedError, match=r"'qwen3_moe', num_experts=4\) and the run gives every linear layer"
    ):
        load_sft_config([*base, f"worker.model.model_path={moe}", "worker.model.lora.rank=8"])
    targets = [f"worker.model.model_path={moe}", "worker.model.lora.rank=8", "worker.model.lora.target_modules=q_proj"]
    assert load_sft_config([*base, *targets]).worker.model.lora.target_modules == "q_proj"
    (tmp_path / "step").mkdir()
    with pytest.raises(ConfigError, match="trainer.load_checkpoint_path='.*step' must be a global_step_N directory"):
        load_sft_config([*base, f"trainer.load_checkpoint_path={tmp_path / 'step'}"])
    assert not load_sft_config([*base, "trainer.find_last_checkpoint=false"]).trainer.find_last_checkpoint
    with pytest.raises(ConfigError, match=r"worker.model.attn_implementation=flash_attention_2 runs on CUDA only"):
        load_sft_config([*base, "worker.model.attn_implementation=flash_attention_2", "trainer.device=cpu"])


def test_a_setting_sft_leaves_off_is_warned_about(tmp_path, caplog) -> None:
    """LoRA's alpha at rank 0, a validation batch size without validation files: accepted and never read, with no
    word (RL warned of them; SFT did not)."""
    from verl.sft.config import load_sft_config

    (tmp_path / "train.jsonl").write_text("{}\n")
    base = [f"data.train_files={tmp_path / 'train.jsonl'}", "worker.model.model_path=Qwen/Qwen2-0.5B"]
    with caplog.at_level(logging.WARNING):
        load_sft_config([*base, "worker.model.lora.alpha=16", "data.val_batch_size=8"])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "worker.model.lora.rank=0 (LoRA off): worker.model.lora.alpha=16 has no effect in this run.",
        "data.val_files is empty: data.val_batch_size=8 has no effect in this run.",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # read: no word
        load_sft_config([*base, "worker.model.lora.rank=8", "worker.model.lora.alpha=16"])
    assert "has no effect" not in caplog.text


def test_a_finished_runs_command_again_has_nothing_to_train_and_stops_before_ray(
    models, tmp_path, caplog, monkeypatch
) -> None:
    """As RL: a checkpoint already at the run's last step (its command run again, or a lower max_steps) is said and
    nothing starts (SFT started Ray, trained nothing or past max_steps, and exported the step-2 model again)."""
    import shutil

    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft
    from verl.trainer import ray_setup

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray_setup, "start_ray", no_ray)  # the module's Ray may be up already (local_ray)

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    done = tmp_path / "run" / "global_step_2"
    (done / "actor" / "huggingface").mkdir(parents=True)
    shutil.copy(os.path.join(models["text"], "config.json"), done / "actor" / "huggingface" / "config.json")
    (done / "trainer_state.json").write_text('{"trainer": "sft", "global_step": 2}')
    (tmp_path / "run" / "huggingface").mkdir()  # the finished run's export (one it owes: the test below)
    args = sft_args(tmp_path, models["text"], str(tmp_path / "run"), f"trainer.load_checkpoint_path={done}")
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        assert run_sft(load_sft_config([*args, "trainer.max_steps=1"])) == {}
    assert f"Nothing to train: the run resumes from {done}, at step 2, and trains 1 step(s)" in caplog.text
    assert not any((tmp_path / "run" / "huggingface").iterdir())  # not exported again


def test_an_earlier_steps_export_left_by_a_run_stopped_while_exporting_is_owed_again(tmp_path, caplog) -> None:
    """A run extended from step 4 to 8 (or started over) is killed while it exports step 8: the export is renamed into
    place once whole, so step 4's stays. The command again had nothing to train and kept it without a word, and the
    RL run pointed at <save_checkpoint_path>/huggingface started from step 4's weights. Now it is exported again; an
    export written after the checkpoint's save is not."""
    from types import SimpleNamespace

    from verl.sft.main import export_owed

    trainer = SimpleNamespace(save_checkpoint_path=str(tmp_path), export_hf_model=True)
    export = tmp_path / "huggingface"
    export.mkdir()
    (export / "config.json").write_text("{}")
    step = tmp_path / "global_step_8"
    step.mkdir()
    (step / "trainer_state.json").write_text('{"trainer": "sft", "global_step": 8}')
    saved = os.path.getmtime(step / "trainer_state.json")
    os.utime(export, (saved - 60, saved - 60))  # step 4's export, from before step 8's save
    with caplog.at_level(logging.WARNING, logger="verl.sft.main"):
        assert export_owed(trainer, str(step))
    assert f"{export} was exported before {step} was saved" in caplog.text
    os.utime(export, (saved + 1, saved + 1))  # step 8's own export, written after its save
    assert not export_owed(trainer, str(step))
    trainer.export_hf_model = False
    os.utime(export, (saved - 60, saved - 60))
    assert not export_owed(trainer, str(step))


@pytest.mark.slow
def test_a_finished_run_whose_export_did_not_finish_exports_when_its_command_runs_again(
    models, tmp_path, local_ray, caplog
) -> None:
    """The run is killed while it exports (after its last checkpoint; the export is renamed into place once whole, so
    none is there): its command again said "Nothing to train" and exported nothing, and the RL run pointed at
    <save_checkpoint_path>/huggingface found no model. Now it exports the checkpoint's model, without training: the
    uninterrupted run's export, tensor for tensor."""
    from safetensors.torch import load_file

    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    save = tmp_path / "run"
    args = [*sft_args(tmp_path, models["text"], str(save)), "trainer.max_steps=1"]
    run_sft(load_sft_config(args))
    exported = load_file(save / "huggingface" / "model.safetensors")
    shutil.rmtree(save / "huggingface")  # as a kill -9 during the export leaves the folder
    with caplog.at_level(logging.WARNING):
        run_sft(load_sft_config(args))
    assert "Nothing to train" in caplog.text and f"{save / 'huggingface'} holds no exported model" in caplog.text
    again = load_file(save / "huggingface" / "model.safetensors")
    assert again.keys() == exported.keys() and all(torch.equal(again[key], exported[key]) for key in exported)
    assert sorted(read_steps(save)) == [1]


def test_the_checkpoint_to_resume_from_is_checked_before_ray_starts(models, tmp_path) -> None:
    """trainer.load_checkpoint_path and trainer.find_last_checkpoint as in RL: a checkpoint of another model, of
    another LoRA setting, or an interrupted save is one error naming SFT's keys (the latter two used to fail in the
    workers, or name a key SFT did not have)."""
    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    other = tmp_path / "other" / "global_step_2"
    (other / "actor" / "huggingface").mkdir(parents=True)
    config = json.loads(open(os.path.join(models["text"], "config.json")).read())
    (other / "actor" / "huggingface" / "config.json").write_text(json.dumps({**config, "hidden_size": 96}))
    (other / "trainer_state.json").write_text('{"global_step": 2}')
    save = str(tmp_path / "run")
    explicit = f"trainer.load_checkpoint_path={other}"
    for extra, message in (
        ((), f"it was trained from another model than worker.model.model_path={models['text']} (hidden_size 96"),
        (("worker.model.lora.rank=8",), "its actor holds a full model (no LoRA adapters), but this run trains LoRA"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            run_sft(load_sft_config(sft_args(tmp_path, models["text"], save, explicit, *extra)))
    os.makedirs(os.path.join(save, "global_step_1"))  # an interrupted save
    with pytest.raises(ConfigError, match=r"global_step_1 lacks an actor .*trainer.find_last_checkpoint=false"):
        run_sft(load_sft_config(sft_args(tmp_path, models["text"], save)))
    # a tracker cut short (a full disk) was a traceback in SFT (a ValueError), one line in RL
    (tmp_path / "run" / "checkpoint_tracker.json").write_text('{"last_global_step": 4, ')
    with pytest.raises(ConfigError, match=r"checkpoint_tracker.json"):
        run_sft(load_sft_config(sft_args(tmp_path, models["text"], save)))


# ---------------------------------------------------------------------------------------------------- real runs


def test_several_nodes_without_ray_address_say_the_run_stays_on_this_machine(
    models, tmp_path, caplog, monkeypatch
) -> None:
    """As RL: trainer.nnodes=2 without RAY_ADDRESS starts a Ray of this machine alone, which RL said and SFT did
    not (the run then waited for nodes that never come, or trained on fewer)."""
    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft
    from verl.trainer import ray_setup

    class NoRay(Exception):
        pass

    def no_ray(*args, **kwargs):
        raise NoRay

    monkeypatch.setattr(ray_setup, "start_ray", no_ray)  # the warning comes before Ray starts
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_setup.ray, "is_initialized", lambda: False)  # the module's Ray may be up (local_ray)
    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    for nodes in (2, 1):
        caplog.clear()
        args = sft_args(tmp_path, models["text"], str(tmp_path / f"run{nodes}"), f"trainer.nnodes={nodes}")
        with caplog.at_level(logging.WARNING, logger=ray_setup.__name__), pytest.raises(NoRay):
            run_sft(load_sft_config(args))
        alone = "The run asks for 2 nodes but RAY_ADDRESS is unset: it starts a Ray of its own on this machine alone."
        assert (alone in caplog.text) == (nodes == 2), caplog.text


def write_conversations(path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            messages = [
                {"role": "user", "content": f"What is {a} + {b}?"},
                {"role": "assistant", "content": str(a + b)},
                {"role": "user", "content": "And doubled?"},
                {"role": "assistant", "content": str(2 * (a + b))},
            ]
            f.write(json.dumps({"messages": messages}) + "\n")


def sft_args(tmp_path, model: str, save: str, *extra: str) -> list[str]:
    return [
        f"config={REPO}/examples/sft.yaml",
        f"data.train_files={tmp_path / 'train.jsonl'}",
        f"data.val_files={tmp_path / 'val.jsonl'}",
        f"worker.model.model_path={model}",
        "worker.model.enable_gradient_checkpointing=false",
        "worker.optim.lr=1e-3",
        "worker.optim.lr_warmup_ratio=0",
        "data.max_length=64",
        "data.batch_size=16",
        "data.val_batch_size=8",
        "worker.micro_batch_size_per_device=4",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.logger=[file]",
        "trainer.val_freq=2",
        f"trainer.save_checkpoint_path={save}",
        *extra,
    ]


DROPOUT = "worker.model.override_config.attention_dropout=0.3"


@pytest.mark.slow
def test_data_seed_draws_other_dropout_masks(models, tmp_path, local_ray) -> None:
    """With dropout and the same batches (data.shuffle=false), data.seed alone changes the first step's loss (every
    worker used to draw from torch's unseeded default RNG, so every seed drew the same masks). On the way: with
    trainer.val_freq=-1 the validation runs at the last step only, and trainer.export_hf_model=false exports nothing."""
    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    losses = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        args = ["trainer.max_steps=1", "data.shuffle=false", f"data.seed={seed}", DROPOUT, "trainer.val_freq=-1"]
        export = [] if name == "a" else ["trainer.export_hf_model=false"]
        run_sft(load_sft_config(sft_args(tmp_path, models["text"], str(tmp_path / name), *args, *export)))
        losses[name] = read_steps(str(tmp_path / name))[1]["train/loss"]
        assert "val/loss" in read_steps(str(tmp_path / name))[1]
        assert (tmp_path / name / "huggingface" / "config.json").exists() == (name == "a")
    assert losses["a"] == losses["b"] and losses["a"] != losses["c"], losses


def read_steps(save) -> dict[int, dict]:
    with open(os.path.join(save, "experiment_log.jsonl")) as f:
        return {row["step"]: row for row in map(json.loads, f)}


@pytest.mark.slow
def test_a_full_disk_stops_sft_with_one_line_and_keeps_the_latest_checkpoint(
    models, tmp_path, local_ray, small_disk, capsys, caplog
) -> None:
    from verl.sft.main import main
    from verl.trainer.checkpointing import find_last_checkpoint, saved_steps

    write_conversations(tmp_path / "train.jsonl", 48, seed=0)
    write_conversations(tmp_path / "val.jsonl", 7, seed=1)
    disk = small_disk(256 * 1024)
    root = os.path.join(disk.path, "run")
    args = sft_args(tmp_path, models["text"], root, "trainer.save_freq=1", "trainer.save_limit=1")
    assert main([*args, "trainer.max_steps=2"]) == 0
    assert saved_steps(root) == [2]  # trainer.save_limit=1
    disk.resize(disk.used_kib() * 3 // 2)  # room for half a checkpoint more
    with caplog.at_level(logging.INFO, logger="verl.trainer.checkpointing"):
        assert main([*args, "trainer.max_steps=3"]) == 1
    plan = f"Checkpoints go to {root} (model, optimizer and data-loader state, every 1 steps and at the end; about "
    assert plan in caplog.text  # said at the start, as the RL trainer says it
    assert "One checkpoint of this run takes " in caplog.text
    error = capsys.readouterr().err
    assert "Error: Could not save the checkpoint of step 3: " in error and "No space left on device" in error, error
    assert "global_step_2 is intact and still the latest" in error and "Traceback" not in error
    # elsewhere, the run resumes only from that step named (a new save path alone started over)
    assert f"trainer.load_checkpoint_path={os.path.join(root, 'global_step_2')}." in error, error
    assert saved_steps(root) == [2]  # the partial step 3 is removed
    assert find_last_checkpoint(root) == os.path.join(root, "global_step_2")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["step_2", "validation"])
def test_an_image_removed_during_sft_stops_it_with_one_line_after_saving_the_last_step(
    models, tmp_path, local_ray, monkeypatch, capsys, caplog, when
) -> None:
    """The image every row shows (training and validation) is removed after the checks at the start: before step 2's
    batch is built, or before the validation after step 2 (the data's third batch). The run stopped with a traceback
    and no checkpoint (every step lost with trainer.save_freq=-1); now the step the workers hold is saved first and the
    error names the row and the image, and once the image is back the same command resumes after it, each step's row
    of metrics logged once. (The removal is
    made by wrapping the driver's `_collate`, so that it falls between the batches.)"""
    from PIL import Image

    import verl.sft.main as sft_main

    Image.fromarray(np.full((56, 56, 3), 200, dtype=np.uint8)).save(tmp_path / "a.png")
    kept = (tmp_path / "a.png").read_bytes()
    row = {"messages": [{"role": "user", "content": "<image>Squares?"}, {"role": "assistant", "content": "3"}]}
    for name, count in (("train", 32), ("val", 2)):
        (tmp_path / f"{name}.jsonl").write_text((json.dumps({**row, "images": ["a.png"]}) + "\n") * count)
    save = tmp_path / "run"
    args = sft_args(tmp_path, models["vl"], str(save), f"data.image_dir={tmp_path}", "trainer.max_steps=2")
    args += ["data.min_pixels=3136", "data.max_pixels=3136", "trainer.export_hf_model=false"]
    collate, batches = sft_main._collate, []

    def removing_the_image(dataset, indices):
        batches.append(indices)
        if len(batches) == (2 if when == "step_2" else 3):
            os.remove(tmp_path / "a.png")
        return collate(dataset, indices)

    monkeypatch.setattr(sft_main, "_collate", removing_the_image)
    assert sft_main.main(args) == 1  # as RL's run that a row stops once training runs (it was 2, a refusal's)
    err = capsys.readouterr().err
    file = "train" if when == "step_2" else "val"
    assert "Traceback" not in err and re.match(rf"Error: file '.*{file}\.jsonl', row \d+, key 'images': image 0 ", err)
    failed, step = ("Step 2", 1) if when == "step_2" else ("The validation after step 2", 2)
    saved = f"{failed} stopped on its data (the error follows); step {step}, which the workers hold, is saved"
    assert saved in caplog.text, caplog.text
    assert (save / f"global_step_{step}" / "trainer_state.json").is_file()
    # as RL says after such an error (SFT said nothing of the checkpoint)
    resumes = (
        f"The latest checkpoint is {save / f'global_step_{step}'}: running the same command again resumes from it."
    )
    assert err.splitlines()[1:2] == [resumes], err
    if when == "step_2":  # the error at the start, before any step (the image still gone): no word of a resume
        assert sft_main.main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("Error: at least 20 rows") and "running the same command" not in err, err
    (tmp_path / "a.png").write_bytes(kept)
    assert sft_main.main(args) == 0
    # every step's row once: after a failed validation the resume has no step to train, and step 2's row (logged
    # before the error went up) was missing
    assert sorted(read_steps(save)) == [1, 2]


@pytest.mark.slow
def test_a_run_resumed_with_another_batch_size_goes_on_where_the_saved_one_stopped_in_the_data(
    models, tmp_path, local_ray, monkeypatch, caplog
) -> None:
    """Steps were placed in the data by their number: 2 steps of 16 of 48 rows, resumed with data.batch_size=8, put
    step 3 at rows 16-23 of the epoch's order, trained again, and the epoch's last 16 rows were never trained."""
    from verl.sft import main as sft_main
    from verl.sft.config import load_sft_config

    write_conversations(tmp_path / "train.jsonl", 48, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    drawn: list[list[int]] = []  # the training batches' rows (the validation's 2 rows are collated there too)
    collate = sft_main._collate

    def recording(dataset, indices):
        if len(dataset) == 48:
            drawn.append(indices)
        return collate(dataset, indices)

    monkeypatch.setattr(sft_main, "_collate", recording)
    save = str(tmp_path / "run")
    args = ("trainer.val_freq=-1", "trainer.export_hf_model=false")
    sft_main.run_sft(load_sft_config(sft_args(tmp_path, models["text"], save, *args, "trainer.max_steps=2")))
    resumed = ("data.batch_size=8", "trainer.max_steps=4")
    with caplog.at_level(logging.WARNING, logger="verl.sft.main"):
        sft_main.run_sft(load_sft_config(sft_args(tmp_path, models["text"], save, *args, *resumed)))
    assert [len(rows) for rows in drawn] == [16, 16, 8, 8]
    assert sorted(row for rows in drawn for row in rows) == list(range(48))  # the epoch, each row once
    assert "data.batch_size=8, and" in caplog.text and "was saved with 16: the run resumes at step 2" in caplog.text
    assert [read_steps(save)[step]["train/epoch"] for step in (3, 4)] == [0.0, 0.0]


@pytest.mark.slow
def test_sigterm_stops_sft_after_its_step_with_a_checkpoint_the_next_run_resumes(models, tmp_path, local_ray) -> None:
    """As the RL trainer does (SFT used to die at once and lose the steps since its last save): the signal goes to
    the launcher's whole process group, the step in flight finishes and is saved, exit 143; the same command resumes
    with no step lost or repeated."""
    from verl.trainer.checkpointing import CheckpointTracker, is_complete

    write_conversations(tmp_path / "train.jsonl", 48, seed=0)
    write_conversations(tmp_path / "val.jsonl", 7, seed=1)
    save = tmp_path / "run"
    command = [sys.executable, "-m", "verl.sft.main", *sft_args(tmp_path, models["text"], str(save))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = save / "experiment_log.jsonl"
    launcher, proc = start_run_in_a_group([*command, "trainer.max_steps=300"], env, REPO, log, "train/epoch")
    os.killpg(launcher.pid, signal.SIGTERM)
    launcher.wait(timeout=10)
    stderr = finished_stderr(proc, 300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("Stopped by SIGTERM after step")]
    assert len(stopped) == 1 and "checkpoint saved to" in stopped[0] and "Traceback" not in stderr, stderr[-3000:]
    step = CheckpointTracker.load(str(save)).last_global_step
    assert 1 <= step < 300 and is_complete(str(save / f"global_step_{step}"))
    from verl.sft.main import main

    assert main([*command[3:], f"trainer.max_steps={step + 1}"]) == 0  # the same command, in this process's Ray
    assert sorted(read_steps(save)) == list(range(1, step + 2))


@pytest.mark.slow
def test_sft_runs_lower_the_loss_resume_exactly_and_export_for_rl(models, tmp_path, local_ray, caplog) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.sft.config import load_sft_config
    from verl.sft.main import build_datasets, run_sft
    from verl.trainer.config import load_config

    write_conversations(tmp_path / "train.jsonl", 48, seed=0)
    write_conversations(tmp_path / "val.jsonl", 7, seed=1)  # 7 rows over 2 workers: one padding row, not counted
    # a template file with the model's own rendering, marked: the export must carry the file the data was rendered with
    template = "{#- the SFT run's template -#}\n" + AutoTokenizer.from_pretrained(models["text"]).chat_template
    (tmp_path / "template.jinja").write_text(template)
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    dropout = DROPOUT  # the resumed run's steps 3 and 4 draw the masks the unbroken run drew
    straight_args = sft_args(tmp_path, models["text"], straight, "trainer.max_steps=4", dropout)
    straight_args.append(f"data.override_chat_template={tmp_path / 'template.jinja'}")
    run_sft(load_sft_config(straight_args))
    run_sft(load_sft_config(sft_args(tmp_path, models["text"], interrupted, "trainer.max_steps=2", dropout)))
    state = json.loads(open(os.path.join(interrupted, "global_step_2", "trainer_state.json")).read())
    assert len(state.pop("model_fingerprint")) == 32  # of the weights the run started from
    assert state.pop("settings")["data.batch_size"] == 16  # every setting, compared on resume
    assert state == {
        "trainer": "sft",
        "global_step": 2,
        "train_rows": 48,
        "batch_size": 16,
        "seed": 1,
        "shuffle": True,
        "epoch": 0,  # the place in the data: 32 of the epoch's 48 rows drawn
        "epoch_rows": 32,
    }
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        run_sft(load_sft_config(sft_args(tmp_path, models["text"], interrupted, "trainer.max_steps=4", dropout)))
    assert "The training data has" not in caplog.text  # the same data: no warning that its order changed
    assert "was saved with other settings" not in caplog.text
    assert "with settings other than" not in caplog.text  # trainer.max_steps alone changed

    rows = read_steps(straight)
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[4]["train/loss"] < 0.5 * rows[1]["train/loss"]  # it learns
    assert rows[4]["val/loss"] < rows[2]["val/loss"]
    assert rows[3]["train/epoch"] == 0.0 and rows[4]["train/epoch"] == 1.0  # 48 rows: 3 steps an epoch
    for row in rows.values():  # the step's time and its tokens per second per device (2 of them)
        assert row["timing_s/step"] > 0 and row["perf/throughput"] > row["train/tokens"] / row["timing_s/step"] / 2
    resumed = read_steps(interrupted)
    for step in (3, 4):  # the resumed run continues with the same batches and optimizer state
        assert resumed[step]["train/loss"] == pytest.approx(rows[step]["train/loss"], rel=1e-5)

    exported = os.path.join(straight, "huggingface")
    model = AutoModelForCausalLM.from_pretrained(exported)
    assert AutoTokenizer.from_pretrained(exported).chat_template == template
    # the model folder's generation config (its stop tokens, which RL reads) and KV cache setting, as loaded
    source = AutoModelForCausalLM.from_pretrained(models["text"])
    for folder in (exported, os.path.join(straight, "global_step_4", "actor", "huggingface")):
        generation = json.loads(open(os.path.join(folder, "generation_config.json")).read())
        assert generation["eos_token_id"] == source.generation_config.eos_token_id, folder
        assert json.loads(open(os.path.join(folder, "config.json")).read())["use_cache"] is True, folder
    # val/loss of step 4 (after its update, the exported weights): every validation token once, none twice
    _, val, _ = build_datasets(load_sft_config(straight_args))
    total = count = 0.0
    with torch.no_grad():
        for index in range(len(val)):
            example = val.encode(index)
            ids, mask = torch.tensor(example["input_ids"]), torch.tensor(example["loss_mask"][1:], dtype=torch.float)
            log_probs = torch.log_softmax(model(input_ids=ids[None]).logits[0, :-1].float(), -1)
            total -= (log_probs.gather(-1, ids[1:, None])[:, 0] * mask).sum().item()
            count += mask.sum().item()
    assert len(val) == 7 and rows[4]["val/loss"] == pytest.approx(total / count, rel=1e-4)
    merged = tmp_path / "merged"
    export_checkpoint(os.path.join(straight, "global_step_4", "actor"), merged)
    reference = AutoModelForCausalLM.from_pretrained(merged)
    for (name, param), (_, other) in zip(model.state_dict().items(), reference.state_dict().items()):
        torch.testing.assert_close(param, other, rtol=0, atol=0, msg=name)
    original = AutoModelForCausalLM.from_pretrained(models["text"]).state_dict()
    assert any(not torch.equal(param, original[name]) for name, param in model.state_dict().items())
    # the RL trainer takes the export as its model
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 0.0}\n")
    rl = load_config(
        [
            f"data.train_files={tmp_path / 'train.jsonl'}",
            f"worker.actor.model.model_path={exported}",
            f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
            "worker.rollout.n=2",
        ]
    )
    assert rl.worker.actor.model.model_path == exported


@pytest.mark.slow
def test_lora_sft_trains_the_adapters_alone_resumes_exactly_and_exports_them_merged(
    models, tmp_path, local_ray, capsys
):
    from safetensors.torch import load_file
    from torch.distributed.checkpoint import FileSystemReader
    from transformers import AutoModelForCausalLM

    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft
    from verl.utils.checkpoint.integrity import damage, write_record

    write_conversations(tmp_path / "train.jsonl", 48, seed=0)
    write_conversations(tmp_path / "val.jsonl", 7, seed=1)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    base = tmp_path / "base"  # a model folder that declares bf16 weights, as the released Qwen models do
    shutil.copytree(models["text"], base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    lora = ["worker.model.lora.rank=8", "worker.model.lora.alpha=16", "worker.optim.lr=1e-2", "trainer.max_steps=4"]
    run_sft(load_sft_config(sft_args(tmp_path, str(base), straight, *lora, "trainer.save_freq=2")))
    step_2 = f"trainer.load_checkpoint_path={os.path.join(straight, 'global_step_2')}"
    run_sft(load_sft_config(sft_args(tmp_path, str(base), resumed, *lora, step_2)))  # another run's step 2

    rows, again = read_steps(straight), read_steps(resumed)
    assert sorted(again) == [3, 4]
    assert rows[4]["train/loss"] < 0.8 * rows[1]["train/loss"] and rows[4]["val/loss"] < rows[2]["val/loss"]
    for step in (3, 4):  # the adapters and their optimizer state come back exactly
        assert again[step]["train/loss"] == pytest.approx(rows[step]["train/loss"], rel=1e-5)
    # the checkpoint holds the adapters (and their optimizer state) only
    actor = os.path.join(straight, "global_step_4", "actor")
    saved = FileSystemReader(actor).read_metadata().state_dict_metadata
    weights = [key for key in saved if key.startswith("model.")]
    assert weights and all(".lora_A." in key or ".lora_B." in key for key in weights), weights[:5]
    assert os.path.isfile(os.path.join(actor, "adapter_config.json"))  # outside huggingface/: see below
    # the export is a plain model with the adapters merged in, as model_merger writes from the checkpoint, by
    # default into the checkpoint's huggingface/ (which an adapter_config.json there would make load as an adapter);
    # in the dtype the base model declares (it was fp32, twice the size, whatever the base)
    exported_dir = os.path.join(straight, "huggingface")
    assert json.loads(open(os.path.join(exported_dir, "config.json")).read())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(os.path.join(exported_dir, "model.safetensors")).values()} == {torch.bfloat16}
    exported = AutoModelForCausalLM.from_pretrained(exported_dir, dtype=torch.bfloat16).state_dict()
    merged = pathlib.Path(actor) / "huggingface"
    export_checkpoint(actor, None)
    assert damage(os.path.dirname(actor)) is None  # the checkpoint stays resumable
    assert not any("lora" in key for key in load_file(str(merged / "model.safetensors")))
    reference = AutoModelForCausalLM.from_pretrained(merged).state_dict()
    original = AutoModelForCausalLM.from_pretrained(models["text"]).state_dict()
    assert exported.keys() == original.keys()
    for name, param in exported.items():
        torch.testing.assert_close(param, reference[name].to(torch.bfloat16), msg=name)  # bf16's tolerance
        adapted = name.endswith("proj.weight")  # every linear layer but the LM head has adapters
        assert torch.equal(param, original[name].to(torch.bfloat16)) != adapted, name
    # a checkpoint written before the adapter config moved out of huggingface/: exported elsewhere, not in place
    os.replace(os.path.join(actor, "adapter_config.json"), merged / "adapter_config.json")
    write_record(os.path.dirname(actor))  # as that save recorded its files
    with pytest.raises(AssertionError):
        export_checkpoint(actor, None)
    assert "pass --target_dir" in capsys.readouterr().err
    export_checkpoint(actor, tmp_path / "elsewhere")
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "elsewhere").state_dict().keys() == original.keys()


def test_cli_help_dry_run_and_errors(tmp_path, capsys) -> None:
    from verl.sft.main import main

    assert main(["--help-config"]) == 0
    help_text = capsys.readouterr().out
    assert "data.messages_key (str): Column with the conversation" in help_text
    assert "worker.model.model_path" in help_text and "worker.model.lora.rank (int): LoRA rank" in help_text
    (tmp_path / "train.jsonl").write_text("{}\n")
    args = [f"config={REPO}/examples/sft.yaml", f"data.train_files={tmp_path / 'train.jsonl'}"]
    assert main([*args, "--dry-run"]) == 0
    dumped = capsys.readouterr().out
    assert "messages_key: messages" in dumped
    (tmp_path / "dumped.yaml").write_text(dumped)  # loads again as config= (its derived keys were refused)
    assert main([f"config={tmp_path / 'dumped.yaml'}", "--dry-run"]) == 0
    assert capsys.readouterr().out == dumped
    assert main([*args, "data.max_length=-1"]) == 2
    assert "data.max_length" in capsys.readouterr().err


def test_a_tokenizer_folder_without_a_tokenizer_is_one_error_before_ray(models, tmp_path) -> None:
    """It was a FileNotFoundError traceback from transformers; the RL trainer's setup says the same in one line."""
    from verl.data.sft_dataset import SFTDataError
    from verl.sft.config import load_sft_config
    from verl.sft.main import build_datasets

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 4, seed=1)
    empty = tmp_path / "no_tokenizer"
    empty.mkdir()
    args = sft_args(tmp_path, models["text"], str(tmp_path / "out"), f"worker.model.tokenizer_path={empty}")
    with pytest.raises(SFTDataError, match=rf"cannot be loaded \(worker.model.tokenizer_path={empty}, "):
        build_datasets(load_sft_config(args))
    # a file that cannot be read as rows (a malformed line, an empty file): a 30-line traceback from the loader
    for content, message in (('{"messages": []}\n{"messages": [\n', "line 2 (row 1)"), ("", "is empty")):
        (tmp_path / "val.jsonl").write_text(content)
        with pytest.raises(SFTDataError, match=rf"'{tmp_path / 'val.jsonl'}' .*{re.escape(message)}"):
            build_datasets(load_sft_config(sft_args(tmp_path, models["text"], str(tmp_path / "out"))))


def test_a_tokenizer_with_ids_past_the_models_embedding_is_refused_before_ray(models, tmp_path) -> None:
    """Another model's tokenizer (more tokens than the model's vocab_size) failed in the workers' forward, an
    IndexError from the embedding; the RL trainer refuses it the same way (test_runner)."""
    import shutil

    from verl.data.sft_dataset import SFTDataError
    from verl.models.tiny_models import build_tiny_model
    from verl.sft.config import load_sft_config
    from verl.sft.main import build_datasets

    write_conversations(tmp_path / "train.jsonl", 16, seed=0)
    write_conversations(tmp_path / "val.jsonl", 4, seed=1)
    small = str(tmp_path / "small")
    build_tiny_model(small, kind="qwen2", vocab_size=512)
    args = sft_args(tmp_path, small, str(tmp_path / "out"), f"worker.model.tokenizer_path={models['text']}")
    with pytest.raises(
        SFTDataError,
        match=r"tokenizer_path=.* does not fit worker.model.model_path=.*: the tokenizer's vocabulary has 2048 tokens, and the model's embedding 576 rows",
    ):
        build_datasets(load_sft_config(args))
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the folder's own tokenizer files replaced
        shutil.copy(os.path.join(models["text"], name), os.path.join(small, name))
    with pytest.raises(
        SFTDataError,
        match=r"model_path=.*small: the tokenizer's vocabulary .* The folder's tokenizer files are another model's",
    ):
        build_datasets(load_sft_config(sft_args(tmp_path, small, str(tmp_path / "out"))))


def test_an_export_that_runs_out_of_space_is_one_line_naming_the_checkpoint(tmp_path) -> None:
    """The export after the last checkpoint hit a full disk: a 55-line Ray traceback (safetensors' error is no
    OSError), no word of the checkpoint that was saved."""
    import errno

    from verl.sft.main import export
    from verl.trainer.checkpointing import CheckpointSaveError

    class Group:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def export_hf_model(self, path: str) -> None:
            raise self.error

    from verl.models.config import ModelConfig
    from verl.models.tiny_models import get_or_build_tiny_model

    model = ModelConfig(model_path=get_or_build_tiny_model("qwen2", str(tmp_path / "models")))  # declares float32
    checkpoint = str(tmp_path / "global_step_4")
    for error in (
        RuntimeError("SafetensorError: No space left on device (os error 28)"),
        OSError(errno.ENOSPC, "No space left on device"),
    ):
        with pytest.raises(CheckpointSaveError) as raised:
            export(Group(error), str(tmp_path / "huggingface"), checkpoint, model)
        assert str(raised.value).startswith(f"Could not export the model to {tmp_path / 'huggingface'}: No space")
        assert f"The checkpoint {checkpoint} is saved" in str(raised.value)
        # the command given exports what the run would have: the merger's default dtype is bf16
        assert str(raised.value).endswith(f"--local_dir {checkpoint}/actor --dtype float32`.")
    with pytest.raises(ValueError, match="another failure"):
        export(Group(ValueError("another failure")), str(tmp_path / "huggingface"), checkpoint, model)


def _export_untrained(rank: int, world_size: int, port: int, args: list[str], out: str) -> None:
    import dataclasses

    from tests.workers.fsdp_testing import init_rank
    from verl.sft.config import load_sft_config
    from verl.sft.worker import SFTWorker

    init_rank(rank, world_size, port)
    config = load_sft_config(args).worker
    worker = SFTWorker(config, device="cpu")
    worker.init_model(training_steps=1, seed=0)
    worker.export_hf_model(out)
    # LoRA targets that only the model can refuse (a hub id's, unchecked at load) are named under SFT's own key
    lora = dataclasses.replace(config.model.lora, rank=8, target_modules="q_proj,no_such_layer")
    config.model = dataclasses.replace(config.model, lora=lora)
    with pytest.raises(ValueError, match=r"^worker\.model\.lora: target_modules names no_such_layer"):
        SFTWorker(config, device="cpu").init_model(training_steps=1, seed=0)


def test_the_export_of_a_qwen3_vl_moe_keeps_its_checkpoints_expert_layout(tmp_path) -> None:
    """transformers transposes Qwen3-VL-MoE's fused experts on load and not back on save: the SFT export wrote them
    in the module's layout, which vLLM (and transformers itself) then read transposed. Untrained, the export must
    hold the base folder's tensors exactly. (And LoRA errors raised by the model name worker.model.lora.)"""
    from safetensors.torch import load_file

    from tests.workers.fsdp_testing import spawn

    base = get_or_build_tiny_model("qwen3_vl_moe", str(tmp_path / "models"))
    (tmp_path / "train.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    (tmp_path / "val.jsonl").write_text((tmp_path / "train.jsonl").read_text())
    out = tmp_path / "export"
    spawn(_export_untrained, 1, sft_args(tmp_path, base, str(tmp_path / "run"), "trainer.n_gpus_per_node=1"), str(out))

    def load(folder) -> dict[str, torch.Tensor]:
        return {k: v for f in sorted(pathlib.Path(folder).glob("*.safetensors")) for k, v in load_file(f).items()}

    exported, stored = load(out), load(base)
    experts = [name for name in stored if name.endswith("mlp.experts.gate_up_proj")]
    assert experts and sorted(exported) == sorted(stored)
    for name, tensor in stored.items():
        assert exported[name].shape == tensor.shape and torch.equal(exported[name], tensor), name


def _export(rank: int, world_size: int, port: int, args: list[str], out: str) -> None:
    from tests.workers.fsdp_testing import init_rank
    from verl.sft.config import load_sft_config
    from verl.sft.worker import SFTWorker

    init_rank(rank, world_size, port)
    worker = SFTWorker(load_sft_config(args).worker, device="cpu")
    worker.init_model(training_steps=1, seed=0)
    worker.export_hf_model(out)


@pytest.mark.slow
def test_a_chatml_base_models_export_stops_at_the_end_of_a_turn(models, tmp_path) -> None:
    """A base model whose EOS is `<|endoftext|>` (Qwen2.5-7B) fine-tuned on its ChatML template, whose turns end with
    `<|im_end|>`: the export kept the base's generation_config.json, so transformers' generate and vLLM serving it went
    on past `<|im_end|>` writing the next turns (the rollout and verl.serve stop there). The export's generation
    config now stops at both, the base's EOS first. (One FSDP rank, untrained: the export is what is tested.)"""
    from transformers import AutoTokenizer, GenerationConfig

    from tests.workers.fsdp_testing import spawn

    base = tmp_path / "base"
    shutil.copytree(models["text"], base)
    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "<|endoftext|>"}))
    end_of_text, im_end = AutoTokenizer.from_pretrained(str(base)).convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_end|>"]
    )
    GenerationConfig(eos_token_id=end_of_text).save_pretrained(str(base))
    write_conversations(tmp_path / "train.jsonl", 2, seed=0)
    write_conversations(tmp_path / "val.jsonl", 2, seed=1)
    out = tmp_path / "export"
    spawn(_export, 1, sft_args(tmp_path, str(base), str(tmp_path / "run"), "trainer.n_gpus_per_node=1"), str(out))
    assert GenerationConfig.from_pretrained(str(out)).eos_token_id == [end_of_text, im_end]
