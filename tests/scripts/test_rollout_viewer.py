# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""trainer.rollout_data_dir and scripts/rollout_viewer.py: what a dumped step holds on disk, and the viewer's page
clicked through in a real headless Chromium (Debian's chromium and chromium-driver packages).

VERL_UPDATE_SCREENSHOTS=1 also rewrites docs/images/rollout_viewer.png, the screenshot in the README.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest
import torch
from PIL import Image, ImageDraw
from repo_files import load_repo_file

from verl.models.tiny_models import build_tokenizer
from verl.protocol import DataProto
from verl.trainer.rollout_dump import dump_rollouts


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "rollout_viewer.py")
SCREENSHOT = os.path.join(REPO, "docs", "images", "rollout_viewer.png")
COLORS = ["#cf222e", "#0969da", "#1a7f37", "#bf8700", "#8250df"]


def load_viewer():
    return load_repo_file("scripts/rollout_viewer.py")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def squares_picture(count: int, seed: int) -> Image.Image:
    """A 56x56 picture of `count` coloured squares, like the CPU quickstart's task."""
    rng = random.Random(seed)
    image = Image.new("RGB", (56, 56), "white")
    draw = ImageDraw.Draw(image)
    for i in range(count):
        x, y = (i % 2) * 28 + rng.randint(2, 8), (i // 2) * 28 + rng.randint(2, 8)
        draw.rectangle([x, y, x + 14, y + 14], fill=rng.choice(COLORS))
    return image


def make_batch(tokenizer, groups: list[dict], prompt_length: int = 64, response_length: int = 32) -> DataProto:
    """A rollout batch as the trainer has it after the advantage phase.

    Each group: {"uid", "question", "answer", "image" (or None), "responses": [(text, {"overall": .., ...})]};
    advantages are GRPO's, (reward - group mean) / (group std + 1e-6) on every valid token.
    """
    prompts, responses, response_masks, scores, advantages = [], [], [], [], []
    non_tensors: dict[str, list] = {"uid": [], "ground_truth": [], "multi_modal_data": []}
    reward_keys = list(groups[0]["responses"][0][1])
    for key in reward_keys:
        non_tensors[f"reward/{key}"] = []
    for group in groups:
        content = [{"type": "text", "text": group["question"]}]
        if group["image"] is not None:
            content.insert(0, {"type": "image"})
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        prompt_ids = tokenizer.encode(text, add_special_tokens=False)[-prompt_length:]
        rewards = torch.tensor([values["overall"] for _, values in group["responses"]])
        normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for (response, values), advantage in zip(group["responses"], normalized.tolist()):
            ids = tokenizer.encode(response + "<|im_end|>", add_special_tokens=False)[:response_length]
            pad = response_length - len(ids)
            prompts.append([tokenizer.pad_token_id] * (prompt_length - len(prompt_ids)) + prompt_ids)
            responses.append(ids + [tokenizer.pad_token_id] * pad)
            response_masks.append([1] * len(ids) + [0] * pad)
            score = [0.0] * response_length
            score[len(ids) - 1] = values["overall"]
            scores.append(score)
            advantages.append([advantage] * len(ids) + [0.0] * pad)
            non_tensors["uid"].append(group["uid"])
            non_tensors["ground_truth"].append(group["answer"])
            non_tensors["multi_modal_data"].append(
                {"images": [group["image"]], "videos": []} if group["image"] is not None else None
            )
            for key in reward_keys:
                non_tensors[f"reward/{key}"].append(values[key])
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    tensors = {
        "prompts": prompts_t,
        "responses": responses_t,
        "input_ids": torch.cat([prompts_t, responses_t], dim=-1),
        "attention_mask": torch.cat([(prompts_t != tokenizer.pad_token_id).long(), torch.tensor(response_masks)], -1),
        "response_mask": torch.tensor(response_masks),
        "token_level_scores": torch.tensor(scores),
        "advantages": torch.tensor(advantages),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def test_dump_writes_one_record_per_sample_and_each_prompt_image_once(tokenizer, tmp_path):
    red = Image.new("RGB", (8, 6), (255, 0, 0))
    groups = [
        {
            "uid": "7-0",
            "question": "How many squares are in the picture?",
            "answer": "1",
            "image": red,
            "responses": [
                ("\\boxed{1}", {"overall": 1.0, "accuracy": 1.0}),
                ("\\boxed{3}", {"overall": 0.0, "accuracy": 0.0}),
            ],
        },
        {
            "uid": "7-1",
            "question": "What is 2 + 3?",
            "answer": "5",
            "image": None,
            "responses": [
                ("The answer is 5.", {"overall": 0.9, "accuracy": 1.0}),
                ("6", {"overall": 0.1, "accuracy": 0.0}),
            ],
        },
    ]
    batch = make_batch(tokenizer, groups)
    batch.batch["advantages"][3, :2] = torch.tensor([1.0, 2.0])  # per-token advantages (gae): the mean is written
    path = dump_rollouts(batch, 7, str(tmp_path), tokenizer)
    assert path == str(tmp_path / "step_7.jsonl")
    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [r["uid"] for r in records] == ["7-0", "7-0", "7-1", "7-1"]
    first = records[0]
    assert first["step"] == 7 and first["ground_truth"] == "1"
    assert "How many squares are in the picture?" in first["prompt"] and first["prompt"].rstrip().endswith("assistant")
    assert "<|" not in first["prompt"]  # chat markers, image placeholders and padding are skipped
    assert [r["response"] for r in records] == ["\\boxed{1}", "\\boxed{3}", "The answer is 5.", "6"]
    assert [r["reward"] for r in records] == pytest.approx([1.0, 0.0, 0.9, 0.1])
    assert records[2]["scores"] == pytest.approx({"overall": 0.9, "accuracy": 1.0})
    assert records[0]["advantage"] == pytest.approx(0.7071, abs=1e-3)
    length = records[3]["response_length"]
    assert length == len(tokenizer.encode("6<|im_end|>", add_special_tokens=False))
    assert records[3]["advantage"] == pytest.approx((1.0 + 2.0 + (length - 2) * -0.7071) / length, abs=1e-3)
    assert records[0]["images"] == records[1]["images"] == ["images/step_7/g0000_0.png"]
    assert records[2]["images"] == records[3]["images"] == []
    with Image.open(tmp_path / "images" / "step_7" / "g0000_0.png") as image:
        assert image.size == (8, 6) and image.convert("RGB").getpixel((3, 3)) == (255, 0, 0)
    assert sorted(os.listdir(tmp_path / "images" / "step_7")) == ["g0000_0.png"]
    assert not [name for _, _, names in os.walk(tmp_path) for name in names if name.endswith(".tmp")]


def test_dump_writes_an_environments_images_for_each_sample(tokenizer, tmp_path):
    """Multi-turn episodes whose environment showed pictures: the prompt's image once, each episode's own after it."""
    red, green, blue = (Image.new("RGB", (4, 4), color) for color in ((255, 0, 0), (0, 255, 0), (0, 0, 255)))
    group = {"uid": "3-0", "question": "Count.", "answer": "1", "image": red}
    batch = make_batch(tokenizer, [{**group, "responses": [("1", {"overall": 1.0}), ("2", {"overall": 0.0})]}])
    batch.non_tensor_batch["multi_modal_data"][0] = {"images": [red, green], "videos": []}
    batch.non_tensor_batch["multi_modal_data"][1] = {"images": [red, blue], "videos": []}
    records = [json.loads(line) for line in open(dump_rollouts(batch, 3, str(tmp_path), tokenizer))]
    assert records[0]["images"] == ["images/step_3/g0000_0.png", "images/step_3/g0000_1.png"]
    assert records[1]["images"] == ["images/step_3/g0000_0.png", "images/step_3/g0000_2.png"]
    with Image.open(tmp_path / "images" / "step_3" / "g0000_2.png") as image:
        assert image.convert("RGB").getpixel((1, 1)) == (0, 0, 255)


def sample_run(tokenizer, rollout_dir: str, steps: int = 3, prompts: int = 4, n: int = 4) -> None:
    """A run that learns to count squares: more right answers at every step."""
    rng = random.Random(0)
    for step in range(1, steps + 1):
        groups = []
        for i in range(prompts):
            count = rng.randint(1, 4)
            responses = []
            for _ in range(n):
                right = rng.random() < 0.9 - 0.6 * 0.7 ** (step - 1)
                guess = count if right else rng.choice([c for c in range(1, 5) if c != count])
                formatted = rng.random() < 0.5 + 0.15 * step
                text = f"<think>I count {guess} squares.</think> \\boxed{{{guess}}}" if formatted else f"{guess}"
                overall = float(right) * 0.9 + 0.1 * float(formatted)
                responses.append((text, {"overall": overall, "accuracy": float(right), "format": float(formatted)}))
            groups.append(
                {
                    "uid": f"{step}-{i}",
                    "question": "How many squares are in the picture? Answer with \\boxed{n}.",
                    "answer": str(count),
                    "image": squares_picture(count, seed=step * 100 + i),
                    "responses": responses,
                }
            )
        dump_rollouts(make_batch(tokenizer, groups), step, rollout_dir, tokenizer)


def test_viewer_cli(tokenizer, tmp_path, capsys):
    proc = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "rollout_data_dir" in proc.stdout
    viewer = load_viewer()
    assert viewer.main([str(tmp_path)]) == 2
    assert "holds no step_N.jsonl files" in capsys.readouterr().err
    sample_run(tokenizer, str(tmp_path), steps=2, prompts=2, n=2)
    os.remove(tmp_path / "images" / "step_2" / "g0001_0.png")
    assert viewer.main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "image 'images/step_2/g0001_0.png' is missing" in captured.err
    assert "8 responses over 2 steps, 3 images" in captured.out
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "<link" not in page  # nothing to fetch
    assert page.count("</script>") == 2  # the embedded data cannot close its script element


def chromium_driver(width: int = 1280, height: int = 900):
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip(
            "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver); .ci/run installs "
            "them when it runs as root"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


def test_viewer_page_in_headless_chromium(tokenizer, tmp_path):
    from selenium.webdriver.common.by import By

    rollout_dir = tmp_path / "rollouts"
    sample_run(tokenizer, str(rollout_dir))
    output = tmp_path / "viewer.html"
    assert load_viewer().main([str(rollout_dir), "-o", str(output), "--title", "count squares (GRPO)"]) == 0
    driver = chromium_driver()
    try:
        driver.get(output.as_uri())
        css = lambda selector: driver.find_elements(By.CSS_SELECTOR, selector)  # noqa: E731

        def rewards_by_group() -> list[list[float]]:
            return [
                [float(r.get_attribute("data-reward")) for r in group.find_elements(By.CSS_SELECTOR, ".response")]
                for group in css(".group")
            ]

        # the first step: its 4 prompts, each with its picture beside its 4 responses, best first
        assert driver.find_element(By.ID, "step-select").get_attribute("value") == "1"
        assert [g.get_attribute("data-uid") for g in css(".group")] == ["1-0", "1-1", "1-2", "1-3"]
        groups = rewards_by_group()
        assert [len(rewards) for rewards in groups] == [4, 4, 4, 4]
        assert all(rewards == sorted(rewards, reverse=True) for rewards in groups)
        assert len(css(".group .prompt-image")) == 4
        assert driver.execute_script(
            "return [...document.querySelectorAll('.prompt-image')].every(i => i.complete && i.naturalWidth === 56)"
        )
        assert "How many squares" in css(".group .prompt")[0].text
        assert css(".response .reward")[0].text.startswith("reward ")
        assert {s.get_attribute("data-key") for s in css(".group .score")} == {"accuracy", "format"}
        assert driver.find_element(By.ID, "prev-step").get_attribute("disabled") is not None
        assert driver.find_element(By.ID, "shown-count").text == "16 of 16 responses, 4 of 4 prompts"

        # next step: the select, the groups and the chart marker follow
        marker_x = driver.find_element(By.ID, "chart-marker").get_attribute("x1")
        driver.find_element(By.ID, "next-step").click()
        assert driver.find_element(By.ID, "step-select").get_attribute("value") == "2"
        assert [g.get_attribute("data-uid") for g in css(".group")] == ["2-0", "2-1", "2-2", "2-3"]
        assert driver.find_element(By.ID, "chart-marker").get_attribute("x1") != marker_x
        assert "step 2" in driver.find_element(By.ID, "step-summary").text

        # the reward filter hides the responses below it
        before = sum(len(rewards) for rewards in rewards_by_group())
        driver.find_element(By.ID, "min-reward").send_keys("0.5")
        after = rewards_by_group()
        assert 0 < sum(len(rewards) for rewards in after) < before
        assert all(reward >= 0.5 for rewards in after for reward in rewards)
        driver.find_element(By.ID, "min-reward").clear()
        driver.execute_script("document.getElementById('min-reward').dispatchEvent(new Event('input'))")
        assert sum(len(rewards) for rewards in rewards_by_group()) == before
        driver.find_element(By.ID, "text-filter").send_keys("I count 3")  # in responses (or prompts)
        texts = [r.text for r in css(".response .response-text")]
        assert 0 < len(texts) < before and all("I count 3" in text for text in texts)
        driver.find_element(By.ID, "text-filter").clear()
        driver.execute_script("document.getElementById('text-filter').dispatchEvent(new Event('input'))")

        # the chart: one point per step for the mean reward and the accuracy, a line through them
        assert len(css("#chart circle.point-reward")) == 3 and len(css("#chart circle.point-accuracy")) == 3
        path = driver.find_element(By.CSS_SELECTOR, "#chart path.series-reward").get_attribute("d")
        assert path.count("M") == 1 and path.count("L") == 2
        css("#chart circle.point-accuracy")[2].click()  # a point selects its step (accuracy's are drawn on top)
        assert driver.find_element(By.ID, "step-select").get_attribute("value") == "3"
        assert driver.find_element(By.ID, "next-step").get_attribute("disabled") is not None
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element(By.ID, "step-select")).select_by_value("1")
        assert [g.get_attribute("data-uid") for g in css(".group")][0] == "1-0"

        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
        if os.environ.get("VERL_UPDATE_SCREENSHOTS") == "1":
            save_screenshot(driver, tokenizer, tmp_path / "screenshot")
    finally:
        driver.quit()


def save_screenshot(driver, tokenizer, work_dir) -> None:
    """docs/images/rollout_viewer.png: a longer run, a 1280x900 viewport, a step in the middle."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sample_run(tokenizer, str(work_dir / "rollouts"), steps=10, prompts=6)
    page = work_dir / "viewer.html"
    assert load_viewer().main([str(work_dir / "rollouts"), "-o", str(page), "--title", "count squares (GRPO)"]) == 0
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    )
    driver.get(page.as_uri())
    Select(driver.find_element(By.ID, "step-select")).select_by_value("6")
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(SCREENSHOT)
