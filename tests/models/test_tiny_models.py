# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import functools
import os


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: 2 threads on a shared 2-core box are 3-5x slower

import gc
import hashlib
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from families import FAMILIES, image_token_counts, vl_kinds
from PIL import Image
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

from verl.models.rope_index import VIDEO_TOKEN, RopeIndex
from verl.models.tiny_models import (
    CHAT_TEMPLATE,
    INTERNVL_TILE,
    SPEC_FILE,
    SPECIAL_TOKENS,
    VL_KINDS,
    TinyModelSpec,
    build_tiny_model,
    build_tokenizer,
    count_parameters,
    get_or_build_tiny_model,
)
from verl.workers.rollout import vllm_compat


SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.getbasetemp() / "tiny_models")


def _image(height: int, width: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8))


def _file_digests(model_dir: str) -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(model_dir, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(model_dir))
    }


# ---------------------------------------------------------------------------------------------- tokenizer and template
def test_tokenizer_special_tokens_follow_the_bpe_vocab():
    tokenizer = build_tokenizer(vocab_size=512)
    ids = [tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS]
    assert ids == list(range(512, 512 + len(SPECIAL_TOKENS)))  # appended after the BPE vocab, in Qwen's order
    assert len(tokenizer) == 512 + len(SPECIAL_TOKENS)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.bos_token is None
    for token in SPECIAL_TOKENS:  # never split, even inside text
        assert tokenizer.encode(f"a{token}b", add_special_tokens=False)[1] == tokenizer.convert_tokens_to_ids(token)


def test_tokenizer_refuses_a_vocab_the_corpus_cannot_fill():
    with pytest.raises(ValueError, match="vocab_size=20000 is more than the synthetic corpus supports"):
        build_tokenizer(vocab_size=20000)


def test_tokenizer_round_trips_unicode_and_digits():
    tokenizer = build_tokenizer()
    text = "Hello wörld 123 \\boxed{42} 😀\n\tend"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert len(tokenizer.encode("1234", add_special_tokens=False)) == 4  # Qwen splits numbers into single digits
    assert len(tokenizer.encode(" the answer", add_special_tokens=False)) == 2  # BPE learned the corpus words


def test_chat_template_renders_string_content():
    tokenizer = build_tokenizer()
    messages = [{"role": "user", "content": "What is 12 + 30?"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == SYSTEM + "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
    )


def test_tool_schemas_end_the_system_message_the_conversation_s_own_too():
    """As Qwen2.5's template: the tools follow the default system message or the conversation's (they were dropped
    where the conversation had one); Qwen3 writes no default system message, so the tools alone open one."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    schema = '{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}'
    listed = f"Tools you can call, as JSON schemas:\n<tools>{schema}</tools>\n"  # (jinja's trim_blocks)
    listed += 'Call one by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
    user = [{"role": "user", "content": "Hi"}]
    system = [{"role": "system", "content": "Be brief."}]
    turn = "<|im_start|>user\nHi<|im_end|>\n"
    for kind, default in (("qwen2", "You are a helpful assistant.\n"), ("qwen3", "")):
        tokenizer = build_tokenizer(kind=kind)
        render = functools.partial(tokenizer.apply_chat_template, tokenize=False)
        assert render(system + user, tools=tools) == f"<|im_start|>system\nBe brief.\n{listed}<|im_end|>\n{turn}"
        assert render(user, tools=tools) == f"<|im_start|>system\n{default}{listed}<|im_end|>\n{turn}"
        assert render(user) == (SYSTEM if default else "") + turn


def test_chat_template_renders_image_video_and_text_parts():
    tokenizer = build_tokenizer()
    content = [
        {"type": "image"},
        {"type": "text", "text": "Compare with"},
        {"type": "video"},
        {"type": "image", "image": "file.png"},
        {"type": "text", "text": "?"},
    ]
    messages = [{"role": "user", "content": content}]
    image, video = "<|vision_start|><|image_pad|><|vision_end|>", "<|vision_start|><|video_pad|><|vision_end|>"
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        rendered == SYSTEM + f"<|im_start|>user\n{image}Compare with{video}{image}?<|im_end|>\n<|im_start|>assistant\n"
    )
    with_ids = tokenizer.apply_chat_template(messages, tokenize=False, add_vision_id=True)
    assert "Picture 1: " + image in with_ids and "Video 1: " + video in with_ids and "Picture 2: " + image in with_ids


# ---------------------------------------------------------------------------------------------- text model
def test_text_model_loads_with_transformers_and_generates(tiny_cache):
    model_dir = get_or_build_tiny_model("qwen2", tiny_cache)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert AutoProcessor.from_pretrained(model_dir) is not None  # a text model's AutoProcessor is its tokenizer
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.dtype == torch.float32
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size >= len(tokenizer)
    assert model.generation_config.eos_token_id == [tokenizer.eos_token_id, tokenizer.pad_token_id]
    assert 1_000_000 < model.num_parameters() < 10_000_000  # "a few million"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 1 + 2?"}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    output = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert output.shape[1] > prompt["input_ids"].shape[1]
    # a large init keeps greedy argmax away from near-ties (so HF and vLLM agree): top-2 logit gap is not tiny
    with torch.no_grad():
        logits = model(**prompt).logits[0, -1]
    top2 = logits.topk(2).values
    assert float(top2[0] - top2[1]) > 1e-3 and float(logits.std()) > 0.1


def test_size_is_adjustable_and_spec_is_recorded(tmp_path):
    model_dir = build_tiny_model(
        str(tmp_path / "small"), kind="qwen2", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1
    )
    config = AutoModelForCausalLM.from_pretrained(model_dir).config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 2)
    with open(os.path.join(model_dir, SPEC_FILE)) as f:
        assert json.load(f)["hidden_size"] == 64
    assert (
        count_parameters(model_dir)["total"]
        < count_parameters(get_or_build_tiny_model("qwen2", str(tmp_path)))["total"]
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "mistral"}, "kind='mistral'"),
        ({"hidden_size": 100}, "hidden_size=100"),
        ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads=3"),
        ({"vocab_size": 100}, "vocab_size=100"),
        ({"min_pixels": 10, "max_pixels": 5}, "min_pixels=10"),
        ({"initializer_range": -1.0}, "initializer_range=-1.0 must be a finite number >= 0"),  # torch's traceback
        ({"initializer_range": float("nan")}, "initializer_range=nan must be a finite number"),
        ({"kind": "qwen3_5", "hidden_size": 128, "num_heads": 8, "num_kv_heads": 2}, "kind=qwen3_5: hidden_size=128"),
    ],
)
def test_invalid_spec_names_the_option(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TinyModelSpec(**options)


def test_unknown_option_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="hidden_dim.*valid options are: .*hidden_size"):
        build_tiny_model(str(tmp_path / "x"), hidden_dim=64)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_qwen3_5_kinds_have_the_published_hybrid_layout(kind, tiny_cache):
    """As the Qwen3.5 checkpoints: a VLM whose decoder has three Gated DeltaNet layers to one full-attention layer,
    linear-attention head dim 128 (vLLM's CPU kernel needs it), rope on a quarter of the full-attention head dim."""
    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    text = config["text_config"]
    classes = {"qwen3_5": "Qwen3_5ForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}
    assert config["model_type"] == kind and config["architectures"] == [classes[kind]]
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert text["linear_key_head_dim"] == text["linear_value_head_dim"] == 128
    assert text["linear_num_value_heads"] == 2 * text["linear_num_key_heads"]
    assert text["rope_parameters"]["partial_rotary_factor"] == 0.25 and text["rope_parameters"]["mrope_interleaved"]
    assert ("num_experts" in text) == (kind == "qwen3_5_moe")
    assert AutoProcessor.from_pretrained(model_dir).image_processor.patch_size == 16


@pytest.mark.parametrize("kind", ["qwen3_vl", "qwen3_vl_moe"])
def test_qwen3_vl_kinds_interleave_their_rope_sections(kind, tiny_cache):
    """Qwen3-VL's text rope interleaves its three sections: transformers always does, vLLM only where the config says
    so (`mrope_interleaved`); without the flag the engine's positions differ from the actor's at every image."""
    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        text = json.load(f)["text_config"]
    assert text["rope_parameters"]["mrope_interleaved"] is True
    assert ("moe_intermediate_size" in text) == (kind == "qwen3_vl_moe")


def test_gemma4_kind_has_the_e2b_layout_and_gemma_tokens(tiny_cache):
    """As Gemma 4 E2B: sliding and full attention alternating (full ones with twice the head dim), the second half
    of the layers sharing keys and values, per-layer inputs, soft-capped logits, causal image attention; <pad> is
    token 0 (vLLM embeds token 0 at image positions, transformers the pad token); vLLM's image token count (the
    vision config's default_output_length) is the processor's budget; its processor loads (it needs an audio
    feature extractor even for images) and renders Gemma's turns."""
    model_dir = get_or_build_tiny_model("gemma4", tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    text = config["text_config"]
    assert config["architectures"] == ["Gemma4ForConditionalGeneration"] and config["audio_config"] is None
    assert text["layer_types"] == ["sliding_attention", "full_attention"] * 2 and text["num_kv_shared_layers"] == 2
    assert text["per_layer_config"] == {"1": {"head_dim": 128}, "3": {"head_dim": 128}} and text["head_dim"] == 64
    assert text["sliding_window"] == 32
    assert text["hidden_size_per_layer_input"] > 0 and text["final_logit_softcapping"] == 30.0
    assert text.get("use_bidirectional_attention") is None
    processor = AutoProcessor.from_pretrained(model_dir)
    tokenizer = processor.tokenizer
    assert text["pad_token_id"] == tokenizer.pad_token_id == 0 and tokenizer.convert_ids_to_tokens(0) == "<pad>"
    assert config["vision_config"]["default_output_length"] == processor.image_processor.max_soft_tokens == 70
    assert type(processor.feature_extractor).__name__ == "Gemma4AudioFeatureExtractor"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<bos><|turn>user\n<|image|>What is this?<turn|>\n<|turn>model\n"


def test_llama_kind_has_llama_3s_tokens_rope_and_untied_head(tiny_cache):
    """As Llama 3 (Instruct): llama3 rope scaling, an untied output layer, no pad token (the trainer pads with eos),
    encoding adds <|begin_of_text|>, which the chat template writes too; a turn ends at <|eot_id|>."""
    model_dir = get_or_build_tiny_model("llama", tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is False
    assert config["rope_parameters"]["rope_type"] == "llama3" and config["pad_token_id"] is None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.pad_token is None and tokenizer.eos_token == "<|eot_id|>"
    assert tokenizer.encode("hi")[0] == tokenizer.bos_token_id == config["bos_token_id"]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": " Hi? "}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        stops = json.load(f)["eos_token_id"]
    assert tokenizer.convert_ids_to_tokens(stops) == ["<|eot_id|>", "<|end_of_text|>"]


@pytest.mark.parametrize("kind", ["gemma3_text", "gemma3"])
def test_gemma3_kinds_render_as_gemma_3_and_stop_at_the_end_of_the_model_turn(tiny_cache, kind):
    """As Gemma 3 1B-it (gemma3_text) and 4B-it (gemma3, a SigLIP tower): sliding-window layers between full-attention
    ones, <pad> 0 / <eos> 1 / <bos> 2, a system message opening the first user turn, turns that must alternate, and
    generation that stops at <end_of_turn>, which only the generation config names (the tokenizer's eos is <eos>);
    gemma3's processor expands an image's <start_of_image> to its soft tokens."""
    from verl.data.tokenizer import eos_token_ids, get_processor

    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    architecture = {"gemma3_text": "Gemma3ForCausalLM", "gemma3": "Gemma3ForConditionalGeneration"}[kind]
    assert config["architectures"] == [architecture] and config["model_type"] == kind
    text = config.get("text_config", config)
    assert set(text["layer_types"]) == {"sliding_attention", "full_attention"}
    processor = get_processor(model_dir)
    assert type(processor).__name__ == ("Gemma3Processor" if kind == "gemma3" else "NoneType")
    if processor is not None:
        from PIL import Image

        image_message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}]
        image_text = processor.apply_chat_template(image_message, add_generation_prompt=True)
        assert image_text == "<bos><start_of_turn>user\n<start_of_image>What?<end_of_turn>\n<start_of_turn>model\n"
        inputs = processor(text=[image_text], images=[Image.new("RGB", (90, 60))], return_tensors="pt")
        soft = inputs["input_ids"][0].tolist().count(config["image_token_index"])
        assert soft == config["mm_tokens_per_image"] and inputs["pixel_values"].shape[-1] == 56
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id) == (0, 1, 2)
    messages = [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": " Hi? "}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<bos><start_of_turn>user\nBe brief.\n\nHi?<end_of_turn>\n<start_of_turn>model\n"
    with pytest.raises(Exception, match="alternate"):
        tokenizer.apply_chat_template([{"role": "assistant", "content": "Hi"}], tokenize=False)
    stops = eos_token_ids(tokenizer, model_dir)
    assert tokenizer.convert_ids_to_tokens(sorted(stops)) == ["<eos>", "<end_of_turn>"]


def test_qwen3_kind_is_dense_with_query_and_key_norms(tiny_cache):
    """As Qwen3-4B/8B: no experts, no qkv bias, an RMS norm on each head's queries and keys."""
    from safetensors import safe_open

    model_dir = get_or_build_tiny_model("qwen3", tiny_cache)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["Qwen3ForCausalLM"] and "num_experts" not in config
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as weights:
        names = set(weights.keys())
    assert "model.layers.0.self_attn.q_norm.weight" in names and "model.layers.0.self_attn.k_norm.weight" in names
    assert not any(name.endswith("q_proj.bias") for name in names)


# ---------------------------------------------------------------------------------------------- determinism and CLI
def test_same_seed_gives_identical_files_and_other_seed_other_weights(tmp_path):
    size = {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 64}
    rng_before = torch.get_rng_state()
    first = _file_digests(build_tiny_model(str(tmp_path / "a"), kind="qwen2_vl", seed=1, **size))
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is not consumed
    second = _file_digests(build_tiny_model(str(tmp_path / "b"), kind="qwen2_vl", seed=1, **size))
    other = _file_digests(build_tiny_model(str(tmp_path / "c"), kind="qwen2_vl", seed=2, **size))
    assert first == second
    assert other["model.safetensors"] != first["model.safetensors"]
    assert other["tokenizer.json"] == first["tokenizer.json"]  # the tokenizer does not depend on the seed


def test_cli_writes_a_loadable_dir_identical_to_an_in_process_build(tmp_path):
    args = ["--kind", "qwen2_5_vl", "--seed", "7", "--hidden-size", "64", "--num-heads", "2", "--num-kv-heads", "1"]
    cli_dir = str(tmp_path / "cli")
    result = subprocess.run(
        [sys.executable, "-m", "verl.models.tiny_models", "--output", cli_dir, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "qwen2_5_vl" in result.stdout and "parameters" in result.stdout
    model = AutoModelForImageTextToText.from_pretrained(cli_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert model.config.text_config.hidden_size == 64
    # another process (fresh BPE training, fresh hash seeds) gives bitwise the same directory
    in_process = build_tiny_model(
        str(tmp_path / "lib"), kind="qwen2_5_vl", seed=7, hidden_size=64, num_heads=2, num_kv_heads=1
    )
    assert _file_digests(cli_dir) == _file_digests(in_process)


def test_cli_rejects_a_bad_size(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.models.tiny_models", "--output", str(tmp_path / "x"), "--hidden-size", "100"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "hidden_size=100" in result.stderr


def test_cli_refuses_an_output_that_holds_another_model_or_is_a_file(tmp_path, capsys):
    """`--output` at a real model's folder deleted its weight shards and replaced its config, exit 0; a file or an
    empty string ended in a traceback."""
    from verl.models.tiny_models import main

    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text("{}")
    (real / "model-00001-of-00002.safetensors").write_bytes(b"weights")
    (tmp_path / "afile").write_text("")
    for output, message in (
        (str(real), "holds files that are not a tiny model's"),
        (str(tmp_path / "afile"), "must be a directory"),
        ("", "must be a directory"),
        # a raw errno without the flag, from inside the build
        (str(tmp_path / "afile" / "sub"), f"--output '{tmp_path / 'afile' / 'sub'}', which cannot be created: '"),
        ("/proc/verl_no_such/model", "/proc/verl_no_such/model'"),
    ):
        with pytest.raises(SystemExit) as exit_code:
            main(["--output", output])
        assert exit_code.value.code == 2 and message in capsys.readouterr().err
    assert sorted(os.listdir(real)) == ["config.json", "model-00001-of-00002.safetensors"]
    assert (real / "model-00001-of-00002.safetensors").read_bytes() == b"weights"


def test_get_or_build_reuses_the_cached_dir_and_replaces_a_stale_one(tmp_path):
    cache = str(tmp_path / "cache")
    model_dir = get_or_build_tiny_model("qwen2", cache, num_layers=1)
    weights = os.path.join(model_dir, "model.safetensors")
    mtime = os.stat(weights).st_mtime_ns
    assert get_or_build_tiny_model("qwen2", cache, num_layers=1) == model_dir
    assert os.stat(weights).st_mtime_ns == mtime  # reused, not rebuilt
    assert get_or_build_tiny_model("qwen2", cache) == os.path.join(cache, "qwen2")  # default spec: plain name
    spec_path = os.path.join(model_dir, SPEC_FILE)
    with open(spec_path) as f:
        spec = json.load(f)
    with open(spec_path, "w") as f:
        json.dump({**spec, "builder_version": -1}, f)  # as if written by an older builder
    assert get_or_build_tiny_model("qwen2", cache, num_layers=1) == model_dir
    with open(spec_path) as f:
        assert json.load(f) == spec
    assert sorted(os.listdir(cache)) == sorted(["qwen2", os.path.basename(model_dir)])  # no temp dirs left


# ---------------------------------------------------------------------------------------------- vision-language models
@pytest.mark.parametrize("kind", vl_kinds("processor"))
def test_vl_processor_expands_images_as_the_model_config_says(kind, tiny_cache):
    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    processor = AutoProcessor.from_pretrained(model_dir)  # the standard path (needs the torchvision shim on CPU)
    names = {
        "qwen2_5_vl": "Qwen2_5_VLProcessor",
        "qwen2_vl": "Qwen2VLProcessor",
        "gemma4": "Gemma4Processor",
        "glm4v": "Glm4vProcessor",
        "glm4v_moe": "Glm4vProcessor",
        "internvl": "InternVLProcessor",
        "llava_onevision": "LlavaOnevisionProcessor",
        "mistral3": "PixtralProcessor",
    }
    assert type(processor).__name__ == names.get(kind, "Qwen3VLProcessor")  # Qwen3.5 ships Qwen3-VL's
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    config = model.config
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.count(FAMILIES[kind].image_placeholder) == 1
    images = [_image(90, 120), _image(480, 640, seed=1), _image(20, 20, seed=2)]
    nested = [[image] for image in images]  # one image per prompt (Gemma 4 takes no flat list for several prompts)
    inputs = processor(text=[prompt] * 3, images=nested, padding=True, padding_side="left", return_tensors="pt")
    if kind == "internvl":  # tiles by aspect ratio (a thumbnail when several), image_seq_length tokens each
        tiles = processor._get_num_multimodal_tokens(image_sizes=[image.size[::-1] for image in images])
        expected = [config.image_seq_length * count for count in tiles.num_image_patches]
        assert tiles.num_image_patches == [5, 5, 1]  # 4:3 -> 2 x 2 tiles (the nearest ratio) + a thumbnail
        assert inputs["pixel_values"].shape == (11, 3, INTERNVL_TILE, INTERNVL_TILE)
    elif kind == "llava_onevision":  # anyres: the base tile's 16 tokens + the grid's, unpadded, with a newline a row
        expected = processor._get_num_multimodal_tokens(image_sizes=[image.size[::-1] for image in images])
        expected = expected.num_image_tokens
        assert expected == [70, 70, 36]  # 90x120 and 480x640 -> the 2 x 2 grid; 20x20 -> one tile
        assert inputs["pixel_values"].shape == (3, 5, 3, 56, 56)  # (images, most tiles: 4 + the base, ...)
        assert inputs["image_sizes"].tolist() == [[90, 120], [480, 640], [20, 20]]
    elif kind == "mistral3":  # the longest side at 112, aspect kept: 90x120 -> 84x112 -> 3 x 4 merged patches of 28
        expected = [12, 12, 1]  # (and an [IMG_BREAK] a row, the last an [IMG_END])
        assert inputs["image_sizes"].tolist() == [[84, 112], [84, 112], [28, 28]]
        assert inputs["pixel_values"].shape == (3, 3, 84, 112)  # padded to the batch's largest
    elif kind == "gemma4":  # every image scaled to the 70-token budget: 90x120 -> 336x432 pixels -> 7x9 tokens of 48
        expected = image_token_counts(inputs)
        assert expected[0] == 63 and max(expected) <= 70
    else:  # 90x120 -> 84x112 pixels -> 6x8 patches of 14 -> 12 tokens after the 2x2 merge (Qwen3-VL: 96x128, 16)
        expected = image_token_counts(inputs)
        assert expected[0] == 12
        assert 4 <= min(expected) and max(expected) <= 64  # min_pixels / max_pixels bound the cost of any image
        assert inputs["pixel_values"].shape[0] == int(inputs["image_grid_thw"].prod(dim=-1).sum())
    assert (inputs["input_ids"] == config.image_token_id).sum(dim=-1).tolist() == expected
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (*inputs["input_ids"].shape, config.text_config.vocab_size)
    assert torch.isfinite(logits).all()
    # the image changes the prediction: it is really fed through the vision tower
    other = processor(text=[prompt], images=[_image(90, 120, seed=5)], return_tensors="pt")
    with torch.no_grad():
        assert not torch.allclose(model(**other).logits[0, -1], logits[0, -1])
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated.shape == (3, inputs["input_ids"].shape[1] + 4)


@pytest.mark.parametrize("kind", vl_kinds("video"))
def test_vl_processor_handles_video(kind, tiny_cache):
    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    frames = [np.asarray(_image(64, 96, seed=i)) for i in range(4)]
    inputs = processor(text=[prompt], videos=[frames], do_sample_frames=False, return_tensors="pt")  # as the dataset
    grid = inputs["video_grid_thw"][0].tolist()
    assert grid[0] == 2  # 4 frames, 2 per temporal patch
    video_tokens = RopeIndex(model.config).mm_token_type_ids(inputs["input_ids"][0]) == VIDEO_TOKEN  # GLM: image ids
    assert int(video_tokens.sum()) == grid[0] * grid[1] * grid[2] // 4
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).logits).all()


# ---------------------------------------------------------------------------------------------- vLLM
def _tiny_engine(model_dir: str, is_vl: bool):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: no extra processes
    vllm_compat.load_transformers_tower_names()  # as the rollout does: LLaVA-OneVision's tower as transformers saves it
    mm = {"limit_mm_per_prompt": {"image": 1, "video": 0}} if is_vl else {}
    return vllm_compat.start_engine(  # as the rollout does: the test process's heap frozen first
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        max_model_len=1024,
        kv_cache_memory_bytes=64 * 2**20,
        **mm,
    )


@pytest.fixture(scope="module")
def engine(request, tiny_cache):
    """One engine per kind, alive only while that kind's tests run (pytest groups the tests by parameter)."""
    kind = request.param
    model_dir = get_or_build_tiny_model(kind, tiny_cache)
    handle = SimpleNamespace(model_dir=model_dir, llm=_tiny_engine(model_dir, is_vl=kind in VL_KINDS))
    yield handle
    handle.llm = None  # pytest keeps the yielded object until later; drop the engine itself now
    gc.collect()


def _greedy(max_tokens: int):
    """Greedy decoding that stops at the generation config's eos ids, as HF generate does."""
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["qwen2", "llama", "gemma3_text", "falcon_h1"], indirect=True)
def test_vllm_greedy_equals_hf_generate_on_the_text_model(engine):
    model_dir, llm = engine.model_dir, engine.llm
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}], tokenize=False),
        "The answer is",
        "x",
    ]
    outputs = llm.generate(prompts, _greedy(16), use_tqdm=False)
    assert sum(len(output.outputs[0].token_ids) for output in outputs) > 24  # not cut short by an early eos
    for prompt, output in zip(prompts, outputs):
        input_ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        assert list(output.prompt_token_ids) == input_ids[0].tolist()
        hf = model.generate(input_ids, max_new_tokens=16, do_sample=False)
        assert list(output.outputs[0].token_ids) == hf[0, input_ids.shape[1] :].tolist()


@pytest.mark.slow
def test_a_transformers_backend_engine_leaves_the_models_of_its_class_working(tiny_cache):
    """vLLM runs OLMo 3 through its Transformers backend, which compiles transformers' own Olmo3Model class in this
    process: a model of that class built before the engine (as the actor's is) and one built after it still run as
    transformers' (hooks included, the same logits), and the engine decodes greedily as they do."""
    from transformers.models.olmo3 import modeling_olmo3
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    model_dir = get_or_build_tiny_model("olmo3", tiny_cache)
    ids = AutoTokenizer.from_pretrained(model_dir)("What is 12 + 30? The answer is", return_tensors="pt")["input_ids"]
    before = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        expected = before(ids).logits
    llm = _tiny_engine(model_dir, is_vl=False)
    # vLLM still compiles transformers' class; where it no longer does, vllm_compat's sharing is not needed
    assert TorchCompileWithNoGuardsWrapper in modeling_olmo3.Olmo3Model.__bases__
    calls = []
    before.model.register_forward_pre_hook(lambda module, args: calls.append(module))
    after = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        assert torch.equal(before(ids).logits, expected) and torch.equal(after(ids).logits, expected)
    assert calls == [before.model]
    out = llm.generate({"prompt_token_ids": ids[0].tolist()}, _greedy(12), use_tqdm=False)[0].outputs[0].token_ids
    hf = after.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :].tolist()
    assert len(out) > 4 and list(out) == hf[: len(out)]
    del llm
    gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["qwen2"], indirect=True)
def test_vllm_chat_uses_the_template_and_stops_at_im_end(engine):
    from vllm import SamplingParams

    model_dir, llm = engine.model_dir, engine.llm
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "user", "content": "Hi"}]
    output = llm.chat(messages, SamplingParams(temperature=1.0, max_tokens=32, n=4, seed=0), use_tqdm=False)[0]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert list(output.prompt_token_ids) == list(expected)
    assert len(output.outputs) == 4
    stop_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}  # vLLM takes both from generation_config.json
    for sample in output.outputs:
        assert 1 <= len(sample.token_ids) <= 32
        assert not stop_ids & set(sample.token_ids[:-1])  # generation stops at the first of them
        assert len(sample.token_ids) == 32 or sample.token_ids[-1] in stop_ids
    # <|endoftext|> is not the tokenizer's eos: vLLM stops at it only because generation_config.json lists it
    forced = SamplingParams(temperature=0.0, max_tokens=8, logit_bias={tokenizer.pad_token_id: 100.0})
    assert list(llm.chat(messages, forced, use_tqdm=False)[0].outputs[0].token_ids) == [tokenizer.pad_token_id]


@pytest.mark.slow
@pytest.mark.parametrize("engine", vl_kinds("engine"), indirect=True)
def test_vllm_generates_with_an_image_like_hf(engine):
    model_dir, llm = engine.model_dir, engine.llm
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    images = [_image(90, 120), _image(300, 200, seed=1)]
    requests = [{"prompt": prompt, "multi_modal_data": {"image": image}} for image in images]
    outputs = llm.generate(requests, _greedy(12), use_tqdm=False)
    assert sum(len(output.outputs[0].token_ids) for output in outputs) > 12
    for image, output in zip(images, outputs):
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        assert list(output.prompt_token_ids) == inputs["input_ids"][0].tolist()  # same image-token expansion
        hf = model.generate(**inputs, max_new_tokens=12, do_sample=False)
        assert list(output.outputs[0].token_ids) == hf[0, inputs["input_ids"].shape[1] :].tolist()
