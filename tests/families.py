# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The vision-language families the tests check, one row each: every family test parametrizes over `vl_kinds(check)`,
so a family added here gets every check its row claims, and a check it cannot pass is a False with the reason."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    kind: str
    """Tiny model kind (verl.models.tiny_models)."""
    pixels: int
    """Image area the runs use: a few image tokens (e.g. 56 x 56 with 14-pixel patches, 64 x 64 with 16)."""
    hf_class: str
    """transformers class of the whole model (image-text-to-text)."""
    image_placeholder: str = "<|vision_start|><|image_pad|><|vision_end|>"
    """What the chat template writes for one image, before the processor expands it."""
    max_prompt_length: int = 64
    """data.max_prompt_length of the GRPO run: an image prompt of `pixels` fits."""
    processor: bool = True
    """The processor expands an image as the model config says, and the dataset's rows (position ids) match the
    model's own (test_tiny_models, test_dataset)."""
    video: bool = True
    """The processor and the model take a video (test_tiny_models)."""
    engine: bool = True
    """The vLLM CPU engine greedy-decodes an image prompt as transformers does (test_tiny_models)."""
    engine_video: bool = True
    """The engine expands a video prompt as the dataset does (test_video_prompts)."""
    packed: bool = True
    """The packed (varlen) forward with images equals the padded one (test_packed_attention)."""
    ulysses: bool = True
    """Ulysses sequence parallelism on two ranks equals one process (test_ulysses)."""
    hybrid_engine: bool = True
    """The FSDP actor's weights synced into a vLLM engine give the actor's log-probs with images (test_vllm_rollout)."""
    grpo: bool = True
    """A two-step GRPO run with images, checkpointed, rollouts dumped (test_e2e)."""
    env_images: bool = True
    """Images an environment returns reach the engine and the trainer alike (test_multi_turn_images)."""


FAMILIES: dict[str, Family] = {
    family.kind: family
    for family in (
        Family("qwen2_5_vl", 3136, "Qwen2_5_VLForConditionalGeneration"),
        Family("qwen3_vl", 4096, "Qwen3VLForConditionalGeneration"),
        # Qwen3-VL-MoE (Qwen3-VL-30B-A3B): Qwen3-VL's processor and rope index (checked on qwen3_vl), MoE decoder
        Family(
            "qwen3_vl_moe",
            4096,
            "Qwen3VLMoeForConditionalGeneration",
            processor=False,
            video=False,
            env_images=False,  # Qwen3-VL's path, checked on qwen3_vl
        ),
        # Qwen2-VL: the slow checks run on Qwen2.5-VL, its successor with the same text model and rope index.
        Family(
            "qwen2_vl",
            3136,
            "Qwen2VLForConditionalGeneration",
            engine_video=False,
            packed=False,
            ulysses=False,
            hybrid_engine=False,
            grpo=False,
            env_images=False,
        ),
        # Qwen3.5: the Gated DeltaNet hybrid with Qwen3-VL's processor. Its CPU engine runs in bf16, so greedy tokens
        # are not compared with fp32 transformers (the GRPO run checks the log-probs at every sync instead); its
        # packed forward is checked in test_gated_deltanet; Ulysses is refused at validation (the recurrence needs
        # the whole row).
        Family(
            "qwen3_5",
            4096,
            "Qwen3_5ForConditionalGeneration",
            video=False,
            engine=False,
            packed=False,
            ulysses=False,
            hybrid_engine=False,
        ),
        Family(
            "qwen3_5_moe",
            4096,
            "Qwen3_5MoeForConditionalGeneration",
            processor=False,  # Qwen3.5's processor, checked on qwen3_5
            video=False,
            engine=False,
            engine_video=False,
            packed=False,
            ulysses=False,
            hybrid_engine=False,
            env_images=False,
        ),
        # Gemma 4 (E2B/E4B layout): 1-D rope, sliding-window and full-attention layers, KV sharing, per-layer
        # embeddings, final logit soft-capping; every image scaled to at most 70 soft tokens. Videos are not wired
        # (its processor's timestamps and video soft tokens); Ulysses is refused at validation (sliding windows).
        Family(
            "gemma4",
            9216,
            "Gemma4ForConditionalGeneration",
            image_placeholder="<|image|>",
            max_prompt_length=128,  # 64 soft tokens for a 96 x 96 image
            video=False,
            engine_video=False,
            ulysses=False,
            env_images=False,  # refused: environment images are expanded for Qwen-style processors only
        ),
        Family("glm4v", 3136, "Glm4vForConditionalGeneration", "<|begin_of_image|><|image|><|end_of_image|>"),
        # GLM-4.5V: GLM-4.1V's processor and rope index code (checked on glm4v; both passed here too), an MoE decoder
        Family(
            "glm4v_moe",
            3136,
            "Glm4vMoeForConditionalGeneration",
            "<|begin_of_image|><|image|><|end_of_image|>",
            processor=False,
            video=False,
            env_images=False,  # GLM-4.1V's path, checked on glm4v
        ),
        # InternVL (Hugging Face format, Qwen2 decoder, 1-D rope): vLLM runs it through its InternS1 class.
        Family(
            "internvl",
            3136,
            "InternVLForConditionalGeneration",
            image_placeholder="<IMG_CONTEXT>\n",
            video=False,
            engine_video=False,
            env_images=False,  # refused: environment images are expanded for Qwen-style processors only
        ),
        # LLaVA-OneVision (Qwen2 decoder, 1-D rope, anyres tiles); vLLM loads transformers 5's tower names through
        # vllm_compat.load_transformers_tower_names.
        Family(
            "llava_onevision",
            3136,
            "LlavaOnevisionForConditionalGeneration",
            image_placeholder="<image>\n",
            max_prompt_length=128,  # anyres: a 56 x 56 image is 36 tokens
            video=False,
            engine_video=False,
            env_images=False,  # refused: environment images are expanded for Qwen-style processors only
        ),
        # Mistral 3 (Mistral Small 3.1, Ministral 3: a Pixtral tower over each image at its own aspect ratio, a
        # Mistral decoder with 1-D rope); images of one batch are zero-padded to one size, with their image_sizes.
        Family(
            "mistral3",
            3136,
            "Mistral3ForConditionalGeneration",
            image_placeholder="[IMG]",
            video=False,
            engine_video=False,
            env_images=False,  # refused: environment images are expanded for Qwen-style processors only
        ),
    )
}


def image_token_counts(inputs: Any) -> list[int]:
    """Tokens each image of a processor output expands to: Qwen's patch grid over the 2 x 2 merge, or Gemma 4's
    patches (position ids of -1 are padding) over its 3 x 3 pooling."""
    if "image_grid_thw" in inputs:
        return (inputs["image_grid_thw"].prod(-1) // 4).tolist()
    return ((inputs["image_position_ids"][..., 0] >= 0).sum(-1) // 9).tolist()


def vl_kinds(check: str) -> list[str]:
    """The kinds whose row has `check` (a Family field) true."""
    return [kind for kind, family in FAMILIES.items() if getattr(family, check)]
