# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the rollout viewer's page, in headless Chromium (skipped without it, as test_rollout_viewer.py): steps
from 10 on in number order, the reward filter's bound included, the accuracy key chosen, counts that are zero, and
the [0, 1] axis."""

import json
import shutil

import pytest
from repo_files import load_repo_file


@pytest.fixture(scope="module")
def driver():
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip("needs Debian's chromium and chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    yield chrome
    chrome.quit()


def open_page(driver, folder, steps: dict[int, list[dict]]):
    from selenium.webdriver.common.by import By

    folder.mkdir()
    for step, records in steps.items():
        (folder / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert load_repo_file("scripts/rollout_viewer.py").main([str(folder)]) == 0
    driver.get((folder / "index.html").as_uri())
    return lambda selector: driver.find_elements(By.CSS_SELECTOR, selector)


def record(reward: float, **extra) -> dict:
    return {"uid": "u", "prompt": "p", "response": f"r{reward}", "reward": reward, **extra}


def test_steps_from_ten_on_are_in_number_order_and_the_filter_keeps_its_bound(driver, tmp_path):
    from selenium.webdriver.common.by import By

    css = open_page(driver, tmp_path / "run", {step: [record(0.5), record(0.25)] for step in (2, 9, 10)})
    assert [o.get_attribute("value") for o in css("#step-select option")] == ["2", "9", "10"]
    driver.find_element(By.ID, "min-reward").send_keys("0.5")
    assert [r.get_attribute("data-reward") for r in css(".response")] == ["0.5"]  # 0.5 >= 0.5: shown


def test_the_accuracy_key_is_accuracy_itself_and_zero_counts_are_not_shown(driver, tmp_path):
    env = {"turns": 2, "tool_calls": 1, "tool_errors": 0, "cut_tool_messages": 0}
    scores = {"acc_strict": 0.0, "accuracy": 1.0}
    css = open_page(driver, tmp_path / "run", {1: [record(1.0, scores=scores, env=env)]})
    assert "mean accuracy 1" in css("#step-summary")[0].text
    assert css(".env-counts")[0].text == "turns 2 · tool calls 1"


def test_rewards_in_zero_to_one_get_the_whole_unit_axis(driver, tmp_path):
    css = open_page(driver, tmp_path / "run", {1: [record(0.25)], 2: [record(0.5)]})
    assert [label.text for label in css("#chart text.axis-label")][:5] == ["0", "0.25", "0.5", "0.75", "1"]
