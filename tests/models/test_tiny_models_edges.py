# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.models.tiny_models: the chat templates' less travelled parts, the spec's limits, each family's
published config fields the suite did not pin, and the cache of get_or_build_tiny_model (specs that must not share a
directory, a concurrent builder, a corrupt or stale spec file, a cache shared between users)."""

import functools
import json
import os

import pytest
import transformers

from verl.models import tiny_models
from verl.models.tiny_models import (
    SPEC_FILE,
    TinyModelSpec,
    build_model,
    build_tiny_model,
    build_tokenizer,
    get_or_build_tiny_model,
)


SMALL = {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 64}
"""A text model that builds in a fraction of a second."""


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def _config(kind: str, **size) -> transformers.PretrainedConfig:
    """The config build_model gives `kind` (without building the weights)."""
    spec = TinyModelSpec(kind=kind, **size)
    kwargs = tiny_models._config_kwargs(spec, build_tokenizer(spec.vocab_size, kind))
    return transformers.AutoConfig.for_model(kind.removesuffix("_rm"), **kwargs)


def _weights_mtime(model_dir: str) -> int:
    return os.stat(os.path.join(model_dir, "model.safetensors")).st_mtime_ns


# ---------------------------------------------------------------------------------------------- chat templates
def test_tool_call_arguments_given_as_a_json_string_or_an_object_render_alike():
    """OpenAI clients send `arguments` as a JSON string, our environments as a dict: as Qwen2.5's template, both are
    written as the same JSON object (a string is not encoded a second time)."""
    tokenizer = build_tokenizer()

    def render(arguments) -> str:
        call = {"type": "function", "function": {"name": "add", "arguments": arguments}}
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        return tokenizer.apply_chat_template(messages, tokenize=False)

    as_object = render({"a": 1})
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call><|im_end|>' in as_object
    assert render('{"a": 1}') == as_object


def test_tools_are_listed_once_in_the_first_system_message():
    """A later system message (a mid-conversation instruction) does not get the tool schemas a second time."""
    tokenizer = build_tokenizer()
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Now be verbose."},
    ]
    rendered = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert rendered.count("<tools>") == 1 and "<|im_start|>system\nNow be verbose.<|im_end|>" in rendered


def test_an_openai_image_url_part_renders_as_an_image():
    """An `image_url` part (OpenAI's layout, what the evaluation client sends) is an image for the template."""
    tokenizer = build_tokenizer(kind="qwen2_5_vl")
    content = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "?"},
    ]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False)
    assert "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>?<|im_end|>" in rendered


QWEN3_GENERATION_KINDS = ["qwen3_moe", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_next"]


@pytest.mark.parametrize("kind", QWEN3_GENERATION_KINDS)
def test_qwen3_generation_kinds_write_no_default_system_message(kind):
    """As the `qwen3` kind and the real Qwen3(-MoE), Qwen3-VL, Qwen3.5 and Qwen3-Next templates: without a system
    message in the conversation the prompt opens with the user's turn (Qwen2's "You are a helpful assistant." is not
    theirs), and tools alone make a system message."""
    render = functools.partial(build_tokenizer(kind=kind).apply_chat_template, tokenize=False)
    user = [{"role": "user", "content": "Hi"}]
    assert render(user, add_generation_prompt=True).startswith("<|im_start|>user\nHi<|im_end|>\n")
    with_tools = render(user, tools=TOOLS)
    assert with_tools.startswith("<|im_start|>system\nTools you can call") and "helpful assistant" not in with_tools
    qwen3 = functools.partial(build_tokenizer(kind="qwen3").apply_chat_template, tokenize=False)
    assert render(user, tools=TOOLS) == qwen3(user, tools=TOOLS)  # qwen3 adds thinking only to assistant turns


def test_an_assistant_s_tool_calls_start_on_their_own_line():
    """Qwen2.5's template writes '\\n<tool_call>' for every call: after the text and between calls (jinja's
    trim_blocks, on in transformers, ate the newline the template wrote after its `if` tag)."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Let me add.", "tool_calls": [call] * 2},
    ]
    rendered = build_tokenizer().apply_chat_template(messages, tokenize=False)
    block = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    assert f"<|im_start|>assistant\nLet me add.\n{block}\n{block}<|im_end|>\n" in rendered


def test_qwen3_writes_the_thinking_block_on_the_last_assistant_turn_only():
    """As Qwen3's template: the last assistant turn after the last user message keeps its (empty) thinking block, an
    earlier one in the same exchange (before a tool result) and those of earlier exchanges do not."""
    tokenizer = build_tokenizer(kind="qwen3")
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "B"},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": "C"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered.count("<think>") == 1
    assert "<|im_start|>assistant\nA<|im_end|>" in rendered and "<|im_start|>assistant\nB<|im_end|>" in rendered
    assert rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nC<|im_end|>\n")


def test_glm_tool_results_are_observation_turns():
    """GLM-4.1V writes a tool result as an <|observation|> turn, one of its stop tokens."""
    tokenizer = build_tokenizer(kind="glm4v")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "1"}], tokenize=False
    )
    assert rendered == "[gMASK]<sop><|user|>\nHi<|observation|>\n1"
    assert tokenizer.convert_tokens_to_ids("<|observation|>") != tokenizer.unk_token_id


def test_gemma4_renders_a_video_part_as_its_video_token():
    tokenizer = build_tokenizer(kind="gemma4")
    content = [{"type": "video"}, {"type": "text", "text": "What happens?"}]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False)
    assert rendered == "<bos><|turn>user\n<|video|>What happens?<turn|>\n"


# ---------------------------------------------------------------------------------------------- tokenizers
@pytest.mark.parametrize("kind", ["glm4v", "glm4v_moe", "glm4_moe"])
def test_every_glm_kind_ends_and_pads_with_endoftext(kind):
    """As GLM-4.1V / 4.5V / 4.5: eos and padding are <|endoftext|> (a turn also ends at the next role token), not
    Qwen-Instruct's <|im_end|>, which no GLM template writes."""
    tokenizer = build_tokenizer(kind=kind)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|endoftext|>", "<|endoftext|>")


def test_gemma3_encoding_adds_bos_as_gemma_3_s_tokenizer():
    tokenizer = build_tokenizer(kind="gemma3")
    assert tokenizer.encode("hi")[0] == tokenizer.bos_token_id == 2


def test_the_tokenizer_admits_prompts_as_long_as_the_config():
    """The tokenizer's limit is the config's (max_position_embeddings): a shorter one warns and truncates prompts the
    model takes."""
    assert build_tokenizer().model_max_length == TinyModelSpec().max_position_embeddings


def test_gemma4_s_tokenizer_eos_ends_the_model_turn():
    """As Gemma 4-it: the tokenizer's eos is <turn|> (the end of the chat turn); the generation config adds <eos>."""
    assert build_tokenizer(kind="gemma4").eos_token == "<turn|>"


# ---------------------------------------------------------------------------------------------- spec limits
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hidden_size": 48, "num_heads": 4}, "hidden_size=48"),  # head dim 12: not a multiple of 8
        ({"vision_hidden_size": 36, "vision_num_heads": 2}, "vision_hidden_size=36"),  # vision head dim 18
    ],
)
def test_head_dims_the_ropes_cannot_split_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TinyModelSpec(**options)


def test_the_limits_themselves_are_valid_specs():
    """min_pixels == max_pixels (every image one size) and initializer_range=0 (all-zero weights) are allowed."""
    assert TinyModelSpec(min_pixels=28 * 28 * 16, max_pixels=28 * 28 * 16).min_pixels == 28 * 28 * 16
    assert TinyModelSpec(initializer_range=0.0).initializer_range == 0.0


# ---------------------------------------------------------------------------------------------- configs
def test_qwen2_ties_its_embeddings_and_qwen3_next_does_not():
    """Qwen2-0.5B/1.5B tie the output layer to the embedding; Qwen3-Next-80B-A3B does not."""
    assert _config("qwen2").tie_word_embeddings is True
    assert _config("qwen3_next").tie_word_embeddings is False


def test_olmo3_has_three_sliding_window_layers_to_a_full_one():
    assert _config("olmo3", num_layers=8).layer_types == ["sliding_attention"] * 3 + ["full_attention"] + [
        "sliding_attention"
    ] * 3 + ["full_attention"]


@pytest.mark.parametrize("kind", ["qwen3_moe", "qwen2_moe", "qwen3_5_moe"])
def test_an_expert_is_half_the_dense_width_so_top2_costs_one_dense_mlp(kind):
    config = _config(kind).get_text_config()
    assert (config.num_experts, config.num_experts_per_tok) == (4, 2)
    assert config.moe_intermediate_size == TinyModelSpec().intermediate_size // 2


def test_qwen3_moe_normalises_its_top_k_as_qwen3_30b_a3b():
    """transformers always renormalises the top-k; vLLM reads the flag: without it the engine's mixture differs."""
    assert _config("qwen3_moe").norm_topk_prob is True


def test_glm4_moe_ropes_half_the_head_and_stops_at_the_next_role():
    config = _config("glm4_moe")
    assert config.rope_parameters["partial_rotary_factor"] == 0.5
    tokenizer = build_tokenizer(kind="glm4_moe")
    assert tokenizer.convert_ids_to_tokens(config.eos_token_id) == ["<|endoftext|>", "<|user|>", "<|observation|>"]


@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_mrope_sections_split_the_frequencies_as_qwen(head_dim):
    """[16, 24, 24] for Qwen2-VL's head dim 128: an eighth of the head for time, the rest halved."""
    sections = tiny_models._mrope_section(head_dim)
    assert sections == [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16] and sum(sections) == head_dim // 2


def test_qwen3_and_granite_heads_as_published():
    """Qwen3 states its head dim; Granite MoE scales attention by 1/head_dim (not 1/sqrt)."""
    assert _config("qwen3").head_dim == TinyModelSpec().head_dim == 64  # (Qwen3Config's default: 128)
    assert _config("granitemoe").attention_multiplier == pytest.approx(1 / TinyModelSpec().head_dim)


def test_qwen2_5_vl_s_last_vision_block_attends_to_the_whole_image():
    assert _config("qwen2_5_vl", vision_depth=3).vision_config.fullatt_block_indexes == [2]


@pytest.mark.parametrize(
    ("kind", "stops"),
    [
        ("glm4v", ["<|endoftext|>", "<|user|>", "<|observation|>"]),
        ("gemma3_text", ["<eos>", "<end_of_turn>"]),
        ("qwen3", ["<|im_end|>", "<|endoftext|>"]),
    ],
)
def test_generation_stops_where_the_family_s_turn_ends(kind, stops):
    """The generation config (which vLLM reads too) names every token a turn can end at."""
    tokenizer = build_tokenizer(kind=kind)
    model = build_model(TinyModelSpec(kind=kind, **SMALL), tokenizer)
    assert tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id) == stops


# ---------------------------------------------------------------------------------------------- processors
def test_the_processors_resize_within_the_spec_s_pixel_budget():
    """spec.max_pixels reaches the image and video processors (GLM's: doubled, its resize counts two frames)."""
    for kind, factor in (("qwen2_5_vl", 1), ("qwen3_vl", 1), ("glm4v", 2)):
        spec = TinyModelSpec(kind=kind, max_pixels=28 * 28 * 16)
        processor = tiny_models.build_processor(spec, build_tokenizer(kind=kind))
        for sub in (processor.image_processor, processor.video_processor):
            assert sub.size["longest_edge"] == factor * spec.max_pixels, (kind, type(sub).__name__)
            assert sub.size["shortest_edge"] == factor * spec.min_pixels, (kind, type(sub).__name__)


def test_qwen2_vl_video_frames_are_capped_as_qwen_vl_utils():
    spec = TinyModelSpec(kind="qwen2_vl")
    processor = tiny_models.build_processor(spec, build_tokenizer(kind="qwen2_vl"))
    assert processor.video_processor.cap_pixels_per_frame is True


# ---------------------------------------------------------------------------------------------- cache
def test_different_specs_get_different_directories_each_reused(tmp_path):
    """Two non-default specs sharing a name would replace each other's directory at every call, under a reader of
    the other."""
    cache = str(tmp_path)
    one = get_or_build_tiny_model("qwen2", cache, **SMALL)
    two = get_or_build_tiny_model("qwen2", cache, **{**SMALL, "num_layers": 2})
    also_seed = get_or_build_tiny_model("qwen2", cache, seed=1, **SMALL)
    assert len({one, two, also_seed}) == 3
    mtimes = [_weights_mtime(path) for path in (one, two, also_seed)]
    assert get_or_build_tiny_model("qwen2", cache, **SMALL) == one
    assert [_weights_mtime(path) for path in (one, two, also_seed)] == mtimes  # none rebuilt


def test_a_concurrent_builder_s_finished_directory_is_kept(tmp_path, monkeypatch):
    """Another process finishes the same spec while this one builds: its directory (maybe already in use) stays, this
    build is dropped, no staging directory is left. The other process is simulated by a spy around the real builder
    that runs the real get_or_build_tiny_model first."""
    cache = str(tmp_path)
    real_build = tiny_models.build_tiny_model
    other = {}

    def build_after_another_process(output_dir, **kwargs):
        if not other:
            monkeypatch.setattr(tiny_models, "build_tiny_model", real_build)
            other["dir"] = get_or_build_tiny_model("qwen2", cache, **SMALL)
            other["inode"] = os.stat(os.path.join(other["dir"], "model.safetensors")).st_ino
            monkeypatch.setattr(tiny_models, "build_tiny_model", build_after_another_process)
        return real_build(output_dir, **kwargs)

    monkeypatch.setattr(tiny_models, "build_tiny_model", build_after_another_process)
    target = get_or_build_tiny_model("qwen2", cache, **SMALL)
    assert target == other["dir"]
    assert os.stat(os.path.join(target, "model.safetensors")).st_ino == other["inode"]  # not swapped
    assert os.listdir(cache) == [os.path.basename(target)]  # no staging or stale directory left


def test_a_cached_model_is_readable_by_other_users(tmp_path):
    """The cache may be shared: the directory is 0755 (mkdtemp's 0700 would lock others out)."""
    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path), **SMALL)
    assert os.stat(model_dir).st_mode & 0o777 == 0o755


def test_a_corrupt_spec_file_is_rebuilt(tmp_path):
    """A truncated tiny_model_spec.json (a crash of an older, non-atomic writer, a full disk) means a rebuild, not a
    JSONDecodeError."""
    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path), **SMALL)
    with open(os.path.join(model_dir, SPEC_FILE)) as f:
        spec = json.load(f)
    with open(os.path.join(model_dir, SPEC_FILE), "w") as f:
        f.write('{"kind": "qw')
    assert get_or_build_tiny_model("qwen2", str(tmp_path), **SMALL) == model_dir
    with open(os.path.join(model_dir, SPEC_FILE)) as f:
        assert json.load(f) == spec


def test_a_new_builder_version_replaces_the_cached_directory(tmp_path, monkeypatch):
    """BUILDER_VERSION is what invalidates the cached directories when the builder's output changes; a non-default
    spec's directory keeps its name (its hash leaves the version out), so the new build replaces the old one instead
    of growing the cache by a directory a version."""
    model_dir = get_or_build_tiny_model("qwen2", str(tmp_path), **SMALL)
    with open(os.path.join(model_dir, SPEC_FILE)) as f:
        assert json.load(f)["builder_version"] == tiny_models.BUILDER_VERSION
    monkeypatch.setattr(tiny_models, "BUILDER_VERSION", tiny_models.BUILDER_VERSION + 1)
    rebuilt = get_or_build_tiny_model("qwen2", str(tmp_path), **SMALL)
    with open(os.path.join(rebuilt, SPEC_FILE)) as f:
        assert json.load(f)["builder_version"] == tiny_models.BUILDER_VERSION
    assert rebuilt == model_dir
    assert [entry.name for entry in tmp_path.iterdir()] == [os.path.basename(model_dir)]


def test_the_cli_rebuilds_a_tiny_model_s_directory_in_place(tmp_path, capsys):
    """`--output` at an earlier tiny model (its spec file says so) is rebuilt, with the new options."""
    output = str(tmp_path / "model")
    args = ["--output", output, "--hidden-size", "64", "--num-layers", "1", "--num-heads", "2", "--num-kv-heads", "1"]
    assert tiny_models.main(args) == 0
    assert tiny_models.main([*args, "--seed", "3"]) == 0
    with open(os.path.join(output, SPEC_FILE)) as f:
        assert json.load(f)["seed"] == 3
    assert "wrote qwen2 (seed 3" in capsys.readouterr().out


def test_build_tiny_model_writes_the_spec_it_was_given(tmp_path):
    model_dir = build_tiny_model(str(tmp_path / "m"), kind="qwen2", seed=5, **SMALL)
    with open(os.path.join(model_dir, SPEC_FILE)) as f:
        assert json.load(f) == TinyModelSpec(kind="qwen2", seed=5, **SMALL).to_dict()


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "internvl", "qwen2"])
def test_count_parameters_finds_the_vision_tower(tmp_path, kind):
    """The CLI's report: the vision tower's parameters of a VL model (0 for a text model), as the weights hold them."""
    from safetensors.torch import load_file

    model_dir = build_tiny_model(str(tmp_path / kind), kind=kind, **SMALL)
    weights = load_file(os.path.join(model_dir, "model.safetensors"))
    tower = sum(t.numel() for name, t in weights.items() if "visual." in name or "vision_tower." in name)
    assert tiny_models.count_parameters(model_dir) == {
        "total": sum(t.numel() for t in weights.values()),
        "vision": tower,
    }
    assert (tower > 0) == (kind != "qwen2")
