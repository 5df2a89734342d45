# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.data.multimodal: the pixel budget met by every size, content parts, image modes and orientation,
paths outside data.image_dir, video frames at the rate asked for, and what a processor is told (recording fakes)."""

import io
import math

import numpy as np
import pytest
from media_files import write_video
from PIL import Image

from verl.data.multimodal import (
    check_image,
    checked_image_sizes,
    content_parts,
    count_image_tokens,
    load_frames,
    load_video,
    marker_text,
    open_image,
    path_outside,
    process_media,
    processor_inputs,
    resized_size,
    resolve_path,
    to_rgb,
    video_metadata,
)


def test_every_size_meets_the_pixel_budget_with_its_aspect_kept():
    for width in range(37, 900, 29):
        for height in range(23, 700, 31):
            small_w, small_h = resized_size(width, height, None, 20000)
            assert small_w * small_h <= 20000
            if width * height > 20000:
                assert abs(small_w / small_h - width / height) <= width / height / min(small_w, small_h) + 0.01
            big_w, big_h = resized_size(width, height, 300000, None)
            assert big_w * big_h >= 300000 if width * height < 300000 else (big_w, big_h) == (width, height)
    assert resized_size(10000, 2, None, 100)[1] == 1  # a strip keeps a row of pixels


def test_content_parts_hold_no_empty_text_and_name_their_kind():
    assert content_parts("<image>What is<video>", ["<image>", "<video>"]) == [
        {"type": "image"},
        {"type": "text", "text": "What is"},
        {"type": "video"},
    ]


def test_a_typed_part_that_holds_its_own_picture_is_refused():
    assert marker_text([{"type": "image"}, {"type": "text", "text": "hi"}]) == "<image>hi"
    with pytest.raises(ValueError, match="content part 0 holds its image itself"):
        marker_text([{"type": "image", "image": "a.png"}])


def test_a_big_endian_16_bit_scan_is_scaled_not_clipped():
    image = Image.frombytes("I;16B", (2, 1), bytes([0x80, 0x00, 0x01, 0x00]))  # 32768 and 256 of 65535
    assert image.mode == "I;16B"
    assert list(to_rgb(image).getdata()) == [(128, 128, 128), (1, 1, 1)]


def test_transparent_palette_and_grey_alpha_images_are_over_white():
    palette = Image.new("P", (2, 1), 0)
    palette.putpalette([0, 0, 0] * 256)
    palette.info["transparency"] = 0
    assert to_rgb(palette).getpixel((0, 0)) == (255, 255, 255)
    grey_alpha = Image.new("LA", (2, 1), (0, 0))
    assert to_rgb(grey_alpha).getpixel((0, 0)) == (255, 255, 255)


def test_a_path_under_home_is_not_joined_to_the_image_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_path("~/a.png", "/data/images") == str(tmp_path / "a.png")


def test_paths_outside_the_image_dir(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img2").mkdir()
    root = str(tmp_path / "img")
    assert path_outside("../img2/a.png", root) == "../img2/a.png"  # a sibling folder whose name starts the same
    assert path_outside("sub/a.png", root) is None
    assert path_outside({"bytes": b"png", "path": "../../etc/passwd"}, root) is None  # the bytes are read
    other = tmp_path / "other" / "blobs"  # a "blobs" folder beside a parent that is not a snapshots folder
    other.mkdir(parents=True)
    (tmp_path / "other" / "x" / "img").mkdir(parents=True)
    assert path_outside("../../blobs/a.png", str(tmp_path / "other" / "x" / "img")) == "../../blobs/a.png"


def png_bytes(size: tuple[int, int], color=(255, 0, 0)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_image_dict_reads_its_bytes_before_its_path(tmp_path):
    image = open_image({"bytes": png_bytes((3, 2)), "path": "not/there.png"})
    assert image.size == (3, 2)


def test_a_data_url_that_is_not_base64_is_refused():
    with pytest.raises(ValueError, match="is not base64"):
        open_image("data:image/png,rawdata")


def test_a_photo_turned_by_its_exif_is_measured_upright():
    image = Image.new("RGB", (6, 4))
    exif = image.getexif()
    exif[0x0112] = 6  # rotate 90 degrees: shown 4 wide, 6 high
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    assert check_image(buffer.getvalue()) == (4, 6)


def test_images_given_as_bytes_are_each_measured():
    cache: dict = {}
    sizes = checked_image_sizes([png_bytes((4, 2)), png_bytes((8, 8))], None, cache, None, None)
    assert sizes == [(4, 2), (8, 8)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """8 frames at 4 frames per second (2 s); frame i is gray 15 * i."""
    return write_video(str(tmp_path_factory.mktemp("video") / "clip.mp4"), num_frames=8, rate=4)


def test_a_video_is_sampled_at_the_rate_asked_for_to_its_end(clip):
    frames = load_video(clip, 2.0, None, None)
    assert frames.shape[0] == 4  # 2 s at 2 frames per second
    assert [round(frame.mean() / 15) for frame in frames] == [0, 2, 4, 6]
    assert load_video(clip, 0.5, None, None).shape[0] == 1  # shorter than one output frame: the first frame
    assert load_video(clip, 2.0, None, None, max_frames=4).shape[0] == 4
    with pytest.raises(ValueError, match="longer than data.video_max_frames=3 frames"):
        load_video(clip, 2.0, None, None, max_frames=3)


def test_a_clip_whose_stream_starts_late_is_read_from_its_first_frame(tmp_path):
    """A clip whose first frame is stamped 2 s (cut from a longer recording): the 2 s before it came out as copies of
    the first frame (8 more frames at 4 fps, and Qwen3-VL's timestamps 2 s late), or the clip was over
    data.video_max_frames."""
    late = write_video(str(tmp_path / "late.mp4"), num_frames=8, rate=4, start_frame=8)
    frames = load_video(late, 4.0, None, None, max_frames=8)
    assert [round(frame.mean() / 15) for frame in frames] == list(range(8))


@pytest.mark.parametrize("rotation", [90, 180, -90])
def test_a_clip_with_a_display_rotation_is_read_upright_as_vllm_reads_it(tmp_path, rotation):
    """A phone's portrait clip is stored landscape with a display rotation: its frames were read sideways, and the
    model trained on them so, while vLLM's video loader (verl.serve's `video_url`) and every player turn them."""
    import av
    from vllm.multimodal.video import VIDEO_LOADER_REGISTRY

    pixels = np.zeros((48, 64, 3), np.uint8)
    pixels[:24, :32] = 255  # the top-left quarter white: any turn or mirror shows
    path = str(tmp_path / f"turned{rotation}.mp4")
    with av.open(path, "w") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.set_display_rotation(rotation)
        for _ in range(2):
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    theirs, _ = VIDEO_LOADER_REGISTRY.load("opencv").load_bytes(open(path, "rb").read(), num_frames=-1)
    ours = load_video(path, 4.0, None, None)
    assert ours.shape == theirs.shape == ((2, 48, 64, 3) if rotation == 180 else (2, 64, 48, 3))
    assert ((ours > 127) == (theirs > 127)).mean() > 0.98  # mpeg4 blurs the quarter's edges a little


def test_a_rate_of_zero_and_a_missing_video_are_named(clip, tmp_path):
    with pytest.raises(ValueError, match="data.video_fps must be positive, got 0"):
        load_video(clip, 0, None, None)
    with pytest.raises(FileNotFoundError, match=r"does not exist \(data.image_dir is '.*'\)"):
        load_video("missing.mp4", 2.0, None, None, video_dir=str(tmp_path))


def test_a_folder_of_frames_given_as_a_video_is_named_a_folder(tmp_path):
    """A video given as the folder of its frames was "video file ... does not exist", of a folder that does."""
    (tmp_path / "frames").mkdir()
    with pytest.raises(ValueError, match=r"video '.*frames' is a folder; give a video file, or the paths of its fr"):
        load_video("frames", 2.0, None, None, video_dir=str(tmp_path))


def test_frames_of_other_sizes_take_the_first_ones_size(tmp_path):
    for name, size in (("a.png", (8, 6)), ("b.png", (16, 12)), ("c.png", (4, 4))):
        Image.new("RGB", size, (10, 20, 30)).save(tmp_path / name)
    frames = load_frames(["a.png", "b.png", "c.png"], None, None, str(tmp_path))
    assert frames.shape == (3, 6, 8, 3) and frames.dtype == np.uint8


def test_a_processor_is_told_every_frame_from_zero_at_the_rows_rate():
    assert video_metadata(np.zeros((3, 2, 2, 3), np.uint8), 4.0) == {
        "total_num_frames": 3,
        "fps": 4.0,
        "frames_indices": [0, 1, 2],
    }
    seen = {}

    class VideoProcessor:
        def __call__(self, videos, video_metadata, do_sample_frames, return_tensors):
            seen.update(metadata=video_metadata, sample=do_sample_frames)
            return {"pixel_values_videos": "pixels", "video_grid_thw": "grid"}

    class Processor:
        video_processor = VideoProcessor()
        image_token = "<image>"

        def __call__(self, **kwargs):
            seen.update(kwargs)
            return {"input_ids": [1]}

    video = np.zeros((2, 2, 2, 3), np.uint8)
    assert process_media({"videos": [video], "video_fps": 1.0}, Processor()) == {
        "pixel_values_videos": "pixels",
        "video_grid_thw": "grid",
    }
    assert seen["metadata"][0]["fps"] == 1.0 and seen["sample"] is False
    processor_inputs(Processor(), "<video>", videos=[video], video_fps=3.0)
    assert seen["do_sample_frames"] is False and seen["video_metadata"][0]["fps"] == 3.0


def test_image_tokens_are_counted_for_height_by_width():
    asked = []

    class Processor:
        def _get_num_multimodal_tokens(self, image_sizes):
            asked.extend(image_sizes)
            return type("Data", (), {"num_image_tokens": [math.prod(size) // 4 for size in image_sizes]})()

    assert count_image_tokens(Processor(), [(8, 4)]) == [8]
    assert asked == [(4, 8)]  # (height, width), as the processors take them
