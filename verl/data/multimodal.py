# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Images and videos as the dataset stores them, turned into what the processor, the workers and vLLM take.

The dataset resizes every image (and every video frame) to the pixel budget once and ships the resized pixels to
the workers, so the processor in the driver, the processor in each worker and vLLM all see the same pixels and
agree on the number of image tokens. Videos are decoded here with PyAV at a fixed frame rate rather than through a
video backend that may be missing on the machine; a video travels as a uint8 array (frames, height, width, 3).
"""

import io
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, UnidentifiedImageError


if TYPE_CHECKING:  # `python -m verl.envs.evaluate` imports this module (verl.data.rollout_dump) without torch
    import torch


ImageValue = str | bytes | bytearray | dict | Image.Image


def resized_size(width: int, height: int, min_pixels: int | None, max_pixels: int | None) -> tuple[int, int]:
    """The (width, height) an image gets so that its area lies in [min_pixels, max_pixels], aspect kept.

    Rounding goes outwards from the budget (floor when shrinking, ceil when growing), so the bound is really met.
    """
    area = width * height
    if max_pixels is not None and area > max_pixels:
        scale = math.sqrt(max_pixels / area)
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    if min_pixels is not None and area < min_pixels:
        scale = math.sqrt(min_pixels / area)
        return math.ceil(width * scale), math.ceil(height * scale)
    return width, height


def resize_image(image: Image.Image, min_pixels: int | None, max_pixels: int | None) -> Image.Image:
    """An RGB copy of `image` scaled into the pixel budget (unchanged size if it already fits)."""
    image = image.convert("RGB") if image.mode != "RGB" else image
    size = resized_size(image.width, image.height, min_pixels, max_pixels)
    return image.resize(size, Image.Resampling.BICUBIC) if size != image.size else image


def resolve_path(path: str, base_dir: str | None) -> str:
    """`path` itself when absolute (or when no base_dir is set), else joined onto base_dir."""
    path = os.path.expanduser(path)
    if base_dir and not os.path.isabs(path):
        return os.path.join(base_dir, path)
    return path


def open_image(value: ImageValue, image_dir: str | None = None) -> Image.Image:
    """Open an image given as a path (relative to image_dir), bytes, a {"bytes": ..., "path": ...} dict or a PIL image.

    PIL reads only the header here; call `.load()` (or resize) to decode the pixels. Raises FileNotFoundError for a
    missing file, TypeError for an unsupported value and PIL.UnidentifiedImageError for data that is no image.
    """
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):  # Hugging Face `Image` feature without decoding, e.g. parquet written by datasets
        if value.get("bytes") is not None:
            value = value["bytes"]
        elif value.get("path"):
            value = value["path"]
        else:
            raise TypeError(f"image dict has neither 'bytes' nor 'path' (keys: {sorted(value)})")
    if isinstance(value, (bytes, bytearray)):
        return Image.open(io.BytesIO(value))
    if isinstance(value, str):
        path = resolve_path(value, image_dir)
        if not os.path.isfile(path):
            where = f" (data.image_dir is {image_dir!r})" if image_dir else " (data.image_dir is not set)"
            raise FileNotFoundError(f"image file {path!r} does not exist{where}")
        return Image.open(path)
    raise TypeError(
        f"an image must be a path, bytes, a {{'bytes': ...}} dict or a PIL image, got {type(value).__name__}"
    )


IMAGE_ERRORS = (OSError, TypeError, ValueError, UnidentifiedImageError, Image.DecompressionBombError)
"""What opening or decoding a bad image raises: a missing or corrupt file, an unsupported value, data that is no image,
and an image over PIL's pixel limit (Image.MAX_IMAGE_PIXELS: a 20000x20000 PNG of a few KB is common in scraped data;
decoded, it would take more than a gigabyte)."""


def check_image(value: ImageValue, image_dir: str | None = None) -> tuple[int, int]:
    """The (width, height) of an image whose pixels were all decoded: a truncated or corrupt file, whose header
    alone looks fine, fails here (OSError) rather than when its batch is built. The pixels are not kept."""
    image = open_image(value, image_dir)
    try:
        image.load()
        return image.size
    finally:
        if image is not value:  # we opened it: release the file and the pixels now, not at garbage collection
            image.close()


def image_size(value: ImageValue, image_dir: str | None, cache: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """`check_image`, once per file path: a dataset may name one picture in many rows; `cache` keeps the sizes."""
    path = value if isinstance(value, str) else None
    if path is not None and path in cache:
        return cache[path]
    size = check_image(value, image_dir)
    if path is not None:
        cache[path] = size
    return size


def unreadable_image(position: int, value: Any, error: Exception) -> str:
    """What an error says of image `position` that failed to open or decode: the cause, with the image's path
    when the value has one and the cause does not name it already."""
    if isinstance(value, dict) and value.get("bytes") is None:
        value = value.get("path")
    reason = str(error).rstrip(". ")
    if isinstance(error, Image.DecompressionBombError):
        reason += " (over PIL.Image.MAX_IMAGE_PIXELS)"
    if isinstance(value, str) and value not in reason:
        reason = f"{value!r}: {reason}"
    return f"image {position} cannot be read: {reason}"


def load_image(
    value: ImageValue, image_dir: str | None, min_pixels: int | None, max_pixels: int | None
) -> Image.Image:
    """Decode an image fully, as RGB, resized into the pixel budget."""
    image = open_image(value, image_dir)
    image.load()
    return resize_image(image, min_pixels, max_pixels)


def load_video(
    path: str, fps: float, min_pixels: int | None, max_pixels: int | None, video_dir: str | None = None
) -> np.ndarray:
    """Decode a video file with PyAV into frames at exactly `fps` frames per second of video time.

    Frame k shows the video at time k / fps: the latest source frame at or before that time (a source slower than
    `fps` repeats frames), so the processor may be told the rate is `fps` and its temporal positions stay right.
    Returns uint8 RGB frames (num_frames, height, width, 3), each resized into the pixel budget. Decoding is
    streamed and only kept frames are converted, so memory holds the output, not the video.
    """
    import av  # imported here: only video datasets need it

    if fps <= 0:
        raise ValueError(f"data.video_fps must be positive, got {fps}")
    path = resolve_path(path, video_dir)
    if not os.path.isfile(path):
        where = f" (data.image_dir is {video_dir!r})" if video_dir else " (data.image_dir is not set)"
        raise FileNotFoundError(f"video file {path!r} does not exist{where}")
    frames: list[np.ndarray] = []
    held, held_rgb, held_time = None, None, 0.0

    def emit_until(time: float) -> None:
        """Append the held frame for every output time before `time`."""
        nonlocal held_rgb
        while held is not None and len(frames) / fps < time - 1e-6:
            if held_rgb is None:
                width, height = resized_size(held.width, held.height, min_pixels, max_pixels)
                held_rgb = held.to_ndarray(format="rgb24", width=width, height=height)
            frames.append(held_rgb)

    with av.open(path) as container:
        if not container.streams.video:
            raise ValueError(f"file {path!r} has no video stream")
        stream = container.streams.video[0]
        frame_duration = 1.0 / float(stream.average_rate) if stream.average_rate else 1.0 / fps
        for count, frame in enumerate(container.decode(stream)):
            time = frame.time if frame.time is not None else count * frame_duration
            emit_until(time)
            held, held_rgb, held_time = frame, None, time
        if held is None:
            raise ValueError(f"video file {path!r} has no decodable frames")
        emit_until(held_time + frame_duration)  # the last frame lasts one frame duration: at least one output
    return np.stack(frames)


DEFAULT_VIDEO_FPS = 2.0
"""Frames per second a video is sampled at unless data.video_fps says otherwise."""


def video_metadata(frames: np.ndarray, fps: float) -> dict[str, Any]:
    """What a processor (Hugging Face's or vLLM's) is told of a video already sampled by `load_video` at `fps`: its
    frames are all the frames there are (frame i at i / fps seconds), so it must not sample again. Qwen2.5-VL takes
    the temporal spacing of its rope index from `fps`; Qwen3-VL writes each frame's timestamp into the prompt from
    `frames_indices` and `fps`."""
    count = len(frames)
    return {"total_num_frames": count, "fps": fps, "frames_indices": list(range(count))}


def processor_inputs(
    processor: Any,
    prompt: str,
    images: list[Image.Image] | None = None,
    videos: list[np.ndarray] | None = None,
    video_fps: float = DEFAULT_VIDEO_FPS,
) -> dict[str, Any]:
    """Run a multimodal processor on one rendered prompt and its (already resized) images and videos.

    The frames were sampled by `load_video`, so the processor must not sample again, and it is told the real
    frame rate: Qwen2.5-VL derives the temporal spacing of its rope index (second_per_grid_ts) from it. Workers that
    rebuild pixel values from `multi_modal_data` should call this too, so they get the same tokens as the dataset.
    """
    kwargs: dict[str, Any] = {}
    if videos:
        kwargs["video_metadata"] = [video_metadata(video, video_fps) for video in videos]
        kwargs["do_sample_frames"] = False
    return processor(
        text=[prompt],
        images=images or None,
        videos=videos or None,
        add_special_tokens=False,
        return_tensors="pt",
        **kwargs,
    )


TEXT_INPUTS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")
"""What a processor returns of the text; `process_media` keeps the rest (the media's model inputs) but what the
processor itself names unused (Gemma 4's per-image soft-token counts)."""


def process_media(multi_modal_data: dict[str, Any], processor: Any) -> dict[str, "torch.Tensor"]:
    """The processor's model inputs (pixel values and grids, tiles or patch positions) for one row's
    {"images": [...], "videos": [...]}.

    Images go through the processor itself, on a text of one placeholder per image, not through its image processor
    alone: the processor's own image settings (InternVL's tiling, which its image processor's defaults lack) apply,
    as they did when the prompt was encoded and as they do in vLLM."""
    inputs: dict[str, torch.Tensor] = {}
    dropped = {*TEXT_INPUTS, *getattr(processor, "unused_input_names", ())}
    images = multi_modal_data.get("images")
    if images:
        out = processor(text=[processor.image_token * len(images)], images=list(images), return_tensors="pt")
        inputs.update({key: value for key, value in out.items() if key not in dropped})
    videos = multi_modal_data.get("videos")
    if videos:
        out = processor.video_processor(videos=list(videos), return_tensors="pt")
        if "video_grid_thw" not in out:
            raise NotImplementedError(
                f"Videos are only supported for the Qwen-VL and GLM-4.xV processors (pixel_values_videos and "
                f"video_grid_thw), not {type(processor).__name__}; send the video's frames as images."
            )
        inputs.update(pixel_values_videos=out["pixel_values_videos"], video_grid_thw=out["video_grid_thw"])
    return inputs


def count_image_tokens(processor: Any, sizes: list[tuple[int, int]]) -> list[int] | None:
    """Tokens each (width, height) image's placeholder expands to (its image tokens and any the processor writes
    around them), without decoding pixels; None if the processor can't say.

    Uses the processor's own token arithmetic (the same that vLLM relies on), so it agrees with a full run.
    """
    count = getattr(processor, "_get_num_multimodal_tokens", None)
    if count is None or not sizes:
        return None
    try:
        data = count(image_sizes=[(height, width) for width, height in sizes])
    except NotImplementedError:
        return None
    tokens = getattr(data, "num_image_tokens", None)
    if tokens is None:
        return None
    # Gemma 4's processor writes <|image> and <image|> around the soft tokens it puts in place of the placeholder
    around = sum(1 for name in ("boi_token", "eoi_token") if getattr(processor, name, None))
    return [int(t) + around for t in tokens]
