# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""forward_response and make_micro_batches in one process: trimmed padded rows, packed rows, padded budgets."""

import pytest
import torch

from tests.workers.fsdp_testing import make_media_batch, make_text_batch, reference_outputs
from verl.models.config import ModelConfig
from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.utils.torch_functional import log_probs_from_logits
from verl.workers.actor.forward import forward_response, make_micro_batches, packing_is_exact, update_micro_batch_size


TEMPERATURE = 0.7


def head(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"log_probs": log_probs_from_logits(logits.float() / TEMPERATURE, labels)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from verl.models.loading import build_model

    path = get_or_build_tiny_model("qwen2", str(tmp_path_factory.mktemp("models")))
    return build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False)).eval()


def short_batch(extra: int = 8) -> DataProto:
    """A rollout batch widened by `extra` all-padding columns before the prompts and after the responses."""
    data = make_text_batch(seed=3, batch_size=6, prompt_len=12, response_len=10)
    batch = data.batch

    def widen(tensor: torch.Tensor) -> torch.Tensor:
        pad = torch.nn.functional.pad
        return torch.cat([pad(tensor[:, :12], (extra, 0)), pad(tensor[:, 12:], (0, extra))], dim=1)

    tensors = {key: widen(batch[key]) for key in ("input_ids", "attention_mask", "position_ids")}
    tensors["responses"] = torch.nn.functional.pad(batch["responses"], (0, extra))
    return DataProto.from_dict(tensors=tensors)


def test_padded_forward_trims_padding_columns_and_matches_the_full_forward(model):
    data = short_batch()
    reference = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    widths = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape), with_kwargs=True)
    try:
        out = forward_response(model, data, padding_free=False, head=head)["log_probs"]
    finally:
        hook.remove()
    assert out.shape == reference.shape
    assert (out - reference).abs().max() < 1e-5
    valid_columns = data.batch["attention_mask"].any(dim=0).sum().item()
    assert widths == [torch.Size([len(data), valid_columns])]  # all-padding columns never reach the model
    assert valid_columns <= data.batch["attention_mask"].shape[1] - 16


def test_packed_forward_matches_the_padded_forward(model):
    data = short_batch()
    assert packing_is_exact(model), "the default attention must be the varlen one"
    packed = forward_response(model, data, padding_free=True, head=head)["log_probs"]
    padded = forward_response(model, data, padding_free=False, head=head)["log_probs"]
    assert (packed - padded).abs().max() < 1e-5


def test_padded_micro_batches_group_by_length_and_restore_order(model):
    data = make_text_batch(seed=5, batch_size=12, prompt_len=12, response_len=10)
    micro, order = make_micro_batches(data, micro_batch_size=3, dynamic=True, padded=True)
    budget = 3 * data.batch["attention_mask"].shape[1]
    for part in micro:
        mask = part.batch["attention_mask"]
        width = int(mask[:, :12].sum(-1).max() + mask[:, 12:].sum(-1).max())
        assert len(part) * width <= budget
    outputs = torch.cat([forward_response(model, part, False, head)["log_probs"] for part in micro])[order]
    reference = reference_outputs(model, data, TEMPERATURE)["log_probs"]
    assert (outputs - reference).abs().max() < 1e-5


def test_update_micro_batch_default_follows_the_device(monkeypatch):
    from verl.utils import device as device_utils

    assert update_micro_batch_size(3, 64, dynamic=False) == 3  # a configured size is used as it is
    monkeypatch.setattr(device_utils, "_device_type", "cpu")
    assert update_micro_batch_size(None, 64, dynamic=True) == 8
    assert update_micro_batch_size(None, 12, dynamic=False) == 6  # fixed splits: the largest divisor up to 8
    assert update_micro_batch_size(None, 7, dynamic=False) == 7
    # every micro-batch gathering the parameters itself: larger micro-batches
    assert update_micro_batch_size(None, 64, dynamic=True, gather_once=False) == 16
    assert update_micro_batch_size(None, 24, dynamic=False, gather_once=False) == 12
    monkeypatch.setattr(device_utils, "_device_type", "cuda")
    assert update_micro_batch_size(None, 64, dynamic=True) == 4
    assert update_micro_batch_size(None, 6, dynamic=False) == 3


GLM_PLACEHOLDERS = {
    "image": "<|begin_of_image|><|image|><|end_of_image|>",
    "video": "<|begin_of_video|><|video|><|end_of_video|>",
}


def features_in_their_places(model, data: DataProto) -> torch.Tensor:
    """Log-probs of the responses with each row's image features and video features (the model's own
    get_image_features and get_video_features) put on the row's image tokens and video tokens (RopeIndex's token
    types), row by row: the reference that GLM's forward, which finds both kinds by the image token, cannot give."""
    from verl.models.rope_index import IMAGE_TOKEN, VIDEO_TOKEN, RopeIndex

    batch = data.batch
    response_len = batch["responses"].shape[-1]
    token_types = RopeIndex(model.config).mm_token_type_ids
    logits = []
    for row, inputs in enumerate(data.non_tensor_batch["multi_modal_inputs"]):
        ids = batch["input_ids"][row]
        embeds = model.get_input_embeddings()(ids).clone()
        types = token_types(ids)
        inputs = inputs or {}
        if "pixel_values" in inputs:
            features = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output
            embeds[types == IMAGE_TOKEN] = torch.cat(features)
        if "pixel_values_videos" in inputs:
            videos = model.model.get_video_features(inputs["pixel_values_videos"], inputs["video_grid_thw"])
            embeds[types == VIDEO_TOKEN] = torch.cat(videos.pooler_output)
        output = model(
            inputs_embeds=embeds[None],
            attention_mask=batch["attention_mask"][row : row + 1],
            position_ids=batch["position_ids"][row : row + 1].transpose(0, 1),
            use_cache=False,
        )
        logits.append(output.logits[0, -response_len - 1 : -1])
    log_probs = log_probs_from_logits(torch.stack(logits).float() / TEMPERATURE, batch["responses"])
    return log_probs * batch["attention_mask"][:, -response_len:]


@pytest.mark.parametrize("kind", ["glm4v", "glm4v_moe"])
def test_glm_micro_batch_of_images_and_videos_places_each_kinds_features(kind, tmp_path):
    """GLM-4.1V and GLM-4.5V write a video's frames with the image token, and their forward finds both kinds by it:
    a micro-batch with an image row and a video row, or a row with both, failed ("Image features and image tokens do
    not match"). The frames go in as images, in token order (verl.models.glm_video): every row's log-probs are those
    of its features in their places, packed and padded."""
    from verl.data.tokenizer import get_processor
    from verl.models.glm_video import frames_as_images
    from verl.models.loading import build_model
    from verl.workers.actor.forward import process_multi_modal_inputs

    path = get_or_build_tiny_model(kind, str(tmp_path))
    model = build_model(ModelConfig(model_path=path, enable_gradient_checkpointing=False)).eval()
    processor = get_processor(path)
    rows = [["image"], ["video"], ["image", "video"], ["video", "image", "image"], []]
    data = make_media_batch(model, processor, rows, GLM_PLACEHOLDERS)
    process_multi_modal_inputs(data, processor)
    with torch.no_grad():
        split = data[[0, 1, 4]]  # no row holds both: the model's own forward, row by row, is the same reference
        own = reference_outputs(model, split, TEMPERATURE)["log_probs"]
        assert (own - features_in_their_places(model, split)).abs().max() < 1e-5
    assert packing_is_exact(model)
    weights = torch.randn(data.batch["responses"].shape, generator=torch.Generator().manual_seed(0))

    def log_probs_and_grads(padding_free: bool | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The actor's forward (None: the reference) and the gradient of a weighted sum of its log-probs."""
        model.zero_grad(set_to_none=True)
        if padding_free is None:
            log_probs = features_in_their_places(model, data)
        else:
            log_probs = forward_response(model, data, padding_free, head)["log_probs"]
        (log_probs * weights).sum().backward()
        return log_probs.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    expected, expected_grads = log_probs_and_grads(None)
    assert any(name.startswith("model.visual.") for name in expected_grads)
    for padding_free in (False, True):
        got, grads = log_probs_and_grads(padding_free)
        diff = (got - expected).abs().max().item()  # fp32 noise: up to 1.05e-5 measured (CPUs differ); misplaced
        assert diff < 5e-5, f"padding_free={padding_free}: {diff}"  # features give 0.1 and more
        assert set(grads) == set(expected_grads)
        for name, grad in grads.items():  # fp32 noise: 1e-5 of the gradient's scale
            atol = 1e-5 * expected_grads[name].abs().max().item() + 1e-9
            torch.testing.assert_close(
                grad, expected_grads[name], rtol=1e-4, atol=atol, msg=lambda m, name=name: f"{name}: {m}"
            )

    # a row's media that are not its tokens' is named
    inputs = data.non_tensor_batch["multi_modal_inputs"]
    with pytest.raises(ValueError, match="Row 3 has .* image tokens but its images make"):
        frames_as_images(model.config, data.batch["input_ids"][3], inputs[2], row=3)
