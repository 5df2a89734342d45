# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""How `verl.envs.evaluate` puts images into the messages it sends (a row's images at the prompt's markers, image
parts as OpenAI image_url parts with PNG data URLs), and how it scores episodes and records them (--reward, --rubric,
--output), against a scripted endpoint."""

import base64
import io
import json
import os
import re
import sys
import types

import pytest
from PIL import Image

from verl.envs.evaluate import _row_images, prompt_message, to_openai_messages


def _picture(colour):
    return Image.new("RGB", (8, 6), colour)


def test_a_rows_images_go_at_the_markers_or_first():
    red, blue = _picture((255, 0, 0)), _picture((0, 0, 255))
    assert prompt_message("Plain.", []) == {"role": "user", "content": "Plain."}
    marked = prompt_message("Left <image> right <image>", [red, blue])["content"]
    assert [part["type"] for part in marked] == ["text", "image", "text", "image"]
    assert marked[1]["image"] is red and marked[3]["image"] is blue and marked[2]["text"] == " right "
    first = prompt_message("Which is bigger?", [red, blue])["content"]
    assert [part["type"] for part in first] == ["image", "image", "text"] and first[2]["text"] == "Which is bigger?"
    with pytest.raises(ValueError, match="1 <image> markers but the row has 2 images"):
        prompt_message("Only <image> one", [red, blue])


def test_image_parts_become_png_data_urls_once_per_image():
    red = _picture((255, 0, 0))
    messages = [
        {"role": "user", "content": [{"type": "image", "image": red}, {"type": "text", "text": "And?"}]},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": [{"type": "image", "image": red}]},
    ]
    cache = {}
    wire = to_openai_messages(messages, cache)
    url = wire[0]["content"][0]["image_url"]["url"]
    assert wire[0]["content"][0]["type"] == "image_url" and wire[0]["content"][1] == {"type": "text", "text": "And?"}
    assert wire[1] == messages[1] and wire[2]["content"][0]["image_url"]["url"] is url and len(cache) == 1
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (8, 6) and decoded.convert("RGB").getpixel((3, 3)) == (255, 0, 0)  # PNG: lossless
    assert messages[0]["content"][0]["image"] is red  # the conversation itself keeps the PIL image
    with pytest.raises(TypeError, match="must hold a PIL image, got str"):
        to_openai_messages([{"role": "user", "content": [{"type": "image", "image": "red.png"}]}])


def test_row_images_are_read_relative_to_the_image_folder(tmp_path, monkeypatch):
    _picture((0, 255, 0)).save(tmp_path / "green.png")
    (image,) = _row_images(["green.png"], str(tmp_path), 0)
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (0, 255, 0)
    assert _row_images(None, str(tmp_path), 0) == []
    with pytest.raises(
        ValueError, match=r"row 3: image 0 cannot be read: image file .*missing.png' does not exist \(--image-dir\)"
    ):
        _row_images("missing.png", str(tmp_path), 3)
    # a path training reads from the working directory (no data.image_dir) is named with the option that reads it
    (tmp_path / "work").mkdir()
    _picture((0, 0, 255)).save(tmp_path / "work" / "blue.png")
    monkeypatch.chdir(tmp_path / "work")
    with pytest.raises(ValueError, match=r"'blue.png' is a file in the working directory.*add --image-dir \.$"):
        _row_images(["blue.png"], str(tmp_path / "data"), 0)
    (blue,) = _row_images(["blue.png"], ".", 0)
    assert blue.getpixel((0, 0)) == (0, 0, 255)
    import base64

    url = "data:image/png;base64," + base64.b64encode((tmp_path / "green.png").read_bytes()).decode()
    (decoded,) = _row_images([url], str(tmp_path), 0)  # OpenAI's image_url layout, as training reads it
    assert decoded.getpixel((0, 0)) == (0, 255, 0)


# ---------------------------------------------------------------------------------------------------------------
# scoring and records, against a scripted endpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALCULATOR = os.path.join(REPO, "examples", "envs", "calculator.py")


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


class ScriptedClient:
    """An `openai.OpenAI` stand-in: the n-th reply of an episode is `script[prompt][n]`."""

    def __init__(self, script, **_):
        self.script, self.requests = script, []
        self.models = types.SimpleNamespace(list=lambda: types.SimpleNamespace(data=[types.SimpleNamespace(id="m")]))
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

    def create(self, model, messages, **kwargs):
        self.requests.append((messages, kwargs))
        turn = sum(message["role"] == "assistant" for message in messages)
        prompt = messages[0]["content"]
        if isinstance(prompt, list):  # a VL prompt: text and image_url parts
            prompt = "".join(part.get("text", "") for part in prompt)
        text, calls, finish, reasoning = self.script[prompt][turn], None, "stop", None
        if isinstance(text, dict):  # an endpoint with a reasoning parser: the block taken out of the text
            text, reasoning = text.get("call") or text["content"], text["reasoning"]
        if isinstance(text, tuple):  # (name, arguments): a call the endpoint's tool parser took out of the text
            function = types.SimpleNamespace(name=text[0], arguments=json.dumps(text[1]))
            calls = [types.SimpleNamespace(id="call_0", type="function", function=function)]
            text, finish = None, "tool_calls"
        message = types.SimpleNamespace(role="assistant", content=text, tool_calls=calls, reasoning=reasoning)
        usage = types.SimpleNamespace(completion_tokens=len((text or "x").split()), prompt_tokens=1)
        return types.SimpleNamespace(
            choices=[types.SimpleNamespace(message=message, finish_reason=finish)], usage=usage
        )


def run_evaluate(monkeypatch, tmp_path, capsys, script, rows, *options):
    import openai

    from verl.envs import evaluate

    clients = []
    monkeypatch.setattr(openai, "OpenAI", lambda **kw: clients.append(ScriptedClient(script, **kw)) or clients[-1])
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert evaluate.main(["--data", str(data), "--base-url", "http://unused/v1", *options]) == 0
    captured = capsys.readouterr()
    sys.stderr.write(captured.err)  # left for the test to read
    lines = [json.loads(line) for line in captured.out.splitlines()]
    return lines[:-1], lines[-1], clients[0]


def test_evaluate_scores_episodes_and_writes_their_conversations(monkeypatch, tmp_path, capsys):
    """The calculator's tool episodes, scored by its reward function: the printed means are those of the records,
    and each record holds the conversation with roles, the tool calls and their results."""
    script = {
        "6 x 7?": [_call("multiply", a=6, b=7), "It is 42."],
        "3 x 5?": [_call("divide", a=3, b=5), "16"],  # an unknown tool: an error, then a wrong answer
        # a structured call (an endpoint with a tool parser), then one whose result is never seen
        "2 x 4?": [("multiply", {"a": 2, "b": 4}), _call("multiply", a=4, b=2)],
    }
    rows = [{"prompt": p, "answer": a} for p, a in (("6 x 7?", "42"), ("3 x 5?", "15"), ("2 x 4?", "8"))]
    output = tmp_path / "out" / "episodes.jsonl"  # its folder is made
    episodes, summary, client = run_evaluate(
        monkeypatch,
        tmp_path,
        capsys,
        script,
        rows,
        *("--env", f"{CALCULATOR}:Multiplier", "--max-turns", "2", "--output", str(output)),
        *("--reward", f"{CALCULATOR}:compute_score"),
    )
    assert client.requests[0][1]["tools"][0]["function"]["name"] == "multiply"  # the tools went to the endpoint
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["row"] for r in records] == [e["row"] for e in episodes] == [0, 1, 2]
    assert [r["scores"]["accuracy"] for r in records] == [1.0, 0.0, 0.0]
    assert [r["reward"] for r in records] == [e["reward"] for e in episodes] == pytest.approx([1.1, 0.0, 0.1])
    mean = lambda key: sum(r["scores"][key] for r in records) / len(records)  # noqa: E731
    assert summary["accuracy"] == pytest.approx(mean("accuracy")) == pytest.approx(1 / 3)
    for key in ("overall", "accuracy", "tool_use"):
        assert summary[f"reward/{key}/mean"] == pytest.approx(mean(key))
    assert summary["tool_errors/mean"] == pytest.approx(sum(r["env"]["tool_errors"] for r in records) / 3)

    first, wrong, cut = records
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert first["messages"][0]["content"] == "6 x 7?" and first["prompt"] == "6 x 7?"
    assert first["messages"][1]["tool_calls"] == [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]
    assert first["messages"][2]["content"] == "42" and "tool_calls" not in first["messages"][3]
    assert first["env"] == {
        "turns": 2.0,
        "tool_calls": 1.0,
        "tool_errors": 0.0,
        "cut_tool_messages": 0.0,
        "truncated": 0.0,
    }
    assert (
        first["done"] is True
        and first["ground_truth"] == "42"
        and first["response_length"] == sum(len(t.split()) for t in script["6 x 7?"])
    )
    assert first["response"] == first["messages"][1]["content"] + "It is 42."  # the model's turns
    assert "no tool named 'divide'" in wrong["messages"][2]["content"] and wrong["env"]["tool_errors"] == 1.0
    # --max-turns spent on a call: its result is kept, marked cut, and counted apart from the errors
    assert [m["role"] for m in cut["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert cut["messages"][-1] == {"role": "tool", "content": "8", "cut": True}
    assert cut["env"]["cut_tool_messages"] == 1.0 and cut["env"]["tool_errors"] == 0.0 and cut["done"] is False
    assert episodes[2]["cut_tool_messages"] == 1 and summary["cut_tool_messages/mean"] == pytest.approx(1 / 3)
    assert cut["messages"][1]["tool_calls"] == [{"name": "multiply", "arguments": {"a": 2, "b": 4}}]
    assert cut["messages"][2] == {"role": "tool", "content": "8"}  # the structured call ran
    # the endpoint's parsed call goes back as it came (its template renders it in the model's own format), its result
    # names it; a call the endpoint left in the text stays there
    resent = client.requests[-1][0]
    call = {"id": "call_0", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 2, "b": 4}'}}
    assert resent[1:] == [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "8", "tool_call_id": "call_0"},
    ]
    first_resent = next(
        messages for messages, _ in client.requests if messages[0]["content"] == "6 x 7?" and len(messages) > 1
    )
    assert first_resent[1:] == [
        {"role": "assistant", "content": _call("multiply", a=6, b=7)},
        {"role": "tool", "content": "42"},
    ]


def test_a_reward_functions_extra_info_holds_what_training_gives_it(monkeypatch, tmp_path, capsys):
    """The row's other columns and the episode's figures; its prompt and answer columns come as `prompt` and
    `ground_truth` only, as the trainer passes them."""
    (tmp_path / "keys.py").write_text(
        "def keys(sample):\n"
        "    extra = set(sample['extra_info'])\n"
        "    episode = {'last_turn', 'episode_messages', 'env_turns'} <= extra\n"
        "    leaked = bool(extra & {'question', 'solution', 'ground_truth'})\n"
        "    return {'overall': 1.0, 'source': 'data_source' in extra, 'episode': episode, 'leaked': leaked}\n"
    )
    rows = [{"question": "6 x 7?", "solution": "42", "data_source": "math"}]
    output = tmp_path / "episodes.jsonl"
    run_evaluate(
        monkeypatch,
        tmp_path,
        capsys,
        {"6 x 7?": ["It is 42."]},
        rows,
        *("--env", f"{CALCULATOR}:Multiplier", "--prompt-key", "question", "--answer-key", "solution"),
        *("--reward", f"{tmp_path / 'keys.py'}:keys", "--output", str(output)),
    )
    (record,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert record["scores"] == {"overall": 1.0, "source": 1.0, "episode": 1.0, "leaked": 0.0}
    assert record["prompt"] == "6 x 7?" and record["ground_truth"] == "42"


WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
ADD = {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}


def test_without_an_environment_one_turn_is_scored_with_the_rows_tools(monkeypatch, tmp_path, capsys):
    """Single-turn function calling as training runs it (no --env): each request carries its row's tools (a list, or
    a JSON string of one, as datasets store them), the reply is one turn, and the tool_call reward scores its calls
    against the row's expected ones; a tool environment with a tools column is refused, as in training."""
    script = {
        "Weather in Paris?": [("get_weather", {"city": "Paris"})],  # a call the endpoint's parser took out
        "Add 2 and 3.": [_call("add", a=2, b=4)],  # written in the text, with a wrong argument
        "Hello.": ["Hi!"],
    }
    rows = [
        {
            "prompt": "Weather in Paris?",
            "tools": [WEATHER],
            "answer": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
        },
        {
            "prompt": "Add 2 and 3.",
            "tools": json.dumps([ADD]),
            "answer": json.dumps([{"name": "add", "arguments": {"a": 2, "b": 3}}]),
        },
        {"prompt": "Hello.", "tools": None, "answer": []},
    ]
    reward = os.path.join(REPO, "examples", "reward_function", "tool_call.py") + ":compute_score"
    episodes, summary, client = run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--reward", reward)
    assert [kwargs.get("tools") for _, kwargs in client.requests] == [[WEATHER], [ADD], None]
    assert [len(messages) for messages, _ in client.requests] == [1, 1, 1]  # one turn each
    assert [e["scores"]["accuracy"] for e in episodes] == [1.0, 0.0, 1.0]
    assert [e["scores"]["format"] for e in episodes] == [1.0, 1.0, 1.0]
    assert summary["accuracy"] == pytest.approx(2 / 3)
    from tests.repo_files import load_repo_file

    tool_call = load_repo_file("examples/reward_function/tool_call.py", "tool_call_reward")
    sample = {"response": "Hi.", "ground_truth": "[]", "prompt": "", "extra_info": {"tools": None}}
    assert tool_call.compute_score(sample)["format"] == 1.0  # a row without tools, answered without a call
    with pytest.raises(KeyError, match="the row has no column 'functions' \\(this function's tools_key\\)"):
        tool_call.compute_score(sample, tools_key="functions")  # was format 0 for every response, silently
    _, _, client = run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--tools-key", "none")
    assert all("tools" not in kwargs for _, kwargs in client.requests)
    with pytest.raises(SystemExit, match="--env .* sends its own; pass --tools-key none"):
        run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--env", f"{CALCULATOR}:Multiplier")


def test_prompts_are_formatted_and_rendered_as_training_renders_them(monkeypatch, tmp_path, capsys):
    """--format-prompt renders each prompt as data.format_prompt does (the request carries it); --tokenizer's chat
    template renders the prompt a reward function gets, so a generation prompt that opens <think> (R1 distills,
    Qwen3.5 thinking) counts as the response's opening, as in training; without it the row's text is all there is."""
    from verl.models.tiny_models import CHAT_TEMPLATE, build_tokenizer

    tokenizer = build_tokenizer(kind="qwen3")
    opening = "<|im_start|>assistant\n{% endif %}"
    tokenizer.chat_template = CHAT_TEMPLATE.replace(opening, "<|im_start|>assistant\n<think>\n{% endif %}")
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "format.jinja").write_text("{{ content }} ({{ level }}) Put the answer in \\boxed{}.\n")
    formatted = "6 x 7? (easy) Put the answer in \\boxed{}."
    script = {formatted: ["I multiply.</think>It is \\boxed{42}."]}
    rows = [{"prompt": "6 x 7?", "answer": "42", "level": "easy"}]
    options = (
        *("--env", f"{CALCULATOR}:Multiplier", "--format-prompt", str(tmp_path / "format.jinja")),
        *("--reward", os.path.join(REPO, "examples", "reward_function", "math.py") + ":compute_score"),
    )
    scores = {}
    for rendered in (False, True):
        output = tmp_path / f"episodes{rendered}.jsonl"
        extra = ("--tokenizer", str(tmp_path / "tokenizer")) if rendered else ()
        _, _, client = run_evaluate(
            monkeypatch, tmp_path, capsys, script, rows, *options, *extra, "--output", str(output)
        )
        assert client.requests[0][0] == [{"role": "user", "content": formatted}]
        assert ("reward function gets the row's prompt text" in capsys.readouterr().err) != rendered
        (record,) = [json.loads(line) for line in output.read_text().splitlines()]
        scores[rendered] = record["scores"]
        if rendered:  # the template's rendering: the tools, the formatted text, the opened reasoning block
            assert record["prompt"].endswith(
                f"<|im_start|>user\n{formatted}<|im_end|>\n<|im_start|>assistant\n<think>\n"
            )
            assert '"name": "multiply"' in record["prompt"]
        else:
            assert record["prompt"] == formatted
    assert scores[True]["format"] == 1.0 and scores[False]["format"] == 0.0
    assert scores[True]["accuracy"] == scores[False]["accuracy"] == 1.0
    # an endpoint whose reasoning parser took the block out of the text (vLLM's --reasoning-parser): put back, with
    # its opening where the generation prompt did not write it, so the format scores as in training either way
    script = {formatted: [{"reasoning": "I multiply.", "content": "It is \\boxed{42}."}]}
    for rendered in (False, True):
        output = tmp_path / f"separated{rendered}.jsonl"
        extra = ("--tokenizer", str(tmp_path / "tokenizer")) if rendered else ()
        run_evaluate(monkeypatch, tmp_path, capsys, script, rows, *options, *extra, "--output", str(output))
        (record,) = [json.loads(line) for line in output.read_text().splitlines()]
        assert record["scores"]["format"] == record["scores"]["accuracy"] == 1.0, rendered
        opening = "" if rendered else "<think>"
        assert f"{opening}I multiply.</think>" in json.dumps(record["messages"][-1]), record["messages"][-1]
    # the next request carries a turn's reasoning back, for templates that show it (Qwen3's, after the last query)
    call = {"reasoning": "I call it.", "call": ("multiply", {"a": 6, "b": 7})}
    script = {formatted: [call, {"reasoning": "Done.", "content": "It is \\boxed{42}."}]}
    _, _, client = run_evaluate(monkeypatch, tmp_path, capsys, script, rows, *options)
    assert client.requests[1][0][1]["reasoning"] == "I call it." and client.requests[1][0][1]["tool_calls"]
    with pytest.raises(SystemExit, match="row 0: --format-prompt failed on this row: 'level' is undefined"):
        run_evaluate(monkeypatch, tmp_path, capsys, script, [{"prompt": "6 x 7?", "answer": "42"}], *options)


PICTURE_ENV = """
from PIL import Image

from verl.envs import MultiTurnEnv


class ShowPicture(MultiTurnEnv):
    def env_response(self, state, response):
        if "done" in response:
            return [], True
        picture = Image.new("RGB", (4, 4), (0, 0, 255))
        return [{"role": "user", "content": [{"type": "text", "text": "And this?"}, {"type": "image", "image": picture}]}], False

    def episode_info(self, state):
        return {"pictures": 1.0}
"""


def test_evaluate_records_the_images_of_every_turn(monkeypatch, tmp_path, capsys):
    """A VL episode: the row's picture and the environment's are written next to the records, named by the
    messages that showed them; a rubric scores it, and without an accuracy key the accuracy is overall > 0."""
    (tmp_path / "env.py").write_text(PICTURE_ENV)
    (tmp_path / "rewards.py").write_text(
        "def said_blue(sample):\n    return {'overall': float('blue' in sample['extra_info']['last_turn'])}\n"
        "def turns(sample):\n    return {'overall': sample['extra_info']['env_turns']}\n"
    )
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "red.png")
    script = {"What colour?": ["red", "blue, done"], "Again?": ["green, done"]}
    rows = [{"prompt": "What colour?", "answer": "red", "images": ["red.png"]}, {"prompt": "Again?", "answer": "x"}]
    rubric = {
        "colour": {"function": f"{tmp_path / 'rewards.py'}:said_blue"},
        "length": {"function": f"{tmp_path / 'rewards.py'}:turns", "weight": 0.5},
    }
    output = tmp_path / "episodes.jsonl"
    _, summary, _ = run_evaluate(
        monkeypatch,
        tmp_path,
        capsys,
        script,
        rows,
        *("--env", f"{tmp_path / 'env.py'}:ShowPicture", "--output", str(output), "--rubric", json.dumps(rubric)),
    )
    first, second = [json.loads(line) for line in output.read_text().splitlines()]
    tag = re.fullmatch(r"images/episodes/([0-9a-f]{6}_)e0000_0\.png", first["images"][0]).group(1)  # the run's
    assert first["images"] == [f"images/episodes/{tag}e0000_0.png", f"images/episodes/{tag}e0000_1.png"]
    assert first["messages"][0]["images"] == [f"images/episodes/{tag}e0000_0.png"]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user", "assistant"]
    shown = {"role": "user", "content": "And this?", "images": [f"images/episodes/{tag}e0000_1.png"]}
    assert first["messages"][2] == shown
    with Image.open(tmp_path / "images" / "episodes" / f"{tag}e0000_1.png") as image:
        assert image.convert("RGB").getpixel((1, 1)) == (0, 0, 255)
    assert second["images"] == [] and "images" not in second["messages"][0]
    assert first["scores"] == {"overall": 2.0, "colour/overall": 1.0, "length/overall": 2.0}
    assert second["scores"] == {"overall": 0.5, "colour/overall": 0.0, "length/overall": 1.0}
    assert summary["accuracy"] == 1.0  # no accuracy key: the share of episodes with overall > 0
    assert summary["reward/overall/mean"] == pytest.approx(1.25) and summary["pictures/mean"] == 1.0


def test_a_client_environments_request_keeps_its_shorter_limit_and_its_extra_body():
    """As training treats a ChatClientEnv's requests: the run's temperature, a request's own token limit only
    shortening the run's --max-tokens (max_completion_tokens first, as vLLM reads it), and the run's template
    variables added to the request's extra_body rather than replacing it."""
    from verl.envs.evaluate import client_request

    run = {"max_tokens": 256, "temperature": 0.0, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    sent = client_request({"messages": [], "max_tokens": 16, "temperature": 0.9, "extra_body": {"top_k": 5}}, run)
    assert sent["max_tokens"] == 16 and sent["temperature"] == 0.0
    assert sent["extra_body"] == {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}
    longer = client_request({"messages": [], "max_completion_tokens": 999, "max_tokens": 8}, run)
    assert longer["max_tokens"] == 256 and "max_completion_tokens" not in longer
    assert client_request({"messages": []}, {"max_tokens": 64, "temperature": 1.0}) == {
        "messages": [],
        "max_tokens": 64,
        "temperature": 1.0,
    }


BROKEN_ENV = """
from verl.envs import MultiTurnEnv


class Broken(MultiTurnEnv):
    def __init__(self, wrong="raise"):
        self.wrong = wrong

    def step(self, state, response):
        if self.wrong == "raise":
            return state["no_such_key"]
        if self.wrong == "hang":
            import time

            time.sleep(3600)  # a tool that never returns
        return [], True  # a tuple for an EnvStep
"""


def test_an_environment_that_fails_stops_evaluate_naming_it_and_the_row(monkeypatch, tmp_path, capsys):
    """As in training: its own exception, or a step that returns the wrong thing, names the environment, the hook
    and the turn (a raw traceback from inside the episode before)."""
    (tmp_path / "broken.py").write_text(BROKEN_ENV)
    rows = [{"prompt": "6 x 7?", "answer": "42"}]
    for wrong, message in (
        ("raise", r"step raised KeyError after model turn 1: 'no_such_key'"),
        ("tuple", r"step raised TypeError after model turn 1: step returned tuple \(\[\], True\); return an EnvStep"),
        (
            "hang",
            r"the step after model turn 1 did not finish within --env-step-timeout 0.5 s; where it was:\n[\s\S]*broken.py\", line \d+, in step",
        ),
    ):
        spec = f"{tmp_path / 'broken.py'}:Broken"
        pattern = r"evaluate: row 0: Broken \(--env\): " + message
        with pytest.raises(SystemExit, match=pattern):
            run_evaluate(
                monkeypatch,
                tmp_path,
                capsys,
                {"6 x 7?": ["42"]},
                rows,
                "--env",
                spec,
                "--env-kwargs",
                json.dumps({"wrong": wrong}),
                "--env-step-timeout",
                "0.5",
            )


BROKEN_CLIENT_ENV = """
from verl.envs import ChatClientEnv


class BrokenClient(ChatClientEnv):
    async def rollout(self, client, model, messages, state):
        reply = await client.chat.completions.create(model=model, messages=messages)
        return state["no_such_key"] + reply.choices[0].message.content
"""


def test_a_client_environment_whose_rollout_raises_stops_evaluate_naming_it_and_the_row(monkeypatch, tmp_path, capsys):
    """A ChatClientEnv's `rollout` that raises (after its first reply) is one error naming the environment, the hook
    and the turn, as training says it (a raw traceback of the episode's event loop before)."""
    import openai

    (tmp_path / "broken_client.py").write_text(BROKEN_CLIENT_ENV)

    class AsyncScripted(ScriptedClient):  # the async client a ChatClientEnv's episode gets
        async def create(self, model, messages, **kwargs):
            return ScriptedClient.create(self, model, messages, **kwargs)

    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kw: AsyncScripted({"6 x 7?": ["42"]}, **kw))
    pattern = (
        r"^evaluate: row 0: BrokenClient \(--env\): rollout raised KeyError in the episode \(turn 2\): "
        r"'no_such_key'. Fix the environment; where it raised[\s\S]*broken_client.py\", line \d+, in rollout"
    )
    with pytest.raises(SystemExit, match=pattern):
        run_evaluate(
            monkeypatch,
            tmp_path,
            capsys,
            {"6 x 7?": ["42"]},
            [{"prompt": "6 x 7?", "answer": "42"}],
            "--env",
            f"{tmp_path / 'broken_client.py'}:BrokenClient",
            "--model",
            "m",
        )


REWARDS = """
def both(reward_input):
    correct = float(reward_input["response"] == reward_input["ground_truth"])
    return {"overall": correct + 0.1, "accuracy": correct}


def partial(reward_input):
    scores = both(reward_input)
    return scores if reward_input["ground_truth"] != "2" else {"overall": scores["overall"]}


def raising(reward_input):
    if reward_input["ground_truth"] == "2":
        raise ValueError("cannot grade this one")
    return both(reward_input)
"""


def test_scores_are_summarized_only_where_they_mean_what_they_say(monkeypatch, tmp_path, capsys):
    """A rubric with two accuracy parts printed `accuracy` as the share with overall > 0 (1.0 against part
    accuracies of 0.33); a reward that left a key out on one row was averaged over the others (training refuses
    it); a reward that raised on one row was a traceback."""
    (tmp_path / "rewards.py").write_text(REWARDS)
    script = {"a": ["1"], "b": ["0"], "c": ["0"]}
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}, {"prompt": "c", "answer": "3"}]
    both = f"{tmp_path / 'rewards.py'}:both"
    rubric = json.dumps({"one": {"function": both, "weight": 1.0}, "two": {"function": both, "weight": 1.0}})
    _, summary, _ = run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--rubric", rubric)
    assert summary["accuracy"] is None
    assert summary["reward/one/accuracy/mean"] == summary["reward/two/accuracy/mean"] == pytest.approx(1 / 3)
    _, summary, _ = run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--reward", both)
    assert summary["accuracy"] == pytest.approx(1 / 3)
    with pytest.raises(SystemExit, match=r"row 1: the reward returned the keys \['overall'\], but row 0 returned"):
        run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--reward", f"{tmp_path / 'rewards.py'}:partial")
    with pytest.raises(SystemExit, match=r"^evaluate: row 1: .*raised ValueError.*cannot grade this one"):
        run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--reward", f"{tmp_path / 'rewards.py'}:raising")


def test_a_reward_that_cannot_load_is_named_by_evaluates_flags(monkeypatch, tmp_path, capsys):
    """The errors named the trainer's worker.reward.reward_function(_kwargs) and "a reward actor on another node"."""
    (tmp_path / "rewards.py").write_text(REWARDS)
    rows = [{"prompt": "a", "answer": "1"}]
    missing = f"{tmp_path / 'nope.py'}:both"
    for extra, message in (
        (("--reward", missing), rf"^evaluate: --reward='{missing}': the file .* does not exist on [^(]*; give"),
        (("--reward", f"{tmp_path / 'rewards.py'}:absent"), r"^evaluate: --reward='.*': .* has no function 'absent'"),
        (
            ("--reward", f"{tmp_path / 'rewards.py'}:both", "--reward-kwargs", '{"x": 1}'),
            r"\(--reward-kwargs\) do not fit",
        ),
        (
            ("--rubric", json.dumps({"one": {"function": missing}})),
            r"^evaluate: --rubric.one.function='.* does not exist on [^(]*; give",
        ),
    ):
        with pytest.raises(SystemExit, match=message) as error:
            run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows, *extra)
        assert "worker.reward" not in str(error.value)


def test_inputs_are_checked_before_the_first_episode(monkeypatch, tmp_path, capsys):
    """A row with a missing image was found only when its turn came (after the rows before it ran); --output naming
    the --data file overwrote the dataset with the records."""
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b <image>", "answer": "2", "images": ["missing.png"]}]
    with pytest.raises(SystemExit, match=r"row 1: image 0 cannot be read"):
        run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows)
    assert capsys.readouterr().out == ""  # row 0's episode did not run (it prints a line)
    data = tmp_path / "rows.jsonl"
    with pytest.raises(SystemExit, match=r"--output .*rows.jsonl is the --data file: it would be overwritten"):
        run_evaluate(monkeypatch, tmp_path, capsys, {"a": ["1"]}, rows[:1], "--output", str(data))
    assert json.loads(data.read_text()) == rows[0]
    # the reward's (or the environment's) own .py file was replaced by the records, with exit status 0
    reward = tmp_path / "rewards.py"
    reward.write_text(REWARDS)
    with pytest.raises(SystemExit, match=r"--output .*rewards.py is the --reward file: it would be overwritten"):
        run_evaluate(
            monkeypatch,
            tmp_path,
            capsys,
            {"a": ["1"]},
            rows[:1],
            "--reward",
            f"{reward}:both",
            "--output",
            str(reward),
        )
    assert reward.read_text() == REWARDS


def test_a_run_that_fails_keeps_the_earlier_output(monkeypatch, tmp_path, capsys):
    """--output was emptied before the first episode: a run that then failed (a reward that raised) left an earlier
    run's records as an empty file. The records replace it once every row ran; the failed run's are in .partial."""
    (tmp_path / "rewards.py").write_text(REWARDS)
    script = {"a": ["1"], "b": ["0"], "c": ["0"]}
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}, {"prompt": "c", "answer": "3"}]
    output = tmp_path / "episodes.jsonl"
    run_evaluate(monkeypatch, tmp_path, capsys, script, rows, "--output", str(output))
    earlier = output.read_text()
    assert len(earlier.splitlines()) == 3 and not os.path.exists(f"{output}.partial")
    with pytest.raises(SystemExit, match=r"row 1: .*cannot grade this one"):
        run_evaluate(
            monkeypatch,
            tmp_path,
            capsys,
            script,
            rows,
            "--reward",
            f"{tmp_path / 'rewards.py'}:raising",
            "--output",
            str(output),
        )
    assert output.read_text() == earlier
    assert len(open(f"{output}.partial").read().splitlines()) == 1
    assert f"the 1 episode(s) before the error are in {output}.partial; --output {output} is as it was" in (
        capsys.readouterr().err
    )


def test_a_failed_run_keeps_the_earlier_runs_images_and_a_finished_one_replaces_them(monkeypatch, tmp_path, capsys):
    """The kept records of an earlier run showed the images a failed run wrote over theirs (the same names)."""
    (tmp_path / "env.py").write_text(PICTURE_ENV.replace("(0, 0, 255)", "COLOUR"))
    (tmp_path / "rewards.py").write_text(REWARDS)
    script = {"a": ["x", "1, done"], "b": ["y", "0, done"]}  # a picture each
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]
    options = ("--env", f"{tmp_path / 'env.py'}:ShowPicture", "--output", str(tmp_path / "episodes.jsonl"))
    folder = tmp_path / "images" / "episodes"

    def pictures(colour, *extra):
        (tmp_path / "env.py").write_text(PICTURE_ENV.replace("(0, 0, 255)", repr(colour)))
        run_evaluate(monkeypatch, tmp_path, capsys, script, rows, *options, *extra)
        records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
        return [path for record in records for path in record["images"]]

    def colour_of(path):
        with Image.open(tmp_path / path) as image:
            return image.convert("RGB").getpixel((0, 0))

    earlier = pictures((0, 0, 255))
    with pytest.raises(SystemExit, match="row 1: .*cannot grade this one"):  # after row 0's picture was written
        pictures((0, 255, 0), "--reward", f"{tmp_path / 'rewards.py'}:raising")
    assert [colour_of(path) for path in earlier] == [(0, 0, 255)] * 2  # the kept records' pictures
    assert len(os.listdir(folder)) == 3
    later = pictures((255, 0, 0))
    assert [colour_of(path) for path in later] == [(255, 0, 0)] * 2
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(path) for path in later)  # the others removed


def test_a_request_the_endpoint_never_answers_times_out(tmp_path):
    """The OpenAI client waits 600 s a try and tries three times: one stuck row held evaluate for half an hour."""
    import socket
    import subprocess
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # connections are accepted by the kernel and never answered
        data = tmp_path / "rows.jsonl"
        data.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
        command = [sys.executable, "-m", "verl.envs.evaluate", "--data", str(data), "--model", "m"]
        command += ["--base-url", f"http://127.0.0.1:{server.getsockname()[1]}/v1", "--timeout", "1"]
        start = time.monotonic()
        proc = subprocess.run([*command, "--max-retries", "0"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert time.monotonic() - start < 60
    assert proc.returncode == 1 and "evaluate: row 0: the endpoint --base-url" in proc.stderr, proc.stderr
    assert "timed out" in proc.stderr.lower(), proc.stderr


def test_a_hub_tokenizer_goes_offline_at_once_where_the_hub_cannot_be_reached(tmp_path):
    """--tokenizer Org/Model on a machine without the hub: huggingface_hub's retries with back-off before the error
    (as the trainer and the merger, evaluate goes offline at once, saying so)."""
    import socket
    import subprocess

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    command = [sys.executable, "-m", "verl.envs.evaluate", "--data", str(data), "--model", "m"]
    command += ["--base-url", f"http://127.0.0.1:{port}/v1", "--tokenizer", "Org/Model"]
    settings = ("HF_HUB_OFFLINE", "USE_MODELSCOPE_HUB")
    env = {k: v for k, v in os.environ.items() if k not in settings and "proxy" not in k.lower()}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 1 and "evaluate: --tokenizer Org/Model cannot be loaded" in proc.stderr, proc.stderr
    assert "Org/Model load from the local cache only" in proc.stderr and "Retrying" not in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# --response-length: training's shared budget, counted as the endpoint counts


class CountingEndpoint:
    """An endpoint whose tokens are words: a prompt's tokens are its messages' words, a reply is `words` words cut at
    the request's max_tokens (finish_reason "length" then)."""

    def __init__(self, words):
        self.words, self.asked = words, []

    def create(self, model, messages, max_tokens=None, **_):
        self.asked.append(max_tokens)
        words = ["w"] * self.words
        cut = max_tokens is not None and len(words) > max_tokens
        text = " ".join(words[:max_tokens] if cut else words)
        prompt_tokens = sum(len(str(message["content"]).split()) for message in messages)
        message = types.SimpleNamespace(role="assistant", content=text, tool_calls=None, reasoning=None)
        usage = types.SimpleNamespace(prompt_tokens=prompt_tokens, completion_tokens=len(text.split()))
        return types.SimpleNamespace(
            choices=[types.SimpleNamespace(message=message, finish_reason="length" if cut else "stop")], usage=usage
        )

    async def create_async(self, **request):
        return self.create(**request)


def _budget_episode(kind, budget, words, max_tokens=None, env_words=4, max_turns=5):
    """One episode whose environment answers every turn with `env_words` words, never done: (result, endpoint)."""
    from verl.envs import ChatClientEnv, MultiTurnEnv
    from verl.envs.evaluate import EpisodeSetup, run_client_episode, run_episode

    answer = {"role": "user", "content": " ".join(["e"] * env_words)}

    class Talk(MultiTurnEnv):
        def env_response(self, state, response):
            return [dict(answer)], False

    class ClientTalk(ChatClientEnv):
        async def rollout(self, client, model, messages, state):
            while True:
                reply = await client.chat.completions.create(model=model, messages=messages)
                messages = [*messages, {"role": "assistant", "content": reply.choices[0].message.content}, answer]

    endpoint = CountingEndpoint(words)
    sampling = {"temperature": 0.0, **({"max_tokens": max_tokens} if max_tokens else {})}
    setup = EpisodeSetup(
        row={}, prompt="p", images=[], model="m", max_turns=max_turns, sampling=sampling, response_length=budget
    )
    if kind == "step":
        client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=endpoint))
        return run_episode(Talk(), setup, client), endpoint
    completions = types.SimpleNamespace(create=endpoint.create_async)
    client = types.SimpleNamespace(chat=types.SimpleNamespace(completions=completions))
    return run_client_episode(ClientTalk(), setup, lambda: client), endpoint


@pytest.mark.parametrize("kind", ["step", "client"])
def test_the_response_budget_ends_episodes_as_training_does(kind):
    """--response-length counts the model's and the environment's tokens after the prompt against one budget, as
    training's response length: evaluate had only a limit per request, so episodes that training cuts short ran on
    (scored as solved where training's were truncated)."""
    # 3-token turns, 4-token answers, a budget of 10: 3 + 4 + 3, then the answer leaves no room (cut, truncated)
    result, endpoint = _budget_episode(kind, budget=10, words=3)
    assert result.counts["turns"] == 2 and result.counts["truncated"] and not result.counts["done"]
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert result.messages[-1]["cut"] and not any(m.get("cut") for m in result.messages[:-1])
    assert endpoint.asked == [10, 7] and result.completion_tokens == 6
    # 5-token turns, a budget of 12: the second turn has 3 tokens of room, not the 7 the first reply left; it is asked
    # again with 3, and the budget cutting it ends the episode (truncated, no further environment step)
    result, endpoint = _budget_episode(kind, budget=12, words=5)
    assert result.counts["turns"] == 2 and result.counts["truncated"]
    assert endpoint.asked == [12, 7, 3] and result.last_turn == "w w w"
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user", "assistant"]
    # --max-tokens cuts a turn below the room: the episode goes on (as max_tokens_per_turn), until max_turns
    result, endpoint = _budget_episode(kind, budget=100, words=5, max_tokens=2, max_turns=3)
    assert result.counts["turns"] == 3 and endpoint.asked == [2, 2, 2]
    # without a budget, as before: --max-tokens a turn, max_turns
    result, endpoint = _budget_episode(kind, budget=None, words=5, max_tokens=8, max_turns=3)
    assert result.counts["turns"] == 3 and not result.counts["truncated"] and endpoint.asked == [8, 8, 8]


def test_the_model_turns_tool_calls_take_trainings_form():
    """episode_messages' tool calls, as a TRL-style reward reads them (`c["function"]["name"]`): evaluate wrote
    {"name", "arguments": dict} for an endpoint's parsed calls (a KeyError in such a function) and none for calls
    left in the text, where training writes OpenAI's form read from the text with the environment's format."""
    from verl.envs.evaluate import model_message
    from verl.envs.tools import HERMES

    text = '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
    for message in (
        model_message(text, [], HERMES),  # an endpoint without a tool parser: the call is in the text
        model_message(text, [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]),  # one that parsed it
    ):
        (call,) = message["tool_calls"]
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"] == {"name": "multiply", "arguments": json.dumps({"a": 6, "b": 7})}
    assert "tool_calls" not in model_message("no calls", [], HERMES)


def test_a_local_tokenizer_folder_that_does_not_exist_is_named_as_such(tmp_path):
    """It was read as a hub id: "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"."""
    from verl.envs.evaluate import _prompt_renderer

    (tmp_path / "a_file").write_text("")
    for path, what in ((tmp_path / "missing", "does not exist"), (tmp_path / "a_file", "is a file, not a folder")):
        with pytest.raises(SystemExit, match=re.escape(f"evaluate: --tokenizer '{path}' {what}")):
            _prompt_renderer(str(path), True, {})
    assert _prompt_renderer(str(tmp_path / "missing"), False, {}) is None  # --model's folder: no renderer


def test_an_endpoint_that_answers_no_chat_completion_is_one_line(monkeypatch, tmp_path, capsys):
    """An endpoint that answered HTML, a JSON object without choices or an empty model list: a TypeError, IndexError
    or AttributeError from inside the episode."""
    import openai

    from verl.envs import evaluate

    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    argv = ["--data", str(tmp_path / "rows.jsonl"), "--base-url", "http://unused/v1"]
    for reply in ("<html>not found</html>", types.SimpleNamespace(choices=[]), types.SimpleNamespace(id="x")):
        client = ScriptedClient({})
        client.chat.completions.create = lambda reply=reply, **request: reply
        monkeypatch.setattr(openai, "OpenAI", lambda client=client, **kw: client)
        with pytest.raises(SystemExit, match=r"row 0: the endpoint .* did not answer with a chat completion \(the"):
            evaluate.main(argv)
    client = ScriptedClient({})
    client.models = types.SimpleNamespace(list=lambda: types.SimpleNamespace(data=[]))
    monkeypatch.setattr(openai, "OpenAI", lambda **kw: client)
    with pytest.raises(SystemExit, match=r"lists no models \(GET /models\); pass --model"):
        evaluate.main(argv)
