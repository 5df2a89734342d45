# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Images and videos as the dataset stores them, turned into what the processor, the workers and vLLM take.
Every image and video frame is resized to the pixel budget once and the resized pixels are shipped, so all processors
and vLLM agree on the number of image tokens. Videos are decoded here with PyAV at a fixed frame rate (no optional
video backend needed) and travel as uint8 arrays (frames, height, width, 3)."""

import base64
import io
import math
import os
import re
from collections.abc import Collection
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError


if TYPE_CHECKING:  # `python -m verl.envs.evaluate` imports this module (verl.data.rollout_dump) without torch
    import torch


ImageValue = str | bytes | bytearray | dict | Image.Image


def resized_size(width: int, height: int, min_pixels: int | None, max_pixels: int | None) -> tuple[int, int]:
    """(width, height) with area in [min_pixels, max_pixels], aspect kept; rounding goes outwards from the budget
    (floor when shrinking, ceil when growing) so the bound is really met."""
    area = width * height
    if max_pixels is not None and area > max_pixels:
        scale = math.sqrt(max_pixels / area)
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    if min_pixels is not None and area < min_pixels:
        scale = math.sqrt(min_pixels / area)
        return math.ceil(width * scale), math.ceil(height * scale)
    return width, height


def content_parts(text: str, markers: Collection[str]) -> list[dict[str, Any]]:
    """`text` as chat content parts: {"type": "image"} for each `<image>` in `markers` (likewise `<video>`), text
    parts between them."""
    pattern = "(" + "|".join(map(re.escape, markers)) + ")"
    return [
        {"type": piece[1:-1]} if piece in markers else {"type": "text", "text": piece}
        for piece in re.split(pattern, text)
        if piece
    ]


def marker_text(content: Any) -> Any:
    """A message's content given as typed parts (Hugging Face's and TRL's chat layout: `{"type": "text", "text":
    ...}`, `{"type": "image"}`, `{"type": "video"}`) as text with an `<image>` / `<video>` marker per placeholder, the
    pictures coming from the row's image column as for markers; a placeholder's `index` (TRL's vision data, as
    HuggingFaceH4/llava-instruct-mix-vsft: the picture's place in that column) is no picture. Any other content is
    returned as it is. ValueError for a part that is not one of these, or that holds its picture itself."""
    if not isinstance(content, (list, tuple)):
        return content
    pieces = []
    for position, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif kind in ("image", "video") and not set(part) - {"type", "index"}:
            pieces.append(f"<{kind}>")
        elif kind in ("image", "video", "image_url", "video_url"):
            media = kind.removesuffix("_url")
            column = "the image column (data.image_key)" if media == "image" else "the video column (data.video_key)"
            raise ValueError(
                f"content part {position} holds its {media} itself; put the {media}s in {column} and leave "
                f'{{"type": "{media}"}} in their place'
            )
        else:
            raise ValueError(
                f'content part {position} must be {{"type": "text", "text": ...}}, {{"type": "image"}} or '
                f'{{"type": "video"}}, got {part!r:.80}'
            )
    return "".join(pieces)


_ORIENTATION = 0x0112
"""The EXIF tag of a photo's orientation (1: as stored; 5-8 swap width and height)."""


def _orientation(image: Image.Image) -> int:
    try:
        return int(image.getexif().get(_ORIENTATION, 1) or 1)
    except Exception:  # noqa: BLE001 - unreadable EXIF: taken as stored, as vLLM does
        return 1


def to_rgb(image: Image.Image) -> Image.Image:
    """`image` upright and in RGB as vLLM and qwen_vl_utils read it: turned as its EXIF orientation says (vLLM turns
    every image it is given, the processors do not: a phone's photo was seen sideways by the actor, upright by the
    engine), transparency over white (a plain convert made a transparent background black, and black line art on it
    all black), 16- and 32-bit greys scaled to 8 bits (a plain convert clipped them: 16-bit scans came out nearly all
    white)."""
    if _orientation(image) != 1:
        image = ImageOps.exif_transpose(image)
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") else max(float(values.max()), 1.0)
        return Image.fromarray(np.clip(values / top * 255.0, 0, 255).round().astype(np.uint8)).convert("RGB")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def resize_image(image: Image.Image, min_pixels: int | None, max_pixels: int | None) -> Image.Image:
    """An RGB copy of `image` scaled into the pixel budget (unchanged if it fits)."""
    image = to_rgb(image)
    size = resized_size(image.width, image.height, min_pixels, max_pixels)
    return image.resize(size, Image.Resampling.BICUBIC) if size != image.size else image


def resolve_path(path: str, base_dir: str | None) -> str:
    """`path` when absolute or base_dir unset, else joined onto base_dir."""
    path = os.path.expanduser(path)
    return os.path.join(base_dir, path) if base_dir and not os.path.isabs(path) else path


OUTSIDE_IMAGE_DIR = (
    "path {path!r} leads outside data.image_dir {dir!r}; keep media under it, or set "
    "data.allow_paths_outside_image_dir=true for a dataset you trust"
)


def path_outside(value: Any, image_dir: str) -> str | None:
    """The path of a dataset's media `value` (a path, or a {"path"} dict without bytes) where it resolves (symlinks
    followed) outside `image_dir`: an absolute path, `..`, a symlink out; else None. Where image_dir lies in a Hugging
    Face cache snapshot (`<repo>/snapshots/<revision>/...`, whose files are symlinks into `<repo>/blobs/`), that
    repository's blobs are inside too."""
    path = value.get("path") if isinstance(value, dict) and value.get("bytes") is None else value
    if not isinstance(path, str):
        return None
    root = os.path.realpath(image_dir)
    roots, folder = [root], root
    while os.path.dirname(folder) != folder:
        parent = os.path.dirname(folder)
        blobs = os.path.join(os.path.dirname(parent), "blobs")
        if os.path.basename(parent) == "snapshots" and os.path.isdir(blobs):
            roots.append(blobs)
            break
        folder = parent
    full = os.path.realpath(resolve_path(path, image_dir))
    return None if any(os.path.commonpath([full, root]) == root for root in roots) else path


def open_image(value: ImageValue, image_dir: str | None = None) -> Image.Image:
    """Open an image given as a path (relative to image_dir), a base64 data URL, bytes, a {"bytes", "path"} dict or a
    PIL image. Reads only the header (`.load()` decodes). Raises FileNotFoundError, TypeError (unsupported value),
    ValueError (a URL, a data URL not in base64) or UnidentifiedImageError."""
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
    if isinstance(value, str) and value.startswith("data:image/"):  # a data URL (OpenAI's image_url layout)
        header, _, payload = value.partition(",")
        if not header.endswith(";base64"):
            raise ValueError(f"image data URL {value[:40]!r}... is not base64 (data:image/<type>;base64,<data>)")
        return Image.open(io.BytesIO(base64.b64decode(payload)))
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        raise ValueError(
            f"image {value!r} is a URL; the trainer does not fetch images: download them and give their paths (or "
            "the bytes)"
        )
    if isinstance(value, str) and len(value) > 1024 and _BASE64.fullmatch(value[:1024]) and not os.path.isfile(value):
        raise ValueError(
            f"image {value[:40]!r}... is a {len(value)}-character string of base64 characters, not a file: give base64 "
            "data as a data URL (data:image/png;base64,<data>) or as the decoded bytes"
        )
    if isinstance(value, str):
        path = resolve_path(value, image_dir)
        if not os.path.isfile(path):
            where = f" (data.image_dir is {image_dir!r})" if image_dir else " (data.image_dir is not set)"
            shown = path if len(path) <= 300 else f"{path[:300]}..."
            raise FileNotFoundError(f"image file {shown!r} does not exist{where}")
        return Image.open(path)
    raise TypeError(
        f"an image must be a path, bytes, a {{'bytes': ...}} dict or a PIL image, got {type(value).__name__}"
    )


IMAGE_ERRORS = (OSError, TypeError, ValueError, UnidentifiedImageError, Image.DecompressionBombError)
"""What opening or decoding a bad image raises, including an image over PIL's MAX_IMAGE_PIXELS (a tiny PNG can decode
to gigabytes)."""


def check_image(value: ImageValue, image_dir: str | None = None) -> tuple[int, int]:
    """(width, height), upright, after decoding all pixels (not kept), so a truncated file whose header looks fine
    fails here, not when its batch is built."""
    image = open_image(value, image_dir)
    try:
        image.load()
        width, height = image.size
        return (height, width) if _orientation(image) in (5, 6, 7, 8) else (width, height)  # as to_rgb turns it
    finally:
        if image is not value:  # we opened it: release file and pixels now, not at garbage collection
            image.close()


def checked_image_sizes(
    values: list[ImageValue],
    image_dir: str | None,
    cache: dict[str, tuple[int, int]],
    min_pixels: int | None,
    max_pixels: int | None,
) -> list[tuple[int, int]]:
    """Each image's (width, height) after resizing, each decoded in full by `check_image` once per path (`cache`: many
    rows may name one picture); ValueError with `unreadable_image`'s text for the first that cannot be read."""
    sizes = []
    for position, value in enumerate(values):
        path = value if isinstance(value, str) else None
        try:
            size = cache[path] if path in cache else check_image(value, image_dir)
        except IMAGE_ERRORS as error:
            raise ValueError(unreadable_image(position, value, error)) from None
        if path is not None:
            cache[path] = size
        sizes.append(resized_size(*size, min_pixels, max_pixels))
    return sizes


_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
"""Base64's alphabet: over 1,024 characters of it and no such file, a string is data, not a path."""


def unreadable_image(position: int, value: Any, error: Exception) -> str:
    """The error text for image `position`: the cause, prefixed with its path if the cause does not name it."""
    if isinstance(value, dict) and value.get("bytes") is None:
        value = value.get("path")
    reason = str(error).rstrip(". ")
    if isinstance(error, Image.DecompressionBombError):
        reason += " (over PIL.Image.MAX_IMAGE_PIXELS)"
    if isinstance(value, str) and value[:300] not in reason:
        reason = f"{value[:300]!r}{'...' if len(value) > 300 else ''}: {reason}"
    return f"image {position} cannot be read: {reason}"


def load_image(
    value: ImageValue, image_dir: str | None, min_pixels: int | None, max_pixels: int | None
) -> Image.Image:
    """Decode an image fully, as RGB, resized into the pixel budget."""
    image = open_image(value, image_dir)
    image.load()
    return resize_image(image, min_pixels, max_pixels)


def load_video(
    path: str,
    fps: float,
    min_pixels: int | None,
    max_pixels: int | None,
    video_dir: str | None = None,
    max_frames: int = 0,
) -> np.ndarray:
    """Decode a video with PyAV into uint8 RGB frames (num_frames, height, width, 3) at exactly `fps`, resized.
    Frame k is the latest source frame at or before time k / fps (slower sources repeat frames), so the processor can be
    told the rate is `fps`; times count from the first frame's (a stream may start later than 0: a clip cut from a
    recording, an MPEG-TS file), as frame-index readers (qwen_vl_utils, vLLM's) count. Frames are turned upright by
    the stream's display rotation, as players and vLLM's video loader turn them (a phone's portrait clip was seen
    sideways, as its photos were before `to_rgb`). Decoding streams; only kept frames are converted. A video of more
    than `max_frames` frames (0: no limit) at `fps` is a ValueError, raised once that many are held."""
    path = resolve_path(path, video_dir)
    if os.path.isdir(path):
        raise ValueError(
            f"video {path!r} is a folder; give a video file, or the paths of its frames' images as a list (sampled at "
            "data.video_fps)"
        )
    if not os.path.isfile(path):
        where = f" (data.image_dir is {video_dir!r})" if video_dir else " (data.image_dir is not set)"
        raise FileNotFoundError(f"video file {path!r} does not exist{where}")
    return decode_video(path, fps, min_pixels, max_pixels, max_frames)


def decode_video(
    source: str | IO[bytes],
    fps: float,
    min_pixels: int | None,
    max_pixels: int | None,
    max_frames: int = 0,
    name: str | None = None,
) -> np.ndarray:
    """`load_video`'s decoding of a video file or a file object of its bytes (`name` says which in errors), as
    training samples it: the frames at exactly `fps`."""
    import av  # imported here: only video datasets need it
    from av.video.reformatter import VideoReformatter

    if fps <= 0:
        raise ValueError(f"data.video_fps must be positive, got {fps}")
    path = name if name is not None else source if isinstance(source, str) else "<video bytes>"
    # A converter of this call's own, freed as it returns. `frame.to_ndarray(format=...)` keeps one per thread for
    # the thread's life (PyAV's cache), with swscale's worker threads: a fork that runs Python before its exec (the
    # code sandbox's, from a reward thread) frees the other threads' caches in the child, whose swscale waits for
    # worker threads the child does not have, so the sandbox's start hung for ever after a video was read.
    converter = VideoReformatter()
    frames: list[np.ndarray] = []
    held, held_rgb, held_time = None, None, 0.0

    def emit_until(time: float) -> None:
        """Append the held frame for every output time before `time`."""
        nonlocal held_rgb
        while held is not None and len(frames) / fps < time - 1e-6:
            if 0 < max_frames <= len(frames):
                raise ValueError(
                    f"video file {path!r} is longer than data.video_max_frames={max_frames} frames at data.video_fps="
                    f"{fps:g} ({max_frames / fps:g} s); raise data.video_max_frames, lower data.video_fps, or cut it"
                )
            if held_rgb is None:
                width, height = resized_size(held.width, held.height, min_pixels, max_pixels)
                held_rgb = converter.reformat(held, format="rgb24", width=width, height=height).to_ndarray()
                turns = round((getattr(held, "rotation", 0) or 0) / 90) % 4  # counterclockwise quarter turns
                if turns:  # a phone's portrait clip is stored landscape with a display rotation
                    held_rgb = np.ascontiguousarray(np.rot90(held_rgb, turns))
            frames.append(held_rgb)

    with av.open(source) as container:
        if not container.streams.video:
            raise ValueError(f"file {path!r} has no video stream")
        stream = container.streams.video[0]
        frame_duration = 1.0 / float(stream.average_rate) if stream.average_rate else 1.0 / fps
        start = None
        for count, frame in enumerate(container.decode(stream)):
            time = frame.time if frame.time is not None else count * frame_duration
            start = time if start is None else start
            time -= start
            emit_until(time)
            held, held_rgb, held_time = frame, None, time
        if held is None:
            raise ValueError(f"video file {path!r} has no decodable frames")
        emit_until(held_time + frame_duration)  # the last frame lasts one frame duration: at least one output
    return np.stack(frames)


def load_frames(paths: list[str], min_pixels: int | None, max_pixels: int | None, image_dir: str | None) -> np.ndarray:
    """A video given as its frames' image files (EasyR1's and qwen_vl_utils' frame lists), taken as sampled at
    data.video_fps: uint8 RGB (num_frames, height, width, 3), every frame at the first one's size in the budget."""
    first = load_image(paths[0], image_dir, min_pixels, max_pixels)
    frames = [np.asarray(first)]
    for path in paths[1:]:
        image = to_rgb(open_image(path, image_dir))
        frames.append(
            np.asarray(image.resize(first.size, Image.Resampling.BICUBIC) if image.size != first.size else image)
        )
    return np.stack(frames)


def with_frames_at_least(frames: np.ndarray, count: int) -> np.ndarray:
    """`frames` with its last frame repeated up to `count` frames, as Qwen2-VL's video processor pads a video shorter
    than one temporal patch; Qwen3-VL's and GLM-4.1V's refuse it ("t:1 must be larger than temporal_factor:2"), so a
    clip of one frame at data.video_fps (or a video given as one frame) was a bad row for them."""
    if len(frames) >= count:
        return frames
    return np.concatenate([frames, np.repeat(frames[-1:], count - len(frames), axis=0)])


DEFAULT_VIDEO_FPS = 2.0
"""data.video_fps's default: the rate videos are sampled at, and the rate of a row's videos that name none."""
DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS = 262144, 4194304
"""data.min_pixels's and data.max_pixels's defaults: the pixel budget images and video frames are resized into."""


def video_metadata(frames: np.ndarray, fps: float) -> dict[str, Any]:
    """What a processor is told of a video `load_video` sampled at `fps`: all frames are given (frame i at i / fps),
    so it must not resample. Qwen2.5-VL's rope spacing comes from `fps`; Qwen3-VL's prompt timestamps from
    `frames_indices` and `fps`."""
    return {"total_num_frames": len(frames), "fps": fps, "frames_indices": list(range(len(frames)))}


def processor_inputs(
    processor: Any,
    prompt: str,
    images: list[Image.Image] | None = None,
    videos: list[np.ndarray] | None = None,
    video_fps: float = DEFAULT_VIDEO_FPS,
) -> dict[str, Any]:
    """Run a multimodal processor on one rendered prompt and its resized images and videos (no resampling, the real
    frame rate passed). Workers rebuilding pixels from `multi_modal_data` call this too, to get the dataset's tokens."""
    kwargs = {}
    if videos:
        kwargs = {"video_metadata": [video_metadata(video, video_fps) for video in videos], "do_sample_frames": False}
    return processor(
        text=[prompt],
        images=images or None,
        videos=videos or None,
        add_special_tokens=False,
        return_tensors="pt",
        **kwargs,
    )


TEXT_INPUTS = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids")
"""A processor's text outputs; `process_media` keeps the rest, except what the processor names unused (Gemma 4)."""


def process_media(multi_modal_data: dict[str, Any], processor: Any) -> dict[str, "torch.Tensor"]:
    """The processor's model inputs (pixel values, grids, tiles or patch positions) for one row's media.
    Images go through the full processor on a text of placeholders, not its image processor alone, so its own image
    settings (InternVL's tiling) apply as when the prompt was encoded and in vLLM."""
    inputs: dict[str, torch.Tensor] = {}
    dropped = {*TEXT_INPUTS, *getattr(processor, "unused_input_names", ())}
    images = multi_modal_data.get("images")
    if images:
        out = processor(text=[processor.image_token * len(images)], images=list(images), return_tensors="pt")
        inputs.update({key: value for key, value in out.items() if key not in dropped})
    videos = multi_modal_data.get("videos")
    if videos:
        fps = multi_modal_data.get("video_fps") or DEFAULT_VIDEO_FPS  # the frames are the dataset's: no resampling
        metadata = [video_metadata(video, fps) for video in videos]
        out = processor.video_processor(
            videos=list(videos), video_metadata=metadata, do_sample_frames=False, return_tensors="pt"
        )
        if "video_grid_thw" not in out:
            raise NotImplementedError(
                f"Videos are only supported for the Qwen-VL and GLM-4.xV processors (pixel_values_videos and "
                f"video_grid_thw), not {type(processor).__name__}; send the video's frames as images."
            )
        inputs.update(pixel_values_videos=out["pixel_values_videos"], video_grid_thw=out["video_grid_thw"])
    return inputs


def count_image_tokens(processor: Any, sizes: list[tuple[int, int]]) -> list[int] | None:
    """Tokens each (width, height) image's placeholder expands to (with any the processor writes around them), by
    the processor's own arithmetic (as vLLM), without decoding pixels; None if it can't say."""
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
