# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""trainer.rollout_data_dir and scripts/rollout_viewer.py: what a dumped step holds on disk, and the viewer's page
clicked through in a real headless Chromium (Debian's chromium and chromium-driver packages).

VERL_UPDATE_SCREENSHOTS=1 also rewrites docs/images/rollout_viewer.png, the screenshot in the README.
"""

import glob
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw
from repo_files import load_repo_file

from verl.data.rollout_dump import dump_rollouts
from verl.models.tiny_models import build_tokenizer
from verl.protocol import DataProto, to_object_array


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


def test_dump_writes_one_record_per_sample_and_each_prompt_image_once(tokenizer, tmp_path, caplog):
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
    (tmp_path / "a_file").write_text("")
    with caplog.at_level(logging.WARNING, logger="verl.data.rollout_dump"):  # e.g. a full disk: training goes on
        assert dump_rollouts(batch, 7, str(tmp_path / "a_file" / "rollouts"), tokenizer) is None
    assert "Could not write step 7's rollouts to " in caplog.text and "training goes on" in caplog.text
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


CALCULATOR = os.path.join(REPO, "examples", "envs", "calculator.py")


def tool_episodes(tokenizer, turns: list[list[str]], max_turns: int = 2):
    """Episodes of the calculator's Multiplier environment as the request loop's episode hooks play them (the
    TurnRunner's token rules, then the environment's step), the engine replaced by scripted turns: episode i's model
    turns are `turns[i]`."""
    from verl.envs import load_environment
    from verl.workers.rollout.multi_turn import ChatContinuation, Episode, TurnRunner, apply_step

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    runner = TurnRunner(
        budget=256,
        max_turns=max_turns,
        eos_token_ids={eos},
        continuation=ChatContinuation(tokenizer),
        tokenizer=tokenizer,
        with_logprobs=False,
    )
    env = load_environment(f"{CALCULATOR}:Multiplier")
    all_episodes = [Episode(prompt_input={"prompt_token_ids": [0]}, state=env.reset({}), seed=None) for _ in turns]
    for episode, script in zip(all_episodes, turns):
        while not episode.done:
            ids = tokenizer.encode(script[episode.turns], add_special_tokens=False) + [eos]
            turn_end = runner.add_model_tokens(episode, ids, None, runner.turn_limit(episode))
            if turn_end is None:
                break
            apply_step(runner, episode, env.step(episode.state, episode.last_turn), turn_end)
    return all_episodes


def episode_batch(tokenizer, question: str, episodes, rewards: list[float], media=None) -> DataProto:
    """A rollout batch of one prompt's multi-turn episodes, with the columns the rollout adds (episode_columns)."""
    from verl.workers.rollout.multi_turn import episode_columns

    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer.encode(text, add_special_tokens=False)
    width = max(len(e.ids) for e in episodes)
    pad = tokenizer.pad_token_id
    responses = torch.tensor([e.ids + [pad] * (width - len(e.ids)) for e in episodes])
    mask = torch.tensor([e.loss_mask + [0] * (width - len(e.ids)) for e in episodes])
    scores = torch.zeros(responses.shape)
    for row, (e, reward) in enumerate(zip(episodes, rewards)):
        scores[row, len(e.ids) - 1] = reward
    n = len(episodes)
    non_tensors = {
        "uid": np.array(["0-0"] * n, dtype=object),
        "ground_truth": np.array(["42"] * n, dtype=object),
        "prompt_content": np.array([question] * n, dtype=object),
        "reward/overall": np.array(rewards, dtype=object),
        **episode_columns(episodes),
    }
    if media is not None:
        non_tensors["multi_modal_data"] = to_object_array(media)
    tensors = {
        "prompts": torch.tensor([prompt_ids] * n),
        "responses": responses,
        "response_mask": mask,
        "token_level_scores": scores,
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_dump_keeps_the_turns_of_multi_turn_episodes(tokenizer, tmp_path):
    """Tool-use episodes: each record holds the conversation (roles, the calls of each model turn, the tool results,
    the result the episode ended before showing marked cut) and the episode's counts; `response` is as before."""
    turns = [
        [call("multiply", a=6, b=7), "It is 42."],
        ["<tool_call>{oops}</tool_call>", call("multiply", a=7, b=6)],  # a malformed call, then a call left unanswered
    ]
    episodes = tool_episodes(tokenizer, turns)
    batch = episode_batch(tokenizer, "What is 6 x 7?", episodes, [1.0, 0.0])
    records = [json.loads(line) for line in open(dump_rollouts(batch, 2, str(tmp_path), tokenizer))]
    solved, cut = records
    assert solved["response"] == turns[0][0] + turns[0][1] and solved["prompt"].endswith("What is 6 x 7?\nassistant\n")
    assert [m["role"] for m in solved["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert solved["messages"][0] == {"role": "user", "content": "What is 6 x 7?"}
    assert solved["messages"][1] == {
        "role": "assistant",
        "content": turns[0][0],
        "tool_calls": [{"name": "multiply", "arguments": {"a": 6, "b": 7}}],
    }
    assert solved["messages"][2] == {"role": "tool", "content": "42"}
    assert solved["messages"][3] == {"role": "assistant", "content": "It is 42."}
    assert solved["env"] == {
        "turns": 2.0,
        "tool_calls": 1.0,
        "tool_errors": 0.0,
        "cut_tool_messages": 0.0,
        "truncated": 0.0,
    }
    assert [m["role"] for m in cut["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert "error" in cut["messages"][1]["tool_calls"][0] and cut["messages"][2]["content"].startswith("Error: ")
    assert cut["messages"][4] == {"role": "tool", "content": "42", "cut": True}  # max_turns ended the episode
    assert cut["env"]["tool_errors"] == 1.0 and cut["env"]["cut_tool_messages"] == 1.0
    assert cut["reward"] == 0.0 and cut["scores"] == {"overall": 0.0} and cut["images"] == []


def test_dump_names_the_images_of_each_turn(tokenizer, tmp_path):
    """A VL episode whose environment answered with a picture: the prompt's image on the first message, the
    environment's on the message that showed it (the same files as the record's images)."""
    from verl.workers.rollout.multi_turn import Episode, record_messages

    red, blue = Image.new("RGB", (4, 4), (255, 0, 0)), Image.new("RGB", (4, 4), (0, 0, 255))
    episode = Episode(
        prompt_input={"prompt_token_ids": [0], "multi_modal_data": {"image": [red]}}, state={}, seed=None
    )
    episode.ids = tokenizer.encode("red", add_special_tokens=False)
    episode.loss_mask = [1] * len(episode.ids)
    episode.messages.append({"role": "assistant", "content": "red"})
    shown = [{"role": "user", "content": [{"type": "text", "text": "And this?"}, {"type": "image", "image": blue}]}]
    record_messages(episode, shown, cut=False)  # as add_environment_turn does, then the image joins the episode's
    episode.images.append(blue)
    episode.messages.append({"role": "assistant", "content": "blue"})
    record_messages(episode, [{"role": "user", "content": [{"type": "image", "image": red}]}], cut=True)
    batch = episode_batch(
        tokenizer, "<image>Which colour?", [episode], [1.0], media=[{"images": [red, blue], "videos": []}]
    )
    (record,) = [json.loads(line) for line in open(dump_rollouts(batch, 5, str(tmp_path), tokenizer))]
    assert record["images"] == ["images/step_5/g0000_0.png", "images/step_5/g0000_1.png"]
    first, _, answer, _, late = record["messages"]
    assert first == {"role": "user", "content": "<image>Which colour?", "images": ["images/step_5/g0000_0.png"]}
    assert answer == {"role": "user", "content": "And this?", "images": ["images/step_5/g0000_1.png"]}
    assert late == {"role": "user", "content": "", "cut": True}  # never shown: no image file
    with Image.open(tmp_path / "images" / "step_5" / "g0000_1.png") as image:
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
    assert viewer.main([str(tmp_path / "episodes.jsonl")]) == 2  # evaluate --output that never ran
    assert "episodes.jsonl' does not exist" in capsys.readouterr().err
    sample_run(tokenizer, str(tmp_path), steps=2, prompts=2, n=2)
    os.remove(tmp_path / "images" / "step_2" / "g0001_0.png")
    assert viewer.main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "image 'images/step_2/g0001_0.png' is missing" in captured.err
    assert "8 responses over 2 steps, 3 images" in captured.out
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page) and "<link" not in page  # nothing to fetch
    assert page.count("</script>") == 2  # the embedded data cannot close its script element
    # a line that is JSON but no record, a file that is not UTF-8, a page that cannot be written: one line each
    bad = tmp_path / "bad"
    bad.mkdir()
    for content, message in (
        (b"[1, 2]\n", "line 1 is no rollout record: a JSON list, not an object."),
        (b'{"step": [1]}\n', "line 1 is no rollout record: its step is [1], not an integer."),
        (b'{"messages": ["hi"]}\n', "line 1 is no rollout record: its messages are not a list of objects."),
        (b'{"images": 5}\n', "line 1 is no rollout record: its images are 5, not a list of paths."),  # a TypeError
        (b'{"messages": [{"images": [3]}]}\n', "line 1 is no rollout record: its images are [3], not a list of"),
        # another file's lines (a dataset): a page of empty responses, exit 0
        (
            b'{"id": 1, "text": "x"}\n',
            "line 1 is no rollout record: it has none of prompt, response, messages (its keys: id",
        ),
        ('{"response": "r\xe9"}\n'.encode("latin-1"), "is not UTF-8 text (invalid continuation byte at byte 15)."),
    ):
        (bad / "step_1.jsonl").write_bytes(content)
        assert viewer.main([str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rollout_viewer: '{bad / 'step_1.jsonl'}'") and message in err, err
    (bad / "step_1.jsonl").write_bytes(b"\n")  # an empty step file was a page of "step undefined", exit 0
    assert viewer.main([str(bad)]) == 2 and "holds no records (its step files are empty)" in capsys.readouterr().err
    (bad / "step_1.jsonl").write_bytes(b'{"response": "r"}\n')
    assert viewer.main([str(bad), "-o", str(tmp_path / "missing" / "page.html")]) == 1
    assert f"cannot write {tmp_path / 'missing' / 'page.html'}: No such file" in capsys.readouterr().err
    # the page over a records file it reads (-o naming one, or a records file named *.html): the records were lost
    records = bad / "episodes.html"
    records.write_bytes(b'{"response": "r"}\n')
    for argv in ([str(bad), "-o", str(bad / "step_1.jsonl")], [str(records)]):
        assert viewer.main(argv) == 2 and "is a records file it reads; choose another" in capsys.readouterr().err
    assert (bad / "step_1.jsonl").read_bytes() == records.read_bytes() == b'{"response": "r"}\n'


def test_a_new_or_resumed_run_sets_the_later_dumps_of_an_earlier_run_aside(tokenizer, tmp_path, caplog):
    """A run started over (or resumed from an earlier step) in a folder of dumps left the earlier run's later steps
    there: the viewer showed them as this run's."""
    from verl.data.rollout_dump import set_aside_later_rollouts

    sample_run(tokenizer, str(tmp_path), steps=3, prompts=2, n=2)
    with caplog.at_level(logging.WARNING):
        folder = set_aside_later_rollouts(str(tmp_path), 1)  # resumed from global_step_1
    assert sorted(os.listdir(tmp_path / "images")) == ["step_1"]
    assert sorted(glob.glob(str(tmp_path / "step_*.jsonl"))) == [str(tmp_path / "step_1.jsonl")]
    assert sorted(os.listdir(folder)) == ["images", "step_2.jsonl", "step_3.jsonl"]
    assert sorted(os.listdir(os.path.join(folder, "images"))) == ["step_2", "step_3"] and folder in caplog.text
    assert set_aside_later_rollouts(str(tmp_path), 1) is None  # nothing later left
    set_aside_later_rollouts(str(tmp_path), 0)  # a new run
    assert not glob.glob(str(tmp_path / "step_*.jsonl"))
    assert load_viewer().main([str(tmp_path)]) == 2  # the earlier runs' dumps are not read as this run's


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


def multi_turn_run(tokenizer, rollout_dir: str) -> None:
    """Step 1: two calculator episodes (one solved with a tool, one with a malformed call and a cut result); step 2:
    a VL episode whose environment answered with a picture."""
    from verl.workers.rollout.multi_turn import Episode, record_messages

    turns = [[call("multiply", a=6, b=7), "It is 42."], ["<tool_call>{oops}</tool_call>", call("multiply", a=7, b=6)]]
    dump_rollouts(
        episode_batch(tokenizer, "What is 6 x 7?", tool_episodes(tokenizer, turns), [1.0, 0.0]),
        1,
        rollout_dir,
        tokenizer,
    )
    red, blue = squares_picture(1, seed=1), squares_picture(2, seed=2)
    episode = Episode(
        prompt_input={"prompt_token_ids": [0], "multi_modal_data": {"image": [red]}}, state={}, seed=None
    )
    episode.ids = tokenizer.encode("one", add_special_tokens=False)
    episode.loss_mask = [1] * len(episode.ids)
    episode.messages.append({"role": "assistant", "content": "one"})
    record_messages(
        episode,
        [{"role": "user", "content": [{"type": "text", "text": "And now?"}, {"type": "image", "image": blue}]}],
        cut=False,
    )
    episode.images.append(blue)
    episode.messages.append({"role": "assistant", "content": "two"})
    episode.turns = 2
    media = [{"images": [red, blue], "videos": []}]
    dump_rollouts(
        episode_batch(tokenizer, "How many squares?", [episode], [1.0], media=media), 2, rollout_dir, tokenizer
    )


def test_viewer_embeds_the_turns_and_opens_a_records_file(tokenizer, tmp_path, capsys):
    multi_turn_run(tokenizer, str(tmp_path))
    viewer = load_viewer()
    assert viewer.main([str(tmp_path)]) == 0
    assert "3 responses over 2 steps, 2 images" in capsys.readouterr().out
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="rollout-data">(.*?)</script>', page, re.DOTALL).group(1))
    assert [m["role"] for m in data["records"][0]["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["records"][0]["messages"][1]["tool_calls"] == [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]
    assert data["records"][2]["messages"][2]["images"] == ["images/step_2/g0000_1.png"]
    assert set(data["images"]) == {"images/step_2/g0000_0.png", "images/step_2/g0000_1.png"}
    # one records file, as `python -m verl.envs.evaluate --output` writes it (no step): step 0, images beside it
    records = [json.loads(line) for line in open(tmp_path / "step_2.jsonl")]
    (tmp_path / "episodes.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "step"}) + "\n" for r in records)
    )
    assert viewer.main([str(tmp_path / "episodes.jsonl")]) == 0
    assert "1 responses over 1 steps, 2 images" in capsys.readouterr().out
    data = json.loads(
        re.search(r'id="rollout-data">(.*?)</script>', (tmp_path / "episodes.html").read_text(), re.DOTALL).group(1)
    )
    assert data["records"][0]["step"] == 0 and len(data["images"]) == 2


def test_viewer_shows_multi_turn_episodes_as_conversations(tokenizer, tmp_path):
    from selenium.webdriver.common.by import By

    multi_turn_run(tokenizer, str(tmp_path / "rollouts"))
    output = tmp_path / "viewer.html"
    assert load_viewer().main([str(tmp_path / "rollouts"), "-o", str(output)]) == 0
    driver = chromium_driver()
    try:
        driver.get(output.as_uri())
        css = lambda selector: driver.find_elements(By.CSS_SELECTOR, selector)  # noqa: E731
        solved, cut = css(".response")

        def roles(response) -> list[str]:
            return [t.get_attribute("data-role") for t in response.find_elements(By.CSS_SELECTOR, ".turn")]

        assert roles(solved) == ["assistant", "tool", "assistant"]  # the prompt is beside them, not repeated
        assert roles(cut) == ["assistant", "tool", "assistant", "tool"]
        calls = solved.find_elements(By.CSS_SELECTOR, ".tool-call")
        assert [c.find_element(By.CSS_SELECTOR, ".tool-name").text for c in calls] == ["multiply"]
        assert json.loads(calls[0].find_element(By.CSS_SELECTOR, ".tool-arguments").text) == {"a": 6, "b": 7}
        assert solved.find_elements(By.CSS_SELECTOR, ".turn-tool .turn-text")[0].text == "42"
        assert "malformed tool call" in cut.find_element(By.CSS_SELECTOR, ".tool-call-error").text
        last = cut.find_elements(By.CSS_SELECTOR, ".turn")[-1]
        assert "cut" in last.get_attribute("class") and "not shown to the model" in last.text
        assert "turns 2" in cut.find_element(By.CSS_SELECTOR, ".env-counts").text
        assert "cut tool results 1" in cut.find_element(By.CSS_SELECTOR, ".env-counts").text
        assert "What is 6 x 7?" in css(".group .prompt")[0].text
        driver.find_element(By.ID, "text-filter").send_keys("It is 42")  # the filter reads every turn
        assert len(css(".response")) == 1
        driver.find_element(By.ID, "text-filter").clear()
        driver.execute_script("document.getElementById('text-filter').dispatchEvent(new Event('input'))")

        driver.find_element(
            By.ID, "next-step"
        ).click()  # the VL episode: the prompt's picture beside, the turn's in it
        assert len(css(".group-side .prompt-image")) == 1
        (turn,) = [t for t in css(".turn") if t.get_attribute("data-role") == "user"]
        assert "And now?" in turn.text and len(turn.find_elements(By.CSS_SELECTOR, "img.prompt-image")) == 1
        assert driver.execute_script(
            "return [...document.querySelectorAll('.turn img')].every(i => i.complete && i.naturalWidth === 56)"
        )
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()
