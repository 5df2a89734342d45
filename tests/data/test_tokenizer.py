# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import os


os.environ.setdefault("OMP_NUM_THREADS", "1")

import logging
import shutil

import numpy as np
import pytest
from PIL import Image
from transformers import ProcessorMixin

from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.tiny_models import build_tokenizer, get_or_build_tiny_model


TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.getbasetemp() / "tiny_models")


@pytest.fixture(scope="module")
def text_dir(tiny_cache) -> str:
    return get_or_build_tiny_model("qwen2", tiny_cache)


@pytest.fixture(scope="module")
def vl_dir(tiny_cache) -> str:
    return get_or_build_tiny_model("qwen2_5_vl", tiny_cache)


def _image_tokens(processor: ProcessorMixin, height: int, width: int) -> int:
    image = Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))
    inputs = processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image], return_tensors="pt")
    return int((inputs["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())


def test_get_tokenizer_loads_the_tiny_tokenizer(text_dir):
    tokenizer = get_tokenizer(text_dir)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.apply_chat_template(MESSAGES, tokenize=False).endswith("<|im_start|>user\nhi<|im_end|>\n")


def test_get_tokenizer_overrides_the_chat_template_from_text_or_file(text_dir, tmp_path):
    assert get_tokenizer(text_dir, override_chat_template=TEMPLATE).apply_chat_template(MESSAGES, tokenize=False) == (
        "[user] hi\n"
    )
    template_file = tmp_path / "chat.jinja"
    template_file.write_text("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}")
    tokenizer = get_tokenizer(text_dir, override_chat_template=str(template_file))
    assert tokenizer.apply_chat_template(MESSAGES, tokenize=False) == "<user> hi\n"
    with pytest.raises(FileNotFoundError, match="missing.jinja"):
        get_tokenizer(text_dir, override_chat_template=str(tmp_path / "missing.jinja"))
    with pytest.raises(FileNotFoundError, match=r"override_chat_template file '.*missing.j2' does not exist"):
        get_tokenizer(text_dir, override_chat_template=str(tmp_path / "missing.j2"))  # was the template's text
    # any file is read, whatever its name (data.override_chat_template accepts any file; the dataset read it while the
    # tokenizers of the workers and checkpoints took its path for the template text)
    other = tmp_path / "chat.j2"
    other.write_text(template_file.read_text())
    tokenizer = get_tokenizer(text_dir, override_chat_template=str(other))
    assert tokenizer.apply_chat_template(MESSAGES, tokenize=False) == "<user> hi\n"
    other.write_bytes(b"{{ messages[0]['content'] }} caf\xe9")  # latin-1: one line naming the file
    with pytest.raises(ValueError, match=r"override_chat_template file '.*chat.j2' is not UTF-8 text"):
        get_tokenizer(text_dir, override_chat_template=str(other))


def test_get_tokenizer_uses_eos_as_pad_when_there_is_none(tmp_path, caplog):
    """Said once per run: the driver warns, the workers and the reward that load the same tokenizer do not."""
    tokenizer = build_tokenizer()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="verl.data.tokenizer"):
        loaded = get_tokenizer(str(tmp_path))
        again = get_tokenizer(str(tmp_path), warn_no_pad=False)
    assert loaded.pad_token == again.pad_token == "<|im_end|>" and loaded.pad_token_id == loaded.eos_token_id
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "has no pad token" in r.getMessage()]
    assert [level for level, _ in said] == [logging.WARNING, logging.DEBUG]


@pytest.mark.parametrize("path", ["/no/such/model", "./missing-model", "a/b/c"])
def test_missing_local_path_is_an_error_that_names_it(path):
    with pytest.raises(FileNotFoundError, match=path.replace(".", r"\.")):
        get_tokenizer(path)
    with pytest.raises(FileNotFoundError, match=path.replace(".", r"\.")):
        get_processor(path)


def test_directory_without_tokenizer_files_is_an_error_that_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}.*tokenizer.json"):
        get_tokenizer(str(tmp_path))


def test_a_damaged_tokenizer_or_processor_file_is_named(text_dir, vl_dir, tmp_path):
    """A tokenizer.json cut short ended the trainer in "Error: Expecting value: line 3872 column 13", no file named."""
    import shutil

    for source, name, load in (
        (text_dir, "tokenizer.json", get_tokenizer),
        (vl_dir, "processor_config.json", get_processor),
    ):
        folder = tmp_path / name
        shutil.copytree(source, folder)
        text = (folder / name).read_text()
        (folder / name).write_text(text[: len(text) // 2])
        with pytest.raises(
            OSError, match=rf"from '{folder}': {name} is not valid JSON \(.*copy or download the model"
        ):
            load(str(folder))


def test_a_chat_template_that_is_not_jinja_is_named_where_it_came_from(text_dir, vl_dir, tmp_path):
    """It was a jinja2 traceback from the dataset's first look at the template."""
    import shutil

    broken = "{% for m in messages %}{{ m['content'] }"
    folder = tmp_path / "model"
    shutil.copytree(text_dir, folder)
    (folder / "chat_template.jinja").write_text(broken)
    with pytest.raises(
        ValueError, match=rf"^the chat template of '{folder}' .* is not valid Jinja: unexpected '}}' \(line 1\)"
    ):
        get_tokenizer(str(folder))
    (tmp_path / "chat.jinja").write_text(broken)
    for load, source in ((get_tokenizer, text_dir), (get_processor, vl_dir)):
        with pytest.raises(
            ValueError, match=rf"^the chat template in '{tmp_path / 'chat.jinja'}' \(override_chat_template\)"
        ):
            load(source, override_chat_template=str(tmp_path / "chat.jinja"))
        with pytest.raises(
            ValueError, match=r"^the chat template given as override_chat_template's text is not valid"
        ):
            load(source, override_chat_template=broken)


def test_get_processor_is_none_for_a_text_model(text_dir):
    assert get_processor(text_dir) is None


def test_get_processor_loads_the_vl_processor(vl_dir):
    processor = get_processor(vl_dir)
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"
    assert processor.image_processor.size["longest_edge"] == 28 * 28 * 64
    assert _image_tokens(processor, 480, 640) == 54  # scaled under max_pixels to 168x252: 12x18 patches, 2x2 merge


def test_get_processor_overrides_the_chat_template(vl_dir):
    processor = get_processor(vl_dir, override_chat_template=TEMPLATE)
    assert processor.apply_chat_template(MESSAGES, tokenize=False) == "[user] hi\n"
    assert processor.tokenizer.apply_chat_template(MESSAGES, tokenize=False) == "[user] hi\n"


def test_get_processor_raises_on_a_broken_processor_config(text_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(text_dir, broken)
    (broken / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(OSError, match=f"{broken}.*preprocessor_config.json"):
        get_processor(str(broken))


def test_saved_tokenizers_do_not_carry_how_they_were_loaded(text_dir, vl_dir, tmp_path):
    """transformers 5 keeps is_local / local_files_only with a tokenizer's settings: every checkpoint and export
    carried them into tokenizer_config.json (local_files_only=true from an offline run, uploaded with the model)."""
    import json

    for name, part in (("text", get_tokenizer(text_dir, local_files_only=True)), ("vl", get_processor(vl_dir))):
        part.save_pretrained(tmp_path / name)
        saved = json.loads((tmp_path / name / "tokenizer_config.json").read_text())
        assert "is_local" not in saved and "local_files_only" not in saved, name
        assert saved.get("eos_token") or saved.get("added_tokens_decoder"), name  # the settings themselves are kept


def test_eos_ids_without_a_generation_config_come_from_config_json(text_dir, tmp_path):
    """An export without generation_config.json: vLLM derives the stop tokens from config.json's eos_token_id (all of
    them); the trainer read the tokenizer's EOS alone, so an episode that stopped on another one was not ended."""
    import json

    from verl.data.tokenizer import eos_token_ids

    folder = tmp_path / "export"
    shutil.copytree(text_dir, folder)
    os.remove(folder / "generation_config.json")
    config = json.loads((folder / "config.json").read_text())
    tokenizer = get_tokenizer(str(folder))
    other = tokenizer.convert_tokens_to_ids("<|im_start|>")
    config["eos_token_id"] = [tokenizer.eos_token_id, other]
    (folder / "config.json").write_text(json.dumps(config))
    assert eos_token_ids(tokenizer, str(folder)) == {tokenizer.eos_token_id, other}
