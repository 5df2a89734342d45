# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Images whose header is fine but whose pixels are not (a truncated download, flipped bytes): found by the scan
when the data loader is built, naming the file and the row, or skipped with data.skip_bad_rows=true, also when a
row goes bad after the scan."""

import json
import logging

import numpy as np
import pytest
from PIL import Image

from verl.data import multimodal
from verl.data.dataset import DatasetRowError, RLHFDataset
from verl.data.tokenizer import get_processor, get_tokenizer
from verl.models.tiny_models import get_or_build_tiny_model
from verl.trainer.config import DataConfig
from verl.trainer.data_loader import create_dataloader


PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    path = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path_factory.mktemp("tiny_models")))
    return get_tokenizer(path), get_processor(path)


def _noise_png(path) -> bytes:
    """A real PNG of random pixels (so its compressed data is long), written to `path`; returns its bytes."""
    pixels = np.random.default_rng(0).integers(0, 255, (112, 112, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path.read_bytes()


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _rows_file(tmp_path, images: list[str], name: str = "train.jsonl") -> str:
    path = tmp_path / name
    rows = [{"prompt": f"<image> Picture {i}.", "answer": str(i), "images": [name]} for i, name in enumerate(images)]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


def _config(tmp_path, train_files: str, **overrides) -> DataConfig:
    values = dict(
        train_files=train_files,
        image_dir=str(tmp_path),
        rollout_batch_size=2,
        max_prompt_length=64,
        dataloader_num_workers=0,
        shuffle=False,
        **PIXELS,
    )
    return DataConfig(**{**values, **overrides})


def test_a_truncated_or_corrupt_png_is_found_by_the_scan_naming_file_row_and_image(tmp_path, vl, caplog):
    tokenizer, processor = vl
    for name in ("a.png", "b.png", "c.png"):
        _noise_png(tmp_path / name)
    _truncate(tmp_path / "b.png")
    data = bytearray((tmp_path / "c.png").read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # flipped bytes inside the pixel data, header intact
    (tmp_path / "c.png").write_bytes(bytes(data))
    assert Image.open(tmp_path / "b.png").size == (112, 112)  # the header alone looks fine
    train = _rows_file(tmp_path, ["a.png", "b.png", "a.png", "a.png", "c.png"])
    with pytest.raises(DatasetRowError) as excinfo:
        create_dataloader(_config(tmp_path, train), tokenizer, processor)
    message = str(excinfo.value)
    assert f"file '{train}', row 1, key 'images': image 0 cannot be read: 'b.png': image file is truncated" in message
    assert message.endswith("fix the row, or set data.skip_bad_rows=true to skip bad rows.")
    corrupt = _rows_file(tmp_path, ["a.png", "a.png", "c.png"], name="corrupt.jsonl")
    with pytest.raises(DatasetRowError, match=r"row 2, key 'images': image 0 cannot be read: 'c.png': broken data"):
        RLHFDataset(corrupt, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    # skip_bad_rows: both bad rows are skipped at the scan, and every batch is full
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        loader, _ = create_dataloader(_config(tmp_path, train, skip_bad_rows=True), tokenizer, processor)
    assert f"Skipped 2 bad row(s) of file '{train}' (data.skip_bad_rows=true)" in caplog.text
    assert "set data.skip_bad_rows=true" not in caplog.text  # no advice to do what is already done
    assert [list(batch.non_tensor_batch["ground_truth"]) for batch in loader] == [["0", "2"]]


def test_a_row_that_goes_bad_after_the_scan_is_skipped_with_skip_bad_rows(tmp_path, vl, caplog):
    tokenizer, processor = vl
    for name in ("a.png", "b.png"):
        _noise_png(tmp_path / name)
    train = _rows_file(tmp_path, ["a.png", "b.png", "a.png", "a.png"])
    strict, _ = create_dataloader(_config(tmp_path, train), tokenizer, processor)
    skipping, _ = create_dataloader(_config(tmp_path, train, skip_bad_rows=True), tokenizer, processor)
    _truncate(tmp_path / "b.png")  # e.g. a file rewritten on a network disk while the run is going
    with pytest.raises(DatasetRowError, match=r"row 1, key 'images': image 0 cannot be read: 'b.png': .*truncated"):
        list(strict)
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        batches = [list(batch.non_tensor_batch["ground_truth"]) for batch in skipping]
    assert batches == [["0", "2"], ["2", "3"]]  # the next good row takes the bad one's place: batches stay full
    assert "Skipped a bad row of file" in caplog.text and "row 1, key 'images'" in caplog.text
    assert "set data.skip_bad_rows=true to skip" not in caplog.text
    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(DatasetRowError, match="Every row of .* failed when loaded"):
        skipping.dataset[0]


def test_an_image_that_many_rows_share_is_decoded_once(tmp_path, vl, monkeypatch):
    tokenizer, processor = vl
    _noise_png(tmp_path / "a.png")
    _noise_png(tmp_path / "b.png")
    decoded = []
    check_image = multimodal.check_image

    def counting(value, image_dir=None):
        decoded.append(value)
        return check_image(value, image_dir)

    monkeypatch.setattr(multimodal, "check_image", counting)
    rows = _rows_file(tmp_path, ["a.png", "b.png"] * 3)
    assert len(RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)) == 6
    assert sorted(decoded) == ["a.png", "b.png"]


def test_a_decompression_bomb_and_an_extreme_aspect_ratio_are_named_or_skipped(tmp_path, vl, caplog):
    """Both common in scraped data: a 20000x20000 PNG of a few KB (over PIL's pixel limit: raised as
    DecompressionBombError, no OSError) and a 4000x8 banner (Qwen-VL refuses an aspect ratio of 200 or more)."""
    tokenizer, processor = vl
    _noise_png(tmp_path / "a.png")
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")
    Image.new("RGB", (4000, 8)).save(tmp_path / "banner.png")
    assert (tmp_path / "bomb.png").stat().st_size < 100_000
    train = _rows_file(tmp_path, ["a.png", "bomb.png", "a.png", "banner.png", "a.png"])
    with pytest.raises(DatasetRowError) as excinfo:
        RLHFDataset(train, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    assert f"file '{train}', row 1, key 'images': image 0 cannot be read: 'bomb.png': " in str(excinfo.value)
    assert "PIL.Image.MAX_IMAGE_PIXELS" in str(excinfo.value)
    banner = _rows_file(tmp_path, ["a.png", "banner.png"], name="banner.jsonl")
    with pytest.raises(DatasetRowError, match=r"row 1, key 'images': the processor refuses image 0 .*aspect ratio"):
        RLHFDataset(banner, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    with caplog.at_level(logging.WARNING, logger="verl.data.dataset"):
        loader, _ = create_dataloader(_config(tmp_path, train, skip_bad_rows=True), tokenizer, processor)
    assert f"Skipped 2 bad row(s) of file '{train}' (data.skip_bad_rows=true)" in caplog.text
    assert [list(batch.non_tensor_batch["ground_truth"]) for batch in loader] == [["0", "2"]]


def test_a_base64_data_url_reads_as_its_bytes_and_a_web_url_is_named(tmp_path, vl):
    """OpenAI's image_url layout: a data URL gives the same picture (and prompt ids) as the file; an http(s) URL is
    a row error saying the trainer does not fetch images."""
    import base64

    tokenizer, processor = vl
    png = _noise_png(tmp_path / "a.png")
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    rows = [{"prompt": "<image> Picture.", "answer": "0", "images": [image]} for image in ("a.png", url)]
    dataset = RLHFDataset(rows, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    from_file, from_url = dataset[0], dataset[1]
    assert from_file["raw_prompt_ids"] == from_url["raw_prompt_ids"]
    assert np.array_equal(
        np.asarray(from_file["multi_modal_data"]["images"][0]), np.asarray(from_url["multi_modal_data"]["images"][0])
    )
    web = [{"prompt": "<image> Picture.", "answer": "0", "images": ["https://example.com/a.png"]}]
    with pytest.raises(DatasetRowError, match=r"row 0, key 'images': image 0 .*is a URL; the trainer does not fetch"):
        RLHFDataset(web, tokenizer, processor, **PIXELS)
    raw = [{"prompt": "<image> Picture.", "answer": "0", "images": [url.partition(",")[2]]}]  # no data: prefix
    with pytest.raises(DatasetRowError, match=r"image 0 cannot be read: 'iVBOR.*string of base64 char") as error:
        RLHFDataset(raw, tokenizer, processor, image_dir=str(tmp_path), **PIXELS)
    assert len(str(error.value)) < 1000  # the message names the data, it does not print it (it printed it all)


def test_transparent_and_16_bit_images_read_as_vllm_reads_them():
    """A plain convert("RGB") made a transparent background black (black line art on it all black) and clipped a
    16-bit grey scan to nearly all white; vLLM and qwen_vl_utils put transparency on white."""
    art = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    art.putpixel((3, 3), (0, 0, 0, 255))
    rgb = np.asarray(multimodal.resize_image(art, None, None))
    assert rgb[0, 0].tolist() == [255, 255, 255] and rgb[3, 3].tolist() == [0, 0, 0]
    scan = Image.fromarray(np.array([[0, 32768], [65535, 16384]], dtype=np.uint16))
    assert scan.mode.startswith("I;16")
    grey = np.asarray(multimodal.resize_image(scan, None, None))[..., 0]
    assert grey.tolist() == [[0, 128], [255, 64]]
    palette = Image.new("P", (4, 4), 0)
    palette.info["transparency"] = 0
    assert np.asarray(multimodal.to_rgb(palette))[0, 0].tolist() == [255, 255, 255]


def test_a_rotated_photo_reaches_the_model_upright_as_vllm_turns_it(tmp_path):
    """A phone's JPEG stores its pixels sideways with an EXIF orientation; vLLM turns every image it is given upright,
    the processors do not: the engine sampled from the upright picture while the actor scored the same tokens
    against the sideways one (a grid of [1, 12, 18] against [1, 18, 12], no error). Sizes, pixels and the engine's
    view now agree."""
    from vllm.multimodal.image import normalize_image

    pixels = np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6  # turn 90 degrees clockwise to show
    path = tmp_path / "photo.jpg"
    Image.fromarray(pixels).save(path, exif=exif.tobytes())
    assert multimodal.check_image(str(path)) == (60, 80)
    assert multimodal.checked_image_sizes([str(path)], None, {}, None, None) == [(60, 80)]
    image = multimodal.load_image(str(path), None, None, None)
    with Image.open(path) as stored:
        engine_view = normalize_image(stored).convert("RGB")
        assert stored.size == (80, 60)
    assert image.size == engine_view.size == (60, 80)
    assert np.array_equal(np.asarray(image), np.asarray(engine_view))
    assert multimodal.to_rgb(image) is image  # already upright: nothing is turned twice
